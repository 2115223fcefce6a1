"""Training at scale, on CPU: one training job under `torchrun --nproc_per_node 2` (gloo) against one process with the
doubled batch, and resumed after a SIGKILL of every process; the grid through `simreal run --executor dask --scheduler
ADDRESS` (a dask LocalCluster) and `--executor local --workers N` against the sequential run. These are the commands
of the README's "At scale" section.

Tolerance of 2 ranks × batch B against 1 process × batch 2B (both draw the same windows in every update; only the
order of floating-point sums differs), measured on this test's job (Kolmogorov, Joint, `test` preset, 24 updates of
2 × 4 windows per domain, FNO): rollout scores within 7e-5 (relative), validation losses within 3e-5 (relative), weights
within 5e-4 (relative L2 over all parameters; Adam turns rounding noise in near-zero gradient entries into steps of
the learning rate's size, so weights differ more than the losses). Asserted: 1e-3, 1e-3 and 1e-2."""
import os, shutil, signal, subprocess, sys, time
from pathlib import Path
import numpy as np
import pytest
import torch
import xarray as xr
from simreal_nb.face import cli
from simreal_nb.core.store import load_torch
from simreal_nb.study.grid import GridError
from simreal_nb.study.rundir import RunLock

torch.set_num_threads(1)  # the in-process dask worker below trains with one thread, like the OMP_NUM_THREADS=1 subprocesses
ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'
BIN = Path(sys.executable).parent
SIMREAL = [str(BIN / 'simreal')] if (BIN / 'simreal').exists() else [sys.executable, '-c', CODE]
TORCHRUN = [str(BIN / 'torchrun')] if (BIN / 'torchrun').exists() else [sys.executable, '-m', 'torch.distributed.run']
JOB = ['train', '--preset', 'test', '--system', 'kolmogorov', '--protocol', 'joint', '--steps', '24']
B = 4  # windows per domain batch on each of the two ranks


def simreal(*args, timeout=600):
    return subprocess.run([*SIMREAL, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=ENV)


def torchrun(*args, n=2):
    "The README's command: torchrun --standalone --nproc_per_node N --no-python simreal train ..."
    return [*TORCHRUN, '--standalone', '--nproc_per_node', str(n), '--no-python', *SIMREAL, *map(str, args)]


def load(path):
    with xr.open_dataset(path, engine='h5netcdf') as d: return d.load()


def flat(sd): return torch.cat([v.flatten().double() for v in sd.values()])


@pytest.fixture(scope='module')
def jobs(tmp_path_factory):
    "The same job on 2 gloo ranks at batch B and on 1 process at batch 2B."
    t = tmp_path_factory.mktemp('jobs')
    t0 = time.perf_counter()
    r = subprocess.run(torchrun(*JOB, '--batch-size', B, '--out', t / 'ddp'), capture_output=True, text=True, timeout=600, env=ENV)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    t1 = time.perf_counter()
    one = simreal(*JOB, '--batch-size', 2 * B, '--out', t / 'one')
    assert one.returncode == 0, one.stderr[-3000:]
    print(f'torchrun 2 ranks: {t1 - t0:.1f} s, 1 process: {time.perf_counter() - t1:.1f} s')
    return t, r


def test_two_ranks_train_like_one_process_with_the_doubled_batch(jobs):
    t, r = jobs
    assert 'kolmogorov__S__fno__xall__joint__s0: 24 updates of 2 x 4 windows per domain on 2 process(es)' in r.stdout, r.stdout
    ddp, one = load_torch(t / 'ddp' / 'last.pt'), load_torch(t / 'one' / 'last.pt')
    assert ddp['world'] == 2 and one['world'] == 1 and ddp['history']['done'] and one['history']['done']
    # a sampler per domain: the ranks split each global batch of 2B, the very windows the single process draws
    for d in ('sim', 'exp'):
        assert ddp['ranks'][0]['samplers'][d] == ddp['ranks'][1]['samplers'][d] == one['samplers'][d]
        assert one['samplers'][d]['batch_size'] == 2 * B
    a, b = load(t / 'ddp' / 'scores.nc'), load(t / 'one' / 'scores.nc')
    assert a.attrs['world_size'] == 2 and b.attrs['world_size'] == 1
    s_rel = float((abs(a.score - b.score) / abs(b.score)).max())
    va, vb = (np.array(x['history']['val']['objective'], float) for x in (ddp, one))
    v_rel = float(np.max(np.abs(va - vb) / np.abs(vb)))
    w_rel = float((flat(ddp['model']) - flat(one['model'])).norm() / flat(one['model']).norm())
    print(f'2 ranks x {B} vs 1 x {2 * B}: scores {s_rel:.1e}, validation losses {v_rel:.1e}, weights {w_rel:.1e} (relative)')
    assert s_rel < 1e-3 and v_rel < 1e-3 and w_rel < 1e-2
    assert np.isfinite(a.score.sel(field='all')).all()
    assert ddp['history']['conflict']['cos'] and len(ddp['history']['conflict']['cos']) == len(one['history']['conflict']['cos'])


def test_killed_job_resumes_exactly(jobs, tmp_path):
    "Every process of the job SIGKILLed after a checkpoint; the same command resumes it: bitwise the uninterrupted run."
    t, _ = jobs
    out = tmp_path / 'ddp'
    cmd = torchrun(*JOB, '--batch-size', B, '--out', out)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    t0 = time.time()
    while not (out / 'last.pt').exists() and p.poll() is None and time.time() - t0 < 300: time.sleep(0.005)
    os.killpg(p.pid, signal.SIGKILL); p.wait()  # the torchrun agent: its ranks (in sessions of their own) must follow
    t0 = time.time()
    while time.time() - t0 < 15:  # rank 0's lock goes with it
        try: RunLock(out).acquire().release(); break
        except GridError: time.sleep(0.1)
    else: pytest.fail('the ranks outlived their killed torchrun agent (rank 0 still holds the lock)')
    ck = load_torch(out / 'last.pt')
    assert not ck['history']['done'] and 0 < ck['updates_done'] < 24 and ck['world'] == 2, 'killed too late'
    wrong = simreal(*JOB, '--batch-size', B, '--out', out)  # one process cannot take over a 2-rank checkpoint
    assert wrong.returncode == 2 and 'Traceback' not in wrong.stderr, wrong.stderr[-2000:]
    assert 'written by 2 ranks; this run has 1' in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"resumed at [{ck['updates_done']}]" in r.stdout
    res, ref = load_torch(out / 'last.pt'), load_torch(t / 'ddp' / 'last.pt')
    for k in ref['model']: torch.testing.assert_close(res['model'][k], ref['model'][k], rtol=0, atol=0, msg=k)
    xr.testing.assert_equal(load(out / 'scores.nc').score, load(t / 'ddp' / 'scores.nc').score)
    assert res['history']['resumed_from'] == [ck['updates_done']]


def test_job_directory_is_tied_to_its_job(jobs, tmp_path, capsys):
    t, _ = jobs
    out = tmp_path / 'one'
    shutil.copytree(t / 'one', out)
    for argv, says in [([*JOB, '--batch-size', 2 * B, '--steps', 30], 'holds another job'),  # other settings
                       ([*JOB[:-2], '--batch-size', 2 * B, '--protocol', 'sim_only'], 'holds another job'),
                       (['train', '--preset', 'test'], '--out: required'),
                       ([*JOB, '--batch-size', 0], '--batch-size: expected an integer >= 1'),
                       ([*JOB, '--protocol', 'persistence'], 'is a baseline'),
                       ([*JOB, '--device', 'cuda'] if not torch.cuda.is_available() else [*JOB, '--device', 'tpu'], '--device')]:
        with pytest.raises(SystemExit) as e: cli.main([*map(str, argv), '--out', str(out)] if '--out: required' not in says else argv)
        assert e.value.code == 2
        line = capsys.readouterr().err.strip()
        assert len(line.splitlines()) == 1 and says in line, line
    with pytest.raises(SystemExit) as e: cli.main(['train', '--preset', 'test', '--out', str(tmp_path / 'x'), '--system', 'pipe'])
    assert e.value.code == 2 and "'pipe'" in capsys.readouterr().err and not (tmp_path / 'x').exists()


# ---------------------------------------------------------------------------------------------------- the grid on executors
RUN = ['run', '--preset', 'test', '--systems', 'kolmogorov', '--protocols', 'sim_only,joint']


def test_dask_and_local_executors_match_the_sequential_run(tmp_path):
    distributed = pytest.importorskip('distributed')
    seq = simreal(*RUN, '--executor', 'local', '--workers', 0, '--out', tmp_path / 'seq')
    assert seq.returncode == 0, seq.stderr[-3000:]
    local = simreal(*RUN, '--executor', 'local', '--workers', 2, '--out', tmp_path / 'local')
    assert local.returncode == 0, local.stderr[-3000:]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol='tcp://',
                                  dashboard_address=None) as cluster:
        dask = simreal(*RUN, '--executor', 'dask', '--scheduler', cluster.scheduler_address, '--out', tmp_path / 'dask')
    assert dask.returncode == 0, dask.stderr[-3000:]
    ref = load(tmp_path / 'seq' / 'results.nc').score
    assert list(ref.protocol.values) == ['sim_only', 'joint', 'persistence', 'mean_field', 'analog']
    xr.testing.assert_equal(load(tmp_path / 'dask' / 'results.nc').score, ref)  # one torch thread per cell in both: bit for bit
    pool = load(tmp_path / 'local' / 'results.nc').score
    if (os.cpu_count() or 1) // 2 <= 1: xr.testing.assert_equal(pool, ref)  # pool workers get cpu_count // N threads each
    else: xr.testing.assert_allclose(pool, ref, rtol=1e-5)
    assert (tmp_path / 'dask' / 'report.md').exists()


@pytest.mark.parametrize('extra,says', [(['--executor', 'spark'], "--executor: expected local or dask, got 'spark'"),
                                        (['--executor', 'dask'], '--scheduler: required with --executor dask'),
                                        (['--scheduler', 'tcp://127.0.0.1:8786'], '--scheduler: only with --executor dask'),
                                        (['--executor', 'dask', '--scheduler', 'tcp://127.0.0.1:8786', '--workers', '2'],
                                         '--workers: only with --executor local')])
def test_executor_options_are_checked_first(extra, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as e: cli.main([*RUN, *extra, '--out', str(tmp_path / 'x')])
    line = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(line.splitlines()) == 1 and says in line, line
    assert not (tmp_path / 'x').exists()
