"The stopping-rule benchmark: its held-out candidate score, its rules replayed on known checks, one long run of the test preset."
import numpy as np
import torch

def test_energy_distance_is_unbiased_and_sees_a_shift(load_benchmark):
    sr, g = load_benchmark('stop_rules'), torch.Generator().manual_seed(0)
    same = [sr.energy_distance(torch.randn(400, 2, generator=g), torch.randn(300, 2, generator=g)) for _ in range(20)]
    assert abs(np.mean(same)) < 3 * np.std(same) / np.sqrt(20)            # zero on average for one distribution
    shifted = sr.energy_distance(torch.randn(400, 2, generator=g) + torch.tensor([0.5, 0.]), torch.randn(300, 2, generator=g))
    assert shifted > np.mean(same) + 5 * np.std(same)

def test_rules_replayed_on_known_checks(load_benchmark):
    sr = load_benchmark('stop_rules')
    held = [1.0, 0.8, 0.7, 0.69, 0.71, 0.695, 0.70, 0.72, 0.70]           # flat after the fourth check
    kl = [0.5, 0.45, 0.4, 0.35, 0.3, 0.28, 0.26, 0.25, 0.24]
    checks = [dict(it=25 * i, heldout=h, energy_distance=h, kl_target=k, energy_w2=0.3,
                   **{f'P{p}_radius': 0.5 for p in range(1, 5)}) for i, (h, k) in enumerate(zip(held, kl))]
    assert sr._stop_best(held) == 3                                       # stops 4 checks after the last 1 % gain, returns the best
    rows = {r['rule']: r for r in sr.replay({0: checks})}
    assert rows['holdout, best check (the default)']['step'] == 75 and rows['oracle: lowest truth KL']['step'] == 200
    assert rows['holdout smoothed over 3 checks, best']['step'] >= 75
    assert '| oracle: lowest truth KL | 200 | 0.240 |' in sr.rules_table(list(rows.values()), 0.031)

def test_long_run_records_the_candidates_and_the_truth(tmp_path, load_benchmark):
    checks = load_benchmark('stop_rules').long_run(0, 6, preset='test', cache_dir=tmp_path)
    assert [c['it'] for c in checks] == [0, 2, 4, 6]                      # every check of the capped run, none skipped
    assert all({'heldout', 'energy_distance', 'kl_target', 'energy_w2', 'P4_radius'} <= set(c) for c in checks)
    assert all(np.isfinite(c['kl_target']) and np.isfinite(c['energy_distance']) for c in checks)
