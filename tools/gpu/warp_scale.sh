#!/usr/bin/env bash
# warp_scale.sh: runs ON THE GPU MACHINE, once install.sh has installed warp-lang and mujoco-warp (the part that
# completes warp-lang). Two steps, each with its output in $OUT (or /tmp/gpukit/warp/out):
# 1. the project's CUDA tests, `pytest -m cuda` (exit 5, "no tests ran", is accepted) -> pytest_cuda.log;
# 2. `cleanrl-plus bench env` of the five MuJoCo Warp models at 1 ... 16,384 worlds, random actions on the GPU,
#    one process a run (an out-of-memory run fails alone) -> warp_scale.csv, logs in warp_scale_logs.tar.gz.
#   bash tools/gpu/warp_scale.sh                  both steps
#   bash tools/gpu/warp_scale.sh --no-tests       throughput only
#   MODELS="Hopper Humanoid" SIZES="1 4096" bash tools/gpu/warp_scale.sh --no-tests
#   bash tools/gpu/warp_scale.sh --dry-run        print the commands only
# Settings: ITERS (timed iterations a run, default 200), ITERS1 (at one world, default 2,000), DEVICE (cuda), RUN_TIMEOUT (default 150 s a run),
# DEADLINE (default 560 s: no run starts after it), TEST_TIMEOUT (default 240 s for the tests).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TESTS=1; DRY=0
for arg in "$@"; do case $arg in --no-tests) TESTS=0 ;; --dry-run) DRY=1 ;; esac; done
[ -f /tmp/site/tyro/__init__.py ] && source "$REPO/tools/gpu/env.sh"
MODELS=${MODELS:-Hopper HalfCheetah Walker2d Ant Humanoid}; SIZES=${SIZES:-1 64 1024 4096 16384}
ITERS=${ITERS:-200}; ITERS1=${ITERS1:-2000}; DEVICE=${DEVICE:-cuda}; PY=${PY:-python3}; RUN_TIMEOUT=${RUN_TIMEOUT:-150}; DEADLINE=${DEADLINE:-560}; TEST_TIMEOUT=${TEST_TIMEOUT:-240}
W=/tmp/gpukit/warp; OUTDIR=${OUT:-$W/out}; mkdir -p "$W/logs" "$OUTDIR"
cd "$REPO"

if [ $TESTS = 1 ]; then
    echo "== pytest -m cuda"
    if [ $DRY = 0 ]; then
        per_test=""; $PY -c 'import pytest_timeout' 2>/dev/null && per_test="--timeout 300"  # on the GPU image
        timeout $TEST_TIMEOUT $PY -m pytest -m cuda -q -p no:cacheprovider $per_test tests 2>&1 | tee "$OUTDIR/pytest_cuda.log" | tail -15
        code=${PIPESTATUS[0]}; [ "$code" = 5 ] && echo "(no test is marked cuda yet)"; echo "pytest exit $code"
    fi
fi

echo "== bench env: $MODELS at $SIZES worlds"
TORCH=$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)
WARP=$($PY -c 'import warp; print(warp.__version__)' 2>/dev/null)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
CSV=$W/warp_scale.csv
[ -f "$CSV" ] || echo "model,num_envs,env_steps_per_s,timed_steps,status,device,torch,warp,command" >"$CSV"
for model in $MODELS; do
    for n in $SIZES; do
        iters=$ITERS; [ "$n" = 1 ] && iters=$ITERS1
        args=(bench env --env-id "warp:$model-v5" --device $DEVICE --num-envs "$n" --steps $((n * iters)) --json-out)
        echo "cleanrl-plus ${args[*]}"
        [ $DRY = 1 ] && continue
        left=$((DEADLINE - SECONDS)); [ $left -lt 30 ] && { echo "    skipped: deadline"; continue; }
        log="$W/logs/$model-$n.log"
        timeout -k 10 $((left - 10 < RUN_TIMEOUT ? left - 10 : RUN_TIMEOUT)) $PY -m commands.cli "${args[@]}" >"$log" 2>&1
        code=$?
        $PY - "$log" "$code" "$model" "$n" "$GPU" "$TORCH" "$WARP" "cleanrl-plus ${args[*]}" >>"$CSV" <<'EOF'
import csv, json, sys
log, code, model, n, gpu, torch, warp, command = sys.argv[1:]
text = open(log).read()
result = next((json.loads(line) for line in reversed(text.splitlines()) if line.startswith("{")), {})
status = "ok" if code == "0" else ("timeout" if code == "124" else f"exit {code}: {text.strip().splitlines()[-1][:120] if text.strip() else ''}")
if "graph capture failed" in text:
    status += " (eager: graph capture failed)"
csv.writer(sys.stdout).writerow([model, n, result.get("env_steps_per_second"), result.get("timed_steps"), status, gpu,
                                 torch, warp, command])
EOF
        tail -1 "$CSV" | cut -d, -f1-5 | sed 's/^/    /'
    done
done
[ $DRY = 1 ] && exit 0
cp "$CSV" "$OUTDIR/warp_scale.csv"
tar -czf "$OUTDIR/warp_scale_logs.tar.gz" -C "$W" logs
column -s, -t <"$CSV" | cut -c1-110
