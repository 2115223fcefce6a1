"""Levers for a cheaper training step that the package does not use, measured against its own eager step, as JSON lines.

    python benchmarks/bench_levers.py [--system cylinder] [--protocols sim_only,joint] [--rounds 2]

Each round starts one process per lever, in turn, and each trains the default grid's cell (capacity S, batch 8 per
domain, one thread) as `Trainer.fit` would, timing blocks of updates after a warm-up. Levers:
- `eager`: the package as it is (the reference of every ratio);
- `compile`: the model under `torch.compile` (inductor, gcc), its compile time reported apart;
- `bf16`: the step under CPU bf16 autocast (the Fourier transforms stay fp32, as on CUDA); it changes the rounding,
  and needs a CPU with bf16 instructions to be fast.
One JSON line per (protocol, lever): the median seconds per update over all blocks of all rounds and `ratio` = lever /
eager (< 1: faster). The first and last lines record the machine load: read the ratios, not the seconds."""
import argparse, json, os, statistics, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_speed

LEVERS = ('eager', 'compile', 'bf16')

def worker(lever:str, system:str, protocol:str, block:int, nblocks:int, warmup:int):
    "Time one lever in this process: JSON of its update blocks (and the warm-up's seconds, compile included)."
    import torch
    torch.set_num_threads(1)
    from simreal_nb.training import trainer
    t = bench_speed.trainer('simreal_nb', system, protocol, 'fno')
    trainer.reuse_freed_memory()
    if lever == 'compile': t.model.compile(dynamic=False)
    t0 = time.perf_counter()
    t.update()  # builds the stepper (and, compiled, the graphs)
    if lever == 'bf16': t.stepper.autocast = lambda: torch.autocast('cpu', dtype=torch.bfloat16)
    for _ in range(warmup): t.update()
    first = time.perf_counter() - t0
    print(json.dumps(dict(update=[b[0] for b in bench_speed.blocks(t.update, block, nblocks)], warmup_s=first)), flush=True)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--system', default='cylinder')
    ap.add_argument('--protocols', default='sim_only,joint')
    ap.add_argument('--block', type=int, default=10)
    ap.add_argument('--blocks', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--worker', nargs=2, metavar=('LEVER', 'PROTOCOL'), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker: return worker(a.worker[0], a.system, a.worker[1], a.block, a.blocks, a.warmup)
    print(json.dumps(dict(load_before=os.getloadavg(), threads=1)), flush=True)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    for protocol in a.protocols.split(','):
        got = {l: [] for l in LEVERS}
        for _ in range(a.rounds):
            for lever in LEVERS:
                cmd = [sys.executable, __file__, '--worker', lever, protocol, '--system', a.system, '--block', str(a.block),
                       '--blocks', str(a.blocks), '--warmup', str(a.warmup)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                got[lever].append(json.loads(out.stdout.strip().splitlines()[-1]))
        med = {l: statistics.median(s for r in runs for s in r['update']) for l, runs in got.items()}
        for lever in LEVERS:
            print(json.dumps(dict(case=f'{a.system}/fno-S/{protocol}', lever=lever, update_s=round(med[lever], 5),
                                  ratio=round(med[lever] / med['eager'], 3),
                                  warmup_s=round(statistics.median(r['warmup_s'] for r in got[lever]), 1))), flush=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
