"""MORPH through the study: `simreal run --archs morph` at the test preset, every protocol; `--init` from a run's saved model
and from MORPH's own checkpoint format (its position table widened to the run's frames), `--level`; the checkpoint's
digest in the run's settings, and a resume with another checkpoint refused."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
import torch
import xarray as xr

PROTOCOLS = ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'pooled']


def simreal(*args, timeout=600):
    env = {**os.environ, 'MPLBACKEND': 'Agg', 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')}
    return subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope='module')
def morph_run(tmp_path_factory):
    "A test-preset run of MORPH-Ti on the cylinder: the paper's protocols, pooled and the baselines."
    out = tmp_path_factory.mktemp('morph') / 'run'
    r = simreal('run', '--preset', 'test', '--archs', 'morph', '--capacities', 'Ti', '--systems', 'cylinder', '--workers', '0',
                '--device', 'cpu', '--out', str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope='module')
def morph_fm(tmp_path_factory):
    "A checkpoint in MORPH's own format at MORPH-Ti's shapes (one time step, DataParallel's keys), random weights."
    from simreal_nb.models.morph import morph
    torch.manual_seed(0)
    f = tmp_path_factory.mktemp('fm') / 'morph-Ti-FM-max_ar1.pth'
    torch.save({'epoch': 0, 'model_state_dict': torch.nn.DataParallel(morph('Ti', max_ar=1)).state_dict()}, f)
    return f


def scores(path):
    with xr.open_dataset(path, engine='h5netcdf') as ds: return ds.load()


def test_morph_run_scores_every_protocol(morph_run):
    res = scores(morph_run / 'results.nc')
    s = res.score.sel(arch='morph', capacity='Ti', metric='rmse', field='all').squeeze(drop=True)
    assert list(res.protocol.values[:5]) == PROTOCOLS
    assert bool(np.isfinite(s.sel(protocol=PROTOCOLS)).all())
    assert float(res.params.sel(protocol='joint').squeeze()) == pytest.approx(10.98e6, rel=0.01)  # MORPH-Ti with two time rows, the conditioning MLP
    assert all((morph_run / 'cells' / f'cylinder__Ti__morph__xall__{p}__s0' / 'model.pt').exists() for p in PROTOCOLS)


def test_train_from_a_runs_model_at_a_level(morph_run, tmp_path):
    init = morph_run / 'cells' / 'cylinder__Ti__morph__xall__joint__s0' / 'model.pt'
    from simreal_nb.models.factory import checkpoint_digest
    r = simreal('train', '--preset', 'test', '--arch', 'morph', '--capacity', 'Ti', '--protocol', 'sim_to_exp', '--init', str(init),
                '--level', 'encoder', '--device', 'cpu', '--out', str(tmp_path / 'job'))
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = json.loads((tmp_path / 'job' / 'job.json').read_text())['config']
    assert (cfg['init'], cfg['init_digest'], cfg['level']) == (str(init), checkpoint_digest(init), 'encoder')
    hist = json.loads((tmp_path / 'job' / 'history.json').read_text())
    assert [p.get('level') for p in hist['phases']] == ['encoder', 'encoder']   # from a checkpoint: both phases fine-tune it
    assert np.isfinite(scores(tmp_path / 'job' / 'scores.nc').score.sel(metric='rmse', field='all')).all()


def test_run_from_morphs_checkpoint_every_protocol(morph_run, morph_fm, tmp_path):
    "Every protocol starts from MORPH's checkpoint at the latent level; its digest is in config.toml; another file is refused."
    out = tmp_path / 'run'
    args = ['run', '--preset', 'test', '--archs', 'morph', '--capacities', 'Ti', '--systems', 'cylinder', '--workers', '0',
            '--device', 'cpu', '--out', str(out), '--init', str(morph_fm), '--level', 'latent']
    r = simreal(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    s = scores(out / 'results.nc').score.sel(metric='rmse', field='all').squeeze(drop=True)
    assert bool(np.isfinite(s.sel(protocol=PROTOCOLS)).all())
    before = scores(morph_run / 'results.nc').score.sel(metric='rmse', field='all').squeeze(drop=True)
    assert not np.allclose(s.sel(protocol=PROTOCOLS), before.sel(protocol=PROTOCOLS))   # another start, other scores
    from simreal_nb.study.runconfig import read_run_config
    from simreal_nb.models.factory import checkpoint_digest
    _, cfg, _ = read_run_config(out / 'config.toml')
    assert (cfg.init, cfg.init_digest, cfg.level) == (str(morph_fm), checkpoint_digest(morph_fm), 'latent')
    for p in ('sim_only', 'joint'):
        h = json.loads((out / 'cells' / f'cylinder__Ti__morph__xall__{p}__s0' / 'history.json').read_text())
        assert h['phases'][0]['level'] == 'latent'
    other = tmp_path / 'other.pth'
    ck = torch.load(morph_fm, weights_only=True); ck['epoch'] = 1; torch.save(ck, other)
    r = simreal(*args[:-4], '--init', str(other), '--level', 'latent')
    assert r.returncode == 2 and 'init_digest' in r.stderr and 'Traceback' not in r.stderr
    r = simreal('run', '--config', str(out / 'config.toml'), '--out', str(out), '--workers', '0', '--device', 'cpu')
    assert r.returncode == 0 and '8 cells (8 already done)' in r.stdout, r.stderr[-2000:]


def test_refusals_before_training(morph_fm, tmp_path):
    r = simreal('run', '--preset', 'test', '--archs', 'morph', '--capacities', 'S', '--systems', 'cylinder', '--workers', '0',
                '--device', 'cpu', '--out', str(tmp_path / 'r'), '--init', str(morph_fm))
    assert r.returncode == 2 and 'mis-shaped' in r.stderr and 'net.decoder.norm.bias (256,) (expected (512,))' in r.stderr
    assert not (tmp_path / 'r').exists()
    r = simreal('run', '--preset', 'test', '--systems', 'cylinder', '--workers', '0', '--out', str(tmp_path / 'r'), '--level', 'latent')
    assert r.returncode == 2 and "arch ['fno'] has no fine-tuning levels" in r.stderr
    r = simreal('train', '--preset', 'test', '--arch', 'fno', '--out', str(tmp_path / 'j'), '--init', str(morph_fm))
    assert r.returncode == 2 and 'not a model saved by save_model' in r.stderr and not (tmp_path / 'j').exists()
    r = simreal('run', '--preset', 'paper', '--archs', 'fno', '--out', str(tmp_path / 'p'))
    assert r.returncode == 2 and "capacity 'Ti' has no 'fno' model" in r.stderr
