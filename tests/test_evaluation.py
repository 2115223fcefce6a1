"""Scores of models on both held-out domains, and the reference predictors Persistence and MeanField."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import xarray as xr

from simreal_nb.study.evaluation import (Analog, MeanField, Persistence, _cond_step, _model_device, evaluate, long_windows,
                                   predict_windows, rollout)
from simreal_nb.training.batches import collate
from simreal_nb.training.trainer import train
from test_protocols import KW, ToyWindows, net, toy_data, one_thread, toy  # fixtures shared with the training tests


def hand_data(u, v, p, normalizer=None):
    "Window data of both domains from frames [N, T, H, W] per field (exp without pressure); every split the same."
    fr = torch.stack([torch.as_tensor(a, dtype=torch.float32) for a in (u, v, p)], 2)  # [N, T, 3, H, W]
    cond = torch.zeros(fr.shape[0], 1)
    w = {d: ToyWindows(dict(frames=fr, cond=cond, present=torch.tensor(m), domain=d))
         for d, m in (('sim', (True, True, True)), ('exp', (True, True, False)))}
    return dict(sim=dict(train=w['sim'], test=w['sim']), exp=dict(train=w['exp'], test=w['exp']),
                normalizer=normalizer, fields=('u', 'v', 'p'))


N, T, H, W = 2, 5, 2, 2
t = torch.arange(T, dtype=torch.float32)[None, :, None, None]
ONES = torch.ones(N, T, H, W)


class Affine:
    "A normaliser whose physical units are 2 * normalised + 1."
    def decode(self, x, fields): return 2 * x + 1


def test_evaluate_both_domains(toy):
    m = net(); train(m, toy, 'joint', steps=10, **KW)
    ev = evaluate(m, toy, horizon=4)
    assert isinstance(ev, xr.Dataset) and ev.score.dims == ('domain', 'mode', 'field', 'metric')
    assert list(ev.domain.values) == ['sim', 'exp'] and list(ev.field.values) == ['u', 'v', 'p', 'all']
    assert np.isnan(ev.score.sel(domain='exp', field='p')).all()  # exp never measures pressure
    assert np.isfinite(ev.score.sel(domain='sim', field='p', metric='rmse')).all()
    assert np.isfinite(ev.score.sel(mode='rollout', metric='frmse', field='all')).all()
    assert np.isnan(ev.score.sel(mode='one_step', metric='frmse')).all()  # one frame: no fRMSE
    assert ev.rmse_lead.sizes['lead'] == 4 and np.isfinite(ev.rmse_lead.sel(field='all')).all()
    # rollout's first lead equals the one-step error on the same windows
    one = evaluate(m, dict(sim=dict(test=toy['sim']['test']), fields=toy['fields']), horizon=1, domains=('sim',))
    assert one.score.sel(mode='one_step', field='all', metric='rmse').item() == pytest.approx(one.rmse_lead.sel(field='all', lead=1).item(), rel=1e-5)


def test_evaluate_perfect_model_scores_zero(toy):
    class Oracle(nn.Module):  # the toy wave moves ~0.3-0.5 cells; an identity model is not perfect, so use
        def forward(self, x, field_mask, cond=None): return self.y  # the stored target instead
    o = Oracle()
    wd = toy['sim']['test']
    b = collate([wd[i] for i in range(len(wd))])
    o.y = b['y']
    ev = evaluate(o, dict(sim=dict(test=wd), fields=toy['fields']), horizon=0, batch_size=len(wd), domains=('sim',))
    assert ev.score.sel(metric='rmse').max().item() == 0 and ev.sizes['mode'] == 1


def test_rollout_conditioning_follows_the_window():
    "Rollout step j sees the conditioning (parameters + inputs over its frames) of the short window starting j later."
    from simreal_nb.data.domains import WindowDataset
    from simreal_nb.core.schema import FIELD_META
    N, T, H, W = 2, 10, 4, 4
    rng = np.random.default_rng(0)
    ds = xr.Dataset({f: (('traj', 'time', 'y', 'x'), rng.standard_normal((N, T, H, W)).astype('float32'), FIELD_META[f]) for f in ('u', 'v')},
                    coords=dict(traj=np.arange(N), time=np.arange(T) * 0.1, y=np.arange(H) * 1.0, x=np.arange(W) * 1.0,
                                Re=('traj', [100., 150.])))
    ds['omega_cmd'] = (('traj', 'time'), rng.standard_normal((N, T)).astype('float32'))
    ds.attrs.update(domain='exp', system='t', generator='t', generator_version='1', seed=0, inputs='omega_cmd', scale_u=1.0, scale_v=1.0)
    for n_in, n_out in [(1, 1), (2, 1), (2, 2)]:
        short = WindowDataset(ds, n_in, n_out)
        long = long_windows(short, 4)
        assert long.n_cond == 1 + n_in + 4
        c_long = long[0]['cond'][None]
        for j in range(0, 4 - n_out + 1, n_out):
            torch.testing.assert_close(_cond_step(c_long, long.n_params, n_in + 4, j, n_in + n_out)[0], short[j]['cond'])


def test_evaluate_exp_truth_scores_unmeasured_pressure(toy):
    "exp_truth: the model gets the measured exp inputs; exp is scored on the truth of the measured fields, exp_truth on every true field."
    m = net(); m.eval()
    ex = toy['exp']['test']
    truth = ToyWindows(ex.ds | dict(present=torch.tensor([True, True, True]), domain='exp_truth'))
    ev = evaluate(m, toy, horizon=3, exp_truth=truth)
    assert list(ev.domain.values) == ['sim', 'exp', 'exp_measured', 'exp_truth'] and ev.attrs['exp_target'] == 'truth'
    assert np.isfinite(ev.score.sel(domain='exp_truth', field='p', metric='rmse')).all()
    assert ev.score.sel(domain=['exp', 'exp_measured'], field='p').isnull().all()  # exp: the measured fields only
    for mode in ('one_step', 'rollout'):  # same inputs, and here the truth is the measurement: u and v agree everywhere
        for d in ('exp', 'exp_measured'):
            np.testing.assert_allclose(ev.score.sel(domain='exp_truth', mode=mode, field=['u', 'v'], metric='rmse'),
                                       ev.score.sel(domain=d, mode=mode, field=['u', 'v'], metric='rmse'), rtol=1e-6)
    np.testing.assert_allclose(ev.noise_floor.sel(field=['u', 'v', 'all'], metric='rmse'), 0, atol=1e-7)  # a perfect measurement
    plain = evaluate(m, toy, horizon=3)
    assert plain.attrs['exp_target'] == 'measured' and plain.noise_floor.isnull().all()
    xr.testing.assert_allclose(plain.score.sel(domain='exp'), ev.score.sel(domain='exp_measured', drop=True).assign_coords(domain='exp'))


def noisy_exp(model_truth=False):
    "Exp whose measured u is the true u plus 0.1 of a checkerboard that flips sign every frame; the truth is steady."
    f = torch.linspace(-1, 1, W)[None, None, :].expand(N, H, W)
    true = torch.stack([f[:, None].expand(N, T, H, W), ONES, 2 * ONES], 2).contiguous()  # [N, T, 3, H, W]
    sign = (-1.0) ** (torch.arange(H)[:, None] + torch.arange(W)[None, :]) * (-1.0) ** torch.arange(T)[:, None, None]
    meas = true.clone(); meas[:, :, 0] += 0.1 * sign
    cond = torch.zeros(N, 1)
    mk = lambda fr, present, d: ToyWindows(dict(frames=fr, cond=cond, present=torch.tensor(present), domain=d))
    exp = mk(meas, (True, True, False), 'exp')
    data = dict(sim=dict(train=mk(true, (True, True, True), 'sim'), test=mk(true, (True, True, True), 'sim')),
                exp=dict(train=exp, test=exp), normalizer=None, fields=('u', 'v', 'p'))
    return data, mk(true, (True, True, True), 'exp_truth'), true[0, 0]


def test_exp_is_scored_against_the_truth_beside_the_measurement_and_its_floor():
    "Noise 0.1 on u: the floor is 0.1; persistence copies the noise (0.1 against the truth, 0.2 against the next measurement); the truth itself scores 0 against the truth and the floor against the measurement."
    data, truth, frame = noisy_exp()
    class Truth(nn.Module):
        def forward(self, x, field_mask, cond=None): return frame.expand(len(x), 1, 3, H, W).clone()
    for mode in ('one_step', 'rollout'):
        ev = evaluate(Persistence(), data, horizon=3, exp_truth=truth).sel(mode=mode, metric='rmse')
        np.testing.assert_allclose(ev.noise_floor.sel(field=['u', 'v', 'all']), [0.1, 0, 0.1 / np.sqrt(2)], rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(ev.score.sel(domain='exp', field=['u', 'v']), [0.1, 0], rtol=1e-6, atol=1e-8)
        ok = evaluate(Truth(), data, horizon=3, exp_truth=truth).sel(mode=mode, metric='rmse')
        np.testing.assert_allclose(ok.score.sel(domain='exp', field=['u', 'v', 'all']), 0, atol=1e-7)
        np.testing.assert_allclose(ok.score.sel(domain='exp_measured', field='u'), 0.1, rtol=1e-6)
    one = evaluate(Persistence(), data, horizon=0, exp_truth=truth).sel(mode='one_step', metric='rmse')
    np.testing.assert_allclose(one.score.sel(domain='exp_measured', field='u'), 0.2, rtol=1e-6)  # the noise flips every frame


# ---------------------------------------------------------------------------------------------------------- baselines
def test_persistence_repeats_the_last_input_frame():
    x = torch.arange(2 * 3 * 3 * 2 * 2, dtype=torch.float32).view(2, 3, 3, 2, 2)
    fm = torch.tensor([[True, True, False], [True, True, True]])
    out = Persistence(n_out=2)(x, fm)
    assert out.shape == (2, 2, 3, 2, 2) and len(list(Persistence().parameters())) == 0
    assert torch.equal(out[1, 0], x[1, -1]) and torch.equal(out[1, 1], x[1, -1])
    assert torch.equal(out[0, :, :2], x[0, -1:, :2].expand(2, 2, 2, 2)) and (out[0, :, 2] == 0).all()  # unmeasured: 0
    with pytest.raises(ValueError, match='n_out'):
        Persistence(n_out=0)


def test_persistence_scores_by_hand():
    "u grows 0.5 and p falls 1 per frame, v is constant: persistence is off by 0.5 k and k at lead k."
    data = hand_data(0.5 * t * ONES + torch.arange(N)[:, None, None, None], ONES, -t * ONES)
    e = evaluate(Persistence(), data, horizon=3)
    r = e.score.sel(metric='rmse')
    np.testing.assert_allclose(r.sel(mode='one_step', domain='sim', field=['u', 'v', 'p', 'all']), [0.5, 0, 1, np.sqrt(1.25 / 3)], rtol=1e-6)
    np.testing.assert_allclose(r.sel(mode='one_step', domain='exp', field=['u', 'v', 'all']), [0.5, 0, np.sqrt(0.25 / 2)], rtol=1e-6)
    k = np.array([1., 2., 3.])
    np.testing.assert_allclose(e.rmse_lead.sel(domain='sim', field=['u', 'p', 'all']), [0.5 * k, k, k * np.sqrt(1.25 / 3)], rtol=1e-6)
    np.testing.assert_allclose(r.sel(mode='rollout', domain='sim', field='u'), 0.5 * np.sqrt((k ** 2).mean()), rtol=1e-6)
    assert list(e.n_windows.sel(domain='sim').values) == [N * (T - 1), N]  # one 1 + 3 window per trajectory
    # physical units: the normaliser's decode doubles every error
    e2 = evaluate(Persistence(), data | dict(normalizer=Affine()), horizon=3)
    np.testing.assert_allclose(e2.score.sel(metric='rmse'), 2 * e.score.sel(metric='rmse'), rtol=1e-6)


def test_persistence_is_exact_on_a_field_constant_in_time():
    xs = torch.linspace(-1, 1, W)[None, None, None, :] * ONES
    e = evaluate(Persistence(), hand_data(xs, 2 * ONES, xs ** 2), horizon=3)
    assert e.score.sel(metric='rmse').max() == 0 and e.rmse_lead.max() == 0


def test_mean_field_by_hand():
    "Two trajectories at u = 1 and u = 3: the mean field is 2, except at the never-valid point (0, 0)."
    u = torch.tensor([1., 3.])[:, None, None, None] * ONES
    v = torch.linspace(0, 1, W)[None, None, None, :] * ONES
    data = hand_data(u, v, 5 * ONES)
    mf = MeanField.fit(data['sim']['train'])
    assert len(list(mf.parameters())) == 0 and mf.n_out == 1 and mf.mean.shape == (3, H, W)
    want = torch.stack([2 * torch.ones(H, W), v[0, 0], 5 * torch.ones(H, W)])
    want[:, 0, 0] = 0  # ToyWindows marks (0, 0) invalid in every target
    torch.testing.assert_close(mf.mean, want)
    me = MeanField.fit(data['exp']['train'])
    assert (me.mean[2] == 0).all() and torch.equal(me.mean[:2], want[:2])  # exp measures no pressure
    out = mf(torch.zeros(4, 1, 3, H, W), torch.ones(4, 3, dtype=torch.bool))
    assert out.shape == (4, 1, 3, H, W) and all(torch.equal(o[0], want) for o in out)
    e = evaluate(mf, data, horizon=2, domains=('sim',))
    np.testing.assert_allclose(e.score.sel(metric='rmse', field=['u', 'v', 'p']).values, [[[1, 0, 0]] * 2], atol=1e-7)  # (domain, mode, field)
    np.testing.assert_allclose(e.rmse_lead.sel(field='u'), [[1, 1]], atol=1e-7)
    with pytest.raises(ValueError, match='empty'):
        MeanField.fit([])


def test_mean_field_is_exact_on_a_steady_field_and_keeps_n_out():
    xs = torch.linspace(-1, 1, W)[None, None, None, :] * ONES
    data = hand_data(xs, 2 * ONES, xs ** 2)
    long = ToyWindows(data['sim']['train'].ds, n_in=1, n_out=2)
    mf = MeanField.fit(long, batch_size=3)  # several batches
    assert mf.n_out == 2 and mf(torch.zeros(1, 1, 3, H, W), None).shape == (1, 2, 3, H, W)
    e = evaluate(mf, dict(sim=dict(test=long), fields=data['fields']), horizon=4, domains=('sim',))  # 2 frames a call
    assert e.score.sel(metric='rmse').max() == 0 and e.rmse_lead.sizes['lead'] == 4 and e.rmse_lead.max() == 0


def test_evaluate_infers_the_device_of_a_model_without_parameters(toy):
    assert _model_device(Persistence()) == torch.device('cpu')
    mf = MeanField.fit(toy['sim']['train'])
    assert _model_device(mf) == mf.mean.device and _model_device(net()) == torch.device('cpu')
    p = Persistence().train()
    e = evaluate(p, toy, horizon=2)  # no device given: no parameter to ask
    assert p.training and np.isfinite(e.score.sel(domain='sim', metric='rmse', field='all')).all()
    if torch.cuda.is_available():
        mf.to('cuda')
        np.testing.assert_allclose(evaluate(mf, toy, horizon=2).score, evaluate(mf.to('cpu'), toy, horizon=2).score, rtol=1e-5)


def test_baselines_against_a_trained_model(toy):
    "The toy wave moves: a trained model beats the mean field; persistence is the one-step reference."
    m = net(); train(m, toy, 'sim_only', steps=40, **KW)
    sim_only = lambda e: float(e.score.sel(domain='sim', mode='one_step', field='all', metric='rmse'))
    scores = {k: sim_only(evaluate(mod, toy, horizon=0, domains=('sim',)))
              for k, mod in dict(model=m, persistence=Persistence(), mean=MeanField.fit(toy['sim']['train'])).items()}
    assert scores['model'] < scores['mean'] and scores['persistence'] < scores['mean']


def test_predict_windows_returns_aligned_truth(toy):
    wd = toy['sim']['test']
    r = predict_windows(Persistence(), wd, device='cpu', max_windows=3)
    b = collate([wd[i] for i in (0, 5, 10)])  # an evenly spaced subset of the 11 windows
    assert torch.equal(r['y'], b['y']) and torch.equal(r['pred'], b['x']) and torch.equal(r['valid'], b['valid'])
    r = predict_windows(Persistence(), long_windows(wd, 3), horizon=3, device='cpu')
    fed = r['pred'][:, 0].clone(); fed[..., 0, 0] = 0  # the first frame is fed back where valid, (0, 0) is not
    assert r['pred'].shape[1] == 3 and torch.equal(r['pred'][:, 1], fed) and torch.equal(r['pred'][:, 2], fed)


def test_rollout_feeds_back_masked_frames():
    class PlusOne(nn.Module):
        def forward(self, x, field_mask, cond=None): return x[:, -1:] + 1
    fm = torch.tensor([[True, True, False]])
    valid = torch.ones(1, 3, 2, 2, dtype=torch.bool); valid[0, 0, 1, 1] = False
    r = rollout(PlusOne(), torch.zeros(1, 2, 3, 2, 2), fm, horizon=3, valid=valid)
    assert r[0, :, 0, 0, 0].tolist() == [1, 2, 3] and r[0, :, 2, 0, 0].tolist() == [1, 1, 1]  # p never fed back
    assert r[0, :, 0, 1, 1].tolist() == [1, 1, 2]  # the invalid point of frame 1 is fed back as 0


# ---------------------------------------------------------------------------------------------------------- analog
def contract(u, domain='sim'):
    "A contract dataset from u [traj, time, y, x] (v = -u, p = u²; frame interval 0.1 s, parameter Re)."
    from simreal_nb.core.schema import DIMS, FIELD_META
    n, nt, h, w = u.shape
    fs = dict(u=u, v=-u) | (dict(p=u ** 2) if domain == 'sim' else {})
    return xr.Dataset({f: (DIMS, np.asarray(a, 'float32'), FIELD_META[f]) for f, a in fs.items()},
                      coords=dict(traj=np.arange(n), time=np.arange(nt) * 0.1, y=np.arange(h) * 1.0, x=np.arange(w) * 1.0,
                                  Re=('traj', 100. + 10 * np.arange(n))),
                      attrs=dict(domain=domain, scale_u=1.0, scale_v=1.0) | (dict(scale_p=1.0) if domain == 'sim' else {}))


def advected(seeds, nt=12, h=4, w=8):
    "Trajectories of random periodic fields moving one cell per frame along x: u[t] = roll(f, t)."
    fs = [np.random.default_rng(s).standard_normal((h, w)) for s in seeds]
    return np.stack([np.stack([np.roll(f, k, axis=1) for k in range(nt)]) for f in fs])


class Advect(nn.Module):
    "The true dynamics of `advected` (a perfectly trained model): the last frame moved one cell."
    def forward(self, x, field_mask, cond=None): return torch.roll(x[:, -1:], 1, dims=-1)


def windows(train_u, test_u, n_in=2, domain='sim'):
    from simreal_nb.data.domains import WindowDataset
    w = lambda u: WindowDataset(contract(u, domain), n_in, 1, fields=('u', 'v', 'p'))
    return dict(train=w(train_u), test=w(test_u))


def test_analog_is_exact_on_a_copy_of_a_training_trajectory():
    train_u = advected([0, 1, 2])
    sim = windows(train_u, train_u[1:2])  # the held-out trajectory is a copy of the second training one
    data = dict(sim=sim, normalizer=None, fields=('u', 'v', 'p'))
    a = Analog.fit(sim['train'])
    assert a.frames.data_ptr() == sim['train'].data.data_ptr()  # the windows' frame tensor, shared
    e = evaluate(a, data, horizon=4, domains=('sim',))
    assert e.score.sel(metric='rmse').max() < 1e-5 and e.rmse_lead.max() < 1e-5
    assert e.score.sel(metric='rmse', field='p').notnull().all()
    b = sim['test'].get_batch(list(range(len(sim['test']))))
    idx, dist = a.nearest(b['x'], b['field_mask'])
    assert dist.max() < 1e-5 and (a.starts[idx][:, 0] == 1).all()  # each window found in the copied trajectory


def test_analog_loses_to_the_dynamics_on_independent_data():
    sim = windows(advected([0, 1, 2]), advected([7]))
    data = dict(sim=sim, normalizer=None, fields=('u', 'v', 'p'))
    rm = lambda m: evaluate(m, data, horizon=4, domains=('sim',)).score.sel(metric='rmse', field='all')
    oracle, analog = rm(Advect()), rm(Analog.fit(sim['train']))
    assert oracle.max() < 1e-6 and (analog > 0.5).all()  # unit-variance fields: the nearest window of another field is far
    persistence = rm(Persistence())
    assert (analog > oracle).all() and (persistence > oracle).all()


def test_analog_rollout_candidates_and_one_step_frames():
    "A rollout of h frames: one call, the h frames that followed a window followed by h frames; one-step: every window."
    train_u = advected([0, 1], nt=8)
    sim = windows(train_u, train_u[:1])
    a = Analog.fit(sim['train'])
    assert len(a.starts) == 2 * 6 and int((a.avail >= 4).sum()) == 2 * 3  # 8 frames, 2 inputs: 6 windows, 3 followed by 4
    calls = []
    class Counting(nn.Module):
        def __init__(self, m): super().__init__(); self.m = m
        def forward(self, *args): calls.append(1); return self.m(*args)
    b = long_windows(sim['test'], 4).get_batch([0])
    out = rollout(Counting(a.for_horizon(4)), b['x'], b['field_mask'], 4)
    assert len(calls) == 1 and torch.equal(out, b['y'])
    r = predict_windows(a.for_horizon(4), sim['test'], device='cpu')  # one-step windows hold one frame: scored on it
    assert r['pred'].shape[1] == 1
    with pytest.raises(ValueError, match='followed by 7'):
        a.for_horizon(7)
    with pytest.raises(ValueError, match='n_out'):
        a.for_horizon(0)


def test_analog_search_in_chunks_and_on_plain_windows(toy):
    train_u = advected([0, 1, 2])
    sim = windows(train_u, advected([5]))
    b = sim['test'].get_batch(list(range(len(sim['test']))))
    whole, tiny = Analog.fit(sim['train']), Analog.fit(sim['train'], max_elements=1)  # one candidate at a time
    assert tiny.chunk == 1 and torch.equal(whole(b['x'], b['field_mask']), tiny(b['x'], b['field_mask']))
    a = Analog.fit(toy['sim']['train'], n_out=3)  # windows without a frame tensor: read, each its own trajectory
    e = evaluate({'sim': a, 'exp': Analog.fit(toy['exp']['train'], n_out=3)}, toy, horizon=3)
    assert a.n_out == 3 and np.isfinite(e.score.sel(field='all', metric='rmse')).all()


def test_analog_contract_errors(toy):
    sim = windows(advected([0, 1]), advected([3]))
    a = Analog.fit(sim['train'])
    with pytest.raises(ValueError, match='empty'):
        Analog.fit([])
    with pytest.raises(ValueError, match=r'expected \[B, 2, 3, 4, 8\]'):
        a(torch.zeros(1, 1, 3, 4, 8), torch.ones(1, 3, dtype=torch.bool))
    x = sim['test'].get_batch([0])['x']
    with pytest.raises(ValueError, match='one Analog per domain'):
        a(x, torch.tensor([[True, True, False]]))
    with pytest.raises(ValueError, match='followed by 20'):
        Analog.fit(sim['train'], n_out=20)
    with pytest.raises(ValueError, match='no model for the domain'):
        evaluate({'sim': a}, toy, horizon=0)
