"""Property-based tests (hypothesis) of the data contract, regridding, normaliser, splits, windows, metrics and the
models' input checks.

Every property draws random shapes and values (NaN/inf, empty dims, mismatched or non-monotonic coordinates, wrong
dtypes) and asserts that the function either gives the right answer, checked against a simple independent reference
(numpy formulas, exact regridding of linear fields, round trips, counting formulas), or raises the package's own
clear error (`DataContractError`, `MetricInputError`, `ModelInputError` or a `ValueError` naming the problem), never
an error from deep inside torch/xarray and never a silent wrong number.

Bugs these properties found are kept as `@example(...)` regressions.

Run: `pytest tests/test_properties.py` (profile `default`: few derandomized examples, well under a minute).
Long bug hunt: `SIMREAL_HYPOTHESIS=long nice pytest tests/test_properties.py` (600 random examples per property;
profiles are registered in tests/conftest.py)."""
import math, warnings
import numpy as np
import pytest
import torch
import xarray as xr

pytest.importorskip('hypothesis')
from hypothesis import HealthCheck, assume, event, example, given, settings, strategies as st

def floats(*a, **kw):
    "Hypothesis floats without subnormals: a library loaded with flush-to-zero (fast-math) makes them unrepresentable."
    return st.floats(*a, allow_subnormal=False, **kw)

from simreal_nb.core.schema import FIELDS, FIELD_META, DIMS, DataContractError, validate
from simreal_nb.data.align import Normalizer, regrid, resample_time, split_trajs
from simreal_nb.data.domains import WindowDataset, make_domain_data
from simreal_nb.core.metrics import MetricInputError, frmse, rel_l2, rmse, score_fields
from simreal_nb.models.factory import make_model
from simreal_nb.models.nets import ModelInputError
from simreal_nb.study.evaluation import MeanField, Persistence, rollout

torch.set_num_threads(1)
SCALES = dict(scale_u=1.0, scale_v=1.0, scale_p=0.5)
seeds = st.integers(0, 2**32 - 1)


# --- a random contract dataset ---------------------------------------------------------------------------------
def axis(rng, n, start=0.0):
    "Strictly increasing coordinates with random positive steps."
    return start + np.concatenate([[0.0], np.cumsum(rng.uniform(0.1, 2.0, n - 1))]) if n else np.zeros(0)

def build(N=2, T=3, H=3, W=4, fields=('u', 'v'), seed=0, domain='sim', valid_frac=None, param=False, inputs=False,
          values=None):
    "A contract dataset; `values(t, y, x)` (broadcast arrays) gives every field, default random; `valid_frac`: share kept."
    rng = np.random.default_rng(seed)
    t, y, x = axis(rng, T, rng.uniform(0, 5)), axis(rng, H, rng.uniform(-5, 5)), axis(rng, W, rng.uniform(-5, 5))
    coords = dict(traj=np.arange(N), time=('time', t, dict(units='s')), y=('y', y, dict(units='m')), x=('x', x, dict(units='m')))
    if param: coords['A'] = ('traj', rng.integers(0, 3, N).astype(float))  # ties on purpose
    ds = xr.Dataset(coords=coords, attrs=dict(domain=domain, **SCALES))
    if domain == 'exp_truth': ds.attrs['never_train'] = 1
    for k, f in enumerate(fields):
        a = (rng.normal(size=(N, T, H, W)) if values is None else
             np.broadcast_to(values(t[None, :, None, None], y[None, None, :, None], x[None, None, None, :]) * (k + 1), (N, T, H, W)))
        ds[f] = (DIMS, np.array(a, np.float32), dict(FIELD_META[f]))
    if valid_frac is not None:
        valid = rng.random((N, T, H, W)) < valid_frac
        ds['valid'] = (DIMS, valid)
        for f in fields: ds[f] = ds[f].where(ds.valid)
    if inputs:
        ds['Re'] = (('traj', 'time'), rng.normal(size=(N, T)).astype(np.float32))
        ds.attrs['inputs'] = 'Re'
    return ds

@st.composite
def specs(draw, max_n=4, max_t=5, max_hw=5, domain=None, min_n=1):
    "Keyword arguments of `build`."
    dom = domain or draw(st.sampled_from(('sim', 'exp', 'exp_truth')))
    allowed = FIELDS if dom != 'exp' else ('u', 'v')
    fields = tuple(f for f in allowed if draw(st.booleans())) or (allowed[0],)
    return dict(N=draw(st.integers(min_n, max_n)), T=draw(st.integers(1, max_t)), H=draw(st.integers(1, max_hw)),
                W=draw(st.integers(1, max_hw)), fields=fields, seed=draw(seeds), domain=dom,
                valid_frac=draw(st.sampled_from((None, 0.5, 0.9))), param=draw(st.booleans()), inputs=draw(st.booleans()))

def raises(exc, fn, *words):
    "Call `fn`; it must raise `exc` (not a subclass of anything else) whose message names each of `words`."
    with pytest.raises(exc) as e: fn()
    msg = str(e.value)
    assert all(w in msg for w in words), (msg, words)
    return msg


# --- schema.validate -------------------------------------------------------------------------------------------
@given(specs())
def test_validate_accepts_contract_datasets(spec):
    ds = build(**spec)
    assert validate(ds) is ds
    assert validate(ds, spec['domain']) is ds


CORRUPTIONS = ('coord_nan', 'coord_inf', 'coord_unsorted', 'coord_repeat', 'coord_str', 'coord_complex', 'coord_bool',
               'traj_float', 'traj_repeat', 'empty_dim', 'field_f64', 'field_int', 'field_f16', 'field_transposed',
               'field_nan_valid', 'field_no_units', 'valid_int', 'scale_missing', 'scale_neg', 'scale_nan', 'scale_str',
               'domain_missing', 'domain_bad', 'never_train_missing', 'never_train_yes', 'never_train_2',
               'measures_pressure_yes', 'param_nan', 'param_complex', 'unknown_var', 'input_missing', 'input_nan',
               'input_dims', 'input_int', 'inputs_list', 'inputs_dup', 'no_field', 'coord_missing', 'coord_2d', 'valid_dims',
               'field_extra_dim')

def corrupt(ds, kind, rng):
    "Break `ds` in one way; returns (dataset, words the error must name)."
    ds = ds.copy(deep=True)
    f = [v for v in FIELDS if v in ds.data_vars][0]
    ax = ('time', 'y', 'x')[rng.integers(3)]
    if kind in ('coord_nan', 'coord_inf'):
        c = ds[ax].values.copy(); c[rng.integers(len(c))] = np.nan if kind == 'coord_nan' else np.inf
        return ds.assign_coords({ax: c}), (repr(ax), 'NaN/inf')
    if kind in ('coord_unsorted', 'coord_repeat'):
        if ds.sizes[ax] < 2: return None, ()
        c = ds[ax].values.copy()
        if kind == 'coord_unsorted': c = c[::-1].copy()
        else: c[1] = c[0]
        return ds.assign_coords({ax: c}), (repr(ax), 'strictly increasing')
    if kind in ('coord_str', 'coord_complex', 'coord_bool'):
        c = ds[ax].values
        c = {'coord_str': c.astype(str), 'coord_complex': c.astype(complex), 'coord_bool': c > c.mean()}[kind]
        return ds.assign_coords({ax: c}), (repr(ax), 'dtype')
    if kind == 'traj_float': return ds.assign_coords(traj=ds.traj.values + 0.5), ("'traj'", 'integers')
    if kind == 'traj_repeat':
        if ds.sizes['traj'] < 2: return None, ()
        return ds.assign_coords(traj=np.zeros(ds.sizes['traj'], int)), ("'traj'", 'repeated')
    if kind == 'empty_dim':
        d = DIMS[rng.integers(4)]
        return ds.isel({d: slice(0, 0)}), (repr(d), 'length 0')
    if kind in ('field_f64', 'field_int', 'field_f16'):
        ds[f] = ds[f].fillna(0).astype({'field_f64': 'float64', 'field_int': 'int32', 'field_f16': 'float16'}[kind])
        return ds, (repr(f), 'float32')
    if kind == 'field_transposed':
        ds[f] = ds[f].transpose('traj', 'time', 'x', 'y'); return ds, (repr(f), 'dims')
    if kind == 'field_nan_valid':
        a = ds[f].values.copy(); i = tuple(rng.integers(s) for s in a.shape)
        a[i] = np.inf
        if 'valid' in ds: ds['valid'].values[i] = True
        ds[f] = (DIMS, a, ds[f].attrs)
        return ds, (repr(f), 'NaN/inf')
    if kind == 'field_no_units':
        ds[f].attrs.pop('units'); return ds, (repr(f), "'units'")
    if kind == 'valid_int':
        ds['valid'] = (DIMS, np.ones([ds.sizes[d] for d in DIMS], 'int8')); return ds, ("'valid'", 'bool')
    if kind.startswith('scale_'):
        key = 'scale_' + f
        if kind == 'scale_missing': ds.attrs.pop(key)
        else: ds.attrs[key] = {'scale_neg': -1.0, 'scale_nan': float('nan'), 'scale_str': 'big'}[kind]
        return ds, (repr(key),)
    if kind == 'domain_missing': ds.attrs.pop('domain'); return ds, ("'domain'",)
    if kind == 'domain_bad': ds.attrs['domain'] = 'lab'; return ds, ("'domain'", "'lab'")
    if kind.startswith('never_train'):
        ds.attrs['domain'] = 'exp_truth'
        if kind == 'never_train_missing': ds.attrs.pop('never_train', None)
        else: ds.attrs['never_train'] = 'yes' if kind == 'never_train_yes' else 2
        return ds, ("'never_train'",)
    if kind == 'measures_pressure_yes':
        ds.attrs['domain'] = 'exp'
        if 'p' not in ds: ds['p'] = (DIMS, np.zeros([ds.sizes[d] for d in DIMS], np.float32), dict(FIELD_META['p']))
        ds.attrs['measures_pressure'] = 'yes'
        return ds, ("'measures_pressure'",)
    if kind in ('param_nan', 'param_complex'):
        a = np.arange(ds.sizes['traj'], dtype=float)
        if kind == 'param_nan': a[rng.integers(len(a))] = np.nan
        else: a = a + 1j
        return ds.assign_coords(A=('traj', a)), ("'A'",)
    if kind == 'unknown_var': ds['w'] = ds[f]; return ds, ("'w'",)
    if kind in ('inputs_list', 'inputs_dup'):
        ds['Re'] = (('traj', 'time'), np.zeros((ds.sizes['traj'], ds.sizes['time']), np.float32))
        ds.attrs['inputs'] = ['Re'] if kind == 'inputs_list' else 'Re Re'
        return ds, ("attrs['inputs']",)
    if kind.startswith('input'):
        if kind == 'input_missing': ds = ds.drop_vars('Re', errors='ignore')
        elif kind == 'input_int': ds['Re'] = (('traj', 'time'), np.zeros((ds.sizes['traj'], ds.sizes['time']), int))
        elif kind == 'input_nan': ds['Re'] = (('traj', 'time'), np.full((ds.sizes['traj'], ds.sizes['time']), np.nan, np.float32))
        else: ds['Re'] = (('traj',), np.zeros(ds.sizes['traj'], np.float32))
        ds.attrs['inputs'] = 'Re'
        return ds, ("'Re'",)
    if kind == 'no_field': return ds.drop_vars([v for v in FIELDS if v in ds]), ('no physical field',)
    if kind == 'coord_missing': return ds.drop_vars(ax), (repr(ax), 'missing')
    if kind == 'coord_2d': return ds.assign_coords(m2=(('y', 'x'), np.zeros((ds.sizes['y'], ds.sizes['x'])))), ("'m2'", 'dims')
    if kind == 'valid_dims':
        if 'valid' not in ds: return None, ()
        ds['valid'] = ds.valid.transpose('traj', 'time', 'x', 'y'); return ds, ("'valid'", 'dims')
    if kind == 'field_extra_dim': ds[f] = ds[f].expand_dims(z=2, axis=4); return ds, (repr(f), 'dims')
    raise AssertionError(kind)

@given(specs(), st.sampled_from(CORRUPTIONS), seeds)
@example(dict(N=2, T=2, H=2, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False),
         'never_train_yes', 0)  # was a bare ValueError "invalid literal for int()"
@example(dict(N=2, T=2, H=2, W=2, fields=('u', 'v'), seed=0, domain='exp', valid_frac=None, param=False, inputs=False),
         'measures_pressure_yes', 0)  # was a bare ValueError "invalid literal for int()"
@example(dict(N=2, T=2, H=2, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False),
         'coord_complex', 0)  # complex coordinates were accepted
@example(dict(N=3, T=2, H=2, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=True, inputs=False),
         'param_nan', 0)  # a NaN parameter was accepted and reached the models' conditioning as NaN
@example(dict(N=2, T=2, H=2, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False),
         'inputs_dup', 0)  # a repeated input name was accepted (conditioning on it twice)
def test_validate_rejects_broken_datasets(spec, kind, seed):
    rng = np.random.default_rng(seed)
    bad, words = corrupt(build(**spec), kind, rng)
    assume(bad is not None)
    raises(DataContractError, lambda: validate(bad), *words)


@given(specs(), seeds)
def test_validate_allows_nan_only_where_invalid(spec, seed):
    "NaN/inf is fine where `valid` is False, and only there."
    ds = build(**{**spec, 'valid_frac': 0.5})
    f = [v for v in FIELDS if v in ds][0]
    valid = ds.valid.values
    a = ds[f].values.copy(); a[~valid] = np.random.default_rng(seed).choice([np.nan, np.inf, -np.inf], size=int((~valid).sum()))
    ds[f] = (DIMS, a, ds[f].attrs)
    assert validate(ds) is ds


# --- align.regrid / resample_time ------------------------------------------------------------------------------
def targets(src, us):
    "Target coordinates at fractions `us` of the source extent (fractions just outside [0, 1] snap onto the ends)."
    us = np.asarray(us, float)
    us = np.where((us > -1e-3) & (us < 0), 0.0, np.where((us > 1) & (us < 1 + 1e-3), 1.0, us))
    return np.unique(src[0] + us * (src[-1] - src[0]))

def inside(src, tgt):
    return (tgt >= src[0] - 1e-9 * max(1, abs(src[0]))) & (tgt <= src[-1] + 1e-9 * max(1, abs(src[-1])))

fracs_st = st.lists(floats(-0.5, 1.5, allow_nan=False), min_size=1, max_size=6)

@given(specs(domain='sim', max_hw=6), fracs_st, fracs_st, floats(-3, 3), floats(-3, 3), floats(-3, 3))
def test_regrid_linear_field_is_exact(spec, uy, ux, a, b, c):
    "A linear field a + b y + c x, fully valid, is reproduced exactly inside the source extent and is invalid outside."
    ds = build(**{**spec, 'valid_frac': None}, values=lambda t, y, x: a + b * y + c * x)
    ty, tx = targets(ds.y.values, uy), targets(ds.x.values, ux)
    out = regrid(ds, ty, tx)
    validate(out)
    want = inside(ds.y.values, ty)[:, None] & inside(ds.x.values, tx)[None, :]
    assert (out.valid.values == want[None, None]).all()
    for k, f in enumerate(spec['fields']):
        v = out[f].values
        assert (np.isfinite(v) == out.valid.values).all()
        exact = (a + b * ty[:, None] + c * tx[None, :]) * (k + 1)
        tol = 1e-5 * (1 + np.abs(exact).max() + (abs(b) + abs(c)) * 20 * (k + 1))
        assert np.allclose(v[:, :, want], np.broadcast_to(exact, v.shape)[:, :, want], rtol=0, atol=tol)


@given(specs(domain='exp', max_hw=6), fracs_st, fracs_st, st.sampled_from((0.25, 0.5, 1.0)))
def test_regrid_with_holes_stays_in_range(spec, uy, ux, min_weight):
    "With invalid points: NaN exactly where invalid, values inside the range of the valid source values, output valid."
    ds = build(**{**spec, 'valid_frac': 0.6})
    ty, tx = targets(ds.y.values, uy), targets(ds.x.values, ux)
    out = regrid(ds, ty, tx, min_weight)
    validate(out)
    for f in spec['fields']:
        v, src = out[f].values, ds[f].values
        assert (np.isfinite(v) == out.valid.values).all()
        if np.isfinite(src).any() and out.valid.values.any():
            lo, hi = np.nanmin(src), np.nanmax(src)
            assert (v[out.valid.values] >= lo - 1e-5 * (1 + abs(lo))).all() and (v[out.valid.values] <= hi + 1e-5 * (1 + abs(hi))).all()


BAD_TARGETS = ('decreasing', 'nan', 'inf', 'empty', '2d', 'repeat', 'text')

@given(specs(domain='sim'), st.sampled_from(BAD_TARGETS), st.sampled_from(('y', 'x')))
@example(dict(N=1, T=1, H=3, W=3, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False), 'decreasing', 'y')
@example(dict(N=1, T=1, H=3, W=3, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False), 'empty', 'x')
def test_regrid_rejects_bad_targets(spec, kind, name):
    "Regridding onto a grid that is not a contract grid was silently accepted (a decreasing/empty/NaN axis)."
    ds = build(**spec)
    good = dict(y=ds.y.values, x=ds.x.values)
    g = np.linspace(-1, 1, 3)
    good[name] = dict(decreasing=g[::-1], nan=np.r_[g, np.nan], inf=np.r_[g, np.inf], empty=np.zeros(0),
                      repeat=np.r_[g, g[-1]], text=np.array(['a', 'b']), **{'2d': g[:, None]})[kind]
    raises(ValueError, lambda: regrid(ds, good['y'], good['x']), 'regrid', f'`{name}`')


@given(specs(domain='sim'), st.sampled_from((0, -0.5, 1.5, float('nan'), float('inf'), None, 'half', True)))
@example(dict(N=1, T=1, H=2, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False), 0)
def test_regrid_rejects_bad_min_weight(spec, mw):
    "min_weight=0 used to mark every target point valid, outside the source too, with NaN values."
    ds = build(**spec)
    raises(ValueError, lambda: regrid(ds, ds.y.values + 0.01, ds.x.values, mw), 'min_weight')


@given(specs(domain='sim'), st.sampled_from(('y', 'x', 'time')), st.sampled_from(('reversed', 'nan')))
def test_interpolation_rejects_bad_source_axes(spec, ax, kind):
    "A source with an unsorted or NaN axis gave silently wrong interpolation weights."
    ds = build(**spec)
    assume(ds.sizes[ax] >= 2)
    c = ds[ax].values[::-1].copy() if kind == 'reversed' else np.r_[ds[ax].values[:-1], np.nan]
    bad = ds.assign_coords({ax: c})
    if ax == 'time': fn = lambda: resample_time(bad, times=np.sort(ds.time.values)[:1])
    else: fn = lambda: regrid(bad, ds.y.values[:1] + 1e-3, ds.x.values[:1] + 1e-3)
    raises(DataContractError, fn, repr(ax))


@given(specs(domain='sim', max_t=6), floats(0.05, 3.0), floats(-3, 3), floats(-3, 3))
def test_resample_time_linear_in_time_is_exact(spec, dt, a, d):
    ds = build(**{**spec, 'valid_frac': None, 'inputs': False}, values=lambda t, y, x: a + d * t + 0 * y * x)
    t = ds.time.values
    out = resample_time(ds, dt)
    validate(out)
    nt = int(math.floor((t[-1] - t[0]) / dt + 1e-9)) + 1
    assert out.sizes['time'] == nt and np.allclose(out.time.values, t[0] + dt * np.arange(nt))
    assert out.valid.values.all()
    for k, f in enumerate(spec['fields']):
        exact = (a + d * out.time.values) * (k + 1)
        assert np.allclose(out[f].values, exact[None, :, None, None], rtol=0, atol=1e-5 * (1 + np.abs(exact).max() + 20 * abs(d)))


@given(specs(domain='sim'), st.sampled_from((0, -1, float('nan'), float('inf'), None, 'x')))
@example(dict(N=1, T=3, H=1, W=1, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False), float('inf'))
def test_resample_time_rejects_bad_dt(spec, dt):
    "dt=inf gave a clock of one NaN time."
    ds = build(**spec)
    raises(ValueError, lambda: resample_time(ds, dt), 'dt')


# --- align.Normalizer ------------------------------------------------------------------------------------------
stats_st = st.tuples(floats(-1e3, 1e3), floats(1e-3, 1e3))

@given(st.lists(stats_st, min_size=1, max_size=3), st.integers(1, 3), st.sampled_from(('np32', 'np64', 'torch32', 'torch64')),
       st.integers(0, 2), seeds)
def test_normalizer_round_trip(stats, lead, kind, ax_pos, seed):
    "encode = (x - mean) / std per channel, decode inverts it, on any channel axis."
    names = FIELDS[:len(stats)]
    norm = Normalizer(dict(zip(names, stats)))
    pos = min(ax_pos, lead)  # the channel axis: among the leading axes, or just before (H, W) (axis -3)
    shape = [2] * lead + [3, 3]
    shape.insert(pos, len(names))
    axis = pos - len(shape)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * 10
    m = np.array([s[0] for s in stats]); s = np.array([s[1] for s in stats])
    bshape = [1] * len(shape); bshape[axis] = len(names)
    want = (x - m.reshape(bshape)) / s.reshape(bshape)
    xx = {'np32': x.astype(np.float32), 'np64': x, 'torch32': torch.tensor(x, dtype=torch.float32), 'torch64': torch.tensor(x)}[kind]
    enc = norm.encode(xx, names, axis=axis)
    dec = norm.decode(enc, names, axis=axis)
    tol = 1e-4 if '32' in kind else 1e-9
    assert type(enc) is type(xx) and enc.dtype == xx.dtype
    assert np.allclose(np.asarray(enc, float), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))
    assert np.allclose(np.asarray(dec, float), x, rtol=tol, atol=tol * (1 + np.abs(x).max() + np.abs(m).max()))
    assert Normalizer.from_state_dict(norm.state_dict()) == norm


@given(specs(domain='sim'))
def test_normalizer_fit_standardises_valid_values(spec):
    ds = build(**spec)
    norm = Normalizer.fit(ds)
    enc = norm.encode(ds)
    for f in spec['fields']:
        m, s = norm.stats[f]
        assert math.isfinite(m) and math.isfinite(s) and s > 0
        v = enc[f].values[np.isfinite(enc[f].values)].astype(np.float64)
        if v.size > 1 and np.std(ds[f].values[np.isfinite(ds[f].values)]) > 1e-6:
            assert abs(v.mean()) < 1e-3 and abs(v.std() - 1) < 1e-3
    dec = norm.decode(enc)
    for f in spec['fields']:
        assert np.allclose(dec[f].values, ds[f].values, atol=1e-4, equal_nan=True)


BAD_STATS = [(0.0, 0.0), (0.0, -1.0), (0.0, float('nan')), (float('inf'), 1.0), (float('nan'), 1.0), ('a', 1.0), (1.0,), None]

@given(st.sampled_from(BAD_STATS))
@example((0.0, 0.0))  # std 0 encoded to inf silently
@example((0.0, float('nan')))  # NaN std encoded to NaN silently
def test_normalizer_rejects_bad_statistics(ms):
    raises(ValueError, lambda: Normalizer({'u': ms}), 'Normalizer', "'u'")


BAD_NORM_INPUTS = ('list', '1d', 'axis', 'channels', 'unknown_name', 'ds_missing_field')

@given(st.sampled_from(BAD_NORM_INPUTS))
@example('1d')  # IndexError: tuple index out of range
@example('list')  # AttributeError: 'list' object has no attribute 'shape'
@example('ds_missing_field')  # KeyError from xarray
def test_normalizer_rejects_bad_inputs(kind):
    norm = Normalizer({'u': (1.0, 2.0), 'v': (0.0, 1.0), 'p': (0.0, 3.0)})
    if kind == 'list': raises(TypeError, lambda: norm.encode([[1.0]]), 'Normalizer')
    elif kind == '1d': raises(ValueError, lambda: norm.encode(np.zeros(3)), 'Normalizer', 'axis')
    elif kind == 'axis': raises(ValueError, lambda: norm.encode(np.zeros((3, 4, 5)), axis=5), 'Normalizer', 'axis')
    elif kind == 'channels': raises(ValueError, lambda: norm.encode(np.zeros((2, 3, 3)), ('u', 'v', 'p')), 'Normalizer', 'channels')
    elif kind == 'unknown_name':
        with pytest.raises(KeyError, match='Normalizer'): norm.encode(np.zeros((1, 3, 3)), ('w',))
    else: raises(ValueError, lambda: norm.encode(build(fields=('u',)), ('u', 'p')), 'Normalizer', "'p'")


# --- align.split_trajs -----------------------------------------------------------------------------------------
fracs3 = st.tuples(st.integers(0, 10), st.integers(0, 10), st.integers(0, 10)).filter(lambda t: sum(t) > 0).map(
    lambda t: tuple(v / sum(t) for v in t))

@given(st.integers(1, 25), fracs3, st.integers(-5, 50), st.booleans(), seeds)
def test_split_trajs_disjoint_cover_and_range_ends(n, fracs, seed, param, dseed):
    "Disjoint splits covering every trajectory, sized as documented, with both parameter-range ends in train."
    ds = build(N=n, T=1, H=1, W=1, fields=('u',), seed=dseed, param=param)
    n_val = max(1, round(fracs[1] * n)) if fracs[1] > 0 else 0
    n_test = max(1, round(fracs[2] * n)) if fracs[2] > 0 else 0
    need = n_val + n_test + (2 if n_val + n_test else 1)
    if n < need:
        raises(ValueError, lambda: split_trajs(ds, fracs, seed), 'split_trajs', 'trajectories'); return
    sp = split_trajs(ds, fracs, seed)
    ids = {k: v.traj.values.tolist() for k, v in sp.items()}
    assert sorted(ids['train'] + ids['val'] + ids['test']) == list(range(n))
    assert (len(ids['val']), len(ids['test'])) == (n_val, n_test)
    key = ds.A.values if param else ds.traj.values
    order = np.lexsort((ds.traj.values, key))
    assert order[0] in ids['train'] and order[-1] in ids['train']
    assert all(v.attrs['split'] == k for k, v in sp.items())
    assert {k: v.traj.values.tolist() for k, v in split_trajs(ds, fracs, seed).items()} == ids  # deterministic


@given(st.sampled_from([(0.5, 0.5), (0.5, 0.5, 0.5), (-0.2, 0.6, 0.6), (float('nan'), 0.5, 0.5), None, ('a', 'b', 'c'), 0.5,
                        (True, False, False)]))
@example(None)  # TypeError: 'NoneType' object is not iterable
@example(('a', 'b', 'c'))  # TypeError: '<' not supported between 'str' and 'int'
def test_split_trajs_rejects_bad_fracs(fracs):
    raises(ValueError, lambda: split_trajs(build(N=8, T=1, H=1, W=1), fracs), 'split_trajs', 'fracs')


# --- domains.WindowDataset ---------------------------------------------------------------------------------------
@given(specs(domain='sim', max_t=7), st.integers(1, 3), st.integers(0, 3), st.integers(1, 3), st.booleans())
def test_windows_count_and_content(spec, n_in, n_out, stride, normalise):
    ds = build(**spec)
    norm = Normalizer.fit(ds) if normalise else None
    wd = WindowDataset(ds, n_in, n_out, stride, normalizer=norm)
    N, T, L = spec['N'], spec['T'], n_in + n_out
    assert len(wd) == N * len(range(0, max(T - L + 1, 0), stride))
    assert len(wd) == N * (math.ceil((T - L + 1) / stride) if T >= L else 0)
    n_inputs = 1 if spec['inputs'] else 0
    n_params = 1 if spec['param'] else 0
    assert wd.n_cond == n_params + n_inputs * L
    valid = np.ones((N, T, spec['H'], spec['W']), bool) if 'valid' not in ds else ds.valid.values
    for i in range(len(wd)):
        it, info = wd[i], wd.window_info(i)
        n = int(np.nonzero(ds.traj.values == info['traj'])[0][0])
        t0 = int(np.nonzero(ds.time.values == info['t_in'][0])[0][0])
        assert it['x'].shape == (n_in, 3, spec['H'], spec['W']) and it['y'].shape == (n_out, 3, spec['H'], spec['W'])
        assert it['cond'].shape == (wd.n_cond,) and torch.isfinite(it['cond']).all()
        assert it['field_mask'].tolist() == [f in spec['fields'] for f in FIELDS]
        assert torch.isfinite(it['x']).all() and torch.isfinite(it['y']).all()
        assert (it['valid'].numpy() == valid[n, t0 + n_in:t0 + L]).all()
        for c, f in enumerate(FIELDS):
            frames = np.concatenate([it['x'][:, c].numpy(), it['y'][:, c].numpy()])
            if f not in spec['fields']: assert (frames == 0).all(); continue
            raw = ds[f].values[n, t0:t0 + L]
            if norm is not None: frames = norm.decode(frames[:, None], (f,))[:, 0]
            v = valid[n, t0:t0 + L]
            assert np.allclose(frames[v], raw[v], atol=1e-4 * (1 + np.abs(raw[v]).max(initial=0)))
            if norm is None: assert (frames[~v] == 0).all()


@given(st.sampled_from([dict(n_in=0), dict(n_in=1.5), dict(n_out=-1), dict(stride=0), dict(fields=()), dict(fields=('u', 'u')),
                        dict(fields=('w',)), dict(cond=('Q',))]))
@example(dict(fields=()))  # an empty channel list gave windows with no channel
@example(dict(fields=('u', 'u')))  # a repeated channel was accepted
def test_windows_reject_bad_arguments(kw):
    ds = build(N=2, T=4, H=2, W=2, fields=('u', 'v'))
    raises(ValueError, lambda: WindowDataset(ds, **kw), 'WindowDataset', f'`{list(kw)[0]}`')


# --- metrics ---------------------------------------------------------------------------------------------------
def ref_metrics(p, t, m):
    "numpy references of rmse, rel_l2 and fRMSE (RealPDEBench's definitions, masked)."
    m = np.broadcast_to(m if m.ndim == 5 else m[..., None], p.shape)
    d = np.where(m, p - t, 0.0); tt = np.where(m, t, 0.0)
    r = math.sqrt((d ** 2).sum() / m.sum())
    b = p.shape[0]
    keep = m.reshape(b, -1).any(1)
    rel = float(np.mean(np.sqrt((d ** 2).reshape(b, -1).sum(1))[keep] / np.sqrt((tt ** 2).reshape(b, -1).sum(1))[keep]))
    _, T, H, W, C = p.shape
    n = min(T // 2, H // 2, W // 2)
    if n == 0: return r, rel, None
    F = np.abs(np.fft.fftn(d, axes=(1, 2, 3))[:, :T // 2, :H // 2, :W // 2]) ** 2
    i, j, k = np.meshgrid(np.arange(T // 2), np.arange(H // 2), np.arange(W // 2), indexing='ij')
    rad = np.floor(np.sqrt(i ** 2 + j ** 2 + k ** 2)).astype(int)
    E = np.stack([F[:, rad == q].sum(1).mean(0) for q in range(n)])  # [n, C]
    E = np.sqrt(E) / (T * H * W)
    lo, hi = int(np.round(n / 3)), int(np.round(2 * n / 3))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        bands = dict(low=E[:lo].mean(), mid=E[lo:hi].mean(), high=E[hi:].mean(), all=E.mean())
    return r, rel, bands

@st.composite
def metric_inputs(draw):
    shape = tuple(draw(st.integers(1, n)) for n in (3, 5, 5, 5, 3))
    rng = np.random.default_rng(draw(seeds))
    scale = draw(st.sampled_from((1e-3, 1.0, 1e3)))
    t = rng.normal(size=shape) * scale + draw(floats(-2, 2)) * scale
    p = t + rng.normal(size=shape) * scale * draw(st.sampled_from((0.0, 0.1, 1.0)))
    mkind = draw(st.sampled_from(('none', '4d', '5d')))
    m = (np.ones(shape, bool) if mkind == 'none' else rng.random(shape[:4] if mkind == '4d' else shape) < 0.7)
    assume(m.any())
    lib = draw(st.sampled_from(('numpy', 'torch32', 'torch64')))
    return p, t, m, mkind, lib

def as_lib(a, lib):
    return a if lib == 'numpy' else torch.tensor(a, dtype=torch.float32 if lib == 'torch32' else torch.float64)

@given(metric_inputs())
def test_metrics_match_numpy_reference(inp):
    p, t, m, mkind, lib = inp
    if lib == 'torch32': p, t = p.astype(np.float32).astype(np.float64), t.astype(np.float32).astype(np.float64)
    mask = None if mkind == 'none' else m
    m5 = np.broadcast_to(m if m.ndim == 5 else m[..., None], p.shape)
    assume(all(np.any(t[i][m5[i]] != 0) for i in range(p.shape[0]) if m5[i].any()))  # zero-norm targets: documented inf/nan
    r, rel, bands = ref_metrics(p, t, m)
    P, T = as_lib(p, lib), as_lib(t, lib)
    assert math.isclose(rmse(P, T, mask), r, rel_tol=1e-9, abs_tol=1e-300)
    assert math.isclose(rel_l2(P, T, mask), rel, rel_tol=1e-9, abs_tol=1e-300)
    if bands is None:
        raises(MetricInputError, lambda: frmse(P, T, mask), 'fRMSE')
    else:
        got = frmse(P, T, mask)
        for k, v in bands.items():
            assert (math.isnan(v) and math.isnan(got[k])) or math.isclose(got[k], v, rel_tol=1e-7, abs_tol=1e-12 * (1 + abs(v)))
    # every channel of score_fields is the metric of that channel alone
    names = FIELDS[:p.shape[-1]]
    sc = score_fields(P, T, names, mask=mask)
    for c, f in enumerate(names):
        mc = np.array(m5[..., c:c + 1])
        if not mc.any(): assert math.isnan(sc[f]['rmse']); continue
        assert math.isclose(sc[f]['rmse'], rmse(p[..., c:c + 1], t[..., c:c + 1], mc), rel_tol=1e-9, abs_tol=1e-300)
    assert math.isclose(sc['all']['rmse'], r, rel_tol=1e-9, abs_tol=1e-300)


@given(metric_inputs(), st.integers(1, 3))
def test_metrics_batch_size_is_mean_over_chunks(inp, bs):
    p, t, m, mkind, lib = inp
    mask = None if mkind == 'none' else m
    chunks = [slice(i, i + bs) for i in range(0, p.shape[0], bs)]
    m5 = np.broadcast_to(m if m.ndim == 5 else m[..., None], p.shape)
    assume(all(m5[s].any() for s in chunks))
    want = np.mean([ref_metrics(p[s], t[s], m[s])[0] for s in chunks])
    assert math.isclose(rmse(p, t, mask, batch_size=bs), want, rel_tol=1e-9, abs_tol=1e-300)


@given(metric_inputs(), seeds, st.sampled_from((np.nan, np.inf, -np.inf)))
@example((np.ones((1, 2, 2, 2, 1)), np.ones((1, 2, 2, 2, 1)), np.ones((1, 2, 2, 2, 1), bool), 'none', 'numpy'), 0, np.nan)
def test_metrics_nonfinite_values(inp, seed, bad):
    """Non-finite values at invalid points are never read; in the target at a valid point they raise (they used to give
    a silent NaN); in the prediction at a valid point the metric is not a finite number."""
    p, t, m, mkind, lib = inp
    rng = np.random.default_rng(seed)
    m5 = np.broadcast_to(m if m.ndim == 5 else m[..., None], p.shape)
    assume(all(np.any(t[i][m5[i]] != 0) for i in range(p.shape[0]) if m5[i].any()))
    mask = None if mkind == 'none' else m
    clean = rmse(p, t, mask)
    if (~m5).any():  # garbage where invalid changes nothing
        p2, t2 = p.copy(), t.copy(); p2[~m5] = bad; t2[~m5] = bad
        assert rmse(p2, t2, m) == pytest.approx(clean, rel=1e-12)
    idx = tuple(np.argwhere(m5)[rng.integers(int(m5.sum()))])
    t3 = t.copy(); t3[idx] = bad
    for fn in (rmse, rel_l2, lambda a, b, mm: score_fields(a, b, FIELDS[:p.shape[-1]], mask=mm)):
        raises(MetricInputError, lambda: fn(p, t3, mask), '`target`', 'NaN/inf')
    p3 = p.copy(); p3[idx] = bad
    assert not math.isfinite(rmse(p3, t, mask)) and not math.isfinite(rel_l2(p3, t, mask))


BAD_METRIC_INPUTS = ('rank4', 'shape', 'empty', 'bool', 'complex', 'list', 'mask_float', 'mask_shape', 'mask_none_valid',
                     'batch0', 'fields_none', 'fields_count', 'fields_all', 'fields_repeat')

@given(st.sampled_from(BAD_METRIC_INPUTS))
@example('fields_none')  # TypeError: object of type 'NoneType' has no len()
def test_metrics_reject_bad_inputs(kind):
    x = np.random.default_rng(0).normal(size=(2, 2, 3, 3, 2))
    call = {
        'rank4': lambda: rmse(x[0], x[0]), 'shape': lambda: rmse(x, x[:, :1]), 'empty': lambda: rmse(x[:0], x[:0]),
        'bool': lambda: rmse(x > 0, x > 0), 'complex': lambda: rmse(x + 1j, x + 1j),
        'mask_float': lambda: rmse(x, x, np.ones(x.shape)), 'mask_shape': lambda: rmse(x, x, np.ones((3,), bool)),
        'mask_none_valid': lambda: rel_l2(x, x + 1, np.zeros(x.shape, bool)), 'batch0': lambda: rmse(x, x, batch_size=0),
        'fields_none': lambda: score_fields(x, x, None), 'fields_count': lambda: score_fields(x, x, ('u',)),
        'fields_all': lambda: score_fields(x, x, ('u', 'all')), 'fields_repeat': lambda: score_fields(x, x, ('u', 'u')),
    }.get(kind)
    if kind == 'list': raises(TypeError, lambda: rmse(x.tolist(), x), '`pred`')
    else: raises(MetricInputError, call)


# --- models: construction and input checks ---------------------------------------------------------------------
TINY = dict(fan=dict(dim=8, depth=1, heads=2, mlp=8, patch=2), fno=dict(width=4, modes=2, layers=1), unet=dict(base=8, levels=1))

@st.composite
def model_setups(draw):
    arch = draw(st.sampled_from(tuple(TINY)))
    fields = tuple(f for f in FIELDS if draw(st.booleans())) or ('u',)
    mult = 1 if arch == 'fno' else 2
    H, W = (mult * draw(st.integers(1, 3)) for _ in range(2))
    return dict(arch=arch, fields=fields, n_in=draw(st.integers(1, 2)), n_out=draw(st.integers(1, 2)), grid=(H, W),
                n_cond=draw(st.integers(0, 2)), B=draw(st.integers(1, 3)), seed=draw(seeds))

def model_and_inputs(s):
    torch.manual_seed(s['seed'] % 2**31)
    m = make_model(s['arch'], fields=s['fields'], n_in=s['n_in'], n_out=s['n_out'], grid=s['grid'], n_cond=s['n_cond'],
                   **TINY[s['arch']]).eval()
    g = torch.Generator().manual_seed(s['seed'] % 2**31)
    B, C = s['B'], len(s['fields'])
    x = torch.randn(B, s['n_in'], C, *s['grid'], generator=g)
    fm = torch.rand(B, C, generator=g) < 0.6
    fm[torch.arange(B), torch.randint(C, (B,), generator=g)] = True
    cond = torch.randn(B, s['n_cond'], generator=g) if s['n_cond'] else None
    return m, x, fm, cond

@given(model_setups())
def test_model_output_contract(s):
    "Right inputs: output [B, n_out, C, H, W], finite; values in missing-field slots (NaN included) do not matter."
    m, x, fm, cond = model_and_inputs(s)
    with torch.no_grad():
        y = m(x, fm, cond)
        x2 = torch.where(fm[:, None, :, None, None], x, torch.tensor(float('nan')))
        y2 = m(x2, fm, cond)
    assert y.shape == (s['B'], s['n_out'], len(s['fields']), *s['grid']) and y.dtype == torch.float32
    assert torch.isfinite(y).all() and torch.allclose(y, y2, atol=1e-5)


BAD_MODEL_INPUTS = ('x_numpy', 'x_rank4', 'x_shape', 'x_int', 'x_f64', 'x_f16', 'x_complex', 'batch0', 'mask_numpy',
                    'mask_float', 'mask_shape', 'mask_empty_row', 'cond_missing', 'cond_shape', 'cond_numpy', 'cond_int',
                    'cond_bool', 'cond_nan', 'cond_unexpected')

def break_inputs(kind, m, x, fm, cond):
    B, C = fm.shape
    K = m.n_cond
    if kind == 'x_numpy': return x.numpy(), fm, cond
    if kind == 'x_rank4': return x[:, 0], fm, cond
    if kind == 'x_shape': return torch.randn(B, m.n_in + 1, C, *m.grid), fm, cond
    if kind == 'x_int': return x.long(), fm, cond
    if kind in ('x_f64', 'x_f16'): return x.to(torch.float64 if kind == 'x_f64' else torch.float16), fm, cond
    if kind == 'x_complex': return x.to(torch.complex64), fm, cond
    if kind == 'batch0': return x[:0], fm[:0], None if cond is None else cond[:0]
    if kind == 'mask_numpy': return x, fm.numpy(), cond
    if kind == 'mask_float': return x, fm.float(), cond
    if kind == 'mask_shape': return x, fm[:, :1] if C > 1 else fm[:0], cond
    if kind == 'mask_empty_row': fm = fm.clone(); fm[-1] = False; return x, fm, cond
    if kind == 'cond_missing': return (x, fm, None) if K else None
    if kind == 'cond_shape': return x, fm, torch.randn(B, K + 1)
    if kind == 'cond_numpy': return (x, fm, cond.numpy()) if K else (x, fm, np.zeros((B, 1)))
    if kind == 'cond_int': return (x, fm, torch.zeros(B, K, dtype=torch.long)) if K else None
    if kind == 'cond_bool': return (x, fm, torch.zeros(B, K, dtype=torch.bool)) if K else None
    if kind == 'cond_nan': c = cond.clone() if K else None; return (x, fm, c.fill_(float('nan'))) if K else None
    if kind == 'cond_unexpected': return (x, fm, torch.randn(B, 2)) if not K else None
    raise AssertionError(kind)

@given(model_setups(), st.sampled_from(BAD_MODEL_INPUTS))
@example(dict(arch='fan', fields=('u', 'v'), n_in=1, n_out=1, grid=(2, 2), n_cond=0, B=1, seed=0), 'x_f64')  # torch RuntimeError
@example(dict(arch='fno', fields=('u',), n_in=1, n_out=1, grid=(2, 2), n_cond=0, B=1, seed=0), 'batch0')  # MKL FFT error
@example(dict(arch='unet', fields=('u',), n_in=1, n_out=1, grid=(2, 2), n_cond=1, B=1, seed=0), 'cond_numpy')  # AttributeError
@example(dict(arch='fno', fields=('u',), n_in=1, n_out=1, grid=(2, 2), n_cond=1, B=1, seed=0), 'cond_nan')  # NaN output
@example(dict(arch='fan', fields=('u',), n_in=1, n_out=1, grid=(2, 2), n_cond=2, B=1, seed=0), 'cond_bool')  # accepted
def test_model_rejects_bad_inputs(s, kind):
    m, x, fm, cond = model_and_inputs(s)
    bad = break_inputs(kind, m, x, fm, cond)
    assume(bad is not None)
    with torch.no_grad():
        raises(ModelInputError, lambda: m(*bad), kind.split('_')[0] if kind != 'batch0' else 'x')


HYPER = {'fan': ('dim', 'depth', 'heads', 'mlp', 'patch', 'xheads'), 'fno': ('width', 'modes', 'layers'), 'unet': ('base', 'levels')}
hyper_values = st.sampled_from((-1, 0, 1, 2, 3, 4, 8, 16, 2.0, True, '4'))
archs_and_overrides = st.sampled_from(tuple(HYPER)).flatmap(
    lambda a: st.tuples(st.just(a), st.fixed_dictionaries({}, optional={k: hyper_values for k in HYPER[a]})))

@given(archs_and_overrides, st.sampled_from(((4, 4), (2, 6), (1, 3), (4.5, 4), (True, 4), (0, 4), (4,), 'ab')),
       st.sampled_from((0, 1, True, -1)), st.sampled_from((1, 2, 0, 1.0)))
@example(('fno', dict(modes=0)), (4, 4), 0, 1)  # RuntimeError from einsum
@example(('fan', dict(heads=0)), (4, 4), 0, 1)  # ZeroDivisionError
@example(('unet', dict(base=4)), (4, 4), 0, 1)  # ValueError from GroupNorm
@example(('unet', {}), (4.5, 4), 0, 1)  # a fractional grid size was truncated silently
@example(('fno', {}), (1, 3), 0, 1)  # H = 1: no Fourier mode along H (einsum error)
def test_make_model_hyperparameters(arch_kw, grid, n_cond, n_in):
    """Any hyperparameters: a working model or one ModelInputError naming the argument (was ZeroDivisionError,
    RuntimeError and GroupNorm's ValueError from inside torch)."""
    arch, over = arch_kw
    kw = {**TINY[arch], **over}
    try:
        m = make_model(arch, fields=('u', 'v'), n_in=n_in, grid=grid, n_cond=n_cond, **kw).eval()
    except ModelInputError as e:
        assert any(str(e).startswith(k + ':') for k in (*HYPER[arch], 'grid', 'n_cond', 'n_in', 'dim')), str(e)
        return
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in (n_cond, n_in))
    H, W = m.grid
    x, fm = torch.randn(2, n_in, 2, H, W), torch.ones(2, 2, dtype=torch.bool)
    with torch.no_grad(): y = m(x, fm, torch.randn(2, n_cond) if n_cond else None)
    assert y.shape == (2, 1, 2, H, W) and torch.isfinite(y).all()


# --- evaluation: reference predictors and rollouts --------------------------------------------------------------
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 7), st.integers(1, 3), seeds)
def test_rollout_of_persistence_repeats_the_last_frame(n_in, n_out, horizon, C, seed):
    g = torch.Generator().manual_seed(seed % 2**31)
    x = torch.randn(2, n_in, C, 3, 4, generator=g)
    fm = torch.rand(2, C, generator=g) < 0.7; fm[:, 0] = True
    out = rollout(Persistence(n_out), x, fm, horizon, n_out=n_out)
    want = (x[:, -1:] * fm[:, None, :, None, None]).expand(-1, horizon, -1, -1, -1)
    assert out.shape == (2, horizon, C, 3, 4) and torch.equal(out, want)
    mf = MeanField(x[0, 0], n_out=n_out)
    assert torch.equal(rollout(mf, x, fm, horizon, n_out=n_out), x[0, 0].expand(2, horizon, C, 3, 4))


@given(st.sampled_from((0, -1, 2.5, None, True)))
@example(0)  # ValueError from torch.cat(): expected a non-empty list of Tensors
def test_rollout_and_mean_field_reject_bad_lengths(n):
    x, fm = torch.zeros(1, 1, 1, 2, 2), torch.ones(1, 1, dtype=torch.bool)
    raises(ValueError, lambda: rollout(Persistence(1), x, fm, n), 'horizon')
    raises(ValueError, lambda: MeanField(torch.zeros(1, 2, 2), n_out=n), 'n_out')  # n_out=-1 gave one frame silently


# --- domains.make_domain_data: the whole pipeline ----------------------------------------------------------------
@given(specs(domain='sim', max_n=6, max_t=5, min_n=4), specs(domain='exp', max_n=6, max_t=5, min_n=4), st.integers(1, 2),
       st.integers(1, 2), st.sampled_from(('sim', 'exp', (3, 4))), st.sampled_from(('same', 'same', 'other', 'uneven')),
       floats(-0.3, 1.3))
@example(dict(N=4, T=3, H=2, W=2, fields=('u', 'v', 'p'), seed=0, domain='sim', valid_frac=None, param=False, inputs=False),
         dict(N=4, T=3, H=2, W=2, fields=('u', 'v'), seed=0, domain='exp', valid_frac=None, param=False, inputs=False),
         1, 1, 'sim', 'uneven', None)  # both clocks uneven and identical: "frame intervals differ (sim nan s, exp nan s)"
@example(dict(N=4, T=2, H=1, W=2, fields=('u',), seed=0, domain='sim', valid_frac=None, param=False, inputs=False),
         dict(N=4, T=2, H=2, W=2, fields=('u',), seed=0, domain='exp', valid_frac=None, param=False, inputs=False),
         1, 1, (3, 4), 'same', None)  # a (ny, nx) grid over a one-point sim axis repeated one coordinate ny times
def test_make_domain_data_gives_finite_windows_or_a_clear_error(s_spec, e_spec, n_in, n_out, grid, clock, shift):
    "Random sim/exp pairs: finite, consistently shaped windows in every split, or one clear error."
    sim = build(**s_spec)
    exp = build(**{**e_spec, 'T': s_spec['T'], 'param': s_spec['param'], 'inputs': s_spec['inputs']})
    if shift is not None:  # exp grid inside/around the sim extent, shifted by a share of it (None: independent grids)
        ext = {a: (sim[a].values[0], sim[a].values[-1]) for a in ('y', 'x')}
        exp = exp.assign_coords({a: np.linspace(lo, hi + 1e-3, exp.sizes[a]) + shift * (hi - lo + 1e-3) for a, (lo, hi) in ext.items()})
    T = s_spec['T']
    if clock != 'uneven':
        sim = sim.assign_coords(time=0.1 * np.arange(T))
        exp = exp.assign_coords(time=(0.1 if clock == 'same' else 0.13) * np.arange(T))
    else: exp = exp.assign_coords(time=sim.time.values)
    try:
        dd = make_domain_data(sim, exp, n_in=n_in, n_out=n_out, grid=grid, fracs=(0.5, 0.25, 0.25))
    except DataContractError as e:  # grids that do not overlap: the message names both extents
        assert 'does not overlap' in str(e), str(e); event('no overlap'); return
    except ValueError as e:
        msg = str(e)
        if 'unevenly' in msg: assert clock == 'uneven' and T > 2 and 'dt=' in msg, msg
        elif 'intervals differ' in msg: assert clock == 'other' and T > 1, msg
        elif 'single' in msg: assert isinstance(grid, tuple) and min(s_spec['H'], s_spec['W']) == 1, msg
        else: assert msg.startswith('split_trajs') and min(s_spec['N'], e_spec['N']) < 4, msg
        event(msg.split(';')[0][:40]); return
    assert min(s_spec['N'], e_spec['N']) >= 4
    event('windows')
    for dom in ('sim', 'exp'):
        for split, wd in getattr(dd, dom).items():
            assert wd.n_cond == dd.n_cond and wd.grid == dd.grid
            for i in range(len(wd)):
                it = wd[i]
                assert all(torch.isfinite(it[k]).all() for k in ('x', 'y', 'cond'))
                assert it['x'].shape == (n_in, len(dd.fields), *dd.grid) and it['cond'].shape == (dd.n_cond,)


# ---------------------------------------------------------------------------------------------------- RealPDEBench files
# A small valid RealPDEBench tree (raw HDF5), one of its arrays mutated the way a damaged or foreign download is: a group
# where a dataset belongs, strings, complex numbers, zero or huge sizes, a missing key, NaN fields. The importer's command
# line either imports it (exit 0) or refuses it with one line (exit 2): never a numpy or h5py traceback.
_H5_KEYS = ('measured_data/u', 'measured_data/v', 'measured_data/p', 'x', 'y', 't')
_H5_MUTATIONS = ('group', 'strings', 'complex', 'zero_frames', 'zero_height', 'huge_frames', 'missing', 'nan', 'ints', 'flat', 'scalar')

def _mutate_h5(path, key, how):
    import h5py
    with h5py.File(path, 'r+') as f:
        if key not in f: return False
        a = f[key][()]
        del f[key]
        if how == 'missing': return True
        if how == 'group': f.create_group(key).create_dataset('inner', data=a); return True
        if how == 'strings': f[key] = np.full(a.shape, 'x', dtype='S1'); return True
        if how == 'complex': f[key] = a.astype(np.complex64) * (1 + 1j); return True
        if how == 'zero_frames': f[key] = np.zeros((0,) + a.shape[1:], a.dtype); return True
        if how == 'zero_height': f[key] = np.zeros(a.shape[:-2] + (0,) + a.shape[-1:], a.dtype) if a.ndim >= 2 else np.zeros(0); return True
        if how == 'huge_frames': f.create_dataset(key, shape=(2 ** 31,) + a.shape[1:], dtype=a.dtype, chunks=True); return  # never written: sparse
        if how == 'nan': f[key] = np.full(a.shape, np.nan, a.dtype); return True
        if how == 'ints': f[key] = (a * 100).astype(np.int32); return True
        if how == 'flat': f[key] = a.reshape(-1); return True
        if how == 'scalar': f[key] = np.float64(1.0); return True


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(key=st.sampled_from(_H5_KEYS), how=st.sampled_from(_H5_MUTATIONS), which=st.sampled_from(['numerical', 'real']),
       horizon=st.sampled_from([None, 1, 2 ** 64]))
def test_a_mutated_realpdebench_download_imports_or_is_refused_in_one_line(tmp_path_factory, key, how, which, horizon):
    import contextlib, io
    from simreal_nb.face import cli
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    root = tmp_path_factory.mktemp('rpd')
    sdir = write_example_realpdebench(root, 'cylinder', T=6, H=4, W=6)
    changed = _mutate_h5(sorted((sdir / which).glob('*.h5'))[0], key, how)
    argv = ['data', 'import', 'realpdebench', str(root), '--scenario', 'cylinder', '--layout', 'hdf5', '--out', str(root / 'out')]
    if horizon is not None: argv += ['--horizon', str(horizon)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try: cli.main(argv); code = 0
        except SystemExit as e: code = e.code
    lines = err.getvalue().strip().splitlines()
    assert code in (0, 2), (key, how, code, err.getvalue()[-2000:])
    if code == 2: assert len(lines) == 1 and lines[0].startswith('simreal data import realpdebench: '), (key, how, lines)
    else: assert sorted(p.name for p in (root / 'out').iterdir()) == ['cylinder.set.json', 'cylinder_exp.nc', 'cylinder_sim.nc']
    if changed and how in ('group', 'strings', 'complex', 'zero_frames') and key.startswith('measured_data/'): assert code == 2, (key, how)
    if horizon == 2 ** 64: assert code == 2 and '2**31' in lines[0], lines


def test_both_realpdebench_layouts_give_the_same_grid_by_default(tmp_path):
    "The importer's default steps (upstream's): the raw HDF5 files stepped through, the Arrow files (stored subsampled by upstream's converter) read as they are: one grid."
    from simreal_nb.face import cli
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    pytest.importorskip('pyarrow')
    grids = {}
    for lay in ('hdf5', 'arrow'):
        write_example_realpdebench(tmp_path / lay, 'cylinder', layout=lay)
        cli.main(['data', 'import', 'realpdebench', str(tmp_path / lay), '--scenario', 'cylinder', '--layout', lay, '--out', str(tmp_path / f'{lay}_out')])
        for dom in ('sim', 'exp'):
            with xr.open_dataset(tmp_path / f'{lay}_out' / f'cylinder_{dom}.nc', engine='h5netcdf') as d: grids[lay, dom] = (d.x.values, d.y.values)
    for dom in ('sim', 'exp'):
        for a, b in zip(grids['hdf5', dom], grids['arrow', dom]): assert np.array_equal(a, b), (dom, a, b)
    assert len(grids['hdf5', 'sim'][0]) < len(grids['hdf5', 'exp'][0])  # upstream's sim step 2, exp step 1 for the cylinder


@pytest.mark.parametrize('key,how,says', [('measured_data/u', 'complex', 'holds complex numbers'), ('measured_data/v', 'group', 'an HDF5 group'),
                                          ('measured_data/u', 'strings', 'holds strings'), ('x', 'group', 'an HDF5 group'),
                                          ('y', 'strings', 'holds strings'), ('measured_data/u', 'zero_height', 'each >= 1')])
def test_each_malformed_realpdebench_array_is_named(tmp_path, capsys, key, how, says):
    "A complex field (once imported with only a ComplexWarning), a group or strings for a field or a grid, frames of zero height: exit 2 naming the array."
    from simreal_nb.face import cli
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    sdir = write_example_realpdebench(tmp_path, 'cylinder', T=6, H=4, W=6)
    assert _mutate_h5(sorted((sdir / 'real').glob('*.h5'))[0], key, how)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no ComplexWarning on the way
        with pytest.raises(SystemExit) as e:
            cli.main(['data', 'import', 'realpdebench', str(tmp_path), '--scenario', 'cylinder', '--out', str(tmp_path / 'out')])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and says in err and key.split('/')[-1] in err, err
    assert not (tmp_path / 'out').exists()


_PIV_TEXTS = {'insight': ('Insight/Run000001.T000.D000.P000.H001.L.vec', []),
              'openpiv': ('openpiv_txt/exp1_001_b.txt', ['--units', 'pixel,pixel/s'])}
_TEXT_MUTATIONS = ('truncate', 'token', 'drop_header', 'duplicate', 'bytes', 'empty', 'columns')
_TOKENS = ('nan', 'inf', '-inf', '1e400', '', 'x', '0x10', '1,2', '--', '9' * 400)

def _mutate_text(text:str, how:str, at:float, token:str) -> bytes:
    "One careless or hostile edit of a PIV text file, at a relative position `at` in [0, 1)."
    lines = text.splitlines()
    i = min(len(lines) - 1, int(at * len(lines)))
    if how == 'truncate': return '\n'.join(lines[:i]).encode()
    if how == 'drop_header': return '\n'.join(lines[1:]).encode()
    if how == 'duplicate': return '\n'.join(lines[:i] + lines[i:i + 1] * 3 + lines[i + 1:]).encode()
    if how == 'empty': return b''
    if how == 'bytes': raw = text.encode(); k = int(at * len(raw)); return raw[:k] + bytes(range(256)) + raw[k:]
    words = lines[i].replace(',', ' ').split()
    if how == 'columns': lines[i] = ' '.join(words[:-1] or ['1'])
    else: lines[i] = lines[i].replace(words[int(at * 7) % len(words)], token, 1) if words else token
    return '\n'.join(lines).encode()

@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(_PIV_TEXTS)), how=st.sampled_from(_TEXT_MUTATIONS),
       at=st.floats(0, 0.999, allow_subnormal=False), token=st.sampled_from(_TOKENS))  # torch may flush subnormals process-wide
def test_a_mutated_piv_file_imports_or_is_refused_in_one_line(tmp_path_factory, fmt, how, at, token):
    "A PIV text file edited at random (truncated, tokens replaced by NaN, inf, overflowing or non-numbers, header gone, bytes, columns missing): exit 0 or exit 2 with one line, and nothing half-written."
    import contextlib, io
    from simreal_nb.face import cli
    rel, extra = _PIV_TEXTS[fmt]
    root = tmp_path_factory.mktemp('piv')
    src = __import__("pathlib").Path(__file__).resolve().parent / "data" / "piv" / rel
    bad = root / src.name
    bad.write_bytes(_mutate_text(src.read_text(errors='replace'), how, at, token))
    out = root / 'out'
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        try: cli.main(['data', 'import', 'piv', str(bad), '--dt', '0.1', '--fmt', fmt, '--out', str(out), *extra]); code = 0
        except SystemExit as e: code = e.code
    lines = err.getvalue().strip().splitlines()
    assert code in (0, 2), (fmt, how, token, code, err.getvalue()[-2000:])
    if code == 2: assert len(lines) == 1 and lines[0].startswith('simreal data import piv: '), (fmt, how, lines)
    else: assert sorted(p.name for p in out.iterdir()) == ['piv.set.json', 'piv_exp.nc'], (fmt, how)
    if how == 'empty': assert code == 2
