"""Time the ADA mixture-of-Gaussians experiment (base training + ADA + EA(1..4) + metrics).

Budget: under 3 minutes on 2 CPU cores. Usage: python benchmarks/bench_ada.py [--threads 1] [--seed 0] [--preset default|test] [--out DIR]
One torch thread by default: the networks are tiny (64-wide MLPs), so a second thread buys little when the machine is
idle and costs several-fold when it is shared (thread oversubscription).
Prints the per-phase timings, the machine load (the machine may be shared: timings include contention) and the
measured-vs-paper table; writes bench_ada.json next to the run's files.
"""
import argparse, json, os, tempfile, time
import torch
from simreal_nb.ada import MOG_PRESETS, run_mog

BUDGET_S = 180.0

def _load():
    try: return os.getloadavg()
    except OSError: return None

def bench_ada(out=None, seed:int=0, threads:int=1, preset:str='default') -> dict:
    "Run `run_mog` once with `threads` torch threads (restored afterwards); return timings and the load."
    out = out or tempfile.mkdtemp(prefix='bench_ada_')
    n0 = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        load0, t0, c0 = _load(), time.perf_counter(), time.process_time()
        metrics = run_mog(out, seed=seed, preset=preset, verbose=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        torch.set_num_threads(n0)
    info = json.load(open(os.path.join(out, 'run_info.json')))
    res = dict(wall_s=wall, cpu_s=cpu, budget_s=BUDGET_S, ratio_to_budget=wall / BUDGET_S, threads=threads, preset=preset,
               phases_s=info['timings_s'], load_before=load0, load_after=_load(), cpu_count=os.cpu_count(),
               out=out, metrics=metrics)
    with open(os.path.join(out, 'bench_ada.json'), 'w') as f: json.dump(res, f, indent=1)
    return res

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--threads', type=int, default=1); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--preset', default='default', choices=list(MOG_PRESETS)); p.add_argument('--out', default=None)
    a = p.parse_args()
    r = bench_ada(a.out, a.seed, a.threads, a.preset)
    ph = r['phases_s']
    print(f"\nphases [s]: " + ', '.join(f'{k} {v:.1f}' for k, v in ph.items()))
    print(f"wall {r['wall_s']:.1f} s = {r['ratio_to_budget']:.2f} x the {BUDGET_S:.0f} s budget; process CPU time "
          f"{r['cpu_s']:.1f} s (what an idle core would take with one thread) "
          f"({r['threads']} threads; load avg before {r['load_before']}, after {r['load_after']}; {r['cpu_count']} cpus)")
