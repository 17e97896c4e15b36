# env.sh: sourced ON THE GPU MACHINE by install.sh, side_by_side.sh and warp_scale.sh (or by hand:
# `source tools/gpu/env.sh`): the packages install.sh put in /tmp/site, this repo, and the `cleanrl-plus` command.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH=/tmp/site:$REPO${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 MUJOCO_GL=egl
# envpool's Atari ROMs are ale-py's (the same files); envpool also lists vizdoom/maps when it is imported
export ENVPOOL_ASSETS_PATH=/tmp/gpukit/envpool_assets
if [ -d /tmp/site/ale_py/roms ] && [ ! -e $ENVPOOL_ASSETS_PATH/atari/roms ]; then
    mkdir -p $ENVPOOL_ASSETS_PATH/atari $ENVPOOL_ASSETS_PATH/vizdoom/maps
    ln -s /tmp/site/ale_py/roms $ENVPOOL_ASSETS_PATH/atari/roms
fi
cleanrl-plus() { python3 -m commands.cli "$@"; }
