"""ADA on the mixture-of-Gaussians benchmark, one change at a time: an ablation table on the same seeds.

    python benchmarks/ablate_ada.py [--seeds 0,1,2] [--rows reference,critic_steps=10,iters=800+patience=0,...] [--out DIR] [--smoke] [key=value ...]

Every row aligns the same cached base (the benchmark's, `run_mog`'s cache) to the same experiments with ADA on all
three projections, changing one knob of `MogConfig` against the reference row (the preset `default`, with the
trailing key=value overrides applied to every row). Each row is scored as `run_mog` scores it (Energy W2, Cluster KL,
KDE l1 against the reference samples of ν, each pair's weight and radius) and timed (the curves' checks included); the steps it ran and the step
its model came from are recorded. One JSON line per (row, seed), then a markdown table of the means over seeds,
written to DIR/ablation.md and DIR/ablation.json. A row may change several knobs at once, joined by '+'. Every row's
alignment curves (its losses per step; at every check the held-out score, and against held-out samples of ν the
Energy W2 and each pair's weight and radius, as `run_mog` records them) go to DIR/curves/<row>_s<seed>.json and .png,
with the step at which the default holdout rule would have stopped (`--redraw` draws them again from the JSON).
`--smoke`: one seed, two rows at the MoG `test` preset's sizes, into a temporary folder, in seconds.
"""
import argparse, ast, glob, json, os, tempfile, time
from dataclasses import asdict, fields, replace
import numpy as np
import torch
from simreal_nb.ada.adamog import (MOG_PRESETS, mog_setup, mog_sample, mog_metrics, pair_stats, pair_radii, mog_floor,
                               mog_run_monitor, plot_alignment)
from simreal_nb.ada.fit import fit_ada, holdout_stop

DEFAULT_ROWS = ('reference', 'stop=holdout', 'critic_steps=10', 'critic_hidden=128', 'gp_weight=1.0', 'beta=0.03',
                'ada_lr=0.001', 'batch=1024')

def parse_change(text:str) -> dict:
    "'reference' -> {}, 'knob=value[+knob=value...]' -> {knob: value, ...} (each value a Python literal, else a string)."
    if text == 'reference': return {}
    out = {}
    for part in text.split('+'):
        k, v = part.split('=', 1)
        try: v = ast.literal_eval(v)
        except (ValueError, SyntaxError): pass
        out[k] = v
    return out

def save_curves(stem:str, info:dict):
    "Curves `info` (the `run_info.json` layout `plot_alignment` reads) as stem.json and drawn as stem.png, the default holdout rule replayed on them."
    import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
    rule = (MOG_PRESETS['default'].patience, MOG_PRESETS['default'].tol)
    checks = info['checks']['ada']
    stop, best = holdout_stop([c['heldout'] for c in checks], *rule)
    info = dict(info, default_rule=dict(patience=rule[0], tol=rule[1], stop_at=None if stop is None else checks[stop]['it'],
                                        best_at=None if best is None else checks[best]['it']))
    with open(stem + '.json', 'w') as f: json.dump(info, f)
    fig = plot_alignment(info, 'ada', rule=rule); fig.savefig(stem + '.png'); plt.close(fig)

def curves_stem(out, row:str, seed:int) -> str:
    d = os.path.join(out, 'curves'); os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{row.replace('=', '-').replace('+', '_')}_s{seed}")

def ablate(seeds, rows, out, common:dict, cache_dir=None) -> list:
    "One ADA alignment per (row, seed); returns the records and writes ablation.json / ablation.md into `out`."
    os.makedirs(out, exist_ok=True)
    recs = []
    for seed in seeds:
        base_cfg = replace(MOG_PRESETS['default'], **common)
        S, ref, z, obs, exp, key = mog_setup(base_cfg, seed)
        base = base_cfg.base_flow(mog_sample('base', base_cfg.n_sim, S(1)), S(2), key, cache_dir)
        floor = mog_floor(base_cfg.n_eval, seed, kind=base_cfg.target)
        monitor = mog_run_monitor(base_cfg, S)                                  # the curves' truth, as run_mog records it
        for row in rows:
            cfg = replace(base_cfg, **parse_change(row))
            t0 = time.time()
            model = fit_ada(base, obs, exp, cfg.align_config('ada', S(3)), monitor)
            s = cfg.sample(model, z).numpy()
            ps = pair_stats(s).values()
            rec = dict(row=row, seed=seed, seconds=round(time.time() - t0, 1), steps=model.stopped_at,
                       best_at=model.best_at, converged=model.converged, **mog_metrics(s, ref, cfg.target),
                       floor_energy_w2=floor['energy_w2'],
                       radii=[round(v['radius'], 3) for v in ps],
                       weights=[round(v['weight'], 3) for v in ps],
                       radii_xyz=[[round(v[f'radius_{c}'], 3) for c in 'xyz'] for v in ps])
            print(json.dumps(rec), flush=True)
            save_curves(curves_stem(out, row, seed), dict(config=asdict(cfg), history=dict(ada=model.history), checks=dict(ada=model.checks),
                                                          stopped_at=model.stopped_at, best_at=model.best_at))
            recs.append(rec)
    with open(os.path.join(out, 'ablation.json'), 'w') as f: json.dump(dict(seeds=list(seeds), common=common, rows=recs), f, indent=1)
    table = ablation_table(recs, base_cfg.target)
    with open(os.path.join(out, 'ablation.md'), 'w') as f: f.write(table + '\n')
    print(table)
    return recs

def ablation_table(recs:list, target:str='target') -> str:
    "Markdown: one row per change, means (± std over seeds) of Energy W2 and Cluster KL, radii (beside the mixture `target`'s), steps and seconds."
    radii_t = '/'.join(f'{r:.2f}' for r in pair_radii(target))
    rows = [f'| change | Energy W2 | Cluster KL | radii P1..P4 ({target} {radii_t}) | steps | s |', '|---|---|---|---|---|---|']
    for row in dict.fromkeys(r['row'] for r in recs):
        rs = [r for r in recs if r['row'] == row]
        pm = lambda k, f: f.format(np.mean([r[k] for r in rs])) + (' ± ' + f.format(np.std([r[k] for r in rs], ddof=1)) if len(rs) > 1 else '')
        radii = '/'.join(f'{x:.2f}' for x in np.mean([r['radii'] for r in rs], 0))
        rows.append(f"| {row} | {pm('energy_w2', '{:.3f}')} | {pm('cluster_kl', '{:.4f}')} | {radii} | "
                    f"{np.mean([r['steps'] for r in rs]):.0f} | {np.mean([r['seconds'] for r in rs]):.0f} |")
    return '\n'.join(rows)

def preset_fields(preset:str) -> dict:
    "Every field of the MoG preset `preset`, as key=value overrides."
    cfg = MOG_PRESETS[preset]
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}

SMOKE = dict(seeds='0', rows='reference,critic_steps=1', out=None)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--seeds', default='0,1,2'); p.add_argument('--rows', default=','.join(DEFAULT_ROWS))
    p.add_argument('--out', default='reports/ada/ablation'); p.add_argument('--threads', type=int, default=1)
    p.add_argument('--redraw', action='store_true', help="draw DIR/curves/*.json again (the default rule replayed), run nothing")
    p.add_argument('--smoke', action='store_true', help=f"seconds: the MoG test preset's sizes under every row, defaults {SMOKE} (out: a temporary folder)")
    p.add_argument('common', nargs='*', help='key=value overrides of MogConfig for every row')
    a = p.parse_args(argv)
    if a.smoke: p.set_defaults(**SMOKE); a = p.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix='ablate_ada_')
    if a.redraw:
        for f in sorted(glob.glob(os.path.join(out, 'curves', '*.json'))): save_curves(f[:-5], json.load(open(f)))
        return
    torch.set_num_threads(a.threads)
    common = {**(preset_fields('test') if a.smoke else {}), **{k: v for c in a.common for k, v in parse_change(c).items()}}
    ablate([int(s) for s in a.seeds.split(',')], a.rows.split(','), out, common)

if __name__ == '__main__': main()
