"""The advice read from a pilot's folder: on curves drawn from known laws, the recommendation, the experiments an
alternative needs and a target's reach are the laws' own answers."""
import json
import numpy as np
import pytest
import xarray as xr
from simreal_nb.reading.advice import write_advice, AdviceError

N = np.array([1, 2, 4, 8])
LAWS = {'exp_only': 0.10, 'sim_to_exp': 0.08, 'joint@0.3': 0.05, 'pooled': 0.06}  # a of a·N^(−0.8) + 0.05 (RMSE)
law = lambda a, n: a * n ** -0.8 + 0.05

def _pilot(folder, seeds=4, noise=0.004):
    "A finished pilot's folder whose exp validation RMSE follows `LAWS`, each seed off by a small multiplicative noise."
    rng = np.random.default_rng(0)
    rmse = np.array([[[law(a, n) * (1 + noise * rng.standard_normal()) for n in N] for _ in range(seeds)]
                     for a in LAWS.values()])                      # [protocol, seed, count]
    mse = np.stack([np.full_like(rmse, 0.01), rmse ** 2], -1)      # domain: sim, exp
    res = xr.Dataset(dict(val_best=(('system', 'protocol', 'seed', 'exp_trajs', 'domain'), mse[None])),
                     coords=dict(system=['wake'], protocol=list(LAWS), seed=range(seeds), exp_trajs=N,
                                 domain=['sim', 'exp'], lam_train=('protocol', [np.nan, np.nan, 0.3, np.nan])))
    res.to_netcdf(folder / 'results.nc', engine='h5netcdf')
    rec = dict(system='wake', counts=N.tolist(), seeds=seeds, chosen='joint@0.3', wall_s=600.0,
               estimate_s=dict(pilot_s=900.0, full_study_s=12000.0))
    (folder / 'pilot.json').write_text(json.dumps(rec))

def test_the_advice_is_the_laws_answer(tmp_path):
    _pilot(tmp_path)
    text = write_advice(tmp_path, target=0.06, draws=300).read_text(encoding='utf-8')
    adv = json.loads((tmp_path / 'advice.json').read_text())
    assert adv['recommended'] == 'joint' and text.startswith('# Advice at 8') and '**Train Joint(λ = 0.3).**' in text
    assert set(adv['clearly_lower_than']) == {'exp_only', 'sim_to_exp', 'pooled'}
    # Exp-only matches Joint's error at 8 where 0.1·N^(−0.8) = 0.05·8^(−0.8): N = 8·2^(1/0.8) ≈ 19
    assert adv['to_match']['exp_only'][1] == pytest.approx(8 * 2 ** 1.25, rel=0.2)
    assert adv['target']['reachable'] and adv['target']['needed'][1] == pytest.approx(5 ** 1.25, rel=0.2)  # 0.05·N^(−0.8) = 0.01
    assert adv['families']['joint']['floor'][1] == pytest.approx(0.05, rel=0.1) and (tmp_path / 'figures/advice_curves.png').exists()

def test_a_target_below_the_floor_is_not_reachable(tmp_path):
    _pilot(tmp_path)
    text = write_advice(tmp_path, target=0.04, draws=300).read_text(encoding='utf-8')
    assert not json.loads((tmp_path / 'advice.json').read_text())['target']['reachable']
    assert '0.04 is not reachable with Joint(λ = 0.3): its floor is 0.05' in text

def test_a_folder_without_a_pilot_is_refused(tmp_path):
    with pytest.raises(AdviceError, match='no pilot.json'): write_advice(tmp_path)
