#!/usr/bin/env bash
# side_by_side.sh: runs ON THE GPU MACHINE, after install.sh. For each task, CleanRL's script, LeanRL's script and
# ours run one after the other on the same env with the same hyperparameters, each for a fixed number of env steps;
# the speed is measured after a burn-in (random steps, compilation, capture) from the runs' TensorBoard events
# (tools/gpu/rate.py) and appended to /tmp/gpukit/sbs/side_by_side.csv (kept across calls), copied to
# $OUT/side_by_side.csv with the logs in $OUT/side_by_side_logs.tar.gz.
#   bash tools/gpu/side_by_side.sh td3 sac            tasks: td3 sac ppo dqn ppo_atari; mujoco = td3 sac ppo
#   bash tools/gpu/side_by_side.sh --dry-run all      print the commands only (anywhere)
#   DEVICE=cpu SMOKE=1 bash tools/gpu/side_by_side.sh td3     tiny budgets on CPU, to check the pipeline
# Settings (environment): OURS_FLAGS = the flag sets of our runs, one run per ';'-separated set (default
# ';--compile --cudagraphs': eager, then compiled and captured); LEANRL_FLAGS (default '--compile --cudagraphs', as
# LeanRL names them); DEADLINE = seconds after which no run starts and runs are stopped (default 560: one device call);
# RUN_TIMEOUT (default 300 s a run); PEERS (default /tmp/gpukit/peers); PY (default python3).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DRY=0; [ "${1:-}" = --dry-run ] && { DRY=1; shift; }
TASKS=("$@"); [ ${#TASKS[@]} -eq 0 ] && { sed -n '2,13p' "$0"; exit 2; }
[ "${TASKS[*]}" = all ] && TASKS=(td3 sac ppo dqn ppo_atari)
[ "${TASKS[*]}" = mujoco ] && TASKS=(td3 sac ppo)
[ -f /tmp/site/tyro/__init__.py ] && source "$REPO/tools/gpu/env.sh"
DEVICE=${DEVICE:-cuda}; SMOKE=${SMOKE:-0}; PY=${PY:-python3}; PEERS=${PEERS:-/tmp/gpukit/peers}
OURS_FLAGS=${OURS_FLAGS-;--compile --cudagraphs}; LEANRL_FLAGS=${LEANRL_FLAGS---compile --cudagraphs}
DEADLINE=${DEADLINE:-560}; RUN_TIMEOUT=${RUN_TIMEOUT:-300}
W=${SBS_DIR:-/tmp/gpukit/sbs}; OUTDIR=${OUT:-$W/out}; mkdir -p "$W/logs" "$OUTDIR"
NO_CUDA=""; [ "$DEVICE" = cpu ] && NO_CUDA="--no-cuda"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); [ "$DEVICE" = cpu ] && GPU=cpu
TORCH=$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)
OURS_COMMON="--seed 1 --device $DEVICE --eval-every 0 --checkpoint-every 0 --no-progress"
# on CPU, one thread each (ours would take 2 by default, the peers all cores)
[ "$DEVICE" = cpu ] && { OURS_COMMON+=" --threads 1"; export OMP_NUM_THREADS=1; }

# task TASK: sets COMMON (flags all three share), the per-implementation commands, the step budgets, FROM (first
# measured step), UPS (gradient steps per env step, for updates/s) and LOG (our --log-every)
task() {
    LEANRL=""; OURS=""
    case $1 in
    td3)  # CleanRL's TD3 defaults (ours are the same); learning starts at 5k instead of 25k to save time
        if [ "$SMOKE" = 1 ]; then LS=200 FROM=300 TOTAL=700 LOG=100; else LS=5000 FROM=6000 TOTAL=12000 LOG=500; fi
        COMMON="--env-id Hopper-v5 --total-timesteps $TOTAL --learning-starts $LS"; UPS=1
        CLEANRL="cleanrl/td3_continuous_action.py"; LEANRL="leanrl/td3_continuous_action_torchcompile.py"
        OURS="agents/td3.py" ;;
    sac)  # CleanRL's SAC: MLP 256-256, Adam, α from 1 with target entropy −|A|, 1 critic update per step
        if [ "$SMOKE" = 1 ]; then LS=200 FROM=300 TOTAL=600 LOG=100; else LS=5000 FROM=6000 TOTAL=10000 LOG=500; fi
        COMMON="--env-id Hopper-v5 --total-timesteps $TOTAL --learning-starts $LS"; UPS=1
        CLEANRL="cleanrl/sac_continuous_action.py"; LEANRL="leanrl/sac_continuous_action_torchcompile.py"
        OURS="agents/sac_simba.py --network mlp --no-normalize-obs --clipped-double-q on --learning-rate 3e-4"
        OURS+=" --weight-decay 0 --alpha-learning-rate 1e-3 --initial-alpha 1 --target-entropy-scale 1 --updates-per-step 1" ;;
    ppo)  # CleanRL's ppo_continuous_action defaults (ours are the same): 2048 steps, 10 epochs x 32 minibatches
        if [ "$SMOKE" = 1 ]; then TOTAL=2560 FROM=1280 LOG=128 COMMON="--num-steps 128 --num-minibatches 4 --update-epochs 1"
        else TOTAL=40960 FROM=20480 LOG=2048 COMMON=""; fi  # LeanRL logs every 10th iteration: measured 10 -> 20
        COMMON="--env-id Hopper-v5 --total-timesteps $TOTAL $COMMON"; UPS=$(awk 'BEGIN {print 10 * 32 / 2048}')
        [ "$SMOKE" = 1 ] && UPS=$(awk 'BEGIN {print 4 / 128}')
        CLEANRL="cleanrl/ppo_continuous_action.py"; LEANRL="leanrl/ppo_continuous_action_torchcompile.py"
        OURS="agents/ppo.py" ;;
    dqn)  # CleanRL's dqn_atari (MSE loss, Nature CNN) vs our Double DQN (same recipe, --loss mse); LeanRL has no Atari DQN
        if [ "$SMOKE" = 1 ]; then LS=500 FROM=600 TOTAL=1200 LOG=100 BUF=2000; else LS=10000 FROM=12000 TOTAL=30000 LOG=1000 BUF=100000; fi
        COMMON="--total-timesteps $TOTAL --learning-starts $LS --buffer-size $BUF"; UPS=0.25
        CLEANRL="cleanrl/dqn_atari.py --env-id BreakoutNoFrameskip-v4"
        OURS="agents/ddqn.py --env-id ALE/Breakout-v5 --loss mse" ;;
    ppo_atari)  # Breakout, 8 envs x 128 steps, 4 epochs x 4 minibatches (CleanRL's ppo_atari recipe: our Atari defaults)
        if [ "$SMOKE" = 1 ]; then TOTAL=2560 FROM=1280 COMMON="--num-envs 4 --num-steps 32"; UPS=$(awk 'BEGIN {print 16 / 128}')
        else TOTAL=61440 FROM=20480 COMMON=""; UPS=$(awk 'BEGIN {print 16 / 1024}'); fi
        COMMON="--total-timesteps $TOTAL $COMMON"; LOG=1024
        CLEANRL="cleanrl/ppo_atari_envpool.py --env-id Breakout-v5"; LEANRL="leanrl/ppo_atari_envpool_torchcompile.py --env-id Breakout-v5"
        OURS="agents/ppo.py --env-id ALE/Breakout-v5 --env-backend envpool" ;;
    *) echo "unknown task $1" >&2; return 1 ;;
    esac
}

START=$SECONDS
# run TASK IMPL FLAGS PYTHONPATH-PREFIX SCRIPT ARGS...: one run in a fresh folder, its speed appended to the CSV
run() {
    local task=$1 impl=$2 flags=$3 prefix=$4; shift 4
    local dir="$W/$task/$impl" log="$W/logs/${task}__${impl}.log" left=$((DEADLINE - (SECONDS - START)))
    local command="$PY $*"
    echo "[$task/$impl] $command"
    [ $DRY = 1 ] && return
    if [ $left -lt 60 ]; then status="skipped: deadline"; else
        rm -rf "$dir"; mkdir -p "$dir"
        local limit=$((left - 10 < RUN_TIMEOUT ? left - 10 : RUN_TIMEOUT)) begin=$SECONDS
        local path=${PYTHONPATH:-}; [ -n "$prefix" ] && path="$prefix${path:+:$path}"
        (cd "$dir" && echo "\$ $command" >"$log" && PYTHONPATH="$path" timeout -s INT -k 20 $limit $PY "$@" >>"$log" 2>&1)
        local code=$?
        status="ok"; [ $code = 124 ] && status="timeout after ${limit}s"; [ $code != 0 ] && [ $code != 124 ] && status="exit $code"
        echo "    $status in $((SECONDS - begin)) s: $(tail -c 300 "$log" | tr '\n\r' '  ' | tail -c 160)"
    fi
    $PY "$REPO/tools/gpu/rate.py" "$dir/runs" --from-step $FROM --csv "$W/side_by_side.csv" --updates-per-step $UPS \
        --field task=$task --field implementation=$impl --field "flags=$flags" --field "status=$status" \
        --field "device=$GPU" --field "torch=$TORCH" --field "command=$command" | sed 's/^/    /'
}

for t in "${TASKS[@]}"; do
    task "$t" || exit 2
    run "$t" cleanrl "" "$PEERS/cleanrl" "$PEERS/"$CLEANRL $COMMON --seed 1 $NO_CUDA
    if [ -n "$LEANRL" ]; then
        flags=$LEANRL_FLAGS; [ "$DEVICE" = cpu ] && flags=""  # CUDA graphs need CUDA; compile on CPU takes minutes
        run "$t" leanrl "$flags" "$REPO/tools/gpu/stubs" "$PEERS/"$LEANRL $COMMON --seed 1 $NO_CUDA $flags
    else echo "[$t/leanrl] LeanRL has no script for this task"; fi
    if [ -n "$OURS" ]; then
        IFS=';' read -r -a sets <<<"$OURS_FLAGS"; [ ${#sets[@]} -eq 0 ] && sets=("")
        [ "$DEVICE" = cpu ] && sets=("")  # ours eager only on CPU
        for i in "${!sets[@]}"; do
            impl=ours; [ -n "${sets[$i]}" ] && impl="ours$i"
            # shellcheck disable=SC2086
            run "$t" $impl "${sets[$i]}" "" "$REPO/"$OURS $COMMON $OURS_COMMON --log-every $LOG --runs-dir "$W/$t/$impl/runs" ${sets[$i]}
        done
    else echo "[$t/ours] no agent of ours for this task"; fi
done
[ $DRY = 1 ] && exit 0
cp "$W/side_by_side.csv" "$OUTDIR/side_by_side.csv"
tar -czf "$OUTDIR/side_by_side_logs.tar.gz" -C "$W" logs
column -s, -t <"$W/side_by_side.csv" | cut -c1-150
