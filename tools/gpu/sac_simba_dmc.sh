#!/usr/bin/env bash
# sac_simba_dmc.sh: runs ON THE GPU MACHINE (issue 48), after tools/gpu/stage_dmc.sh here. One device call:
#   run(command="DEADLINE=520 bash tools/gpu/sac_simba_dmc.sh", carry=[".whl", ".gpukit"], timeout_s=600)
# SAC+SimBa with benchmarks/sac-simba-dmc.toml's flags and [config].simba on dmc:walker-walk and dmc:cheetah-run,
# seeds 1-10 as one group of 10 members per task (a process each, both on the one GPU), --device cuda --cudagraphs;
# a task whose captured run fails in its first 300 s restarts eagerly. Beside them, the cuda-marked tests of
# tests/test_graphs.py. At DEADLINE seconds the runs get SIGTERM (they checkpoint and stop); $OUT then holds
# summary.txt (versions, flags, GPU load each minute, the last progress lines), each task's log, pytest.log and
# runs.tgz (event files, summary.json, args.json). Changed from the plan: --checkpoint-every 1000000, so that no
# periodic checkpoint of ten 1M-transition buffers costs device time (the SIGTERM one is still written).
# Settings: DEADLINE (default 530), SEEDS (default 1-10), TASKS (default "walker-walk cheetah-run"), GRAPHS
# (default --cudagraphs; empty for eager), DEVICE (default cuda), EXTRA (flags appended), SKIP_PIP (a dry run here).
export PYTHONUNBUFFERED=1
T0=$(date +%s); DEADLINE=${DEADLINE:-530}; SEEDS=${SEEDS:-1 2 3 4 5 6 7 8 9 10}
TASKS=${TASKS:-walker-walk cheetah-run}; OUT=${OUT:-/tmp/sac_simba_dmc_out}; mkdir -p "$OUT"
[ -n "${SKIP_PIP:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/.gpukit/dmc:$PWD
S=$OUT/summary.txt
{ date -u; git log -1 --format=%H 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, numpy, mujoco, gymnasium; print(sys.version.split()[0], 'torch', torch.__version__,
torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA', 'numpy', numpy.__version__,
'mujoco', mujoco.__version__, 'gymnasium', gymnasium.__version__)"
  echo "cpus $(nproc)"; } >>"$S" 2>&1
python3 -c "
import tomllib; p = tomllib.load(open('benchmarks/sac-simba-dmc.toml', 'rb'))
open('/tmp/flags', 'w').write(' '.join(p['flags'].replace('--checkpoint-every 12500', '--checkpoint-every 1000000').split()))
open('/tmp/simba', 'w').write(' '.join(p['config']['simba'].split()))" || exit 4
FLAGS=$(cat /tmp/flags); SIMBA=$(cat /tmp/simba)
echo "flags: $FLAGS" >>"$S"; echo "simba: $SIMBA" >>"$S"

launch() {  # name env [flags...]: one group of all SEEDS, in the background; prints its pid
    local name=$1 env=$2; shift 2
    # shellcheck disable=SC2086  # the flag strings split into words on purpose
    python3 agents/sac_simba.py --env-id "$env" --seeds $SEEDS --runs-dir "runs/gpu-$name" --device "${DEVICE:-cuda}" \
        $FLAGS $SIMBA ${EXTRA:-} "$@" >"$OUT/$name.log" 2>&1 &
    echo $!
}
declare -A PID MODE
for task in $TASKS; do PID[$task]=$(launch "$task" "dmc:$task" ${GRAPHS---cudagraphs}); MODE[$task]=graphs; done
(sleep 5; timeout 300 python3 -m pytest -m cuda tests/test_graphs.py -q -p no:cacheprovider >"$OUT/pytest.log" 2>&1
 echo "pytest rc=$?" >>"$S") &
TESTS=$!
(while sleep 60; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader >>"$S" 2>&1; done) &
MONITOR=$!
while :; do
    sleep 5; now=$(($(date +%s) - T0)); alive=0
    for task in $TASKS; do
        p=${PID[$task]}; [ -z "$p" ] && continue
        if kill -0 "$p" 2>/dev/null; then alive=1; continue; fi
        wait "$p"; rc=$?; echo "$task (${MODE[$task]}) exited rc=$rc at ${now}s" >>"$S"; PID[$task]=
        if [ $rc -ne 0 ] && [ "${MODE[$task]}" = graphs ] && [ $now -lt 300 ]; then  # eager CUDA instead
            MODE[$task]=eager; PID[$task]=$(launch "$task-eager" "dmc:$task"); alive=1
        fi
    done
    [ $alive = 0 ] && break
    if [ $now -ge "$DEADLINE" ]; then
        for task in $TASKS; do [ -n "${PID[$task]}" ] && kill -TERM "${PID[$task]}"; done
        echo "SIGTERM at ${now}s" >>"$S"
        # only the runs this script started: a dry run here must not touch the machine's other runs
        running() { for task in $TASKS; do [ -n "${PID[$task]}" ] && kill -0 "${PID[$task]}" 2>/dev/null && return 0; done; return 1; }
        for _ in $(seq 40); do sleep 1; running || break; done
        if running; then
            for task in $TASKS; do [ -n "${PID[$task]}" ] && kill -KILL "${PID[$task]}" 2>/dev/null; done
            echo "SIGKILL at $(($(date +%s) - T0))s" >>"$S"
        fi
        break
    fi
done
for task in $TASKS; do tr '\r' '\n' <"$OUT/$task.log" 2>/dev/null | grep -E "SPS" | tail -3 >>"$S"; done
kill $TESTS $MONITOR 2>/dev/null
find runs/gpu-* -maxdepth 2 \( -name 'events.out.tfevents*' -o -name summary.json -o -name args.json \) -print0 |
    tar czf "$OUT/runs.tgz" --null -T -
echo "done at $(($(date +%s) - T0))s" >>"$S"; cat "$S"
