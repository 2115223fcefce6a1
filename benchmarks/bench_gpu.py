"""One preset's Joint training step on one GPU: samples/s and peak GPU memory, bf16 autocast on.

    python benchmarks/bench_gpu.py [--capacity S] [--batch 32] [--steps 50] [--arch fan] [--smoke]

On a machine without a visible CUDA device it prints why it skips and exits 0 (nothing is timed on the CPU here:
`simreal bench joint` and `simreal bench models` are the CPU benchmarks). `--smoke`: a small batch and count, in
seconds; without a CUDA device it says that the GPU timing is skipped and times the same Joint step on the CPU."""
import argparse, json, sys
import torch
from simreal_nb.face.bench import bench_joint

SMOKE = dict(batch=2, steps=2)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--capacity', default='S'); ap.add_argument('--arch', default='fan')
    ap.add_argument('--batch', type=int, default=32, help='windows per domain mini-batch')
    ap.add_argument('--steps', type=int, default=50, help='timed updates of each kind')
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}; on the CPU where no CUDA device is visible')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        if not a.smoke:
            print(json.dumps(dict(skipped='no CUDA device is visible on this machine; this benchmark needs one GPU')))
            return 0
        print(json.dumps(dict(skipped='the GPU timing (bf16 autocast, peak GPU memory): no CUDA device is visible; '
                                      'the same Joint step timed on the CPU instead')), flush=True)
        r = bench_joint(batch=a.batch, steps=a.steps, capacity=a.capacity, arch=a.arch, threads=1, device='cpu')
        r.update(gpu=None, samples_per_s=2 * a.batch / r['joint_s'], peak_memory_gib=None, autocast=None)
        print(json.dumps(r))
        return 0
    torch.cuda.reset_peak_memory_stats()
    r = bench_joint(batch=a.batch, steps=a.steps, capacity=a.capacity, arch=a.arch, device='cuda')
    r.update(gpu=torch.cuda.get_device_name(), samples_per_s=2 * a.batch / r['joint_s'],  # a Joint update sees both batches
             peak_memory_gib=torch.cuda.max_memory_allocated() / 2 ** 30, autocast='bf16')
    print(json.dumps(r))
    return 0

if __name__ == '__main__': sys.exit(main())
