#!/usr/bin/env bash
# ppo_scale.sh: runs ON THE GPU MACHINE, after install.sh (issue 17 items 3 and 5; the recipes are docs/agents/ppo.md's
# "Many envs"). Results go to $OUT (or /tmp/gpukit/ppo/out); runs and logs stay in /tmp/gpukit/ppo between calls.
#   bash tools/gpu/ppo_scale.sh cartpole           CartPole's ceiling (`bench ppo` at 65,536 … 262,144 envs, and the
#                                                  carried-over 5.45M command) -> ppo_cartpole.csv; then the time to
#                                                  solve (5 seeds at 256 envs, 3 at 4,096) -> cartpole_solve.csv
#   bash tools/gpu/ppo_scale.sh ant-start          PPO on warp:Ant-v5, 4,096 worlds, in the background (setsid), stopped
#                                                  by SIGTERM after ANT_SECONDS (600: the target's 10 minutes)
#   bash tools/gpu/ppo_scale.sh ant-poll [S]       wait while it runs, at most S seconds (default 540), printing its
#                                                  progress; then its curve against wall-clock -> ant_curve.csv, ant.log
#   bash tools/gpu/ppo_scale.sh continual-start    benchmarks/warp-continual.toml in the background (4 runs at once)
#   bash tools/gpu/ppo_scale.sh continual-poll [S] wait, then each run's curve -> continual/<run>.csv, summaries
#   bash tools/gpu/ppo_scale.sh --dry-run cartpole …   print the commands only
# Settings: DEVICE (cuda), PY (python3), ANT_SECONDS (600), DEADLINE (560 s: no CartPole run starts after it), ANT_ENVS
# (4096; a CPU check of the pipeline: ANT_ENVS=4 DEVICE=cpu ANT_SECONDS=40 … ant-start, then ant-poll 60).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DRY=0; [ "${1:-}" = --dry-run ] && { DRY=1; shift; }
[ -f /tmp/site/tyro/__init__.py ] && source "$REPO/tools/gpu/env.sh"
DEVICE=${DEVICE:-cuda}; PY=${PY:-python3}; ANT_SECONDS=${ANT_SECONDS:-600}; DEADLINE=${DEADLINE:-560}
GRAPHS=; [ "$DEVICE" = cuda ] && GRAPHS=--cudagraphs
W=/tmp/gpukit/ppo; OUTDIR=${OUT:-$W/out}; mkdir -p "$W" "$OUTDIR"
cd "$REPO"

# the recipes (docs/agents/ppo.md, "Many envs"); --num-envs, budgets and cadences are added per use
CARTPOLE="--num-steps 16 --num-minibatches 4 --update-epochs 4 --learning-rate 3e-3"
ANT="--env-id warp:Ant-v5 --num-envs ${ANT_ENVS:-4096} --num-steps 80 --num-minibatches 32 --update-epochs 4 --gamma 0.97 --gae-lambda 0.95 --clip-coef 0.3 --no-clip-vloss --ent-coef 0.01 --learning-rate 3e-4 --no-anneal-lr --hidden-sizes 256 256 --net.activation relu"

say() { echo "$*"; }
time_left() { echo $((DEADLINE - SECONDS)); }

cartpole() {
    local csv=$W/ppo_cartpole.csv
    [ -f "$csv" ] || echo "num_envs,flags,env_steps_per_s,updates_per_s,timed_steps,status,device,command" >"$csv"
    # (envs, extra flags): the recipe at three sizes compiled and captured, eager at 65,536, and the carried-over command
    local cases=("65536|--compile --cudagraphs" "131072|--compile --cudagraphs" "262144|--compile --cudagraphs" "65536|"
                 "65536|old")
    for case in "${cases[@]}"; do
        local n=${case%%|*} extra=${case#*|} flags
        flags="$CARTPOLE $extra"
        [ "$extra" = old ] && flags="--num-steps 32 --num-minibatches 4 --update-epochs 4 --no-normalize-obs --no-normalize-reward"
        local steps per_iteration
        steps=$(sed 's/.*--num-steps \([0-9]*\).*/\1/' <<<"$flags"); per_iteration=$((n * steps))
        local args=(bench ppo --env-id torch:CartPole-v1 --device $DEVICE --num-envs $n --burnin $((3 * per_iteration))
                    --steps $((20 * per_iteration)) --agent-flags="$flags" --json-out)
        say "cleanrl-plus ${args[*]}"
        [ $DRY = 1 ] && continue
        [ "$(time_left)" -lt 60 ] && { say "    skipped: deadline"; continue; }
        local log=$W/cartpole-$n-${extra// /}.log
        timeout -k 10 $(($(time_left) - 10 < 200 ? $(time_left) - 10 : 200)) $PY -m commands.cli "${args[@]}" >"$log" 2>&1
        local code=$? line
        line=$(grep '^{' "$log" | tail -1)
        $PY - "$line" "$code" "$n" "$extra" "cleanrl-plus ${args[*]}" >>"$csv" <<'EOF'
import csv, json, sys
line, code, n, extra, command = sys.argv[1:]
result = json.loads(line) if line else {}
status = "ok" if code == "0" else ("timeout" if code == "124" else f"exit {code}")
csv.writer(sys.stdout).writerow([n, extra or "eager", result.get("env_steps_per_second"), result.get("updates_per_second"),
                                 result.get("timed_steps"), status, result.get("device"), command])
EOF
        tail -1 "$csv" | cut -d, -f1-6 | sed 's/^/    /'
    done
    # time to solve: the whole run after the imports (tools/gpu/time_to_solve.py), evaluated once at the end
    local solve=$W/cartpole_solve.csv
    for spec in "256 65536 1 2 3 4 5" "4096 1048576 1 2 3"; do
        set -- $spec; local n=$1 budget=$2; shift 2
        for seed in "$@"; do
            [ $DRY = 0 ] && [ "$(time_left)" -lt 40 ] && { say "    skipped: deadline"; continue; }
            local command=(timeout -k 10 60 $PY tools/gpu/time_to_solve.py --target 500 --csv "$solve" -- --env-id torch:CartPole-v1
                           --device $DEVICE --num-envs $n $CARTPOLE --total-timesteps $budget --eval-every 0 --checkpoint-every 0
                           --no-progress --seed $seed --runs-dir $W/runs)
            say "${command[*]}"
            [ $DRY = 1 ] || "${command[@]}" 2>&1 | grep '^{' | cut -c1-160
        done
    done
    [ $DRY = 1 ] && return
    cp "$csv" "$solve" "$OUTDIR"/ 2>/dev/null; column -s, -t <"$csv" | cut -c1-120
}

ant_start() {
    local args=(agents/ppo.py $ANT --device $DEVICE $GRAPHS --total-timesteps 400000000 --eval-every 5000000
                --checkpoint-every 0 --no-progress --runs-dir $W/runs --run-name ant)
    say "setsid timeout -s TERM -k 60 $ANT_SECONDS $PY ${args[*]}"
    [ $DRY = 1 ] && return
    date +%s.%N >$W/ant.start
    setsid nohup timeout -s TERM -k 60 "$ANT_SECONDS" $PY "${args[@]}" >$W/ant.log 2>&1 </dev/null &
    echo $! >$W/ant.pid
    sleep 5; tail -3 $W/ant.log
}

poll() {  # poll NAME PIDFILE SECONDS: print progress every 60 s until the process ends or SECONDS pass
    local name=$1 pidfile=$2 limit=$3 waited=0
    while kill -0 "$(cat "$pidfile")" 2>/dev/null && [ $waited -lt "$limit" ]; do
        sleep 30; waited=$((waited + 30))
        [ $((waited % 60)) = 0 ] && { echo "-- $name, ${waited} s"; tail -c 400 "$W/$name.log" | tr '\r' '\n' | tail -2; }
    done
    kill -0 "$(cat "$pidfile")" 2>/dev/null && echo "$name: still running" || echo "$name: finished"
}

ant_poll() {
    [ $DRY = 1 ] && { say "poll $W/ant.log; python3 tools/gpu/curve.py $W/runs/ant --start \$(cat $W/ant.start) --csv \$OUT/ant_curve.csv"; return; }
    poll ant $W/ant.pid "${1:-540}"
    $PY tools/gpu/curve.py $W/runs/ant --start "$(cat $W/ant.start)" --csv "$OUTDIR/ant_curve.csv"
    cp $W/ant.log "$OUTDIR/"; cp $W/runs/ant/summary.json "$OUTDIR/ant_summary.json" 2>/dev/null
    grep eval/episodic_return "$OUTDIR/ant_curve.csv" | tail -12
}

continual_start() {
    local args=(-m commands.cli sweep benchmarks/warp-continual.toml --runs-dir $W/runs/warp-continual)
    say "setsid $PY ${args[*]}"
    [ $DRY = 1 ] && return
    date +%s.%N >$W/continual.start
    setsid nohup $PY "${args[@]}" >$W/continual.log 2>&1 </dev/null &
    echo $! >$W/continual.pid
    sleep 5; tail -3 $W/continual.log
}

continual_poll() {
    [ $DRY = 1 ] && { say "poll $W/continual.log; curve.py of each run -> \$OUT/continual/"; return; }
    poll continual $W/continual.pid "${1:-540}"
    mkdir -p "$OUTDIR/continual"
    for run_dir in $W/runs/warp-continual/*__*; do
        [ -d "$run_dir" ] || continue
        $PY tools/gpu/curve.py "$run_dir" --start "$(cat $W/continual.start)" --tags eval/episodic_return continual/task charts/SPS \
            --csv "$OUTDIR/continual/$(basename "$run_dir").csv"
        cp "$run_dir/summary.json" "$OUTDIR/continual/$(basename "$run_dir").summary.json" 2>/dev/null
    done
    cp $W/continual.log "$OUTDIR/"
    $PY -m commands.cli report $W/runs/warp-continual --baseline ppo 2>&1 | tail -20
}

case "${1:-}" in
    cartpole) cartpole ;;
    ant-start) ant_start ;;
    ant-poll) ant_poll "${2:-540}" ;;
    continual-start) continual_start ;;
    continual-poll) continual_poll "${2:-540}" ;;
    *) echo "usage: $0 [--dry-run] cartpole | ant-start | ant-poll [S] | continual-start | continual-poll [S]"; exit 2 ;;
esac
