#!/usr/bin/env python
"""Is out_dist harder? The single-domain models a tuning run trained, scored on both test groups.

For each system of a `simreal tune` folder, the Sim-only and Exp-only points with the lowest validation error (the
tuned choice) are rebuilt from their `model.pt` and rolled out on the test trajectories of the data seed tuning used:
Sim-only on sim, Exp-only on exp (against the hidden truth), per test group, beside each group's distance to the
nearest training trajectory. One seed: a first look, not a replicated result (the report's extrapolation section
has the paired comparison over every seed of a run).

    python benchmarks/check_groups.py runs/tune [--preset default] [--systems cylinder] [--out reports/tune/groups.json]
    python benchmarks/check_groups.py --smoke

`--smoke`: a tuning folder made here (one system, Sim-only and Exp-only at one learning rate, the `test` preset) in a
temporary folder, then checked, in seconds; the `test` size's one test trajectory is in_dist, so out_dist is None.
"""
import argparse, json, tempfile
from pathlib import Path
from simreal_nb.study.grid import PRESETS
from simreal_nb.study.cell import cell_data
from simreal_nb.data.domains import group_distances
from simreal_nb.models.factory import load_model
from simreal_nb.study.evaluation import evaluate_groups
from simreal_nb.study.tuning import point_key, tune_point


def best_point(folder:Path, system:str, family:str) -> dict|None:
    "The record of `family` on `system` with the lowest validation value in a tuning folder, or None."
    recs = [json.loads(p.read_text()) for p in folder.glob(f'{system}__{family}__*.json')]
    return min(recs, key=lambda r: r['val']) if recs else None


def check(folder, preset='default', systems=None) -> list:
    "Rows: system, model, domain, in_dist and out_dist rollout RMSE (all fields, nondimensional; None for a group the test split lacks), their ratio, the farthest in_dist and the nearest out_dist trajectory's distance to training."
    folder, cfg = Path(folder), PRESETS[preset].config
    rows = []
    for system in systems or sorted({p.name.split('__')[0] for p in folder.glob('*.json')}):
        for family, domain in (('sim_only', 'sim'), ('exp_only', 'exp')):
            r = best_point(folder, system, family)
            path = None if r is None else folder / point_key(system, family, r['lr'], r['finetune_lr_scale']) / 'model.pt'
            if path is None or not path.exists(): continue
            dd, truth, scales = cell_data(system, cfg, None, r['seed'])
            ev = evaluate_groups(load_model(path), dd, split='test', horizon=cfg.horizon, max_windows=cfg.eval_windows,
                                 exp_truth=truth, scales=scales, device='cpu')
            s = ev['score'].sel(domain=domain, mode='rollout', field='all', metric='rmse')
            dist = group_distances(dd)
            e_in, e_out = (round(float(s.sel(group=g)), 5) if g in s.group.values else None for g in ('in_dist', 'out_dist'))
            rows.append(dict(system=system, model=family, domain=domain, lr=r['lr'], seed=r['seed'], in_dist=e_in,
                             out_dist=e_out, out_over_in=round(e_out / e_in, 3) if e_in and e_out is not None else None,
                             farthest_in=round(float(dist.sel(group='in_dist', stat='max')), 3),
                             nearest_out=round(float(dist.sel(group='out_dist', stat='min')), 3)))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def tiny_tuning(folder, system:str='cylinder', preset:str='test', lr:float=2e-3) -> Path:
    "A tuning folder as `simreal tune` writes it: `system`'s Sim-only and Exp-only points at one learning rate of `preset`."
    for family in ('sim_only', 'exp_only'):
        tune_point(system, family, lr, 1.0, PRESETS[preset].config, 0, folder, device='cpu', threads=1)
    return Path(folder)


SMOKE = dict(preset='test')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('folder', nargs='?', help='a `simreal tune` folder (--smoke: made here)')
    ap.add_argument('--preset', default='default', choices=list(PRESETS)); ap.add_argument('--out', default=None)
    ap.add_argument('--systems', default=None, help='comma-separated systems (default: every system of the folder)')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: a tiny tuning folder made and checked, defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if a.smoke and a.folder: ap.error('--smoke makes its own tuning folder: give no folder')
    if not a.smoke and not a.folder: ap.error('expected a `simreal tune` folder (or --smoke)')
    if a.folder and not Path(a.folder).is_dir(): ap.error(f'{a.folder}: not a folder; expected the --out of `simreal tune`')
    folder = tiny_tuning(tempfile.mkdtemp(prefix='check_groups_'), preset=a.preset) if a.smoke else a.folder
    rows = check(folder, a.preset, a.systems.split(',') if a.systems else None)
    if a.out: Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
