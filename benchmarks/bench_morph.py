"""Time per update (forward, backward, AdamW step) of MORPH-Ti: MORPH's own code and ours side by side, beside fan and fno at S.

    python benchmarks/bench_morph.py --morph-code PATH/TO/MORPH --morph-commit SHA --batch 2 --grid 16,32 --reps 9 [--smoke]

One run, one process, one batch and one grid for every model; the models take turns (one update each, in a fresh
random order every repetition) so that a load that comes and goes (the cores may be shared) falls on all of them
alike, and the median of the repetitions is reported with the ratios to MORPH's own code and to ours. The models:

- `MORPH (its code)`: MORPH's `ViT3DRegression` (github.com/lanl/MORPH, `src/utils/vit_conv_xatt_axialatt2.py`), imported
  from the checkout given by `--morph-code` (never part of this repository), at MORPH-Ti's widths, on MORPH's 7-D window
  `[B, t, F=2, C=2, D=1, H, W]` (velocity, pressure repeated over two components);
- `MORPH (ours)`: `simreal_nb.models.morph.MORPH`, the same widths and the same window;
- `morph Ti (cell)`: `make_model('morph', 'Ti')`, what a grid cell trains (the contract's fields in and out, conditioning);
- `fan S`, `fno S`: the package's field-attention net and FNO at capacity S on the same contract batch.

The loss is the mean squared error to a random target of the output's shape. Without `--morph-code` (or where MORPH's
code cannot be imported) the script says so and times the package's models only. `--smoke`: one window, one timed
update per model, in seconds (MORPH's code timed only where `--morph-code` is given)."""
import argparse, os, platform, random, statistics, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F
from simreal_nb.models.morph import MORPH, MORPH_SIZES
from simreal_nb.models.factory import make_model

FIELDS = ('u', 'v', 'p')


def morph_kw(n_in:int) -> dict:
    "MORPH-Ti as MORPH's foundation model builds it (8³ patches, 4096 patches, 3 fields of 3 components), with `n_in` time steps."
    return dict(patch_size=8, heads_xa=32, max_components=3, max_ar=n_in, max_patches=4096, max_fields=3, **MORPH_SIZES['Ti'])


def load_morph_code(path):
    "MORPH's `ViT3DRegression` from a checkout at `path`, or (None, the reason)."
    if path is None: return None, 'no --morph-code given'
    root = Path(path).expanduser().resolve()
    if not (root / 'src' / 'utils' / 'vit_conv_xatt_axialatt2.py').exists():
        return None, f'{root}: no src/utils/vit_conv_xatt_axialatt2.py (expected a checkout of github.com/lanl/MORPH)'
    sys.path.insert(0, str(root))
    try:
        from src.utils.vit_conv_xatt_axialatt2 import ViT3DRegression
    except Exception as e:  # anything MORPH's imports raise
        return None, f'{root}: MORPH\'s model does not import ({type(e).__name__}: {e})'
    return ViT3DRegression, None


def update_fn(model, inputs, target_of, lr=1e-4):
    "One update of `model` (forward, MSE backward, AdamW step) as a closure."
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    def step():
        opt.zero_grad(set_to_none=True)
        out = target_of(model(*inputs))
        loss = F.mse_loss(out, torch.zeros_like(out).normal_(generator=torch.Generator().manual_seed(1)))
        loss.backward()
        opt.step()
    return step


def build(a, ViT3DRegression):
    "{name: update closure}: every model on the same batch and grid."
    H, W = a.grid
    g = torch.Generator().manual_seed(0)
    vol = torch.randn(a.batch, a.n_in, 2, 2, 1, H, W, generator=g)   # velocity (u, v), pressure repeated over its two components
    x = torch.randn(a.batch, a.n_in, len(FIELDS), H, W, generator=g)
    mask, cond = torch.ones(a.batch, len(FIELDS), dtype=torch.bool), torch.randn(a.batch, 1, generator=g)
    out = {}
    if ViT3DRegression is not None:
        torch.manual_seed(0)
        out['MORPH (its code)'] = update_fn(ViT3DRegression(**morph_kw(a.n_in), model_size='Ti'), (vol,), lambda r: r[2])
    torch.manual_seed(0)
    out['MORPH (ours)'] = update_fn(MORPH(**morph_kw(a.n_in), model_size='Ti'), (vol,), lambda r: r)
    kw = dict(fields=FIELDS, n_in=a.n_in, n_out=1, grid=(H, W), n_cond=1)
    for name, arch, cap in (('morph Ti (cell)', 'morph', 'Ti'), ('fan S', 'fan', 'S'), ('fno S', 'fno', 'S')):
        torch.manual_seed(0)
        out[name] = update_fn(make_model(arch, cap, **kw), (x, mask, cond), lambda r: r)
    return out


SMOKE = dict(batch=1, reps=1, warmup=0)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--morph-code', default=None, help="a checkout of github.com/lanl/MORPH (its src/ is imported; not in this repository)")
    ap.add_argument('--morph-commit', default=None, help="the MORPH commit that checkout holds, printed with the results")
    ap.add_argument('--batch', type=int, default=2, help='windows per update')
    ap.add_argument('--grid', default='16,32', help='H,W (the cylinder at the test size: 16,32)')
    ap.add_argument('--n-in', type=int, default=2, help='input frames (MORPH time steps)')
    ap.add_argument('--reps', type=int, default=9, help='timed updates per model (median reported)')
    ap.add_argument('--warmup', type=int, default=2, help='untimed updates per model first')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    a.grid = tuple(int(v) for v in a.grid.split(','))
    torch.set_num_threads(a.threads)
    ViT3DRegression, why = load_morph_code(a.morph_code)
    print(f"# per-update time (forward + backward + AdamW step), CPU, {a.threads} thread(s), torch {torch.__version__}, "
          f"python {platform.python_version()}, {os.cpu_count()} cores, load average before {os.getloadavg()[0]:.2f}")
    print(f"# batch {a.batch}, grid {a.grid[0]}x{a.grid[1]}, {a.n_in} input frames; {a.reps} alternating repetitions "
          f"after {a.warmup} warm-up updates each; median")
    where = 'imported from the checkout given by --morph-code' + (f' (MORPH commit {a.morph_commit})' if a.morph_commit else '')
    print(f"# MORPH's own code: {where if why is None else 'NOT timed: ' + why}")
    steps = build(a, ViT3DRegression)
    for f in steps.values():
        for _ in range(a.warmup): f()
    times = {k: [] for k in steps}
    rng = random.Random(0)
    for _ in range(a.reps):
        order = list(steps); rng.shuffle(order)
        for k in order:
            t0 = time.perf_counter(); steps[k](); times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = med.get('MORPH (its code)')
    print(f"{'model':<18} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'/ MORPH code':>13} {'/ MORPH ours':>13}")
    for k, v in med.items():
        r1 = f"{v / ref:13.2f}" if ref else f"{'-':>13}"
        print(f"{k:<18} {1e3 * v:10.1f} {1e3 * min(times[k]):8.1f} {1e3 * max(times[k]):8.1f} {r1} {v / med['MORPH (ours)']:13.2f}")
    print(f"# load average after {os.getloadavg()[0]:.2f}")


if __name__ == '__main__': main()
