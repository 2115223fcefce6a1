"Atomic netCDF writes, loaded-and-closed reads, validation on read."
import os, numpy as np, pytest, xarray as xr
from simreal_nb.core.schema import DIMS, FIELD_META, DataContractError
from simreal_nb.core.store import write_dataset, read_dataset


def make(domain='exp'):
    rng = np.random.default_rng(1)
    ds = xr.Dataset(coords=dict(traj=np.arange(3), time=np.arange(4) * 0.1, y=np.linspace(0, 1, 5),
                                x=np.linspace(0, 2, 6), Re=('traj', [90., 120., 150.])),
                    attrs=dict(domain=domain, system='toy', seed=3, inputs='omega_cmd', scale_u=1.0, scale_v=1.0,
                               scale_note='toy velocity scale'))
    for f in ('u', 'v'): ds[f] = (DIMS, rng.standard_normal((3, 4, 5, 6)).astype('float32'), FIELD_META[f])
    ds['valid'] = (DIMS, rng.random((3, 4, 5, 6)) > 0.1)
    ds['v'] = ds.v.where(ds.valid)
    ds['omega_cmd'] = (('traj', 'time'), rng.standard_normal((3, 4)).astype('float32'))
    return ds


def test_round_trip(tmp_path):
    ds = make()
    p = write_dataset(ds, tmp_path / 'a.nc')
    back = read_dataset(p, domain='exp')
    xr.testing.assert_identical(back, ds)
    assert back.valid.dtype == bool and back.u.dtype == np.float32
    assert os.listdir(tmp_path) == ['a.nc']


def test_read_closes_file(tmp_path):
    p = write_dataset(make(), tmp_path / 'a.nc')
    back = read_dataset(p)
    os.remove(p)  # the data is in memory, the file closed
    assert float(back.u.sum()) == float(make().u.sum())
    write_dataset(make(), p); back = read_dataset(p)
    write_dataset(make().isel(traj=[0]), p)  # overwrite while a loaded copy is alive
    assert back.sizes['traj'] == 3 and read_dataset(p).sizes['traj'] == 1


def test_failed_write_keeps_old_file(tmp_path, monkeypatch):
    p = write_dataset(make(), tmp_path / 'a.nc')
    def boom(*a, **k): raise RuntimeError('disk full')
    monkeypatch.setattr(xr.Dataset, 'to_netcdf', boom)
    with pytest.raises(RuntimeError): write_dataset(make().isel(traj=[0]), p)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ['a.nc'] and read_dataset(p).sizes['traj'] == 3


def test_write_validates(tmp_path):
    ds = make(); ds['u'] = ds.u.astype('float64')
    with pytest.raises(DataContractError, match="field 'u'"): write_dataset(ds, tmp_path / 'a.nc')
    assert not os.listdir(tmp_path)
    write_dataset(ds, tmp_path / 'a.nc', validate=False)
    with pytest.raises(DataContractError, match='float32'): read_dataset(tmp_path / 'a.nc')
    assert read_dataset(tmp_path / 'a.nc', validate=False).u.dtype == np.float64


def test_read_domain_mismatch(tmp_path):
    p = write_dataset(make(), tmp_path / 'a.nc')
    with pytest.raises(DataContractError, match="expected 'sim'"): read_dataset(p, domain='sim')


def test_corrupt_and_missing_files(tmp_path):
    (tmp_path / 'bad.nc').write_bytes(b'garbage')
    with pytest.raises(OSError, match='cannot read'): read_dataset(tmp_path / 'bad.nc')
    with pytest.raises(FileNotFoundError): read_dataset(tmp_path / 'none.nc')


def test_attrs(tmp_path):
    ds = make(); ds.attrs['flag'] = True
    assert read_dataset(write_dataset(ds, tmp_path / 'a.nc')).attrs['flag'] == 1
    assert ds.attrs['flag'] is True  # caller's dataset untouched
    ds.attrs['bad'] = None
    with pytest.raises(TypeError, match="attrs\\['bad'\\]"): write_dataset(ds, tmp_path / 'b.nc')


def test_compress(tmp_path):
    ds = make(); ds['u'] = ds.u * 0 + 1  # compressible
    ds['u'].attrs.update(FIELD_META['u'])
    back = read_dataset(write_dataset(ds, tmp_path / 'c.nc', compress=True))
    xr.testing.assert_identical(back, ds)


def test_zarr(tmp_path):
    try: import zarr  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match='zarr'): write_dataset(make(), tmp_path / 'a.zarr')
        return
    p = write_dataset(make(), tmp_path / 'a.zarr')
    xr.testing.assert_identical(read_dataset(p), make())


def test_block_writer_equals_write_dataset(tmp_path):
    from simreal_nb.core.store import BlockWriter
    ds = make()
    ds['valid'][0] = True  # the first trajectory all valid: the mask starts after blocks were written without one
    ds['v'][0] = ds.u[0]
    fields = {f: ds[f].attrs for f in ('u', 'v')}
    with BlockWriter(tmp_path / 'blocks.nc', ds.drop_vars(['u', 'v', 'valid']), fields, compress=True, chunk_time=2) as w:
        for i in range(3):
            for t0 in (0, 2):
                w.write(i, slice(t0, t0 + 2), {k: ds[k].values[i, t0:t0 + 2] for k in ('u', 'v', 'valid')})
        assert w.has_valid
        w.set_attrs(dict(note='set at the end', flag=True))
        w.commit()
    ds.attrs.update(note='set at the end', flag=1)
    write_dataset(ds, tmp_path / 'whole.nc')
    xr.testing.assert_identical(read_dataset(tmp_path / 'blocks.nc'), read_dataset(tmp_path / 'whole.nc'))
    assert sorted(p.name for p in tmp_path.iterdir()) == ['blocks.nc', 'whole.nc']


def test_block_writer_names_the_file_on_a_full_disk(tmp_path, monkeypatch):
    import errno, h5netcdf
    from simreal_nb.core.store import BlockWriter
    ds = make()
    w = BlockWriter(tmp_path / 'big.nc', ds.drop_vars(['u', 'v', 'valid']), {'u': ds.u.attrs})
    def full(self, key, value): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(h5netcdf.Variable, '__setitem__', full)
    with pytest.raises(OSError, match=r'No space left on device.*big\.nc') as e: w.write(0, slice(0, 2), {'u': ds.u.values[0, :2]})
    assert e.value.errno == errno.ENOSPC
    w.discard()
    assert list(tmp_path.iterdir()) == []
