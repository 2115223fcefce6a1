"Your own data: CFD files and PIV runs into a pair through the CLI (`data import sim`, `data pair`), and the round trip."
import os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
import xarray as xr

meshio = pytest.importorskip('meshio')

def simreal(*args, timeout=900):
    return subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, 'MPLBACKEND': 'Agg'})

def _flow(x, y, t):
    "An analytic travelling wave: u, v [m/s] and p [Pa] at points x, y [m] and time t [s]."
    return 1 + 0.1 * np.sin(40 * x - t), 0.1 * np.cos(40 * x - t) * (1 + y), 0.5 * np.cos(40 * x - t)

def _pvd(folder, files, times):
    rows = ''.join(f'<DataSet timestep="{t}" file="{Path(f).name}"/>' for f, t in zip(files, times))
    (folder / 'run.pvd').write_text(f'<VTKFile type="Collection"><Collection>{rows}</Collection></VTKFile>')
    return folder / 'run.pvd'

def test_import_sim_vtu_structured_and_unstructured(tmp_path):
    x, y = np.linspace(0, 0.2, 21), np.linspace(-0.05, 0.05, 11)
    X, Y = np.meshgrid(x, y)
    times = [0.0, 0.25, 0.5]
    quads = (lambda i: np.stack([i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, 1:].ravel(), i[1:, :-1].ravel()], 1))(
        np.arange(X.size).reshape(X.shape))
    rng = np.random.default_rng(0)
    P = np.concatenate([rng.uniform([0, -0.05], [0.2, 0.05], (600, 2)), np.stack([X.ravel(), Y.ravel()], 1)])
    P = P[np.hypot(P[:, 0] - 0.05, P[:, 1]) > 0.015]   # a body: no mesh inside r = 15 mm around (50 mm, 0)
    from scipy.spatial import Delaunay
    tri = Delaunay(P).simplices
    tri = tri[np.hypot(P[tri].mean(1)[:, 0] - 0.05, P[tri].mean(1)[:, 1]) > 0.015]
    for kind, pts, cells in (('structured', np.stack([X.ravel(), Y.ravel()], 1), [('quad', quads)]),
                             ('unstructured', P, [('triangle', tri)])):
        d = tmp_path / kind; d.mkdir()
        files = []
        for k, t in enumerate(times):
            u, v, p = _flow(pts[:, 0], pts[:, 1], t)
            meshio.Mesh(np.c_[pts * 1e3, np.zeros(len(pts))], cells,   # mm and mm/s, as many CFD exports
                        point_data=dict(U=np.stack([u, v, 0 * u], 1) * 1e3, p=p)).write(d / f'f{k}.vtu')
            files.append(d / f'f{k}.vtu')
        series = _pvd(d, files, times)
        r = simreal('data', 'import', 'sim', series, '--fields', 'u=U_x,v=U_y,p=p', '--units',
                    'length=mm,velocity=mm/s,pressure=Pa', '--params', 'Re=100', '--grid', '11x21', '--out',
                    tmp_path / 'out', '--name', kind)
        assert r.returncode == 0, r.stderr
        with xr.open_dataset(tmp_path / 'out' / f'{kind}_sim.nc', engine='h5netcdf') as ds:
            assert ds.u.attrs['units'] == 'm s-1' and ds.x.attrs['units'] == 'm' and float(ds.Re[0]) == 100
            assert ds.time.values.tolist() == times and np.allclose(ds.x.values, x) and np.allclose(ds.y.values, y)
            u, v, p = _flow(*np.meshgrid(ds.x.values, ds.y.values), 0.5)
            ok = ds.valid.values[0, 2]
            err = np.abs(ds.u.values[0, 2] - u)[ok].max()
            if kind == 'structured': assert ok.all() and err < 1e-6   # the mesh's nodes are the grid
            else:   # linear inside the mesh's triangles, nothing inside the body
                Xg, Yg = np.meshgrid(ds.x.values, ds.y.values)
                assert not ok[np.hypot(Xg - 0.05, Yg) < 0.01].any() and ok.mean() > 0.85 and err < 0.01

def _openfoam_case(root):
    from simreal_nb.data.cfd_files import write_example_openfoam
    x, y = np.linspace(0, 0.2, 21), np.linspace(-0.05, 0.05, 11)
    X, Y = np.meshgrid((x[1:] + x[:-1]) / 2, (y[1:] + y[:-1]) / 2)
    ts = [0.5, 1.0, 1.5]
    U = np.stack([np.stack(_flow(X, Y, t)[:2], -1) for t in ts])
    p = np.stack([_flow(X, Y, t)[2] / 1000 for t in ts])   # kinematic, m2/s2
    return write_example_openfoam(root, x, y, ts, U, p), X, Y

def test_import_sim_openfoam_case(tmp_path):
    case, X, Y = _openfoam_case(tmp_path / 'case')
    r = simreal('data', 'import', 'sim', case, '--rho', '1000', '--params', 'Re=150', '--out', tmp_path / 'out',
                '--name', 'foam')
    assert r.returncode == 0, r.stderr
    with xr.open_dataset(tmp_path / 'out' / 'foam_sim.nc', engine='h5netcdf') as ds:
        assert ds.time.values.tolist() == [0.0, 0.5, 1.0] and ds.p.attrs['units'] == 'Pa' and ds.valid.all()
        u, v, p = _flow(X, Y, 1.5)
        assert np.abs(ds.u.values[0, 2] - u).max() < 1e-6 and np.abs(ds.p.values[0, 2] - p).max() < 1e-5
    # a kinematic pressure without --rho stays one (m2 s-2); the run compares units before it pairs
    r = simreal('data', 'import', 'sim', case, '--out', tmp_path / 'out', '--name', 'kin')
    with xr.open_dataset(tmp_path / 'out' / 'kin_sim.nc', engine='h5netcdf') as ds: assert ds.p.attrs['units'] == 'm2 s-2'

def test_import_sim_refusals_name_the_problem(tmp_path):
    case, _, _ = _openfoam_case(tmp_path / 'case')
    (tmp_path / 'bad.vtu').write_text('<VTKFile type="UnstructuredGrid"><Unstruct')
    np.savez(tmp_path / 'a.npz', x=np.arange(4.0), y=np.arange(3.0), U_x=np.zeros((2, 3, 4)), U_y=np.zeros((2, 3, 4)))
    cases = [((case, '--fields', 'u=Ux,v=Uy'), ['no time folder holds', '--fields']),
             ((tmp_path / 'bad.vtu', '--units', 'length=m,velocity=m/s'), ['bad.vtu', 'meshio cannot read it']),
             ((tmp_path / 'a.npz', '--fields', 'u=U_x,v=U_y', '--units', 'length=m,velocity=m/s'), ['a.npz', '--dt']),
             ((tmp_path / 'a.npz', '--fields', 'u=U_x,v=U_y', '--dt', '0.1', '--units', 'length=m,velocity=knot'),
              ['a.npz', "'knot'", '--units']),
             ((case, '--grid', '3x'), ['--grid']), ((case, '--dt', '-1'), ['--dt'])]
    for args, words in cases:
        r = simreal('data', 'import', 'sim', *args, '--out', tmp_path / 'out')
        assert r.returncode == 2 and 'Traceback' not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert all(w in r.stderr for w in words), (words, r.stderr)
    assert not (tmp_path / 'out').exists() or not list((tmp_path / 'out').glob('*.nc'))   # nothing written

def test_data_pair_refuses_a_bad_manifest(tmp_path):
    (tmp_path / 'm.toml').write_text('name = "wake"\nparameters = ["Re"]\n[[trajectory]]\nRe = 1\nsim = "no.vtu"\n'
                                     'exp = "piv"\n')
    r = simreal('data', 'pair', tmp_path / 'm.toml', '--out', tmp_path / 'out')
    assert r.returncode == 2 and 'trajectory[0].sim' in r.stderr and 'no.vtu' in r.stderr, r.stderr

def test_lab_study_pairs_back_to_the_twin(tmp_path):
    """A twin written as a lab's files and paired through the CLI gives the twin's arrays back: the simulation exactly (its
    mesh nodes are the grid; not valid in the body), the measurement to the float32 rounding of mm -> m; the same windows train and score."""
    from simreal_nb.twins.systems import load_twins
    from simreal_nb.data.manifest import write_lab_study
    from simreal_nb.data.domains import make_domain_data
    twin = load_twins('cylinder', size='test')
    study = write_lab_study(tmp_path / 'lab', twin['sim'], twin['exp'])
    r = simreal('data', 'pair', study, '--out', tmp_path / 'pair')
    assert r.returncode == 0 and 'covers 98% of the PIV window' in r.stdout, r.stderr
    sim = xr.load_dataset(tmp_path / 'pair' / 'cylinder_sim.nc', engine='h5netcdf')
    exp = xr.load_dataset(tmp_path / 'pair' / 'cylinder_exp.nc', engine='h5netcdf')
    on = sim.valid.values
    assert (on == twin['sim'].valid.values).all()   # the body: no triangle of the mesh, not valid
    for k in ('u', 'v', 'p'): assert np.array_equal(sim[k].values[on], twin['sim'][k].values[on])
    assert (exp.valid.values == twin['exp'].valid.values).all() and np.allclose(exp.Re, twin['exp'].Re, rtol=0, atol=1e-12)
    a, b = (make_domain_data(s, e, n_in=2, fracs=(0.5, 0.25, 0.25)) for s, e in ((twin['sim'], twin['exp']), (sim, exp)))
    for dom in ('sim', 'exp'):
        for split in ('train', 'val', 'test'):
            x, y = getattr(a, dom)[split].data.numpy(), getattr(b, dom)[split].data.numpy()
            assert x.shape == y.shape and np.abs(x - y).max() < 1e-5, (dom, split, np.abs(x - y).max())

ROUND_TRIP_RTOL = 1e-3  # scores of the imported files vs the twin's own arrays: mm <-> m in float32 only

@pytest.mark.slow
def test_round_trip_twin_as_lab_files(tmp_path):
    """A twin written as a lab's files (a VTU series of an unstructured mesh per run; per-frame PIV files, OpenPIV and
    Insight, in mm; a manifest), paired through the CLI and run at the test grid, scores as the twin itself does."""
    from simreal_nb.twins.systems import load_twins
    from simreal_nb.data.manifest import write_lab_study
    from simreal_nb.core.store import write_set
    twin = load_twins('cylinder', size='test')
    write_set(tmp_path / 'direct', 'cylinder', {k: (f'cylinder_{k}.nc', twin[k]) for k in ('sim', 'exp')})
    study = write_lab_study(tmp_path / 'lab', twin['sim'], twin['exp'])
    r = simreal('data', 'pair', study, '--out', tmp_path / 'imported')
    assert r.returncode == 0 and 'covers 98% of the PIV window' in r.stdout, r.stderr
    res = {}
    for kind in ('direct', 'imported'):
        r = simreal('run', '--preset', 'test', '--data', tmp_path / kind, '--workers', '0', '--out', tmp_path / f'run_{kind}')
        assert r.returncode == 0, r.stderr[-3000:]
        with xr.open_dataset(tmp_path / f'run_{kind}' / 'results.nc', engine='h5netcdf') as d: res[kind] = d.score.load()
    a, b = res['direct'], res['imported']
    assert a.shape == b.shape and np.isfinite(a).any()
    np.testing.assert_allclose(b.values, a.values, rtol=ROUND_TRIP_RTOL, equal_nan=True)
