"The experiment grid: resumable cells, refusal of foreign run directories, executors giving the same scores."
import json, os, signal, subprocess, sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
import pytest
import xarray as xr
from simreal_nb.core.names import BASELINES
from simreal_nb.study.grid import PRESETS, GridError, Cell, Grid
from simreal_nb.study.rundir import cell_path, collect_results
from simreal_nb.study.cell import run_cell
from simreal_nb.study.experiment import run_experiment
from simreal_nb.reading.tradeoff import lam_train_of
import simreal_nb.study.cell as cellmod
import simreal_nb.study.cost as cost
import simreal_nb.study.jobs as jobs
import torch

torch.set_num_threads(1)  # bitwise comparisons between runs need one thread count (an in-process dask worker sets 1)

CFG = PRESETS['test'].config
GRID = Grid(['kolmogorov'], ['S'], ['sim_only', 'joint'])

@pytest.fixture(scope='module')
def baseline(tmp_path_factory):
    "The grid run sequentially in-process, uninterrupted."
    d = tmp_path_factory.mktemp('base') / 'run'
    return d, run_experiment(d, CFG, GRID, report=False, verbose=False)

def test_results_layout(baseline):
    _, res = baseline
    s = res.score
    assert s.dims == ('system', 'capacity', 'protocol', 'seed', 'arch', 'exp_trajs', 'group', 'domain', 'field', 'metric')
    assert list(s.group.values) == ['in_dist']  # the test-size twins hold out interior parameters only
    assert s.attrs['units'] == '1' and list(s.protocol.values) == ['sim_only', 'joint', *BASELINES]
    s = s.squeeze(['arch', 'exp_trajs', 'group'], drop=True)
    assert list(s.metric.values) == ['rmse', 'rel_l2', 'frmse'] and list(s.domain.values) == ['sim', 'exp']
    assert set(s.field.values) == {'u', 'v', 'p', 'all'}
    assert s.sel(domain='exp', field='p').isnull().all()         # never measured: NaN, not 0
    assert (s.sel(domain='sim', field='p', metric='rmse') > 0).all()
    assert np.isfinite(res.grad_cos_mean.sel(protocol='joint')).all() and res.grad_cos_mean.sel(protocol='sim_only').isnull().all()
    assert list(res.hidden_field.values) == ['p'] and np.isfinite(res.truth_score).all()  # derived from the presence masks
    assert np.isfinite(res.score_phys.sel(field=['u', 'v'])).all() and res.score_phys.sel(field='all').isnull().all()
    trained = res.sel(protocol=['sim_only', 'joint'])
    assert set(np.unique(trained.capped)) <= {0.0, 1.0} and res.capped.sel(protocol=list(BASELINES)).isnull().all()
    assert (trained.curve_val.count('eval_index') > 0).all() and res.curve_val.sel(protocol=list(BASELINES)).isnull().all()
    assert json.loads(res.attrs['reference_scales'])['kolmogorov'].keys() == {'u', 'v', 'p'} and f'{CFG.steps} updates' in res.attrs['budget_rule']
    # exp is scored against the twin's hidden truth; the measured score and the measurement's own error sit beside it
    assert res.attrs['exp_target'] == 'truth' and json.loads(res.attrs['exp_target_by_system']) == {'kolmogorov': 'truth'}
    for v in ('score_measured', 'noise_floor'):
        assert res[v].dims == ('system', 'capacity', 'protocol', 'seed', 'arch', 'exp_trajs', 'group', 'field', 'metric')
        assert np.isfinite(res[v].sel(field=['u', 'v', 'all'])).all() and res[v].sel(field='p').isnull().all()
    floor = res.noise_floor.sel(field='all', metric='rmse')
    assert (floor > 0).all() and (floor.max('protocol') == floor.min('protocol')).all()  # one measurement, whatever the protocol
    assert not np.allclose(res.score.sel(domain='exp'), res.score_measured, equal_nan=True)
    assert 'replicate' in res.attrs['seed_rule'] and (res.data_seed == res.seed).all()

def test_results_carry_lam_train_from_the_protocols(baseline):
    "Each protocol's λ_train sits on the `protocol` dim, taken from the protocol objects: 0.5 for Joint, NaN for the rest."
    run_dir, res = baseline
    lt = res.lam_train
    assert lt.dims == ('protocol',) and lt.sel(protocol='joint') == 0.5
    assert lt.sel(protocol='sim_only').isnull() and lt.sel(protocol=list(BASELINES)).isnull().all()
    assert lam_train_of(res) == {'joint': 0.5}
    with xr.open_dataset(run_dir / 'results.nc') as saved: assert saved.lam_train.sel(protocol='joint') == 0.5  # the file keeps it


def test_finished_cells_are_not_recomputed(baseline, tmp_path):
    base_dir, res = baseline
    d = tmp_path / 'run'
    run_experiment(d, CFG, replace(GRID, protocols=['sim_only']), report=False, verbose=False)
    first = cell_path(d, Cell('kolmogorov', 'S', 'sim_only', 0, CFG.arch))
    mtime = first.stat().st_mtime_ns
    res2 = run_experiment(d, CFG, GRID, report=False, verbose=False)
    assert first.stat().st_mtime_ns == mtime
    xr.testing.assert_allclose(res2.score, res.score)
    timing = json.loads((d / 'timing.json').read_text())
    assert {Cell('kolmogorov', 'S', p, 0, CFG.arch).key for p in ('sim_only', 'joint')} <= set(timing)

def test_interrupted_cell_resumes_from_checkpoint(tmp_path):
    "Kill a run while a cell is training, run again: the cell resumes from its checkpoint and ends like an uninterrupted one."
    cfg = replace(CFG, steps=40, ckpt_every=5, eval_every=40)
    grid = Grid(['kolmogorov'], ['S'], ['joint'])
    ref = run_experiment(tmp_path / 'ref', cfg, grid, report=False, verbose=False)
    d = tmp_path / 'run'
    code = ("import torch; torch.set_num_threads(1)\n"
            "from dataclasses import replace\nfrom simreal_nb.study.experiment import run_experiment, PRESETS, Grid\n"
            f"run_experiment({str(d)!r}, replace(PRESETS['test'].config, steps=40, ckpt_every=5, eval_every=40), "
            f"Grid(['kolmogorov'], ['S'], ['joint']), report=False, verbose=False)\n")
    p = subprocess.Popen([sys.executable, '-c', code], env={**os.environ, 'OMP_NUM_THREADS': '1'})
    ckpt = d / 'cells' / Cell('kolmogorov', 'S', 'joint', 0, CFG.arch).key / 'last.pt'
    t0 = time.time()
    while not ckpt.exists() and p.poll() is None and time.time() - t0 < 120: time.sleep(0.05)
    p.send_signal(signal.SIGKILL); p.wait()
    assert ckpt.exists(), 'the run never wrote a checkpoint'
    assert not cell_path(d, Cell('kolmogorov', 'S', 'joint', 0, CFG.arch)).exists(), 'killed too late: the cell had finished'
    import torch; torch.set_num_threads(1)
    res = run_experiment(d, cfg, grid, report=False, verbose=False)
    xr.testing.assert_allclose(res.score, ref.score, rtol=1e-4)

def test_foreign_run_directory_is_refused(baseline, tmp_path):
    d = tmp_path / 'run'
    run_experiment(d, CFG, replace(GRID, protocols=['sim_only']), report=False, verbose=False)
    man = json.loads((d / 'manifest.json').read_text())
    with pytest.raises(GridError, match='other settings'):
        run_experiment(d, replace(CFG, steps=CFG.steps + 1), GRID, report=False, verbose=False)
    (d / 'manifest.json').write_text(json.dumps({**man, 'version': '0.0.0'}))
    with pytest.raises(GridError, match="made by simreal_nb '0.0.0'"):
        run_experiment(d, CFG, GRID, report=False, verbose=False)

@pytest.mark.parametrize('kind,name,valid', [('systems', 'cylindre', 'cylinder'), ('capacities', 'XL', 'S'),
                                              ('protocols', 'joint@1.5', 'sim_only'), ('protocols', 'finetune', 'sim_to_exp')])
def test_unknown_names_list_the_valid_ones(kind, name, valid):
    with pytest.raises(GridError) as e: Grid(**{kind: [name]}).cells()
    assert name in str(e.value) and valid in str(e.value)

def test_process_pool_gives_the_same_scores(baseline, tmp_path):
    _, res = baseline
    out = run_experiment(tmp_path / 'run', CFG, GRID, executor=2, report=False, verbose=False)
    xr.testing.assert_allclose(out.score, res.score, rtol=1e-4)

def test_dask_local_cluster_executor(baseline, tmp_path):
    import distributed
    _, res = baseline
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
         distributed.Client(cluster) as client:
        out = run_experiment(tmp_path / 'run', CFG, GRID, executor=client.get_executor(), report=False, verbose=False)
    xr.testing.assert_allclose(out.score, res.score, rtol=1e-4)


def test_quick_is_a_subset_of_default_with_the_same_numbers(baseline, tmp_path):
    "A cell gives the same numbers whichever grid it is run in; the quick preset is default's config on fewer cells."
    q, full = PRESETS['quick'], PRESETS['default']
    assert q.config == full.config and set(q.grid.cells(q.config.arch)) < set(full.grid.cells(full.config.arch))
    _, res = baseline
    bigger = run_experiment(tmp_path / 'big', CFG, replace(GRID, systems=['cylinder', 'kolmogorov']), report=False, verbose=False)
    xr.testing.assert_identical(bigger.score.sel(system=['kolmogorov']), res.score)


def test_nondimensional_scores_do_not_depend_on_pressure_units(tmp_path, monkeypatch):
    "Pressure and its reference scale in kPa instead of Pa (x 1000): the same nondimensional scores and rankings."
    grid = Grid(['cylinder'], ['S'], ['sim_only', 'exp_only'])
    ref = run_experiment(tmp_path / 'pa', CFG, grid, report=False, verbose=False)
    load = cellmod.load_twins
    def milli(*a, **k):
        tw = load(*a, **k)
        scaled = {}
        for name, ds in tw.items():
            ds = ds.copy()
            if 'p' in ds: ds['p'] = ds['p'] * np.float32(1000)
            scaled[name] = ds.assign_attrs(scale_p=ds.attrs['scale_p'] * 1000)
        return scaled
    monkeypatch.setattr(cellmod, 'load_twins', milli)
    cellmod._DATA.clear()
    kpa = run_experiment(tmp_path / 'kpa', CFG, grid, report=False, verbose=False)
    cellmod._DATA.clear()
    xr.testing.assert_allclose(kpa.score, ref.score, rtol=1e-4, atol=1e-7)
    p_phys = kpa.score_phys.sel(field='p', domain='sim', metric='rmse') / ref.score_phys.sel(field='p', domain='sim', metric='rmse')
    np.testing.assert_allclose(p_phys.values, 1000, rtol=1e-3)   # physical pressure scores do change units
    rank = lambda r: r.score.sel(domain='exp', field='all', metric='rmse').squeeze(drop=True).to_series().sort_values().index.tolist()
    assert rank(kpa) == rank(ref)


def test_fewer_experimental_trajectories(tmp_path):
    res = run_experiment(tmp_path / 'n', CFG, Grid(['kolmogorov'], ['S'], ['exp_only'], exp_trajs=(1, None), baselines=False),
                         report=False, verbose=False)
    assert list(res.exp_trajs.values) == [1, 2]   # 'None' is recorded as the split's real count
    assert np.isfinite(res.score.sel(domain='exp', field='all')).all()


def test_run_on_imported_pairs_equals_the_twins(baseline, tmp_path):
    "`data=DIR` runs the grid on NAME_sim.nc / NAME_exp.nc pairs: the twins written to disk give the same scores."
    from simreal_nb.twins.systems import write_twins
    write_twins('kolmogorov', tmp_path / 'data', seed=0, size='test')
    res = run_experiment(tmp_path / 'run', CFG, replace(GRID, systems=None), data=tmp_path / 'data', report=False, verbose=False)
    _, ref = baseline
    assert list(res.system.values) == ['kolmogorov']
    xr.testing.assert_equal(res.score, ref.score)
    with pytest.raises(GridError, match='twin systems'):  # a run directory is tied to its data
        run_experiment(tmp_path / 'run', CFG, GRID, report=False, verbose=False)
    with pytest.raises(GridError, match='no NAME_sim.nc'):
        run_experiment(tmp_path / 'run2', CFG, GRID, data=tmp_path, report=False, verbose=False)


def test_realpdebench_miniature_end_to_end(tmp_path):
    "A RealPDEBench-layout miniature: import, run the grid, report; no hidden truth, and the report says so."
    from simreal_nb.data.realpdebench import import_realpdebench
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    from simreal_nb.reading.report import write_report
    write_example_realpdebench(tmp_path / 'dl', 'cylinder', sim_ids=('1800.h5', '2400.h5', '3000.h5', '3600.h5'), T=12, H=8, W=16)
    import_realpdebench(tmp_path / 'dl', 'cylinder', tmp_path / 'data')
    grid = Grid(None, ['S'], ['sim_only', 'joint'])
    res = run_experiment(tmp_path / 'run', CFG, grid, data=tmp_path / 'data', report=True, verbose=False)
    assert list(res.system.values) == ['cylinder'] and res.truth_score.isnull().all()
    assert res.attrs['exp_target'] == 'measured' and res.noise_floor.isnull().all()  # no truth: exp is the measurement
    xr.testing.assert_equal(res.score.sel(domain='exp', drop=True), res.score_measured.rename(None).assign_attrs(res.score.attrs))
    assert 'imported data are one realisation' in res.attrs['seed_rule'] and res.data_seed.isnull().all()
    s = res.score.sel(field=['u', 'v'], domain=['sim', 'exp'])
    assert list(res.group.values) == ['in_dist', 'out_dist']  # the real data keep RealPDEBench's published test groups
    assert np.isfinite(s.sel(protocol=['sim_only', 'joint'], group='in_dist')).all()
    assert np.isfinite(s.sel(protocol=['sim_only', 'joint'], group='out_dist', domain='exp')).all()
    assert s.sel(group='out_dist', domain='sim').isnull().all()  # the numerical data have no out-of-distribution group
    assert res.score.sel(domain='exp', field='p').isnull().all()  # real pressure is missing, never zeros
    assert 'These data have no hidden truth' in (tmp_path / 'run' / 'report.md').read_text()


def test_imported_pair_that_cannot_be_aligned_is_refused(tmp_path):
    "A sim/exp pair whose grids do not overlap (other units or origin) is refused, naming the files; no cell is written."
    from simreal_nb.twins.systems import write_twins
    from simreal_nb.core.store import read_dataset, write_dataset
    paths = write_twins('kolmogorov', tmp_path / 'data', seed=0, size='test')
    exp = read_dataset(paths['exp'])
    write_dataset(exp.assign_coords(x=exp.x * 1000.0 + 1e4), paths['exp'])  # millimetres from another origin
    with pytest.raises(GridError, match=r'kolmogorov_sim.nc \+ kolmogorov_exp.nc: align_domains: the exp grid .* does not overlap'):
        run_experiment(tmp_path / 'run', CFG, Grid(None, ['S'], ['sim_only']), data=tmp_path / 'data', report=False, verbose=False)
    assert not list((tmp_path / 'run').glob('cells/*.nc'))


def test_seeds_are_replicates_of_the_data(tmp_path):
    "Each seed trains and scores on its own realisation of the twins; data_seed=K fixes it; seeds stay paired."
    d0, d1 = (cellmod.cell_data('kolmogorov', CFG, seed=s)[0] for s in (0, 1))
    assert not torch.equal(d0.sim['train'].data, d1.sim['train'].data) and not torch.equal(d0.exp['test'].data, d1.exp['test'].data)
    assert list(d0.exp_ds['test'].traj.values) == list(d1.exp_ds['test'].traj.values)  # the same held-out trajectories
    key = lambda cfg, s: cellmod.cell_data('kolmogorov', cfg, seed=s)[0].exp['train'].data
    fixed = replace(CFG, data_seed=0)
    assert torch.equal(key(fixed, 1), d0.exp['train'].data) and fixed.seed_rule().endswith('data of seed 0')
    with pytest.raises(ValueError, match='data_seed'):
        replace(CFG, data_seed=1.5)
    grid = Grid(['kolmogorov'], ['S'], ['sim_only'], seeds=2)
    res = run_experiment(tmp_path / 'run', CFG, grid, report=False, verbose=False)
    assert res.data_seed.sel(protocol='sim_only').values.ravel().tolist() == [0.0, 1.0]
    pers = res.score.sel(protocol='persistence', domain='exp', field='all', metric='rmse').squeeze(drop=True)
    assert float(pers.sel(seed=0)) != float(pers.sel(seed=1))  # a data-only baseline differs: another realisation
    ref = run_experiment(tmp_path / 'fixed', fixed, grid, report=False, verbose=False)
    p = ref.score.sel(protocol='persistence').squeeze(drop=True)
    xr.testing.assert_equal(p.sel(seed=0, drop=True), p.sel(seed=1, drop=True))  # fixed data: baselines equal in every seed


def test_equal_exposure_controls_see_joints_exp_batches(tmp_path):
    "Exposure is in every cell file; the controls run after Joint (whatever their order in the grid, whatever the executor) and see at least its exp batches."
    controls = ('exp_only_eq', 'sim_to_exp_eq')
    grid = Grid(['kolmogorov'], ['S'], controls + ('sim_to_exp', 'joint'))  # listed first, computed last
    res = run_experiment(tmp_path / 'run', CFG, grid, report=False, verbose=False)
    assert list(res.protocol.values) == ['sim_to_exp', 'joint', *controls, *BASELINES]
    nb, ns = (res[f'{d}_batches'].squeeze(drop=True) for d in ('exp', 'sim'))
    assert nb.sel(protocol=list(BASELINES)).isnull().all() and ns.sel(protocol=list(BASELINES)).isnull().all()
    j = float(nb.sel(protocol='joint'))
    assert j == float(ns.sel(protocol='joint')) == float(res.steps_done.sel(protocol='joint').squeeze()) == CFG.steps
    assert (nb.sel(protocol=list(controls)) >= j).all() and float(nb.sel(protocol='sim_to_exp')) < j  # the fine-tune's half of the cap
    assert float(ns.sel(protocol='sim_to_exp_eq')) == float(ns.sel(protocol='sim_to_exp')) and float(ns.sel(protocol='exp_only_eq')) == 0
    p = cellmod.exposure_protocol(Cell('kolmogorov', 'S', 'sim_to_exp_eq', 0, CFG.arch), tmp_path / 'run')
    assert p.name == 'sim_to_exp_eq' and p.match == j and [ph.steps for ph in p.phases(CFG.steps)] == [CFG.steps // 2, j]
    cap, typical = cost.cell_cost(Cell('cylinder', 'S', 'exp_only_eq', 0, 'fno'), PRESETS['default'].config, 1.0)
    assert (cap, typical) == (4000, cost.TYPICAL_PHASES['cylinder']['joint'][0])  # Joint's updates at Joint's windows: at most its cap, typically Joint's typical updates
    pool = run_experiment(tmp_path / 'pool', CFG, grid, executor=2, report=False, verbose=False)
    xr.testing.assert_allclose(pool.score, res.score, rtol=1e-4)
    xr.testing.assert_equal(pool.exp_batches, res.exp_batches)
    with pytest.raises(GridError, match="add 'joint'"):
        run_experiment(tmp_path / 'lone', CFG, Grid(['kolmogorov'], ['S'], ['exp_only_eq']), report=False, verbose=False)
    with pytest.raises(GridError, match='Joint cell'):
        jobs.train_job(tmp_path / 'job', 'kolmogorov', 'exp_only_eq', config=CFG, verbose=False)
    # a control past the cap keeps a learning curve of the cells' length: evenly subsampled, first and last validation kept
    from simreal_nb.training.trainer import History
    h, cfg = History('sim_to_exp_eq'), replace(CFG, steps=300, eval_every=10)
    for s in range(10, 450, 10): h.val.add(step=s, phase=0, sim=None, exp=1.0, objective=1 / s)
    step, val = cellmod._curve(h, cfg)
    assert len(step) == 300 // 10 + 3 and step[0] == 10 and step[-1] == 440 and np.isfinite(val).all() and (np.diff(step) > 0).all()


def test_rerun_with_a_smaller_grid_reports_every_cell(baseline, tmp_path):
    "A second run into the same folder with fewer protocols adds nothing and drops nothing: results.nc holds every finished cell."
    _, res = baseline
    d = tmp_path / 'run'
    run_experiment(d, CFG, GRID, report=False, verbose=False)
    again = run_experiment(d, CFG, replace(GRID, protocols=['sim_only']), report=False, verbose=False)
    assert list(again.protocol.values) == list(res.protocol.values)
    xr.testing.assert_identical(again.score, res.score)
    with xr.open_dataset(d / 'results.nc', engine='h5netcdf') as on_disk: assert 'joint' in on_disk.protocol.values


def test_changed_imported_data_is_refused_naming_the_file(tmp_path):
    "The run stamp covers the content of imported files: change one and the rerun refuses, naming it (not '3 cells already done')."
    from simreal_nb.twins.systems import write_twins
    write_twins('kolmogorov', tmp_path / 'data', seed=0, size='test')
    grid = Grid(None, ['S'], ['sim_only'])
    run_experiment(tmp_path / 'run', CFG, grid, data=tmp_path / 'data', report=False, verbose=False)
    write_twins('kolmogorov', tmp_path / 'other', seed=1, size='test')
    os.replace(tmp_path / 'other' / 'kolmogorov_exp.nc', tmp_path / 'data' / 'kolmogorov_exp.nc')  # other content, same name
    with pytest.raises(GridError, match=r'changed since .*kolmogorov_exp\.nc'):
        run_experiment(tmp_path / 'run', CFG, grid, data=tmp_path / 'data', report=False, verbose=False)


def test_imported_exp_without_a_valid_point_is_refused_naming_the_file(tmp_path):
    "An exp file whose every vector is flagged invalid is refused before anything trains, naming the file."
    from simreal_nb.twins.systems import write_twins
    from simreal_nb.core.store import read_dataset, write_dataset
    write_twins('kolmogorov', tmp_path / 'data', seed=0, size='test')
    f = tmp_path / 'data' / 'kolmogorov_exp.nc'
    exp = read_dataset(f, domain='exp')
    write_dataset(exp.assign(valid=exp['valid'] & False), f, validate=False)
    with pytest.raises(GridError, match=r'kolmogorov_exp\.nc: no valid point'):
        run_experiment(tmp_path / 'run', CFG, Grid(None, ['S'], ['sim_only']), data=tmp_path / 'data', report=False, verbose=False)
    assert not list((tmp_path / 'run').glob('cells/*.nc'))


def test_estimate_wall_time_follows_the_pools_hand_out():
    "The estimate's wall time over N lanes is a worker's start plus the pool's heaviest-first hand-out: between the sum / N and the sum, and the sum on one lane."
    grid = Grid(['kolmogorov'], ['S'], ['sim_only', 'exp_only', 'sim_to_exp', 'joint'])
    cells = grid.cells(CFG.arch)
    one, two = (cost.estimate_cost(cells, CFG, 'cpu', probe_steps=1, lanes=n) for n in (1, 2))
    for k in ('typical', 'max'):
        assert one[f'{k}_wall_s'] == pytest.approx(one[f'{k}_train_s'] + one['start_s'], abs=0.11)  # one lane: its start, then the sum
        assert two[f'{k}_train_s'] / 2 <= two[f'{k}_wall_s'] - two['start_s'] < two[f'{k}_train_s']
    assert cost.lanes_wall_s([3., 1., 1., 1.], 2) == 3. and cost.lanes_wall_s([1., 1., 1., 3.], 2) == 4.
    assert cost.lanes_wall_s([3., 1., 1., 1.], 2, start=2.) == 5.
