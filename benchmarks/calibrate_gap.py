"""Calibrate the sim-to-real gap of the twin systems with converged models, before any protocol is compared.

For each system: the default grid's Sim-only and Exp-only cells (same data, model, convergence rule and evaluation
as `simreal run`), then `report.gap_table` on their held-out scores:

    r_exp = (Sim-only error on exp) / (Exp-only error on exp)    target >= 1.5
    r_sim = (Exp-only error on sim) / (Sim-only error on sim)    target >= 1.5

(RMSE of u and v, the fields both domains measure; mean and 95 % interval over the seeds). The cells are the default
run's own: a later `simreal run --out DIR` on the same directory reuses them.

    python benchmarks/calibrate_gap.py [--systems cylinder foil] [--seeds 1] [--workers 2] [--out runs/gap]
"""
import argparse, os
from simreal_nb.study.experiment import PRESETS, Grid, run_experiment
from simreal_nb.reading.report_tables import gap_table, md_table
from simreal_nb.twins.systems import list_systems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--systems', nargs='+', default=list_systems())
    ap.add_argument('--seeds', type=int, default=1)
    ap.add_argument('--workers', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--out', default='runs/gap')
    a = ap.parse_args(argv)
    grid = Grid(tuple(a.systems), ('S',), ('sim_only', 'exp_only'), seeds=a.seeds, baselines=False)
    res = run_experiment(a.out, PRESETS['default'].config, grid, executor=a.workers, report=False, verbose=True)
    print(md_table(gap_table(res.score)))
    print('cells stopped by the update cap:', int((res.capped == 1).sum()), 'of', int(res.capped.count()))


if __name__ == '__main__':
    main()
