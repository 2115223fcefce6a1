"""Training throughput, FLOP utilisation and peak memory of the model presets, one JSON line per preset.

    python benchmarks/bench_models.py --presets S,M,Ti,MS --steps 10 [--smoke]

Same numbers as `simreal bench models`. The first line records the machine load (the cores may be shared). `--smoke`:
the S preset, a small batch, grid and count on one thread, in seconds."""
import argparse, json, os
from simreal_nb.face.bench import bench_models

SMOKE = dict(presets='S', grid='16,32', batch=2, steps=2, threads=1)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--presets', default='S,M', help='comma-separated capacity presets')
    ap.add_argument('--arch', default='fan', help="architecture: fan, fno or unet")
    ap.add_argument('--grid', default='32,64', help='H,W')
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--steps', type=int, default=10, help='timed training steps per preset (median reported)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    print(json.dumps(dict(load_before=os.getloadavg())), flush=True)
    for row in bench_models(presets=a.presets.split(','), arch=a.arch, grid=tuple(int(g) for g in a.grid.split(',')),
                            batch=a.batch, steps=a.steps, threads=a.threads):
        print(json.dumps(row), flush=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
