"Tests for simreal_nb.ada.flow, simreal_nb.ada.fit and simreal_nb.ada.adabench: estimators against known answers, metrics, error contracts, the benchmark drivers."
import json, math, os
import numpy as np
import pytest
import torch
from simreal_nb.ada.flow import (ADAInputError, Flow, GaussianPath, VelocityMLP, exact_div, kl_divergence, train_flow, odeint,
                             cached_flow, flow_state, flow_from_state, train_guided_flow, GuidedFlow, Corrector, integrate)
from simreal_nb.ada.fit import AlignConfig, fit_ada, fit_ea, check_alignment_inputs, MomentMatcher, sliced_w1, HoldoutCheck
from simreal_nb.ada.adabench import (CHAIN_PRESETS, TWIN_PRESETS, RunConfig, run_chain, chain_steps, chain_observables,
                                 chain_to_state, state_to_chain, chain_langevin, w1, CHAIN_OBSERVABLES, seed_summary,
                                 run_seeds)
from simreal_nb.ada.adamog import (mog_sample, mog_logpdf, mog_params, mog_metrics, energy_w2, cluster_kl, kde_l1,
                               occupancy, MOG_VERTICES, MOG_METHODS, MOG_PROJECTIONS, MOG_PRESETS, run_mog, mog_floor,
                               pair_stats, MOG_PAIRS, MOG_GUIDANCE)
from simreal_nb.ada.fit import _plateau


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _kl_gauss(m1, s1, m2, s2):
    m1, m2 = torch.tensor(m1), torch.tensor(m2)
    return len(m1) * (math.log(s2 / s1) + s1 ** 2 / (2 * s2 ** 2) - 0.5) + ((m1 - m2) ** 2).sum().item() / (2 * s2 ** 2)


@pytest.fixture(scope='module')
def flow2d():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = torch.randn(3000, 2, generator=g) * torch.tensor([0.5, 2.0]) + torch.tensor([3., -1.])
    return train_flow(data, hidden=32, depth=2, iters=150, batch=256, seed=0, steps=6)


def test_divergence_matches_autograd_trace():
    torch.manual_seed(0)
    v = VelocityMLP(4, hidden=16, depth=3)
    x = torch.randn(7, 4)
    t = torch.rand(7)
    a, d = v(x, t, with_div=True)
    a2, d2 = exact_div(v, x, t)
    torch.testing.assert_close(a, a2); torch.testing.assert_close(d, d2, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('method', ['heun', 'euler'])
def test_kl_matches_closed_form_for_two_gaussians(method):
    m1, s1, m2, s2 = [0.5, 0., -1.], 0.7, [0., 0.3, 0.], 1.2
    steps = 16 if method == 'heun' else 200
    q, p = Flow(GaussianPath(m1, s1), steps=steps, method=method), Flow(GaussianPath(m2, s2), steps=steps, method=method)
    est, x = kl_divergence(q, p, n=4000, generator=torch.Generator().manual_seed(1))
    lr = (torch.distributions.Normal(torch.tensor(m1), s1).log_prob(x).sum(1)
          - torch.distributions.Normal(torch.tensor(m2), s2).log_prob(x).sum(1))
    ref = _kl_gauss(m1, s1, m2, s2)
    assert abs(est.item() - lr.mean().item()) < (2e-3 if method == 'heun' else 2e-2)
    assert abs(est.item() - ref) < 4 * lr.std().item() / math.sqrt(len(lr)) + 0.01


def test_kl_through_autograd_divergence_path():
    "A velocity callable without a `with_div` path uses the exact autograd trace; same answer."
    gp = GaussianPath([1., -1.], 0.6)
    class Plain(torch.nn.Module):
        def __init__(self): super().__init__(); self.dim = 2
        def forward(self, x, t): return gp(x, t)
    q, p = Flow(Plain(), steps=12), Flow(GaussianPath([0., 0.], 1.0), steps=12)
    est, x = kl_divergence(q, p, n=2000, generator=torch.Generator().manual_seed(2))
    lr = (torch.distributions.Normal(torch.tensor([1., -1.]), 0.6).log_prob(x).sum(1)
          - torch.distributions.Normal(torch.zeros(2), 1.0).log_prob(x).sum(1))
    assert abs(est.item() - lr.mean().item()) < 2e-3


def test_kl_is_differentiable(flow2d):
    model = Flow(VelocityMLP(2, 32, 2), flow2d.mean, flow2d.std, steps=4)
    model.velocity.load_state_dict(flow2d.velocity.state_dict())
    kl, _ = kl_divergence(model, flow2d, n=64, generator=torch.Generator().manual_seed(0))
    kl.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.velocity.parameters())
    assert abs(kl.item()) < 0.1   # identical weights: KL ≈ 0 up to the ODE solver's error


def test_metrics_identical_samples_are_zero():
    ref = mog_sample('target', 2000, 1)
    m = mog_metrics(ref, ref)
    assert set(m) == {'energy_w2', 'energy_w2_kept', 'stranded', 'cluster_kl', 'kde_l1'}
    assert all(abs(v) < 1e-9 for k, v in m.items() if k != 'stranded') and m['stranded'] <= 1e-3
    floor = mog_metrics(mog_sample('target', 2000, 2), ref)
    base = mog_metrics(mog_sample('base', 2000, 3), ref)
    assert floor['cluster_kl'] < 0.02 and base['cluster_kl'] > 0.07
    assert floor['energy_w2'] < base['energy_w2'] and floor['kde_l1'] < base['kde_l1']


def test_cluster_kl_of_known_occupancy():
    ref = MOG_VERTICES[[0] * 50 + [1] * 50]        # occupancy (0.5, 0.5, 0, ...)
    x = MOG_VERTICES[[0] * 75 + [1] * 25] + 0.1    # nearest vertices unchanged by the small offset
    np.testing.assert_allclose(occupancy(x)[:2], [0.75, 0.25])
    p = np.array([0.5, 0.5] + [0] * 6) + 1e-6; p /= p.sum()
    q = np.array([0.75, 0.25] + [0] * 6) + 1e-6; q /= q.sum()
    assert abs(cluster_kl(x, ref) - np.sum(p * np.log(p / q))) < 1e-12
    assert abs(cluster_kl(x, ref) - (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25))) < 1e-4


def test_energy_w2_of_a_known_shift():
    ref = np.linspace(0, 1, 500)[:, None]
    # with E(x) = x, shifting every sample by 0.3 shifts every energy by 0.3: W2 = 0.3
    assert abs(energy_w2(ref + 0.3, ref, logpdf=lambda a: -torch.as_tensor(a)[:, 0]) - 0.3) < 1e-9


def test_mog_target_definition():
    w, m, s = mog_params('target')
    np.testing.assert_allclose(w.numpy(), [0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05])
    np.testing.assert_allclose(s.numpy(), [0.8, 0.8, 0.6, 0.6, 0.5, 0.5, 0.4, 0.4])
    assert (m[0::2] == -m[1::2]).all()                 # rows (0,1), (2,3), ... are antipodal pairs
    x = mog_sample('target', 20000, 0)
    np.testing.assert_allclose(occupancy(x), w.numpy(), atol=0.01)
    # the log-density integrates to 1 (importance check against the base)
    xb = mog_sample('base', 50000, 1)
    ratio = torch.exp(mog_logpdf(xb, 'target') - mog_logpdf(xb, 'base'))
    assert abs(ratio.mean().item() - 1) < 0.05


def test_ea_moves_the_constrained_moments(flow2d):
    obs = {'x0': lambda x: x[:, 0]}
    exp = {'x0': torch.randn(4000, generator=torch.Generator().manual_seed(5)) * 0.5 + 4.0}
    model = fit_ea(flow2d, obs, exp, AlignConfig(beta=0.01, iters=25, batch=256, kl_batch=64, lr=1e-2), order=1)
    with torch.no_grad():
        before = flow2d.sample(4000, generator=torch.Generator().manual_seed(3))[:, 0].mean().item()
        after = model.sample(4000, generator=torch.Generator().manual_seed(3))[:, 0].mean().item()
    assert abs(before - 3.0) < 0.3 and after > 3.5, (before, after)
    mm = MomentMatcher(torch.as_tensor(exp['x0'])[:, None], 2)
    assert len(mm.pows) == 2 and mm.loss(torch.as_tensor(exp['x0'])[:, None]) < 1e-8


def test_ada_moves_the_constrained_observable(flow2d):
    obs = {'x0': lambda x: x[:, 0]}
    exp = {'x0': torch.randn(4000, generator=torch.Generator().manual_seed(5)) * 0.5 + 4.0}
    cfg = AlignConfig(beta=0.01, iters=25, batch=256, kl_batch=64, lr=3e-3, critic_steps=5, critic_lr=5e-3, critic_warmup=50)
    model = fit_ada(flow2d, obs, exp, cfg)
    with torch.no_grad():
        before = flow2d.sample(4000, generator=torch.Generator().manual_seed(3))[:, 0]
        after = model.sample(4000, generator=torch.Generator().manual_seed(3))[:, 0]
    # seeds 0, 1, 2 of `cfg.seed`: mean 3.91, 3.86, 3.86; W1 to exp 1.0 -> 0.29, 0.29, 0.30
    assert abs(before.mean().item() - 3.0) < 0.3 and after.mean().item() > 3.6, (before.mean(), after.mean())
    assert w1(after, exp['x0']) < w1(before, exp['x0']) - 0.5


def test_ada_runs_and_records_history(flow2d):
    obs = {'x0': lambda x: x[:, 0], 'both': lambda x: x}
    exp = {'x0': np.random.default_rng(0).normal(4, 0.5, (500,)), 'both': np.random.default_rng(1).normal(0, 1, (500, 2))}
    state = torch.random.get_rng_state()
    model = fit_ada(flow2d, obs, exp, AlignConfig(iters=3, batch=64, kl_batch=16, critic_steps=2, critic_warmup=2))
    assert torch.equal(state, torch.random.get_rng_state())          # seeded from `seed`, global RNG untouched
    assert len(model.history) == 3 and {'w1_x0', 'w1_both', 'kl', 'fit'} <= set(model.history[-1])
    assert not any(p.requires_grad for p in model.parameters())
    assert not any(p.requires_grad for p in flow2d.parameters())   # the base is untouched


@pytest.mark.parametrize('kw, match', [
    (dict(exp={'xy': np.zeros((10, 3))}), 'does not match'),
    (dict(exp={'xy': np.zeros((0, 2))}), 'empty'),
    (dict(exp={'xy': np.zeros((10, 2))}, beta=-1.0), 'beta'),
    (dict(exp={'yz': np.zeros((10, 2))}), 'no experimental samples'),
    (dict(exp={'xy': np.full((10, 2), np.nan)}), 'NaN'),
    (dict(exp={'xy': np.zeros((10, 2))}, observables={}), 'non-empty'),
])
def test_bad_input_gives_clear_errors(kw, match):
    base = Flow(GaussianPath([0., 0., 0.], 1.0), steps=2)
    args = {**dict(observables={'xy': lambda x: x[:, :2]}, beta=0.1), **kw}
    with pytest.raises(ADAInputError, match=match):
        check_alignment_inputs(base, **args)
    cfg = AlignConfig(iters=1, batch=4, kl_batch=4, critic_warmup=0, beta=args['beta'])
    for fit in (fit_ada, fit_ea):                      # both check before any training
        with pytest.raises(ADAInputError, match=match):
            fit(base, args['observables'], args['exp'], cfg)


def test_other_bad_arguments(flow2d):
    obs, exp = {'x0': lambda x: x[:, 0]}, {'x0': np.zeros(10)}
    with pytest.raises(ADAInputError, match='method'): RunConfig().align_config('gan', seed=0)
    with pytest.raises(ADAInputError, match='iters=0'): AlignConfig(iters=0)
    with pytest.raises(ADAInputError, match='kl_batch=2.5'): AlignConfig(kl_batch=2.5)
    with pytest.raises(ADAInputError, match='AlignConfig'): fit_ada(flow2d, obs, exp, dict(iters=1))
    with pytest.raises(ADAInputError, match='order=0'): fit_ea(flow2d, obs, exp, AlignConfig(iters=1), order=0)
    with pytest.raises(ADAInputError, match='steps'): odeint(lambda x, t: x, torch.zeros(2, 2), steps=0)
    with pytest.raises(ADAInputError, match='empty'): train_flow(np.zeros((0, 3)))
    with pytest.raises(ADAInputError, match='unknown chain observables'): chain_observables(['rg', 'nope'])
    assert issubclass(ADAInputError, ValueError)


def test_chain_state_roundtrip_and_observables():
    pos = chain_langevin(200, 'sim', seed=0, burn=100, every=20)
    s = chain_to_state(pos)
    assert s.shape == (200, 9)
    back = state_to_chain(s)
    for f in CHAIN_OBSERVABLES.values():
        torch.testing.assert_close(f(back), f(pos), atol=1e-4, rtol=1e-4)
    obs = chain_observables()
    assert obs['bond'](s).shape == (200, 5) and obs['rg'](s).shape == (200,)
    assert w1(obs['rg'](s), obs['rg'](s)) == 0


def test_w1_of_known_distributions():
    assert w1(np.zeros(5), np.full(7, 2.5)) == pytest.approx(2.5)                  # point masses at distance 2.5
    assert w1(np.zeros((4, 2)), np.tile([1., 3.], (6, 1))) == pytest.approx(2.0)  # vector samples: mean of 1 and 3
    assert w1(np.array([0., 1.]), np.array([0., 0., 1., 1.])) == pytest.approx(0.0)
    assert w1(np.array([0., 1.]), np.array([0.5])) == pytest.approx(0.5)           # mass 1/2 moves 1/2 each way
    with pytest.raises(ADAInputError, match='dims differ'): w1(np.zeros((3, 2)), np.zeros((3, 3)))


def test_presets_share_one_vocabulary_and_pin_the_defaults():
    for presets in (MOG_PRESETS, CHAIN_PRESETS, TWIN_PRESETS): assert list(presets) == ['test', 'default']
    d = MOG_PRESETS['default']   # the full-size run whose numbers the README and the tutorial quote
    assert (d.n_sim, d.n_exp, d.n_eval, d.hidden, d.depth, d.base_iters, d.base_batch, d.beta, d.stable_target, d.stop) == \
        (20000, 4000, 2000, 128, 3, 8000, 1024, 0.3, True, 'holdout')
    assert (d.corrector, d.eval_steps, d.ada_fit) == ((0.9, 20, 1e-3), 30, 'critics')
    c = CHAIN_PRESETS['default']
    assert (c.n_sim, c.batch, c.kl_batch, c.beta, c.order, c.held_out) == (12000, 256, 64, 0.1, ('bond', 'rg', 'e2e'),
                                                                          ('mdist', 'cos'))
    a = d.align_config('ada', seed=3)   # every method gets the same budget and the same stopping rule
    e = d.align_config('ea', seed=3)
    assert (a.beta, a.iters, a.window, a.patience, a.tol, a.seed, a.stop, a.holdout) == \
        (e.beta, e.iters, e.window, e.patience, e.tol, e.seed, e.stop, e.holdout)


@pytest.mark.parametrize('run', [run_mog, run_chain])
def test_unknown_preset_or_setting_is_refused_before_any_compute(run, tmp_path):
    with pytest.raises(ADAInputError, match=r"unknown settings \['n_iter'\].*'iters'"):
        run(tmp_path, preset='test', n_iter=3)
    with pytest.raises(ADAInputError, match=r"preset='quick' is unknown; expected one of \['test', 'default'\]"):
        run(tmp_path, preset='quick')
    assert not list(tmp_path.iterdir())


def test_run_mog_test_preset_writes_files_and_aligns(tmp_path):
    cache = tmp_path / 'cache'
    met = run_mog(tmp_path / 'a', seed=0, preset='test', verbose=False, cache_dir=cache)
    assert set(met) == set(MOG_METHODS) >= {'base', 'ada', 'ea1', 'ea2', 'ea3', 'ea4', 'guidance'}
    on_disk = json.loads((tmp_path / 'a' / 'metrics.json').read_text())
    assert on_disk == met
    n = MOG_PRESETS['test'].n_eval
    for m in MOG_METHODS:   # every number beside its two-sample floor
        assert {'energy_w2', 'cluster_kl', 'kde_l1', 'floor_energy_w2', 'floor_cluster_kl', 'floor_kde_l1'} <= set(met[m])
        assert all(np.isfinite(met[m][k]) for k in ('energy_w2', 'cluster_kl', 'kde_l1'))
        assert set(met[m]['pairs']) == {'P1', 'P2', 'P3', 'P4'}
        a = np.load(tmp_path / 'a' / f'samples_{m}.npy')
        assert a.shape == (n, 3) and a.dtype == np.float32 and np.isfinite(a).all()
    assert not [p for p in os.listdir(tmp_path / 'a') if p.endswith('.tmp')]
    info = json.loads((tmp_path / 'a' / 'run_info.json').read_text())
    assert info['preset'] == 'test' and not info['base_cached']
    # alignment moved the samples toward the target: the projections' marginal W1 to the reference samples of ν drops
    ref = mog_sample('target', n, 50)
    d = {m: w1(np.load(tmp_path / 'a' / f'samples_{m}.npy'), ref) for m in MOG_METHODS}
    assert all(d[m] < d['base_ode'] for m in ('ada', 'ea2', 'ea3', 'ea4')), d     # against the base by the same sampler
    assert d['ada_limit'] < min(d[m] for m in ('ada', 'ea2', 'ea3', 'ea4')), d   # ADA's β → 0 optimum matches the projections exactly
    assert 0 < info['ada_limit']['kl_base'] and 0.01 < info['ada_limit']['kl_target']        # closer to the base, and still not ν
    assert all(np.isfinite(c['kl_target']) for c in info['checks']['ada'])                    # the curves' truth KL at every check
    # warm: both flows come from the cache, and every number is the same
    assert run_mog(tmp_path / 'b', seed=0, preset='test', verbose=False, cache_dir=cache) == met
    assert json.loads((tmp_path / 'b' / 'run_info.json').read_text())['base_cached']


def test_run_chain_test_preset_writes_metrics_and_aligns(tmp_path):
    res = run_chain(tmp_path, seed=1, preset='test', verbose=False)
    on_disk = json.loads((tmp_path / 'metrics.json').read_text())
    info = json.loads((tmp_path / 'run_info.json').read_text())
    names = set(info['order']) | set(info['held_out'])
    assert on_disk == res and names == set(CHAIN_OBSERVABLES) and set(on_disk['base']) == names
    assert chain_steps(on_disk) == info['order'] == list(info['aligned'])
    for a in info['order']:
        assert set(on_disk[f'ada +{a}']) == set(on_disk[f'ea +{a}']) == names | {'converged', 'stopped_at'}
        # every aligned observable's W1 to held-out exp samples is below the base's, for both methods
        assert all(on_disk[f'{m} +{a}'][n] < on_disk['base'][n] for m in ('ada', 'ea') for n in info['aligned'][a]), (a, on_disk)


def test_every_benchmark_writes_one_layout(tmp_path):
    "mog and chain (twins in the slow test) write metrics.json as row -> numbers, run_info.json with settings and timings, table.md."
    runs = {'mog': run_mog(tmp_path / 'mog', seed=0, preset='test', verbose=False, cache_dir=tmp_path / 'cache'),
            'chain': run_chain(tmp_path / 'chain', seed=0, preset='test', verbose=False, cache_dir=tmp_path / 'cache')}
    for b, met in runs.items():
        d = tmp_path / b
        assert {'metrics.json', 'run_info.json', 'table.md'} <= set(os.listdir(d))
        assert json.loads((d / 'metrics.json').read_text()) == met and all(isinstance(v, dict) for v in met.values()), b
        info = json.loads((d / 'run_info.json').read_text())
        assert (info['seed'], info['preset']) == (0, 'test') and info['timings_s']['total'] > 0 and 'config' in info, b
        assert 'base' in met and all(isinstance(x, (int, float, bool, dict)) for v in met.values() for x in v.values()), b


@pytest.mark.slow
def test_run_twins_test_preset(tmp_path):
    pytest.importorskip('simreal_nb.twins.systems')
    from simreal_nb.ada.adabench import run_twins
    from simreal_nb.twins.systems import SYSTEMS
    res = run_twins(tmp_path, 'cylinder', seed=0, preset='test', verbose=False)
    assert {'sim data', 'exp measurement (u,v only)', 'base', 'ada', 'ea2'} <= set(res)
    assert all(np.isfinite(res[m]['w1_p']) for m in ('sim data', 'base', 'ada', 'ea2'))
    # the measured fields moved toward the true exp physics (seed 0: base 1.17e-3, ADA 1.14e-3, EA(2) 1.09e-3)
    assert res['ada']['w1_uv'] < res['base']['w1_uv'] and res['ea2']['w1_uv'] < res['base']['w1_uv'], res
    on_disk = json.loads((tmp_path / 'metrics.json').read_text())
    assert on_disk.keys() == res.keys() and (tmp_path / 'table.md').exists()
    info = json.loads((tmp_path / 'run_info.json').read_text())   # the probes and the field split come from the system and the datasets, not from ada
    assert info['probes'] == [list(p) for p in SYSTEMS['cylinder'].probes]
    assert (info['measured'], info['hidden'], info['preset']) == (['u', 'v'], ['p'], 'test')


def test_one_sided_critic_recovers_from_a_wrong_sign_start():
    "A 1-D critic that starts decreasing must still learn W1 > 0 (the two-sided penalty can trap it at ≈ -W1)."
    from simreal_nb.ada.fit import Critic, gradient_penalty
    torch.manual_seed(0); g = torch.Generator().manual_seed(0)
    real_all, fake = torch.randn(4000, 1) * 0.5 + 4.0, torch.randn(256, 1) + 3.2
    c = Critic(1)
    with torch.no_grad():
        if (c(torch.tensor([[4.]])) - c(torch.tensor([[3.]]))).item() > 0: c.net[-1].weight.mul_(-1)
        assert (c(torch.tensor([[4.]])) - c(torch.tensor([[3.]]))).item() < 0
    opt = torch.optim.Adam(c.parameters(), lr=2e-3, betas=(0.5, 0.9))
    for _ in range(300):
        real = real_all[torch.randint(4000, (256,), generator=g)]
        loss = c(fake).mean() - c(real).mean() + 10 * gradient_penalty(c, real, fake, g, one_sided=True)
        opt.zero_grad(); loss.backward(); opt.step()
    est = (c(real_all).mean() - c(fake).mean()).item()
    assert 0.6 < est < 1.2, est        # true W1 ≈ 0.9


def test_plateau_rule_on_known_histories():
    cfg = AlignConfig(window=5, patience=2, tol=0.01)
    flat = [dict(it=i, w1=0.1 + 0.001 * (i % 2), kl=0.5) for i in range(15)]
    trend = [dict(it=i, w1=1.0 - 0.02 * i, kl=0.5) for i in range(15)]
    rising_kl = [dict(it=i, w1=0.1, kl=0.05 * i) for i in range(15)]
    assert _plateau(flat, cfg) and not _plateau(trend, cfg) and not _plateau(rising_kl, cfg)
    assert not _plateau(flat[:14], cfg)                       # judged only at window ends
    assert not _plateau(flat[:10], cfg)                       # needs patience + 1 windows
    assert not _plateau(flat, AlignConfig(window=5, patience=0))  # patience 0: always run the cap


def test_alignment_stops_on_the_plateau_and_says_so(flow2d):
    obs = {'x0': lambda x: x[:, 0]}
    exp = {'x0': torch.randn(2000, generator=torch.Generator().manual_seed(5)) * 0.5 + 3.0}   # already matched
    cfg = AlignConfig(beta=0.1, iters=400, batch=128, kl_batch=32, lr=1e-4, window=10, patience=2, tol=0.05)
    m = fit_ea(flow2d, obs, exp, cfg, order=1)
    assert m.converged and m.stopped_at < 400 and len(m.history) == m.stopped_at
    capped = fit_ea(flow2d, obs, exp, AlignConfig(iters=5, batch=64, kl_batch=16, window=10), order=1)
    assert not capped.converged and capped.stopped_at == 5


def test_every_critic_step_sees_fresh_generator_samples(flow2d, monkeypatch):
    calls = []
    orig = Flow.sample
    def counting(self, *a, **kw):
        if not kw.get('with_logp') and not torch.is_grad_enabled(): calls.append(1)
        return orig(self, *a, **kw)
    monkeypatch.setattr(Flow, 'sample', counting)
    obs = {'x0': lambda x: x[:, 0], 'x1': lambda x: x[:, 1]}
    exp = {k: np.random.default_rng(i).normal(0, 1, 300) for i, k in enumerate(obs)}
    fit_ada(flow2d, obs, exp, AlignConfig(iters=4, batch=32, kl_batch=8, critic_steps=3, critic_warmup=5))
    # one no-grad batch per critic step (shared by both critics): warm-up 5 + 4 generator steps × 3, plus the input check's 1
    assert len(calls) == 1 + 5 + 4 * 3


def test_cached_flow_reads_back_and_never_trusts_a_bad_file(tmp_path, flow2d):
    n = []
    train = lambda: (n.append(1), flow2d)[1]
    a = cached_flow(dict(k=1), train, tmp_path)
    b = cached_flow(dict(k=1), train, tmp_path)
    assert len(n) == 1 and b.from_cache and not a.from_cache
    z = torch.randn(7, 2)
    torch.testing.assert_close(a.sample(z=z), b.sample(z=z), rtol=0, atol=0)
    with open(b.cache_path, 'wb') as f: f.write(os.urandom(100))     # foreign bytes: trained again
    cached_flow(dict(k=1), train, tmp_path)
    assert len(n) == 2
    s = flow_state(flow2d); s['key'] = 'another'                       # a valid file under the wrong key: trained again
    torch.save(s, b.cache_path)
    c = cached_flow(dict(k=1), train, tmp_path)
    assert len(n) == 3 and not c.from_cache
    torch.testing.assert_close(flow_from_state(flow_state(flow2d)).sample(z=z), flow2d.sample(z=z), rtol=0, atol=0)


def test_guided_flow_matches_a_conditioned_marginal():
    x = torch.randn(4000, 1, generator=torch.Generator().manual_seed(1))
    data = torch.cat([x, x + 0.1 * torch.randn(4000, 1, generator=torch.Generator().manual_seed(2))], 1)
    gf = train_guided_flow(data, {'a': lambda x: x[:, 0]}, hidden=32, depth=2, iters=400, batch=256, steps=8)
    given = {'a': 2 + 0.5 * torch.randn(2000, 1, generator=torch.Generator().manual_seed(3))}
    with torch.no_grad():
        s = gf.sample(z=torch.randn(2000, 2, generator=torch.Generator().manual_seed(4)), given=given)
        u = gf.sample(z=torch.randn(2000, 2, generator=torch.Generator().manual_seed(4)))   # no condition: the sim
    assert abs(s[:, 0].mean() - 2) < 0.2 and abs(s[:, 1].mean() - 2) < 0.25     # follows the experiment's a
    assert abs(u[:, 0].mean()) < 0.2                                            # unconditional: the simulation's
    g2 = flow_from_state(flow_state(gf))                                        # guided flows round-trip too
    assert isinstance(g2, GuidedFlow) and g2.names == ['a']
    with pytest.raises(ADAInputError, match="unknown observables"): gf.sample(n=3, given={'b': torch.zeros(3, 1)})
    with pytest.raises(ADAInputError, match="p_drop"): train_guided_flow(data, {'a': lambda x: x[:, 0]}, p_drop=1.0)


def test_floor_and_pair_stats_of_exact_samples():
    f = mog_floor(2000, seed=0)
    assert 0.03 < f['energy_w2'] < 0.15 and f['cluster_kl'] < 0.01
    ps = pair_stats(mog_sample('target', 20000, 4))
    w, _, sig = mog_params('target')
    for k, (a, b) in enumerate(MOG_PAIRS):
        assert ps[f'P{k+1}']['weight'] == pytest.approx(float(w[a] + w[b]), abs=0.015)
        assert ps[f'P{k+1}']['radius'] == pytest.approx(float(sig[a]), abs=0.02)


def test_seed_summary_and_run_seeds(tmp_path):
    s = seed_summary([{'a': 1.0, 'ok': True, 'n': 'x'}, {'a': 3.0, 'ok': False, 'n': 'x'}])
    assert s == {'a': 2.0, 'a_std': math.sqrt(2), 'ok': 0.5, 'n': 'x'}
    fake = lambda out, seed: {'m': {'energy_w2': float(seed)}}
    out = run_seeds(fake, tmp_path, seeds=(0, 1, 2))
    assert out['metrics']['m']['energy_w2'] == 1.0 and out['metrics']['m']['energy_w2_std'] == 1.0
    assert json.loads((tmp_path / 'summary.json').read_text()) == out
    with pytest.raises(ADAInputError, match='distinct'): run_seeds(fake, tmp_path, seeds=(1, 1))
    with pytest.raises(ADAInputError, match='seed=-1'): run_seeds(fake, tmp_path, seeds=(-1,))


def test_sliced_w1_matches_scipy_per_direction():
    "The mean over directions of scipy's 1-D W1 of the projections (to the quantile grid's interpolation: 1 % at 500 samples)."
    from scipy.stats import wasserstein_distance
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(500, 2, generator=g), torch.randn(500, 2, generator=g) * 1.5 + 0.3
    dirs = torch.randn(2, 8, generator=g); dirs = dirs / dirs.norm(dim=0)
    want = np.mean([wasserstein_distance((a @ dirs[:, k]).numpy(), (b @ dirs[:, k]).numpy()) for k in range(8)])
    assert float(sliced_w1(a, b, dirs)) == pytest.approx(want, rel=1e-2)
    assert float(sliced_w1(a, b * 0 + a, dirs)) == 0


def test_holdout_rule_returns_its_best_check():
    "ADA stopped by the holdout rule returns the weights of its best check: re-scoring the model gives that check's score."
    g = torch.Generator().manual_seed(0)
    data = torch.randn(2000, 2, generator=g) * 0.5 + torch.tensor([3., -1.])
    base = train_flow(data, hidden=32, depth=2, iters=150, batch=256, seed=0, steps=6)
    obs = {'x0': lambda x: x[:, 0]}
    exp = {'x0': torch.randn(1000, generator=torch.Generator().manual_seed(5)) * 0.5 + 4.0}
    cfg = AlignConfig(beta=0.01, iters=40, batch=128, kl_batch=32, lr=3e-3, critic_steps=2, critic_lr=5e-3, critic_warmup=20,
                      stop='holdout', window=5, patience=2, check_batch=512)
    m = fit_ada(base, obs, exp, cfg)
    best = min(m.checks, key=lambda c: c['heldout'])
    assert m.best_at == best['it'] and m.checks[0]['it'] == 0 and len(m.checks) >= 2
    # the check's own scorer, rebuilt from the same split and seed, gives the returned model that check's score
    from simreal_nb.ada.fit import split_holdout
    exp_t = check_alignment_inputs(base, obs, exp, cfg.beta)
    _, held = split_holdout(exp_t, cfg.holdout, torch.Generator().manual_seed(cfg.seed))
    assert HoldoutCheck(obs, held, 2, cfg.check_batch, cfg.seed + 1)(m)['heldout'] == pytest.approx(best['heldout'], abs=1e-6)
    assert m.converged == (m.stopped_at < cfg.iters)


def test_corrector_pulls_stranded_samples_into_the_modes_and_only_where_the_score_holds(flow2d):
    """A flow on two separated 1-D modes strands samples between them; the corrector takes most back, an aligned flow refuses it."""
    g = torch.Generator().manual_seed(0)
    data = torch.cat([torch.randn(3000, 1, generator=g) * 0.3 - 2, torch.randn(3000, 1, generator=g) * 0.3 + 2])
    fl = train_flow(data, hidden=32, depth=2, iters=1500, batch=512, seed=0, steps=10, t_power=3.)
    z = torch.randn(8000, 1, generator=torch.Generator().manual_seed(1))
    gap = lambda x: float(((x.abs() < 1.0).float()).mean())            # the exact mixture puts 0.04 % there
    with torch.no_grad():
        plain = fl.sample(z=z, steps=30)
        fixed = fl.sample(z=z, steps=30, corrector=Corrector(0.9, 20, 1e-2), generator=torch.Generator().manual_seed(2))
        again = fl.sample(z=z, steps=30, corrector=Corrector(0.9, 20, 1e-2), generator=torch.Generator().manual_seed(2))
    assert torch.equal(fixed, again)                                   # seeded moves: the same samples
    assert gap(plain) > 0.01 and gap(fixed) < 0.3 * gap(plain), (gap(plain), gap(fixed))   # measured: 2.1 % -> 0.36 %
    assert abs(float((fixed > 0).float().mean()) - float((plain > 0).float().mean())) < 0.01   # no mass moves between modes
    aligned = fit_ada(flow2d, {'x0': lambda x: x[:, 0]}, {'x0': torch.randn(2000) * 0.5 + 3.5},
                      AlignConfig(iters=3, batch=64, kl_batch=16, critic_steps=1, critic_warmup=1))
    with pytest.raises(ADAInputError, match='implies no score'): aligned.sample(10, corrector=Corrector())
    cfg = MOG_PRESETS['test']                                          # the benchmark's sampler: corrected where the score holds
    zz = torch.randn(50, 2, generator=torch.Generator().manual_seed(3))
    assert not torch.equal(cfg.sample(flow2d, zz, 1), cfg.sample(flow2d, zz, 2))    # the moves' noise is used ...
    assert torch.equal(cfg.sample(aligned, zz, 1), cfg.sample(aligned, zz, 2))      # ... and an aligned flow has none


def test_sliced_fit_term_is_seeded_and_matches_the_whole_distribution(flow2d):
    """ADA's critic-free fit term: deterministic per seed, records one sliced W1 per observable, widens a coordinate to a wider target."""
    exp = {'x0': torch.randn(4000, generator=torch.Generator().manual_seed(5)) * 0.8 + 3.0}
    cfg = AlignConfig(beta=0.01, iters=40, batch=512, kl_batch=32, lr=3e-3, fit='sliced', seed=4)
    a, b = (fit_ada(flow2d, {'x0': lambda x: x[:, 0]}, exp, cfg) for _ in range(2))
    assert [h['sw_x0'] for h in a.history] == [h['sw_x0'] for h in b.history]
    assert a.history[-1]['sw_x0'] < 0.5 * a.history[0]['sw_x0']
    with torch.no_grad(): x = a.sample(4000, generator=torch.Generator().manual_seed(6))[:, 0]
    assert 0.65 < float(x.std()) < 0.95 and abs(float(x.mean()) - 3.0) < 0.15, (x.mean(), x.std())


def test_identifiable_target_has_zero_face_gaps_and_its_own_density():
    "The identifiable neighbour: zero face gaps, exact samples with its per-axis widths, a log-density that is the product of 1-D normals per blob."
    from simreal_nb.ada.adamog import face_gaps, face_projected, pair_radii
    sig = face_projected((0.8, 0.6, 0.5, 0.4))
    assert sig.shape == (4, 3) and torch.allclose(face_gaps(sig), torch.zeros(3, dtype=torch.float64), atol=1e-5)
    assert (face_gaps((0.8, 0.6, 0.5, 0.4)).abs() > 1).all()           # the paper's widths break every relation
    assert torch.allclose(face_projected(sig).double(), sig.double(), atol=1e-5)   # a projection: applied twice, unchanged
    w, m, s = mog_params('identifiable')
    np.testing.assert_allclose(w.numpy(), mog_params('target')[0].numpy())
    x = torch.tensor([[2.5, 3.4, 2.9], [-3.1, 2.6, 3.3]])
    comp = torch.distributions.Normal(m[None], s[None]).log_prob(x[:, None]).sum(-1) + torch.log(w)
    torch.testing.assert_close(mog_logpdf(x, 'identifiable'), torch.logsumexp(comp, 1))
    ps = pair_stats(mog_sample('identifiable', 40000, 3))
    for k, p in enumerate(ps.values()):
        assert p['radius'] == pytest.approx(pair_radii('identifiable')[k], abs=0.015)
        assert [p[f'radius_{c}'] for c in 'xyz'] == pytest.approx(sig[k].tolist(), abs=0.02)
    with pytest.raises(ADAInputError, match='4 or 4x3'): face_projected((0.8, 0.6))
    with pytest.raises(ADAInputError, match="'nu'"): mog_params('nu')


def test_only_the_identifiable_target_is_its_own_i_projection():
    "The base's I-projection onto the three projections reproduces the identifiable mixture (up to the grid), not the paper's."
    from simreal_nb.ada.adamog import mog_limit, mog_cells, grid_kl
    kl = {}
    for kind in ('target', 'identifiable'):
        grid, limit, _ = mog_limit(7., 61, target=kind)
        for ax in range(3): assert np.abs(limit.sum(ax) - mog_cells(grid, kind).sum(ax)).sum() < 1e-6
        kl[kind] = grid_kl(mog_cells(grid, kind), limit)
    assert kl['identifiable'] < 0.002 < 0.02 < kl['target']


def test_run_mog_scores_against_the_chosen_target(tmp_path):
    met = run_mog(tmp_path / 'i', seed=0, preset='test', verbose=False, cache_dir=tmp_path / 'cache', target='identifiable')
    info = json.loads((tmp_path / 'i' / 'run_info.json').read_text())
    assert info['config']['target'] == 'identifiable' and info['ada_limit']['kl_target'] < 0.002
    assert '*identifiable*' in (tmp_path / 'i' / 'table.md').read_text()
    from simreal_nb.ada.adamog import mog_floor
    assert met['ada']['floor_energy_w2'] == mog_floor(1000, 0, kind='identifiable')['energy_w2']
    with pytest.raises(ADAInputError, match="target='nu'"):
        run_mog(tmp_path / 'x', seed=0, preset='test', verbose=False, cache_dir=tmp_path / 'cache', target='nu')


def test_energy_tail_splits_off_the_stranded_samples():
    "Samples moved between the blobs: counted as stranded, and Energy W2 without them back near the floor."
    from simreal_nb.ada.adamog import energy_tail
    ref, x = mog_sample('target', 2000, 1), mog_sample('target', 2000, 2)
    x[:20] = 0.                                                  # 1 % at the cube's centre, far from every blob
    lp = lambda a: mog_logpdf(a, 'target')
    t, clean = energy_tail(x, ref, lp), energy_w2(x[20:], ref, lp)
    assert t['stranded'] == pytest.approx(0.01, abs=0.002)
    assert energy_w2(x, ref, lp) > 3 * clean and t['energy_w2_kept'] < 1.5 * clean
