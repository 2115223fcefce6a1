"""The fourth round of faults, tried as careless and unlucky users would: units compared before a pair is used, the
report behind the run's lock, `--workers` within what the machine holds, closed pipes, settings range-checked where
they enter, data sizes and checkpoint contents checked before work, run files read back checked, messages that name
what they mean, and stops that stop. Every refusal is one line and exit status 2, before any work is paid for.

The runs here are the smallest preset on one system, in a subprocess as a user runs them, with OMP_NUM_THREADS=1."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
import xarray as xr
from simreal_nb.core.store import write_dataset
from test_cli_errors import check_user_error  # one line, exit 2, no traceback

ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'


def simreal(*args, timeout=600, env=None, cwd=None):
    return subprocess.run([sys.executable, '-c', CODE, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**ENV, **(env or {})}, cwd=cwd)


def load(path):
    with xr.open_dataset(path, engine='h5netcdf') as d: return d.load()


@pytest.fixture(scope='module')
def twins(tmp_path_factory):
    "The cylinder twin at test size, as `simreal data make` writes it."
    t = tmp_path_factory.mktemp('twins')
    r = simreal('data', 'make', 'cylinder', '--size', 'test', '--out', t)
    assert r.returncode == 0, r.stderr[-2000:]
    return t


def pair(folder, twins, exp=None, sim=None):
    "A NAME_sim.nc + NAME_exp.nc pair in `folder`, written on their own (no set file); `exp`, `sim`: changes."
    folder.mkdir(parents=True, exist_ok=True)
    for kind, change in (('sim', sim), ('exp', exp)):
        ds = load(twins / f'cylinder_{kind}.nc')
        write_dataset(ds if change is None else change(ds), folder / f'cylinder_{kind}.nc')
    return folder


def in_mm(ds):
    "`ds` with u, v in mm s-1 (values and reference scales x 1000)."
    out = ds.copy()
    for f in ('u', 'v'):
        out[f] = (ds[f] * 1000).astype('float32').assign_attrs(ds[f].attrs, units='mm s-1')
        out.attrs[f'scale_{f}'] = ds.attrs[f'scale_{f}'] * 1000
    return out


# ---------------------------------------------------------------------------------------------------- 1. units
def test_exp_in_mm_per_s_is_converted_to_the_sims_units(twins, tmp_path):
    "An exp in mm s-1 beside a sim in m s-1: read back in m s-1 (the same numbers as the m/s pair), and said."
    from simreal_nb.study.cell import load_domains
    from simreal_nb.study.grid import PRESETS
    cfg = PRESETS['test'].config
    d = load_domains('cylinder', cfg, pair(tmp_path / 'mm', twins, exp=in_mm))
    ref = load(twins / 'cylinder_exp.nc')
    assert d['exp'].u.attrs['units'] == 'm s-1' and d['exp'].attrs['scale_u'] == pytest.approx(ref.attrs['scale_u'])
    assert np.allclose(d['exp'].u.values, ref.u.values, rtol=1e-6, equal_nan=True)
    from simreal_nb.face import cli
    import contextlib, io
    out = io.StringIO()
    with contextlib.redirect_stdout(out): cli._check_pair_units(tmp_path / 'mm', 'cylinder')
    assert "exp u in 'mm s-1', converted to the sim's 'm s-1'" in out.getvalue(), out.getvalue()


def test_units_without_a_conversion_are_refused_before_work(twins, tmp_path):
    "A unit the package cannot convert (or another quantity) refuses the run at once, naming the files and units."
    bad = lambda ds: ds.assign(u=ds.u.assign_attrs(units='furlong fortnight-1'))
    r = simreal('run', '--preset', 'test', '--data', pair(tmp_path / 'd', twins, exp=bad), '--workers', '0',
                '--out', tmp_path / 'run', timeout=120)
    check_user_error(r, '--data', 'cylinder_exp.nc', "'furlong fortnight-1'", 'converts')
    assert not (tmp_path / 'run').exists()
    kpa = lambda ds: ds.assign(u=ds.u.assign_attrs(units='kPa'))
    r = simreal('run', '--preset', 'test', '--data', pair(tmp_path / 'q', twins, exp=kpa), '--workers', '0',
                '--out', tmp_path / 'run', timeout=120)
    check_user_error(r, "'kPa' beside 'm s-1'", 'different quantities')


def test_piv_units_nothing_converts_are_refused(tmp_path):
    "`data import piv --units mm,mps`: refused naming --units, before any file is read; read_piv says the same."
    from simreal_nb.data.piv import read_piv, PIVFormatError
    (tmp_path / 'a.txt').write_text('0 0 1 1\n1 0 1 1\n0 1 1 1\n1 1 1 1\n')
    r = simreal('data', 'import', 'piv', tmp_path / 'a.txt', '--units', 'mm,mps', '--dt', '0.1',
                '--out', tmp_path / 'o')
    check_user_error(r, '--units mm,mps', "velocity unit 'mps'", 'mm s-1')
    assert not (tmp_path / 'o').exists()
    with pytest.raises(PIVFormatError, match="velocity unit 'mps' is not one the package converts"):
        read_piv(tmp_path / 'a.txt', units=('mm', 'mps'), dt=0.1)
    assert read_piv(tmp_path / 'a.txt', units=('mm', 'mm/s'), dt=0.1).u.attrs['units'] == 'mm s-1'


# ---------------------------------------------------------------------------------------------------- 2. the run's lock
@pytest.fixture(scope='module')
def finished(tmp_path_factory):
    "A finished run: the test preset, the cylinder, Joint and the baselines."
    out = tmp_path_factory.mktemp('run') / 'run'
    r = simreal('run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'joint', '--workers', '0',
                '--out', out)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_report_waits_for_no_run_and_writes_nothing_beside_one(finished, tmp_path):
    "While a run holds its folder's lock, `report` (and `physics-check`) refuse in one line and write nothing."
    run = tmp_path / 'run'
    shutil.copytree(finished, run)
    for f in ('report.md', 'scores.nc'): (run / f).unlink()
    holder = subprocess.Popen([sys.executable, '-c', 'import sys, time; from simreal_nb.study.rundir import RunLock; '
                               'RunLock(sys.argv[1]).acquire(); print("held", flush=True); time.sleep(60)', str(run)],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == 'held'
        r = simreal('report', run, timeout=120)
        check_user_error(r, f'RUN_DIR {run}', f'a run is writing it (process {holder.pid})', 'wait for that run')
        assert not (run / 'report.md').exists() and not (run / 'scores.nc').exists()
        r = simreal('physics-check', run, '--max-windows', '1', timeout=120)
        check_user_error(r, 'a run is writing it')
        assert not (run / 'physics.json').exists()
    finally:
        holder.kill(); holder.wait()
    r = simreal('report', run, timeout=300)
    assert r.returncode == 0 and (run / 'report.md').exists() and (run / 'scores.nc').exists(), r.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------- 3. --workers
def test_workers_are_capped_by_the_machine_and_the_probe_does_not_grow(tmp_path):
    "`--workers 1000`: one note, the pool and the cost probe sized by the machine; a modest peak memory."
    import resource
    from simreal_nb.study.cost import machine_workers
    cores, fits, _ = machine_workers()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = simreal('run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'joint', '--workers', 1000,
                '--out', tmp_path / 'run')
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest process waited for so far
    assert r.returncode == 0, r.stderr[-3000:]
    assert f'--workers 1000: this machine holds {min(cores, fits)} worker(s)' in r.stdout, r.stdout[:2000]
    assert (tmp_path / 'run' / 'results.nc').exists()
    assert peak_mib < 3000, (peak_mib, before)


# ---------------------------------------------------------------------------------------------------- 4. pipes
@pytest.mark.parametrize('args', [['data', 'list'], ['--help'], ['--version'], ['run', '--help']])
def test_output_to_a_closed_pipe_ends_quietly(args, tmp_path):
    "`simreal data list | head -0`: exit 0, nothing on stderr (no BrokenPipeError traceback)."
    r = subprocess.run(['bash', '-c', f"{sys.executable} -c {CODE!r} {' '.join(args)} | head -0; "
                                      "echo rc=${PIPESTATUS[0]} >&2"], capture_output=True, text=True, env=ENV,
                       timeout=120)
    assert r.stderr.strip() == 'rc=0', r.stderr[-2000:]


@pytest.mark.parametrize('both', [False, True])
def test_a_run_into_a_closed_pipe_finishes_and_writes_its_files(both, tmp_path):
    "`simreal run ... | head -1` (stderr into the pipe too, or not): the run goes on to the end and writes results.nc."
    out = tmp_path / 'run'
    r = subprocess.run(['bash', '-c', f"{sys.executable} -c {CODE!r} run --preset test --systems cylinder --protocols "
                                      f"joint --workers 0 --out {out} {'2>&1' if both else '2>err.txt'} | head -1; "
                                      "echo rc=${PIPESTATUS[0]} >&2"], capture_output=True, text=True, env=ENV,
                       timeout=600, cwd=tmp_path)
    assert r.stdout.strip() == f'4 cells (0 already done) -> {out}', r.stdout
    assert r.stderr.strip() == 'rc=0', r.stderr[-2000:]
    assert 'Traceback' not in ((tmp_path / 'err.txt').read_text() if not both else '')
    for f in ('results.nc', 'report.md', 'scores.nc', 'timing.json'): assert (out / f).exists(), f


# ---------------------------------------------------------------------------------------------------- 5. settings
SETTINGS = {  # [config] key = TOML value -> what the one line names
    'lr = 1e400': ['config.lr', 'a finite number > 0', 'inf'],
    'lr = nan': ['config.lr', 'a finite number > 0', 'nan'],
    'batch_size = 0': ['config.batch_size', 'an integer >= 1', 'got 0'],
    'eval_every = 0': ['config.eval_every', 'an integer >= 1'],
    'eval_windows = 0': ['config.eval_windows', 'an integer >= 1 or none'],
    'min_delta = -inf': ['config.min_delta', 'a fraction in [0, 1)'],
    'fracs = [0.5, 0.3, 0.3]': ['config.fracs', 'summing to 1', 'sum 1.1'],
    'fracs = [0.5, 0.5]': ['config.fracs', 'three fractions'],
    'horizon = 19': ['horizon 19', "cylinder's trajectories have 20 frames", 'expected horizon <= 18'],
    'n_out = 30': ['n_out 30', 'expected n_out <= 18'],
    'n_in = 20': ['n_in 20', 'expected n_in + n_out <= 20'],
}


@pytest.mark.parametrize('line', SETTINGS)
def test_settings_out_of_range_are_refused_where_they_enter(line, tmp_path):
    "A [config] value out of range, or beyond the trajectories: one line naming the key, exit 2, nothing made."
    f = tmp_path / 'c.toml'
    f.write_text(f'preset = "test"\n[config]\n{line}\n')
    r = simreal('run', '--config', f, '--systems', 'cylinder', '--workers', '0', '--out', tmp_path / 'run', timeout=120)
    check_user_error(r, *SETTINGS[line])
    assert not (tmp_path / 'run').exists()


def test_the_library_refuses_the_same_settings():
    "GridConfig refuses what the file does (a Python user, a manifest read back): GridError naming the setting."
    from dataclasses import replace
    from simreal_nb.study.grid import PRESETS, GridError
    c = PRESETS['test'].config
    for kw, says in [(dict(lr=float('inf')), 'lr:'), (dict(batch_size=0), 'batch_size:'), (dict(lr='0.002'), 'lr:'),
                     (dict(steps=True), 'steps:'), (dict(fracs=(0.7, 0.2, 0.2)), 'fracs:'),
                     (dict(schedule='linear'), 'schedule:')]:
        with pytest.raises(GridError, match=says): replace(c, **kw)
    for p in PRESETS.values(): assert replace(p.config) == p.config  # every preset passes


def test_a_hand_edited_manifest_value_of_another_type_is_named(finished, tmp_path):
    "A manifest whose config.lr became a string: physics-check names the manifest in one line; a resumed run refuses."
    run = tmp_path / 'run'
    shutil.copytree(finished, run)
    m = json.loads((run / 'manifest.json').read_text())
    m['config']['lr'] = str(m['config']['lr'])
    (run / 'manifest.json').write_text(json.dumps(m))
    r = simreal('physics-check', run, '--max-windows', '1', timeout=120)
    check_user_error(r, 'manifest.json', "its config is not a GridConfig's settings", 'lr: expected a finite number')
    r = simreal('run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'joint', '--workers', '0', '--out',
                run, timeout=120)
    check_user_error(r, 'other settings', "'lr'")


# ---------------------------------------------------------------------------------------------------- 9. messages
def test_a_deleted_working_folder_is_named(tmp_path):
    "Run from a folder deleted under the shell: one line naming it, exit 2 (not oneMKL's loader failing)."
    gone = tmp_path / 'gone'
    gone.mkdir()
    script = (f"cd {gone} && rmdir {gone} && {sys.executable} -c {CODE!r} run --preset test --workers 0 "
              f"--out {tmp_path / 'r'}")
    r = subprocess.run(['bash', '-c', script], capture_output=True, text=True, env=ENV, timeout=120)
    check_user_error(r, f'the current folder {gone} no longer exists', 'cd to one')
    assert 'oneMKL' not in r.stderr and not (tmp_path / 'r').exists()


@pytest.fixture
def download(tmp_path):
    "A RealPDEBench cylinder download as upstream lays it out (HDF5), small."
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    write_example_realpdebench(tmp_path / 'rb', 'cylinder')
    return tmp_path / 'rb'


def test_a_nan_time_is_named_where_it_is(download, tmp_path):
    "A NaN in a trajectory's time array: the file and the frame named, not clocks differing 'by up to nan s'."
    import h5py
    f = sorted((download / 'cylinder' / 'real').glob('*.h5'))[1]
    with h5py.File(f, 'r+') as h: h['t'][3] = np.nan
    r = simreal('data', 'import', 'realpdebench', download, '--scenario', 'cylinder', '--out', tmp_path / 'o',
                timeout=120)
    line = check_user_error(r, f.name, 'its time array holds nan at frame 3', 'finite times', '--clock index')
    assert 'by up to' not in line


def test_an_all_zero_field_says_what_the_command_line_can_do(download, tmp_path):
    "An all-zero simulation (the scales' source): the message points to --frames / --sim-ids, and to scales= as Python's."
    import h5py
    for f in (download / 'cylinder' / 'numerical').glob('*.h5'):
        with h5py.File(f, 'r+') as h:
            for k in ('u', 'v'): h['measured_data'][k][...] = 0
    r = simreal('data', 'import', 'realpdebench', download, '--scenario', 'cylinder', '--out', tmp_path / 'o',
                timeout=120)
    check_user_error(r, "reference scale of 'u'", '--frames, --sim-ids', 'Python: load_realpdebench(..., scales=')


# ---------------------------------------------------------------------------------------------------- 7. checkpoints
@pytest.mark.parametrize('damage', ['no state dict', 'nan weights'])
def test_a_damaged_init_checkpoint_is_refused_naming_the_file(damage, finished, tmp_path):
    "`run --init` a checkpoint without its state dict, or with NaN weights: one line naming the file, nothing made."
    import torch
    ck = torch.load(next((finished / 'cells').glob('*/model.pt')), weights_only=True)
    if damage == 'no state dict': del ck['state_dict']
    else: next(iter(ck['state_dict'].values())).view(-1)[0] = float('nan')
    bad = tmp_path / 'bad.pt'
    torch.save(ck, bad)
    r = simreal('run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'joint', '--init', bad,
                '--workers', '0', '--out', tmp_path / 'run', timeout=300)
    check_user_error(r, str(bad), 'holds no state_dict' if damage == 'no state dict' else 'weights hold NaN or inf')
    assert not (tmp_path / 'run').exists()


def test_a_morph_position_table_without_time_rows_is_named(tmp_path):
    "A MORPH checkpoint whose position table has zero time rows: a MorphCheckpointError naming the file."
    import torch
    from simreal_nb.models.morph import MorphCheckpointError, morph_state
    from simreal_nb.models.nets import MorphField
    from simreal_nb.models.factory import init_weights
    sd = morph_state(torch.load(Path(__file__).parent / 'data' / 'morph' / 'morph_tiny_ckpt.pt', weights_only=True))
    sd['pos_encoding.pos_embedding'] = sd['pos_encoding.pos_embedding'][:, :0]
    torch.save({'model_state_dict': sd}, tmp_path / 'rows.pt')
    model = MorphField(grid=(8, 12), n_in=2, patch_size=4, dim=16, depth=2, heads=2, heads_xa=4, mlp_dim=32,
                       conv_filter=16, max_patches=16)
    with pytest.raises(MorphCheckpointError, match=r'rows\.pt: position table: 0 time rows; expected at least 1'):
        init_weights(model, tmp_path / 'rows.pt')


# ---------------------------------------------------------------------------------------------------- 8. run files
def test_a_results_attribute_that_is_not_json_is_named(finished, tmp_path):
    "A results.nc whose config attribute was hand-edited out of JSON: `report` names the file and the attribute."
    import h5py
    run = tmp_path / 'run'
    shutil.copytree(finished, run)
    with h5py.File(run / 'results.nc', 'r+') as h: h.attrs['config'] = '{lr: 0.002'
    r = simreal('report', run, timeout=300)
    check_user_error(r, str(run / 'results.nc'), "attribute 'config'", 'not a JSON object', 'simreal run')


def test_a_truncated_results_file_given_to_the_inspector_is_named(finished, tmp_path):
    "A results.nc cut short, given to the λ inspector: a RunFileError naming the file (not a bare h5py error)."
    from simreal_nb.core.store import RunFileError
    from simreal_nb.reading.inspector import results_score, state_at
    (tmp_path / 'results.nc').write_bytes((finished / 'results.nc').read_bytes()[:4000])
    for f in (tmp_path / 'results.nc', tmp_path):
        with pytest.raises(RunFileError, match=r'results\.nc: not a readable netCDF file, truncated or corrupt'):
            results_score(f)
    with pytest.raises(RunFileError, match=str(tmp_path / 'results.nc')): state_at(tmp_path)


# ---------------------------------------------------------------------------------------------------- 6. sizes
def test_a_small_file_declaring_huge_frames_is_refused_before_allocation(tmp_path):
    "A PIVlab .mat of a few KiB declaring 60000x60000 doubles: one line naming it and 26.8 GiB, nothing allocated."
    import h5py, resource
    with h5py.File(tmp_path / 'big.mat', 'w') as h:  # MATLAB v7.3 is HDF5: chunks never written take no space
        for k in ('x', 'y', 'u_original', 'v_original', 'typevector_original'):
            h.create_dataset(k, shape=(60000, 60000), dtype='f8', chunks=(1000, 1000))
    assert (tmp_path / 'big.mat').stat().st_size < 1 << 20
    r = simreal('data', 'import', 'piv', tmp_path / 'big.mat', '--units', 'mm,m/s', '--dt', '0.1',
                '--out', tmp_path / 'o', timeout=120)
    check_user_error(r, 'big.mat', 'of shape (60000, 60000) float64 would take 26.8 GiB', 'memory budget')
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 3 << 20  # KiB: under 3 GiB
    assert not (tmp_path / 'o').exists()


def test_read_dataset_checks_the_declared_size_against_the_budget(twins, monkeypatch):
    "read_dataset compares what a file declares with the stated budget (SIMREAL_MEMORY_GIB) before reading it."
    from simreal_nb.core.store import read_dataset, DataSizeError
    assert read_dataset(twins / 'cylinder_sim.nc').sizes['traj'] > 0
    monkeypatch.setenv('SIMREAL_MEMORY_GIB', '1e-6')
    with pytest.raises(DataSizeError, match=r'cylinder_sim\.nc: its variables .* more than the memory budget of 0\.0 '
                                            r'GiB \(SIMREAL_MEMORY_GIB\)'):
        read_dataset(twins / 'cylinder_sim.nc')


# ---------------------------------------------------------------------------------------------------- 10. stops
@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_docs_stops_on_a_signal_and_ends_its_kernels(sig, tmp_path):
    """`simreal docs` sent SIGTERM or SIGINT while kernels run: it stops within seconds, starts no other kernel, ends
    its kernels and says where it stopped."""
    import nbformat
    nbs = tmp_path / 'nbs'
    nbs.mkdir()
    for k in range(4):  # each notebook's kernel writes its pid, then waits
        cell = nbformat.v4.new_code_cell(f"import os, time; open({str(tmp_path / f'pid{k}')!r}, 'w').write("
                                         "str(os.getpid())); time.sleep(300)")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f'# N{k}'), cell]),
                       nbs / f'n{k}.ipynb')
    code = ('import pathlib, simreal_nb.face.docs as d; d.web_assets = lambda *a, **k: None; '
            f'd.default_nbs_path = lambda: pathlib.Path({str(nbs)!r}); {CODE}')
    p = subprocess.Popen([sys.executable, '-c', code, 'docs', '--out', tmp_path / 'site', '--workers', '2'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob('pid*'))) < 2 and time.monotonic() < deadline and p.poll() is None: time.sleep(0.2)
    assert len(list(tmp_path.glob('pid*'))) == 2, p.communicate(timeout=10)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - t0 < 30, time.monotonic() - t0
    assert p.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert 'Traceback' not in err, err
    assert 'docs: stopped with 0 of 4 pages written to' in err and 'ended the kernels of n0.ipynb, n1.ipynb' in err, err
    time.sleep(2)
    assert sorted(f.name for f in tmp_path.glob('pid*')) == ['pid0', 'pid1']  # no other kernel started
    for f in tmp_path.glob('pid*'):
        pid = int(f.read_text())
        with pytest.raises(ProcessLookupError): os.kill(pid, 0)  # its kernels ended
