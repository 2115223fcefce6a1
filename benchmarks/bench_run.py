"""Wall time of `simreal run --quick` and of `simreal run` (default sizes), cold (empty data cache), and whether the quick
grid ranks the protocols as the full grid does. Prints one JSON object per run, then one for the comparison.

    python benchmarks/bench_run.py [--only quick|default] [--out DIR]
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

def run(name, args, out, cache):
    "Run the CLI in a fresh process with an empty cache; return its wall time."
    env = {**os.environ, 'SIMREAL_CACHE': str(cache), 'MPLBACKEND': 'Agg'}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', 'run', *args, '--out', str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--only', choices=['quick', 'default'], default=None)
    p.add_argument('--out', default=None, help='directory for the two run folders (default: a temporary one)')
    a = p.parse_args()
    root = Path(a.out or tempfile.mkdtemp())
    load = os.getloadavg()[0]
    runs = [r for r in (('quick', ['--quick']), ('default', [])) if a.only in (None, r[0])]
    for name, args in runs:
        s = run(name, args, root / name, root / f'cache_{name}')
        print(json.dumps(dict(run=name, wall_s=round(s, 1), budget_s={'quick': 180, 'default': 1200}[name],
                              within_budget=s < {'quick': 180, 'default': 1200}[name], load_before=round(load, 2),
                              out=str(root / name))), flush=True)
    if len(runs) == 2:
        import xarray as xr
        from simreal_nb.reading.report_tables import protocol_ranking, ranking_agreement
        res = {n: xr.open_dataset(root / n / 'results.nc', engine='h5netcdf').load() for n, _ in runs}
        print(json.dumps(ranking_agreement(protocol_ranking(res['quick'].score), protocol_ranking(res['default'].score))))

if __name__ == '__main__': main()
