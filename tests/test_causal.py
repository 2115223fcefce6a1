"""Causal consistency: the response, Corr(Δcmd, Δresp) and the score, the Granger F-test and the stream monitor."""
import warnings
import numpy as np
import pytest
import torch
from simreal_nb.twins.systems import load_twins
from simreal_nb.data.domains import make_domain_data
from simreal_nb.study.evaluation import Persistence
from simreal_nb.checks.causal import (CausalCheckError, wake_response, delta_corr, causal_score, dominant_frequency, granger_test,
                               GrangerMonitor, run_monitor, actuator_off_stream, predicted_response, causal_consistency)

torch.set_num_threads(1)
N = 200  # frames of the long controlled twin (cached by load_twins)


def test_delta_corr_and_score():
    t = np.linspace(0, 20, 400); c = np.sin(t)
    np.testing.assert_allclose(delta_corr(c, 3 * c - 2), 1.0)
    np.testing.assert_allclose(delta_corr(np.stack([c, c]), np.stack([c, -c])), [1.0, -1.0])
    np.testing.assert_allclose(causal_score(c, c, -c), 2.0)
    assert np.isnan(delta_corr(c, np.ones_like(c)))            # a response that never changes has no correlation
    with pytest.raises(CausalCheckError, match='equal shapes'): delta_corr(c, c[1:])
    with pytest.raises(CausalCheckError, match='at least 3'): delta_corr(c[:2], c[:2])


def test_granger_calibration_and_power():
    rng = np.random.default_rng(1)
    def ar1(n):
        e, out = rng.normal(size=n), np.zeros(n)
        for i in range(1, n): out[i] = 0.5 * out[i - 1] + e[i]
        return out
    p_null = np.array([granger_test(ar1(100), ar1(100), 3)[1] for _ in range(300)])
    assert 0.02 <= (p_null < 0.05).mean() <= 0.09
    x = ar1(100); y = np.r_[0, 0, 0.8 * x[:-2]] + 0.3 * rng.normal(size=100)
    F, p = granger_test(y, x, 3)
    assert p < 1e-6 and F > 10
    with pytest.raises(CausalCheckError, match='more than'): granger_test(x[:8], y[:8], 3)
    with pytest.raises(CausalCheckError, match='equal length'): granger_test(x, y[:-1])


def test_granger_statistic_matches_the_textbook_formula():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=80), rng.normal(size=80)
    F, p = granger_test(y, x, 2)
    # restricted: y_t on 1, y_{t-1}, y_{t-2}; unrestricted adds x_{t-1}, x_{t-2}
    Y = y[2:]
    Xr = np.column_stack([np.ones(78), y[1:-1], y[:-2]]); Xu = np.column_stack([Xr, x[1:-1], x[:-2]])
    r0 = np.sum((Y - Xr @ np.linalg.lstsq(Xr, Y, rcond=None)[0]) ** 2); r1 = np.sum((Y - Xu @ np.linalg.lstsq(Xu, Y, rcond=None)[0]) ** 2)
    np.testing.assert_allclose(F, (r0 - r1) / 2 / (r1 / (78 - 5)))
    from scipy import stats
    np.testing.assert_allclose(p, stats.f.sf(F, 2, 73))


def test_wake_response_and_errors():
    tw = load_twins('controlled', size='test')
    r = wake_response(tw['exp'])
    assert r.dims == ('traj', 'time') and np.isfinite(r).all()
    with pytest.raises(CausalCheckError, match='expected fractions'): wake_response(tw['exp'], box=(0.5, 0.3, 0, 1))
    with pytest.raises(CausalCheckError, match="no field 'v'"): wake_response(tw['exp'].drop_vars('v'))


def test_dominant_frequency():
    dt = 0.2; t = np.arange(300) * dt
    np.testing.assert_allclose(dominant_frequency(np.stack([np.sin(2 * np.pi * 0.3 * t), np.cos(2 * np.pi * 0.7 * t)]), dt), [0.3, 0.7], atol=0.005)


def test_monitor_alarm_and_warning():
    s = actuator_off_stream(3, n_frames=N)                    # f_c = 0.30 Hz, away from the shedding frequency
    log = run_monitor(s['cmd'], s['resp'], every=10, window=80)
    assert not log[log.index <= s['off']].alarm.any()
    first = log.index[log.alarm & (log.index > s['off'])].min()
    assert s['off'] < first <= s['off'] + 80
    m = GrangerMonitor(every=10, window=80)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        for i in range(len(s['cmd'])): m.update(s['cmd'][i], s['resp'][i])   # one sample at a time
    assert len(w) == 1 and 'has not Granger-caused' in str(w[0].message) and m.alarm
    assert [r['sample'] for r in m.log] == list(log.index)


def test_monitor_quiet_when_connected():
    tw = load_twins('controlled', size='test', n_frames=N, n_traj=4)
    r = wake_response(tw['exp']).values
    log = run_monitor(tw['exp']['omega_cmd'].values[3], r[3], every=10, window=80)
    assert len(log) > 5 and not log.alarm.any()


def test_monitor_errors():
    with pytest.raises(CausalCheckError, match='window=10'): GrangerMonitor(window=10, lags=4)
    with pytest.raises(CausalCheckError, match='alpha'): GrangerMonitor(alpha=1.5)
    with pytest.raises(CausalCheckError, match='every'): GrangerMonitor(every=0)
    with pytest.raises(CausalCheckError, match='at='): actuator_off_stream(at=1.5)


def test_predicted_response_of_persistence_is_the_data_one_frame_late():
    tw = load_twins('controlled', size='test')
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, fracs=(0.5, 0.25, 0.25))
    r = predicted_response(Persistence(), dd.exp['test'], dd.normalizer)
    assert r['pred'].shape == r['data'].shape == r['cmd'].shape
    # persistence predicts frame t+1 as frame t: the same box mean over the points valid at t+1 (close, not equal)
    np.testing.assert_allclose(r['pred'][:, 1:], r['data'][:, :-1], atol=0.15 * np.abs(r['data']).max())
    c = causal_consistency(Persistence(), dd.exp['test'], dd.normalizer)
    assert np.isfinite(c['mean_score'])
    with pytest.raises(CausalCheckError, match='no time-varying input'):
        cyl = load_twins('cylinder', size='test')
        dc = make_domain_data(cyl['sim'], cyl['exp'], n_in=2, fracs=(0.5, 0.25, 0.25))
        predicted_response(Persistence(), dc.exp['test'], dc.normalizer)
