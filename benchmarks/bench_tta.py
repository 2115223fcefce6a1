"""Time to accuracy of model configurations on a twin system's simulation data, one JSON line per configuration.

    python benchmarks/bench_tta.py --system cylinder --size default --configs fan-p8,fan-p4,fno --seconds 150 [--smoke]

Each configuration trains on the sim train split (AdamW, warm-up then constant lr, batch 8, seeded) and is validated
every `--every` updates on fixed sim val windows; the row gives the training seconds and updates to first reach each
validation-MSE target, the best validation MSE and the curve. Configuration names: `simreal_nb.face.bench.TTA_CONFIGS`.
Run one at a time; `load1` records the 1-minute load average. On a busy machine pass `--threads 1`. `--smoke`: the
`test` size, two configurations, a few updates on one thread, in seconds."""
import argparse, json, os
from simreal_nb.face.bench import bench_tta, TTA_CONFIGS, TTA_TARGETS

SMOKE = dict(size='test', configs='fan-p8,fno', updates=4, every=2, warmup=1, threads=1)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--size', default='default')
    ap.add_argument('--configs', default='fan-p8,fan-p4,fno', help=f'comma-separated names from {sorted(TTA_CONFIGS)}')
    ap.add_argument('--updates', type=int, default=2400, help='at most this many updates per configuration')
    ap.add_argument('--seconds', type=float, default=None, help='stop a configuration after this much training time')
    ap.add_argument('--every', type=int, default=40, help='updates between validations')
    ap.add_argument('--lr', type=float, default=2e-3, help='learning rate of configurations that name none')
    ap.add_argument('--warmup', type=int, default=50)
    ap.add_argument('--targets', default=','.join(f'{t:g}' for t in TTA_TARGETS))
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    print(json.dumps(dict(load_before=os.getloadavg())), flush=True)
    bench_tta(a.configs.split(','), system=a.system, size=a.size, updates=a.updates, seconds=a.seconds, every=a.every,
              lr=a.lr, warmup=a.warmup, targets=[float(t) for t in a.targets.split(',')], threads=a.threads, seed=a.seed,
              log=lambda r: print(json.dumps(r), flush=True))
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
