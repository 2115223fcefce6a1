"Field metrics against their definitions (RealPDEBench eval_metrics) and the sim/exp bookkeeping on a known results array."
import json, math, warnings
import numpy as np, pytest, torch, xarray as xr
from simreal_nb.core.metrics import (MetricInputError, rmse, rel_l2, frmse, frmse_spectrum, score_fields, scores_to_xarray,
                                METRICS, SCORE_KEYS)
from simreal_nb.reading.analysis import (balanced, lambda_sweep, balanced_score, best_non_joint, joint_reduction, win_counts,
                                 setting_dims, synthetic_score, headline, compare_to_paper, forgetting,
                                 pressure_reduction, check_lam, check_score, PAPER, LAMS, mean_ci, joint_wins,
                                 joint_reduction_ci, reduction_pct, train_domains, synthetic_results)
from simreal_nb.core.names import (ProtocolError, joint_name, PROTOCOLS, NON_JOINT, JOINT, SIM_ONLY, EXP_ONLY,
                                   SIM_TO_EXP, BASELINES, trained_protocols)


def frmse_loop(pred, target):
    "The definition written as loops: two FFTs, floor(sqrt) bins over the non-negative corner, r < n, bands by round()."
    pred, target = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    b, t, h, w, c = target.shape
    n = min(t // 2, h // 2, w // 2)
    err = np.abs(np.fft.fftn(pred, axes=(1, 2, 3)) - np.fft.fftn(target, axes=(1, 2, 3))) ** 2
    E = np.zeros((b, n, c))
    for i in range(t // 2):
        for j in range(h // 2):
            for k in range(w // 2):
                r = math.floor(math.sqrt(i ** 2 + j ** 2 + k ** 2))
                if r > n - 1: continue
                E[:, r] += err[:, i, j, k]
    E = np.sqrt(E.mean(0)) / (t * h * w)
    lo, hi = int(np.round(n / 3)), int(np.round(2 * n / 3))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # empty bands -> nan, as in RealPDEBench
        return dict(low=E[:lo].mean(), mid=E[lo:hi].mean(), high=E[hi:].mean(), all=E.mean()), E


def close(a, b, rtol=1e-10):
    return all((math.isnan(a[k]) and math.isnan(b[k])) or abs(a[k] - b[k]) <= rtol * abs(b[k]) + 1e-300 for k in b)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    t = rng.normal(size=(3, 6, 10, 8, 2)) + 1
    return t + 0.3 * rng.normal(size=t.shape), t


# --- field metrics -------------------------------------------------------------------------------------------------

def test_distance_to_itself_is_zero(data):
    _, t = data
    assert rmse(t, t) == 0 and rel_l2(t, t) == 0
    assert frmse(t, t) == dict(low=0., mid=0., high=0., all=0.)
    sc = score_fields(t, t, ('u', 'v'))
    assert all(v == 0 for d in sc.values() for v in d.values())


def test_rmse_known_values():
    t = np.zeros((2, 2, 3, 3, 1)); p = t.copy()
    p[0, 0, 0, 0, 0] = 6.0  # one error of 6 over 36 points -> sqrt(36/36) = 1
    assert rmse(p, t) == pytest.approx(1.0)
    assert rmse(t + 0.25, t) == pytest.approx(0.25)


def test_rel_l2_is_per_sample_mean(data):
    _, t = data
    t = t.copy(); t[1] *= 1000  # sample sizes must not matter
    p = t.copy(); p[0] *= 1.1; p[1] *= 1.5; p[2] *= 0.8
    assert rel_l2(p, t) == pytest.approx((0.1 + 0.5 + 0.2) / 3, rel=1e-12)
    # not the global ratio
    glob = np.linalg.norm(p - t) / np.linalg.norm(t)
    assert abs(rel_l2(p, t) - glob) > 0.05


@pytest.mark.parametrize('shape', [(3, 10, 16, 12, 2), (2, 7, 9, 20, 3), (4, 14, 14, 14, 1), (2, 6, 6, 6, 2),
                                   (2, 2, 8, 8, 1), (2, 4, 5, 9, 1), (1, 3, 17, 11, 2)])
def test_frmse_matches_loop(shape):
    rng = np.random.default_rng(sum(shape))
    p, t = rng.normal(size=shape), rng.normal(size=shape)
    ref, E = frmse_loop(p, t)
    assert close(frmse(p, t), ref)
    np.testing.assert_allclose(frmse_spectrum(p, t), E, rtol=1e-10)


def test_frmse_small_n_bands_as_realpdebench():
    rng = np.random.default_rng(1)
    p, t = rng.normal(size=(2, 2, 6, 6, 1)), rng.normal(size=(2, 2, 6, 6, 1))  # n = 1: only `mid` populated
    f = frmse(p, t)
    assert math.isnan(f['low']) and math.isnan(f['high']) and f['mid'] == pytest.approx(f['all'])
    p, t = rng.normal(size=(2, 4, 6, 6, 1)), rng.normal(size=(2, 4, 6, 6, 1))  # n = 2: `mid` empty
    f = frmse(p, t)
    assert math.isnan(f['mid']) and not math.isnan(f['low']) and not math.isnan(f['high'])


def test_frmse_degenerate():
    x = np.ones((2, 1, 8, 8, 1))
    with pytest.raises(MetricInputError, match='t, h and w >= 2'): frmse(x, x)
    assert all(math.isnan(v) for v in frmse(x, x, degenerate='nan').values())
    with pytest.raises(MetricInputError, match='degenerate'): frmse(x, x, degenerate='zero')
    sc = score_fields(x, 2 * x, ('u',))  # one-step scores: fRMSE NaN, others finite
    assert math.isnan(sc['all']['frmse']) and sc['all']['rmse'] == pytest.approx(1.0)


def test_frmse_memory_chunking_is_exact(data):
    p, t = data
    from simreal_nb.core import metrics as M
    a = M._spectrum(*M._prep(p, t), max_elems=1)  # one sample per chunk
    b = M._spectrum(*M._prep(p, t))
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_memory_chunks_do_not_change_results(data, monkeypatch):
    p, t = data
    from simreal_nb.core import metrics as M
    m = np.random.default_rng(2).random(p.shape[:4]) > 0.3
    ref = score_fields(p, t, ('u', 'v'), mask=m), rmse(p, t, m), rel_l2(p, t, m), frmse(p, t, m)
    orig = M._chunks
    monkeypatch.setattr(M, '_chunks', lambda p, t, m, max_elems=None: orig(p, t, m, 1))  # one sample per chunk
    got = score_fields(p, t, ('u', 'v'), mask=m), rmse(p, t, m), rel_l2(p, t, m), frmse(p, t, m)
    assert all(close(got[0][f], ref[0][f], 1e-12) for f in ref[0])
    assert got[1] == pytest.approx(ref[1], rel=1e-12) and got[2] == pytest.approx(ref[2], rel=1e-12)
    assert close(got[3], ref[3], 1e-12)


def test_batch_size_is_mean_of_chunks(data):
    p, t = data
    assert rmse(p, t, batch_size=2) == pytest.approx(np.mean([rmse(p[:2], t[:2]), rmse(p[2:], t[2:])]))
    # by hand: errors of 1 in samples 0-1 and 3 in samples 2-3 -> chunk RMSEs 1 and 3, mean 2; one chunk: sqrt((1+9)/2)
    z = np.zeros((4, 2, 2, 2, 1)); e = z + np.array([1., 1., 3., 3.])[:, None, None, None, None]
    assert rmse(e, z, batch_size=2) == pytest.approx(2.0) and rmse(e, z) == pytest.approx(math.sqrt(5))
    f2 = frmse(p, t, batch_size=2)
    fa, fb = frmse(p[:2], t[:2]), frmse(p[2:], t[2:])
    assert close(f2, {k: (fa[k] + fb[k]) / 2 for k in fa})
    assert rmse(p, t, batch_size=100) == rmse(p, t)
    with pytest.raises(MetricInputError, match='batch_size'): rmse(p, t, batch_size=0)


def test_torch_and_numpy_agree(data):
    "numpy and torch inputs, float32 and float64, against the definitions written out in numpy (not the package's own path)."
    p, t = data
    p32, t32 = p.astype(np.float32), t.astype(np.float32)
    q, s = p32.astype(np.float64), t32.astype(np.float64)  # float32 values, float64 arithmetic: what the metrics promise
    want_rmse = float(np.sqrt(np.mean((q - s) ** 2)))
    want_rel = float(np.mean([np.linalg.norm(q[i] - s[i]) / np.linalg.norm(s[i]) for i in range(len(s))]))
    want_f = frmse_loop(q, s)[0]
    for a, b in ((p32, t32), (torch.from_numpy(p32), torch.from_numpy(t32))):
        assert abs(rmse(a, b) - want_rmse) <= 1e-12 * want_rmse
        assert abs(rel_l2(a, b) - want_rel) <= 1e-12 * want_rel
        assert close(frmse(a, b), want_f, rtol=1e-9)
        assert isinstance(rmse(a, b), float) and all(isinstance(v, float) for v in frmse(a, b).values())
    per_field = score_fields(torch.from_numpy(p32), torch.from_numpy(t32), ('u', 'v'))
    for i, f in enumerate(('u', 'v')):
        assert abs(per_field[f]['rmse'] - np.sqrt(np.mean((q[..., i] - s[..., i]) ** 2))) <= 1e-12 * per_field[f]['rmse']


def test_requires_grad_tensor_ok(data):
    p, t = data
    tp = torch.tensor(p, requires_grad=True)
    assert rmse(tp, torch.tensor(t)) == pytest.approx(rmse(p, t))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_matches_cpu(data):
    p, t = data
    tp, tt = torch.tensor(p, device='cuda'), torch.tensor(t, device='cuda')
    assert rmse(tp, tt) == pytest.approx(rmse(p, t), rel=1e-12)
    assert close(frmse(tp, tt), frmse(p, t), rtol=1e-9)


def test_mask_excludes_points(data):
    p, t = data
    rng = np.random.default_rng(3)
    valid = rng.random(p.shape[:4]) > 0.3
    pn = p.copy(); pn[~valid] = np.nan; tn = t.copy(); tn[~valid] = np.nan  # NaN at invalid points is never read
    d = (p - t)[np.broadcast_to(valid[..., None], p.shape)]
    assert rmse(pn, tn, mask=valid) == pytest.approx(np.sqrt(np.mean(d ** 2)), rel=1e-12)
    per = [np.linalg.norm((p - t)[i][valid[i]]) / np.linalg.norm(t[i][valid[i]]) for i in range(len(p))]
    assert rel_l2(pn, tn, mask=valid) == pytest.approx(np.mean(per), rel=1e-12)
    # [b,t,h,w,1] and [b,t,h,w,c] masks mean the same
    assert rmse(pn, tn, mask=valid[..., None]) == rmse(pn, tn, mask=np.repeat(valid[..., None], 2, -1))
    # fRMSE: error zeroed at invalid points == prediction filled with the target there
    filled = np.where(valid[..., None], p, t)
    assert close(frmse(pn, tn, mask=valid), frmse(filled, t), rtol=1e-12)
    # a sample with no valid point is dropped from RelL2
    v2 = valid.copy(); v2[0] = False
    assert rel_l2(p, t, mask=v2) == pytest.approx(np.mean(per[1:]), rel=1e-12)
    # a per-field mask (u valid everywhere, v only where `valid`) scores each field on its own points
    m = np.ones(p.shape, bool); m[..., 1] = valid
    sc = score_fields(np.where(m, p, np.nan), t, ('u', 'v'), mask=m)
    assert sc['u']['rmse'] == pytest.approx(rmse(p[..., :1], t[..., :1]), rel=1e-12)
    assert sc['v']['rmse'] == pytest.approx(rmse(p[..., 1:], t[..., 1:], mask=valid), rel=1e-12)


def test_mask_errors(data):
    p, t = data
    with pytest.raises(MetricInputError, match='no valid point'): rmse(p, t, mask=np.zeros(p.shape[:4], bool))
    with pytest.raises(MetricInputError, match='no valid point'): rel_l2(p, t, mask=np.zeros(p.shape[:4], bool))
    with pytest.raises(MetricInputError, match='dtype bool'): rmse(p, t, mask=np.ones(p.shape[:4]))
    with pytest.raises(MetricInputError, match='does not broadcast'): rmse(p, t, mask=np.ones(p.shape[1:4], bool)[:2])
    with pytest.raises(TypeError, match='mask'): rmse(p, t, mask=[True])


def test_bad_inputs(data):
    p, t = data
    with pytest.raises(MetricInputError, match=r'`pred` must have 5 dims'): rmse(p[0], t[0])
    with pytest.raises(MetricInputError, match=r'`target` shape'): rmse(p, t[:2])
    with pytest.raises(TypeError, match='`pred`'): rmse(p.tolist(), t)
    with pytest.raises(MetricInputError, match='real numbers'): frmse(p.astype(complex), t)
    with pytest.raises(MetricInputError, match='empty'): rmse(p[:0], t[:0])
    with pytest.raises(MetricInputError, match='`fields`'): score_fields(p, t, ('u',))
    with pytest.raises(MetricInputError, match='`fields`'): score_fields(p, t, 'uv')
    with pytest.raises(MetricInputError, match='`fields`'): score_fields(p, t, ('u', 'all'))


def test_score_fields(data):
    p, t = data
    sc = score_fields(p, t, ('u', 'v'))
    assert list(sc) == ['u', 'v', 'all'] and all(tuple(d) == SCORE_KEYS for d in sc.values())
    assert sc['u']['rmse'] == pytest.approx(rmse(p[..., :1], t[..., :1]), rel=1e-12)
    assert sc['all']['rmse'] ** 2 == pytest.approx((sc['u']['rmse'] ** 2 + sc['v']['rmse'] ** 2) / 2)
    assert sc['all']['frmse'] == pytest.approx((sc['u']['frmse'] + sc['v']['frmse']) / 2)
    assert sc['all']['frmse_low'] == pytest.approx(frmse(p, t)['low'], rel=1e-12)
    da = scores_to_xarray(sc)
    assert da.dims == ('field', 'metric') and float(da.sel(field='v', metric='rel_l2')) == sc['v']['rel_l2']


@pytest.mark.parametrize('masked,batch_size', [(False, None), (True, None), (True, 2), (False, 2)])
def test_score_fields_equals_separate_calls(data, masked, batch_size):
    p, t = data
    p = np.concatenate([p, 2 * p[..., :1]], -1); t = np.concatenate([t, 2 * t[..., :1]], -1)  # 3 fields
    m = np.random.default_rng(5).random(p.shape) > 0.2 if masked else None
    sc = score_fields(p, t, ('u', 'v', 'p'), mask=m, batch_size=batch_size)
    for i, f in enumerate(('u', 'v', 'p', 'all')):
        sl = slice(None) if f == 'all' else slice(i, i + 1)
        mm = None if m is None else m[..., sl]
        fr = frmse(p[..., sl], t[..., sl], mask=mm, batch_size=batch_size)
        ref = dict(rmse=rmse(p[..., sl], t[..., sl], mm, batch_size), rel_l2=rel_l2(p[..., sl], t[..., sl], mm, batch_size),
                   frmse=fr['all'], frmse_low=fr['low'], frmse_mid=fr['mid'], frmse_high=fr['high'])
        assert close(sc[f], ref, rtol=1e-12), f


def test_score_fields_field_without_valid_points(data):
    p, t = data
    m = np.ones(p.shape, bool); m[..., 1] = False  # v never valid: NaN for v, 'all' = u
    sc = score_fields(p, t, ('u', 'v'), mask=m)
    assert all(math.isnan(v) for v in sc['v'].values())
    assert sc['all']['rmse'] == pytest.approx(sc['u']['rmse'], rel=1e-12)
    with pytest.raises(MetricInputError, match='no valid point'): score_fields(p, t, ('u', 'v'), mask=np.zeros(p.shape, bool))


# --- balanced metrics and results arrays ---------------------------------------------------------------------------

def test_balanced_types():
    assert balanced(1.0, 3.0) == 2.0
    assert balanced(1.0, 3.0, 0.0) == 3.0 and balanced(1.0, 3.0, 1) == 1.0
    np.testing.assert_allclose(balanced(np.array([1., 2.]), np.array([3., 6.]), 0.25), [2.5, 5.0])
    a = xr.DataArray([1., 2.], dims='x'); b = xr.DataArray([3., 6.], dims='x')
    assert isinstance(balanced(a, b), xr.DataArray) and balanced(a, b).values.tolist() == [2.0, 4.0]
    for bad in (-0.1, 1.5, float('nan')):
        with pytest.raises(MetricInputError, match='`lam`'): balanced(1., 2., bad)
    with pytest.raises(MetricInputError, match='`lam`'): balanced(1., 2., 'half')
    with pytest.raises(MetricInputError, match='`lam`'): balanced(1., 2., True)


def test_lambda_sweep():
    s = lambda_sweep(1.0, 3.0)
    assert s.dims == ('lam',) and s.lam.values.tolist() == list(LAMS)
    np.testing.assert_allclose(s.values, [2.8, 2.6, 2.4, 2.2, 2.0, 1.8, 1.6, 1.4, 1.2])  # 1·λ + 3·(1-λ)
    a = xr.DataArray([1., 2.], dims='x'); b = xr.DataArray([3., 6.], dims='x')
    s = lambda_sweep(a, b, (0.5, 1.0))
    assert s.dims == ('lam', 'x') and s.sel(lam=1.0).values.tolist() == [1., 2.]
    s = lambda_sweep(np.array([1., 2.]), np.array([3., 6.]), [0.5])
    assert s.shape == (1, 2)


def test_joint_name():
    assert joint_name(0.5) == 'joint' and joint_name(0.3) == 'joint@0.3' and joint_name(0.9) == 'joint@0.9'
    assert joint_name('0.3') == 'joint@0.3' and joint_name(0.25) == 'joint@0.25'
    with pytest.raises(ProtocolError, match='`lam`'): joint_name(2)  # a protocol's λ: the protocols' error


def test_protocol_names_and_checks():
    assert PROTOCOLS == ('sim_only', 'exp_only', 'sim_to_exp', 'joint') and NON_JOINT == PROTOCOLS[:3] and JOINT == 'joint'
    assert (SIM_ONLY, EXP_ONLY, SIM_TO_EXP) == ('sim_only', 'exp_only', 'sim_to_exp')
    assert check_lam('0.3') == 0.3 and check_lam(1) == 1.0 and check_lam(0) == 0.0
    for bad in (-0.1, 1.5, float('nan'), float('inf'), 'half', None, True):
        with pytest.raises(MetricInputError, match=r'`w` must be a number in \[0, 1\]'): check_lam(bad, 'w')
    check_score(synthetic_score(), ('protocol', 'domain'), 'f')
    with pytest.raises(MetricInputError, match=r"passed to f lacks dim\(s\) \['lam'\]"): check_score(synthetic_score(), ('lam',), 'f')
    with pytest.raises(TypeError, match='`f` needs an xarray.DataArray'): check_score(np.zeros(3), ('lam',), 'f')


def test_synthetic_score_layout():
    s = synthetic_score()
    assert s.dims == ('system', 'capacity', 'protocol', 'seed', 'domain', 'field', 'metric')
    assert s.system.values.tolist() == ['A', 'B'] and s.protocol.values.tolist() == list(PROTOCOLS)
    assert float(s.sel(system='B', capacity='S', protocol='sim_to_exp', domain='exp', field='u', metric='frmse', seed=1)) == 0.1
    n = synthetic_score(systems=('x',), seeds=(0,), noise=0.1, errors={'joint': (1.0, 2.0)})
    assert n.shape == (1, 1, 1, 1, 2, 4, 3) and bool((n.sel(domain='exp') != 2.0).all())


@pytest.fixture
def score():
    "2 systems x 1 capacity x 2 seeds: bM(λ) = 1-λ (sim_only), λ (exp_only), 0.1+0.5λ (sim_to_exp), 0.15+0.1λ (joint)."
    s = synthetic_score()
    s.loc[dict(protocol='exp_only', seed=1)] = np.nan  # a run that is missing: ignored by the seed mean
    return s


def test_balanced_score_and_best(score):
    assert setting_dims(score) == ('system', 'capacity')
    tab = balanced_score(score)
    assert set(tab.dims) == {'system', 'capacity', 'protocol', 'metric'}
    np.testing.assert_allclose(tab.sel(protocol='joint'), 0.2)
    np.testing.assert_allclose(tab.sel(protocol='exp_only'), 0.5)
    best, who = best_non_joint(tab, return_name=True)
    np.testing.assert_allclose(best, 0.35)
    assert (who == 'sim_to_exp').all()
    np.testing.assert_allclose(joint_reduction(tab), 100 * 0.15 / 0.35)
    sweep = balanced_score(score, lam=[0.1, 0.9])
    assert 'lam' in sweep.dims
    np.testing.assert_allclose(best_non_joint(sweep).sel(lam=0.1), 0.1)  # exp_only
    np.testing.assert_allclose(best_non_joint(sweep).sel(lam=0.9), 0.1)  # sim_only


def test_win_counts_known_answer(score):
    w = win_counts(score)
    assert w.dims == ('lam',) and w.attrs['total'] == 6
    assert w.values.tolist() == [0, 6, 6, 6, 6, 6, 6, 0, 0]
    # one (setting, metric) cell where joint was not run -> one fewer comparison
    s2 = score.copy(); s2.loc[dict(protocol='joint', system='B', metric='frmse')] = np.nan
    w2 = win_counts(s2)
    assert w2.attrs['total'] == 5 and w2.sel(lam=0.5) == 5
    # a pre-balanced table with a lam dim works too
    assert win_counts(balanced_score(score, list(LAMS))).values.tolist() == w.values.tolist()


def test_win_counts_matched_joint():
    errs = {'sim_only': (0.0, 1.0), 'exp_only': (1.0, 0.0), 'sim_to_exp': (0.6, 0.1), 'joint': (0.25, 0.15),
            'joint@0.1': (0.5, 0.01)}  # a Joint trained at λ = 0.1 that is better than exp_only at λ = 0.1
    s = synthetic_score(errors=errs)
    assert win_counts(s, lams=(0.1,)).values.tolist() == [0]
    assert win_counts(s, joint='matched', lams=(0.1, 0.5)).values.tolist() == [6, 6]
    with pytest.raises(MetricInputError, match='joint'): win_counts(s, joint='matched', lams=(0.3,))


def test_evaluation_layout():
    "Scores as `evaluate` writes them: a `mode` dim and the fRMSE band keys in `metric`."
    from simreal_nb.reading.analysis import select_view
    s = synthetic_score(metrics=SCORE_KEYS, modes=('one_step', 'rollout'))
    s.loc[dict(mode='one_step', protocol='joint')] = 9.0  # must not be used by default
    assert setting_dims(s) == ('system', 'capacity')
    w = win_counts(s)
    assert w.attrs['total'] == 6 and w.sel(lam=0.5) == 6  # 2 settings x the 3 paper metrics
    assert win_counts(s, mode='one_step').sel(lam=0.5) == 0
    assert win_counts(s, metrics=SCORE_KEYS).attrs['total'] == 12
    assert headline(s)['joint_best_at_0_5'] == {'rmse': 2, 'rel_l2': 2, 'frmse': 2}
    with pytest.raises(MetricInputError, match='`mode`'): balanced_score(s, mode='rollout_8')
    s1 = s.sel(mode=['one_step'])
    assert select_view(s1).dims == ('system', 'capacity', 'protocol', 'seed', 'domain', 'metric')  # the only mode
    s3 = xr.concat([s1, s1.assign_coords(mode=['other'])], 'mode')
    with pytest.raises(MetricInputError, match='several modes'): select_view(s3)


def test_results_array_errors(score):
    with pytest.raises(MetricInputError, match='domain'): win_counts(score.sel(domain='sim'))
    with pytest.raises(MetricInputError, match='baseline'): best_non_joint(balanced_score(score), baselines=('pcgrad',))
    with pytest.raises(TypeError, match='DataArray'): balanced_score(score.values)


def test_headline_and_paper(score):
    h = headline(score)
    assert set(h) == set(PAPER) | {'joint_best_at_0_5_robust', 'win_counts_robust', 'joint_best_at_0_5_clear', 'win_counts_clear'}
    assert h['joint_best_at_0_5_robust'] == h['joint_best_at_0_5'] and h['win_counts_robust'] == h['win_counts']  # equal seeds
    assert set(h['win_counts_clear'].values()) == {0}  # Exp-only has one seed here: no interval against it, so no clear win
    full = headline(synthetic_score())
    assert full['win_counts_clear'] == full['win_counts']  # identical seeds: an interval of zero width excludes zero
    assert h['n_settings'] == 2 and h['joint_best_at_0_5'] == {'rmse': 2, 'rel_l2': 2, 'frmse': 2}
    assert h['brmse_reduction_pct']['mean'] == pytest.approx(100 * 0.15 / 0.35)
    assert h['sim_to_exp_forgets'] == 2 and bool(forgetting(score).all())
    assert h['pressure_reduction_pct']['max'] == pytest.approx(100 * 0.35 / 0.6)
    np.testing.assert_allclose(pressure_reduction(score), 100 * 0.35 / 0.6)
    assert h['win_total'] == 6 and h['win_counts'][0.5] == 6
    df = compare_to_paper(score)
    assert list(df.columns) == ['paper', 'measured', 'clear'] and df.loc['brmse_reduction_pct[mean]', 'paper'] == 49.1
    assert df.loc['win_counts[0.5]', 'clear'] == 0 and df.loc['brmse_reduction_pct[mean]', 'clear'] is None
    assert df.loc['win_counts[0.9]', 'paper'] == 21
    assert PAPER['brmse_reduction_pct'] == dict(min=39.0, max=58.4, mean=49.1)
    assert PAPER['pressure_reduction_pct'] == dict(min=52.4, max=86.6)
    assert [PAPER['win_counts'][l] for l in LAMS] == [22, 24, 24, 24, 24, 24, 24, 24, 21]


# --- seeds, confidence intervals and robust wins ---------------------------------------------------------------------

def test_mean_ci_hand_computed():
    x = xr.DataArray([[1., 2., 3.], [2., 2., 2.], [5., np.nan, np.nan], [np.nan] * 3, [0., 4., np.nan]], dims=('cell', 'seed'))
    m, hw = mean_ci(x)
    np.testing.assert_allclose(m.values[:3], [2.0, 2.0, 5.0]); assert np.isnan(m.values[3]) and m.values[4] == 2.0
    assert hw.values[0] == pytest.approx(4.302652729749464 / math.sqrt(3), rel=1e-12)  # t_{0.975, 2}·s/√3 with s = 1
    assert hw.values[1] == 0.0 and np.isnan(hw.values[2]) and np.isnan(hw.values[3])  # no spread; one seed; none
    assert hw.values[4] == pytest.approx(12.706204736174698 * math.sqrt(8) / math.sqrt(2), rel=1e-12)  # n = 2: t_{0.975, 1}
    assert mean_ci(x, level=0.5)[1].values[0] == pytest.approx(0.8164965809277259 / math.sqrt(3), rel=1e-9)  # t_{0.75, 2}
    m1, h1 = mean_ci(x.isel(seed=0), 'seed')  # no seed dim: the values and NaN half-widths
    assert m1.equals(x.isel(seed=0)) and bool(h1.isnull().all())
    for bad in (0, 1, 95, True, '0.95'):
        with pytest.raises(MetricInputError, match='`level`'): mean_ci(x, level=bad)
    with pytest.raises(TypeError, match='DataArray'): mean_ci(np.zeros(3))


SEEDED = {'sim_only': (0.0, 1.0), 'exp_only': (1.0, 0.0), 'sim_to_exp': (0.6, 0.1),
          'joint': [(0.25, 0.15), (0.25, 0.15), (0.5, 0.5)],  # bM(0.5) per seed 0.2, 0.2, 0.5 vs sim_to_exp 0.35
          'persistence': (0.0, 0.0), 'mean_field': (0.1, 0.1)}  # perfect reference rows that must never compete


def test_robust_wins_hand_built_seeds():
    s = synthetic_score(seeds=(0, 1, 2), errors=SEEDED)
    assert win_counts(s, lams=(0.5,)).values.tolist() == [6]         # seed mean 0.3 < 0.35 in 2 settings x 3 metrics
    assert win_counts(s, lams=(0.5,), rule='robust').values.tolist() == [0]  # seed 2: 0.5 > 0.35
    assert (joint_wins(s) == 1).all() and (joint_wins(s, rule='robust') == 0).all()
    # make seed 2 a win in system B only: Joint 0.3 < 0.35 there, so B wins robustly, A does not
    s.loc[dict(system='B', protocol='joint', seed=2)] = 0.3
    jw = joint_wins(s, rule='robust')
    assert jw.sel(system='A').values.ravel().tolist() == [0.0] * 3 and jw.sel(system='B').values.ravel().tolist() == [1.0] * 3
    h = headline(s)
    assert h['joint_best_at_0_5'] == {'rmse': 2, 'rel_l2': 2, 'frmse': 2} and h['joint_best_at_0_5_robust'] == {'rmse': 1, 'rel_l2': 1, 'frmse': 1}
    assert h['win_counts_robust'][0.5] == 3 and h['win_counts'][0.5] == 6
    # per seed, Joint must beat every non-joint protocol of that seed, not only the best one by seed mean: Exp-only
    # at 0.25 in seed 2 of B (seed mean 0.417, still worse than Sim->Exp's 0.35) beats Joint's 0.3 there
    s2 = s.copy()
    s2.loc[dict(system='B', protocol='exp_only', seed=2, domain='sim')] = 0.3
    s2.loc[dict(system='B', protocol='exp_only', seed=2, domain='exp')] = 0.2
    assert (joint_wins(s2, rule='robust') == 0).all() and (joint_wins(s2).sel(system='B') == 1).all()
    w = win_counts(s, lams=(0.5,), rule='robust')
    assert w.attrs['rule'] == 'robust' and w.attrs['total'] == 6
    # a missing seed is skipped, but one comparable seed is never a robust win
    one = s.copy(); one.loc[dict(protocol='joint', seed=[1, 2])] = np.nan
    assert win_counts(one, lams=(0.5,), rule='robust').values.tolist() == [0] and win_counts(one, lams=(0.5,)).values.tolist() == [6]
    assert headline(s.isel(seed=[0]))['win_counts_robust'] is None  # one seed: no robust count at all
    with pytest.raises(MetricInputError, match='`rule`'): win_counts(s, rule='median')
    with pytest.raises(MetricInputError, match='needs a `seed` dim'): win_counts(s.isel(seed=0, drop=True), rule='robust')


def test_joint_reduction_ci_hand_built():
    s = synthetic_score(seeds=(0, 1, 2), errors=SEEDED)
    r = joint_reduction_ci(s).sel(system='A', capacity='S', metric='rmse')
    assert str(r.which.item()) == 'sim_to_exp'  # not persistence, although it is better
    per_seed = [100 * 0.15 / 0.35, 100 * 0.15 / 0.35, -100 * 0.15 / 0.35]
    assert float(r.reduction) == pytest.approx(np.mean(per_seed))
    assert float(r.reduction_ci) == pytest.approx(4.302652729749464 * np.std(per_seed, ddof=1) / math.sqrt(3))
    assert float(r.best) == pytest.approx(0.35) and float(r.best_ci) == pytest.approx(0.0, abs=1e-12)
    assert float(r.joint) == pytest.approx(0.3)
    assert reduction_pct(2.0, 1.5) == 25.0
    # pressure: Joint vs Sim->Exp per seed, mean and CI
    m, hw = pressure_reduction(s, level=0.95)
    assert float(m.sel(system='A', capacity='S')) == pytest.approx(100 * (0.6 - 1 / 3) / 0.6) and bool(hw.notnull().all())


def test_baselines_never_compete():
    assert BASELINES == ('persistence', 'mean_field', 'analog')
    assert trained_protocols(['persistence', 'joint', 'mean_field', 'pcgrad']) == ['joint', 'pcgrad']
    from simreal_nb.training.protocols import with_protocol_coords
    names = ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'joint@0.7', 'persistence', 'pcgrad']
    bare = xr.Dataset(coords=dict(protocol=names))  # results that record no coordinates: a name with a setting is not known
    assert list(train_domains(bare).values()) == [('sim',), ('exp',), ('exp',), ('sim', 'exp'), (), (), ()]
    assert list(train_domains(with_protocol_coords(bare.sel(protocol=names[:-1]))).values()) == [
        ('sim',), ('exp',), ('exp',), ('sim', 'exp'), ('sim', 'exp'), ()]
    s = synthetic_score(errors=SEEDED, seeds=(0, 1, 2))
    best, who = best_non_joint(balanced_score(s), return_name=True)
    assert (who == 'sim_to_exp').all()
    assert headline(s)['brmse_reduction_pct']['mean'] == pytest.approx(100 / 7)


def test_synthetic_layouts():
    s = synthetic_score(seeds=(0, 1, 2), errors=SEEDED, dims={'arch': ('fan', 'fno'), 'exp_trajs': (2, 4)})
    assert s.dims == ('system', 'capacity', 'arch', 'exp_trajs', 'protocol', 'seed', 'domain', 'field', 'metric')
    assert setting_dims(s) == ('system', 'capacity', 'arch', 'exp_trajs')
    assert headline(s)['n_settings'] == 8 and win_counts(s, lams=(0.5,)).attrs['total'] == 24
    assert float(s.sel(system='A', capacity='S', arch='fno', exp_trajs=4, protocol='joint', seed=2, domain='exp', field='u', metric='rmse')) == 0.5
    with pytest.raises(MetricInputError, match="errors\\['joint'\\]"): synthetic_score(seeds=(0, 1), errors=SEEDED)
    r = synthetic_results(seeds=(0, 1))
    assert set(r.data_vars) == {'score', 'score_phys', 'curve_step', 'curve_val', 'capped', 'steps_done'}
    assert r.score.attrs['units'] == '1' and json.loads(r.attrs['reference_scales'])['B'] == {'u': 2.0, 'v': 2.0, 'p': 0.5}
    assert 'at most 300 updates' in r.attrs['budget_rule']
    assert bool(r.score_phys.sel(field='all').isnull().all())
    np.testing.assert_allclose(r.score_phys.sel(field='u'), 2 * r.score.sel(field='u'))
    assert r.curve_val.dims == ('system', 'capacity', 'protocol', 'seed', 'eval_index')
    assert bool(r.curve_val.sel(protocol='mean_field').isnull().all()) and r.curve_step.sel(protocol='joint').max() == 300
    cv = r.curve_val.sel(protocol='joint', system='A', capacity='S', seed=0).values
    assert (np.diff(cv) < 0).all() and cv[-1] == pytest.approx(0.2 * (1 + 4 * np.exp(-5 / 1.5)))


def _upstream_like(pred, target):
    "RealPDEBench's MAE, R², kinetic-energy error, FE and relative fRMSE bands for one batch, written out with numpy and loops from its definitions."
    p, t = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    b, T, H, W, C = t.shape
    mae = np.abs(p - t).mean()
    r2 = 1 - ((p - t) ** 2).sum() / ((t - t.mean(0, keepdims=True)) ** 2).sum()
    def K(x):
        u, v = x[..., 0], x[..., 1]
        return 0.5 * (((u - u.mean(1, keepdims=True)) ** 2).mean(1) + ((v - v.mean(1, keepdims=True)) ** 2).mean(1))
    ke = np.abs(K(p) - K(t)).mean()
    fe = np.abs(np.fft.fft(p.sum((2, 3, 4)), axis=1) - np.fft.fft(t.sum((2, 3, 4)), axis=1)).mean()
    n = min(T // 2, H // 2, W // 2)
    def shells(X):
        acc = np.zeros((b, n, C))
        for i in range(T // 2):
            for j in range(H // 2):
                for k in range(W // 2):
                    r = int(np.floor(np.sqrt(i * i + j * j + k * k)))
                    if r <= n - 1: acc[:, r] += np.abs(X[:, i, j, k]) ** 2
        return np.sqrt(acc.mean(0)) / (T * H * W)
    Fp, Ft = np.fft.fftn(p, axes=(1, 2, 3)), np.fft.fftn(t, axes=(1, 2, 3))
    rel = shells(Fp - Ft) / shells(Ft)
    lo, hi = int(np.round(n / 3)), int(np.round(n * 2 / 3))
    return dict(mae=mae, r2=r2, ke_error=ke, freq_error=fe, low=rel[:lo].mean(), mid=rel[lo:hi].mean(), high=rel[hi:].mean())


@pytest.mark.parametrize('shape,batch', [((6, 8, 10, 12, 2), None), ((8, 10, 12, 8, 3), 3), ((4, 12, 14, 14, 2), 2)])
def test_upstream_metrics_match_a_literal_reference(shape, batch):
    "mae, r2, ke_error, freq_error and frmse_relative equal the definitions written out in numpy, also averaged over chunks of `batch_size` samples as upstream does."
    from simreal_nb.core.metrics import mae, r2, ke_error, freq_error, frmse_relative
    rng = np.random.default_rng(sum(shape))
    t = rng.normal(size=shape) + np.linspace(0, 2, shape[2])[None, None, :, None, None]
    p = t + 0.3 * rng.normal(size=shape)
    chunks = [slice(i, i + (batch or shape[0])) for i in range(0, shape[0], batch or shape[0])]
    ref = {k: np.mean([_upstream_like(p[c], t[c])[k] for c in chunks]) for k in ('mae', 'r2', 'ke_error', 'freq_error', 'low', 'mid', 'high')}
    got = dict(mae=mae(p, t, batch_size=batch), r2=r2(p, t, batch_size=batch), ke_error=ke_error(p, t, batch_size=batch),
               freq_error=freq_error(p, t, batch_size=batch), **frmse_relative(p, t, batch_size=batch))
    for k in ref: np.testing.assert_allclose(got[k], ref[k], rtol=1e-10, err_msg=k)


def test_upstream_metrics_with_a_mask_ignore_invalid_points():
    "Garbage at masked points changes nothing; an all-valid mask equals no mask; bad input is refused by name."
    from simreal_nb.core.metrics import mae, r2, ke_error, freq_error, MetricInputError
    rng = np.random.default_rng(1)
    t = rng.normal(size=(5, 8, 8, 10, 2)); p = t + 0.2 * rng.normal(size=t.shape)
    valid = rng.random(t.shape[:4]) > 0.2
    noisy = p.copy(); noisy[~valid] = np.nan
    for f in (mae, r2, ke_error, freq_error):
        assert np.isfinite(f(noisy, t, mask=valid)) and f(p, t, mask=np.ones(t.shape[:4], bool)) == pytest.approx(f(p, t), rel=1e-12)
    with pytest.raises(MetricInputError, match='u and v'): ke_error(p[..., :1], t[..., :1])
    with pytest.raises(MetricInputError, match='does not vary'): r2(np.zeros_like(t), np.ones_like(t))


def test_upstream_scores_are_the_metrics_per_field_and_together():
    from simreal_nb.core.metrics import upstream_scores, mae, r2, ke_error, freq_error, frmse_relative, UPSTREAM_METRICS
    rng = np.random.default_rng(3)
    t = rng.standard_normal((6, 8, 6, 10, 3))  # chunks of 3 samples: R² is defined on each
    p = t + 0.3 * rng.standard_normal(t.shape)
    m = rng.random(t.shape[:4]) > 0.1
    up = upstream_scores(p, t, ('u', 'v', 'p'), mask=m, batch_size=3)
    assert list(up) == ['u', 'v', 'p', 'all'] and all(list(d) == list(UPSTREAM_METRICS) for d in up.values())
    for i, f in enumerate(('u', 'v', 'p')):
        one = (p[..., i:i + 1], t[..., i:i + 1], m)
        rel = frmse_relative(*one, batch_size=3)
        want = dict(mae=mae(*one, batch_size=3), r2=r2(*one, batch_size=3), freq_error=freq_error(*one, batch_size=3),
                    frmse_rel_low=rel['low'], frmse_rel_mid=rel['mid'], frmse_rel_high=rel['high'])
        for k, v in want.items(): np.testing.assert_allclose(up[f][k], v, rtol=1e-12, err_msg=f'{f} {k}')
        assert np.isnan(up[f]['ke_error'])
    np.testing.assert_allclose(up['all']['ke_error'], ke_error(p[..., :2], t[..., :2], m, batch_size=3), rtol=1e-12)
    np.testing.assert_allclose(up['all']['mae'], mae(p, t, m, batch_size=3), rtol=1e-12)
    flat = upstream_scores(p[:, :, :, :, :1], np.zeros_like(t[..., :1]) + 1.0, ('u',))  # a constant target: R² undefined -> NaN
    assert np.isnan(flat['u']['r2']) and np.isnan(flat['all']['ke_error'])  # one channel: no kinetic energy


def _mvpe_loops(pred, target, d, cx, cy, sub_s, batch):
    "A literal transcription of RealPDEBench's probe rule with loops (numpy), per batch chunk, then the mean over chunks and stations."
    errs = []
    for s in range(0, pred.shape[0], batch):
        p, t = pred[s:s + batch], target[s:s + batch]
        h, w = p.shape[2], p.shape[3]
        ys = [int(cy / sub_s) + min(2, int(h / 10)) * j for j in range(-4, 5)]
        for i in range(4):
            x = int(((i + 1) * d + cx) / sub_s) if int((2 * d + cx) / sub_s) < w else int((0.5 * (i + 2) * d + cx) / sub_s)
            tot, n = 0.0, 0
            for b in range(p.shape[0]):
                for y in ys:
                    for c in range(p.shape[4]):
                        tot += abs(np.mean(p[b, :, y, x, c]) - np.mean(t[b, :, y, x, c])); n += 1
            errs.append(tot / n)
    return float(np.mean(errs))


@pytest.mark.parametrize('shape, geom, sub_s', [((5, 7, 64, 128, 2), (18, 32, 32), 1),   # cylinder, real grid: stations 1-4 D
                                                ((4, 6, 64, 128, 2), (18, 16, 32), 1),   # controlled cylinder
                                                ((3, 5, 64, 128, 2), (18, 32, 32), 2)])  # the cylinder's geometry on a grid at step 2
def test_mvpe_matches_a_literal_reference(shape, geom, sub_s):
    from simreal_nb.core.metrics import mvpe, probe_points
    rng = np.random.default_rng(5)
    t = rng.standard_normal(shape)
    p = t + 0.2 * rng.standard_normal(shape) + 0.05
    rows, cols = probe_points(shape[2], shape[3], *geom, sub_s=sub_s)
    for batch in (None, 2):
        np.testing.assert_allclose(mvpe(p, t, rows, cols, batch_size=batch),
                                   _mvpe_loops(p, t, *geom, sub_s, batch or shape[0]), rtol=1e-12)
    with pytest.raises(MetricInputError, match='leave the 8 x 8 grid'):
        mvpe(p[:, :, :8, :8], t[:, :, :8, :8], rows, cols)


def test_upstream_scores_mvpe_reads_the_velocity_probes():
    from simreal_nb.core.metrics import upstream_scores, mvpe, probe_points
    rng = np.random.default_rng(4)
    t = rng.standard_normal((3, 6, 64, 128, 3))
    p = t + 0.1 * rng.standard_normal(t.shape) + 0.02
    probes = probe_points(64, 128, 18, 32, 32)
    up = upstream_scores(p, t, ('u', 'v', 'p'), probes=probes)
    np.testing.assert_allclose(up['all']['mvpe'], mvpe(p[..., :2], t[..., :2], *probes), rtol=1e-12)  # u and v, never p
    np.testing.assert_allclose(up['v']['mvpe'], mvpe(p[..., 1:2], t[..., 1:2], *probes), rtol=1e-12)
    assert np.isnan(up['p']['mvpe']) and np.isnan(upstream_scores(p, t, ('u', 'v', 'p'))['all']['mvpe'])
    with pytest.raises(MetricInputError, match='leave the 64 x 128 grid'):
        upstream_scores(p, t, ('u', 'v', 'p'), probes=([70], [3]))
