"""scripts/warmup_probe.py (what scripts/gpu_check.sh runs for the first-call warm-up) on the CPU at
the tiny-151k shape: a process per decode, the expandable-segments variant and the update's two
calls, and the JSON's arithmetic: the split sums to the warm-up, the second call decodes the first
call's steps and tokens, and what only CUDA measures is null. No timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import warmup_probe  # noqa: E402

CUDA_ONLY_CALL = ("device_step_ms", "device_prefill_s", "device_median_step_ms", "step_device_allocs", "allocator",
                  "peak_allocated_mb", "reserved_mb", "graph_captures", "graph_capture_s")
CUDA_ONLY_SPLIT = ("graph_capture_s", "steps_with_device_allocs", "excess_ms_per_step_with_device_allocs",
                   "excess_ms_per_step_without")


def probe(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "warmup.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "warmup_probe.py"), *args, "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warm-up at" in proc.stdout  # the table
    return json.loads(out.read_text())


def check_call(c: dict, tokens: int, first_steps: int) -> None:
    assert c["seconds"] > 0 and c["prefill_s"] >= 0 and c["tail_s"] >= 0
    assert c["decode_steps"] == c["sampling_calls"] == tokens  # random weights never sample the stop id
    assert len(c["step_ms"]) == tokens - 1 and all(ms > 0 for ms in c["step_ms"])
    assert c["first_step_ms"] == c["step_ms"][0]
    assert c["first_n_ms"] == pytest.approx(sum(c["step_ms"][:first_steps]))
    assert c["rest_ms"] == pytest.approx(sum(c["step_ms"][first_steps:]))
    # the marks partition the call: prefill + every decode step + tail is the call's wall time
    assert c["prefill_s"] + (c["first_n_ms"] + c["rest_ms"]) / 1000 + c["tail_s"] == pytest.approx(c["seconds"])
    assert all(c[k] is None for k in CUDA_ONLY_CALL), [k for k in CUDA_ONLY_CALL if c[k] is not None]


@pytest.mark.slow
def test_warmup_probe_splits_each_decode_and_the_update(tmp_path):
    tokens, n = 6, 2
    r = probe(tmp_path, "--shape", "tiny-151k", "--rows", "4", "--tokens", str(tokens), "--first-steps", str(n),
              "--decodes", "dynamic,graphs", "--expandable", "dynamic", "--update-prompts", "1", "--update-n", "2",
              "--update-max-new", "16")
    assert r["probe"] == "warmup" and r["device"] == "cpu" and r["wall_s"] > 0
    assert list(r["decodes"]) == ["dynamic", "graphs"] and list(r["expandable"]) == ["dynamic"]
    assert r["allocator_share_s"] == {"dynamic": None}  # only a CUDA allocator has segments to expand
    assert r["expandable"]["dynamic"]["alloc_conf"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert r["decodes"]["dynamic"]["alloc_conf"]["PYTORCH_CUDA_ALLOC_CONF"] in (None, "")  # unless the caller set one
    for d in (*r["decodes"].values(), *r["expandable"].values()):
        assert d["rows"] == 4 and d["params"] == r["params"] and d["build_s"] > 0 and d["import_s"] > 0
        assert d["device_init_s"] is None and d["packed_gqa"] is False  # CUDA's context; CPU runs keep SDPA
        check_call(d["first"], tokens, n)
        check_call(d["second"], tokens, n)
        assert d["same_tokens"] and d["warnings"] == []
        assert d["warmup_s"] == pytest.approx(d["first"]["seconds"] - d["second"]["seconds"])
        s = d["split"]
        assert s["prefill_s"] + s["first_steps_s"] + s["rest_steps_s"] + s["tail_s"] == pytest.approx(d["warmup_s"])
        assert all(s[k] is None for k in CUDA_ONLY_SPLIT)
        assert d["steady_ms_per_step"] == d["second"]["median_step_ms"] and d["steady_device_ms_per_step"] is None
    u = r["update"]
    assert u["rows"] == 2 and len(u["calls"]) == 2 and all(c["seconds"] > 0 and c["allocator"] is None
                                                           for c in u["calls"])
    assert u["seconds"] == u["calls"][0]["seconds"]  # the top-level figures stay the first call's
    assert u["warmup_s"] == pytest.approx(u["calls"][0]["seconds"] - u["calls"][1]["seconds"])


def test_warmup_probe_within_no_budget_starts_nothing_and_says_so(tmp_path):
    r = probe(tmp_path, "--shape", "tiny-151k", "--rows", "4", "--tokens", "4", "--budget-s", "0")
    assert list(r["decodes"]) == list(warmup_probe.DECODES) and list(r["expandable"]) == ["dynamic"]
    entries = [*r["decodes"].values(), *r["expandable"].values(), r["update"]]
    assert all(e == {"skipped": "budget: 0 s left"} for e in entries), entries
    assert r["allocator_share_s"] == {"dynamic": None} and "device" not in r


def test_the_split_is_the_first_calls_excess_and_counts_steps_that_allocated():
    def call(prefill, steps, tail, segments=None, capture=None):
        return {"prefill_s": prefill, "tail_s": tail, "step_ms": steps, "first_n_ms": sum(steps[:2]),
                "rest_ms": sum(steps[2:]), "step_device_allocs": segments, "graph_capture_s": capture}

    first = call(1.0, [50.0, 30.0, 12.0, 20.0], 0.5, segments=[3, 0, 0, 2], capture=0.4)
    second = call(0.25, [10.0, 10.0, 10.0, 10.0], 0.5, segments=[0, 0, 0, 0], capture=0.1)
    s = warmup_probe.warmup_split(first, second, 2)
    assert s["prefill_s"] == 0.75 and s["first_steps_s"] == pytest.approx(0.06)
    assert s["rest_steps_s"] == pytest.approx(0.012) and s["tail_s"] == 0.0
    assert s["graph_capture_s"] == pytest.approx(0.3) and s["steps_with_device_allocs"] == 2
    assert s["excess_ms_per_step_with_device_allocs"] == pytest.approx(25.0)  # steps 1 and 4: +40, +10
    assert s["excess_ms_per_step_without"] == pytest.approx(11.0)  # steps 2 and 3: +20, +2
    cpu = warmup_probe.warmup_split(call(1.0, [5.0], 0.5), call(1.0, [5.0], 0.5), 2)
    assert all(cpu[k] is None for k in CUDA_ONLY_SPLIT)


def test_the_allocator_deltas_report_bytes_in_mib():
    before = {"segment.all.allocated": 2, "allocated_bytes.all.allocated": 2**20}
    after = {"segment.all.allocated": 5, "allocated_bytes.all.allocated": 3 * 2**20, "num_device_alloc": 4}
    assert warmup_probe.alloc_delta(before, after) == {"segment.all.allocated": 3, "allocated_mb.all.allocated": 2.0,
                                                       "num_device_alloc": 4}
    assert warmup_probe.alloc_delta(None, None) is None and warmup_probe.alloc_stats("cpu") is None


def test_a_missing_hook_point_is_an_error_naming_it(monkeypatch):
    import trainer.rollout.static_decode as static_decode

    import trainer.rollout.embedded as embedded

    sample_next = embedded.sample_next
    monkeypatch.delattr(static_decode, "sample_step")
    with pytest.raises(RuntimeError, match="static_decode has no sample_step"):
        with warmup_probe.Instruments("cpu"):
            pass
    assert embedded.sample_next is sample_next  # the hook placed before the error is undone


def test_the_hooks_mark_every_step_and_are_undone():
    import torch

    import trainer.rollout.embedded as embedded
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.decode_graphs import BucketGraphs

    sample_next, capture = embedded.sample_next, BucketGraphs.__dict__["capture"]
    with warmup_probe.Instruments("cpu") as inst:
        inst.begin()
        embedded.sample_next(torch.zeros(2, 5), SamplingParams(1.0, 1.0, 3), torch.Generator().manual_seed(0))
        inst.marks.mark()
        assert len(inst.marks.host) == 3 and inst.captures == []
    assert embedded.sample_next is sample_next and BucketGraphs.__dict__["capture"] is capture


def test_a_cuda_calls_record_aligns_device_times_and_allocations_with_the_steps():
    """The CUDA arithmetic without a GPU: marks at the call's start, 4 sampling calls, its end."""
    class FakeMarks:
        cuda = True
        host = [0.0, 0.5, 0.6, 0.8, 0.9, 1.0]
        allocs = [10, 14, 15, 15, 17, 17]  # device allocations so far at each mark

        def device_ms(self):
            return [450.0, 100.0, 200.0, 100.0, 100.0]

    rec = warmup_probe.call_record(FakeMarks(), [0.25, 0.5], first_steps=1)
    assert rec["sampling_calls"] == 4 and rec["seconds"] == 1.0
    assert rec["prefill_s"] == pytest.approx(0.5) and rec["tail_s"] == pytest.approx(0.1)
    assert rec["step_ms"] == pytest.approx([100.0, 200.0, 100.0]) and rec["first_n_ms"] == pytest.approx(100.0)
    assert rec["device_step_ms"] == [100.0, 200.0, 100.0] and rec["device_prefill_s"] == 0.45
    assert rec["device_median_step_ms"] == 100.0
    assert rec["step_device_allocs"] == [1, 0, 2]  # steps 1-3: between the sampling calls, not the prefill's 4
    assert rec["graph_captures"] == 2 and rec["graph_capture_s"] == 0.75
