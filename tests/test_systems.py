"Twin systems: contract, scales, determinism, a physical gap per system, learnable pressure, cache, errors."
from simreal_nb.face.flags import is_user_error
import json, os
import numpy as np, pytest, xarray as xr
import simreal_nb
from simreal_nb.twins import systems
from simreal_nb.core.schema import FIELD_META, validate
from simreal_nb.twins.systems import (SYSTEMS, list_systems, make_twins, load_twins, write_twins, twin_key,
                                cache_root, gap_curve, probe_samples, pressure_hf_fraction, neighbour_ratio)
from simreal_nb.twins.twindata import GENERATOR_VERSION, SystemConfigError, measure, traj_design
from simreal_nb.data.realpdebench import GROUPS
from simreal_nb.core.schema import reference_scales

NAMES = ('cylinder', 'controlled', 'foil', 'kolmogorov')
# exp physics switched off: exp_truth then differs from sim only by float round-off (the "null" gap)
NO_GAP = dict(cylinder=dict(re_factor=1.0, walls=0, drag=0.0, turb=0.0, offset=0.0),
              controlled=dict(re_factor=1.0, walls=0, drag=0.0, turb=0.0, offset=0.0, lag=0.0, gain=1.0),
              foil=dict(re_factor=1.0, walls=0, drag=0.0, turb=0.0, offset=0.0, aoa_err=0.0),
              kolmogorov=dict(nu_factor=1.0, alpha_add=0.0, forcing_gain=1.0, harmonic=0.0, stoch_amp=0.0))


@pytest.fixture(scope='module')
def twins():
    return {s: make_twins(s, seed=0, size='test') for s in NAMES}


@pytest.fixture
def generations(monkeypatch):
    "Names of the systems the cache had to generate (every `make_twins` call made by `load_twins`)."
    calls, real = [], systems.make_twins
    def counting(system, *a, **k):
        calls.append(system); return real(system, *a, **k)
    monkeypatch.setattr(systems, 'make_twins', counting)
    return calls


def rel_l2(a, b, fields=('u', 'v')):
    "rel-L2 per time of a vs b over the given fields, averaged over traj."
    return gap_curve(a, b, fields).mean('traj').values


def toy(u, v, valid=None, periodic=0):
    "A one-trajectory contract dataset on a unit grid from [time, y, x] arrays."
    nT, ny, nx = u.shape
    dv = {f: (('traj', 'time', 'y', 'x'), np.asarray(a, np.float32)[None], dict(FIELD_META[f])) for f, a in (('u', u), ('v', v))}
    if valid is not None: dv['valid'] = (('traj', 'time', 'y', 'x'), np.asarray(valid, bool)[None])
    return xr.Dataset(dv, coords=dict(traj=[0], time=np.arange(nT, dtype=float), y=np.arange(ny, dtype=float),
                                      x=np.arange(nx, dtype=float)), attrs=dict(domain='sim', system='toy', periodic=periodic))


def test_registry():
    assert list_systems() == list(NAMES) and set(SYSTEMS) == set(NAMES)


def test_test_size_is_small(twins):
    for s in NAMES:
        d = twins[s]
        assert d['sim'].sizes['traj'] <= 4 and d['sim'].sizes['time'] <= 24
        assert d['sim'].sizes['y'] * d['sim'].sizes['x'] <= 32 * 32


@pytest.mark.parametrize('s', NAMES)
def test_contract(twins, s):
    d = twins[s]
    for dom in ('sim', 'exp', 'exp_truth'):
        ds = validate(d[dom], domain=dom)
        assert ds.attrs['system'] == s and ds.attrs['seed'] == 0 and ds.attrs['generator'] == 'simreal_nb.systems'
        for f in ('u', 'v'): assert ds[f].attrs == FIELD_META[f]               # units and names: the contract's
    p_units = 'm2 s-2' if s == 'kolmogorov' else 'Pa'                          # kinematic pressure in the spectral solver
    assert d['sim'].p.attrs['units'] == d['exp_truth'].p.attrs['units'] == p_units
    sim, exp, tr = d['sim'], d['exp'], d['exp_truth']
    assert 'p' in sim and 'p' in tr and 'p' not in exp           # pressure: sim and hidden truth only
    assert float(sim.p.std()) > 0 and float(tr.p.std()) > 0
    assert 'valid' in exp and exp.valid.dtype == bool and 0.5 < float(exp.valid.mean()) < 1.0
    # exp_truth: sim grid, exp trajectories and times
    for c in ('y', 'x'): np.testing.assert_array_equal(tr[c].values, sim[c].values)
    for c in ('traj', 'time'): np.testing.assert_array_equal(tr[c].values, exp[c].values)
    # per-trajectory parameters as coords on traj, the same in every domain
    params = [k for k, c in sim.coords.items() if c.dims == ('traj',) and k != 'traj']
    assert params
    for k in params:
        np.testing.assert_array_equal(exp[k].values, sim[k].values); np.testing.assert_array_equal(tr[k].values, sim[k].values)
    # measurement parameters recorded on exp; the true gap only on the hidden truth
    assert exp.attrs['measure_window'] == 4 and 'measure_noise_add' in exp.attrs
    assert not any(k.startswith('gap_') for k in exp.attrs) and any(k.startswith('gap_') for k in tr.attrs)


def test_controlled_input(twins):
    d = twins['controlled']
    for dom in ('sim', 'exp', 'exp_truth'):
        ds = d[dom]
        assert 'omega_cmd' in ds.attrs['inputs'].split() and ds['omega_cmd'].dims == ('traj', 'time')
        assert float(np.abs(ds.omega_cmd).max()) > 0
    assert {'A', 'f_c'} <= set(d['sim'].coords)


def test_exp_truth_never_train(twins):
    for s in NAMES:
        tr = twins[s]['exp_truth']
        assert tr.attrs['domain'] == 'exp_truth' and int(tr.attrs['never_train']) == 1
        assert 'never_train' not in twins[s]['sim'].attrs and 'never_train' not in twins[s]['exp'].attrs


@pytest.mark.parametrize('s', NAMES)
def test_gap_is_physical(twins, s):
    "From the same initial state the exp physics drifts away from sim; with the gap switched off it does not."
    d = twins[s]
    gap = rel_l2(d['sim'], d['exp_truth'])
    null = make_twins(s, seed=0, size='test', ic_eps=1e-5, **NO_GAP[s])  # chaos: a tiny perturbation, no physics gap
    chaos = rel_l2(null['sim'], null['exp_truth'])
    assert gap[-1] > 0.02 and gap[-1] > 10 * chaos[-1] + 1e-3, (gap[-1], chaos[-1])
    if s == 'kolmogorov': assert gap[0] < 1e-6 and gap[-1] > gap[1]   # same start, then apart
    else: assert gap.min() > 0.05   # exp runs in a walled channel from its own spin-up: apart from the first frame
    gp = rel_l2(d['sim'], d['exp_truth'], ('p',))
    assert gp[-1] > 0.05                                        # the hidden pressure differs too


@pytest.mark.parametrize('s', NAMES)
def test_reference_scales(twins, s):
    "Every dataset carries positive scales for its fields, the same in sim, exp and exp_truth."
    d = twins[s]
    sc = {k: reference_scales(d[k], ('u', 'v', 'p')) for k in ('sim', 'exp', 'exp_truth')}
    assert sc['sim'] == sc['exp'] == sc['exp_truth'] and all(x > 0 for x in sc['sim'].values())
    assert all(isinstance(d[k].attrs['scale_note'], str) for k in d)
    if s == 'kolmogorov': assert sc['sim']['u'] == 0.5 and sc['sim']['p'] == 0.25    # U_f = sqrt(chi/k_f), U_f^2
    else: assert sc['sim']['p'] == pytest.approx(1000 * sc['sim']['u'] ** 2)        # rho U^2
    # units do not matter: pressure x 1000 with its scale x 1000 gives the same nondimensional field
    sim = d['sim']; k = sim.assign(p=(sim.p * 1000).astype('float32')).assign_attrs(scale_p=sim.attrs['scale_p'] * 1000)
    validate(k)
    np.testing.assert_allclose((k.p / reference_scales(k)['p']).values, (sim.p / reference_scales(sim)['p']).values, rtol=1e-6)


@pytest.mark.parametrize('s', ('cylinder', 'controlled', 'foil'))
def test_pressure_is_learnable_at_default_size(s):
    "No aliased sound in the recorded pressure: little of p's temporal variance above 0.25 cycles/frame."
    d = load_twins(s, seed=0, size='default', threads=os.cpu_count())  # if it generates, every core: the same twin, sooner
    for dom in ('sim', 'exp_truth'):
        fr = pressure_hf_fraction(d[dom])
        assert fr['upstream'] <= 0.25 and fr['field'] <= 0.05, (s, dom, fr)


def test_default_sizes():
    "Default data: >= 12 trajectories per domain, room for a 16-frame rollout after 2 inputs, several windows each."
    for s, spec in SYSTEMS.items():
        c = spec.sizes['default']
        assert c['n_traj'] >= 12 and c['n_frames'] >= 64, s
        assert c['n_in_dist'] >= 4 and c['n_out_dist'] >= 4 and c['n_traj'] - c['n_in_dist'] - c['n_out_dist'] >= 10, s
        p = spec.sizes['paper']
        assert p['n_in_dist'] >= 4 and p['n_out_dist'] >= 4 and p['n_traj'] - p['n_in_dist'] - p['n_out_dist'] >= 16, s
        assert all(spec.sizes[k]['n_in_dist'] == spec.sizes[k]['n_out_dist'] == 0 for k in ('test', 'quick')), s
        assert tuple(c['ood_margin']) == (0.15, 0.3) and c['window_truth'] == 1, s
        if s != 'kolmogorov': assert c['p_avg'] == 3 and c['walls'] == 1 and c['re_factor'] == 1.0
    assert SYSTEMS['kolmogorov'].sizes['default']['frame_dt'] == 0.1


def test_determinism(twins):
    for s in ('cylinder', 'kolmogorov'):
        again = make_twins(s, seed=0, size='test')
        for dom in ('sim', 'exp', 'exp_truth'): xr.testing.assert_identical(again[dom], twins[s][dom])
    other = make_twins('kolmogorov', seed=1, size='test')
    assert not np.allclose(other['sim'].u.values, twins['kolmogorov']['sim'].u.values)


def test_measure_generic():
    "measure on a hand-made dataset: window mean of a constant is the constant; body + shadow masked; no pressure."
    ny, nx = 16, 32
    valid = np.ones((1, 2, ny, nx), bool); valid[:, :, 6:10, 8:12] = False
    ds = xr.Dataset(dict(u=(('traj', 'time', 'y', 'x'), np.full((1, 2, ny, nx), 2.0, np.float32), dict(units='m/s', long_name='u')),
                         v=(('traj', 'time', 'y', 'x'), np.zeros((1, 2, ny, nx), np.float32), dict(units='m/s', long_name='v')),
                         p=(('traj', 'time', 'y', 'x'), np.ones((1, 2, ny, nx), np.float32), dict(units='Pa', long_name='p')),
                         valid=(('traj', 'time', 'y', 'x'), valid)),
                    coords=dict(traj=[0], time=[0., 1.], y=np.arange(ny) * 0.1, x=np.arange(nx) * 0.1),
                    attrs=dict(domain='sim', system='toy'))
    m = measure(ds, noise_add=0, noise_mult=0, dropout=0)
    assert 'p' not in m and m.sizes['y'] == ny // 2 and m.sizes['x'] == nx // 2 and m.attrs['domain'] == 'exp'
    np.testing.assert_allclose(m.u.values[m.valid.values], 2.0)
    body_shadow = ~m.valid.values[0, 0]
    assert body_shadow[3:5, 4:6].all()                          # body
    assert body_shadow[6:, 4:6].all() and not body_shadow[:2, 4:6].any()  # shadow on +y only
    assert m.valid.values[0, 0, :, :3].all()                    # upstream untouched
    walled = ds.copy(deep=True); walled['valid'][:, :, 0] = False; walled['valid'][:, :, -1] = False
    mw = measure(walled, noise_add=0, noise_mult=0, dropout=0)          # channel walls cast no shadow
    expect = ~m.valid.values[0, 0]; expect[0] = expect[-1] = True
    np.testing.assert_array_equal(~mw.valid.values[0, 0], expect)
    m2 = measure(ds, dropout=0.2, seed=3)
    assert 0.6 < float(m2.valid.mean()) < 0.85 and m2.attrs['measure_dropout'] == 0.2
    with pytest.raises(ValueError, match='dropout'): measure(ds, dropout=1.5)
    with pytest.raises(ValueError, match="field 'u'"): measure(ds.drop_vars('u'))


def test_cache_roundtrip_and_corruption(tmp_path, generations):
    load = lambda: load_twins('foil', seed=0, size='test', cache_dir=tmp_path)
    stamps = lambda: {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    a = load()
    assert generations == ['foil']
    entry = next((tmp_path / 'twins').iterdir())
    assert sorted(p.name for p in entry.iterdir()) == ['exp.nc', 'exp_truth.nc', 'manifest.json', 'sim.nc']
    before = stamps()
    b = load()                                                          # a hit: read back, nothing generated or rewritten
    assert generations == ['foil'] and stamps() == before
    for k in a: xr.testing.assert_identical(a[k], b[k])
    # corrupt: garbage bytes in the middle of a file -> hash mismatch -> regenerated, never trusted
    f = entry / 'sim.nc'; raw = bytearray(f.read_bytes()); raw[len(raw) // 2: len(raw) // 2 + 64] = b'\x00' * 64
    f.write_bytes(bytes(raw))
    xr.testing.assert_identical(load()['sim'], a['sim'])
    assert len(generations) == 2
    xr.testing.assert_identical(load()['sim'], a['sim'])                # the repaired entry is trusted again
    assert len(generations) == 2
    # truncated file and a stale manifest (other key) are also regenerated
    (entry / 'exp.nc').write_bytes(b'not a netcdf file')
    xr.testing.assert_identical(load()['exp'], a['exp'])
    assert len(generations) == 3
    man = json.loads((entry / 'manifest.json').read_text()); man['key'] = 'stale'
    (entry / 'manifest.json').write_text(json.dumps(man))
    xr.testing.assert_identical(load()['exp_truth'], a['exp_truth'])
    assert len(generations) == 4 and json.loads((entry / 'manifest.json').read_text())['key'] != 'stale'
    assert not [p for p in entry.iterdir() if p.name.startswith('.')]  # atomic writes leave no temporaries


def test_cache_key_and_env(tmp_path, monkeypatch):
    keys = [twin_key('foil', 0, 'test'), twin_key('foil', 1, 'test'), twin_key('foil', 0, 'test', aoa=(20., 25.)),
            twin_key('foil', 0, 'quick'), twin_key('cylinder', 0, 'test')]
    assert len(set(keys)) == len(keys) and keys[0] == twin_key('foil', 0, 'test')
    assert twin_key('foil', 0, 'test', n_traj=4) == keys[0]             # the resolved parameters are hashed
    monkeypatch.setenv('SIMREAL_CACHE', str(tmp_path / 'envcache'))
    assert cache_root() == tmp_path / 'envcache' / 'twins'
    assert cache_root(tmp_path / 'arg') == tmp_path / 'arg' / 'twins'


def test_write_twins(tmp_path):
    paths = write_twins('kolmogorov', tmp_path / 'out', seed=0, size='test', cache_dir=tmp_path / 'c')
    assert {k: p.name for k, p in paths.items()} == dict(sim='kolmogorov_sim.nc', exp='kolmogorov_exp.nc',
                                                         exp_truth='kolmogorov_exp_truth.nc')
    from simreal_nb.core.store import read_dataset
    tr = read_dataset(paths['exp_truth'], domain='exp_truth')
    assert int(tr.attrs['never_train']) == 1 and 'p' in tr and 'p' not in read_dataset(paths['exp'])


@pytest.mark.parametrize('call, match', [
    (lambda: make_twins('cylindre'), "expected one of \\['cylinder', 'controlled', 'foil', 'kolmogorov'\\]"),
    (lambda: make_twins('kolmogorov', size='huge'), 'size'),
    (lambda: make_twins('kolmogorov', nu=-1e-3), 'nu'),
    (lambda: make_twins('kolmogorov', size='test', dt=0.2), 'CFL'),
    (lambda: make_twins('cylinder', nx=32, ny=16), 'too small'),
    (lambda: make_twins('foil', ny=24), 'too small'),
    (lambda: make_twins('cylinder', Re=(100, 2000)), 'tau'),
    (lambda: make_twins('cylinder', Re=-5), 'Re'),
    (lambda: make_twins('cylinder', U=0.3), 'U'),
    (lambda: make_twins('cylinder', bogus=1), 'bogus'),
    (lambda: make_twins('cylinder', seed=-1), 'seed'),
    (lambda: make_twins('foil', size='test', n_in_dist=-1), 'n_in_dist'),
    (lambda: make_twins('foil', ood_margin=(0.0, 0.2)), 'ood_margin'),
    (lambda: make_twins('foil', ood_sides=('Re',)), 'ood_sides'),
    (lambda: make_twins('kolmogorov', window_truth=2), 'window_truth'),
    (lambda: load_twins('nope'), 'nope'),
])
def test_bad_input_errors_before_compute(call, match, monkeypatch):
    def no_compute(*a, **k): raise AssertionError('a solver ran before the arguments were checked')
    for gen in ('gen_lbm', 'gen_kolmogorov'): monkeypatch.setattr(systems, gen, no_compute)
    with pytest.raises(SystemConfigError, match=match) as e: call()
    assert is_user_error(e.value)  # the CLI answers it with one line and exit 2


def test_stale_entries_removed(tmp_path):
    "An entry written by another package/generator version is removed when the current one is made."
    root = tmp_path / 'twins'; stale = root / 'kolmogorov-test-s0-0123456789abcdef0123'
    stale.mkdir(parents=True)
    (stale / 'manifest.json').write_text(json.dumps(dict(key='x', version='0.0.1', generator_version='0', files={})))
    load_twins('kolmogorov', seed=0, size='test', cache_dir=tmp_path)
    assert not stale.exists() and len(list(root.iterdir())) == 1


def test_unwritable_cache_still_returns_data(tmp_path):
    blocker = tmp_path / 'file'; blocker.write_text('not a folder')      # cache root below a plain file
    with pytest.warns(UserWarning, match='could not cache'):
        d = load_twins('kolmogorov', seed=0, size='test', cache_dir=blocker)
    assert 'p' in d['sim']


def test_old_preset_entry_removed_but_override_entries_kept(tmp_path):
    load_twins('kolmogorov', seed=0, size='test', cache_dir=tmp_path, n_frames=12)       # an override entry
    root = tmp_path / 'twins'; old = root / 'kolmogorov-test-s0-00000000000000000000'
    old.mkdir()
    (old / 'manifest.json').write_text(json.dumps(dict(key='old', version=simreal_nb.__version__,
                                                       generator_version=GENERATOR_VERSION, files={}, overrides={})))
    load_twins('kolmogorov', seed=0, size='test', cache_dir=tmp_path)                    # the preset entry
    assert not old.exists() and len(list(root.iterdir())) == 2


def test_gap_curve_known_answer():
    "a = 1.1 b gives rel-L2 0.1 at every (traj, time); points outside `valid` do not count."
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal((2, 3, 4, 6)) + 1
    valid = np.ones((3, 4, 6), bool); valid[:, 0, 0] = False
    b = toy(u, v, valid)
    a = b.copy(deep=True); a['u'] = a.u * 1.1; a['v'] = a.v * 1.1
    np.testing.assert_allclose(gap_curve(a, b).values, 0.1, rtol=1e-5)
    a['u'][:, :, 0, 0] = 1e6                                            # huge error, but only where not valid
    np.testing.assert_allclose(gap_curve(a, b, valid=b.valid).values, 0.1, rtol=1e-5)
    assert float(gap_curve(a, b).min()) > 1
    assert gap_curve(a, b).dims == ('traj', 'time')


def test_probe_samples_on_known_grid():
    "Probe (fx, fy) reads the nearest grid point; snapshots with an invalid probe point are dropped."
    x, y = np.arange(5.), np.arange(3.)
    u = np.broadcast_to(x + 10 * y[:, None], (2, 3, 5)); v = -u
    valid = np.ones((2, 3, 5), bool); valid[1, 1, 2] = False            # time 1: the first probe point is lost
    ds = toy(u, v, valid)
    a = probe_samples(ds, ((0.5, 0.5), (1.0, 0.0)))                     # (x=2, y=1) and (x=4, y=0)
    np.testing.assert_array_equal(a, [[12., -12., 4., -4.]])            # one of two snapshots left, probe-major
    np.testing.assert_array_equal(probe_samples(ds.drop_vars('valid'), ((1.0, 0.0),), ('v',)), [[-4.], [-4.]])
    with pytest.raises(SystemConfigError, match="fields \\['p'\\] are not in the dataset"):
        probe_samples(ds, ((0.5, 0.5),), ('p',))


def waves(phases, Re):
    "Travelling waves u = sin(x - t + phase) per trajectory (v = 0), one full period in time."
    t, x = np.linspace(0, 2 * np.pi, 64, endpoint=False), np.linspace(0, 2 * np.pi, 16, endpoint=False)
    u = np.sin(x[None, None, None] - t[None, :, None, None] + np.asarray(phases)[:, None, None, None]) * np.ones((1, 1, 3, 1))
    return xr.Dataset(dict(u=(('traj', 'time', 'y', 'x'), u), v=(('traj', 'time', 'y', 'x'), np.zeros_like(u))),
                      coords=dict(traj=np.arange(len(Re)), time=t, y=np.arange(3.), x=x, Re=('traj', np.asarray(Re, float))))


def test_neighbour_ratio_known_answers():
    "Copy: 0; phase difference pi/3: 1; pi: 2. The neighbour is the nearest parameter; invalid points do not count."
    np.testing.assert_allclose(neighbour_ratio(waves([0, 0], [1, 2])).values, 0, atol=1e-12)
    np.testing.assert_allclose(neighbour_ratio(waves([0, np.pi / 3], [1, 2])).values, 1, rtol=1e-9)
    r = neighbour_ratio(waves([0, np.pi, 0.0], [100, 150, 101]))
    np.testing.assert_allclose(r.values, [0, 2, 0], atol=1e-9)
    assert r.neighbour.values.tolist() == [2, 2, 0] and r.dims == ('traj',) and r.Re.values.tolist() == [100, 150, 101]
    ds = waves([0, 0], [1, 2]); ds['valid'] = xr.ones_like(ds.u, dtype=bool); ds['valid'][1, :, 0, 0] = False
    ds['u'][1, :, 0, 0] = 1e6                                            # garbage only where not valid
    np.testing.assert_allclose(neighbour_ratio(ds).values, 0, atol=1e-12)
    two = waves([0, 0, np.pi], [1, 2, 3]).assign_coords(nu=('traj', [5., 9., 5.1]))
    np.testing.assert_allclose(neighbour_ratio(two, param='Re').values, [0, 0, 2], atol=1e-9)
    np.testing.assert_allclose(neighbour_ratio(two, param='nu').values, [2, 2, 2], atol=1e-9)  # nearest in nu: opposite phase
    with pytest.raises(SystemConfigError, match="the dataset has \\['Re'\\]"): neighbour_ratio(waves([0, 0], [1, 2]), 'nu')
    with pytest.raises(SystemConfigError, match='at least 2'): neighbour_ratio(waves([0], [1]))
    with pytest.raises(SystemConfigError, match="no field 'v'"): neighbour_ratio(waves([0, 0], [1, 2]).drop_vars('v'))


@pytest.mark.parametrize('s', ('cylinder', 'controlled', 'foil'))
def test_channel_trajectories_are_independent(twins, s):
    "Own spin-ups: a trajectory is no near copy of its parameter neighbour (one shared spin-up gave medians 0.03-0.43 here)."
    for dom in ('sim', 'exp_truth'):
        r = neighbour_ratio(twins[s][dom])
        assert float(r.median()) > 0.6, (s, dom, r.values)


@pytest.mark.parametrize('s', NAMES)
def test_test_groups(s):
    "in_dist inside the remain range in every parameter, out_dist beyond it by >= 15 % of it in one; the same coord in every domain."
    d = make_twins(s, seed=0, size='test', n_traj=8, n_frames=3, n_in_dist=2, n_out_dist=2)
    g = d['sim'].group.values.astype(str)
    for dom in ('exp', 'exp_truth'): assert d[dom].group.values.astype(str).tolist() == g.tolist()
    assert sorted(g.tolist()) == sorted(['in_dist'] * 2 + ['out_dist'] * 2 + ['remain'] * 4) and set(g) <= set(GROUPS)
    sim = d['sim']
    params = [k for k, c in sim.coords.items() if c.dims == ('traj',) and k not in ('traj', 'group') and np.ptp(c.values) > 0]
    log = set(sim.attrs.get('log_params', '').split())
    assert log == ({'nu'} if s == 'kolmogorov' else set()) and sim.attrs['ood_margin'] == '0.15 0.3'
    val = {p: np.log(sim[p].values) if p in log else sim[p].values for p in params}   # log-drawn: measured in log
    rem = {p: val[p][g == 'remain'] for p in params}
    for i in np.nonzero(g == 'in_dist')[0]:
        assert all(rem[p].min() < val[p][i] < rem[p].max() for p in params), (s, i)
    for i in np.nonzero(g == 'out_dist')[0]:
        far = [max(rem[p].min() - val[p][i], val[p][i] - rem[p].max()) / np.ptp(rem[p]) for p in params]
        assert max(far) >= 0.15, (s, i, far)
        assert sum(rem[p].min() < val[p][i] < rem[p].max() for p in params) == len(params) - 1, (s, i)   # the others inside
    assert 'group' not in make_twins(s, seed=0, size='test', n_traj=7, n_frames=2, n_in_dist=2, n_out_dist=2)['sim'].coords


@pytest.mark.parametrize('s', ('cylinder', 'controlled', 'foil', 'kolmogorov'))
def test_default_groups_extrapolate(s):
    "At the default size (parameters only, no solver): 10 remain inside the preset range, 4 in_dist inside theirs, 4 out_dist beyond it by 15-30 %."
    spec = SYSTEMS[s]; c = systems.resolve_config(spec, 'default', {})
    ranges = systems.kol_ranges(c) if spec.kind == 'spectral' else systems.lbm_ranges(c, s == 'controlled')
    P, g = traj_design(np.random.default_rng(0), ranges, c['n_traj'], c['n_in_dist'], c['n_out_dist'], c['ood_margin'],
                               c['ood_sides'], shuffle=('f_c',))
    assert (g == 'remain').sum() == 10 and (g == 'in_dist').sum() == 4 and (g == 'out_dist').sum() == 4
    sc = {k: (np.log if log else np.asarray)(np.asarray(P[k], float)) for k, (lo, hi, log) in ranges.items()}
    end = {k: (np.log([lo, hi]) if log else np.array([lo, hi])) for k, (lo, hi, log) in ranges.items()}
    far = {k: np.maximum(end[k][0] - v, v - end[k][1]) / np.ptp(end[k]) for k, v in sc.items()}   # beyond the preset range
    for k in ranges:
        assert (far[k][g != 'out_dist'] <= 0).all(), (s, k)
        assert ((far[k][g == 'out_dist'] <= 0) | ((far[k][g == 'out_dist'] >= 0.15) & (far[k][g == 'out_dist'] <= 0.3))).all()
    assert all(max(far[k][i] for k in ranges) >= 0.15 for i in np.nonzero(g == 'out_dist')[0])


def test_design_errors():
    with pytest.raises(SystemConfigError, match='ood_margin=\\(0.3, 0.1\\)'): make_twins('cylinder', ood_margin=(0.3, 0.1))
    with pytest.raises(SystemConfigError, match="ood_sides entry 'aoa-'"): make_twins('cylinder', ood_sides=('aoa-',))
    with pytest.raises(SystemConfigError, match='out_dist A down to'): make_twins('controlled', ood_margin=(0.3, 0.5))
    with pytest.raises(SystemConfigError, match='out_dist Re up to'): make_twins('cylinder', ood_margin=(1.0, 3.0), ood_sides='Re+')
    assert 'group' not in make_twins('cylinder', size='test', n_traj=8, n_frames=2, n_in_dist=2, n_out_dist=2,
                                     Re=150.)['sim'].coords                                  # nothing varies: no groups


@pytest.mark.parametrize('s', ('cylinder', 'kolmogorov'))
def test_window_truth(s, tmp_path):
    "window_truth=1: the exp truth holds the noise-free measurement on its own grid; zero noise and dropout give it to the bit."
    spec = SYSTEMS[s]
    gen = systems.gen_kolmogorov if spec.kind == 'spectral' else systems.gen_lbm
    c = systems.resolve_config(spec, 'test', dict(n_traj=2, n_frames=3, window_truth=1, noise_add=0.0, noise_mult=0.0, dropout=0.0))
    d = gen(spec, c, 0)
    tr, ex = d['exp_truth'], d['exp']
    assert tr.attrs['window_fields'] == 'u_window v_window' and 'window_fields' not in ex.attrs
    for k in ('y', 'x'): np.testing.assert_array_equal(ex[k].values, tr[k].values)   # the exp grid is the truth's
    ok, fluid = ex.valid.values, tr.valid.values if 'valid' in tr else np.ones(tr.u.shape, bool)   # Kolmogorov: no body
    assert ok.mean() > 0.5 and (ok <= fluid).all()                                     # measured only where fluid
    for f in ('u', 'v'):
        w = tr[f'{f}_window']
        assert w.dims == tr[f].dims and w.shape == fluid.shape and w.dtype == np.float32 and np.isfinite(w.values).all()
        assert w.attrs['units'] == tr[f].attrs['units'] and 'measurement window (4x4 fine cells, stride 2)' in w.attrs['long_name']
        np.testing.assert_array_equal(ex[f].values[ok], w.values[ok])                    # measure(...) without noise/dropout
    sm = lambda a: float(np.sqrt((np.diff(np.where(ok, a, 0), axis=-1)[ok[..., 1:] & ok[..., :-1]] ** 2).mean()))
    assert sm(tr.u_window.values) < 0.95 * sm(tr.u.values)      # smoother than the block mean: smaller neighbour differences
    assert np.abs(tr.u_window.values - tr.u.values)[fluid].max() > 0.01 * float(np.abs(tr.u).max())
    from simreal_nb.core.store import write_dataset, read_dataset
    back = read_dataset(write_dataset(tr, tmp_path / 'exp_truth.nc', validate=False), validate=False)
    xr.testing.assert_identical(back[['u_window', 'v_window']], tr[['u_window', 'v_window']])
    assert back.attrs['window_fields'] == 'u_window v_window'
    with pytest.raises(SystemConfigError, match='needs stride=2 and an even window'): make_twins(s, size='test', window_truth=1, window=5)


def _children(pid):
    "Live (not zombie) processes whose parent is `pid` (Linux /proc)."
    out = []
    for d in __import__('pathlib').Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try: stat = (d / 'stat').read_text()
        except OSError: continue
        state, ppid = stat.rsplit(')', 1)[1].split()[:2]
        if int(ppid) == pid and state != 'Z': out.append(int(d.name))
    return out


def _alive(pid):
    try: return (__import__('pathlib').Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]) != 'Z'
    except OSError: return False


@pytest.mark.skipif(not __import__('os').path.isdir('/proc'), reason='reads /proc to find the child processes')
def test_fill_cache_children_end_with_a_killed_parent(tmp_path):
    "A run killed while its twins generate leaves no process behind generating on (and writing the cache)."
    import subprocess, sys, time
    code = ("from simreal_nb.twins.systems import fill_cache; "
            f"fill_cache([('cylinder', 11), ('foil', 11)], 'default', {str(tmp_path)!r}, {{}}, 2)")
    parent = subprocess.Popen([sys.executable, '-c', code])
    kids, deadline = [], time.time() + 120
    while len(kids) < 2 and time.time() < deadline and parent.poll() is None:
        time.sleep(0.2); kids = _children(parent.pid)
    assert len(kids) == 2, f"expected two generating children, found {kids}"
    parent.kill(); parent.wait()
    deadline = time.time() + 20
    while any(_alive(k) for k in kids) and time.time() < deadline: time.sleep(0.2)
    assert not any(_alive(k) for k in kids), "children of a killed fill_cache kept running"
    assert not list(tmp_path.rglob('*.nc')), "a child wrote a cache entry after its parent was killed"
