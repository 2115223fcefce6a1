"""Cost of one Joint update relative to one sim update plus one exp update, as one JSON line.

    python benchmarks/bench_joint.py --batch 8 --steps 20 --capacity S [--smoke]

Same numbers as `simreal bench joint` (which prints the same JSON object). Target: ratio <= 1.05. The first and last
lines record the machine load (the cores may be shared: compare ratios measured in one run, not absolute times).
`--smoke`: a small batch, grid and count on one thread, in seconds."""
import argparse, json, os
from simreal_nb.face.bench import bench_joint

SMOKE = dict(batch=2, steps=2, grid='16,32', threads=1)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--batch', type=int, default=8, help='windows per domain mini-batch')
    ap.add_argument('--steps', type=int, default=20, help='timed updates of each kind (median reported)')
    ap.add_argument('--capacity', default='S', help='model capacity preset')
    ap.add_argument('--arch', default='fan', help='architecture: fan, fno or unet')
    ap.add_argument('--grid', default='32,64', help='H,W')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--device', default='cpu', help="cpu, cuda or auto")
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    print(json.dumps(dict(load_before=os.getloadavg())), flush=True)
    print(json.dumps(bench_joint(batch=a.batch, steps=a.steps, capacity=a.capacity, arch=a.arch,
                                 grid=tuple(int(g) for g in a.grid.split(',')), threads=a.threads, device=a.device)), flush=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
