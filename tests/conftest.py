"""Suite-wide settings.

torch's intra-op threads: on this 2-core machine the suite runs beside real worker, API and
browser processes; with torch's default 2 threads a busy machine runs the tiny model ~10x
slower than with 1 (measured), so tests use 1 thread unless AERO_TEST_THREADS says otherwise.
"""

import os

import torch

torch.set_num_threads(int(os.environ.get("AERO_TEST_THREADS", "1")))
