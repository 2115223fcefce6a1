"""Faults lose nothing: `simreal run` killed with SIGKILL at random moments and run again ends bit for bit like an
uninterrupted run; torn or foreign files in a run directory are never read as valid; two runs on one `--out` cannot
corrupt each other (a lock); a full disk while writing the results leaves the previous results intact.

Every run here is `simreal run --preset test --systems cylinder,kolmogorov --workers 0`: the smallest preset on two of
its four systems (12 cells, to keep the whole file near three minutes on two shared cores), in a subprocess as a user
runs it, with OMP_NUM_THREADS=1 like the other subprocess tests, so that runs compared bit for bit use one torch thread.
`--workers 0` trains in the process that is killed; that the workers of a local pool (`--workers N`) die with a killed
run is tested on its own."""
import errno, json, os, random, re, shutil, signal, subprocess, sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
import pytest
import torch
import xarray as xr
from simreal_nb.face import cli
from simreal_nb.core.store import RunFileError
from simreal_nb.study.grid import PRESETS, GridError, Cell
from simreal_nb.study.rundir import RunLock, cell_path, foreign_cell, open_cell_file, check_cells, run_stamp
from simreal_nb.study.experiment import run_experiment
from simreal_nb.core.store import write_dataset

torch.set_num_threads(1)
ARGS = ['run', '--preset', 'test', '--systems', 'cylinder,kolmogorov', '--workers', '0']
ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'
GRID = replace(PRESETS['test'].grid, systems=('cylinder', 'kolmogorov'))  # the cells of ARGS
TIMING = ('train_s', 'eval_s')  # wall-clock seconds: the only variables that may differ between two runs


def simreal(*args, timeout=600):
    return subprocess.run([sys.executable, '-c', CODE, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=ENV)


def start(out):
    "`simreal run` in the background (its own session, so that a kill reaches only what we name)."
    return subprocess.Popen([sys.executable, '-c', CODE, *ARGS, '--out', str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


def load(path):
    with xr.open_dataset(path, engine='h5netcdf') as d: return d.load()


def assert_bitwise(a, b):
    "Every variable but the timings equal bit for bit (NaN where NaN); `score` first."
    names = ['score'] + sorted(v for v in b.data_vars if v not in TIMING and v != 'score')
    assert sorted(a.data_vars) == sorted(b.data_vars)
    for v in names:
        xa, xb = a[v].transpose(*b[v].dims), b[v]
        assert xa.dims == xb.dims and xa.shape == xb.shape, v
        for d in xb.dims: assert list(a[d].values) == list(b[d].values), (v, d)
        if not np.issubdtype(xb.dtype, np.number): assert (xa.values == xb.values).all(), f'{v} differs'; continue  # labels
        assert np.array_equal(xa.values, xb.values, equal_nan=True), f'{v} differs: max |diff| {np.nanmax(np.abs(xa.values - xb.values))}'


def alive(pid):
    try: return Path(f'/proc/{pid}/stat').read_text().split(')')[-1].split()[0] not in ('Z', 'X')
    except OSError: return False


def survivors(pids, limit=10):
    "The processes of `pids` still alive after waiting up to `limit` seconds for them to end."
    deadline = time.time() + limit
    while any(alive(p) for p in pids) and time.time() < deadline: time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    "An uninterrupted run."
    out = tmp_path_factory.mktemp('ref') / 'run'
    t = time.perf_counter()
    r = simreal(*ARGS, '--out', out)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, load(out / 'results.nc'), time.perf_counter() - t


# ---------------------------------------------------------------------------------------------------- SIGKILL
def _wait(p, ready, limit=240):
    "Poll until `ready()` or the process ends; True if `ready()` came first."
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < limit:
        if ready(): return True
        time.sleep(0.005)
    return False


def test_sigkill_at_random_moments_loses_nothing(reference, tmp_path):
    "Kill mid-cell, between cells, at a random moment and while the results are written; rerun until done: bitwise equal."
    ref_dir, ref, ref_s = reference
    rng = random.Random(15)
    out = tmp_path / 'run'
    cells = lambda: {p.name for p in (out / 'cells').glob('*.nc')}
    def mid_cell():  # a checkpoint of a cell that has no result yet
        return any(not (out / 'cells' / f'{p.parent.name}.nc').exists() for p in (out / 'cells').glob('*/last.pt'))
    def cells_after(k):
        n0 = len(cells()) if out.exists() else 0
        return lambda: len(cells()) >= n0 + k
    def after(s):
        t = time.time() + s
        return lambda: time.time() > t
    def writing_results():  # the temporary file of results.nc, or results.nc being replaced
        return any(re.match(r'^\.results\.nc\.[0-9a-f]{32}\.tmp$', p.name) for p in out.glob('.results.nc.*.tmp'))
    plan = [('mid-cell', lambda: mid_cell, rng.uniform(0, 0.3)), ('between cells', lambda: cells_after(rng.randint(1, 3)), 0.0),
            ('random moment', lambda: after(rng.uniform(3, 10)), 0.0), ('writing results', lambda: writing_results, 0.0)]
    done, log = False, []
    t0 = time.perf_counter()
    for name, trigger, delay in plan:
        p = start(out)
        hit = _wait(p, trigger())
        if hit:
            time.sleep(delay)
            p.send_signal(signal.SIGKILL); p.wait()
        else:
            p.wait()
            assert p.returncode == 0, p.stderr.read()[-3000:]
            done = True
        log.append((name, hit, p.returncode))
        if done: break
    while not done:  # the same command until it completes
        r = simreal(*ARGS, '--out', out)
        assert r.returncode == 0, r.stderr[-3000:]
        done = True
    print(f'kills: {log}; {time.perf_counter() - t0:.0f} s in all, uninterrupted {ref_s:.0f} s')
    killed = [n for n, hit, _ in log if hit]
    assert len(killed) >= 3 and {'mid-cell', 'between cells'} <= set(killed), log
    assert_bitwise(load(out / 'results.nc'), ref)
    assert not list(out.rglob('*.tmp')), 'temporary files of the killed runs were left behind'
    assert (out / 'report.md').exists() and json.loads((out / 'timing.json').read_text())['_run_s'] > 0


def test_pool_workers_exit_with_a_killed_run():
    "The workers of `--workers N` (`executors.local_pool`) exit when the run that started them is SIGKILLed: no orphan writes on."
    code = ("import os, sys, time\nfrom simreal_nb.study.executors import local_pool\nex = local_pool(2)\n"
            "pids = {f.result() for f in [ex.submit(os.getpid) for _ in range(8)]}\n"
            "print(' '.join(map(str, pids)), flush=True)\ntime.sleep(600)")
    p = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    try:
        workers = [int(w) for w in p.stdout.readline().split()]
        assert workers and p.pid not in workers
        p.send_signal(signal.SIGKILL); p.wait()
        left = survivors(workers)
        assert not left, f'pool workers outlived the killed run: {left}'
    finally:
        if p.poll() is None: p.kill(); p.wait()


# ---------------------------------------------------------------------------------------------------- torn and foreign files
def test_torn_cell_and_unreadable_checkpoint_are_computed_again(reference, tmp_path):
    "A cell file cut short and a checkpoint of random bytes are never read: the cells are trained again, bitwise the same."
    ref_dir, ref, _ = reference
    out = tmp_path / 'run'
    shutil.copytree(ref_dir, out)
    cfg = PRESETS['test'].config
    torn = cell_path(out, Cell('kolmogorov', 'S', 'joint', 0, cfg.arch))
    torn.write_bytes(torn.read_bytes()[:torn.stat().st_size // 2])
    junk = Cell('cylinder', 'S', 'sim_to_exp', 0, cfg.arch)
    cell_path(out, junk).unlink()  # the cell had not finished: its checkpoint is what a resumed run reads
    ck = out / 'cells' / junk.key / 'last.pt'
    ck.write_bytes(os.urandom(ck.stat().st_size))
    (out / 'cells' / f'.{junk.key}.nc.{"0" * 32}.tmp').write_bytes(b'half a file')  # left by a killed writer
    r = simreal(*ARGS, '--out', out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'not a readable netCDF file' in r.stdout and 'computing the cell again' in r.stdout
    assert 'set aside as last.pt.unreadable' in r.stderr and (ck.parent / 'last.pt.unreadable').exists()
    assert '1 temporary file(s) of a killed run removed' in r.stdout and not list(out.rglob('*.tmp'))
    assert_bitwise(load(out / 'results.nc'), ref)
    assert open_cell_file(torn).attrs['cell'] == Cell('kolmogorov', 'S', 'joint', 0, cfg.arch).key


def test_foreign_files_are_refused(reference, tmp_path):
    "A readable netCDF that is not this cell of this run is refused with one line naming it; never mixed into results."
    ref_dir, ref, _ = reference
    cfg = PRESETS['test'].config
    out = tmp_path / 'run'
    shutil.copytree(ref_dir, out)
    target = cell_path(out, Cell('cylinder', 'S', 'exp_only', 0, cfg.arch))
    keep = target.read_bytes()
    other = open_cell_file(target).assign_attrs(run='0123456789abcdef')  # the same cell from a run with other settings
    write_dataset(other, target, validate=False)
    r = simreal(*ARGS, '--out', out)  # as a user sees it: one line, exit status 2, nothing computed
    assert r.returncode == 2 and 'Traceback' not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert target.name in r.stderr and 'a run with other settings' in r.stderr and 'delete it' in r.stderr
    cases = {'is the result of cell': cell_path(out, Cell('cylinder', 'S', 'joint', 0, cfg.arch)).read_bytes(),  # another cell's file
             'holds no `score`': None}
    from simreal_nb.twins.systems import write_twins
    cases['holds no `score`'] = Path(write_twins('kolmogorov', tmp_path / 'twins', size='test')['sim']).read_bytes()  # a dataset
    for says, content in cases.items():
        target.write_bytes(content)
        with pytest.raises(GridError, match=re.escape(says)):
            run_experiment(out, cfg, GRID, report=False, verbose=False)
    target.write_bytes(keep)
    assert check_cells(out, GRID.cells(cfg.arch), run_stamp(cfg), verbose=False) == []
    assert foreign_cell(open_cell_file(target), Cell('cylinder', 'S', 'exp_only', 0, cfg.arch), run_stamp(cfg)) is None


@pytest.mark.parametrize('name,content,says', [('manifest.json', '{"version": ', 'manifest.json: not valid JSON'),
                                                ('timing.json', '\x00\x01 not json', 'timing.json: not valid JSON'),
                                                ('manifest.json', '[1, 2]', 'manifest.json: holds a JSON list')])
def test_corrupt_json_is_a_clear_error(reference, tmp_path, name, content, says):
    ref_dir, _, _ = reference
    out = tmp_path / 'run'
    shutil.copytree(ref_dir, out)
    (out / name).write_text(content)
    with pytest.raises(RunFileError, match=re.escape(says)):
        run_experiment(out, PRESETS['test'].config, GRID, report=False, verbose=False)


def test_corrupt_results_is_a_clear_error(reference, tmp_path):
    from simreal_nb.reading.report import write_report
    ref_dir, _, _ = reference
    out = tmp_path / 'run'
    shutil.copytree(ref_dir, out)
    good = (out / 'results.nc').read_bytes()
    (out / 'results.nc').write_bytes(good[:len(good) // 3])
    with pytest.raises(RunFileError, match='results.nc: not a readable netCDF file, truncated or corrupt'):
        write_report(out)


# ---------------------------------------------------------------------------------------------------- two runs, one --out
def test_second_run_on_the_same_out_is_refused(reference, tmp_path):
    "While one `simreal run` holds --out, a second refuses at once (one line naming the first's pid, status 2)."
    ref_dir, ref, _ = reference
    out = tmp_path / 'run'
    first = start(out)
    try:
        assert _wait(first, lambda: (out / '.lock').exists() and (out / '.lock').read_text().strip() == str(first.pid), 120), \
            first.stderr.read()[-2000:]
        t = time.perf_counter()
        second = simreal(*ARGS, '--out', out)
        took = time.perf_counter() - t
        if first.poll() is not None: pytest.skip('the first run ended before the second one started (machine too fast?)')
        assert second.returncode == 2 and 'Traceback' not in second.stderr, second.stderr[-2000:]
        line, = second.stderr.strip().splitlines()
        assert f'is in use by process {first.pid}' in line and str(out) in line and 'another --out' in line, line
        assert took < 30  # at once, not after waiting for the first run
    finally:
        if first.poll() is None: first.send_signal(signal.SIGKILL)
        first.wait()
    with RunLock(out): pass  # the killed run's lock went with it: the same command can finish its work


# ---------------------------------------------------------------------------------------------------- full disk
def test_full_disk_while_writing_results_keeps_the_previous_ones(reference, tmp_path, monkeypatch, capsys):
    "The disk fills up halfway through results.nc: status 2 with one line, the previous results.nc intact and readable."
    ref_dir, ref, _ = reference
    out = tmp_path / 'run'
    shutil.copytree(ref_dir, out)
    before = (out / 'results.nc').read_bytes()
    from simreal_nb.core import store
    real = store._write_synced  # the plain write of the bytes netCDF made in memory (tests/test_full_disk.py: on a real full disk)
    def full(path, data):
        if Path(path).name.startswith('.results.nc.'):
            with open(path, 'wb') as f: f.write(bytes(data)[:len(data) // 2])  # what got onto the disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)
    monkeypatch.setattr(store, '_write_synced', full)
    with pytest.raises(SystemExit) as e:
        cli.main([*ARGS[:3], '--workers', '0', '--out', str(out)])
    assert e.value.code == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and 'No space left on device' in line, line
    assert (out / 'results.nc').read_bytes() == before and not list(out.glob('.results.nc.*'))
    assert_bitwise(load(out / 'results.nc'), ref)


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA device is visible here')
def test_missing_cuda_is_refused_before_anything_is_created(tmp_path):
    with pytest.raises(GridError, match="device 'cuda': no CUDA device is visible here"):
        run_experiment(tmp_path / 'run', PRESETS['test'].config, GRID, device='cuda', report=False, verbose=False)
    assert not (tmp_path / 'run').exists()


# ---------------------------------------------------------------------------------------------------- interrupts
def _children(pid):
    "Live processes whose parent is `pid`."
    out = []
    for d in Path('/proc').iterdir():
        if not d.name.isdigit(): continue
        try: rest = (d / 'stat').read_text().rsplit(')', 1)[1].split()
        except OSError: continue
        if int(rest[1]) == pid and rest[0] not in ('Z', 'X'): out.append(int(d.name))
    return out


def _interrupt(out, args, sig, ready):
    "Start `simreal` with `args`, send `sig` to the main process alone once `ready()`; (exit status, seconds to stop, stderr, children)."
    p = subprocess.Popen([sys.executable, '-c', CODE, *args, '--out', str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=ENV, start_new_session=True)
    try:
        assert _wait(p, ready), 'the run ended before the moment to interrupt it'
        kids = _children(p.pid)
        t = time.time(); p.send_signal(sig); p.wait(timeout=60)
        return p.returncode, time.time() - t, p.stderr.read(), kids
    finally:
        if p.poll() is None: p.kill(); p.wait()


def test_sigint_stops_at_once_and_the_rerun_resumes_bitwise(reference, tmp_path):
    "SIGINT to the main process (not its group) mid-grid: exit 130 with one line on resuming, no results.nc of a subset, the lock released; the same command again ends bit for bit like an uninterrupted run."
    _, ref, _ = reference
    out = tmp_path / 'run'
    code, stop_s, err, _ = _interrupt(out, ARGS, signal.SIGINT, lambda: len(list((out / 'cells').glob('*.nc'))) >= 2)
    assert code == 130, err[-3000:]
    assert stop_s < 15 and 'SIGINT' in err.strip().splitlines()[-1] and 'resumes' in err.strip().splitlines()[-1], err[-1000:]
    assert not (out / 'results.nc').exists(), 'an interrupted run wrote the results of a subset of its cells'
    r = simreal(*ARGS, '--out', out)  # the lock is free again, and the run resumes
    assert r.returncode == 0, r.stderr[-3000:]
    assert_bitwise(load(out / 'results.nc'), ref)


def test_sigterm_stops_the_pool_workers_within_seconds(tmp_path):
    "SIGTERM to the main process of `--workers 2`: queued cells cancelled and the running workers stopped, exit 143, the lock released."
    out = tmp_path / 'run'
    args = [a if a != '0' else '2' for a in ARGS]  # --workers 2
    def training():  # a worker is training a cell: its checkpoint folder exists
        return (out / 'cells').exists() and any(p.is_dir() for p in (out / 'cells').iterdir())
    code, stop_s, err, kids = _interrupt(out, args, signal.SIGTERM, training)
    assert code == 143, err[-3000:]
    assert stop_s < 20, f'{stop_s:.1f} s to stop'
    assert kids, 'no worker processes were seen'
    left = survivors(kids)
    assert not left, f'workers outlived the stopped run: {left}'
    assert 'SIGTERM' in err.strip().splitlines()[-1], err[-1000:]
    with RunLock(out): pass  # released


# ---------------------------------------------------------------------------------------------------- stops and messages
def _refused(argv, capsys, *says):
    with pytest.raises(SystemExit) as e: cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and 'Traceback' not in err, (e.value.code, err)
    for s in says: assert s in err, (s, err)
    return err


def test_symlink_loops_and_dangling_links_are_named_as_such(tmp_path, capsys):
    "A symbolic link loop or a dangling link given as an input or above an --out: exit 2 naming the link as a loop / dangling, not 'no such file'."
    loop = tmp_path / 'loop'; loop.symlink_to(loop)
    gone = tmp_path / 'gone'; gone.symlink_to(tmp_path / 'nowhere')
    out = tmp_path / 'out'
    for link, says in ((loop, 'a loop'), (gone, 'dangling')):
        for argv in (['report', str(link)], ['physics-check', str(link)],
                     ['run', '--preset', 'test', '--data', str(link), '--out', str(out)],
                     ['data', 'import', 'realpdebench', str(link), '--scenario', 'cylinder', '--out', str(out)],
                     ['data', 'import', 'piv', str(link / 'frames'), '--dt', '1', '--out', str(out)],
                     ['data', 'make', 'cylinder', '--size', 'test', '--out', str(link / 'sub')],
                     ['run', '--preset', 'test', '--out', str(link / 'sub')],
                     ['ada', 'chain', '--quick', '--cache', str(link), '--out', str(out)]):
            err = _refused(argv, capsys, f'{link}: a symbolic link to nothing', says)
            assert 'no such file' not in err and 'not a directory' not in err and 'is a file' not in err, err
    assert not out.exists()


def test_physics_check_refuses_a_read_only_run_folder_before_any_check(tmp_path, capsys, monkeypatch):
    "physics-check on a run folder it cannot write physics.json into: exit 2 naming it at once, no physics check run (a read-only file system here)."
    import simreal_nb.checks.physics as physics
    ran = []
    monkeypatch.setattr(physics, 'physics_check', lambda *a, **kw: ran.append(a))
    out = tmp_path / 'run'; out.mkdir(); (out / 'manifest.json').write_text('{}')  # the checks stubbed: a run's folder in name only
    real_access = os.access
    monkeypatch.setattr(os, 'access', lambda p, mode, **kw: False if Path(p) == out and mode & os.W_OK else real_access(p, mode, **kw))
    t = time.perf_counter()
    _refused(['physics-check', str(out)], capsys, 'RUN_DIR', 'not writable', 'expected a folder you can write to')
    assert not ran and time.perf_counter() - t < 5


def test_every_torchrun_rank_refuses_a_foreign_out_within_seconds(tmp_path):
    "Under torchrun, an --out holding someone else's files: every rank refuses it with the one line before joining the others, within seconds."
    import shutil as sh
    if sh.which('torchrun') is None: pytest.skip('torchrun is not installed here')
    out = tmp_path / 'job'; out.mkdir(); (out / 'notes.txt').write_text('mine')
    t = time.perf_counter()
    r = subprocess.run(['torchrun', '--nproc_per_node', '2', '--no-python', 'simreal', 'train', '--preset', 'test', '--protocol', 'sim_only',
                        '--device', 'cpu', '--out', str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**ENV, 'PATH': str(Path(sys.executable).parent) + os.pathsep + os.environ.get('PATH', '')})
    took = time.perf_counter() - t
    ours = [l for l in r.stderr.splitlines() if l.startswith('simreal train:')]
    assert r.returncode != 0 and took < 30, (took, r.stderr[-2000:])
    assert len(ours) == 2 and all('holds files no `simreal train` wrote (notes.txt)' in l for l in ours), r.stderr[-2000:]
    assert 'init_process_group' not in r.stderr and sorted(p.name for p in out.iterdir()) == ['notes.txt']


def test_every_torchrun_rank_learns_that_another_process_holds_the_job(tmp_path):
    "Under torchrun, a job folder whose lock another process holds: rank 0 and the others refuse alike, naming that process, before joining the group."
    import shutil as sh
    if sh.which('torchrun') is None: pytest.skip('torchrun is not installed here')
    out = tmp_path / 'job'; out.mkdir()
    holder = subprocess.Popen([sys.executable, '-c', "import sys, time\nfrom simreal_nb.study.rundir import RunLock\nRunLock(sys.argv[1]).acquire()\n"
                               "print('held', flush=True); time.sleep(300)", str(out)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == 'held'
        t = time.perf_counter()
        r = subprocess.run(['torchrun', '--nproc_per_node', '2', '--no-python', 'simreal', 'train', '--preset', 'test', '--protocol',
                            'sim_only', '--device', 'cpu', '--out', str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**ENV, 'PATH': str(Path(sys.executable).parent) + os.pathsep + os.environ.get('PATH', '')})
        took = time.perf_counter() - t
    finally: holder.kill(); holder.wait()
    ours = [l for l in r.stderr.splitlines() if l.startswith('simreal train:')]
    assert r.returncode != 0 and took < 40, (took, r.stderr[-2000:])
    refused = [l for l in ours if f'is in use by process {holder.pid}' in l]  # torchrun ends the other rank once one exits, so it may
    assert refused and all(l in refused or 'stopped by SIGTERM' in l for l in ours), r.stderr[-2000:]  # be stopped before it says so
    assert 'init_process_group' not in r.stderr and sorted(p.name for p in out.iterdir()) == ['.lock']
