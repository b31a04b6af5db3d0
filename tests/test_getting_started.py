"""The Getting-started page's commands, run as written, so that they cannot rot.

Every ``.. code-block:: bash`` of ``docs/getting-started/index.rst`` runs, in
page order, in one fresh folder with ``bash -e`` and this interpreter's
``gpumr`` and ``python`` first on the ``PATH``. The page asks the reader for
two folders of their own (``photos/`` and ``scan/``); the test makes them
from gpumr's sample frames and phantom. ``console`` and ``text`` blocks (``make
demo``, pip, sample output) are shown, not run.
"""

import os
import re
import subprocess
import sys

import pytest

PAGE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "getting-started", "index.rst")


def bash_blocks(text):
    """The bodies of the ``.. code-block:: bash`` directives in ``text``, dedented, in order."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if re.match(r"\.\. code-block:: bash\s*$", lines[i]):
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                body.append(lines[i])
                i += 1
            blocks.append("\n".join(line.strip() for line in body if line.strip()))
        else:
            i += 1
    return blocks


def test_page_has_the_steps():
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    blocks = bash_blocks(text)
    assert len(blocks) >= 5, blocks
    for command in ("make demo", "make test"):
        assert command in text
    script = "\n".join(blocks)
    for step in ("gpumr pack", "gpumr run faces", "--engine local", "gpumr faces render", "gpumr ct geometry",
                 "gpumr run backproject", "gpumr ct assemble"):
        assert step in script, step


@pytest.mark.slow
def test_getting_started_commands_run_as_written(tmp_path):
    with open(PAGE, encoding="utf-8") as f:
        blocks = bash_blocks(f.read())
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("GPUMR_SIMULATE_GPUS", None)

    def sh(script):
        r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"{script}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        return r

    # The reader's own photos and projections (40x40 detector, 48 angles, as the page's geometry says).
    sh("gpumr sample -n 3 photos/\n"
       "gpumr ct geometry -o fixture.json --angles 48 --detector 40 --pitch 1.2 --dso 128 --dsd 192 --voxels 32 --voxel-size 0.7\n"
       "gpumr ct phantom --geometry fixture.json -o fixture.seq\n"
       "gpumr unpack fixture.seq -d scan/\n"
       "rm -r fixture.json fixture.seq fixture.geometry.json .scan.gpumr")
    for block in blocks:  # (as written, nothing warns: the volume lies in the field of view)
        r = sh(block)
        assert "field of view" not in r.stderr, r.stderr

    import numpy as np
    assert sorted(os.listdir(tmp_path / "faces")) == ["_SUCCESS", "part-00000"] or \
        "part-00000" in os.listdir(tmp_path / "faces")
    lines = (tmp_path / "faces" / "part-00000").read_text().splitlines()
    assert len(lines) == 12 and all('"faces"' in line for line in lines)
    gpu_lines = (tmp_path / "faces-gpu" / "part-00000").read_text().splitlines()
    assert len(gpu_lines) == 12 and all('"gpu:0"' in line and '"simulated": true' in line for line in gpu_lines)
    assert (tmp_path / "pictures" / "contact_sheet.png").stat().st_size > 0
    assert len((tmp_path / "photo-faces" / "part-00000").read_text().splitlines()) == 3
    volume = np.load(tmp_path / "volume.npy")
    assert volume.shape == (32, 32, 32) and np.isfinite(volume).all() and volume.max() > 0
    assert (tmp_path / "volume.png").stat().st_size > 0
