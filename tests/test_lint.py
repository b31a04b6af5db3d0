"""The linter CI runs: ruff, with the project's own rules (``.ruff.toml``), over every Python file of the checkout."""

import os
import subprocess
import sys

from conftest import missing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    try:
        import ruff  # noqa: F401 (only whether it is installed: it runs as a program)
    except ImportError as exc:
        missing("the linter", f"{exc} (pip install '.[dev]')")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_the_linter_fails_on_what_its_rules_name(tmp_path):
    """The rules are on: an unused import, an unsorted block and a bare blind except are each found."""
    try:
        import ruff  # noqa: F401 (as above)
    except ImportError as exc:
        missing("the linter", f"{exc} (pip install '.[dev]')")
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\ntry:\n    pass\nexcept Exception:\n    pass\n")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                        "--config", os.path.join(ROOT, ".ruff.toml"), str(bad)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and all(code in r.stdout for code in ("F401", "I001", "BLE001")), r.stdout
