"""How close the MoG benchmark's base flow comes to its own truth, one JSON line per seed.

    python benchmarks/bench_base.py --hidden 256 --depth 4 --iters 8000 --seeds 0,1,2 [--threads 1] [--corrector 0.9,20,0.001] [--cache DIR] [--smoke]

Trains the base exactly as `simreal ada mog` does (`MogConfig.base_flow` on the run's simulation samples, no cache)
with the given network and training length, then scores it against fresh exact base samples (`adabench.base_fit`):
Energy W2 per ODE step count beside the two-sample floor, the share of samples stranded beyond the exact samples'
99.9 % energy quantile, Energy W2 without them, and each pair's radius (0.5 in the base). With `--corrector t,moves,eps`
(or `none`) the samples are drawn with that Langevin corrector (`flow.Corrector`) instead of the preset's; with
`--cache DIR` the base comes from (or goes to) the benchmark's flow cache instead of being trained here. `--smoke`: the
MoG `test` preset, one seed, one step count, in seconds."""
import argparse, json, os, time
from dataclasses import replace
import torch
from simreal_nb.ada.adamog import MOG_PRESETS, mog_setup, mog_sample, base_fit, pair_stats

SMOKE = dict(preset='test', steps='10', seeds='0')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--hidden', type=int, default=None, help='velocity MLP width (default: the preset\'s)')
    ap.add_argument('--depth', type=int, default=None, help='velocity MLP hidden layers (default: the preset\'s)')
    ap.add_argument('--iters', type=int, default=None, help='flow-matching steps (default: the preset\'s)')
    ap.add_argument('--t-power', type=float, default=None, help='training times t = u**(1/t_power) (default: the preset\'s)')
    ap.add_argument('--steps', default='10,30,100', help='ODE step counts to score')
    ap.add_argument('--seeds', default='0')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--preset', default='default', choices=sorted(MOG_PRESETS))
    ap.add_argument('--corrector', default=None, help="t,moves,eps of the sampler's Langevin corrector, or none (default: the preset's)")
    ap.add_argument('--cache', default=None, help='flow cache folder: reuse the benchmark\'s cached base (default: train it here)')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    knobs = {k: v for k, v in dict(hidden=a.hidden, depth=a.depth, base_iters=a.iters, t_power=a.t_power).items() if v is not None}
    if a.corrector is not None:
        t, moves, eps = (None, None, None) if a.corrector == 'none' else a.corrector.split(',')
        knobs['corrector'] = None if t is None else (float(t), int(moves), float(eps))
    cfg = replace(MOG_PRESETS[a.preset], **knobs)
    for seed in (int(s) for s in a.seeds.split(',')):
        S, *_, key = mog_setup(cfg, seed)
        t = time.perf_counter()
        base = cfg.base_flow(mog_sample('base', cfg.n_sim, S(1)), S(2), key if a.cache else None, a.cache)  # no key: trained here
        train_s = time.perf_counter() - t
        steps = [int(s) for s in a.steps.split(',')]
        fit = base_fit(base, cfg.n_eval, seed, steps=steps, corrector=cfg.corrector)
        x = cfg.sample(base, torch.randn(cfg.n_eval, 3, generator=torch.Generator().manual_seed(20_001 + seed)), 20_005 + seed, steps=max(steps))
        print(json.dumps(dict(seed=seed, hidden=cfg.hidden, depth=cfg.depth, iters=cfg.base_iters, t_power=cfg.t_power,
                              corrector=cfg.corrector, cached=bool(getattr(base, 'from_cache', False)), threads=a.threads, train_s=round(train_s, 1), floor=round(fit['floor'], 4),
                              energy_w2={s: round(v, 4) for s, v in fit['energy_w2'].items()},
                              ratio_to_floor={s: round(v / fit['floor'], 2) for s, v in fit['energy_w2'].items()},
                              stranded={s: round(v, 4) for s, v in fit['stranded'].items()},
                              energy_w2_kept={s: round(v, 4) for s, v in fit['energy_w2_kept'].items()},
                              radii={p: round(v['radius'], 3) for p, v in pair_stats(x).items()}, load=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
