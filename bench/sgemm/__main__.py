"""``python -m bench.sgemm``: the SGEMM depth study's command line (see bench/sgemm/cli.py)."""
import sys

from bench.cli import run
from bench.sgemm.cli import main

sys.exit(run(main))
