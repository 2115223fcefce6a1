"""Peak memory of taking windows from a large RealPDEBench trajectory (raw HDF5 and Arrow layouts).

Writes one real trajectory of about 260 MB (u and v, float32, T x H x W) in each published layout to a temporary
folder, then loads small windows with `load_realpdebench` and reports the peak Python allocations (tracemalloc),
pyarrow's own allocations, and the growth of the process's peak RSS. A loader that read the whole trajectory would
show peaks of hundreds of MB; a lazy one stays near the window size.

Run: python benchmarks/bench_realpdebench_memory.py [--frames 4000] [--keep]
"""
import argparse, json, multiprocessing, resource, shutil, tempfile, time, tracemalloc
from pathlib import Path

import h5py
import numpy as np

from simreal_nb.realpdebench import load_realpdebench


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


def measure(root, layout, frames, sub_s):
    import pyarrow as pa
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--frames', type=int, default=2000, help='frames of the synthetic trajectory (u, v of 2000 x 128 x 128: 262 MB)')
    ap.add_argument('--size', type=int, default=128, help='grid H = W')
    ap.add_argument('--keep', action='store_true', help='keep the temporary folder')
    a = ap.parse_args()
    T, H = a.frames, a.size
    tmp = Path(tempfile.mkdtemp(prefix='rpb_bench_'))
    try:
        rows = []
        for layout, writer in (('hdf5', write_h5), ('arrow', write_arrow)):
            root = tmp / layout
            size = in_fresh_process(writer, root, T, H, H)
            print(f"{layout}: wrote one real trajectory of {T} x {H} x {H} (u, v), file {size / 2 ** 20:.0f} MB")
            for frames, sub_s in (((0, 50), 1), ((T // 2, T // 2 + 200), 1), ((0, T, 20), 2)):
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
