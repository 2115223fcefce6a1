"""Wall time of `simreal run --quick` and of `simreal run` (default sizes), cold (empty data cache), and whether the quick
grid ranks the protocols as the full grid does. Prints one JSON object per run, then one for the comparison.

    python benchmarks/bench_run.py [--only quick|default] [--out DIR] [--smoke]

`--smoke`: the quick run only, at the `test` preset's size (one system, two protocols, one seed, in this process), in
seconds; its ranking is compared with the committed default run's scores (`SMOKE_REFERENCE`) instead of a default run.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

RUNS = dict(quick=['--quick'], default=[])  # name -> the arguments of `simreal run`
BUDGET_S = dict(quick=180, default=1200)
SMOKE_ARGS = ['--preset', 'test', '--systems', 'kolmogorov', '--protocols', 'sim_only,joint', '--seeds', '1', '--workers', '0']
SMOKE_REFERENCE = Path(__file__).resolve().parents[1] / 'reports' / 'default' / 'scores.nc'

def run(name, args, out, cache):
    "Run the CLI in a fresh process with an empty cache; return its wall time."
    env = {**os.environ, 'SIMREAL_CACHE': str(cache), 'MPLBACKEND': 'Agg'}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', 'run', *args, '--out', str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--only', choices=list(RUNS), default=None)
    p.add_argument('--out', default=None, help='directory for the two run folders (default: a temporary one)')
    p.add_argument('--smoke', action='store_true', help=f'seconds: the quick run with {" ".join(SMOKE_ARGS)}, compared with {SMOKE_REFERENCE.name}')
    a = p.parse_args(argv)
    if a.smoke and a.only == 'default': p.error('--smoke runs the quick run only')
    root = Path(a.out or tempfile.mkdtemp())
    load = os.getloadavg()[0]
    runs = [n for n in RUNS if a.only in (None, n) and not (a.smoke and n == 'default')]
    for name in runs:
        s = run(name, SMOKE_ARGS if a.smoke else RUNS[name], root / name, root / f'cache_{name}')
        print(json.dumps(dict(run=name, smoke=a.smoke, wall_s=round(s, 1), budget_s=BUDGET_S[name], within_budget=s < BUDGET_S[name],
                              load_before=round(load, 2), out=str(root / name))), flush=True)
    if a.smoke:
        print(json.dumps(dict(skipped='the default run (about 20 minutes)',
                              why=f'--smoke: the quick run ranked against {SMOKE_REFERENCE.relative_to(SMOKE_REFERENCE.parents[2])} instead')), flush=True)
    if len(runs) == 2 or a.smoke:
        import xarray as xr
        from simreal_nb.reading.report_tables import protocol_ranking, ranking_agreement
        quick = xr.open_dataset(root / 'quick' / 'results.nc', engine='h5netcdf').load()
        full = xr.open_dataset(SMOKE_REFERENCE if a.smoke else root / 'default' / 'results.nc', engine='h5netcdf').load()
        print(json.dumps(ranking_agreement(protocol_ranking(quick.score), protocol_ranking(full.score))))

if __name__ == '__main__': main()
