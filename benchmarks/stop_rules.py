"""Stopping rules for ADA on the mixture of Gaussians, replayed on one long run per seed against the truth.

    python benchmarks/stop_rules.py [--seeds 0,1,2] [--iters 600] [--out reports/ada/stop_rules] [--smoke]

Each seed aligns the benchmark's cached base with ADA at the benchmark's default settings, run on to `--iters` steps
(no stop). At every check (every 25 steps) it records the held-out scores a rule could use — the holdout rule's own
(sliced W1 of 2048 generated samples against the 800 held-out ones of each projection) and the unbiased energy
distance of 8192 generated samples to the same held-out samples — beside the truth the benchmark knows: KL(ν ‖ model)
from the flow's likelihoods at fixed samples of ν, the Energy W2 and the pair radii (`mog_run_monitor`). The rules are
then replayed on the recorded checks, and for each the step it returns and the truth there are tabulated, beside the
check with the lowest truth KL (an oracle, not a rule). One JSON file of checks per seed (DIR/checks_s<seed>.json),
DIR/rules.json and DIR/rules.md. `--smoke`: one seed of the MoG `test` preset, a few steps, into a temporary folder,
in seconds.
"""
import argparse, json, os, tempfile
from dataclasses import replace
import numpy as np
import torch
from simreal_nb.ada.adamog import MOG_PRESETS, mog_setup, mog_sample, mog_run_monitor, mog_limit, mog_cells, grid_kl
from simreal_nb.ada.fit import fit_ada, split_holdout, check_alignment_inputs, holdout_stop
from simreal_nb.ada.flow import as2d

def energy_distance(a, b) -> float:
    "Unbiased energy distance 2E|X-Y| - E|X-X'| - E|Y-Y'| between samples `a` [n, k] and `b` [m, k]."
    n, m = len(a), len(b)
    return float(2 * torch.cdist(a, b).mean() - torch.cdist(a, a).sum() / (n * (n - 1)) - torch.cdist(b, b).sum() / (m * (m - 1)))

def long_run(seed:int, iters:int, preset:str='default', cache_dir=None) -> list:
    "The checks of one ADA alignment run on to `iters` steps, each with the candidate held-out scores and the truth."
    cfg = MOG_PRESETS[preset]
    S, ref, z, obs, exp, key = mog_setup(cfg, seed)
    base = cfg.base_flow(mog_sample('base', cfg.n_sim, S(1)), S(2), key, cache_dir)
    acfg = replace(cfg.align_config('ada', S(3)), iters=iters, patience=0)
    exp_t = check_alignment_inputs(base, obs, exp, acfg.beta)
    _, held = split_holdout(exp_t, acfg.holdout, torch.Generator().manual_seed(acfg.seed))   # the split `fit_ada` makes
    truth, zz = mog_run_monitor(cfg, S), torch.randn(8192, 3, generator=torch.Generator().manual_seed(S(66)))
    def monitor(model):
        with torch.no_grad(): x = model.sample(z=zz, steps=cfg.steps)
        return dict(truth(model), energy_distance=sum(energy_distance(as2d(fn(x)), held[k]) for k, fn in obs.items()))
    return fit_ada(base, obs, exp, acfg, monitor).checks

def smoothed(scores, k:int=3) -> list:
    "Running mean over the last `k` checks (fewer at the start)."
    return [float(np.mean(scores[max(0, i - k + 1):i + 1])) for i in range(len(scores))]

def _stop_best(scores, patience:int=4, tol:float=0.01) -> int:
    "The holdout rule on `scores` (the default patience and tol): the best check up to where it stops (all of them when it never stops)."
    stop, _ = holdout_stop(scores, patience, tol)
    return int(np.argmin(scores[:len(scores) if stop is None else stop + 1]))

RULES = {   # name -> (checks -> index of the returned check)
    'holdout, best check (the default)': lambda c: _stop_best([r['heldout'] for r in c]),
    'holdout smoothed over 3 checks, best': lambda c: _stop_best(smoothed([r['heldout'] for r in c])),
    'energy distance, best': lambda c: _stop_best([r['energy_distance'] for r in c]),
    'energy distance smoothed over 3 checks, best': lambda c: _stop_best(smoothed([r['energy_distance'] for r in c])),
    'oracle: lowest truth KL': lambda c: int(np.argmin([r['kl_target'] for r in c])),
}

def replay(checks_by_seed:dict) -> list:
    "Per rule and seed: the step of the returned check and the truth there (KL(ν ‖ model), Energy W2, radii)."
    rows = []
    for name, rule in RULES.items():
        for seed, c in checks_by_seed.items():
            i = rule(c)
            rows.append(dict(rule=name, seed=seed, step=c[i]['it'], kl_target=c[i]['kl_target'], energy_w2=c[i]['energy_w2'],
                             radii=[round(c[i][f'P{k}_radius'], 3) for k in range(1, 5)]))
    return rows

def rules_table(rows:list, kl_limit:float) -> str:
    "Markdown: one row per rule, mean ± std over seeds of the returned step and the truth there."
    out = [f'| rule | step | KL(ν ‖ model) (ada_limit: {kl_limit:.3f}) | Energy W2 | radii P1..P4 |', '|---|---|---|---|---|']
    for name in RULES:
        rs = [r for r in rows if r['rule'] == name]
        pm = lambda k, f: f.format(np.mean([r[k] for r in rs])) + (' ± ' + f.format(np.std([r[k] for r in rs], ddof=1)) if len(rs) > 1 else '')
        out.append(f"| {name} | {pm('step', '{:.0f}')} | {pm('kl_target', '{:.3f}')} | {pm('energy_w2', '{:.3f}')} | "
                   + '/'.join(f'{x:.2f}' for x in np.mean([r['radii'] for r in rs], 0)) + ' |')
    return '\n'.join(out)

SMOKE = dict(seeds='0', iters=6, preset='test', out=None)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--seeds', default='0,1,2'); p.add_argument('--iters', type=int, default=600)
    p.add_argument('--out', default='reports/ada/stop_rules')
    p.add_argument('--preset', default='default', choices=sorted(MOG_PRESETS), help='the MoG preset aligned')
    p.add_argument('--replay', action='store_true', help='replay the rules on DIR/checks_s*.json, run nothing')
    p.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE} (out: a temporary folder)')
    a = p.parse_args(argv)
    if a.smoke: p.set_defaults(**SMOKE); a = p.parse_args(argv)
    if a.replay and a.out is None: p.error('--replay: expected --out, the folder of a run\'s checks')
    out = a.out or tempfile.mkdtemp(prefix='stop_rules_')
    torch.set_num_threads(1); os.makedirs(out, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(',')]
    checks = {}
    for s in seeds:
        f = os.path.join(out, f'checks_s{s}.json')
        if not a.replay:
            with open(f + '.tmp', 'w') as h: json.dump(long_run(s, a.iters, a.preset), h)
            os.replace(f + '.tmp', f)
        checks[s] = json.load(open(f))
    grid, limit, _ = mog_limit(7., MOG_PRESETS[a.preset].limit_grid)
    rows = replay(checks)
    table = rules_table(rows, grid_kl(mog_cells(grid, 'target'), limit))
    with open(os.path.join(out, 'rules.json'), 'w') as h: json.dump(dict(seeds=seeds, iters=a.iters, preset=a.preset, rows=rows), h, indent=1)
    with open(os.path.join(out, 'rules.md'), 'w') as h: h.write(table + '\n')
    print(table)

if __name__ == '__main__': main()
