"Twin-system budget: cold generation of all four default systems (< 60 s on 2 cores) and cache loads (< 2 s); prints JSON."
import argparse, json, os
from simreal_nb.face.bench import bench_systems

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--size', default='default', help="size preset: default, quick or test")
    ap.add_argument('--workers', type=int, default=2, help="generator processes (one thread each)")
    ap.add_argument('--repeats', type=int, default=3, help="warm cache loads to time (median reported)")
    a = ap.parse_args()
    res = bench_systems(size=a.size, workers=a.workers, repeats=a.repeats)
    print(json.dumps(res, indent=1))
