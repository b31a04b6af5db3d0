"""The program spark-submit runs: ``spark-submit [options] .../gpumr/cli/spark_submit.py WORKLOAD ...`` is ``gpumr run
WORKLOAD ... --engine spark`` inside spark-submit's driver."""

import os
import sys

if __name__ == "__main__":
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    from gpumr.cli import run_command
    sys.exit(run_command([*sys.argv[1:], "--engine", "spark"]))
