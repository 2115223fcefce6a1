"""Physics stress tests: each check passes on a good model, fails on one built to fail it; physics.json of a run."""
import json, math
import numpy as np
import pytest
import torch
import torch.nn as nn
from simreal_nb.twins.systems import load_twins
from simreal_nb.data.domains import make_domain_data
from simreal_nb.study.evaluation import Persistence
from simreal_nb.study.grid import Grid
from simreal_nb.study.experiment import run_experiment
from simreal_nb.checks.physics import (PhysicsCheckError, DIV_FACTOR, EXTREME_C, divergence, vorticity, divergence_check,
                                causality_check, extreme_check, check_model, physics_check, physics_table, load_cell_model,
                                Divergent, CommandEcho, Fragile)

torch.set_num_threads(1)


@pytest.fixture(scope='module')
def ctl():
    tw = load_twins('controlled', size='test')
    return make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1, fracs=(0.5, 0.25, 0.25)), tw['exp_truth']


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp('phys') / 'run'
    run_experiment(d, 'test', grid=Grid(('controlled',), ('S',), protocols=('joint',), seeds=1), report=False,
                   verbose=False, device='cpu')
    return d


def test_divergence_exact_on_linear_fields():
    y, x = np.linspace(0, 1, 9), np.cumsum(np.r_[0, np.linspace(0.05, 0.2, 11)])  # uneven x
    Y, X = np.meshgrid(y, x, indexing='ij')
    d, ok = divergence(2 * X - 1, -2 * Y, y, x)          # incompressible strain
    assert ok.sum() == 7 * 10 and np.abs(d[ok]).max() < 1e-12
    d, ok = divergence(X, 3 * Y, y, x)                   # source of strength 4
    np.testing.assert_allclose(d[ok], 4.0, atol=1e-12)
    np.testing.assert_allclose(vorticity(-Y, X, y, x)[1:-1, 1:-1], 2.0, atol=1e-12)
    hole = np.ones_like(X, bool); hole[4, 5] = False
    _, ok = divergence(X, Y, y, x, hole)
    assert not ok[4, 4:7].any() and not ok[3:6, 5].any() and ok.sum() == 70 - 5


def test_divergence_errors():
    y, x = np.linspace(0, 1, 5), np.linspace(0, 1, 6)
    with pytest.raises(PhysicsCheckError, match='expected the grid of u'): divergence(np.zeros((6, 5)), np.zeros((6, 5)), y, x)
    with pytest.raises(PhysicsCheckError, match='strictly increasing'): divergence(np.zeros((5, 6)), np.zeros((5, 6)), y[::-1], x)
    with pytest.raises(PhysicsCheckError, match='two equal arrays'): divergence(np.zeros((5, 6)), np.zeros((4, 6)), y, x)


def test_divergence_check(ctl):
    dd, truth = ctl
    good, bad = divergence_check(Persistence(), dd, truth), divergence_check(Divergent(Persistence()), dd, truth)
    assert good['verdict'] == 'pass' and bad['verdict'] == 'fail'
    for d in ('sim', 'exp'):
        assert abs(good['domains'][d]['ratio'] - 1) < 0.25      # persistence carries the data's own residual
        assert bad['domains'][d]['ratio'] > 2 * DIV_FACTOR
    assert good['domains']['exp']['ratio_truth'] > 1 and 'ratio_truth' not in good['domains']['sim']


class _Nan(nn.Module):
    n_out = 1
    def forward(self, x, field_mask, cond=None): return x[:, -1:] * float('nan')


def test_divergence_check_nan_fails(ctl):
    assert divergence_check(_Nan(), ctl[0])['verdict'] == 'fail'


def test_causality_check(ctl):
    wd = ctl[0].exp['test']
    honest = causality_check(CommandEcho(wd.n_params, lead=0), wd, horizon=5, k=3)
    assert honest['verdict'] == 'pass' and honest['ahead'] == 0 and honest['delay'] == 3
    assert honest['onsets'] == [0, 1, 2, 3, 4]
    for lead in (1, 2):                                      # leaks into the earlier frames of each multi-frame call
        peek = causality_check(CommandEcho(wd.n_params, lead=lead), wd, horizon=5)
        assert peek['verdict'] == 'fail' and peek['ahead'] > 1e-3
        assert any(o is not None and o < s for s, o in enumerate(peek['onsets']))


def test_causality_future_frames_never_move_the_past(ctl, run):
    "A trained model: the prediction at frame t does not change when only the inputs after t change."
    from simreal_nb.checks.physics import _run_config
    from simreal_nb.study.grid import Cell
    cfg, _ = _run_config(run)
    m = load_cell_model(run, Cell.from_key('controlled__S__fno__xall__joint__s0'), cfg, ctl[0])
    r = causality_check(m, ctl[0].exp['test'], horizon=4, k=1, delta=5.0)
    assert r['verdict'] == 'pass' and r['ahead'] == 0 and r['responds'] and r['onsets'] == [0, 1, 2, 3]


def test_causality_errors_and_na(ctl):
    cyl = load_twins('cylinder', size='test')
    dc = make_domain_data(cyl['sim'], cyl['exp'], n_in=2, fracs=(0.5, 0.25, 0.25))
    assert causality_check(Persistence(), dc.exp['test'])['verdict'] == 'n/a'
    with pytest.raises(PhysicsCheckError, match='WindowDataset'): causality_check(Persistence(), object())
    with pytest.raises(PhysicsCheckError, match='1 <= k < horizon'): causality_check(Persistence(), ctl[0].exp['test'], horizon=3, k=3)


def test_extreme_check(ctl):
    dd = ctl[0]
    limit = float(max(dd.sim['train'].data.abs().max(), dd.exp['train'].data.abs().max()))
    ok, boom = extreme_check(Persistence(), dd), extreme_check(Fragile(limit), dd)
    assert ok['verdict'] == 'pass' and boom['verdict'] == 'fail'
    assert set(ok['cases']) == {f'{d}/{c}' for d in ('sim', 'exp') for c in ('in_range', 'amplitude', 'params_low', 'params_high')}
    assert boom['cases']['sim/in_range']['ok'] and not boom['cases']['sim/amplitude']['finite']
    assert abs(ok['cases']['sim/amplitude']['ratio'] - 1 / EXTREME_C) < 0.02
    assert 'A=' in ok['cases']['sim/params_high']['what']      # the controlled cylinder's amplitude moved out of range
    assert extreme_check(_Nan(), dd)['verdict'] == 'fail'


def test_check_model(ctl):
    r = check_model(Persistence(), *ctl)
    assert r['verdict'] == 'pass' and {r[k]['verdict'] for k in ('divergence', 'causality', 'extreme')} == {'pass'}
    assert check_model(CommandEcho(ctl[0].exp['test'].n_params, lead=1), ctl[0])['verdict'] == 'fail'


def test_physics_check_writes_json(run):
    res = physics_check(run, max_windows=2, verbose=False)
    saved = json.loads((run / 'physics.json').read_text(), parse_constant=lambda c: pytest.fail(f'{c} in physics.json'))
    assert set(saved['cells']) == {'controlled__S__fno__xall__joint__s0', 'controlled__S__fno__xall__persistence__s0'}
    for rec in saved['cells'].values():
        assert {'system', 'capacity', 'protocol', 'seed', 'divergence', 'causality', 'extreme', 'verdict'} <= set(rec)
        assert rec['divergence']['domains']['sim']['ratio'] > 0 and rec['causality']['verdict'] == 'pass'
    assert saved['cells']['controlled__S__fno__xall__persistence__s0']['verdict'] == 'pass'
    t = physics_table(res)
    assert t.index.names == ['system', 'capacity', 'protocol', 'seed'] and len(t) == 2
    assert not list(run.glob('.*.tmp'))                     # atomic write: no temporary file left behind
    md = (run / 'report.md').read_text()                    # the report was rebuilt with the checks in it
    assert '## Physics checks' in md and '| controlled | S | joint | 0 |' in md


def test_physics_check_errors(run, tmp_path):
    with pytest.raises(PhysicsCheckError, match='not a directory'): physics_check(tmp_path / 'nope')
    with pytest.raises(PhysicsCheckError, match='no manifest.json'): physics_check(tmp_path)
    d = run / 'cells' / 'controlled__S__fno__xall__joint__s0'
    ck, saved = d / 'last.pt', d / 'model.pt'
    def check_with(missing=(), damaged=()):
        kept = {f: f.read_bytes() for f in (ck, saved)}
        for f in missing: f.unlink()
        for f in damaged: f.write_bytes(b'not a torch file')
        try: return physics_check(run, max_windows=1, baselines=False, verbose=False)['cells']['controlled__S__fno__xall__joint__s0']
        finally:
            for f, b in kept.items(): f.write_bytes(b)
    e = check_with(missing=(ck, saved))                        # neither the final model nor the checkpoint: named
    assert e['verdict'] == 'error' and 'last.pt: missing' in e['error']
    assert 'expected the final model' in check_with(damaged=(saved,))['error']            # damaged: named, the run still checked
    assert 'expected a readable trainer checkpoint' in check_with(missing=(saved,), damaged=(ck,))['error']  # a run from before model.pt
    assert check_with(missing=(ck,))['verdict'] != 'error'      # model.pt alone rebuilds the model
    r = physics_check(run, max_windows=1, verbose=False)
    assert r['cells']['controlled__S__fno__xall__persistence__s0']['verdict'] == 'pass'


def test_energy_budget_closes_on_the_laminar_kolmogorov_flow():
    "u = U0 sin(k y), U0 = chi / (nu k^2 + alpha), is a steady solution: forcing = dissipation + drag, dE/dt = 0."
    from simreal_nb.checks.physics import energy_budget
    n, L, k, nu, alpha, chi = 128, 2 * np.pi, 4, 0.01, 0.1, 1.0
    y = x = np.arange(n) * L / n
    U0 = chi / (nu * k ** 2 + alpha)
    u = np.broadcast_to(U0 * np.sin(k * y)[:, None], (n, n))[None].repeat(3, 0)
    eb = energy_budget(u, np.zeros_like(u), y, x, np.array([0., .1, .2]), nu, alpha, chi, k)
    assert abs(eb['forcing'].item() - chi * U0 / 2) < 1e-9 and eb['dEdt'].item() == 0
    assert abs(eb['residual'].item()) < 0.01 * eb['forcing'].item()  # up to the central difference of the vorticity
    with pytest.raises(PhysicsCheckError, match='T >= 3'): energy_budget(u[:2], u[:2], y, x, np.array([0., .1]), nu, alpha, chi, k)


def test_energy_check_judges_the_turbulence_only(ctl):
    from simreal_nb.checks.physics import energy_check, Pumped
    kol = load_twins('kolmogorov', size='test')
    dk = make_domain_data(kol['sim'], kol['exp'], n_in=1, n_out=1, fracs=(0.5, 0.25, 0.25))
    ok, bad = energy_check(Persistence(), dk, horizon=6), energy_check(Pumped(), dk, horizon=6)
    assert ok['verdict'] == 'pass' and bad['verdict'] == 'fail' and bad['ratio'] > 20
    assert energy_check(Persistence(), ctl[0])['verdict'] == 'n/a'


def test_a_run_directory_rebuilds_its_models_alone(run):
    "Each trained cell leaves model.pt (`models.save_model`: class, arguments, version, weights): it loads with no config or data, and holds the final checkpoint's weights."
    from simreal_nb.models.factory import load_model
    from simreal_nb.core.store import load_torch
    d = run / 'cells' / 'controlled__S__fno__xall__joint__s0'
    m, ck = load_model(d / 'model.pt'), load_torch(d / 'last.pt')
    assert ck['history']['done'] and m.state_dict().keys() == ck['model'].keys()
    for k, v in m.state_dict().items(): torch.testing.assert_close(v, ck['model'][k], rtol=0, atol=0)
