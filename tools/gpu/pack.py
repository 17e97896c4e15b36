"""Pack the staged wheels into .gpukit/part1 … partN for the GPU machine. Runs on the CPU machine (stage.sh calls it).

The wheels, in the order of tools/gpu/wheels.txt, are laid end to end and cut every PART_MIB: a part is one device
call's `carry`, and a wheel that crosses a cut (warp-lang's 149 MB crosses several) is split into chunks
`<wheel>.000`, `<wheel>.001`, … in consecutive parts. Every part also holds MANIFEST (sha256, size, chunk count,
group and name of every wheel), so install.sh on the device knows when a wheel is complete.

Usage: python3 tools/gpu/pack.py WHEELS_DIR OUT_DIR PART_MIB
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from pathlib import Path

LIST = Path(__file__).with_name("wheels.txt")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def ordered_wheels(wheels_dir: Path) -> list[tuple[str, Path]]:
    """(group, wheel file) in the order of wheels.txt; a listed wheel that is missing stops the packing."""
    files = {(normalise(f.name.split("-")[0]), f.name.split("-")[1]): f for f in wheels_dir.glob("*.whl")}
    ordered = []
    for line in LIST.read_text().splitlines():
        words = line.split("#")[0].split()
        if not words:
            continue
        group, requirement = words
        name, version = requirement.split("==")
        wheel = files.get((normalise(name), version))
        if wheel is None:
            sys.exit(f"pack: no wheel for {requirement} in {wheels_dir}")
        ordered.append((group, wheel))
    return ordered


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(wheels_dir: Path, out_dir: Path, part_mib: float) -> None:
    capacity = int(part_mib * 2**20)
    for old in out_dir.glob("part*"):
        shutil.rmtree(old)
    manifest, position = [], 0  # position: where the next wheel starts in the stream of all wheels
    for group, wheel in ordered_wheels(wheels_dir):
        size, chunk, offset = wheel.stat().st_size, 0, 0
        with wheel.open("rb") as source:
            while offset < size:
                part = (position + offset) // capacity + 1
                length = min(size - offset, part * capacity - (position + offset))
                folder = out_dir / f"part{part}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{wheel.name}.{chunk:03d}").write_bytes(source.read(length))
                offset, chunk = offset + length, chunk + 1
        manifest.append(f"{sha256(wheel)} {size} {chunk} {group} {wheel.name}")
        position += size
    parts = sorted(out_dir.glob("part*"), key=lambda p: int(p.name[4:]))
    for folder in parts:
        (folder / "MANIFEST").write_text("\n".join(manifest) + "\n")
    for folder in parts:
        wheels = sorted({f.name.rsplit(".", 1)[0] for f in folder.iterdir() if f.name != "MANIFEST"})
        mib = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
        print(f"{folder.name}: {mib:5.1f} MiB  {' '.join(w.split('-')[0] for w in wheels)}")
    print(f"{len(parts)} parts, {position / 2**20:.1f} MiB of wheels: {len(parts)} device calls carry them")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
