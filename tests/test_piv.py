"PIV import checked against real PIV files (Insight, OpenPIV, PIVlab, LaVision VC7): pivpy's samples, shipped in tests/data/piv."
from simreal_nb.face.flags import is_user_error
import importlib.util, os, shutil
from pathlib import Path
import numpy as np, pytest, xarray as xr
from numpy.testing import assert_allclose, assert_array_equal
from simreal_nb.data.piv import (PIVFormatError, read_frames, read_piv, import_piv, piv_format, norm_units, to_si,
                            to_sim_grid)
from simreal_nb.core.store import read_dataset
from simreal_nb.data.align import example_pair


DATA = Path(__file__).resolve().parent / 'data' / 'piv'  # a few of pivpy 0.4.0's sample files (README.md there)

def data(rel):
    p = DATA / rel
    assert p.exists(), f"sample PIV file {rel} is missing from {DATA}"
    return p

INSIGHT = 'Insight/Run000001.T000.D000.P000.H001.L.vec'
INSIGHT_PX = 'day2/day2a005000.T000.D000.P003.H001.L.vec'
OPENPIV6 = 'openpiv_txt/interTest.txt'
OPENPIV5 = 'openpiv_txt/exp1_001_b.txt'
PIVLAB = 'pivlab/test_pivlab.mat'


def raw_rows(path, skip, sep=None):
    "The raw numeric rows of a text file, parsed here independently of the reader."
    lines = [l for l in Path(path).read_text().splitlines()[skip:] if l.strip() and not l.lstrip().startswith('#')]
    return np.array([[float(t) for t in (l.split(sep) if sep else l.split())] for l in lines])

def at(ds_or_frame, x, y):
    "(u, v, valid) of a frame/dataset at the grid point (x, y)."
    i, j = int(np.argmin(np.abs(ds_or_frame.x - x))), int(np.argmin(np.abs(ds_or_frame.y - y)))
    return ds_or_frame.u[j, i], ds_or_frame.v[j, i], ds_or_frame.valid[j, i]


def test_norm_units():
    assert [norm_units(s) for s in ('m/s', 'mm', 'px', '[px/frame]', '', 'µm')] == ['m s-1', 'mm', 'pixel', 'pixel frame-1', '', 'um']


def test_insight_units_values_and_chc():
    p = data(INSIGHT)
    assert piv_format(p) == 'insight'
    [f] = read_frames(p)
    header = p.read_text().splitlines()[0]
    assert '"X mm", "Y mm", "U m/s", "V m/s", "CHC"' in header
    assert (f.length_units, f.velocity_units) == ('mm', 'm s-1')  # pivpy 0.4.0 labels u 'mm' (shifted a column)
    raw = raw_rows(p, 1, ',')
    assert f.u.shape == (63, 63) and raw.shape == (63 * 63, 5)
    assert raw[1, 1] > raw[-1, 1] and (np.diff(f.y) > 0).all() and (np.diff(f.x) > 0).all()  # file y descends
    good = np.nonzero(raw[:, 4] == 1)[0]
    k = good[len(good) // 2]
    u, v, ok = at(f, raw[k, 0], raw[k, 1])
    assert ok and u == np.float32(raw[k, 2]) and v == np.float32(raw[k, 3])  # same sign: v is along +y either way
    bad = np.nonzero((raw[:, 4] <= 0) & (raw[:, 2] != 0))[0]
    assert len(bad)  # the file holds non-zero numbers at rejected vectors; they must not survive
    for k in bad[:20]:
        u, v, ok = at(f, raw[k, 0], raw[k, 1])
        assert not ok and np.isnan(u) and np.isnan(v)
    assert f.valid.sum() == (raw[:, 4] > 0).sum() and f.time is None


def test_insight_pixel_file_keeps_its_units():
    [f] = read_frames(data(INSIGHT_PX))
    assert (f.length_units, f.velocity_units) == ('pixel', 'pixel deltaT-1')
    assert_allclose(f.attrs['pulse_interval_s'], 0.055)
    raw = raw_rows(data(INSIGHT_PX), 1, ',')
    k = np.nonzero(raw[:, 4] == 1)[0][100]
    u, v, ok = at(f, raw[k, 0], raw[k, 1])
    assert ok and (u, v) == (np.float32(raw[k, 2]), np.float32(raw[k, 3]))


def test_openpiv_six_columns_flags_and_mask():
    p = data(OPENPIV6)
    assert p.read_text().splitlines()[0].split() == ['#', 'x', 'y', 'u', 'v', 'flags', 'mask']
    [f] = read_frames(p, units=('mm', 'mm/s'))
    raw = raw_rows(p, 1)
    keep = (raw[:, 4] == 0) & (raw[:, 5] == 0) & np.isfinite(raw[:, 2])
    assert f.valid.sum() == keep.sum() and 0 < keep.sum() < len(raw)
    k = np.nonzero(keep & (raw[:, 2] != 0))[0][0]
    u, v, ok = at(f, raw[k, 0], raw[k, 1])
    assert ok and (u, v) == (np.float32(raw[k, 2]), np.float32(raw[k, 3]))  # pivpy 0.4.0 returns 0 here
    k = np.nonzero((raw[:, 4] == 1) & np.isfinite(raw[:, 2]))[0][0]  # flagged although finite
    u, v, ok = at(f, raw[k, 0], raw[k, 1])
    assert not ok and np.isnan(u)
    assert (np.diff(f.y) > 0).all() and raw[0, 1] > raw[-1, 1]
    assert (f.length_units, f.velocity_units) == ('mm', 'mm s-1')


def test_openpiv_needs_units_and_five_columns():
    p = data(OPENPIV5)
    with pytest.raises(PIVFormatError, match=r'exp1_001_b\.txt: the file states no length unit; pass units='):
        read_frames(p)
    [f] = read_frames(p, units=('pixel', 'pixel/frame'))
    raw = raw_rows(p, 0)
    assert raw.shape[1] == 5 and not np.isin(raw[:, 4], (0, 1)).all()  # 5th column: not a 0/1 mask (a peak ratio)
    assert f.valid.all() and f.u.shape == (22, 30)
    u, v, _ = at(f, raw[37, 0], raw[37, 1])
    assert (u, v) == (np.float32(raw[37, 2]), np.float32(raw[37, 3]))


def test_pivlab_mat_against_raw_hdf5():
    import h5py
    p = data(PIVLAB)
    frames = read_frames(p, units=('pixel', 'pixel/frame'))
    assert len(frames) == 2
    with h5py.File(p, 'r') as h:  # MATLAB v7.3: HDF5 arrays are the transpose of the MATLAB ones
        x, y, u, v, t = (h[f'{n}_0'][()].T for n in ('x', 'y', 'u', 'v', 'typevector'))
    f = frames[0]
    assert_array_equal(f.x, x[0]) and assert_array_equal(f.y, y[:, 0])  # 10 x-values, 8 y-values (not collapsed)
    assert len(np.unique(f.x)) == 10 and len(np.unique(f.y)) == 8
    ok = t == 1
    assert_array_equal(f.valid, ok)
    assert_array_equal(f.u[ok], u[ok].astype(np.float32)) and assert_array_equal(f.v[ok], v[ok].astype(np.float32))
    assert np.isnan(f.u[0, 0]) and t[0, 0] == 0  # typevector 0: masked


def lv_raw(path):
    lv = pytest.importorskip('lvpyio', reason='lvpyio (LaVision) is needed to read .vc7 files')
    return lv.read_buffer(str(path))[0]

def test_vc7_jet_values_sign_units_and_times():
    paths = [data(f'PIVMAT_jet/B0000{k}.VC7') for k in (1, 2, 3)]
    fr = lv_raw(paths[0])
    ds = read_piv(paths)
    s = fr.scales
    assert (ds.x.attrs['units'], ds.u.attrs['units']) == (s.x.unit, 'm s-1') == ('mm', 'm s-1')
    assert s.y.slope < 0 and (np.diff(ds.y) > 0).all()  # file rows run downwards; y ascends after the flip
    # acquisition times: AcqTimeSeries '1529976 µs', '1778899 µs', '2028923 µs'
    assert_allclose(ds.time, [0.0, 0.248923, 0.498947], atol=1e-9)
    assert_allclose(ds.attrs['time_origin_s'], 1.529976)
    # one vector, by hand from lvpyio's raw components: active choice, intensity scale, sign of the axis scale
    ch = fr.active_choice[0]
    ny = fr.shape[0]
    j, i = np.argwhere((ch == 4) & (fr.enabled[0] == 1))[500]
    c = fr.choices - 1  # pseudo-choice 4 (smoothed/filled) holds the last choice's component
    u_raw = fr.components[f'U{c}'][0][j, i] * s.i.slope + s.i.offset
    v_raw = (fr.components[f'V{c}'][0][j, i] * s.i.slope + s.i.offset) * np.sign(s.y.slope)
    assert_allclose(ds.u[0, 0, ny - 1 - j, i], u_raw, rtol=1e-6)
    assert_allclose(ds.v[0, 0, ny - 1 - j, i], v_raw, rtol=1e-6)
    assert_allclose(ds.x[i], s.x.offset + (i + 0.5) * fr.grid.x * s.x.slope)
    assert_allclose(ds.y[ny - 1 - j], s.y.offset + (j + 0.5) * fr.grid.y * s.y.slope)
    # disabled vectors: NaN and invalid; a 12 m/s jet stays near 12 m/s (pivpy 0.4.0 reaches 42)
    off = fr.enabled[0][::-1] == 0
    assert off.any() and np.isnan(ds.u[0, 0].values[off]).all() and not ds.valid[0, 0].values[off].any()
    assert 10 < float(np.nanmax(np.abs(ds.v[0, 0]))) < 15 and float(ds.v.mean()) > 0  # the jet goes up


def test_vc7_mask_component():
    p = data('urban_canopy/B00001.vc7')
    fr = lv_raw(p)
    [f] = read_frames(p)
    bad = (fr.masks[0] == 0) | (fr.enabled[0] == 0)
    assert_array_equal(f.valid, ~bad[::-1])
    assert (f.length_units, f.velocity_units) == ('mm', 'm s-1') and np.isnan(f.u[~f.valid]).all()


def test_sequence_from_folder_needs_dt_and_uses_it():
    with pytest.raises(PIVFormatError, match='carry no acquisition time; pass dt='):
        read_piv(data('Insight'))
    ds = read_piv(data('Insight'), dt=0.5)
    assert_allclose(ds.time, np.arange(5) * 0.5) and ds.sizes == dict(traj=1, time=5, y=63, x=63)
    assert ds.attrs['files'].split('\n')[0] == 'Run000001.T000.D000.P000.H001.L.vec'
    assert ds.u.dtype == np.float32 and ds.valid.dtype == bool
    assert np.isnan(ds.u.values[~ds.valid.values]).all() and np.isfinite(ds.u.values[ds.valid.values]).all()
    with pytest.raises(PIVFormatError, match='mixes .txt, .vc7 files'):
        read_piv(data('PIVMAT_jet'))


def test_import_piv_writes_contract_file(tmp_path):
    out = import_piv([data(INSIGHT), data('Insight/Run000002.T000.D000.P000.H001.L.vec')], tmp_path / 'o', dt=0.1)
    assert out == tmp_path / 'o' / 'piv_exp.nc' and sorted(os.listdir(tmp_path / 'o')) == ['piv.set.json', 'piv_exp.nc']
    ds = read_dataset(out, domain='exp')
    assert tuple(ds.u.dims) == ('traj', 'time', 'y', 'x') and ds.u.attrs['units'] == 'm s-1' and ds.x.attrs['units'] == 'mm'
    assert ds.attrs['scale_u'] > 0 and 'p' not in ds


def _copy(src, dst, cut=None, replace=None):
    text = Path(src).read_text()
    if cut: text = '\n'.join(text.splitlines()[:cut])
    if replace: text = text.replace(*replace)
    dst.write_text(text)
    return dst

@pytest.mark.parametrize('case, match', [
    ('truncated', r'bad\.vec: 1999 data rows, expected 3969 .*truncated'),
    ('header', r'bad\.vec: no Insight header'),
    ('units', r'bad\.vec: the file states no length unit'),
    ('grid', r'other\.vec: units \(pixel, pixel deltaT-1\) differ from good\.vec'),
    ('number', r'bad\.vec: line 3: cannot parse'),
])
def test_bad_input_one_error_nothing_written(tmp_path, case, match):
    good = _copy(data(INSIGHT), tmp_path / 'good.vec')
    if case == 'truncated': files = [good, _copy(good, tmp_path / 'bad.vec', cut=2000)]
    elif case == 'header': files = [_copy(good, tmp_path / 'bad.vec', replace=('VARIABLES=', 'VARS='))]
    elif case == 'units': files = [_copy(good, tmp_path / 'bad.vec', replace=('"X mm", "Y mm"', '"X", "Y"'))]
    elif case == 'grid': files = [good, _copy(data(INSIGHT_PX), tmp_path / 'other.vec')]
    else: files = [_copy(good, tmp_path / 'bad.vec', replace=('0.624960, -0.312480', '0.6249x0, -0.312480'))]
    out = tmp_path / 'out'
    with pytest.raises(PIVFormatError, match=match):
        import_piv(files, out, dt=0.1)
    assert not out.exists() or not os.listdir(out)


def test_grid_mismatch_in_a_sequence(tmp_path):
    a = data(INSIGHT)
    b = _copy(a, tmp_path / 'shifted.vec', replace=('0.312480, -0.312480', '0.312480, -0.312481'))
    with pytest.raises(PIVFormatError, match='shifted.vec: 3969 vectors do not fill a regular grid'):
        read_piv([a, b], dt=1.0)
    c = _copy(data(OPENPIV6), tmp_path / 'c.txt')
    d = _copy(data('openpiv_txt/Gamma1_Gamma2_tutorial_notebook/OpenPIVtxtFilePair0.txt'), tmp_path / 'd.txt')
    with pytest.raises(PIVFormatError, match=r'd\.txt: grid 63x79 \(y x x\) differs from c\.txt'):
        read_piv([c, d], dt=1.0, units=('mm', 'm/s'))


def test_to_sim_grid_maps_by_similarity():
    ds = read_piv(data(INSIGHT))  # one frame, mm and m/s
    sim, _ = example_pair(n_traj=1, nt=2, ny=4, nx=4)
    xi, yj = [10, 20, 30, 40], [5, 15, 25, 35]
    L, V, origin = 2.0, 0.5, (1.0, -3.0)
    sim = sim.assign_coords(x=('x', (ds.x.values[xi] - origin[0]) * 1e-3 * L, dict(units='m')),
                            y=('y', (ds.y.values[yj] - origin[1]) * 1e-3 * L, dict(units='m')))
    g = to_sim_grid(ds, sim, origin=origin, length_ratio=L, velocity_ratio=V)
    ref = ds.u.values[0, 0][np.ix_(yj, xi)] * V
    assert_allclose(g.u.values[0, 0], ref, rtol=1e-5)  # grid points coincide: the regrid is the identity
    assert_array_equal(g.valid.values[0, 0], ds.valid.values[0, 0][np.ix_(yj, xi)])
    assert_allclose(g.attrs['scale_u'], ds.attrs['scale_u'] * V) and g.u.attrs['units'] == 'm s-1'
    with pytest.raises(ValueError, match="length unit 'pixel' has no SI factor"):
        to_si(read_piv(data(INSIGHT_PX)))


def test_pivpy_0_4_0_readers_disagree_with_the_raw_files():
    "Why the package has its own readers: pivpy 0.4.0 against the same raw numbers the tests above check."
    pivpy = pytest.importorskip('pivpy', reason='pivpy is not installed (pip install pivpy==0.4.0 to compare)')
    if pivpy.__version__ != '0.4.0': pytest.skip(f'checks pivpy 0.4.0, found {pivpy.__version__}')
    from pivpy import io
    mine = lambda p, **kw: read_frames(data(p), **kw)[0]
    theirs = lambda p: io.read_piv(data(p)).isel(t=0).sortby('y').sortby('x')
    pv = theirs(INSIGHT)
    assert pv.u.attrs['units'] == 'mm'  # the X column's unit: shifted by one column
    assert not np.isnan(pv.u).any() and np.isnan(mine(INSIGHT).u).any()  # rejected vectors kept as numbers
    assert float(np.abs(theirs(OPENPIV6).u).max()) == 0.0 and np.nanmax(np.abs(mine(OPENPIV6, units=('mm', 'm/s')).u)) > 0
    assert len(np.unique(io.read_piv(data(PIVLAB)).x)) == 1  # coordinates collapse
    if importlib.util.find_spec('lvpyio'):
        assert float(np.nanmax(np.abs(theirs('PIVMAT_jet/B00001.VC7').u.values - mine('PIVMAT_jet/B00001.VC7').u))) > 10


def test_nan_behind_a_valid_flag_is_refused(tmp_path):
    "A flagged file that hides NaN behind a valid flag is refused, naming the file; a file without flags marks NaN invalid."
    rows = [f"{x} {y} {1.0 + x} {2.0 * y} 0 0" for y in (1.0, 2.0) for x in (1.0, 2.0, 3.0)]
    rows[4] = "2.0 2.0 nan 4.0 0 0"
    (tmp_path / 'flagged.txt').write_text('\n'.join(rows) + '\n')
    with pytest.raises(PIVFormatError, match=r'flagged.txt: 1 vectors that the file.s flags mark valid hold NaN'):
        read_piv(tmp_path / 'flagged.txt', units=('mm', 'm/s'))
    (tmp_path / 'plain.txt').write_text('\n'.join(' '.join(r.split()[:4]) for r in rows) + '\n')
    ds = read_piv(tmp_path / 'plain.txt', units=('mm', 'm/s'))
    assert int((~ds.valid).sum()) == 1 and int(ds.u.isnull().sum()) == 1


@pytest.mark.parametrize('kw, match', [
    (dict(fmt='davis'), r"read_piv: `fmt`='davis'; expected one of \['insight', 'openpiv', 'pivlab', 'vc7'\]"),
    (dict(fmt=''), r"read_piv: `fmt`=''; expected one of"),
    (dict(dt=0), r"read_piv: `dt`=0; expected the frame interval in seconds, a finite number > 0"),
    (dict(dt=-0.1), r"read_piv: `dt`=-0\.1; expected"),
    (dict(dt=float('nan')), r"read_piv: `dt`=nan; expected"),
    (dict(dt=True), r"read_piv: `dt`=True; expected"),
    (dict(dt='0.1'), r"read_piv: `dt`='0\.1'; expected"),
    (dict(units='mm'), r"read_piv: `units`='mm'; expected a \(length, velocity\) pair of strings, e.g. \('mm', 'm/s'\)"),
    (dict(units=('mm',)), r"read_piv: `units`=\('mm',\); expected a \(length, velocity\) pair"),
    (dict(units=('mm', 5)), r"read_piv: `units`=\('mm', 5\); expected a \(length, velocity\) pair"),
])
def test_bad_argument_is_a_piv_format_error(tmp_path, kw, match):
    "fmt=, dt= and units= are checked before any file is read: a PIVFormatError (a ValueError) naming the argument."
    with pytest.raises(PIVFormatError, match=match) as e:
        read_piv(tmp_path / 'no_such_folder', **kw)
    assert is_user_error(e.value)  # the CLI answers it with one line and exit 2
    with pytest.raises(PIVFormatError, match=match):  # through import_piv on real files: refused, nothing written
        import_piv(data('Insight'), tmp_path / 'out', **kw)
    assert not (tmp_path / 'out').exists()


def test_bad_fmt_and_units_of_one_file():
    with pytest.raises(PIVFormatError, match=r"read_frames: `fmt`='davis'; expected one of \['insight'"):
        read_frames(data(INSIGHT), fmt='davis')
    with pytest.raises(PIVFormatError, match=r"read_frames: `units`='mm'; expected a \(length, velocity\) pair"):
        read_frames(data(INSIGHT), units='mm')
    from simreal_nb.data.piv import read_openpiv
    with pytest.raises(PIVFormatError, match=r"read_openpiv: `units`=\['mm'\]; expected a \(length, velocity\) pair"):
        read_openpiv(data(OPENPIV5), units=['mm'])


@pytest.mark.parametrize('layout', ['export', 'session'])
def test_complex_velocities_are_refused_naming_the_array(tmp_path, capsys, layout):
    "A PIVlab file whose u is complex: `data import piv` exits 2 in one line naming the file and the array (never a ComplexWarning and the imaginary part dropped), nothing written."
    import warnings
    import scipy.io
    from simreal_nb.face import cli
    y, x = np.mgrid[0:3, 0:4].astype(float)
    u = (np.ones((3, 4)) + 1j).astype(complex)
    cell = lambda a: np.array([a], dtype=object)
    if layout == 'export':
        m = dict(x=cell(x), y=cell(y), u_original=cell(u), v_original=cell(np.zeros((3, 4))), typevector_original=cell(np.ones((3, 4))))
        says = 'u_original of frame 0 holds complex numbers'
    else:
        rl = np.empty((5, 1), dtype=object)
        for r, a in enumerate((x, y, u, np.zeros((3, 4)), np.ones((3, 4)))): rl[r, 0] = a
        m = dict(resultslist=rl)
        says = 'resultslist row 3 (u) of frame 0 holds complex numbers'
    scipy.io.savemat(tmp_path / 'c.mat', m)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # a ComplexWarning would fail here
        with pytest.raises(SystemExit) as e:
            cli.main(['data', 'import', 'piv', str(tmp_path / 'c.mat'), '--units', 'mm,m/s', '--dt', '0.1', '--out', str(tmp_path / 'o')])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and 'c.mat: ' in err and says in err, err
    assert not (tmp_path / 'o').exists()
