"""Calibrate the sim-to-real gap of the twin systems with converged models, before any protocol is compared.

For each system: the default grid's Sim-only and Exp-only cells (same data, model, convergence rule and evaluation
as `simreal run`), then `report.gap_table` on their held-out scores:

    r_exp = (Sim-only error on exp) / (Exp-only error on exp)    target >= 1.5
    r_sim = (Exp-only error on sim) / (Sim-only error on sim)    target >= 1.5

(RMSE of u and v, the fields both domains measure; mean and 95 % interval over the seeds). The cells are the default
run's own: a later `simreal run --out DIR` on the same directory reuses them.

    python benchmarks/calibrate_gap.py [--systems cylinder foil] [--seeds 1] [--workers 2] [--preset default] [--out runs/gap] [--smoke]

`--smoke`: one system at the `test` preset, in this process, into a temporary folder, in seconds.
"""
import argparse, os, tempfile
from simreal_nb.study.experiment import PRESETS, Grid, run_experiment
from simreal_nb.reading.report_tables import gap_table, md_table
from simreal_nb.twins.systems import list_systems


SMOKE = dict(systems=['kolmogorov'], preset='test', workers=0, out=None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--systems', nargs='+', default=list_systems())
    ap.add_argument('--seeds', type=int, default=1)
    ap.add_argument('--workers', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--out', default='runs/gap')
    ap.add_argument('--preset', default='default', choices=list(PRESETS), help="the preset whose data, model and budget are run")
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE} (out: a temporary folder)')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    grid = Grid(tuple(a.systems), ('S',), ('sim_only', 'exp_only'), seeds=a.seeds, baselines=False)
    out = a.out or tempfile.mkdtemp(prefix='calibrate_gap_')
    res = run_experiment(out, PRESETS[a.preset].config, grid, executor=a.workers, report=False, verbose=True)
    print(md_table(gap_table(res.score)))
    print('cells stopped by the update cap:', int((res.capped == 1).sum()), 'of', int(res.capped.count()))


if __name__ == '__main__':
    main()
