"""Where one default grid cell spends its time: process start-up, data, and the training step's parts, as JSON.

    python benchmarks/bench_profile.py [--system cylinder] [--protocol joint] [--seed 0] [--preset default] [--out DIR] [--smoke]

Runs the cell exactly as `simreal run` does (`cell.run_cell`: `--preset`, default `default`, one thread, checkpoints,
validation, convergence rule, final evaluation, cell file) in this process, with timers around its parts. Each
second is counted once: validation, checkpoints and the final evaluation include the batches and model calls made
inside them; 'data (training batches)', 'forward', 'backward' and 'optimiser' are those of the training updates;
'trainer (rest)' is what is left of the training loop (logging, early stopping, bookkeeping). Prints one JSON
object: seconds and shares per part, updates made, and the seconds per update. `--smoke`: the `test` preset's cell,
in seconds."""
import time
T0 = time.perf_counter()
import argparse, json, os, tempfile
from contextlib import contextmanager
from pathlib import Path
import torch
T_TORCH = time.perf_counter()
import simreal_nb.study.cell as ex
from simreal_nb.study.grid import PRESETS, Cell
import simreal_nb.training.trainer as pr
T_IMPORT = time.perf_counter()

OUTER = ('validation', 'checkpoints', 'final evaluation')  # a part that owns everything called inside it

class Clock:
    "Exclusive seconds per part: time inside an outer part is that part's; step parts nest (a forward inside a fetch is the forward's)."
    def __init__(self): self.s, self.stack = {}, []
    @contextmanager
    def part(self, name):
        if any(p in OUTER for p, _ in self.stack): yield; return
        now = time.perf_counter()
        if self.stack: self.s[self.stack[-1][0]] = self.s.get(self.stack[-1][0], 0.0) + now - self.stack[-1][1]
        self.stack.append([name, now])
        try: yield
        finally:
            n, t = self.stack.pop()
            now = time.perf_counter()
            self.s[n] = self.s.get(n, 0.0) + now - t
            if self.stack: self.stack[-1][1] = now

def wrap(clock, owner, attr, name):
    "Time every call of `owner.attr` as part `name`."
    fn = getattr(owner, attr)
    def timed(*a, **kw):
        with clock.part(name): return fn(*a, **kw)
    setattr(owner, attr, timed)

SMOKE = dict(preset='test')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--protocol', default='joint')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--out', default=None, help='run directory (default: a temporary one)')
    ap.add_argument('--preset', default='default', choices=list(PRESETS))
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = PRESETS[a.preset].config
    cell = Cell(a.system, 'S', a.protocol, a.seed, cfg.arch)
    run_dir = Path(a.out or tempfile.mkdtemp(prefix='bench_profile_'))
    clock = Clock()
    t = time.perf_counter()
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # the first optimiser of a process imports torch._dynamo
    first_opt = time.perf_counter() - t
    for owner, attr, name in ((ex, 'cell_data', 'data (load, align, windows)'), (pr, 'fetch_batch', 'data (training batches)'),
                              (torch.Tensor, 'backward', 'backward'), (torch.autograd, 'grad', 'backward'),
                              (torch.optim.AdamW, 'step', 'optimiser'), (torch.nn.utils, 'clip_grad_norm_', 'optimiser'),
                              (pr.Trainer, 'validate', 'validation'), (pr.Trainer, 'save', 'checkpoints'), (ex, 'save_model', 'checkpoints'),
                              (ex, 'evaluate_cell', 'final evaluation'), (ex, 'cell_example', 'final evaluation'),
                              (ex, 'write_dataset', 'cell file'), (pr.Trainer, 'fit', 'trainer (rest)')):
        wrap(clock, owner, attr, name)
    make = ex.cell_model
    def model_with_timed_forward(*args, **kw):
        m = make(*args, **kw)
        fwd = m.forward
        def timed(*a_, **k_):
            with clock.part('forward'): return fwd(*a_, **k_)
        m.forward = timed
        return m
    ex.cell_model = model_with_timed_forward
    t = time.perf_counter()
    with clock.part('other'): ex.run_cell(cell, cfg, run_dir, device='cpu', threads=1)
    total = time.perf_counter() - t
    from simreal_nb.study.rundir import open_cell_file
    res = open_cell_file(ex.cell_path(run_dir, cell))
    updates = int(res['steps_done'].values.ravel()[0])
    parts = dict(sorted(clock.s.items(), key=lambda kv: -kv[1]))
    parts = {'process start-up (import torch)': T_TORCH - T0, 'process start-up (import simreal_nb)': T_IMPORT - T_TORCH,
             'process start-up (first optimiser)': first_opt, **parts}
    whole = sum(parts.values())
    step = sum(parts.get(k, 0.0) for k in ('data (training batches)', 'forward', 'backward', 'optimiser', 'trainer (rest)'))
    print(json.dumps(dict(cell=cell.key, updates=updates, total_s=round(whole, 2), cell_s=round(total, 2),
                          per_update_s=round(step / max(updates, 1), 4),
                          parts={k: dict(s=round(v, 2), share=round(v / whole, 4)) for k, v in parts.items()},
                          load=os.getloadavg())))

if __name__ == '__main__': main()
