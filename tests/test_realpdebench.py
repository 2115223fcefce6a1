"""RealPDEBench loader: miniature files written here in the two published layouts (raw HDF5 and Hugging Face Arrow)."""
from simreal_nb.face.flags import is_user_error
import json
import warnings

import h5py
import numpy as np
import numpy.testing as npt
import pytest
import xarray as xr

from simreal_nb.data.realpdebench import import_realpdebench, load_realpdebench
from simreal_nb.data.realpdebench_files import RealPDEBenchError, parse_sim_id, scan_realpdebench, SCENARIOS
from simreal_nb.core.schema import validate
from simreal_nb.core.store import read_dataset

pa = pytest.importorskip('pyarrow')

T, H, W = 6, 4, 5


def _fields(k, real, t_len=T):
    "Distinct, recognisable values: u = 1000*traj + 100*frame + 10*row + col."
    tt, yy, xx = np.meshgrid(np.arange(t_len), np.arange(H), np.arange(W), indexing='ij')
    u = (1000 * k + 100 * tt + 10 * yy + xx).astype(np.float32)
    d = dict(u=u, v=-u)
    d['p'] = np.zeros_like(u) if real else (u + 0.5)
    return d


def _grid():
    x, y = np.meshgrid(np.linspace(0.0, 0.4, W), np.linspace(0.3, 0.0, H))  # y descending, as image rows
    return x, y


def _groups(sdir, dtype, remain, in_dist, out_dist):
    for stem, ids in (('remain_params', remain), ('in_dist_test_params', in_dist), ('out_dist_test_params', out_dist)):
        (sdir / f'{stem}_{dtype}.json').write_text(json.dumps({s: [1.0] for s in ids}))


def write_h5(root, scenario, names, real_p=True, t_lens=None):
    "Raw layout: {root}/{scenario}/{real|numerical}/{name} with measured_data/u, v[, p] (T, H, W), x, y, t at the root."
    sdir = root / scenario
    x, y = _grid()
    for dtype in ('real', 'numerical'):
        (sdir / dtype).mkdir(parents=True, exist_ok=True)
        for k, n in enumerate(names):
            tl = (t_lens or {}).get(n, T)
            d = _fields(k, dtype == 'real', tl)
            with h5py.File(sdir / dtype / n, 'w') as f:
                f['measured_data/u'], f['measured_data/v'] = d['u'], d['v']
                if dtype == 'numerical' or real_p: f['measured_data/p'] = d['p']  # real: zero-filled pressure
                f['x'], f['y'] = np.broadcast_to(x, (tl, H, W)), y  # x stored (T, H, W) as some files do
                f['t'] = 5.0 + 0.1 * np.arange(tl)
    _groups(sdir, 'real', names[:1], names[1:2], names[2:])
    return sdir


def write_arrow(root, scenario, names, drop=(), two_shards=False):
    "Hugging Face layout: {root}/{scenario}/hf_dataset/{type}/data-*.arrow (IPC stream) + state.json + index JSONs."
    sdir = root / scenario
    x, y = _grid()
    t = 5.0 + 0.1 * np.arange(T)
    for dtype in ('real', 'numerical'):
        folder = sdir / 'hf_dataset' / dtype
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for k, n in enumerate(names):
            d = _fields(k, dtype == 'real')
            r = dict(sim_id=n, u=d['u'].tobytes(), v=d['v'].tobytes(), shape_t=T, shape_h=H, shape_w=W,
                     x=x.tobytes(), x_shape_h=H, x_shape_w=W, y=y.tobytes(), y_shape_h=H, y_shape_w=W,
                     t=t.tobytes(), t_shape=T, vo=None)
            if dtype == 'numerical': r['p'] = d['p'].tobytes()
            rows.append({c: v for c, v in r.items() if c not in drop})
        types = dict(sim_id=pa.string(), u=pa.binary(), v=pa.binary(), p=pa.binary(), vo=pa.binary(), x=pa.binary(),
                     y=pa.binary(), t=pa.binary(), shape_t=pa.int32(), shape_h=pa.int32(), shape_w=pa.int32(),
                     x_shape_h=pa.int32(), x_shape_w=pa.int32(), y_shape_h=pa.int32(), y_shape_w=pa.int32(),
                     t_shape=pa.int32())
        parts = [rows[:1], rows[1:]] if two_shards else [rows]
        files = []
        for i, part in enumerate(parts):
            cols = {c: pa.array([r[c] for r in part], types[c]) for c in part[0]}
            table = pa.table(cols)
            name = f'data-{i:05d}-of-{len(parts):05d}.arrow'
            with pa.OSFile(str(folder / name), 'wb') as f:
                with pa.ipc.new_stream(f, table.schema) as w: w.write_table(table)
            files.append(name)
        (folder / 'state.json').write_text(json.dumps({'_data_files': [{'filename': n} for n in files]}))
        (folder / 'dataset_info.json').write_text('{}')
        for split, pairs in dict(train=[(names[0], 0)], val=[(names[1], 2)], test=[(names[0], 3)]).items():
            (sdir / 'hf_dataset' / f'{split}_index_{dtype}.json').write_text(
                json.dumps([dict(sim_id=s, time_id=t0) for s, t0 in pairs]))
    _groups(sdir, 'real', names[:1], names[1:2], names[2:])
    return sdir


NAMES = ['3000.h5', '1800.h5', '2400.h5']  # deliberately not in parameter order


@pytest.mark.parametrize('layout', ['hdf5', 'arrow'])
def test_load_both_layouts(tmp_path, layout):
    (write_h5 if layout == 'hdf5' else write_arrow)(tmp_path, 'cylinder', NAMES)
    out = load_realpdebench(tmp_path, 'cylinder')
    sim, exp = out['sim'], out['exp']
    validate(sim, 'sim'); validate(exp, 'exp')
    assert sim.attrs['layout'] == layout
    # parameters from the names, trajectories sorted by them
    npt.assert_array_equal(sim['Re'].values, [1800., 2400., 3000.])
    assert list(exp['sim_id'].values) == ['1800.h5', '2400.h5', '3000.h5']
    # published groups kept per trajectory (names[0]=3000 remain, names[1]=1800 in_dist, names[2]=2400 out_dist)
    assert list(exp['group'].values) == ['in_dist', 'out_dist', 'remain']
    # pressure: sim keeps it; exp has no field p at all (the zero-filled pressure is missing, not zeros)
    assert 'p' in sim and 'p' not in exp
    assert 'pressure_note' in exp.attrs
    # coordinates ascending; y was stored descending, so rows come flipped
    for c in ('time', 'y', 'x'): assert (np.diff(sim[c].values) > 0).all()
    npt.assert_allclose(sim['time'].values, 0.1 * np.arange(T), atol=1e-12)
    npt.assert_allclose(exp['y'].values, np.linspace(0.0, 0.3, H))
    k = NAMES.index('1800.h5')  # file order index used for its values
    expect = _fields(k, False)['u'][:, ::-1, :]
    npt.assert_array_equal(sim['u'].values[0], expect)
    npt.assert_array_equal(exp['v'].values[0], -expect)
    npt.assert_array_equal(sim['p'].values[0], expect + 0.5)
    # one set of reference scales, the same on both domains
    for f in ('u', 'v', 'p'): assert sim.attrs[f'scale_{f}'] == exp.attrs[f'scale_{f}'] > 0
    u, v = sim['u'].values.astype(float), sim['v'].values.astype(float)
    npt.assert_allclose(sim.attrs['scale_u'], np.sqrt(np.mean(u ** 2 + v ** 2)), rtol=1e-9)
    npt.assert_allclose(sim.attrs['scale_p'], np.std(sim['p'].values.astype(float)), rtol=1e-6)


def test_arrow_windows_and_shards(tmp_path):
    write_arrow(tmp_path, 'cylinder', NAMES, two_shards=True)
    exp = load_realpdebench(tmp_path / 'cylinder', 'cylinder', domains='exp', layout='arrow')['exp']
    assert set(exp.data_vars) == {'u', 'v'}
    ws = exp['window_split'].sel(traj=int(np.flatnonzero(exp['sim_id'].values == '3000.h5')[0])).values
    npt.assert_array_equal(ws, [1, 0, 0, 3, 0, 0])  # train window at frame 0, test at frame 3
    ws = exp['window_split'].sel(traj=int(np.flatnonzero(exp['sim_id'].values == '1800.h5')[0])).values
    npt.assert_array_equal(ws, [0, 0, 2, 0, 0, 0])


def test_window_is_lazy_and_exact(tmp_path):
    write_h5(tmp_path, 'cylinder', NAMES)
    out = load_realpdebench(tmp_path, 'cylinder', frames=(1, 6, 2), sub_s=2, sim_ids=['2400.h5'])
    sim = out['sim']
    assert sim.sizes == dict(traj=1, time=3, y=2, x=3)
    full = _fields(NAMES.index('2400.h5'), False)['u']
    npt.assert_array_equal(sim['u'].values[0], full[1:6:2, ::2, ::2][:, ::-1, :])
    npt.assert_allclose(sim['time'].values, [0.0, 0.2, 0.4], atol=1e-12)
    npt.assert_allclose(sim['y'].values, [0.1, 0.3])  # stored rows 0 and 2 (y = 0.3, 0.1), flipped
    assert sim.attrs['frames'] == [1, 6, 2]


def test_params_two_numbers_and_groups(tmp_path):
    names = ['3272_18.2_0.8_1.h5', '3272_20.0_0.8_1.h5', '4100_18.2_0.8_1.h5']
    write_h5(tmp_path, 'fsi', names)
    assert parse_sim_id('fsi', names[0]) == {'Re': 3272.0, 'param2': 18.2}
    assert parse_sim_id('controlled_cylinder', '2000_0.5.h5') == {'Re': 2000.0, 'f_ctrl': 0.5}
    exp = load_realpdebench(tmp_path, 'fsi', domains=['exp'], groups=['remain', 'out_dist'])['exp']
    assert set(exp['group'].values) == {'remain', 'out_dist'} and exp.sizes['traj'] == 2
    npt.assert_array_equal(exp['param2'].values, [18.2, 18.2])
    df = scan_realpdebench(tmp_path, 'fsi')
    assert len(df) == 6 and set(df['domain']) == {'sim', 'exp'}


def test_shortest_trajectory_sets_length(tmp_path):
    write_h5(tmp_path, 'cylinder', NAMES, t_lens={'2400.h5': 4})
    sim = load_realpdebench(tmp_path, 'cylinder', domains='sim')['sim']
    assert sim.sizes['time'] == 4
    with pytest.raises(RealPDEBenchError, match=r'2400\.h5.*frames 0:6 reach past its 4 frames'):
        load_realpdebench(tmp_path, 'cylinder', frames=(0, 6))


def test_import_writes_both_files(tmp_path):
    write_arrow(tmp_path / 'dl', 'cylinder', NAMES)
    paths = import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'out', name='cyl')
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['cyl.set.json', 'cyl_exp.nc', 'cyl_sim.nc']
    exp = read_dataset(paths['exp'], domain='exp')
    sim = read_dataset(paths['sim'], domain='sim')
    assert 'p' not in exp and list(exp['group'].values) == ['in_dist', 'out_dist', 'remain']
    assert exp['window_split'].dtype == np.int8 and sim['window_split'].sum() > 0
    with pytest.raises(FileExistsError, match=r'pass overwrite=True \(CLI: --overwrite\) to replace them'):
        import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'out', name='cyl')


def test_aligns_with_the_package(tmp_path):
    from simreal_nb.data.align import align_domains
    write_h5(tmp_path, 'cylinder', NAMES)
    out = load_realpdebench(tmp_path, 'cylinder')
    s, e = align_domains(out['sim'], out['exp'])
    assert s.attrs['present'] == 'u v p' and e.attrs['present'] == 'u v'


# ---- bad input: one clear error naming the file; nothing written ----

def test_truncated_hdf5(tmp_path):
    sdir = write_h5(tmp_path, 'cylinder', NAMES)
    f = sdir / 'real' / '1800.h5'
    f.write_bytes(f.read_bytes()[:3000])
    with pytest.raises(RealPDEBenchError, match=r'1800\.h5.*(truncated|HDF5)'):
        import_realpdebench(tmp_path, 'cylinder', tmp_path / 'out')
    assert not (tmp_path / 'out').exists() or not any((tmp_path / 'out').iterdir())


def test_wrong_shapes_and_groups(tmp_path):
    sdir = write_h5(tmp_path, 'cylinder', NAMES)
    with h5py.File(sdir / 'numerical' / '2400.h5', 'a') as f:
        del f['measured_data/v']; f['measured_data/v'] = np.zeros((T, H, W + 1), np.float32)
    with pytest.raises(RealPDEBenchError, match=r'2400\.h5: measured_data/v has shape \(6, 4, 6\); expected \(6, 4, 5\)'):
        load_realpdebench(tmp_path, 'cylinder')
    with h5py.File(sdir / 'real' / '1800.h5', 'a') as f: del f['measured_data']
    with pytest.raises(RealPDEBenchError, match=r"1800\.h5: no group 'measured_data'"):
        load_realpdebench(tmp_path, 'cylinder', domains='exp')


def test_name_that_does_not_parse(tmp_path):
    write_h5(tmp_path, 'cylinder', NAMES + ['run_a.h5'])
    with pytest.raises(RealPDEBenchError, match=r"'run_a\.h5': file name does not parse as a 'cylinder' trajectory"):
        load_realpdebench(tmp_path, 'cylinder')
    with pytest.raises(RealPDEBenchError, match='unknown scenario'): parse_sim_id('cylindre', '1.h5')
    with pytest.raises(RealPDEBenchError, match="'combustion'"): load_realpdebench(tmp_path, 'combustion')


def test_arrow_missing_columns_and_bad_bytes(tmp_path):
    write_arrow(tmp_path / 'a', 'cylinder', NAMES, drop=('shape_w',))
    with pytest.raises(RealPDEBenchError, match=r"data-00000-of-00001\.arrow: missing columns \['shape_w'\]"):
        load_realpdebench(tmp_path / 'a', 'cylinder')
    sdir = write_arrow(tmp_path / 'b', 'cylinder', NAMES)
    shard = sdir / 'hf_dataset' / 'real' / 'data-00000-of-00001.arrow'
    shard.write_bytes(shard.read_bytes()[:500])
    with pytest.raises(RealPDEBenchError, match=r'data-00000-of-00001\.arrow.*(truncated|Arrow)'):
        load_realpdebench(tmp_path / 'b', 'cylinder', domains='exp')


def test_missing_download_and_layout(tmp_path):
    with pytest.raises(RealPDEBenchError, match='no such folder'): load_realpdebench(tmp_path / 'nope', 'cylinder')
    write_h5(tmp_path, 'cylinder', NAMES)
    with pytest.raises(RealPDEBenchError, match=r"no real data \(hf_dataset/real/\*\.arrow\)"):
        load_realpdebench(tmp_path, 'cylinder', layout='arrow', domains='exp')


def test_nonfinite_becomes_invalid(tmp_path):
    sdir = write_h5(tmp_path, 'cylinder', NAMES)
    with h5py.File(sdir / 'real' / '1800.h5', 'a') as f: f['measured_data/u'][0, 0, 0] = np.nan
    exp = load_realpdebench(tmp_path, 'cylinder', domains='exp')['exp']
    assert 'valid' in exp and int((~exp['valid'].values).sum()) == 1
    # stored row 0 is the top row (largest y); after the flip it is the last y
    assert not bool(exp['valid'].values[0, 0, -1, 0])


# ---- bad arguments: a RealPDEBenchError (a ValueError, a user error for the CLI) naming the argument ----

@pytest.mark.parametrize('kw, match', [
    (dict(layout='zarr'), r"layout='zarr'; expected 'auto', 'arrow' or 'hdf5'"),
    (dict(domains='real'), r"domains='real'; expected 'sim', 'exp' or a list of them"),
    (dict(domains=[]), r"domains=\[\]; expected 'sim', 'exp'"),
    (dict(frames=(4, 2)), r"frames=\(4, 2\); expected 0 <= start < stop and step >= 1"),
    (dict(frames=(-1, 2)), r"frames=\(-1, 2\); expected 0 <= start < stop"),
    (dict(frames='0:3'), r"frames='0:3'; expected None, a slice or \(start, stop\[, step\]\)"),
    (dict(groups='test'), r"groups=\('test',\): \['test'\] unknown; expected names among \('remain', 'in_dist', 'out_dist'\)"),
    (dict(fields=['u', 'w']), r"fields=\('u', 'w'\): \['w'\] unknown; expected names among"),
    (dict(fields='p', domains='exp'), r"fields='p' leaves no field to load for domain 'exp'; expected at least one"),
    (dict(sub_s=0), r"sub_s=0; expected an integer >= 1"),
    (dict(sub_s=True), r"sub_s=True; expected an integer >= 1"),
    (dict(grid='pixel'), r"grid='pixel'; expected 'file' or 'index'"),
    (dict(scales=dict(w=1.0)), r"scales has keys \['w'\]; expected fields among"),
])
def test_bad_argument_is_a_realpdebench_error(tmp_path, kw, match):
    write_h5(tmp_path, 'cylinder', NAMES)
    with pytest.raises(RealPDEBenchError, match=match) as e:
        load_realpdebench(tmp_path, 'cylinder', **kw)
    assert is_user_error(e.value)  # the CLI answers it with one line and exit 2


def test_bad_argument_checked_before_any_file(tmp_path):
    "layout=, domains=, sub_s= and grid= are refused even where there is no download to read."
    for kw in (dict(layout='zarr'), dict(domains='real'), dict(sub_s=0), dict(grid='pixel')):
        with pytest.raises(RealPDEBenchError, match=next(iter(kw))): load_realpdebench(tmp_path / 'nope', 'cylinder', **kw)
    with pytest.raises(RealPDEBenchError, match="layout='zarr'"): scan_realpdebench(tmp_path / 'nope', 'cylinder', layout='zarr')


def test_bad_name_and_example_layout(tmp_path):
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    write_h5(tmp_path / 'dl', 'cylinder', NAMES)
    for name in ('a/b', 'x y', 7):
        with pytest.raises(RealPDEBenchError, match=r"name=.*; expected a plain file stem \(letters, digits, _ \. -\)"):
            import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'out', name=name)
    assert not (tmp_path / 'out').exists()
    with pytest.raises(RealPDEBenchError, match=r"layout='zarr'; expected 'hdf5' or 'arrow'"):
        write_example_realpdebench(tmp_path / 'ex', layout='zarr')
    assert not (tmp_path / 'ex').exists()


def test_cli_resolutions_selections_and_frame_cuts(tmp_path, capsys):
    "`simreal data import realpdebench`: upstream's per-domain steps by default, --sub-s/--frames/--sim-ids/--groups/--horizon passed on, bad values exit 2."
    import xarray as xr
    from simreal_nb.face import cli
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    raw = write_example_realpdebench(tmp_path / 'raw', 'cylinder', T=60, H=12, W=20).parent
    cli.main(['data', 'import', 'realpdebench', str(raw), '--scenario', 'cylinder', '--out', str(tmp_path / 'a')])
    with xr.open_dataset(tmp_path / 'a' / 'cylinder_sim.nc') as s, xr.open_dataset(tmp_path / 'a' / 'cylinder_exp.nc') as e:
        assert (s.attrs['spatial_step'], e.attrs['spatial_step']) == (2, 1) and (s.sizes['x'], e.sizes['x']) == (10, 20)
    cli.main(['data', 'import', 'realpdebench', str(raw), '--scenario', 'cylinder', '--out', str(tmp_path / 'b'), '--sub-s', 'sim=4,exp=2',
              '--frames', '5:45:2', '--sim-ids', '1800.h5,3000.h5', '--groups=remain,out_dist'])
    with xr.open_dataset(tmp_path / 'b' / 'cylinder_exp.nc') as e:
        assert e.attrs['spatial_step'] == 2 and e.sizes['time'] == 20 and list(e.sim_id.values) == ['1800.h5', '3000.h5']
    hf = write_example_realpdebench(tmp_path / 'hf', 'cylinder', layout='arrow', T=60).parent
    cli.main(['data', 'import', 'realpdebench', str(hf), '--scenario', 'cylinder', '--out', str(tmp_path / 'c'), '--frames', '0:40', '--horizon', '20'])
    with xr.open_dataset(tmp_path / 'c' / 'cylinder_exp.nc') as e:
        assert e.attrs['windows_dropped'] == 1 and int((e.window_split == 3).sum()) == 0 and int((e.window_split == 1).sum()) == 1
    for bad, says in ((['--sub-s', 'big'], '--sub-s'), (['--sub-s', 'sim=0'], 'sub_s='), (['--frames', '3'], '--frames'),
                      (['--grid', 'pixel'], '--grid'), (['--clock', 'gps'], '--clock'), (['--horizon', '0'], '--horizon'),
                      (['--groups', 'test'], 'test')):
        with pytest.raises(SystemExit) as ex:
            cli.main(['data', 'import', 'realpdebench', str(raw), '--scenario', 'cylinder', '--out', str(tmp_path / 'x'), *bad])
        err = capsys.readouterr().err
        assert ex.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, (bad, err)
    assert not (tmp_path / 'x').exists()


# ---- streamed import: the files equal what the in-memory load would write ----

@pytest.mark.parametrize('layout, compress', [('hdf5', False), ('arrow', True)])
def test_streamed_import_equals_the_load(tmp_path, layout, compress):
    from simreal_nb.data.realpdebench import BLOCK_FRAMES
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    from simreal_nb.core.store import write_dataset
    n = 2 * BLOCK_FRAMES + 22  # three blocks per trajectory, the last one short
    sdir = write_example_realpdebench(tmp_path / 'dl', 'cylinder', layout=layout, T=n, H=6, W=10)
    if layout == 'hdf5':  # one NaN in the second block of the second trajectory: the mask starts after blocks were written
        with h5py.File(sdir / 'numerical' / '2400.h5', 'a') as f: f['measured_data/p'][BLOCK_FRAMES + 3, 2, 4] = np.nan
    kw = dict(frames=(1, n, 1), sub_s='upstream')
    paths = import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'out', compress=compress, **kw)
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['cylinder.set.json', 'cylinder_exp.nc', 'cylinder_sim.nc']  # no temporary left
    loaded = load_realpdebench(tmp_path / 'dl', 'cylinder', **kw)
    for dom, ds in loaded.items():
        write_dataset(ds, tmp_path / f'whole_{dom}.nc')
        xr.testing.assert_identical(read_dataset(paths[dom], domain=dom), read_dataset(tmp_path / f'whole_{dom}.nc'))
    sim = read_dataset(paths['sim'])
    if layout == 'hdf5':
        assert int((~sim['valid'].values).sum()) == 1 and bool(sim['valid'].values[0].all())  # 1800.h5 (first) all valid
    else: assert 'valid' not in sim
    assert sim.attrs['scale_p'] > 0 and sim.attrs['scale_u'] == loaded['exp'].attrs['scale_u']


def test_scale_sums_match_numpy(tmp_path):
    from simreal_nb.data.realpdebench import ScaleSums
    rng = np.random.default_rng(1)
    u, v, p = rng.normal(1, 2, (3, 50, 4)), rng.normal(0, 1, (3, 50, 4)), rng.normal(1e4, 3, (3, 50, 4))  # p: large mean, small spread
    p[0, 3, 1] = np.nan
    sums = ScaleSums()
    for i in range(3):
        for j in range(0, 50, 16): sums.add(dict(u=u[i, j:j + 16], v=v[i, j:j + 16], p=p[i, j:j + 16]))
    sc = sums.scales()
    npt.assert_allclose(sc['u'], np.sqrt(np.mean(u ** 2 + v ** 2)), rtol=1e-13)
    npt.assert_allclose(sc['p'], np.nanstd(p), rtol=1e-10)


def test_failed_import_leaves_nothing(tmp_path, monkeypatch):
    import errno
    from simreal_nb.core import store
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    write_example_realpdebench(tmp_path / 'dl', 'cylinder', T=150)
    (tmp_path / 'out').mkdir()
    calls, write = [], store.BlockWriter.write
    def full_disk(self, *a):
        calls.append(1)
        if len(calls) == 4: raise OSError(errno.ENOSPC, 'No space left on device', str(self.path))
        return write(self, *a)
    monkeypatch.setattr(store.BlockWriter, 'write', full_disk)
    with pytest.raises(OSError, match='No space left on device.*cylinder_sim.nc'):
        import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'out')
    assert list((tmp_path / 'out').iterdir()) == []


# ---- the study on published windows: exactly upstream's windows are trained, validated and scored ----

def _upstream_like_splits(sdir, ids, groups, T, span, interval=5, trunk=10, seed=0):
    "Index files by upstream's rule: train from remain trajectories in blocks of frames, val / test halves of the rest."
    rng = np.random.default_rng(seed)
    starts = list(range(0, T - span + 1, interval))
    pairs = {'train': [], 'val': [], 'test': []}
    for s in ids:
        if groups[s] == 'remain':
            blocks = [[t for t in starts if b <= t < b + trunk] for b in range(0, T, trunk)]
            blocks = [b for b in blocks if b]
            rng.shuffle(blocks)
            pairs['train'] += [(s, t) for t in sum(blocks[:len(blocks) // 2], [])]
            rest = sum(blocks[len(blocks) // 2:], [])
        else: rest = list(starts)
        rest = [rest[i] for i in rng.permutation(len(rest))]
        pairs['val'] += [(s, t) for t in rest[:len(rest) // 2]]
        pairs['test'] += [(s, t) for t in rest[len(rest) // 2:]]
    for dtype in ('real', 'numerical'):
        for split, pp in pairs.items():
            (sdir / 'hf_dataset' / f'{split}_index_{dtype}.json').write_text(json.dumps([dict(sim_id=s, time_id=t) for s, t in pp]))
        for g, stem in (('remain', 'remain_params'), ('in_dist', 'in_dist_test_params'), ('out_dist', 'out_dist_test_params')):
            (sdir / f'{stem}_{dtype}.json').write_text(json.dumps({s: [float(s[:-3])] for s in ids if groups[s] == g}))
    return pairs


def test_study_uses_exactly_the_published_windows(tmp_path):
    from simreal_nb.data.domains import make_domain_data
    from simreal_nb.study.evaluation import Persistence, evaluate_groups, long_windows
    from simreal_nb.data.realpdebench_files import SCENARIOS, write_example_realpdebench
    ids = ('1000.h5', '1200.h5', '1400.h5', '1600.h5', '1800.h5', '2000.h5', '2200.h5')
    groups = dict(zip(ids, ('out_dist', 'remain', 'remain', 'in_dist', 'remain', 'remain', 'out_dist')))
    T, span = 60, SCENARIOS['cylinder']['horizon']
    sdir = write_example_realpdebench(tmp_path / 'dl', 'cylinder', layout='arrow', sim_ids=ids, T=T)
    pairs = _upstream_like_splits(sdir, ids, groups, T, span)
    paths = import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'data')
    sim, exp = read_dataset(paths['sim']), read_dataset(paths['exp'])
    dd = make_domain_data(sim, exp, n_in=2, n_out=2)
    def windows(wd): return sorted((str(wd.ds['sim_id'].values[i]), int(t)) for i, t in wd.index.tolist())
    for split in ('train', 'val', 'test'):
        for dom in ('sim', 'exp'):
            assert getattr(dd, dom)[split].windows == 'published'
            assert windows(getattr(dd, dom)[split]) == sorted(pairs[split]), (dom, split)
    assert set(dd.exp['train'].ds['group'].values.tolist()) == {'remain'}
    scored = long_windows(dd.exp['test'], 16)  # the rollout's windows: the same starts, 16 targets each
    assert windows(scored) == sorted(pairs['test']) and scored.n_out == 16
    with pytest.raises(ValueError, match="windows of 42 frames .* longer than the published windows' 40 frames"):
        long_windows(dd.exp['test'], 40)
    ev = evaluate_groups(Persistence(), dd, horizon=4)
    assert list(ev.group.values) == ['in_dist', 'out_dist', 'remain']  # remain: test windows on training trajectories ('seen')
    n = {g: {d: int(ev.n_windows.sel(group=g, domain=d, mode='rollout')) for d in ('sim', 'exp')} for g in ev.group.values}
    want = {g: sum(1 for s, _ in pairs['test'] if groups[s] == g) for g in ('in_dist', 'out_dist', 'remain')}
    assert sum(want.values()) == len(pairs['test']) and min(want.values()) > 0  # every published test window, in one group
    assert n == {g: dict(sim=want[g], exp=want[g]) for g in want}
    own = make_domain_data(sim, exp, n_in=2, n_out=2, windows='all', fracs=(0.5, 0.25, 0.25))  # the package's own split on request
    assert own.exp['test'].windows == 'all' and len(own.exp['test']) != len(dd.exp['test'])


def test_run_on_published_windows_end_to_end(tmp_path):
    "`run_experiment(data=...)` on an imported pair with published windows: trained on them, scored per published test group."
    from dataclasses import replace
    from simreal_nb.study.grid import PRESETS, Grid
    from simreal_nb.study.experiment import run_experiment
    from simreal_nb.data.realpdebench_files import SCENARIOS, write_example_realpdebench
    ids = ('1000.h5', '1200.h5', '1400.h5', '1600.h5', '1800.h5', '2000.h5', '2200.h5')
    groups = dict(zip(ids, ('out_dist', 'remain', 'remain', 'in_dist', 'remain', 'remain', 'out_dist')))
    sdir = write_example_realpdebench(tmp_path / 'dl', 'cylinder', layout='arrow', sim_ids=ids, T=60, H=8, W=16)
    _upstream_like_splits(sdir, ids, groups, 60, SCENARIOS['cylinder']['horizon'])
    import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'data')
    cfg = replace(PRESETS['test'].config, eval_windows=None)  # every published test window scored
    res = run_experiment(tmp_path / 'run', cfg, Grid(None, ['S'], ['sim_only', 'joint']), data=tmp_path / 'data', report=False, verbose=False)
    assert list(res.group.values) == ['in_dist', 'out_dist', 'remain']
    s = res.score.sel(field=['u', 'v'], domain=['sim', 'exp'], protocol=['sim_only', 'joint'])
    assert np.isfinite(s).all()


def test_mvpe_in_the_scores_of_imported_cylinder_data(tmp_path):
    "The wake probes travel from the import (physical coordinates) to the scored grid, and the MVPE is scored there."
    from simreal_nb.data.domains import make_domain_data
    from simreal_nb.study.evaluation import Persistence, evaluate, probe_index
    from simreal_nb.core.metrics import probe_points
    from simreal_nb.data.realpdebench_files import PROBES, write_example_realpdebench
    ids = ('1000.h5', '1400.h5', '1800.h5', '2200.h5', '2600.h5')
    write_example_realpdebench(tmp_path / 'dl', 'cylinder', sim_ids=ids, T=12, H=64, W=128)
    paths = import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'data', sub_s=1)
    sim, exp = read_dataset(paths['sim']), read_dataset(paths['exp'])
    assert len(exp.attrs['probe_x']) == 4 and len(sim.attrs['probe_y']) == 9
    dd = make_domain_data(sim, exp, n_in=2, n_out=1, fracs=(0.6, 0.2, 0.2))
    rows, cols = probe_points(64, 128, *PROBES['cylinder'])
    assert probe_index(dd.exp['test']) == ([63 - r for r in rows], cols)  # the files' y runs downward; the package's upward
    ev = evaluate(Persistence(), dd, horizon=4).score_upstream.sel(mode='rollout', upstream_metric='mvpe')
    assert np.isfinite(ev.sel(field=['u', 'v', 'all'])).all() and ev.sel(field='p', domain='sim').isnull()


def test_arrow_default_step_is_upstreams(tmp_path):
    "Upstream's Arrow converter stores full resolution and its loader subsamples: both layouts load to one grid."
    write_h5(tmp_path / 'raw', 'cylinder', NAMES); write_arrow(tmp_path / 'hf', 'cylinder', NAMES)
    raw, hf = (load_realpdebench(tmp_path / k, 'cylinder', sub_s='upstream') for k in ('raw', 'hf'))
    for dom in ('sim', 'exp'):
        assert raw[dom].attrs['spatial_step'] == hf[dom].attrs['spatial_step'] == SCENARIOS['cylinder']['sub_s'][dom]
        assert dict(raw[dom].sizes) == dict(hf[dom].sizes), (dom, raw[dom].sizes, hf[dom].sizes)
        npt.assert_allclose(raw[dom]['u'].values, hf[dom]['u'].values)
