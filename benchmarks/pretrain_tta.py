"""What a pretrained start does to MORPH's time to accuracy on the cylinder, one JSON line per step.

    python benchmarks/pretrain_tta.py --pretrain-on controlled,foil --pretrain-seconds 600 --seconds 300 --threads 2 [--smoke]

First MORPH (arch morph, capacity Ti) trains on the simulation windows of other twin systems and is saved as a MORPH
checkpoint (`simreal_nb.face.bench.pretrain_morph`; an existing `--ckpt` is reused), then `bench_tta` trains on the
cylinder's sim data from fresh weights and from that checkpoint (and any `--also` configurations), each for at most
`--updates` updates or `--seconds` of training. Run on an otherwise idle machine; `load1` is recorded per row.
`--smoke`: the `test` size, one pretraining system, a few updates on one thread, a checkpoint in a temporary folder,
in seconds."""
import argparse, json, os, tempfile
from pathlib import Path
from simreal_nb.face.bench import bench_tta, pretrain_morph, TTA_TARGETS

SMOKE = dict(ckpt=None, pretrain_on='foil', pretrain_updates=2, size='test', updates=2, every=1, threads=1)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ckpt', default='runs/pretrain/morph-Ti-sim.pth', help='the pretrained checkpoint (made when missing)')
    ap.add_argument('--pretrain-on', default='controlled,foil', help='twin systems whose sim data pretrain MORPH')
    ap.add_argument('--pretrain-updates', type=int, default=4000)
    ap.add_argument('--pretrain-seconds', type=float, default=600)
    ap.add_argument('--system', default='cylinder', help='the system whose time to accuracy is measured')
    ap.add_argument('--size', default='default')
    ap.add_argument('--capacity', default='Ti')
    ap.add_argument('--updates', type=int, default=2400)
    ap.add_argument('--seconds', type=float, default=300)
    ap.add_argument('--every', type=int, default=40)
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--also', default='', help='comma-separated TTA_CONFIGS names trained beside them (e.g. fno)')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE} (ckpt: in a temporary folder)')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    print(json.dumps(dict(load_before=os.getloadavg())), flush=True)
    ck = Path(a.ckpt or Path(tempfile.mkdtemp(prefix='pretrain_tta_')) / f'morph-{a.capacity}-sim.pth')
    if not ck.exists():
        made = pretrain_morph(ck, systems=a.pretrain_on.split(','), size=a.size, capacity=a.capacity, updates=a.pretrain_updates,
                              seconds=a.pretrain_seconds, lr=a.lr, threads=a.threads, seed=a.seed)
        print(json.dumps(dict(pretrained=made)), flush=True)
    cfgs = [dict(name=f'morph-{a.capacity}', arch='morph', capacity=a.capacity),
            dict(name=f'morph-{a.capacity}-pretrained', arch='morph', capacity=a.capacity, init=str(ck))]
    cfgs += [c for c in a.also.split(',') if c]
    bench_tta(cfgs, system=a.system, size=a.size, updates=a.updates, seconds=a.seconds, every=a.every, lr=a.lr,
              targets=TTA_TARGETS, threads=a.threads, seed=a.seed, log=lambda r: print(json.dumps(r), flush=True))
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
