"""Choosing the MoG base's Langevin corrector by measurement, on validation draws the benchmark never scores.

    python benchmarks/corrector_sweep.py [--seed 0] [--draws 5] [--cache DIR] [--smoke] > reports/ada/base_fit/corrector_sweep.jsonl

For the benchmark's cached base of one seed, samples of every corrector in a small grid (time t, moves, step eps;
`flow.Corrector`) and of the plain ODE are scored by Energy W2 against exact base samples, at 30 and 100 ODE steps,
over `draws` independent pairs of noise and reference draws (streams 30 000+, disjoint from `bench_base`'s 20 000+);
one JSON line per setting with each draw's ratio to the two-sample floor and their median and maximum. `--smoke`: the
MoG `test` preset's base, one draw, the plain ODE and the grid's first corrector, in seconds."""
import argparse, json
import numpy as np
import torch
from simreal_nb.ada.adabench import corrected
from simreal_nb.ada.adamog import MOG_PRESETS, mog_setup, mog_sample, energy_w2, mog_logpdf

GRID = [None] + [(t, k, e) for t in (0.9, 0.95, 0.98) for k in (5, 10, 20) for e in (2e-4, 5e-4, 1e-3, 2e-3)]
SMOKE = dict(preset='test', draws=1, settings=2, steps='30')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--draws', type=int, default=5)
    ap.add_argument('--cache', default=None, help="flow cache folder (default: $SIMREAL_CACHE, else the user cache folder)")
    ap.add_argument('--preset', default='default', choices=sorted(MOG_PRESETS), help="the MoG preset whose base is swept")
    ap.add_argument('--settings', type=int, default=len(GRID), help='the first this many settings of GRID (the plain ODE first)')
    ap.add_argument('--steps', default='30,100', help='ODE step counts')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if a.draws < 1 or a.settings < 1: ap.error(f'--draws {a.draws}, --settings {a.settings}: expected integers >= 1')
    torch.set_num_threads(1)
    cfg = MOG_PRESETS[a.preset]
    S, _, _, _, _, key = mog_setup(cfg, a.seed)
    base = cfg.base_flow(mog_sample('base', cfg.n_sim, S(1)), S(2), key, a.cache)
    n, lp, o = cfg.n_eval, (lambda x: mog_logpdf(x, 'base')), 10 * a.seed
    refs = [mog_sample('base', n, 30_000 + o + i) for i in range(a.draws)]
    zs = [torch.randn(n, 3, generator=torch.Generator().manual_seed(31_000 + o + i)) for i in range(a.draws)]
    floor = float(np.median([energy_w2(mog_sample('base', n, 32_000 + o + i), refs[i], lp) for i in range(a.draws)]))
    for steps in (int(s) for s in a.steps.split(',')):
        for c in GRID[:a.settings]:
            r = []
            for i in range(a.draws):
                with torch.no_grad():
                    x = base.sample(z=zs[i], steps=steps, **corrected(c, 40_000 + i))
                r.append(energy_w2(x, refs[i], lp) / floor)
            print(json.dumps(dict(seed=a.seed, steps=steps, corrector=c, floor=round(floor, 4), median=round(float(np.median(r)), 2),
                                  max=round(max(r), 2), ratios=[round(v, 2) for v in r])), flush=True)

if __name__ == '__main__': main()
