"Benchmarks: each returns its keys, measures in one run, and restores the torch thread count."
import json
import torch
import pytest
from simreal_nb.schema import FIELDS
from simreal_nb.models import make_model
from simreal_nb.bench import bench_models, bench_joint


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
