"""Per-update cost of the default cell's training step against a reference commit, as JSON lines.

    python benchmarks/bench_speed.py [--ref COMMIT] [--system cylinder] [--protocols sim_only,joint] [--rounds 3] [--smoke]

The reference is the package as it was at `--ref` (default: main before the training step was made cheaper), taken
out of git with `git archive` and imported under another name, each name from where that commit's own layout keeps
it (the subpackages, else the flat modules of older commits: `WHERE`). Each round starts one process per
implementation, reference and new in turn, and each trains the `--preset` grid's cell (default: `default`; capacity S, batch 8 per domain, the grid's
optimiser, schedule and validation) on one thread as `Trainer.fit` would — the new one with the process settings
`fit` makes (`reuse_freed_memory`) — timing blocks of updates after a warm-up, then validations. One JSON line per
case: `ref_s` and `new_s` are the median seconds per update (per validation) over all blocks of all rounds,
`ratio` = new / reference (< 1: faster), `cpu_ratio` the same in process CPU time (less sensitive to other
processes on shared cores), and the page faults per update of each. The first and last lines record the machine
load: read the ratios, not the seconds. `--smoke`: the same comparison on the `test` preset's cell, one round of a
few updates, in seconds."""
import argparse, importlib, importlib.util, io, json, os, resource, shutil, statistics, subprocess, sys, tarfile, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = 'a0dd1c1'  # main before the training step was made cheaper

WHERE = dict(  # name -> 'module:name' places, the subpackage layout first, then the flat modules of older commits
    PRESETS=('study.grid:PRESETS', 'experiment:PRESETS'),
    Cell=('study.grid:Cell', 'experiment:Cell'),
    cell_data=('study.cell:cell_data', 'experiment:cell_data'),
    cell_model=('study.cell:cell_model', 'experiment:cell_model', 'experiment:_cell_model'),
    Trainer=('training.trainer:Trainer', 'trainer:Trainer', 'protocols:Trainer'),
    reuse_freed_memory=('training.trainer:reuse_freed_memory', 'trainer:reuse_freed_memory'),
    make_twins=('twins.systems:make_twins', 'systems:make_twins'),
)
SMOKE = dict(preset='test', protocols='joint', block=10, blocks=1, rounds=1, warmup=2)

PROGRESS_STAND_IN = '''"Pass-through progress bars: older commits import fastprogress, which left the requirements, for display only."
class progress_bar:
    "Iterate `gen` unchanged; `comment` is accepted and ignored."
    def __init__(self, gen, total=None, display=True, **kw): self.gen, self.comment = gen, ''
    def __iter__(self): return iter(self.gen)
'''

def reference_package(commit:str, name:str='simreal_ref') -> Path:
    "A folder holding the package at `commit`, importable as `name` (its modules import each other relatively)."
    got = subprocess.run(['git', 'archive', commit, 'simreal_nb'], cwd=ROOT, capture_output=True)
    if got.returncode:
        raise SystemExit(f"reference {commit!r}: git archive failed ({got.stderr.decode().strip()}); expected a commit of this repository")
    tmp = Path(tempfile.mkdtemp(prefix='bench_speed_'))
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as t: t.extractall(tmp, filter='data')
    (tmp / 'simreal_nb').rename(tmp / name)
    uses_fastprogress = any('fastprogress' in p.read_text() for p in (tmp / name).rglob('*.py') if p.name != '_modidx.py')
    if uses_fastprogress and importlib.util.find_spec('fastprogress') is None:
        (tmp / 'fastprogress').mkdir()
        (tmp / 'fastprogress' / '__init__.py').write_text('')
        (tmp / 'fastprogress' / 'fastprogress.py').write_text(PROGRESS_STAND_IN)
        print(json.dumps(dict(note=f'reference {commit}: fastprogress is not installed; its progress bars (never timed) '
                                   'are a pass-through stand-in')), flush=True)
    return tmp

def locate(pkg:str, name:str, required:bool=True):
    "`name` from the first of its places in `WHERE` that package `pkg` has (None when absent and not `required`)."
    for place in WHERE[name]:
        mod, attr = place.split(':')
        parts = f'{pkg}.{mod}'.split('.')
        try: m = importlib.import_module(f'{pkg}.{mod}')
        except ModuleNotFoundError as e:
            if e.name in {'.'.join(parts[:i]) for i in range(1, len(parts) + 1)}: continue  # this layout has no such module
            raise  # the module exists but something it imports does not
        if hasattr(m, attr): return getattr(m, attr)
    if required: raise LookupError(f"{pkg}: no {name} in any of {', '.join(WHERE[name])}")

def run_worker(cmd:list, env:dict) -> dict:
    "Run a worker process; its last stdout line as JSON, or an error that shows the end of its stderr."
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode: raise SystemExit(f"worker {' '.join(cmd[2:])} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])

def trainer(pkg:str, system:str, protocol:str, arch:str, seed:int=0, preset:str='default', updates:int=0):
    "A Trainer of the `preset` grid's cell (system, S, protocol, seed) built by package `pkg`, for at least `updates` updates."
    cfg = locate(pkg, 'PRESETS')[preset].config
    dd, _, _ = locate(pkg, 'cell_data')(system, cfg)
    model = locate(pkg, 'cell_model')(locate(pkg, 'Cell')(system, 'S', protocol, seed, arch), cfg, dd)
    return locate(pkg, 'Trainer')(model, dd, protocol, steps=max(cfg.steps, updates), batch_size=cfg.batch_size, lr=cfg.lr, seed=seed,
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

def worker(pkg:str, system:str, protocol:str, arch:str, block:int, nblocks:int, warmup:int, preset:str):
    "Time one implementation in this process: JSON of the update and validation blocks."
    import torch
    torch.set_num_threads(1)
    t = trainer(pkg, system, protocol, arch, preset=preset, updates=warmup + block * nblocks)
    reuse = locate(pkg, 'reuse_freed_memory', required=False)
    if reuse: reuse()  # what Trainer.fit does first
    for _ in range(warmup): t.update()
    print(json.dumps(dict(update=blocks(t.update, block, nblocks), validation=blocks(t.validate, 1, nblocks))), flush=True)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ref', default=REF, help='reference commit')
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--protocols', default='sim_only,joint')
    ap.add_argument('--arch', default='fno')
    ap.add_argument('--preset', default='default', help="the grid preset whose cell is trained (test: seconds)")
    ap.add_argument('--block', type=int, default=10, help='updates per timed block (a multiple of log_every=10: one diagnostic update each)')
    ap.add_argument('--blocks', type=int, default=4, help='timed blocks per process')
    ap.add_argument('--rounds', type=int, default=3, help='processes per implementation, reference and new in turn')
    ap.add_argument('--warmup', type=int, default=10, help='untimed updates first')
    ap.add_argument('--smoke', action='store_true', help=f'tiny size, seconds: defaults {SMOKE}')
    ap.add_argument('--worker', nargs=2, metavar=('PKG', 'PROTOCOL'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    for k in ('block', 'blocks', 'rounds'):
        if getattr(a, k) < 1: ap.error(f'--{k} {getattr(a, k)}: expected an integer >= 1')
    if a.worker: return worker(a.worker[0], a.system, a.worker[1], a.arch, a.block, a.blocks, a.warmup, a.preset)
    print(json.dumps(dict(load_before=os.getloadavg(), ref=a.ref, threads=1, preset=a.preset)), flush=True)
    ref_dir = reference_package(a.ref)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    try:
        for protocol in a.protocols.split(','):
            got = {'ref': [], 'new': []}
            for _ in range(a.rounds):
                for impl, pkg, path in (('ref', 'simreal_ref', str(ref_dir)), ('new', 'simreal_nb', '')):
                    cmd = [sys.executable, __file__, '--worker', pkg, protocol, '--system', a.system, '--arch', a.arch,
                           '--preset', a.preset, '--block', str(a.block), '--blocks', str(a.blocks), '--warmup', str(a.warmup)]
                    pp = os.pathsep.join(p for p in (path, env.get('PYTHONPATH', '')) if p)
                    got[impl].append(run_worker(cmd, {**env, 'PYTHONPATH': pp}))
            for what in ('update', 'validation'):
                med = {k: [statistics.median(b[what][i][j] for b in runs for i in range(len(b[what]))) for j in range(3)]
                       for k, runs in got.items()}
                print(json.dumps(dict(case=f'{a.system}/{a.arch}-S/{protocol}/{what}', ref_s=round(med['ref'][0], 5),
                                      new_s=round(med['new'][0], 5), ratio=round(med['new'][0] / med['ref'][0], 3),
                                      cpu_ratio=round(med['new'][1] / med['ref'][1], 3),
                                      page_faults=dict(ref=round(med['ref'][2]), new=round(med['new'][2])))), flush=True)
    finally: shutil.rmtree(ref_dir, ignore_errors=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
