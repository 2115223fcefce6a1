"""Twin-system budget: cold generation of all four default systems (< 60 s on 2 cores) and cache loads (< 2 s); prints JSON.

    python benchmarks/bench_systems.py [--size default] [--workers 2] [--repeats 3] [--systems cylinder,foil] [--smoke]

`--smoke`: two systems at the `test` size, generated in this process, one warm load, in seconds."""
import argparse, json
from simreal_nb.face.bench import bench_systems

SMOKE = dict(size='test', systems='kolmogorov,foil', workers=1, repeats=1)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--size', default='default', help="size preset: default, quick or test")
    ap.add_argument('--workers', type=int, default=2, help="generator processes (one thread each)")
    ap.add_argument('--repeats', type=int, default=3, help="warm cache loads to time (median reported)")
    ap.add_argument('--systems', default=None, help='comma-separated systems (default: all)')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    res = bench_systems(size=a.size, workers=a.workers, repeats=a.repeats, systems=a.systems.split(',') if a.systems else None)
    print(json.dumps(res, indent=1))

if __name__ == '__main__': main()
