"""Peak memory of taking windows from a large RealPDEBench trajectory (raw HDF5 and Arrow layouts), and of importing a
whole full-size scenario (`--full`).

Default: writes one real trajectory of about 260 MB (u and v, float32, T x H x W) in each published layout to a temporary
folder, then loads small windows with `load_realpdebench` and reports the peak Python allocations (tracemalloc),
pyarrow's own allocations, and the growth of the process's peak RSS. A loader that read the whole trajectory would
show peaks of hundreds of MB; a lazy one stays near the window size.

`--full`: writes a synthetic cylinder scenario at the benchmark's size in the raw HDF5 layout (numerical trajectories
of 3990 frames x 128 x 256 with u, v, p, 1.57 GB each; real ones of 3990 x 64 x 128 with u, v), then imports it with
`import_realpdebench` at upstream's resolutions (`sub_s='upstream'`) in a fresh process for 2 and for all numerical
trajectories, reporting each process's peak resident memory (the bound: it must not grow with the trajectories), the
wall time, and the output sizes; `--compare` also loads the whole scenario into memory with `load_realpdebench`.

`--smoke`: the default measurement of the strided window on a trajectory of a few MB, in seconds (`--full` is not run).

Run: python benchmarks/bench_realpdebench_memory.py [--frames 4000] [--keep] [--smoke]
     python benchmarks/bench_realpdebench_memory.py --full [--numerical 8] [--real 4] [--compare] [--dir DIR]
"""
import argparse, json, multiprocessing, resource, shutil, tempfile, time, tracemalloc
from pathlib import Path

import h5py
import numpy as np


def rss_peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rss_now_mb():
    with open('/proc/self/statm') as f: return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20


def rss_parts_mb():
    "Current anonymous (heap) and file-backed (memory-mapped pages) resident memory."
    d = dict(l.split(':', 1) for l in open('/proc/self/status') if l.startswith(('RssAnon', 'RssFile')))
    return {k: int(v.split()[0]) / 1024 for k, v in d.items()}


def in_fresh_process(fn, *args):
    "Run fn(*args) in a new interpreter, so its peak RSS is its own (not the writer's)."
    ctx = multiprocessing.get_context('spawn')
    with ctx.Pool(1) as pool: return pool.apply(fn, args)


def write_h5(root, T, H, W, chunk=200):
    folder = root / 'cylinder' / 'real'
    folder.mkdir(parents=True)
    x, y = np.meshgrid(np.linspace(0, 1, W), np.linspace(1, 0, H))
    with h5py.File(folder / '3000.h5', 'w') as f:
        g = f.create_group('measured_data')
        for k in ('u', 'v'):
            d = g.create_dataset(k, (T, H, W), np.float32)
            for t0 in range(0, T, chunk):  # written in pieces: the writer itself stays small
                n = min(chunk, T - t0)
                d[t0:t0 + n] = np.full((n, H, W), 1.0 if k == 'u' else 0.1, np.float32)
        f['x'], f['y'], f['t'] = x, y, 0.01 * np.arange(T)
    return (folder / '3000.h5').stat().st_size


def write_arrow(root, T, H, W):
    import pyarrow as pa
    folder = root / 'cylinder' / 'hf_dataset' / 'real'
    folder.mkdir(parents=True)
    x, y = np.meshgrid(np.linspace(0, 1, W), np.linspace(1, 0, H))
    one = np.ones((T, H, W), np.float32)
    cols = dict(sim_id=pa.array(['3000.h5']), u=pa.array([one.tobytes()], pa.binary()),
                v=pa.array([(0.1 * one).tobytes()], pa.binary()), shape_t=pa.array([T], pa.int32()),
                shape_h=pa.array([H], pa.int32()), shape_w=pa.array([W], pa.int32()),
                x=pa.array([x.tobytes()], pa.binary()), x_shape_h=pa.array([H], pa.int32()), x_shape_w=pa.array([W], pa.int32()),
                y=pa.array([y.tobytes()], pa.binary()), y_shape_h=pa.array([H], pa.int32()), y_shape_w=pa.array([W], pa.int32()),
                t=pa.array([(0.01 * np.arange(T)).tobytes()], pa.binary()), t_shape=pa.array([T], pa.int32()))
    table = pa.table(cols)
    del one, cols
    with pa.OSFile(str(folder / 'data-00000-of-00001.arrow'), 'wb') as f:
        with pa.ipc.new_stream(f, table.schema) as w: w.write_table(table)
    (folder / 'state.json').write_text(json.dumps({'_data_files': [{'filename': 'data-00000-of-00001.arrow'}]}))
    return (folder / 'data-00000-of-00001.arrow').stat().st_size


def windows(T):
    "The windows measured, by name: (frames, sub_s) at the head, in the middle, and strided over the whole trajectory."
    return dict(head=((0, min(50, T)), 1), middle=((T // 2, min(T, T // 2 + 200)), 1), strided=((0, T, 20), 2))


def measure(root, layout, frames, sub_s):
    import pyarrow as pa
    from simreal_nb.data.realpdebench import load_realpdebench  # here, not at the top: the writers' processes stay light
    load_realpdebench(root, 'cylinder', layout=layout, domains='exp', frames=(0, 1))  # warm-up: lazy imports not measured
    rss0, parts0 = rss_now_mb(), rss_parts_mb()
    tracemalloc.start(); tracemalloc.reset_peak()
    pa_peak0 = pa.total_allocated_bytes()
    t0 = time.perf_counter()
    exp = load_realpdebench(root, 'cylinder', layout=layout, domains='exp', frames=frames, sub_s=sub_s)['exp']
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory(); tracemalloc.stop()
    parts = {k: v - parts0[k] for k, v in rss_parts_mb().items()}
    win = sum(exp[f].nbytes for f in ('u', 'v')) / 2 ** 20
    return dict(layout=layout, frames=frames, sub_s=sub_s, window_MB=win, tracemalloc_peak_MB=peak / 2 ** 20,
                arrow_alloc_MB=(pa.total_allocated_bytes() - pa_peak0) / 2 ** 20,
                rss_peak_growth_MB=rss_peak_mb() - rss0, rss_before_MB=rss0, anon_growth_MB=parts['RssAnon'], file_growth_MB=parts['RssFile'], seconds=dt)


def write_full(root, numerical, real, T=3990, H=64, W=128, chunk=150):
    "A synthetic full-size cylinder scenario (raw HDF5): numerical at 2H x 2W with u, v, p; real at H x W with u, v."
    sizes = 0
    for dtype, n, (h, w), fields, ids in (('numerical', numerical, (2 * H, 2 * W), ('u', 'v', 'p'), range(1000, 1000 + 40 * numerical, 40)),
                                          ('real', real, (H, W), ('u', 'v'), range(1000, 1000 + 40 * numerical, 40 * max(1, numerical // max(real, 1))))):
        folder = root / 'cylinder' / dtype
        folder.mkdir(parents=True, exist_ok=True)
        x, y = np.meshgrid(np.linspace(-1, 7, w), np.linspace(2, -2, h))
        ramp = np.linspace(0, 1, h * w, dtype=np.float32).reshape(h, w)
        for k, re_ in enumerate(list(ids)[:n]):
            path = folder / f'{re_}.h5'
            with h5py.File(path, 'w') as f:
                g = f.create_group('measured_data')
                for name in fields:
                    d = g.create_dataset(name, (T, h, w), np.float32)
                    for t0 in range(0, T, chunk):  # written in pieces: the writer itself stays small
                        ph = 0.05 * np.arange(t0, min(t0 + chunk, T), dtype=np.float32)[:, None, None] + k
                        d[t0:t0 + len(ph)] = {'u': 1 + 0.2 * np.sin(ph + ramp), 'v': 0.3 * np.cos(ph - ramp),
                                             'p': 0.5 * np.sin(2 * ph) * ramp}[name]
                f['x'], f['y'], f['t'] = x, y, np.arange(T) / 400.0
            sizes += path.stat().st_size
    return sizes


def import_peak(root, out, compress):
    "Import the scenario under `root` (both domains, upstream's resolutions): peak RSS, seconds, output MB."
    from simreal_nb.data.realpdebench import import_realpdebench
    rss0 = rss_now_mb()
    t0 = time.perf_counter()
    import_realpdebench(root, 'cylinder', out, sub_s='upstream', overwrite=True, compress=compress)
    dt = time.perf_counter() - t0
    n = len(list((Path(root) / 'cylinder' / 'numerical').glob('*.h5')))
    mb = {p.name: p.stat().st_size / 2 ** 20 for p in Path(out).glob('*.nc')}
    return dict(numerical=n, seconds=dt, rss_before_MB=rss0, rss_peak_MB=rss_peak_mb(), out_MB=mb)


def first_trajectories(root, sub, n):
    "A scenario folder `root/sub` holding links to the first `n` numerical trajectories of `root` and to all its real ones."
    dst = root / sub / 'cylinder'
    (dst / 'numerical').mkdir(parents=True, exist_ok=True)
    for p in sorted((root / 'cylinder' / 'numerical').glob('*.h5'))[:n]:
        if not (dst / 'numerical' / p.name).exists(): (dst / 'numerical' / p.name).symlink_to(p)
    if not (dst / 'real').exists(): (dst / 'real').symlink_to(root / 'cylinder' / 'real', target_is_directory=True)
    return root / sub


def load_peak(root):
    "Load the whole scenario into memory (the in-memory path) at upstream's resolutions: peak RSS and seconds."
    from simreal_nb.data.realpdebench import load_realpdebench
    t0 = time.perf_counter()
    out = load_realpdebench(first_trajectories(root, 'all', 10 ** 6), 'cylinder', sub_s='upstream')
    held = sum(v.nbytes for ds in out.values() for v in ds.data_vars.values()) / 2 ** 20
    return dict(seconds=time.perf_counter() - t0, rss_peak_MB=rss_peak_mb(), held_MB=held)


def full(a):
    root = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix='rpb_full_'))
    try:
        if not (root / 'cylinder' / 'numerical').is_dir():
            t0 = time.perf_counter()
            size = in_fresh_process(write_full, root, a.numerical, a.real)
            print(f"wrote {a.numerical} numerical (3990 x 128 x 256, u v p) and {a.real} real (3990 x 64 x 128, u v) "
                  f"trajectories: {size / 2 ** 30:.1f} GB in {time.perf_counter() - t0:.0f} s")
        rows = [in_fresh_process(import_peak, first_trajectories(root, f'first{n}', n), root / f'out{n}', a.compress)
                for n in sorted({2, a.numerical})]
        for r in rows:
            print(json.dumps(dict(case='streamed import', **{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()
                                                           if k != 'out_MB'}, out_MB={k: round(v) for k, v in r['out_MB'].items()})))
        if a.compare:
            r = in_fresh_process(load_peak, root)
            print(json.dumps(dict(case='in-memory load_realpdebench', **{k: round(v, 1) for k, v in r.items()})))
        print("rss_peak_MB: the importing process's peak resident memory (interpreter and libraries included); it must "
              "not grow with the number of trajectories")
    finally:
        if a.keep or a.dir: print('kept', root)
        else: shutil.rmtree(root, ignore_errors=True)


SMOKE = dict(frames=400, size=32, windows='strided')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--full', action='store_true', help='import a synthetic full-size scenario (see the module text)')
    ap.add_argument('--numerical', type=int, default=8, help='--full: numerical trajectories (1.57 GB each)')
    ap.add_argument('--real', type=int, default=4, help='--full: real trajectories (0.26 GB each)')
    ap.add_argument('--compare', action='store_true', help='--full: also load the whole scenario into memory')
    ap.add_argument('--compress', action='store_true', help='--full: gzip the imported fields')
    ap.add_argument('--dir', help='--full: folder for the synthetic scenario (kept; reused when it exists)')
    ap.add_argument('--frames', type=int, default=2000, help='frames of the synthetic trajectory (u, v of 2000 x 128 x 128: 262 MB)')
    ap.add_argument('--size', type=int, default=128, help='grid H = W')
    ap.add_argument('--keep', action='store_true', help='keep the temporary folder')
    ap.add_argument('--windows', default=','.join(windows(2)), help='comma-separated windows measured, of ' + ', '.join(windows(2)))
    ap.add_argument('--smoke', action='store_true', help=f'seconds: defaults {SMOKE}')
    a = ap.parse_args(argv)
    if a.smoke: ap.set_defaults(**SMOKE); a = ap.parse_args(argv)
    if a.smoke and a.full: ap.error('--smoke runs the default measurement at a small size; --full is not part of it')
    if a.frames < 2 or a.size < 1: ap.error(f'--frames {a.frames}, --size {a.size}: expected frames >= 2 and size >= 1')
    if unknown := set(a.windows.split(',')) - set(windows(2)): ap.error(f"--windows: unknown {sorted(unknown)}; expected some of {list(windows(2))}")
    if a.full: return full(a)
    T, H = a.frames, a.size
    tmp = Path(tempfile.mkdtemp(prefix='rpb_bench_'))
    try:
        rows = []
        for layout, writer in (('hdf5', write_h5), ('arrow', write_arrow)):
            root = tmp / layout
            size = in_fresh_process(writer, root, T, H, H)
            print(f"{layout}: wrote one real trajectory of {T} x {H} x {H} (u, v), file {size / 2 ** 20:.0f} MB")
            for frames, sub_s in (w for name, w in windows(T).items() if name in a.windows.split(',')):
                rows.append(in_fresh_process(measure, root, layout, frames, sub_s))
        print(f"{'layout':6} {'frames':>18} {'sub_s':>5} {'window MB':>9} {'tracemalloc peak MB':>19} "
              f"{'arrow alloc MB':>14} {'RSS peak growth MB':>18} {'anon MB':>7} {'mapped MB':>9} {'s':>6}")
        for r in rows:
            print(f"{r['layout']:6} {str(r['frames']):>18} {r['sub_s']:>5} {r['window_MB']:9.1f} {r['tracemalloc_peak_MB']:19.1f} "
                  f"{r['arrow_alloc_MB']:14.1f} {r['rss_peak_growth_MB']:18.1f} {r['anon_growth_MB']:7.1f} {r['file_growth_MB']:9.1f} {r['seconds']:6.2f}")
        print("tracemalloc: Python/numpy allocations; arrow alloc: pyarrow's pool; anon/mapped: resident heap and file "
              "pages after the load (mapped pages are the shard's memory map, shared and reclaimable)")
    finally:
        if a.keep: print('kept', tmp)
        else: shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
