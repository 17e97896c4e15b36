#!/usr/bin/env bash
# stage_dmc.sh: runs HERE, on the CPU machine, before a GPU session (no device time). From the repo root:
#   bash tools/gpu/stage_dmc.sh
# What the DMC runs (tools/gpu/sac_simba_dmc.sh) need on the GPU machine, whose image has torch, numpy, scipy, lxml,
# absl-py, etils, tensorboard and pytest but no MuJoCo, dm_control, gymnasium or tyro:
# 1. the missing wheels for its Python 3.12 into .whl (≈ 33 MB; mujoco is 27 MB of it);
# 2. dm_control, copied from this venv without locomotion/, the dog's meshes, mujoco/testing and blender/ (≈ 4 MB of
#    its 57 MB wheel; the suite's other domains import none of them) into .gpukit/dmc, so that wheels, the copy and
#    the working tree stay under the device tool's 64 MiB a call.
# Both folders are ignored; each call names them in `carry`: carry=[".whl", ".gpukit"].
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
git check-ignore -q .whl/x || echo "/.whl/" >>"$exclude"
rm -rf .whl .gpukit/dmc
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    mujoco==3.17.0 glfw==2.11.0 pyopengl dm-env==1.6 dm-tree gymnasium==1.4.0 farama-notifications==0.0.6 \
    tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 ale-py==0.12.1
src=$(python -c "import dm_control, os; print(os.path.dirname(dm_control.__file__))")
mkdir -p .gpukit/dmc && cp -r "$src" .gpukit/dmc/
(cd .gpukit/dmc/dm_control && rm -rf locomotion suite/dog_assets mujoco/testing blender suite/all_domains.png &&
    find . -name __pycache__ -prune -exec rm -rf {} +)
du -sh .whl .gpukit/dmc
