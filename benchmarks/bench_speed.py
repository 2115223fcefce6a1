"""Per-update cost of the default cell's training step against a reference commit, as JSON lines.

    python benchmarks/bench_speed.py [--ref COMMIT] [--system cylinder] [--protocols sim_only,joint] [--rounds 3]

The reference is the package as it was at `--ref` (default: main before the training step was made cheaper), taken
out of git with `git archive` and imported under another name. Each round starts one process per implementation,
reference and new in turn, and each trains the default grid's cell (capacity S, batch 8 per domain, the grid's
optimiser, schedule and validation) on one thread as `Trainer.fit` would — the new one with the process settings
`fit` makes (`reuse_freed_memory`) — timing blocks of updates after a warm-up, then validations. One JSON line per
case: `ref_s` and `new_s` are the median seconds per update (per validation) over all blocks of all rounds,
`ratio` = new / reference (< 1: faster), `cpu_ratio` the same in process CPU time (less sensitive to other
processes on shared cores), and the page faults per update of each. The first and last lines record the machine
load: read the ratios, not the seconds."""
import argparse, importlib, io, json, os, resource, statistics, subprocess, sys, tarfile, tempfile, time
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = 'a0dd1c1'  # main before the training step was made cheaper

def reference_package(commit:str, name:str='simreal_ref') -> Path:
    "A folder holding the package at `commit`, importable as `name` (its modules import each other relatively)."
    tar = subprocess.run(['git', 'archive', commit, 'simreal_nb'], cwd=ROOT, capture_output=True, check=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix='bench_speed_'))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t: t.extractall(tmp, filter='data')
    (tmp / 'simreal_nb').rename(tmp / name)
    return tmp

def trainer_module(pkg:str):
    "The module of `Trainer` in package `pkg`: `trainer`, or `protocols` in packages from before the split."
    return importlib.import_module(f'{pkg}.trainer' if importlib.util.find_spec(f'{pkg}.trainer') else f'{pkg}.protocols')

def trainer(pkg:str, system:str, protocol:str, arch:str, seed:int=0):
    "A Trainer of the default grid's cell (system, S, protocol, seed) built by package `pkg`."
    exp, prot = importlib.import_module(f'{pkg}.experiment'), trainer_module(pkg)
    cfg = exp.PRESETS['default'].config
    dd, _, _ = exp.cell_data(system, cfg)
    model = (getattr(exp, "cell_model", None) or exp._cell_model)(exp.Cell(system, 'S', protocol, seed, arch), cfg, dd)
    return prot.Trainer(model, dd, protocol, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=seed,
                        eval_every=cfg.eval_every, patience=cfg.patience, val_batches=cfg.val_batches,
                        min_delta=cfg.min_delta, schedule=cfg.schedule, lr_drops=cfg.lr_drops, warmup=cfg.warmup,
                        device='cpu', progress=False)

def blocks(fn, n:int, k:int) -> list:
    "`k` blocks of `n` calls of `fn`: per call (wall s, CPU s, minor page faults) of each block."
    out = []
    for _ in range(k):
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time(), time.perf_counter()
        for _ in range(n): fn()
        out.append(((time.perf_counter() - t0) / n, (time.process_time() - c0) / n,
                    (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / n))
    return out

def worker(pkg:str, system:str, protocol:str, arch:str, block:int, nblocks:int, warmup:int):
    "Time one implementation in this process: JSON of the update and validation blocks."
    import torch
    torch.set_num_threads(1)
    t = trainer(pkg, system, protocol, arch)
    prot = trainer_module(pkg)
    if hasattr(prot, 'reuse_freed_memory'): prot.reuse_freed_memory()  # what Trainer.fit does first
    for _ in range(warmup): t.update()
    print(json.dumps(dict(update=blocks(t.update, block, nblocks), validation=blocks(t.validate, 1, nblocks))), flush=True)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ref', default=REF, help='reference commit')
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--protocols', default='sim_only,joint')
    ap.add_argument('--arch', default='fno')
    ap.add_argument('--block', type=int, default=10, help='updates per timed block (a multiple of log_every=10: one diagnostic update each)')
    ap.add_argument('--blocks', type=int, default=4, help='timed blocks per process')
    ap.add_argument('--rounds', type=int, default=3, help='processes per implementation, reference and new in turn')
    ap.add_argument('--warmup', type=int, default=10, help='untimed updates first')
    ap.add_argument('--worker', nargs=2, metavar=('PKG', 'PROTOCOL'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker: return worker(a.worker[0], a.system, a.worker[1], a.arch, a.block, a.blocks, a.warmup)
    print(json.dumps(dict(load_before=os.getloadavg(), ref=a.ref, threads=1)), flush=True)
    ref_dir = reference_package(a.ref)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    for protocol in a.protocols.split(','):
        got = {'ref': [], 'new': []}
        for _ in range(a.rounds):
            for impl, pkg, path in (('ref', 'simreal_ref', str(ref_dir)), ('new', 'simreal_nb', '')):
                cmd = [sys.executable, __file__, '--worker', pkg, protocol, '--system', a.system, '--arch', a.arch,
                       '--block', str(a.block), '--blocks', str(a.blocks), '--warmup', str(a.warmup)]
                pp = os.pathsep.join(p for p in (path, env.get('PYTHONPATH', '')) if p)
                out = subprocess.run(cmd, env={**env, 'PYTHONPATH': pp}, capture_output=True, text=True, check=True)
                got[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for what in ('update', 'validation'):
            med = {k: [statistics.median(b[what][i][j] for b in runs for i in range(len(b[what]))) for j in range(3)]
                   for k, runs in got.items()}
            print(json.dumps(dict(case=f'{a.system}/{a.arch}-S/{protocol}/{what}', ref_s=round(med['ref'][0], 5),
                                  new_s=round(med['new'][0], 5), ratio=round(med['new'][0] / med['ref'][0], 3),
                                  cpu_ratio=round(med['new'][1] / med['ref'][1], 3),
                                  page_faults=dict(ref=round(med['ref'][2]), new=round(med['new'][2])))), flush=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
