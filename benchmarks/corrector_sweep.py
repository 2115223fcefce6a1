"""Choosing the MoG base's Langevin corrector by measurement, on validation draws the benchmark never scores.

    python benchmarks/corrector_sweep.py [--seed 0] [--draws 5] [--cache DIR] > reports/ada/base_fit/corrector_sweep.jsonl

For the benchmark's cached base of one seed, samples of every corrector in a small grid (time t, moves, step eps;
`flow.Corrector`) and of the plain ODE are scored by Energy W2 against exact base samples, at 30 and 100 ODE steps,
over `draws` independent pairs of noise and reference draws (streams 30 000+, disjoint from `bench_base`'s 20 000+);
one JSON line per setting with each draw's ratio to the two-sample floor and their median and maximum."""
import argparse, json
import numpy as np
import torch
from simreal_nb.ada.adabench import corrected
from simreal_nb.ada.adamog import MOG_PRESETS, mog_setup, mog_sample, energy_w2, mog_logpdf

GRID = [None] + [(t, k, e) for t in (0.9, 0.95, 0.98) for k in (5, 10, 20) for e in (2e-4, 5e-4, 1e-3, 2e-3)]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--draws', type=int, default=5)
    ap.add_argument('--cache', default=None, help="flow cache folder (default: $SIMREAL_CACHE, else the user cache folder)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = MOG_PRESETS['default']
    S, _, _, _, _, key = mog_setup(cfg, a.seed)
    base = cfg.base_flow(mog_sample('base', cfg.n_sim, S(1)), S(2), key, a.cache)
    n, lp, o = cfg.n_eval, (lambda x: mog_logpdf(x, 'base')), 10 * a.seed
    refs = [mog_sample('base', n, 30_000 + o + i) for i in range(a.draws)]
    zs = [torch.randn(n, 3, generator=torch.Generator().manual_seed(31_000 + o + i)) for i in range(a.draws)]
    floor = float(np.median([energy_w2(mog_sample('base', n, 32_000 + o + i), refs[i], lp) for i in range(a.draws)]))
    for steps in (30, 100):
        for c in GRID:
            r = []
            for i in range(a.draws):
                with torch.no_grad():
                    x = base.sample(z=zs[i], steps=steps, **corrected(c, 40_000 + i))
                r.append(energy_w2(x, refs[i], lp) / floor)
            print(json.dumps(dict(seed=a.seed, steps=steps, corrector=c, floor=round(floor, 4), median=round(float(np.median(r)), 2),
                                  max=round(max(r), 2), ratios=[round(v, 2) for v in r])), flush=True)

if __name__ == '__main__': main()
