"Benchmarks: each returns its keys, measures in one run, and restores the torch thread count."
import json, math
import torch
import pytest
from simreal_nb.core.schema import FIELDS
from simreal_nb.models.factory import make_model
from simreal_nb.face.bench import BenchInputError, bench_models, bench_joint


def test_bench_models_keys():
    before = torch.get_num_threads()
    rows = bench_models(presets=['S'], batch=1, steps=1, grid=(16, 32), threads=1)
    assert torch.get_num_threads() == before
    (r,) = rows
    assert {'preset', 'params', 'samples_per_s', 'flop_util', 'peak_mb'} <= set(r)
    assert r['preset'] == 'S' and r['params'] > 0 and r['samples_per_s'] > 0 and r['flop_util'] > 0 and r['peak_mb'] > 0


def test_bench_joint_keys_and_threads():
    n = torch.get_num_threads()
    r = bench_joint(batch=2, steps=2, warmup=1, grid=(8, 8), n_cond=1, model=make_model('fan', 'S', fields=FIELDS, grid=(8, 8), patch=4, n_cond=1, dim=32, depth=1, heads=2, mlp=64), threads=1)
    assert {'joint_s', 'sim_s', 'exp_s', 'ratio'} <= set(r) and r['ratio'] == pytest.approx(r['joint_s'] / (r['sim_s'] + r['exp_s']))
    assert torch.get_num_threads() == n
    json.dumps(r)


def test_bench_tta_structure_finite_monotone():
    from simreal_nb.face.bench import bench_tta, TTA_TARGETS
    n = torch.get_num_threads()
    rows = bench_tta(['fan-p8', dict(name='fno-tiny', arch='fno', capacity='S', width=8, modes=4, layers=1)],
                     system='cylinder', size='test', updates=3, every=1, val_windows=6, threads=1)
    assert torch.get_num_threads() == n
    assert [r['name'] for r in rows] == ['fan-p8', 'fno-tiny']
    for r in rows:
        assert {'name', 'arch', 'kwargs', 'lr', 'params', 'updates', 'train_s', 'step_ms', 'best_val', 'best_at',
                'tta', 'curve', 'load1', 'threads'} <= set(r)
        assert set(r['tta']) == {f'{t:g}' for t in TTA_TARGETS}
        assert all(v is None or set(v) == {'s', 'updates'} for v in r['tta'].values())
        assert [p['updates'] for p in r['curve']] == [0, 1, 2, 3] and r['updates'] == 3
        ts = [p['train_s'] for p in r['curve']]
        assert all(b > a for a, b in zip(ts, ts[1:]))
        vals = [p['val'] for p in r['curve']]
        assert all(math.isfinite(v) and v > 0 for v in vals) and math.isfinite(r['best_val'])
        assert r['best_val'] == pytest.approx(min(vals), rel=1e-3) and r['params'] > 0 and r['step_ms'] > 0
        json.dumps(r)
    assert rows[0]['kwargs'] == {'patch': 8} and rows[1]['kwargs'] == {'width': 8, 'modes': 4, 'layers': 1}


@pytest.mark.parametrize('fn, kw, match', [
    (bench_models, dict(steps=0), r"bench_models: `steps`=0; expected an integer >= 1"),
    (bench_models, dict(batch=0), r"bench_models: `batch`=0; expected an integer >= 1"),
    (bench_models, dict(threads=0), r"bench_models: `threads`=0; expected an integer >= 1"),
    (bench_models, dict(steps=2.5), r"bench_models: `steps`=2\.5; expected an integer >= 1"),
    (bench_joint, dict(steps=0), r"bench_joint: `steps`=0; expected an integer >= 1"),
    (bench_joint, dict(steps=-3), r"bench_joint: `steps`=-3; expected an integer >= 1"),
    (bench_joint, dict(batch=0), r"bench_joint: `batch`=0; expected an integer >= 1"),
    (bench_joint, dict(warmup=-1), r"bench_joint: `warmup`=-1; expected an integer >= 0"),
    (bench_joint, dict(n_in=0), r"bench_joint: `n_in`=0; expected an integer >= 1"),
])
def test_bad_counts_refused_before_anything_runs(fn, kw, match):
    "A zero/negative/non-integer count is one BenchInputError (a ValueError the CLI reports as a user error), not a StatisticsError or NaN."
    from simreal_nb.face.flags import is_user_error
    n = torch.get_num_threads()
    with pytest.raises(BenchInputError, match=match) as e: fn(**kw)
    assert is_user_error(e.value)
    assert torch.get_num_threads() == n


def test_bad_counts_of_the_other_benchmarks():
    from simreal_nb.face.bench import bench_systems, bench_tta, bench_tta_steps
    with pytest.raises(BenchInputError, match=r"bench_systems: `repeats`=0; expected an integer >= 1"): bench_systems(repeats=0)
    with pytest.raises(BenchInputError, match=r"bench_systems: `workers`=0"): bench_systems(workers=0)
    with pytest.raises(BenchInputError, match=r"bench_tta: `every`=0; expected an integer >= 1"): bench_tta(every=0)
    with pytest.raises(BenchInputError, match=r"bench_tta: `updates`=0"): bench_tta(updates=0)
    with pytest.raises(BenchInputError, match=r"bench_tta: `warmup`=-1; expected an integer >= 0"): bench_tta(warmup=-1)
    with pytest.raises(BenchInputError, match=r"bench_tta_steps: `steps`=0; expected an integer >= 1"): bench_tta_steps(steps=0)
