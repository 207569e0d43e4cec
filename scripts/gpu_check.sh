#!/usr/bin/env bash
# The one script a person with a GPU runs, from anywhere:
#
#     bash scripts/gpu_check.sh            # on the CUDA machine: at most BUDGET seconds (default 570, inside
#                                          # a 10-minute limit; the 2026-12-04 H200 runs: BENCHMARKS.md "Paper scale")
#     bash scripts/gpu_check.sh --dry-run  # anywhere: the same sequence at CPU sizes (a minute or two)
#
# 1. Installs .whl/*.whl (cp312 wheels of what a bare GPU machine lacks: pydantic, math-verify,
#    typer, ...) into $SITE (default /tmp/site) and puts it first on PYTHONPATH. With no .whl
#    folder, the python's own packages are used as they are. To make .whl on a machine with pip:
#    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#      --platform manylinux_2_17_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 ...
# 2. Prints nvidia-smi and the torch / transformers versions.
# 3. Runs, each under `timeout` with its own limit clipped to what is left of BUDGET (a command
#    with under 30 s left is skipped), each writing JSON under $OUT (default runs/gpu):
#      0. scripts/decode_probe.py: ms per decode step at 512 rows (96 steps, warm), SDPA vs packed GQA;
#         with DECODES=dynamic,static,graphs also the sampler's decodes back to back (raise
#         PROBE_TIMEOUT: each decode is one more warm 96-step pass) -> $OUT/decode.json
#      w. with WARMUP=1 (the default): scripts/warmup_probe.py, the first generate call against an
#         identical second at 512 rows x 128 tokens, each decode (WARMUP_DECODES) in a fresh process,
#         split by phase and decode step with the CUDA allocator's counters; the dynamic decode again
#         with expandable segments; the update's first call against its second -> $OUT/warmup.json
#      a. with RUN_BENCH=1 (the default): `aero bench --shape qwen2.5-1.5b --methods grpo,dapo,aero
#         --steps 2 --set batch_prompts=32` (its means are step 2's: step 1 pays the warm-up; a run cut
#         by the timeout keeps its steps) -> $OUT/shape_1p5b.json, every step's metrics -> $OUT/shape_steps.json
#      b. with RUN_UPDATE_PROBES=1 (measured 2026-12-04; ~2.5 more minutes):
#         scripts/update_probe.py: the update alone at 128 prompts x 16 with activation
#         checkpointing -> $OUT/update_paper.json; and at 32 prompts without -> $OUT/update_nockpt.json
#      c. with RUN_GPU_CHECK=1: scripts/gpu_check.py (the 33.6M-policy GRPO/AERO check)
#    One failed command does not stop the next; the exit codes are reported at the end and the
#    script exits non-zero if any failed or was skipped. A log of everything goes to $OUT/gpu_check.log.
# 4. Prints a summary: one line per JSON (the steady-state figures), then the warm-up apart
#    (warmup.json per decode and the update; the bench's step 1 against its step 2).
#
# Environment: PYTHON (default python3), OUT (default runs/gpu), SITE (default /tmp/site),
# BUDGET (570 s: the whole script), BENCH_TIMEOUT (default 360 s), BENCH_STEPS (2), PROBE_TIMEOUT (90 s),
# CHECK_TIMEOUT (90 s), WARMUP (1), WARMUP_TIMEOUT (180 s), WARMUP_DECODES (dynamic,static,graphs),
# RUN_BENCH (1), RUN_GPU_CHECK (0), RUN_UPDATE_PROBES (0), DECODES (empty: the attention paths only),
# SCHEDULE (calls; continuous: with RUN_BENCH also the shape bench of GRPO and AERO on
# rollout.schedule=continuous, rollout.rng=per-row, rollout.decode=$STREAM_DECODE (graphs)
# -> $OUT/shape_continuous.json),
# BENCH_RUNS (bench's run directories, default /tmp/gpu_check_runs: kept out of $OUT, whose files
# travel back).
set -uo pipefail

DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg (only --dry-run)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PYTHON=${PYTHON:-python3}
OUT=${OUT:-runs/gpu}
SITE=${SITE:-/tmp/site}
BENCH_RUNS=${BENCH_RUNS:-/tmp/gpu_check_runs}
BUDGET=${BUDGET:-570}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-360}
PROBE_TIMEOUT=${PROBE_TIMEOUT:-90}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-90}
WARMUP_TIMEOUT=${WARMUP_TIMEOUT:-180}
DECODES=${DECODES:-}
WARMUP=${WARMUP:-1}
WARMUP_DECODES=${WARMUP_DECODES:-dynamic,static,graphs}
RUN_BENCH=${RUN_BENCH:-1}
RUN_GPU_CHECK=${RUN_GPU_CHECK:-0}
RUN_UPDATE_PROBES=${RUN_UPDATE_PROBES:-0}
BENCH_STEPS=${BENCH_STEPS:-2}
mkdir -p "$OUT" || exit 2
LOG=$OUT/gpu_check.log
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1

echo "== gpu_check.sh $( ((DRY)) && echo '--dry-run ')at $(date -u +%FT%TZ) in $ROOT; OUT=$OUT; PYTHON=$PYTHON; BUDGET=${BUDGET}s"

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
SCHEDULE=${SCHEDULE:-calls}
if [[ "$SCHEDULE" != calls && "$SCHEDULE" != continuous ]]; then
  echo "SCHEDULE must be calls or continuous; got $SCHEDULE" >&2; exit 2
fi
if ((DRY)); then
  SHAPE=tiny-151k; STEPS=2; SETS=(--set batch_prompts=2 --set n_total=4 --set aero.n_explore=2 --set max_new_tokens=16)
  PAPER=(--shape tiny-151k --prompts 2 --n 4 --max-new 64); SMALL=(--shape tiny-151k --prompts 1 --n 4 --max-new 64)
  DECODE=(--shape tiny-151k --rows 4 --tokens 8)
  WARM=(--shape tiny-151k --rows 4 --tokens 8 --first-steps 2 --update-prompts 1 --update-n 4 --update-max-new 32)
  CHECK_ARGS=(--tiny --steps 2 --prompts 2 --sft-steps 1)
else
  SHAPE=qwen2.5-1.5b; STEPS=$BENCH_STEPS; SETS=(--set batch_prompts=32)
  PAPER=(--shape qwen2.5-1.5b --prompts 128); SMALL=(--shape qwen2.5-1.5b --prompts 32)
  DECODE=(--shape qwen2.5-1.5b --rows 512 --tokens 96)
  WARM=(--shape qwen2.5-1.5b --rows 512 --tokens 128 --first-steps 16 --update-prompts 4 --update-n 16)
  CHECK_ARGS=()
fi

NAMES=(); CODES=(); JSONS=()
RESERVE=20  # seconds of BUDGET kept for the summary
clipped() {  # clipped LIMIT_S: the limit, or what is left of BUDGET when that is less
  local left=$((BUDGET - SECONDS - RESERVE))
  echo $(($1 < left ? $1 : left))
}
run() {  # run NAME TIMEOUT_S JSON -- CMD...
  local name=$1 limit=$2 json=$3; shift 4
  local budget_limit; budget_limit=$(clipped "$limit")
  if ((budget_limit < 30)); then
    echo; echo "== [$name] SKIPPED: ${budget_limit}s left of BUDGET=${BUDGET}s"
    NAMES+=("$name"); CODES+=("skipped"); JSONS+=("$json"); return
  fi
  ((budget_limit < limit)) && echo "[$name] limit ${limit}s clipped to ${budget_limit}s (BUDGET=${BUDGET}s)"
  limit=$budget_limit
  rm -f "$json"  # a JSON left by an earlier run is not this run's
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
  "$PYTHON" scripts/decode_probe.py "${DECODE[@]}" ${DECODES:+--decodes "$DECODES"} --json "$OUT/decode.json"

# the first generate call against an identical second, each decode in a fresh process (the ~70 s
# first generation at the 1.5B shape); the probe starts no process in its last 15 s, and its JSON
# holds every process it finished
if ((WARMUP)); then
  limit=$(clipped "$WARMUP_TIMEOUT")
  run warmup "$limit" "$OUT/warmup.json" -- \
    "$PYTHON" scripts/warmup_probe.py "${WARM[@]}" --decodes "$WARMUP_DECODES" --budget-s $((limit - 15)) \
    --json "$OUT/warmup.json"
fi

if ((RUN_BENCH)); then
run bench_shape "$BENCH_TIMEOUT" "$OUT/shape_1p5b.json" -- \
  "$PYTHON" -c 'from cli.main import app; app()' bench --shape "$SHAPE" --methods grpo,dapo,aero \
  --steps "$STEPS" --seed 0 "${SETS[@]}" --out "$BENCH_RUNS/bench" --json "$OUT/shape_1p5b.json"
if [[ "$SCHEDULE" == continuous ]]; then  # the same bench, AERO's rescue joining one continuous batch
  run bench_continuous "$BENCH_TIMEOUT" "$OUT/shape_continuous.json" -- \
    "$PYTHON" -c 'from cli.main import app; app()' bench --shape "$SHAPE" --methods grpo,aero \
    --steps "$STEPS" --seed 0 "${SETS[@]}" --set rollout.rng=per-row --set rollout.schedule=continuous \
    --set rollout.decode="${STREAM_DECODE:-graphs}" \
    --out "$BENCH_RUNS/bench_continuous" --json "$OUT/shape_continuous.json"
fi

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
fi

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
if rc == "skipped":
    print(f"{name}: SKIPPED (no time left of BUDGET)")
    sys.exit()
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
elif d.get("probe") == "warmup":  # scripts/warmup_probe.py: the steady state here, the warm-up below
    parts.append(f"{d['shape']} {d['rows']} rows x {d['tokens']} tokens on {d.get('device', '?')}")
    for k, r in d["decodes"].items():
        if "warmup_s" in r:
            steady = r["steady_device_ms_per_step"] or r["steady_ms_per_step"]
            parts.append(f"decode {k} steady {f(steady)} ms/step (second call's median)")
        else:
            parts.append(f"decode {k}: {r.get('skipped') or r.get('error', '?')}")
    parts.append("warm-up: below")
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

# the warm-up, apart from the steady-state figures above: the probe's first call minus an identical
# second per decode, the update's, and the bench's step 1 against its step 2 (the same work, warm)
echo; echo "== warm-up (first call minus an identical second; not in the figures above)"
"$PYTHON" - "$OUT/warmup.json" "$OUT/shape_steps.json" <<'EOF'
import json, sys
from pathlib import Path
warm, steps = Path(sys.argv[1]), Path(sys.argv[2])
def f(x, spec=".2f"):
    return format(x, spec) if isinstance(x, (int, float)) else "-"
def pair(a, b, key):
    return f"{f((a or {}).get(key), '.0f')}/{f((b or {}).get(key), '.0f')}"
if warm.exists():
    d = json.loads(warm.read_text())
    print(f"warmup_probe: {d['shape']} {d['rows']} rows x {d['tokens']} tokens on {d.get('device', '?')}, "
          f"first N = {d['first_steps']} decode steps; torch {d.get('torch', '?')}")
    for group in ("decodes", "expandable"):
        for k, r in d[group].items():
            label = f"{k} ({'expandable segments' if group == 'expandable' else 'default allocator'})"
            if "warmup_s" not in r:
                print(f"  {label}: {r.get('skipped') or r.get('error', '?')}")
                continue
            a, b, s = r["first"], r["second"], r["split"]
            fa, sa = a["allocator"], b["allocator"]
            print(f"  {label}: warm-up {f(r['warmup_s'])} s = 1st call {f(a['seconds'])} - 2nd {f(b['seconds'])}; "
                  f"prefill {f(s['prefill_s'], '+.2f')}, first N steps {f(s['first_steps_s'], '+.2f')}, rest {f(s['rest_steps_s'], '+.2f')}, "
                  f"tail {f(s['tail_s'], '+.2f')}, graph capture {f(a['graph_capture_s'])}/{f(b['graph_capture_s'])} s")
            print(f"    first step {f(a['first_step_ms'], '.1f')} vs {f(b['first_step_ms'], '.1f')} ms; cudaMalloc "
                  f"{pair(fa, sa, 'segment.all.allocated')}, device allocs {pair(fa, sa, 'num_device_alloc')}, frees "
                  f"{pair(fa, sa, 'num_device_free')}, alloc retries {pair(fa, sa, 'num_alloc_retries')} (1st/2nd); "
                  f"{s['steps_with_device_allocs'] if s['steps_with_device_allocs'] is not None else '-'} steps "
                  f"allocated: {f(s['excess_ms_per_step_with_device_allocs'], '+.1f')} ms each vs "
                  f"{f(s['excess_ms_per_step_without'], '+.1f')} without; import {f(r['import_s'])} s, device init "
                  f"{f(r['device_init_s'])} s, build {f(r['build_s'])} s; warnings {len(r['warnings'])}")
    for k, v in d["allocator_share_s"].items():
        print(f"  allocator share ({k}: default minus expandable segments): {f(v)} s")
    u = d.get("update")
    if u and "calls" in u:
        c = u["calls"]
        print(f"  update ({u['rows']} rows, {u['tokens']} tokens): warm-up {f(u['warmup_s'])} s = 1st call "
              f"{f(c[0]['seconds'])} - 2nd {f(c[1]['seconds'])}; cudaMalloc "
              f"{pair(c[0]['allocator'], c[1]['allocator'], 'segment.all.allocated')} (1st/2nd)")
    elif u:
        print(f"  update: {u.get('skipped') or u.get('error', '?')}")
else:
    print(f"warmup_probe: no JSON ({warm})")
if steps.exists():
    for m, rows in json.loads(steps.read_text()).items():
        t = [(r.get("time/step_s"), r.get("time/rollout_s")) for r in rows]
        if len(t) >= 2:
            print(f"bench {m}: step 1 {f(t[0][0])} s (generation {f(t[0][1])}) vs step 2 {f(t[1][0])} s "
                  f"(generation {f(t[1][1])}): step 1 carries the process's warm-up, on different rows")
        elif t:
            print(f"bench {m}: step 1 {f(t[0][0])} s (generation {f(t[0][1])}); no step 2")
EOF
echo "exit codes: $(for i in "${!NAMES[@]}"; do printf '%s=%s ' "${NAMES[$i]}" "${CODES[$i]}"; done)"
exit $failed
