"""scripts/update_probe.py and scripts/decode_probe.py (what scripts/gpu_check.sh runs on a GPU)
at the CPU shape: each runs from the source tree and writes the JSON the GPU script summarises."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, tmp_path: Path) -> dict:
    out = tmp_path / f"{script}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args, "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_update_probe_measures_one_update(tmp_path):
    r = run("update_probe.py", "--shape", "tiny-151k", "--prompts", "2", "--n", "4", "--max-new", "48",
            "--checkpointing", "off", "--micro-batch-tokens", "1100", tmp_path=tmp_path)
    assert r["rows"] == 8 and r["plan"]["micro_batch_tokens"] == 1100  # an explicit budget is kept
    assert r["response_tokens"] < r["tokens"] and r["seconds"] > 0
    assert r["peak_memory_mb"] > r["update_memory_mb"] >= 0  # the peak holds the weights; the growth is the update's
    assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"]) and r["mfu"] is None  # no peak on CPU



@pytest.mark.slow
def test_update_probe_runs_the_packed_and_the_padded_update(tmp_path):
    args = ("--prompts", "2", "--n", "3", "--max-new", "24", "--mean-new", "8", "--checkpointing", "off")
    off = run("update_probe.py", "--shape", "tiny-151k", *args, "--packed", "off", tmp_path=tmp_path)
    on = run("update_probe.py", "--shape", "tiny-151k", *args, "--packed", "on", tmp_path=tmp_path)
    assert (off["packed"], on["packed"]) == (False, True) and on["rows"] == off["rows"] == 6
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5)  # the same update, laid out differently
    tiny = run("update_probe.py", "--preset", "tiny", "--prompts", "2", "--n", "4", "--max-new", "12", "--mean-new",
               "4", "--prompt-tokens", "8", "20", "--packed", "on", tmp_path=tmp_path)
    assert tiny["shape"] == "tiny" and tiny["packed"] and tiny["rows"] == 8

def test_decode_probe_compares_both_attention_paths(tmp_path):
    r = run("decode_probe.py", "--shape", "tiny-151k", "--rows", "4", "--tokens", "6", tmp_path=tmp_path)
    assert r["packed_applied"] and r["same_tokens_frac"] == 1.0 and r["max_logprob_diff_first_token"] < 1e-5
    assert r["sdpa"]["decode_steps"] == r["packed"]["decode_steps"] == 6


def test_decode_probe_times_the_decodes_back_to_back(tmp_path):
    r = run("decode_probe.py", "--shape", "tiny-151k", "--rows", "4", "--tokens", "6", "--decodes",
            "dynamic,static,graphs", "--sync-every", "4", tmp_path=tmp_path)
    assert list(r["decodes"]) == ["dynamic", "static", "graphs"] and r["decodes"]["dynamic"]["speedup"] == 1.0
    for d in r["decodes"].values():
        assert d["same_tokens_frac"] == 1.0 and d["max_logprob_diff_first_token"] < 1e-5 and d["decode_steps"] == 6

