"""CUDA graphs for the static decode (trainer/rollout/static_decode.py): one graph per batch size
of a decode call, captured the first time the batch has that size, replayed for every later step.

Why: a decode step of a small model, or of a large one at few rows, is bound by kernel launches
(a Qwen2.5 layer is ~15 kernels, 28 layers per token) rather than by the GPU's arithmetic; a
graph replays the whole step with one launch. The static decode makes this possible: its cache
is preallocated, its inputs live in fixed buffers, the slot it writes is a device tensor, and
its batch shrinks only along a short ladder of sizes.

UNTESTED ON A GPU at the time of writing (the project's test machine has none): the CPU tests
cover the bucket ladder and the step's fixed shapes, not a capture. What the code relies on:

* A graph is captured and used inside one ``generate`` call, so the autocast weight casts cached
  by the prefill (same autocast context) outlive it; graphs never outlive the call.
* The batch only shrinks within a call, so graphs of larger sizes are dropped when it does, and
  all graphs share one memory pool (safe: they are replayed one at a time, never together). A
  continuous batch (trainer/rollout/continuous.py) grows and shrinks: it keeps every size's graph.
* Warm-up and capture compute the real step; the replay that follows writes the same keys and
  values into the same slot, so running the step twice changes nothing.
* A capture that fails (an operation that syncs the host, an unsupported kernel) falls back to
  the eager step for the rest of the call, with a warning.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch


class BucketGraphs:
    """``graphs(b)`` runs the step for batch size ``b`` (``fn(b)`` -> logits [b, V]) by replaying
    its CUDA graph, capturing it first when ``b`` is new. The returned tensor is the graph's own
    output buffer: read it before the next call."""

    def __init__(self, fn: Callable[[int], torch.Tensor], grows: bool = False):
        self.fn, self.grows = fn, grows  # grows: the batch may grow back (a continuous batch): keep every size
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.failed = False

    def __call__(self, b: int) -> torch.Tensor:
        if self.failed:
            return self.fn(b)
        if b not in self.graphs:
            if not self.grows:
                self.drop_larger(b)
            try:
                self.capture(b)
            except RuntimeError as e:  # a capture error names the operation; keep decoding eagerly
                warnings.warn(f"CUDA graph capture of the decode step failed ({e}); decoding eagerly", RuntimeWarning,
                              stacklevel=2)
                self.failed = True
                self.graphs.clear()
                self.outputs.clear()
                return self.fn(b)
        self.graphs[b].replay()
        return self.outputs[b]

    def capture(self, b: int) -> None:
        """Warm up on a side stream (cuBLAS workspaces, lazy inits), then capture ``fn(b)``."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.fn(b)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.fn(b)
        self.graphs[b], self.outputs[b] = graph, out

    def drop_larger(self, b: int) -> None:
        """The batch never grows back within a call: free the graphs of larger sizes."""
        for size in [s for s in self.graphs if s > b]:
            del self.graphs[size], self.outputs[size]
