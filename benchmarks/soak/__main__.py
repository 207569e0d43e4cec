"""``python -m benchmarks.soak``: the soak's command line (benchmarks/soak/cli.py)."""

import sys

from benchmarks.soak.cli import main

if __name__ == "__main__":
    sys.exit(main())
