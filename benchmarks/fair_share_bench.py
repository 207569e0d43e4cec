"""What the fair-share claim costs a worker (backend/db/fair_share.py::claim_next), on a store with
FINISHED finished runs (spread over USERS users) and a QUEUED-run sweep of one user plus one
queued run of each other user: the median and p95 of one claim (three grouped reads and the
compare-and-set), over 50 claims. Throwaway databases (tests/stores.py).

    python benchmarks/fair_share_bench.py sqlite|postgresql [FINISHED=20000] [QUEUED=300] [USERS=20]
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.stores
from backend.db import fair_share  # noqa: E402
from backend.db.migrate import migrate  # noqa: E402
from backend.db.models import Run, utcnow  # noqa: E402
from backend.db.session import get_engine, make_sessionmaker  # noqa: E402
from tests.stores import temp_database  # noqa: E402
from trainer.spec.config import RunConfig  # noqa: E402

kind = sys.argv[1]
finished, queued, users = (int(a) for a in (sys.argv[2:] + ["20000", "300", "20"][len(sys.argv) - 2:])[:3])
cfg = RunConfig(steps=2).model_dump(mode="json")


def row(i: int, owner: str, status: str) -> dict:
    now = utcnow()
    return dict(name=f"r{i}", method="aero", engine="embedded", config=cfg, status=status, queue="cpu", progress=0.0,
                current_step=0, total_steps=2, created_at=now, tags=[], notes="", cancel_requested=False, attempts=0,
                metrics_version=0, owner=owner, started_at=now if status == "succeeded" else None)


with temp_database(kind, Path(tempfile.mkdtemp())) as url:
    migrate(url)
    Session = make_sessionmaker(get_engine(url))
    with Session() as s:
        s.execute(insert(Run), [row(i, f"u{i % users}", "succeeded") for i in range(finished)])
        s.execute(insert(Run), [row(i, "u0", "queued") for i in range(queued)])
        s.execute(insert(Run), [row(i, f"u{i}", "queued") for i in range(1, users)])
        s.commit()
    times = []
    for i in range(50):
        with Session() as s:
            t0 = time.perf_counter()
            run = fair_share.claim_next(s, "cpu", f"w{i}", ticket=i + 1)
            s.commit()
            times.append(time.perf_counter() - t0)
    ms = sorted(1000 * t for t in times)
    print(f"{kind}: {finished} finished runs, {queued}-run sweep + {users - 1} single runs: claim median "
          f"{statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * len(ms)) - 1]:.1f} ms")
