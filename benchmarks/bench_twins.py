"""Cold generation of one channel twin against a reference commit, as JSON lines.

    python benchmarks/bench_twins.py [--ref COMMIT] [--system cylinder] [--size default] [--threads 1,2] [--rounds 2] [--smoke]

What CI's main job waits for before its grid starts: one (system, seed) generated with every core. The reference
is the package at `--ref` (default: main before the channel solver dealt its trajectories out to threads), taken out
of git as `bench_speed.py` does, its `make_twins` found where that commit's own layout keeps it. Each round starts
one process per (implementation, thread count), reference and new in turn, and times
`make_twins(system, 0, size, threads=k)`. One JSON line per thread count: the median wall seconds of each (`runs`:
every round's), `ratio` = new / reference (< 1: faster) and whether the new twin is the reference's to the bit
(`identical`: the new datasets of every round compared, with `xarray.testing.assert_identical`, with the reference's
at the first thread count listed; `same_values`: the reference's variables and coordinates equal, attributes aside,
such as a generator version bumped since). The first and last lines record the machine load: read the ratios, not
the seconds. `--smoke`: the `test` size, one thread, one round, in seconds."""
import argparse, json, os, pickle, shutil, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import locate, reference_package, run_worker

REF = '827c42b'  # main before the channel solver dealt its trajectories out to threads
SMOKE = dict(size='test', threads='1', rounds=1)

def worker(pkg:str, system:str, size:str, threads:int, out:str):
    "Generate the twin with package `pkg` in this process; print its wall seconds, pickle its datasets to `out`."
    make_twins = locate(pkg, 'make_twins')
    t = time.perf_counter()
    tw = make_twins(system, 0, size, threads=threads)
    print(json.dumps(dict(wall_s=time.perf_counter() - t)), flush=True)
    with open(out, 'wb') as f: pickle.dump({k: v.load() for k, v in tw.items()}, f)

def compare(a:str, b:str) -> dict:
    "Two pickled twins: `identical` (values, coordinates, attributes, variables) and `same_values` (the first's variables equal to the bit in the second, attributes aside)."
    import xarray as xr
    def read(p):
        with open(p, 'rb') as f: return pickle.load(f)
    def holds(check) -> bool:
        try: check()
        except (AssertionError, KeyError): return False
        return True
    x, y = read(a), read(b)
    same_keys = list(x) == list(y)
    return dict(identical=same_keys and holds(lambda: [xr.testing.assert_identical(x[k], y[k]) for k in x]),
                same_values=same_keys and holds(lambda: [xr.testing.assert_equal(x[k], y[k][list(x[k].data_vars)]) for k in x]))

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ref', default=REF, help='reference commit')
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--size', default='default')
    ap.add_argument('--threads', default='1,2', help='torch thread counts to time')
    ap.add_argument('--rounds', type=int, default=2, help='processes per (implementation, thread count)')
    ap.add_argument('--smoke', action='store_true', help=f'tiny size, seconds: defaults {SMOKE}')
    ap.add_argument('--worker', nargs=3, metavar=('PKG', 'THREADS', 'OUT'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if a.rounds < 1: ap.error(f'--rounds {a.rounds}: expected an integer >= 1')
    if a.worker: return worker(a.worker[0], a.system, a.size, int(a.worker[1]), a.worker[2])
    print(json.dumps(dict(load_before=os.getloadavg(), ref=a.ref, system=a.system, size=a.size)), flush=True)
    ref_dir, tmp = reference_package(a.ref), Path(tempfile.mkdtemp(prefix='bench_twins_'))
    env, first = {**os.environ, 'OMP_NUM_THREADS': '1'}, None
    try:
        for k in [int(t) for t in a.threads.split(',')]:
            got, files = {'ref': [], 'new': []}, {'ref': [], 'new': []}
            for r in range(a.rounds):
                for impl, pkg, path in (('ref', 'simreal_ref', str(ref_dir)), ('new', 'simreal_nb', '')):
                    out = tmp / f'{impl}-{k}-{r}.pkl'
                    cmd = [sys.executable, __file__, '--worker', pkg, str(k), str(out), '--system', a.system, '--size', a.size]
                    pp = os.pathsep.join(p for p in (path, env.get('PYTHONPATH', '')) if p)
                    got[impl].append(run_worker(cmd, {**env, 'PYTHONPATH': pp})['wall_s']); files[impl].append(out)
            ref_s, new_s = statistics.median(got['ref']), statistics.median(got['new'])
            first = first or files['ref'][0]
            checks = [compare(first, f) for f in files['new']]
            print(json.dumps(dict(case=f'{a.system}/{a.size}/threads={k}', ref_s=round(ref_s, 1), new_s=round(new_s, 1),
                                  ratio=round(new_s / ref_s, 3), identical=all(c['identical'] for c in checks),
                                  same_values=all(c['same_values'] for c in checks),
                                  runs=dict(ref=[round(x, 1) for x in got['ref']], new=[round(x, 1) for x in got['new']]))), flush=True)
    finally:
        for d in (ref_dir, tmp): shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
