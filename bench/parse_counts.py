"""How often one ``gpumr run`` parses its command line and builds mrjob's job: cProfile's call counts (no times).

Run in a folder that holds ``frames.seq`` (``gpumr sample frames; gpumr pack frames -o frames.seq``)::

    python bench/parse_counts.py [--engine inline] [more gpumr run options]

It prints each counted function's calls in this process: ``parse_known_args`` (every argparse parse),
``MRJob.__init__`` (mrjob's job built) and ``load`` (the CT geometry read), for ``gpumr run faces frames.seq -o OUT``.
"""

import cProfile
import os
import pstats
import shutil
import sys
import tempfile


def counts(argv):
    """``{(file, line, function): calls}`` of the counted functions over one ``gpumr run ARGV``, and its status."""
    from gpumr.cli import main
    profile = cProfile.Profile()
    profile.enable()
    try:
        status = main(argv)
    finally:
        profile.disable()
    wanted = {}
    for (path, line, name), value in pstats.Stats(profile).stats.items():
        if name == "parse_known_args" or (name == "load" and "geometry" in path) or (
                name == "__init__" and path.replace(os.sep, "/").endswith("mrjob/job.py")):
            wanted[(path, line, name)] = value[1]
    return wanted, status


def main():
    out = tempfile.mkdtemp(prefix="parse-counts-")
    try:
        argv = ["run", "faces", "frames.seq", "-o", os.path.join(out, "out"), "--engine", "inline", "-q",
                *sys.argv[1:]]
        found, status = counts(argv)
        print(f"gpumr {' '.join(argv)}: exit status {status}")
        for (path, line, name), calls in sorted(found.items(), key=lambda kv: kv[0][2]):
            print(f"{calls:4d}  {name}  ({path}:{line})")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
