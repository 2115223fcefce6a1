"""Carry a scarcity study's finished cells between machines: pack them into one archive, or unpack one into a run folder.

    python scripts/scarcity_cells.py pack RUN_DIR ARCHIVE      # cells/*.nc, manifest.json, scarcity.json, timing.json
    python scripts/scarcity_cells.py unpack ARCHIVE RUN_DIR    # then `simreal scarcity --out RUN_DIR` resumes

Checkpoints stay behind (a resumed Sim→Exp cell whose Sim-only checkpoint is gone trains that model again, bit for
bit the same). Unpacking never replaces a file the run folder already holds."""
import sys, tarfile
from pathlib import Path

KEEP = ('manifest.json', 'scarcity.json', 'timing.json')

def pack(run_dir:Path, archive:Path):
    "Write the finished cells and the run's records of `run_dir` into `archive` (xz-compressed tar)."
    files = sorted((run_dir / 'cells').glob('*.nc')) + [run_dir / k for k in KEEP if (run_dir / k).exists()]
    tmp = archive.with_name(archive.name + '.tmp')
    with tarfile.open(tmp, 'w:xz') as t:
        for f in files: t.add(f, arcname=str(f.relative_to(run_dir)))
    tmp.replace(archive)
    print(f"{len(files)} files -> {archive} ({archive.stat().st_size / 1e6:.1f} MB)")

def unpack(archive:Path, run_dir:Path):
    "Extract `archive` into `run_dir`, keeping every file already there."
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers() if m.isfile() and not (run_dir / m.name).exists()]
        t.extractall(run_dir, members=members, filter='data')
    print(f"{len(members)} files -> {run_dir}")

if __name__ == '__main__':
    if len(sys.argv) != 4 or sys.argv[1] not in ('pack', 'unpack'):
        sys.exit(f"usage: {sys.argv[0]} pack RUN_DIR ARCHIVE | unpack ARCHIVE RUN_DIR")
    cmd, a, b = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    pack(a, b) if cmd == 'pack' else unpack(a, b)
