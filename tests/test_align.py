"Alignment: common grid, presence, valid; normaliser; splits; windows; never-train refusal; time alignment."
import numpy as np, pytest, torch, xarray as xr
from simreal_nb.core.schema import FIELDS, DIMS, DataContractError, NeverTrainError, validate
from simreal_nb.data.align import example_pair, align_domains, regrid, Normalizer, split_trajs, resample_time
from simreal_nb.data.domains import WindowDataset, make_domain_data, DomainData, test_groups, group_windows, group_distances
from simreal_nb.data.clocks import event_times, event_anchor_align, ClockMap
from simreal_nb.data.realpdebench import GROUPS


@pytest.fixture(scope='module')
def pair(): return example_pair(n_traj=6, nt=10, ny=12, nx=24, seed=1)


def truth_of(ds):
    t = ds.copy(); t.attrs.update(domain='exp_truth', never_train=1); return t


# --- align_domains -------------------------------------------------------------------------------------------
def test_align_sim_grid(pair):
    sim, exp = pair
    sa, ea = align_domains(sim, exp, 'sim')
    assert (ea.y.values == sim.y.values).all() and (ea.x.values == sim.x.values).all()
    assert sa.attrs['present'] == 'u v p' and ea.attrs['present'] == 'u v' and ea.attrs['fields'] == 'u v p'
    assert 'p' not in ea and 'valid' in sa and 'valid' in ea and ea.valid.dtype == bool
    xr.testing.assert_equal(sa.p, sim.p)
    assert sa.valid.all()
    validate(sa, 'sim'); validate(ea, 'exp')
    # outside the coarse shifted footprint: invalid; fields NaN exactly where invalid
    outside = (sim.x < exp.x[0]) | (sim.x > exp.x[-1]) | (sim.y < exp.y[0]) | (sim.y > exp.y[-1])
    assert not ea.valid.where(outside, False).any()
    assert (np.isfinite(ea.u.values) == ea.valid.values).all()
    assert 0.5 < float(ea.valid.mean()) < 0.95


def test_align_interp_is_linear_where_valid(pair):
    sim, exp = pair
    e = exp.copy(); e['valid'] = xr.ones_like(e.valid)
    e['u'] = xr.DataArray(np.broadcast_to((2 * e.x + 3 * e.y).transpose('y', 'x').values, e.u.shape).astype('float32'),
                          dims=DIMS).assign_attrs(exp.u.attrs)
    e['v'] = e.u.copy()
    _, ea = align_domains(sim, e, 'sim')
    ok = ea.valid.values
    expect = np.broadcast_to((2 * sim.x + 3 * sim.y).transpose('y', 'x').values, ea.u.shape)
    np.testing.assert_allclose(ea.u.values[ok], expect[ok], rtol=1e-5)


def test_align_exp_and_custom_grid(pair):
    sim, exp = pair
    sa, ea = align_domains(sim, exp, 'exp')
    assert sa.sizes['y'] == exp.sizes['y'] and sa.valid.all()
    np.testing.assert_array_equal(ea.valid.values, exp.valid.values)
    sa, ea = align_domains(sim, exp, (7, 9))
    assert sa.sizes['y'] == 7 and sa.sizes['x'] == 9 and ea.sizes['x'] == 9
    with pytest.raises(ValueError, match='grid'): align_domains(sim, exp, 'fine')


def test_align_dropout_does_not_spread(pair):
    sim, exp = pair
    e = exp.copy(); v = np.ones(exp.valid.shape, bool); v[0, 0, 3, 5] = False
    e['valid'] = (DIMS, v); e['u'] = exp.u.where(e.valid).fillna(0).where(e.valid); e['v'] = e.v.fillna(0)
    _, ea = align_domains(sim, e, 'sim')
    _, eb = align_domains(sim, e.assign(valid=xr.ones_like(e.valid), u=e.u.fillna(0)), 'sim')
    lost = int(eb.valid.sum() - ea.valid.sum())
    assert 0 < lost <= 6  # one coarse dropout removes about one coarse cell of fine points, not its neighbourhood


def test_align_refuses_bad_input(pair):
    sim, exp = pair
    with pytest.raises(DataContractError, match="expected 'sim'"): align_domains(exp, exp)


# --- Normalizer ----------------------------------------------------------------------------------------------
def test_normalizer_round_trip_and_state(pair):
    sim, exp = pair
    n = Normalizer.fit(sim, fallback=exp)
    x = np.random.default_rng(0).standard_normal((2, 4, 3, 5, 6)).astype('float32')
    z = n.encode(x, FIELDS)
    assert z.dtype == np.float32
    np.testing.assert_allclose(n.decode(z, FIELDS), x, rtol=1e-5, atol=1e-5)
    m, s = n.stats['p']
    np.testing.assert_allclose(z[:, :, 2], (x[:, :, 2] - m) / s, rtol=1e-5)
    xt = torch.from_numpy(x[..., [2, 0], :, :].copy())
    torch.testing.assert_close(n.decode(n.encode(xt, ('p', 'u')), ('p', 'u')), xt)
    n2 = Normalizer.from_state_dict(n.state_dict())
    assert n2 == n and n2.fields == FIELDS
    with pytest.raises(ValueError, match='channels'): n.encode(x, ('u', 'v'))
    d = n.encode(sim); np.testing.assert_allclose(float(d.u.mean()), 0, atol=1e-5)
    xr.testing.assert_allclose(n.decode(d), sim)


def test_normalizer_fit_uses_valid_points_only(pair):
    sim, exp = pair
    e = exp.copy(); e['u'] = e.u.where(e.valid, 1e6)  # garbage under invalid points must not count
    e['u'] = e.u.where(e.valid)  # keep contract: NaN where invalid
    n = Normalizer.fit(e)
    vals = exp.u.values[exp.valid.values]
    assert np.isclose(n.stats['u'][0], vals.mean(), rtol=1e-5) and np.isclose(n.stats['u'][1], vals.std(), rtol=1e-4)
    assert 'p' not in n.stats
    with pytest.raises(NeverTrainError): Normalizer.fit(truth_of(sim))


# --- split_trajs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize('n', [4, 5, 6, 9, 10, 17])
def test_split_disjoint_and_inside_range(pair, n):
    sim, _ = pair
    ds = example_pair(n_traj=n, nt=3, ny=4, nx=8)[0]
    ds = ds.isel(traj=np.random.default_rng(n).permutation(n))  # order must not matter
    for seed in (0, 1, 2):
        sp = split_trajs(ds, seed=seed)
        ids = {k: set(v.traj.values.tolist()) for k, v in sp.items()}
        assert not ids['train'] & ids['val'] and not ids['train'] & ids['test'] and not ids['val'] & ids['test']
        assert ids['train'] | ids['val'] | ids['test'] == set(ds.traj.values.tolist())
        assert len(ids['val']) >= 1 and len(ids['test']) >= 1
        A = {k: v.A.values for k, v in sp.items()}
        for k in ('val', 'test'): assert A['train'].min() < A[k].min() and A[k].max() < A['train'].max()
        assert all(v.attrs['split'] == k for k, v in sp.items())
    a, b = split_trajs(ds, seed=0), split_trajs(ds, seed=0)
    assert all((a[k].traj.values == b[k].traj.values).all() for k in a)  # deterministic


def test_split_errors(pair):
    sim, _ = pair
    with pytest.raises(ValueError, match='at least 4'): split_trajs(sim.isel(traj=[0, 1, 2]))
    with pytest.raises(ValueError, match='fracs'): split_trajs(sim, fracs=(0.5, 0.5, 0.5))
    sp = split_trajs(sim.isel(traj=[0, 1, 2]), fracs=(0.7, 0.0, 0.3))
    assert sp['val'].sizes['traj'] == 0 and sp['test'].A.values.tolist() == [float(sim.A[1])]
    assert len(WindowDataset(sp['val'])) == 0  # an empty split gives an empty window dataset
    dd = make_domain_data(sim, example_pair(n_traj=6, nt=10, ny=12, nx=24, seed=1)[1], fracs=(0.7, 0.0, 0.3))
    assert len(dd.sim['val']) == 0 and len(dd.exp['val']) == 0 and len(dd.sim['test']) > 0


def with_groups(ds, groups):
    return ds.assign_coords(group=('traj', np.array(groups, dtype=object)))


@pytest.mark.parametrize('n', [8, 10, 14])
def test_split_by_group(n):
    "With test groups: test = in_dist + out_dist (coord kept), train and val from remain, train spans every remain range."
    ds = example_pair(n_traj=n, nt=3, ny=4, nx=8)[0]
    g = ['remain'] * n; g[0] = g[-1] = 'out_dist'; g[2] = g[n - 3] = 'in_dist'
    ds = with_groups(ds, g).isel(traj=np.random.default_rng(n).permutation(n))     # order must not matter
    for seed in (0, 1):
        for fracs in ((0.6, 0.2, 0.2), (0.6, 0.15, 0.25), (0.8, 0.2, 0.0)):
            sp = split_trajs(ds, fracs, seed)
            grp = {k: v.group.values.astype(str) for k, v in sp.items()}
            assert set(grp['test']) == {'in_dist', 'out_dist'} and len(grp['test']) == 4
            assert (grp['train'] == 'remain').all() and (grp['val'] == 'remain').all()
            assert sp['val'].sizes['traj'] == max(1, round(fracs[1] / (fracs[0] + fracs[1]) * (n - 4)))
            A_tr, te = sp['train'].A.values, sp['test']
            A_rem = ds.A.values[ds.group.values == 'remain']
            assert A_tr.min() == A_rem.min() and A_tr.max() == A_rem.max()            # both remain ends train
            assert all(A_tr.min() < a < A_tr.max() for a in te.A.values[grp['test'] == 'in_dist'])
            assert all(a < A_tr.min() or a > A_tr.max() for a in te.A.values[grp['test'] == 'out_dist'])
            assert sorted(sum((v.traj.values.tolist() for v in sp.values()), [])) == sorted(ds.traj.values.tolist())


def test_split_without_test_groups_is_unchanged():
    "A `group` coord with no test trajectory (all 'remain', or none published) splits exactly as no coord at all."
    ds = example_pair(n_traj=9, nt=3, ny=4, nx=8)[0]
    for fill in ('remain', ''):
        for seed in (0, 1, 2):
            a, b = split_trajs(ds, seed=seed), split_trajs(with_groups(ds, [fill] * 9), seed=seed)
            assert all(a[k].traj.values.tolist() == b[k].traj.values.tolist() for k in a)


def test_split_by_group_errors():
    ds = example_pair(n_traj=8, nt=3, ny=4, nx=8)[0]
    g = ['out_dist', 'remain', 'in_dist', 'remain', 'remain', 'in_dist', 'remain', 'out_dist']
    with pytest.raises(ValueError, match=r"values \['', 'test'\]"):
        split_trajs(with_groups(ds, ['test', ''] + g[2:]))
    with pytest.warns(UserWarning, match="4 'remain' trajectories are too few"):  # 3 val + 2 ends > 4 remain: all train
        sp = split_trajs(with_groups(ds, g), fracs=(0.2, 0.6, 0.2))
    assert (sp['train'].sizes['traj'], sp['val'].sizes['traj'], sp['test'].sizes['traj']) == (4, 0, 4)
    with pytest.raises(ValueError, match="0 'remain' trajectories"):
        split_trajs(with_groups(ds, ['in_dist', 'out_dist'] * 4))
    with pytest.raises(ValueError, match='fracs'): split_trajs(with_groups(ds, g), fracs=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match=r"fracs\[0\] > 0"): split_trajs(with_groups(ds, g), fracs=(0.0, 0.0, 1.0))


def test_group_windows_on_twins():
    "Twin test groups through make_domain_data: per-group windows in both domains and in the hidden truth."
    from simreal_nb.twins.systems import make_twins
    tw = make_twins('foil', size='test', n_traj=8, n_frames=6, n_in_dist=2, n_out_dist=2)
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1)
    assert test_groups(dd) == ('in_dist', 'out_dist') == GROUPS[1:]
    truth = dd.truth_windows(tw['exp_truth'].drop_vars('group'))                   # the exp split's groups carried over
    for w in (dd.sim['test'], dd.exp['test'], truth):
        parts = {g: group_windows(w, g) for g in test_groups(dd)}
        assert sum(len(p) for p in parts.values()) == len(w) and all(len(p) > 0 for p in parts.values())
        assert all((p.ds.group.values.astype(str) == g).all() and p.n_in == w.n_in and p.cond_names == w.cond_names
                   for g, p in parts.items())
        assert len(group_windows(w, 'remain')) == 0
    assert group_windows(truth, 'in_dist').for_eval
    tr = dd.exp_ds['train']
    for p in ('Re', 'aoa'):
        v_in = group_windows(dd.exp['test'], 'in_dist').ds[p].values
        assert ((v_in > tr[p].values.min()) & (v_in < tr[p].values.max())).all()
    out = group_windows(dd.exp['test'], 'out_dist').ds                              # beyond the training range by >= 15 % of it
    far = np.stack([np.maximum(tr[p].values.min() - out[p].values, out[p].values - tr[p].values.max()) / np.ptp(tr[p].values)
                    for p in ('Re', 'aoa')])
    assert (far.max(0) >= 0.15).all() and len(out.traj) == 2
    with pytest.raises(ValueError, match="expected one of"): group_windows(dd.exp['test'], 'test')
    plain = make_domain_data(*example_pair(n_traj=6, nt=10, ny=12, nx=24, seed=1))
    assert test_groups(plain) == ()
    with pytest.raises(ValueError, match="no coord 'group'"): group_windows(plain.exp['test'], 'in_dist')


def _grouped_pair(A, groups, B=None, log=None):
    "example_pair with the given per-trajectory parameter A (and B), test groups and log-drawn parameters."
    sim, exp = example_pair(n_traj=len(A), nt=4, ny=8, nx=16, seed=2)
    co = dict(A=('traj', np.asarray(A, float)), group=('traj', np.array(groups, dtype=object)))
    if B is not None: co['B'] = ('traj', np.asarray(B, float))
    out = [d.assign_coords(co) for d in (sim, exp)]
    if log: out = [d.assign_attrs(log_params=log) for d in out]
    return make_domain_data(*out, fracs=(1.0, 0.0, 0.0))                             # train = every remain trajectory


def test_group_distances_known_answers():
    "Nearest training trajectory in units of the training range: in_dist 0.5/3.2 and 0.2/3.2, out_dist 1/3.2 and 0.8/3.2."
    A = [0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 4.2, 5.0]
    g = ['out_dist', 'remain', 'in_dist', 'remain', 'remain', 'in_dist', 'remain', 'out_dist']
    d = group_distances(_grouped_pair(A, g))
    assert d.dims == ('group', 'stat') and d.group.values.tolist() == ['in_dist', 'out_dist'] and d.stat.values.tolist() == ['min', 'mean', 'max']
    np.testing.assert_allclose(d.values, [[0.2 / 3.2, 0.35 / 3.2, 0.5 / 3.2], [0.8 / 3.2, 0.9 / 3.2, 1 / 3.2]], rtol=1e-12)
    assert d.attrs['params'] == 'A' and d.attrs['log_params'] == '' and d.name == 'test_distance'
    # a parameter constant over training has no range: left out; a second one that varies adds Euclidean-wise
    d2 = group_distances(_grouped_pair(A, g, B=[9, 1, 7, 1, 1, 7, 1, 9]))
    np.testing.assert_allclose(d2.values, d.values, rtol=1e-12)
    assert d2.attrs['params'] == 'A'
    B = [0, 0, 0, 0, 1, 0, 2, 0]                                                      # training range of B: 2
    d3 = group_distances(_grouped_pair(A, g, B=B))
    near = lambda a, b: min(np.hypot((a - A[j]) / 3.2, (b - B[j]) / 2) for j in (1, 3, 4, 6))
    np.testing.assert_allclose(d3.sel(group='out_dist').values[[0, 2]], sorted([near(0.0, 0), near(5.0, 0)]), rtol=1e-12)
    # log-drawn parameters (attrs log_params) are measured in log
    Al = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 4.2, 6.0]
    dl = group_distances(_grouped_pair(Al, g, log='A'))
    w = np.log(4.2)
    np.testing.assert_allclose(dl.sel(group='out_dist').values[[0, 2]], sorted([np.log(2) / w, np.log(6 / 4.2) / w]), rtol=1e-12)
    assert dl.attrs['log_params'] == 'A'


def test_group_distances_without_groups_is_nan(pair):
    d = group_distances(make_domain_data(*pair))
    assert d.shape == (2, 3) and np.isnan(d.values).all() and d.attrs['params'] == ''
    only_out = group_distances(_grouped_pair([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], ['out_dist'] + ['remain'] * 5))
    assert np.isnan(only_out.sel(group='in_dist').values).all() and float(only_out.sel(group='out_dist', stat='mean')) == 0.25


# --- WindowDataset -------------------------------------------------------------------------------------------
def test_windows_against_direct_indexing(pair):
    sim, exp = pair
    sa, ea = align_domains(sim, exp)
    n = Normalizer.fit(sa)
    for ds in (sa, ea):
        w = WindowDataset(ds, n_in=3, n_out=2, stride=2, normalizer=n)
        T = ds.sizes['time']
        assert len(w) == ds.sizes['traj'] * len(range(0, T - 5 + 1, 2))
        for i in (0, 1, len(w) - 1):
            it = w[i]; info = w.window_info(i)
            assert it['x'].shape == (3, 3, 12, 24) and it['y'].shape == (2, 3, 12, 24)
            assert it['x'].dtype == torch.float32 and it['valid'].dtype == torch.bool and it['field_mask'].dtype == torch.bool
            sel = ds.sel(traj=info['traj'])
            for c, f in enumerate(FIELDS):
                if f not in ds:
                    assert not it['x'][:, c].any() and not it['field_mask'][c]; continue
                m, s = n.stats[f]
                xe = np.nan_to_num((sel[f].sel(time=info['t_in']).values - m) / s)
                ye = np.nan_to_num((sel[f].sel(time=info['t_out']).values - m) / s)
                np.testing.assert_allclose(it['x'][:, c].numpy(), xe, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(it['y'][:, c].numpy(), ye, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(it['valid'].numpy(), sel.valid.sel(time=info['t_out']).values)
            assert torch.isfinite(it['x']).all() and torch.isfinite(it['y']).all()
            assert it['cond'].shape == (1,) and np.isclose(float(it['cond'][0]), (float(sel.A) - n.stats['A'][0]) / n.stats['A'][1])
        b = w.get_batch([0, 2])
        assert b['x'].shape == (2, 3, 3, 12, 24) and torch.equal(b['y'][1], w[2]['y']) and b['field_mask'].shape == (2, 3)
        dl = torch.utils.data.DataLoader(w, batch_size=4)
        assert next(iter(dl))['x'].shape == (4, 3, 3, 12, 24)


def test_windows_are_views(pair):
    sim, _ = pair
    w = WindowDataset(sim, 1, 1)
    assert w[0]['x'].data_ptr() >= w.data.data_ptr() and w[0]['x']._base is not None


def test_window_cond_with_inputs(pair):
    sim, _ = pair
    s = sim.copy(); s.attrs['inputs'] = 'omega_cmd'
    cmd = np.arange(s.sizes['traj'] * s.sizes['time'], dtype='float32').reshape(s.sizes['traj'], -1)
    s['omega_cmd'] = (('traj', 'time'), cmd)
    w = WindowDataset(s, n_in=2, n_out=1)
    assert w.n_cond == 1 + 3 and w.cond_names == ('A', 'omega_cmd')
    it = w[4]; n, t = w.index[4].tolist()
    np.testing.assert_allclose(it['cond'].numpy(), [float(s.A[n])] + cmd[n, t:t + 3].tolist())
    assert WindowDataset(s, cond=()).n_cond == 0 and WindowDataset(s, cond=()).__getitem__(0)['cond'].shape == (0,)
    with pytest.raises(ValueError, match='cond'): WindowDataset(s, cond=('Re',))


def test_window_argument_errors(pair):
    sim, _ = pair
    with pytest.raises(ValueError, match='n_in'): WindowDataset(sim, n_in=0)
    with pytest.raises(ValueError, match='fields'): WindowDataset(sim, fields=('u', 'w'))
    with pytest.raises(TypeError): WindowDataset(sim.u)
    assert len(WindowDataset(sim, n_in=20)) == 0


# --- never-train refusal -------------------------------------------------------------------------------------
def test_exp_truth_refused_for_training(pair):
    sim, exp = pair
    t = truth_of(sim)
    with pytest.raises(NeverTrainError, match='evaluation only'): WindowDataset(t)
    with pytest.raises(NeverTrainError): make_domain_data(sim, t)
    with pytest.raises(NeverTrainError): make_domain_data(t, exp)
    sneaky = exp.copy(); sneaky.attrs['never_train'] = 1  # the flag alone is enough
    with pytest.raises(NeverTrainError): WindowDataset(sneaky)
    assert issubclass(NeverTrainError, ValueError)
    assert len(WindowDataset(t, for_eval=True)) > 0


# --- make_domain_data ----------------------------------------------------------------------------------------
def test_make_domain_data(pair):
    sim, exp = pair
    dd = make_domain_data(sim, exp, n_in=2, n_out=1)
    assert isinstance(dd, DomainData) and dd.fields == FIELDS and dd.grid == (12, 24) and dd.n_cond == 1
    assert dd.present == dict(sim=FIELDS, exp=('u', 'v'))
    for d in ('sim', 'exp'):
        w, ds = getattr(dd, d), getattr(dd, f'{d}_ds')
        assert set(w) == set(ds) == {'train', 'val', 'test'}
        ids = {k: set(v.traj.values.tolist()) for k, v in ds.items()}
        assert not ids['train'] & ids['test'] and not ids['train'] & ids['val']
        assert all(x.normalizer is dd.normalizer for x in w.values())
    assert dd.exp['train'][0]['field_mask'].tolist() == [True, True, False]
    assert dd.sim['train'][0]['field_mask'].all()
    assert dd.normalizer.stats['u'] == Normalizer.fit(dd.sim_ds['train']).stats['u']  # sim train only
    tw = dd.truth_windows(truth_of(sim), 'test')
    assert tw.for_eval and len(tw) == len(dd.exp['test'])


def test_make_domain_data_frame_interval(pair):
    sim, exp = pair
    e2 = resample_time(exp, 0.05)
    with pytest.raises(ValueError, match='dt='): make_domain_data(sim, e2)
    dd = make_domain_data(sim, e2, dt=0.1)
    assert dd.exp_ds['train'].sizes['time'] == sim.sizes['time']


# --- time alignment ------------------------------------------------------------------------------------------
def test_resample_time(pair):
    _, exp = pair
    r = resample_time(exp, 0.05)
    assert r.sizes['time'] == 2 * exp.sizes['time'] - 1
    np.testing.assert_allclose(r.time.values, np.arange(r.sizes['time']) * 0.05, atol=1e-12)
    even = r.isel(time=slice(0, None, 2))
    np.testing.assert_array_equal(even.valid.values, exp.valid.values)
    np.testing.assert_allclose(even.u.values[even.valid.values], exp.u.values[exp.valid.values], rtol=1e-5)
    mid = r.u.isel(time=1).values; ok = r.valid.isel(time=1).values & exp.valid.isel(time=0).values & exp.valid.isel(time=1).values
    np.testing.assert_allclose(mid[ok], 0.5 * (exp.u.isel(time=0).values + exp.u.isel(time=1).values)[ok], rtol=1e-4, atol=1e-6)
    validate(r, 'exp')
    with pytest.raises(ValueError, match='dt'): resample_time(exp, -1)
    with pytest.raises(ValueError, match='outside'): resample_time(exp, times=[0.0, 5.0])


def _streams(offset, drift, seed=0, gap=True):
    rng = np.random.default_rng(seed)
    g = np.random.default_rng(123)  # the same broadband, non-periodic process in both streams
    fr, ph, am = g.uniform(0.3, 2.5, 8), g.uniform(0, 2 * np.pi, 8), g.uniform(0.3, 1.0, 8)
    f = lambda t: (am[:, None] * np.sin(2 * np.pi * fr[:, None] * np.asarray(t)[None] + ph[:, None])).sum(0)
    t_a = np.arange(0, 30, 2e-3); s_a = f(t_a)
    t_b = np.sort(np.arange(-1.0, 31, 1 / 500) + rng.normal(0, 1e-4, 16000))
    s_b = f((t_b - offset) / (1 + drift)) + 0.03 * rng.standard_normal(len(t_b))
    if gap:
        keep = ~((t_b > 12) & (t_b < 13.5)); t_b, s_b = t_b[keep], s_b[keep]
    return t_a, s_a, t_b, s_b


@pytest.mark.parametrize('kind', ['zero_up', 'zero_down', 'peak', 'trough'])
@pytest.mark.parametrize('offset,drift', [(0.37, 2e-3), (-0.81, -5e-4), (0.0, 0.0)])
def test_event_anchor_recovers_offset_and_drift(kind, offset, drift):
    cm = event_anchor_align(*_streams(offset, drift), kind=kind)
    assert isinstance(cm, ClockMap)
    assert abs(cm.offset - offset) < 2e-3 and abs(cm.drift - drift) < 1e-4, cm
    assert cm.n_matched >= 20 and cm.residual < 5e-3
    np.testing.assert_allclose(cm.to_a(cm.to_b(np.array([1.0, 7.0]))), [1.0, 7.0])
    ds = xr.Dataset(coords=dict(time=('time', cm.to_b([1.0, 2.0]), dict(units='s'))))
    np.testing.assert_allclose(cm.retime(ds).time.values, [1.0, 2.0])
    assert cm.retime(ds).time.attrs['units'] == 's'


def test_event_anchor_large_offset_long_stream():
    cm = event_anchor_align(*_streams(6.3, 1e-3, seed=3, gap=False), kind='peak')
    assert abs(cm.offset - 6.3) < 2e-3 and abs(cm.drift - 1e-3) < 1e-4, cm
    cm = event_anchor_align(*_streams(6.3, 1e-3, seed=3, gap=False), kind='peak', max_offset=1.0)
    assert abs(cm.offset - 6.3) > 0.1  # the true offset is outside the allowed search range


def test_event_times_exact_on_clean_sine():
    t = np.arange(0, 10, 1e-3); s = np.sin(2 * np.pi * 0.5 * t + 0.3)
    up = event_times(t, s, 'zero_up')
    np.testing.assert_allclose(up, (np.arange(len(up)) + 1 - 0.3 / (2 * np.pi)) * 2.0, atol=1e-6)
    pk = event_times(t, s, 'peak')
    ideal = (np.arange(6) + 0.25 - 0.3 / (2 * np.pi)) * 2.0  # the first may be dropped (low prominence at the edge)
    assert len(pk) >= 4 and np.abs(pk[:, None] - ideal[None]).min(1).max() < 2e-4
    with pytest.raises(ValueError, match='kind'): event_times(t, s, 'valley')


def test_event_anchor_errors():
    t = np.arange(0, 1, 1e-3)
    with pytest.raises(ValueError, match='at least 3'): event_anchor_align(t, np.sin(t), t, np.sin(t))


# --- on the package's own twin data ----------------------------------------------------------------------------
def test_make_domain_data_on_twins():
    from simreal_nb.twins.systems import make_twins
    tw = make_twins('kolmogorov', size='test')
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=2)
    assert dd.present['exp'] == ('u', 'v') and dd.fields == FIELDS
    for d in ('sim', 'exp'):
        b = getattr(dd, d)['train'].get_batch(range(len(getattr(dd, d)['train'])))
        assert torch.isfinite(b['x']).all() and torch.isfinite(b['y']).all() and b['cond'].shape[1] == dd.n_cond
    assert dd.exp['train'][0]['field_mask'].tolist() == [True, True, False]
    with pytest.raises(NeverTrainError): make_domain_data(tw['sim'], tw['exp_truth'])
    with pytest.raises(NeverTrainError): WindowDataset(tw['exp_truth'])
    t = dd.truth_windows(tw['exp_truth'], 'test')
    assert t.field_mask.all() and len(t) == len(dd.exp['test'])
