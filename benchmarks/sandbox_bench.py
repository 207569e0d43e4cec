"""What the code sandbox costs per candidate (issue 6): a GRPO step on the code task scores
P x n programs, so sandbox start-up is part of the reward time.

Scores ``--candidates`` programs (correct, wrong and crashing ones, in a fixed mix) against a
stdin/stdout problem with ``--tests`` tests, with 1 and with ``--workers`` sandboxes at once,
and, as a yardstick, one fork bomb and one infinite loop to show an attack costs its limit,
not more.

    python benchmarks/sandbox_bench.py --candidates 64 --tests 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.tasks.sandbox import Limits, TestSuite, isolation, run_many  # noqa: E402

PROGRAMS = {
    "correct": "a, b = map(int, input().split())\nprint(a + b)\n",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)\n",
    "crash": "raise ValueError('no')\n",
}
ATTACKS = {
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    "infinite loop": "while True:\n    pass\n",
}


def suite(tests: int) -> TestSuite:
    pairs = [(i, 2 * i + 1) for i in range(tests)]
    return TestSuite("stdio", tuple(f"{a} {b}\n" for a, b in pairs), tuple(str(a + b) for a, b in pairs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=int, default=64)
    ap.add_argument("--tests", type=int, default=5)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    limits = Limits(test_timeout_s=2.0, timeout_s=10.0)
    prefix, hook = isolation(limits)
    print(f"{os.cpu_count()} CPUs; isolation: {'namespaces' if prefix else 'no namespaces'}, audit hook {'on' if hook else 'off'}; "
          f"{args.candidates} candidates x {args.tests} stdio tests")
    kinds = list(PROGRAMS)
    jobs = [(PROGRAMS[kinds[i % len(kinds)]], suite(args.tests)) for i in range(args.candidates)]
    for workers in dict.fromkeys((1, args.workers)):
        t0 = time.perf_counter()
        results = run_many(jobs, limits, workers)
        dt = time.perf_counter() - t0
        outcomes = {o: sum(r.outcome == o for r in results) for o in sorted({r.outcome for r in results})}
        print(f"  workers={workers}: {dt:.2f} s, {1e3 * dt / len(jobs):.0f} ms per candidate, "
              f"{len(jobs) / dt:.1f} candidates/s; outcomes {outcomes}")
    no_hook = Limits(test_timeout_s=2.0, timeout_s=10.0, audit_hook="fallback")  # rlimits + namespaces only
    for name, code in ATTACKS.items():
        for label, lim in (("audit hook on", limits), ("audit hook off", no_hook)):
            t0 = time.perf_counter()
            (r,) = run_many([(code, suite(1))], lim, 1)
            print(f"  {name} ({label}): {r.outcome}, reward {r.reward}, {time.perf_counter() - t0:.2f} s "
                  f"(test limit {lim.test_timeout_s} s)")


if __name__ == "__main__":
    main()
