"""Time `simreal ada mog` end to end: once with an empty flow cache (cold: the base and the guided base are trained), once
warm (both read back), same seed.

Budget: cold <= 10 minutes, warm <= 3 minutes on 2 CPU cores.
Usage: python benchmarks/bench_ada.py [--threads 2] [--seed 0] [--preset default|test] [--out DIR] [--smoke]
Prints the per-phase timings of both runs, the machine load (the machine may be shared: timings include contention),
whether the two runs gave the same metrics, and the measured table; writes bench_ada.json into DIR. `--smoke`: the
`test` preset, its base trained for fewer steps, on one thread, in seconds.
"""
import argparse, json, os, tempfile, time
import torch
from simreal_nb.ada.adamog import MOG_PRESETS, run_mog

BUDGET_S = dict(cold=600.0, warm=180.0)

def _load():
    try: return os.getloadavg()
    except OSError: return None

def bench_ada(out=None, seed:int=0, threads:int=2, preset:str='default', **overrides) -> dict:
    "Run `run_mog` cold then warm with `threads` torch threads (restored afterwards) and `overrides` of the preset; return timings and the load."
    out = out or tempfile.mkdtemp(prefix='bench_ada_')
    cache = os.path.join(out, 'cache')
    n0 = torch.get_num_threads()
    torch.set_num_threads(threads)
    res = dict(threads=threads, preset=preset, overrides=overrides, cpu_count=os.cpu_count(), budget_s=BUDGET_S, runs={})
    try:
        for kind in ('cold', 'warm'):
            d = os.path.join(out, kind)
            load0, t0, c0 = _load(), time.perf_counter(), time.process_time()
            metrics = run_mog(d, seed=seed, preset=preset, verbose=kind == 'warm', cache_dir=cache, **overrides)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            info = json.load(open(os.path.join(d, 'run_info.json')))
            res['runs'][kind] = dict(wall_s=wall, cpu_s=cpu, ratio_to_budget=wall / BUDGET_S[kind], phases_s=info['timings_s'],
                                     load_before=load0, load_after=_load(), metrics=metrics)
    finally:
        torch.set_num_threads(n0)
    res['same_metrics'] = res['runs']['cold']['metrics'] == res['runs']['warm']['metrics']
    with open(os.path.join(out, 'bench_ada.json'), 'w') as f: json.dump(res, f, indent=1)
    return res

SMOKE = dict(preset='test', threads=1)
SMOKE_OVERRIDES = dict(base_iters=30)  # the test preset's base trains for most of its seconds

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--threads', type=int, default=2); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--preset', default='default', choices=list(MOG_PRESETS)); p.add_argument('--out', default=None)
    p.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}, the preset changed by {SMOKE_OVERRIDES}')
    a = p.parse_args(argv)
    if a.smoke: p.set_defaults(**SMOKE); a = p.parse_args(argv)
    r = bench_ada(a.out, a.seed, a.threads, a.preset, **(SMOKE_OVERRIDES if a.smoke else {}))
    for kind, x in r['runs'].items():
        print(f"\n{kind}: wall {x['wall_s']:.1f} s = {x['ratio_to_budget']:.2f} x the {r['budget_s'][kind]:.0f} s budget; "
              f"process CPU {x['cpu_s']:.1f} s; load avg before {x['load_before']}, after {x['load_after']}")
        print('  phases [s]: ' + ', '.join(f'{k} {v:.1f}' for k, v in x['phases_s'].items()))
    print(f"\nsame metrics cold and warm: {r['same_metrics']} ({r['threads']} threads, {r['cpu_count']} cpus)")

if __name__ == '__main__': main()
