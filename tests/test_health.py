"""Sensor health: injected faults, the per-region indicator, Kalman zero re-estimate, quarantine, doubling time."""
import json, math
import numpy as np
import pytest
from simreal_nb.twins.systems import load_twins
from simreal_nb.core.schema import validate
from simreal_nb.checks.health import (HealthError, FAULTS, HEALTH_THRESHOLD, inject_fault, region_boxes, health_monitor, time_to_double)

N_REF, WIN = 100, 30


@pytest.fixture(scope='module')
def stream():
    tw = load_twins('cylinder', size='test', n_frames=300, n_traj=4)
    ex, tr = tw['exp'].isel(traj=[1]), tw['exp_truth'].isel(traj=[1])
    t0 = float(ex.time[N_REF]); L = float(ex.time[-1]) - t0
    return ex, tr, t0, L


def test_inject_fault_sizes(stream):
    ex, _, t0, L = stream
    U = ex.attrs['U_ref']
    z = inject_fault(ex, 'zero', 0.2 * U / L, start=t0)
    d = (z.u - ex.u).where(ex.valid)
    assert float(abs(d.isel(time=slice(0, N_REF + 1))).max()) < 1e-9            # nothing before the start
    np.testing.assert_allclose(float(d.isel(time=-1).max()) / U, 0.2, rtol=1e-3)
    assert float(abs((z.v - ex.v).where(ex.valid)).max()) == 0                  # only u by default
    g = inject_fault(ex, 'gain', 0.5 / L, start=t0)
    r = (g.u / ex.u).where(ex.valid & (abs(ex.u) > 1e-4)).isel(time=-1)
    np.testing.assert_allclose(float(r.median()), 1.5, rtol=1e-3)
    dy = inject_fault(ex, 'dying', 1 / L, start=t0, box=(0.5, 1.0, 0.0, 0.5))
    lost = (ex.valid & ~dy.valid).isel(traj=0)
    assert int(lost.isel(time=slice(0, N_REF)).sum()) == 0 and int(lost.isel(time=-1).sum()) > 0
    assert not bool(lost.isel(time=-1).sel(x=slice(None, float(ex.x[10]))).any())   # only inside the box
    for f in (z, g, dy): validate(f, 'exp')


def test_inject_fault_errors(stream):
    ex = stream[0]
    with pytest.raises(HealthError, match='kind'): inject_fault(ex, 'offset', 1.0)
    with pytest.raises(HealthError, match="'p' is not in the dataset"): inject_fault(ex, 'gain', 1.0, fields=('p',))
    with pytest.raises(HealthError, match='holds no grid point'): inject_fault(ex, 'zero', 1.0, box=(0.5, 0.5, 0, 1))


def test_region_boxes_tile_the_domain(stream):
    from simreal_nb.checks.health import _box_mask
    ex = stream[0]
    masks = np.stack([_box_mask(ex, b) for b in region_boxes(3, 5)])
    assert masks.shape[0] == 15 and (masks.sum(0) == 1).all()


def test_healthy_stream_takes_no_action(stream):
    ex, tr, _, _ = stream
    h = health_monitor(ex, tr, n_ref=N_REF, window=WIN)
    assert h.attrs['n_events'] == 0 and math.isinf(time_to_double(h.error.values, h.time.values, N_REF, WIN))
    assert np.isnan(h.health.values[:N_REF]).all() and np.isfinite(h.health.values[N_REF:]).all()


@pytest.mark.parametrize('kind', FAULTS)
def test_actions_delay_the_doubling(stream, kind):
    ex, tr, t0, L = stream
    f = dict(zero=dict(rate=0.3 * ex.attrs['U_ref'] / L, fields=('u', 'v')), gain=dict(rate=0.4 / L),
             dying=dict(rate=1 / (0.8 * L), box=(0.5, 0.75, 0.5, 1.0)))[kind]
    s = inject_fault(ex, kind, start=t0, **f)
    off = health_monitor(s, tr, n_ref=N_REF, window=WIN, recalibrate=False, quarantine=False)
    on = health_monitor(s, tr, n_ref=N_REF, window=WIN)
    assert np.nanmin(off.health.values) < HEALTH_THRESHOLD
    t_off = time_to_double(off.error.values, off.time.values, N_REF, WIN)
    t_on = time_to_double(on.error.values, on.time.values, N_REF, WIN)
    assert t_off < L and t_on > t_off
    ev = json.loads(on.attrs['events'])
    want = 'quarantine' if kind == 'dying' else 'recalibrate'
    assert ev and ev[0]['action'] == want and ev[0]['frame'] >= N_REF
    if kind == 'dying': assert {e['region'] for e in ev} == {6}            # the region of the box, nothing else
    if kind == 'zero':                                                       # the offsets track the injected drift
        est = on.offset_u.isel(time=-1).mean().item() / ex.attrs['U_ref']
        assert 0.15 < est < 0.35


def test_kalman_zero_recovers_a_constant_offset():
    from simreal_nb.checks.health import _kalman_zero
    rng = np.random.default_rng(0)
    y = 0.7 + rng.normal(0, 1, 400)
    assert abs(_kalman_zero(y, 1.0, 1e-6) - 0.7) < 0.15


def test_health_monitor_errors(stream):
    ex, tr, _, _ = stream
    with pytest.raises(HealthError, match='n_ref'): health_monitor(ex, n_ref=300)
    with pytest.raises(HealthError, match="has no 'valid'"): health_monitor(ex.drop_vars('valid'))
