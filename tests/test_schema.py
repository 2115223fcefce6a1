"Every error of the data-contract validator: type, and a message naming the variable and the expectation."
from simreal_nb.face.flags import is_user_error
import numpy as np, pytest, xarray as xr
from simreal_nb.core.schema import (FIELDS, FIELD_META, DIMS, DataContractError, validate, fields_of, input_names,
                               reference_scales)


def make(domain='sim', fields=FIELDS, nt=3, ny=4, nx=5, seed=0):
    rng = np.random.default_rng(seed)
    ds = xr.Dataset(coords=dict(traj=np.arange(2), time=np.arange(nt) * 0.5, y=np.linspace(0, 1, ny),
                                x=np.linspace(0, 1, nx), Re=('traj', [100., 200.])),
                    attrs=dict(domain=domain, system='toy', scale_u=2.0, scale_v=2.0, scale_p=4.0,
                                          scale_note='toy scales'))
    for f in fields: ds[f] = (DIMS, rng.standard_normal((2, nt, ny, nx)).astype('float32'), dict(FIELD_META[f]))
    if domain == 'exp_truth': ds.attrs['never_train'] = 1
    return ds


def make_exp():
    ds = make('exp', fields=('u', 'v'))
    valid = np.ones((2, 3, 4, 5), bool); valid[0, 1, 2, 3] = False
    ds['valid'] = (DIMS, valid)
    ds['u'] = ds.u.where(ds.valid)  # NaN where invalid: allowed
    return ds


def err(ds, domain=None):
    with pytest.raises(DataContractError) as e: validate(ds, domain)
    assert is_user_error(e.value)  # the CLI answers it with one line and exit 2
    return str(e.value)


def test_good_datasets_pass():
    for d in ('sim', 'exp_truth'):
        ds = make(d); assert validate(ds, d) is ds
    ex = make_exp(); assert np.isnan(ex.u.values).sum() == 1
    assert validate(ex, 'exp') is ex
    assert fields_of(make()) == FIELDS and fields_of(ex) == ('u', 'v')
    assert fields_of(make(fields=('p', 'u'))) == ('u', 'p')  # canonical order


def test_not_a_dataset_and_bad_domain_argument():
    with pytest.raises(TypeError, match='xarray.Dataset'): validate(make().u)
    with pytest.raises(ValueError, match='domain'): validate(make(), 'real')


def test_missing_dims():
    m = err(make().isel(x=0))
    assert "missing dims ['x']" in m and 'expected dims' in m


def test_missing_coord():
    m = err(make().drop_vars('time'))
    assert "coordinate 'time' is missing" in m


def test_wrong_dims_order():
    ds = make(); ds['v'] = ds.v.transpose('traj', 'time', 'x', 'y')
    m = err(ds)
    assert "field 'v'" in m and "('traj', 'time', 'x', 'y')" in m and "expected ('traj', 'time', 'y', 'x')" in m


def test_non_float32_field():
    ds = make(); ds['p'] = ds.p.astype('float64')
    m = err(ds); assert "field 'p'" in m and 'float64' in m and 'expected float32' in m


def test_missing_field_attrs():
    ds = make(); ds['u'].attrs.pop('units')
    m = err(ds); assert "field 'u'" in m and "'units'" in m


def test_empty_field_list():
    m = err(make().drop_vars(list(FIELDS)))
    assert 'no physical field' in m and str(FIELDS) in m


def test_nan_without_valid():
    ds = make(); ds['v'] = ds.v.where(ds.x < 0.9)
    m = err(ds); assert "field 'v'" in m and 'NaN/inf' in m and "no 'valid' mask" in m


def test_inf_where_valid_true():
    ds = make_exp(); u = ds.u.values.copy(); u[1, 2, 0, 0] = np.inf; ds['u'] = (DIMS, u, ds.u.attrs)
    m = err(ds); assert "field 'u'" in m and "where 'valid' is True" in m and "'traj': 1" in m


def test_valid_wrong_dtype():
    ds = make_exp(); ds['valid'] = ds.valid.astype('int8')
    m = err(ds); assert "'valid'" in m and 'int8' in m and 'expected bool' in m


def test_valid_wrong_shape():
    ds = make_exp(); ds['valid'] = ds.valid.isel(traj=0, drop=True)
    m = err(ds); assert "'valid'" in m and "expected ('traj', 'time', 'y', 'x')" in m


def test_domain_attr_missing_unknown_mismatch():
    ds = make(); del ds.attrs['domain']
    assert "attrs['domain'] is missing" in err(ds)
    ds.attrs['domain'] = 'real'
    assert "attrs['domain']='real'" in err(ds)
    m = err(make_exp(), 'sim'); assert "attrs['domain']='exp'" in m and "expected 'sim'" in m


def test_exp_truth_needs_never_train():
    ds = make('exp_truth'); del ds.attrs['never_train']
    assert 'never_train' in err(ds)


def test_unknown_field_name():
    ds = make(); ds['w'] = ds.u
    m = err(ds); assert "'w'" in m and 'unknown data variable' in m


def test_non_monotonic_time_and_space():
    m = err(make().isel(time=[1, 0, 2]))
    assert "coordinate 'time'" in m and 'strictly increasing' in m
    m = err(make().isel(x=[0, 1, 1, 2, 3]))
    assert "coordinate 'x'" in m and 'strictly increasing' in m


def test_traj_coord_must_be_int():
    ds = make().assign_coords(traj=[0.0, 1.0])
    m = err(ds); assert "'traj'" in m and 'integers' in m


def test_pressure_in_exp_rejected_unless_declared():
    ds = make_exp(); ds['p'] = make().p
    m = err(ds); assert "field 'p'" in m and "'exp'" in m and 'measures_pressure' in m
    ds.attrs['measures_pressure'] = 1
    assert validate(ds, 'exp') is ds


def test_inputs():
    ds = make(); ds.attrs['inputs'] = 'omega_cmd'
    m = err(ds); assert "input 'omega_cmd'" in m and 'missing' in m
    ds['omega_cmd'] = (('traj', 'time'), np.zeros((2, 3), 'float32'))
    assert validate(ds) is ds and input_names(ds) == ('omega_cmd',)
    ds['omega_cmd'] = (('time', 'traj'), np.zeros((3, 2), 'float32'))
    assert "expected ('traj', 'time')" in err(ds)
    ds['omega_cmd'] = (('traj', 'time'), np.full((2, 3), np.nan, 'float32'))
    assert 'NaN/inf' in err(ds)


def test_reference_scales():
    assert reference_scales(make()) == dict(u=2.0, v=2.0, p=4.0)
    assert reference_scales(make_exp()) == dict(u=2.0, v=2.0)
    assert reference_scales(make(), fields=('p',)) == dict(p=4.0)


@pytest.mark.parametrize('bad', [None, 0.0, -1.0, float('nan'), float('inf'), 'big'])
def test_missing_or_invalid_scale_fails(bad):
    ds = make()
    if bad is None: del ds.attrs['scale_p']
    else: ds.attrs['scale_p'] = bad
    m = err(ds)
    assert "attrs['scale_p']" in m and 'positive finite' in m and "'Pa'" in m
    with pytest.raises(DataContractError, match="scale_p"): reference_scales(ds)


def test_scale_of_absent_field_checked_when_present():
    ex = make_exp(); ex.attrs['scale_p'] = 0.0     # exp has no p, but a scale it carries must still be valid
    assert "attrs['scale_p']" in err(ex)
    del ex.attrs['scale_p']; assert validate(ex) is ex


def test_scale_makes_units_irrelevant():
    "Pressure in mPa with its scale in mPa: identical nondimensional fields."
    ds = make(); k = ds.copy(); k['p'] = (k.p * 1000).astype('float32'); k.attrs['scale_p'] = ds.attrs['scale_p'] * 1000
    validate(k)
    for f in FIELDS:
        np.testing.assert_allclose(k[f] / reference_scales(k)[f], ds[f] / reference_scales(ds)[f], rtol=1e-6)
