#!/usr/bin/env bash
# install.sh: runs ON THE GPU MACHINE, once per device call, with the folders that call carried:
#   bash tools/gpu/install.sh .gpukit/part1 .gpukit/peers .gpukit/assets    (first call)
#   bash tools/gpu/install.sh .gpukit/part2                                   (each later call, one part each)
# Copies the chunks into /tmp/gpukit/chunks, the peers into /tmp/gpukit/peers and envpool's metadata into
# /tmp/gpukit/envpool_assets (all of which last while the machine stays warm); installs into /tmp/site every wheel
# of MANIFEST whose chunks have all arrived (sha256-checked, each once); then prints what imports, with versions,
# and the GPU. Idempotent; with no argument it only reports.
set -euo pipefail
G=/tmp/gpukit
mkdir -p $G/chunks $G/wheels $G/installed /tmp/site
for folder in "$@"; do
    if [ "$(basename "$folder")" = peers ]; then
        rm -rf $G/peers && cp -r "$folder" $G/peers
    elif [ "$(basename "$folder")" = assets ]; then
        mkdir -p $G/envpool_assets && cp -r "$folder"/. $G/envpool_assets/
    else
        cp "$folder"/* $G/chunks/
    fi
done

new=(); waiting=()
if [ -f $G/chunks/MANIFEST ]; then
    while read -r sha size chunks group wheel; do
        [ -e $G/installed/"$wheel" ] && continue
        have=$(find $G/chunks -maxdepth 1 -name "$wheel.*" | wc -l)
        if [ "$have" -lt "$chunks" ]; then waiting+=("${wheel%%-*} $have/$chunks"); continue; fi
        cat $G/chunks/"$wheel".* >$G/wheels/"$wheel"
        echo "$sha  $G/wheels/$wheel" | sha256sum -c --quiet - || { echo "install: $wheel is corrupt" >&2; exit 1; }
        rm $G/chunks/"$wheel".*
        new+=("$G/wheels/$wheel")
    done <$G/chunks/MANIFEST
fi
[ ${#waiting[@]} -gt 0 ] && (IFS=,; echo "waiting for more parts: ${waiting[*]}")
if [ ${#new[@]} -gt 0 ]; then
    python3 -m pip install -q --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${new[@]}"
    for wheel in "${new[@]}"; do touch $G/installed/"$(basename "$wheel")"; rm "$wheel"; done
    echo "installed: $(for w in "${new[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' ')"
fi

source "$(dirname "$0")/env.sh"
python3 - <<'EOF'
import importlib
found = []
for name in ["torch", "numpy", "gymnasium", "mujoco", "tyro", "ale_py", "tensordict", "torchrl", "warp", "mujoco_warp",
             "envpool"]:
    try:
        module = importlib.import_module(name)
        found.append(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as error:  # a package whose parts have not all arrived yet
        found.append(f"{name} -- ({type(error).__name__})")
print("; ".join(found))
try:
    import torch
    print("cuda", torch.version.cuda, "available:", torch.cuda.is_available())
except ImportError:
    pass
EOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
