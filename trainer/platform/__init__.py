"""A run's plumbing around the engines: the entry point that trains a run on its engine (run.py),
its GPUs on Ray (placement.py, reservations.py), where its metrics go (sinks.py, trackers.py,
system_metrics.py, step_detail.py) and which checkpoint its directory holds (local_checkpoint.py).
Heavy libraries (ray, torch, the trackers' clients) are imported where they are used. Nothing is
re-exported: import each name from its module."""
