#!/usr/bin/env bash
# The one script a person with a GPU runs, from anywhere:
#
#     bash scripts/gpu_check.sh            # on the CUDA machine: under 8 minutes (the timeouts; the
#                                          # 2026-12-04 H200 runs: docs in BENCHMARKS.md "Paper scale")
#     bash scripts/gpu_check.sh --dry-run  # anywhere: the same sequence at CPU sizes (a minute or two)
#
# 1. Installs .whl/*.whl (cp312 wheels of what a bare GPU machine lacks: pydantic, math-verify,
#    typer, ...) into $SITE (default /tmp/site) and puts it first on PYTHONPATH. With no .whl
#    folder, the python's own packages are used as they are. To make .whl on a machine with pip:
#    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#      --platform manylinux_2_17_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 ...
# 2. Prints nvidia-smi and the torch / transformers versions.
# 3. Runs, each under `timeout` with its own limit, each writing JSON under $OUT (default runs/gpu):
#      0. scripts/decode_probe.py: ms per decode step at 512 rows (96 steps, warm), SDPA vs packed GQA;
#         with DECODES=dynamic,static,graphs also the sampler's decodes back to back (raise
#         PROBE_TIMEOUT: each decode is one more warm 96-step pass) -> $OUT/decode.json
#      a. `aero bench --shape qwen2.5-1.5b --methods grpo,dapo,aero --steps 2 --set batch_prompts=32`
#         (its means are step 2's: step 1 pays the warm-up; a run cut by the timeout keeps its steps)
#         -> $OUT/shape_1p5b.json, and every step's metrics -> $OUT/shape_steps.json
#      b. with RUN_UPDATE_PROBES=1 (measured 2026-12-04; ~2.5 more minutes):
#         scripts/update_probe.py: the update alone at 128 prompts x 16 with activation
#         checkpointing -> $OUT/update_paper.json; and at 32 prompts without -> $OUT/update_nockpt.json
#      c. with RUN_GPU_CHECK=1: scripts/gpu_check.py (the 33.6M-policy GRPO/AERO check)
#    One failed command does not stop the next; the exit codes are reported at the end and the
#    script exits non-zero if any failed. A log of everything goes to $OUT/gpu_check.log.
#
# Environment: PYTHON (default python3), OUT (default runs/gpu), SITE (default /tmp/site),
# BENCH_TIMEOUT (default 360 s), BENCH_STEPS (2), PROBE_TIMEOUT (90 s), CHECK_TIMEOUT (90 s),
# RUN_GPU_CHECK (0), RUN_UPDATE_PROBES (0), DECODES (e.g. dynamic,static,graphs), WARMUP (1: the decode
# probe's first-call split per decode, scripts/decode_probe.py --warmup), DECODES (empty: the attention paths only),
# BENCH_RUNS (bench's run directories, default /tmp/gpu_check_runs: kept out of $OUT, whose files
# travel back).
set -uo pipefail

DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (only --dry-run)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/gpu}
SITE=${SITE:-/tmp/site}
BENCH_RUNS=${BENCH_RUNS:-/tmp/gpu_check_runs}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-360}
PROBE_TIMEOUT=${PROBE_TIMEOUT:-90}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-90}
DECODES=${DECODES:-}
RUN_GPU_CHECK=${RUN_GPU_CHECK:-0}
RUN_UPDATE_PROBES=${RUN_UPDATE_PROBES:-0}
BENCH_STEPS=${BENCH_STEPS:-2}
mkdir -p "$OUT" || exit 2
LOG=$OUT/gpu_check.log
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1

echo "== gpu_check.sh $( ((DRY)) && echo '--dry-run ')at $(date -u +%FT%TZ) in $ROOT; OUT=$OUT; PYTHON=$PYTHON"

# 1. wheels
if compgen -G ".whl/*.whl" > /dev/null; then
  if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl; then
    export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    echo "installed $(ls .whl/*.whl | wc -l) wheels from .whl into $SITE"
  else
    echo "WARNING: installing .whl/*.whl failed (wheels are cp312; is $PYTHON Python 3.12?); using $PYTHON's own packages"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  fi
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  echo "no .whl/*.whl: using $PYTHON's own packages"
fi

# 2. the machine
if command -v nvidia-smi > /dev/null; then nvidia-smi; else echo "nvidia-smi: not found"; fi
"$PYTHON" - <<'EOF'
import sys
print("python", sys.version.split()[0])
for name in ("torch", "transformers", "pydantic", "typer", "math_verify"):
    try:
        mod = __import__(name)
        print(f"{name} {getattr(mod, '__version__', '?')} ({mod.__file__})")
    except Exception as e:  # noqa: BLE001 -- a report line, not a failure
        print(f"{name}: NOT importable ({type(e).__name__}: {e})")
try:
    import torch
    print("cuda available:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception:  # noqa: BLE001
    pass
EOF

# 3. the commands
if ((DRY)); then
  SHAPE=tiny-151k; STEPS=2; SETS=(--set batch_prompts=2 --set n_total=4 --set aero.n_explore=2 --set max_new_tokens=16)
  PAPER=(--shape tiny-151k --prompts 2 --n 4 --max-new 64); SMALL=(--shape tiny-151k --prompts 1 --n 4 --max-new 64)
  DECODE=(--shape tiny-151k --rows 4 --tokens 8)
  CHECK_ARGS=(--tiny --steps 2 --prompts 2 --sft-steps 1)
else
  SHAPE=qwen2.5-1.5b; STEPS=$BENCH_STEPS; SETS=(--set batch_prompts=32)
  PAPER=(--shape qwen2.5-1.5b --prompts 128); SMALL=(--shape qwen2.5-1.5b --prompts 32)
  DECODE=(--shape qwen2.5-1.5b --rows 512 --tokens 96)
  CHECK_ARGS=()
fi

NAMES=(); CODES=(); JSONS=()
run() {  # run NAME TIMEOUT_S JSON -- CMD...
  local name=$1 limit=$2 json=$3; shift 4
  echo; echo "== [$name] timeout ${limit}s: $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@"
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "[$name] TIMED OUT after ${limit}s"
  echo "== [$name] exit $rc after $((SECONDS - t0))s"
  NAMES+=("$name"); CODES+=("$rc"); JSONS+=("$json")
}

# decode at 512 rows: transformers' SDPA against the packed grouped-query path, same generator
run decode "$PROBE_TIMEOUT" "$OUT/decode.json" -- \
  "$PYTHON" scripts/decode_probe.py "${DECODE[@]}" ${DECODES:+--decodes "$DECODES"} ${WARMUP:+--warmup} \
  --json "$OUT/decode.json"

run bench_shape "$BENCH_TIMEOUT" "$OUT/shape_1p5b.json" -- \
  "$PYTHON" -c 'from cli.main import app; app()' bench --shape "$SHAPE" --methods grpo,dapo,aero \
  --steps "$STEPS" --seed 0 "${SETS[@]}" --out "$BENCH_RUNS/bench" --json "$OUT/shape_1p5b.json"

# every step's metrics of every method, in one file: they come back even when the bench timed
# out before writing its JSON (its run directories hold a metrics.jsonl per method)
"$PYTHON" - "$BENCH_RUNS/bench" "$OUT/shape_steps.json" <<'EOF'
import json, sys
from pathlib import Path
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
steps = {d.name: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines() if line.strip()]
         for d in sorted(runs.glob("*")) if (d / "metrics.jsonl").is_file()}
out.write_text(json.dumps(steps))
print(f"per-step metrics: {', '.join(f'{m} {len(s)} steps' for m, s in steps.items()) or 'none'} -> {out}")
EOF

# the update alone at the paper's per-step batch (128 prompts x 16, activation checkpointing, the
# shape bench's default) and, without checkpointing, at 32 prompts: peak memory, seconds, MFU
if ((RUN_UPDATE_PROBES || DRY)); then
run update_paper "$((PROBE_TIMEOUT + 40))" "$OUT/update_paper.json" -- \
  "$PYTHON" scripts/update_probe.py "${PAPER[@]}" --checkpointing on --json "$OUT/update_paper.json"
run update_nockpt "$PROBE_TIMEOUT" "$OUT/update_nockpt.json" -- \
  "$PYTHON" scripts/update_probe.py "${SMALL[@]}" --checkpointing off --json "$OUT/update_nockpt.json"
fi

if ((RUN_GPU_CHECK || DRY)); then  # the 33.6M-policy check: RUN_GPU_CHECK=1 (it needs ~2 more minutes)
  run gpu_check "$CHECK_TIMEOUT" "$OUT/gpu_check.json" -- \
    "$PYTHON" scripts/gpu_check.py "${CHECK_ARGS[@]}" --json "$OUT/gpu_check.json"
fi

# 4. summary: one line per JSON, then the exit codes
echo; echo "== summary"
failed=0
for i in "${!NAMES[@]}"; do
  "$PYTHON" - "${NAMES[$i]}" "${CODES[$i]}" "${JSONS[$i]}" <<'EOF'
import json, sys
from pathlib import Path
name, rc, path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
if not path.exists():
    print(f"{name}: exit {rc}; no JSON ({path})")
    sys.exit()
try:
    d = json.loads(path.read_text())
except ValueError as e:
    print(f"{name}: exit {rc}; {path} is not JSON ({e})")
    sys.exit()
def f(x):
    return f"{x:.3f}" if isinstance(x, (int, float)) else "?"
parts = []
if isinstance(d.get("methods"), dict):  # aero bench
    meta = d.get("meta", {})
    parts.append(f"params {meta.get('n_params', '?')}, torch {meta.get('torch', '?')}")
    for m, r in d["methods"].items():
        parts.append(f"{m} step {f(r.get('step_s'))}s (rollout {f(r.get('rollout_s'))} train {f(r.get('train_s'))}) "
                     f"wall {f(r.get('wall_s'))}s")
elif "speedup" in d:  # scripts/decode_probe.py
    parts.append(f"{d['shape']} {d['rows']} rows: sdpa {f(d['sdpa']['ms_per_step'])} ms/step, packed "
                 f"{f(d['packed']['ms_per_step'])} ms/step (x{f(d['speedup'])}), same tokens {f(d['same_tokens_frac'])}")
    for k, r in d.get("decodes", {}).items():
        parts.append(f"decode {k} {f(r['ms_per_step'])} ms/step (x{f(r['speedup'])}), same tokens {f(r['same_tokens_frac'])}")
    for k, w in d.get("warmup", {}).items():
        parts.append(f"warm-up {k}: first launch {f(w['first_launch_s'])}s, cold {f(w['cold_s'])}s "
                     f"({w['cold_segments']} new segments, {f(w['cold_segment_mb'])} MB) vs warm {f(w['warm_s'])}s")
elif "plan" in d:  # scripts/update_probe.py
    parts.append(f"{d['shape']} {d['rows']} rows {d['tokens']} tokens: {f(d['seconds'])}s, "
                 f"peak {f(d['peak_memory_mb'])} MB, MFU {f(d['mfu'])}, micro-batch {d['plan']['micro_batch_tokens']}")
elif isinstance(d.get("summary"), dict):  # scripts/gpu_check.py
    parts.append(f"{d.get('device_name', d.get('device', '?'))}, params {d.get('n_params', '?')}")
    for m, r in d["summary"].items():
        parts.append(f"{m} step {f(r.get('step_s'))}s")
    parts.append("aero/grpo " + ", ".join(f"{k} {f(v)}" for k, v in d.get("ratio_aero_grpo", {}).items()))
else:
    parts.append("keys " + ",".join(list(d)[:10]))
print(f"{name}: exit {rc}; {path} ({path.stat().st_size} B): " + "; ".join(parts))
EOF
  [[ ${CODES[$i]} == 0 ]] || failed=1
done
echo "exit codes: $(for i in "${!NAMES[@]}"; do printf '%s=%s ' "${NAMES[$i]}" "${CODES[$i]}"; done)"
exit $failed
