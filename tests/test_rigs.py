"""Rig fingerprints: several rigs of one design, features from a calibration run, conditioning, a held-out rig."""
import numpy as np
import pandas as pd
import pytest
import torch

from simreal_nb.checks.rigs import (FP_NAMES, RIGS, RigError, circulation, fingerprint, make_rigs, rig_holdout, standardise,
                             with_fingerprint)


@pytest.fixture(scope='module')
def rigs():
    torch.set_num_threads(1)
    return make_rigs('test', n_traj=5)


def test_rigs_differ_only_by_their_offsets(rigs):
    a, b = rigs['exp']['rig_a'], rigs['exp']['rig_b']
    assert set(rigs['exp']) == set(RIGS) and a.sizes == b.sizes
    np.testing.assert_array_equal(a.Re.values, b.Re.values)          # the same trajectories on every rig
    np.testing.assert_array_equal(a.omega_cmd.values, b.omega_cmd.values)
    assert not np.allclose(np.nan_to_num(a.u.values), np.nan_to_num(b.u.values))  # but other flows


def test_fingerprint_orders_the_rigs_as_their_offsets(rigs):
    fps = pd.DataFrame({r: fingerprint(c) for r, c in rigs['calib'].items()}).T
    true = pd.DataFrame(RIGS).T
    for f, t in (('fp_gain', 'gain'), ('fp_lag', 'lag'), ('fp_ti', 'turb')):
        assert (fps[f].rank() == true[t].rank()).all(), (f, fps[f].round(4).to_dict())


def test_fingerprint_errors(rigs):
    short = rigs['calib']['rig_a'].isel(time=slice(0, 10))
    with pytest.raises(RigError, match='command periods'): fingerprint(short)
    with pytest.raises(RigError, match='omega_cmd'): fingerprint(rigs['calib']['rig_a'].drop_vars('omega_cmd'))
    with pytest.raises(RigError, match='at least two'): make_rigs('test', rigs={'only': {}})
    with pytest.raises(RigError, match='unknown offsets'): make_rigs('test', rigs={'a': {}, 'b': {'mass': 2}})
    assert np.isfinite(circulation(rigs['calib']['rig_a'])).all()


def test_fingerprint_becomes_conditioning(rigs):
    fps = {r: fingerprint(c) for r, c in rigs['calib'].items()}
    z = standardise(fps, ['rig_a', 'rig_b', 'rig_c'])
    a = np.array([[z[r][k] for k in FP_NAMES] for r in ('rig_a', 'rig_b', 'rig_c')])
    np.testing.assert_allclose(a.mean(0), 0, atol=1e-9); np.testing.assert_allclose(a.std(0), 1, atol=1e-9)
    ds = with_fingerprint(rigs['exp']['rig_d'], z['rig_d'])
    assert all(ds[k].dims == ('traj',) and np.allclose(ds[k].values, z['rig_d'][k]) for k in FP_NAMES)
    assert with_fingerprint(ds, None) is ds
    with pytest.raises(RigError, match='lacks'): with_fingerprint(ds, {'fp_gain': 1.0})


def test_rig_holdout_scores_both_variants(rigs):
    res = rig_holdout(rigs, heldout='rig_b', seeds=(0,), steps=3)
    assert len(res) == 2 and set(res.fingerprint) == {False, True}
    assert res[['heldout_rmse', 'seen_rmse']].notnull().all().all() and (res.updates == 3).all()
    # persistence on the same trajectories, one value for the whole table: the reference a trained model must beat
    assert res['heldout_persistence'].nunique() == 1 and res['heldout_persistence'].iloc[0] > 0 and res['seen_persistence'].iloc[0] > 0
    with pytest.raises(RigError, match='not a rig'): rig_holdout(rigs, heldout='rig_z', seeds=(0,), steps=1)
