"""Levers for a cheaper training step that the package does not use, measured against its own eager step, as JSON lines.

    python benchmarks/bench_levers.py [--system cylinder] [--protocols sim_only,joint] [--levers eager,compile,bf16] [--rounds 2] [--smoke]

Each round starts one process per lever, in turn, and each trains the default grid's cell (capacity S, batch 8 per
domain, one thread) as `Trainer.fit` would, timing blocks of updates after a warm-up. Levers:
- `eager`: the package as it is (the reference of every ratio);
- `compile`: the model under `torch.compile` (inductor, gcc), its compile time reported apart;
- `bf16`: the step under CPU bf16 autocast (the Fourier transforms stay fp32, as on CUDA); it changes the rounding,
  and needs a CPU with bf16 instructions to be fast.
One JSON line per (protocol, lever): the median seconds per update over all blocks of all rounds and `ratio` = lever /
eager (< 1: faster). The first and last lines record the machine load: read the ratios, not the seconds. `--smoke`:
the `test` preset's cell, one round of a few updates, without `compile` (its first compilation outlasts a smoke
run), in seconds."""
import argparse, json, os, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_speed

LEVERS = ('eager', 'compile', 'bf16')
SMOKE = dict(preset='test', protocols='joint', levers='eager,bf16', block=10, blocks=1, rounds=1, warmup=1)

def worker(lever:str, system:str, protocol:str, block:int, nblocks:int, warmup:int, preset:str):
    "Time one lever in this process: JSON of its update blocks (and the warm-up's seconds, compile included)."
    import torch
    torch.set_num_threads(1)
    from simreal_nb.training import trainer
    t = bench_speed.trainer('simreal_nb', system, protocol, 'fno', preset=preset, updates=1 + warmup + block * nblocks)
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
    ap.add_argument('--levers', default=','.join(LEVERS), help=f'comma-separated levers of {LEVERS} (eager is always timed: the reference)')
    ap.add_argument('--preset', default='default', help="the grid preset whose cell is trained (test: seconds)")
    ap.add_argument('--block', type=int, default=10)
    ap.add_argument('--blocks', type=int, default=4)
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--worker', nargs=2, metavar=('LEVER', 'PROTOCOL'), help=argparse.SUPPRESS)
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if a.worker: return worker(a.worker[0], a.system, a.worker[1], a.block, a.blocks, a.warmup, a.preset)
    levers = ['eager'] + [l for l in a.levers.split(',') if l != 'eager']
    if unknown := set(levers) - set(LEVERS): ap.error(f"--levers: unknown {sorted(unknown)}; expected some of {LEVERS}")
    print(json.dumps(dict(load_before=os.getloadavg(), threads=1, preset=a.preset)), flush=True)
    if skipped := [l for l in LEVERS if l not in levers]:
        why = '--smoke: its first compilation (inductor, gcc) outlasts a smoke run' if a.smoke else 'not in --levers'
        print(json.dumps(dict(skipped=skipped, why=why)), flush=True)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    for protocol in a.protocols.split(','):
        got = {l: [] for l in levers}
        for _ in range(a.rounds):
            for lever in levers:
                cmd = [sys.executable, __file__, '--worker', lever, protocol, '--system', a.system, '--preset', a.preset,
                       '--block', str(a.block), '--blocks', str(a.blocks), '--warmup', str(a.warmup)]
                got[lever].append(bench_speed.run_worker(cmd, env))
        med = {l: statistics.median(s for r in runs for s in r['update']) for l, runs in got.items()}
        for lever in levers:
            print(json.dumps(dict(case=f'{a.system}/fno-S/{protocol}', lever=lever, update_s=round(med[lever], 5),
                                  ratio=round(med[lever] / med['eager'], 3),
                                  warmup_s=round(statistics.median(r['warmup_s'] for r in got[lever]), 1))), flush=True)
    print(json.dumps(dict(load_after=os.getloadavg())), flush=True)

if __name__ == '__main__': main()
