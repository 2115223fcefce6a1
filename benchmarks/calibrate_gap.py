"""Calibrate the sim-to-real gap of the twin systems with trained models.

For each system (default-size twins from the cache): train an FNO S on sim only and on exp only, with early
stopping, then score one-step and rollout rel-L2 of u, v on the held-out trajectories of both domains. The gap is
real (for a model) when each model is clearly worse on the other domain than the model trained there:

    r_exp = (Sim-only error on exp) / (Exp-only error on exp)    target >= 1.5
    r_sim = (Exp-only error on sim) / (Sim-only error on sim)    target >= 1.5

(errors: rel-L2 of u and v together; exp is scored on the measured vectors, and r_truth is r_exp scored against
the hidden truth before measurement, which has no measurement-noise floor.)

Prints one JSON line per (system, protocol) and one per system with both ratios. Usage:

    python benchmarks/calibrate_gap.py [--systems cylinder foil] [--steps 3000] [--threads 2]
"""
from __future__ import annotations
import argparse, json, sys, time
import numpy as np
import torch

from simreal_nb.systems import load_twins, list_systems
from simreal_nb.align import make_domain_data
from simreal_nb.models import make_model
from simreal_nb.protocols import train, seed_everything
from simreal_nb.evaluation import evaluate

FIELDS = ('u', 'v')


def run_one(dd, truth, protocol, steps, patience, eval_every, horizon, seed):
    "Train one FNO S with `protocol`; scores dict (domain, mode) -> rel-L2 of u, v and both."
    seed_everything(seed)
    model = make_model('fno', 'S', fields=dd.fields, n_in=2, n_out=1, grid=dd.grid, n_cond=dd.n_cond)
    t = time.perf_counter()
    hist = train(model, dd, protocol, steps=steps, batch_size=8, lr=1e-3, patience=patience, eval_every=eval_every,
                 seed=seed, progress=False)
    secs = time.perf_counter() - t
    ev = evaluate(model, dd, horizon=horizon, fields=FIELDS, exp_truth=truth)  # exp: measured; exp_truth: before measurement
    sc = ev['score'].sel(metric='rel_l2')
    out = {}
    for d in ev.domain.values:
        for m in ev['mode'].values:
            out[f'{d}/{m}'] = {f: round(float(sc.sel(domain=d, mode=m, field=f)), 4) for f in (*FIELDS, 'all')}
    return dict(scores=out, train_seconds=round(secs, 1), stopped_early=bool(any(hist.stopped_early)),
                best_step=hist.best_step[-1] if hist.best_step else None,
                last_logged_step=hist.train.step[-1] if hist.train.step else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--systems', nargs='+', default=list_systems())
    ap.add_argument('--size', default='default')
    ap.add_argument('--steps', type=int, default=3000, help='cap on optimiser updates')
    ap.add_argument('--patience', type=int, default=4, help='evaluations without improvement before stopping')
    ap.add_argument('--eval-every', type=int, default=100)
    ap.add_argument('--horizon', type=int, default=16, help='rollout length in frames')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    for s in a.systems:
        tw = load_twins(s, seed=0, size=a.size, threads=a.threads)
        dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1, fracs=(0.6, 0.15, 0.25))
        res = {}
        for proto in ('sim_only', 'exp_only'):
            r = run_one(dd, tw['exp_truth'], proto, a.steps, a.patience, a.eval_every, a.horizon, a.seed)
            res[proto] = r['scores']
            print(json.dumps(dict(system=s, protocol=proto, **r)), flush=True)
        row = dict(system=s)
        S, E = res['sim_only'], res['exp_only']
        for m in ('one_step', 'rollout'):
            if f'sim/{m}' not in S: continue
            row[f'r_exp_{m}'] = round(S[f'exp/{m}']['all'] / E[f'exp/{m}']['all'], 2)
            row[f'r_sim_{m}'] = round(E[f'sim/{m}']['all'] / S[f'sim/{m}']['all'], 2)
            if f'exp_truth/{m}' in S: row[f'r_truth_{m}'] = round(S[f'exp_truth/{m}']['all'] / E[f'exp_truth/{m}']['all'], 2)
        row['target_met_one_step'] = bool(row.get('r_exp_one_step', 0) >= 1.5 and row.get('r_sim_one_step', 0) >= 1.5)
        print(json.dumps(row), flush=True)


if __name__ == '__main__':
    main()
