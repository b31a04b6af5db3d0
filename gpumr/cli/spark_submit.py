"""The program spark-submit runs: ``spark-submit [options] .../gpumr/cli/spark_submit.py WORKLOAD ...`` is
``gpumr run WORKLOAD ... --engine spark`` inside spark-submit's driver.

Run as a script, Python puts this file's folder first on the import path:
it is taken off before anything is imported, so that none of the command
line's modules stands in for a package of the same name.
"""

import os
import sys

if __name__ == "__main__":
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    from gpumr.cli import run_command
    sys.exit(run_command([*sys.argv[1:], "--engine", "spark"]))
