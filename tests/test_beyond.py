"""The beyond-Joint protocols: combiners against hand-computed directions, the SNR gate, HCW, L2-SP/EWC, LoRA, names, resume."""
import math
import numpy as np

import pytest
import torch
import torch.nn as nn

from simreal_nb.training.beyond import (AnchorPenalty, GradNormBalance, HCWLoss, LoRA, SNRGate, add_lora, confidence_weights,
                               divergence_residual, fisher_diagonal, grad_snr, laplacian_noise, merge_lora, mgda)
from simreal_nb.core.names import ProtocolError
from simreal_nb.training.protocols import BEYOND, SimToExp, SimToExpLoRA, get_protocol
from simreal_nb.training.batches import collate, masked_mse
from simreal_nb.training.step import Stepper, PhaseParts, combine_grads
from simreal_nb.training.protocols import Phase
from simreal_nb.training.trainer import FIXED_BUDGET, Trainer, train
from simreal_nb.core.store import load_torch
from test_protocols import KW, ToyNet, net, toy, one_thread  # noqa: F401  (fixtures)

T = torch.tensor
# (g_sim, g_exp) at λ = 0.5
CASES = dict(conflicting=(T([1., 0.]), T([-1., 1.])), aligned=(T([1., 0.]), T([2., 0.])),
             orthogonal=(T([1., 0.]), T([0., 1.])), zero=(T([1., 0.]), T([0., 0.])))
# worked by hand (see the derivations in nbs/40_protocols and nbs/41_beyond)
EXPECTED = {
    'sum':    dict(conflicting=[0., .5], aligned=[1.5, 0.], orthogonal=[.5, .5], zero=[.5, 0.]),
    'pcgrad': dict(conflicting=[.25, .75], aligned=[1.5, 0.], orthogonal=[.5, .5], zero=[.5, 0.]),
    'mgda':   dict(conflicting=[.2, .4], aligned=[1., 0.], orthogonal=[.5, .5], zero=[0., 0.]),
    'cagrad': dict(conflicting=[.2 / 1.16, .5 / 1.16], aligned=[2.1 / 1.16, 0.], orthogonal=[.7 / 1.16, .7 / 1.16], zero=[.5 / 1.16, 0.]),
}


@pytest.mark.parametrize('method', list(EXPECTED))
@pytest.mark.parametrize('case', list(CASES))
def test_combiners_match_hand_computed_directions(method, case):
    g1, g2 = CASES[case]
    torch.testing.assert_close(combine_grads(g1, g2, 0.5, method), T(EXPECTED[method][case]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('case', list(CASES))
def test_mgda_improves_both_domains_or_stops(case):
    g1, g2 = CASES[case]
    d = mgda(0.5 * g1, 0.5 * g2)
    assert float(d @ g1) >= -1e-9 and float(d @ g2) >= -1e-9
    if case == 'conflicting': assert math.isclose(float(d @ g1), float(d @ g2), rel_tol=1e-6)  # the min-norm point equalises


ADAPTIVE = dict(conflicting=[.5 * (1 + 2 ** .5) / 2 * (1 - 1 / 2 ** .5), .5 * (1 + 2 ** .5) / 2 / 2 ** .5],
                aligned=[1.5, 0.], orthogonal=[.5, .5], zero=[.5, 0.])


@pytest.mark.parametrize('case', list(CASES))
def test_adaptive_first_update_balances_gradient_norms(case):
    "First update: both losses at their start, so w_d·‖g_d‖ = ½·(½‖g_sim‖ + ½‖g_exp‖) for every live gradient."
    g1, g2 = CASES[case]
    w = GradNormBalance().weights({'sim': 1., 'exp': 1.}, {'sim': float(g1.norm()), 'exp': float(g2.norm())}, {'sim': .5, 'exp': .5})
    torch.testing.assert_close(w['sim'] * g1 + w['exp'] * g2, T(ADAPTIVE[case]), rtol=1e-5, atol=1e-6)


def test_adaptive_pulls_toward_the_domain_that_trains_slower():
    bal = GradNormBalance(alpha=1.0, beta=0.0)  # beta 0: the moving average is the current loss
    bal.weights({'sim': 1., 'exp': 1.}, {'sim': 1., 'exp': 1.}, {'sim': .5, 'exp': .5})
    w = bal.weights({'sim': .25, 'exp': 1.}, {'sim': 1., 'exp': 1.}, {'sim': .5, 'exp': .5})
    # ratios .25 and 1 (mean .625): shares .5·.4 and .5·1.6, normalised -> .2 and .8 of the budget 1
    assert math.isclose(w['sim'], .2) and math.isclose(w['exp'], .8)
    st = GradNormBalance(); st.load_state_dict(bal.state_dict()); assert st.state_dict() == bal.state_dict()


def test_snr_and_gate_hysteresis():
    g = T([3., 4.])
    assert math.isclose(grad_snr(g, g.clone()), math.inf) and math.isclose(grad_snr(g, -g), 0.0)
    assert math.isclose(grad_snr(T([1., 0.]), T([0., 1.])), 1.0)  # orthogonal halves: what pure noise looks like
    gate = SNRGate()
    assert [gate(s) for s in (10, 2.49, 2.9, 3.0, 3.01, 2.6, 2.5, 2.4)] == [True, False, False, False, True, True, True, False]
    assert gate.closed_updates == 4 and gate.updates == 8
    with pytest.raises(ValueError): SNRGate(3.0, 2.5)


def _batches(toy, n=4):
    return {d: collate([toy[d]['train'][i] for i in range(n)]) for d in ('sim', 'exp')}


def _grad(net_):
    return torch.cat([p.grad.flatten() for p in net_.parameters()])


def test_stepper_combiners_give_the_combined_domain_gradients(toy):
    m = net(); m.eval()  # no dropout: the same forward for every call
    st = Stepper(m, concat=False)
    b = _batches(toy)
    st.grads({'sim': b['sim']}, {'sim': 1.}); gs = _grad(m)
    st.grads({'exp': b['exp']}, {'exp': 1.}); ge = _grad(m)
    for c in ('pcgrad', 'cagrad', 'mgda'):
        st.grads(b, {'sim': .3, 'exp': .7}, Phase('joint', 1, {}, combiner=c))
        torch.testing.assert_close(_grad(m), combine_grads(gs, ge, .3, c), rtol=1e-4, atol=1e-7)
    st.parts.balance = GradNormBalance()
    _, _, info = st.grads(b, {'sim': .3, 'exp': .7}, Phase('joint', 1, {}, combiner='adaptive'))
    torch.testing.assert_close(_grad(m), info['w_sim'] * gs + info['w_exp'] * ge, rtol=1e-4, atol=1e-7)
    # first update: the weighted gradient norms are shared .3 : .7, and add up to Joint's .3‖g_sim‖ + .7‖g_exp‖
    ns, ne = info['w_sim'] * gs.norm().item(), info['w_exp'] * ge.norm().item()
    assert math.isclose(ns / ne, .3 / .7, rel_tol=1e-6) and math.isclose(ns + ne, .3 * gs.norm().item() + .7 * ge.norm().item(), rel_tol=1e-6)


def test_snr_gate_skips_a_pure_noise_exp_branch(toy):
    "Exp targets replaced by noise: the two half-batch gradients disagree, SNR ≈ 1 < 2.5, the update is λ·g_sim alone."
    m = net(); m.eval()
    b = _batches(toy, 8)
    g = torch.Generator().manual_seed(0)
    b['exp'] = dict(b['exp'], y=50 * torch.randn(b['exp']['y'].shape, generator=g))
    st = Stepper(m, concat=False, parts=PhaseParts(gate=SNRGate()))
    st.grads({'sim': b['sim']}, {'sim': 1.}); gs = _grad(m)
    _, _, info = st.grads(b, {'sim': .5, 'exp': .5}, Phase('joint', 1, {}, combiner='snr'))
    assert info['snr'] < 2.5 and info['gate'] == 0.0 and not st.parts.gate.open
    torch.testing.assert_close(_grad(m), .5 * gs, rtol=1e-4, atol=1e-7)
    clean = _batches(toy, 8)  # the real exp batch: a consistent gradient, the gate opens again once SNR > 3
    _, _, info = Stepper(m, concat=False, parts=PhaseParts(gate=SNRGate())).grads(clean, {'sim': .5, 'exp': .5}, Phase('joint', 1, {}, combiner='snr'))
    assert info['snr'] > 3.0 and info['gate'] == 1.0


def test_hcw_terms():
    H, W = 12, 16
    yy, xx = torch.meshgrid(torch.linspace(0, 1, H), torch.linspace(0, 1, W), indexing='ij')
    dy, dx = 1 / (H - 1), 1 / (W - 1)
    ok = torch.ones(1, 1, H, W, dtype=torch.bool)
    src = torch.stack([xx, yy])[None, None]  # div = 2 everywhere
    assert math.isclose(divergence_residual(src, ok, 0, 1, 2.0, 2.0, dy, dx).item(), 16 * dx ** 2 / 4, rel_tol=1e-4)  # (2·2)² / (2/dx)²
    g = torch.Generator().manual_seed(1)
    y_exp = src + T([0.01, 0.3]).view(1, 1, 2, 1, 1) * torch.randn(1, 1, 2, H, W, generator=g)  # v 30× noisier than u
    fm = torch.ones(1, 2, dtype=torch.bool)
    hcw = HCWLoss(('u', 'v'), dict(u=2.0, v=2.0), (dy, dx), trusted=('u',))
    pred_sim = src.clone(); pred_sim[:, :, 1] += 5.0  # sim v wrong, but v is not trusted on sim: no sim loss
    pred_exp = y_exp.clone(); pred_exp[:, :, 1] += 1.0  # exp v wrong by 1 everywhere: Huber 0.5 per point
    out = hcw(pred_sim, dict(y=src.clone(), field_mask=fm, valid=ok), pred_exp, dict(y=y_exp, field_mask=fm, valid=ok))
    assert out['sim'] == 0
    assert out['conf'][0] == 1 and math.isclose(out['conf'][1].item(), 0.1, rel_tol=1e-6)  # floored confidence of the noisy field
    assert math.isclose(out['exp'].item(), 0.5 * 0.1 / 1.1, rel_tol=1e-5)  # confidence-weighted mean of 0 (u) and 0.5 (v)
    r_sim = divergence_residual(pred_sim, ok, 0, 1, 2.0, 2.0, dy, dx)  # a constant offset does not change the divergence
    r_exp = divergence_residual(pred_exp, ok, 0, 1, 2.0, 2.0, dy, dx)
    assert math.isclose(out['consist'].item(), (r_sim - r_exp).item() ** 2, rel_tol=1e-5) and out['consist'] > 0
    with pytest.raises(ValueError, match='trusted'): HCWLoss(('u', 'v'), trusted=('p',))


def test_penalties_and_fisher():
    lin = nn.Linear(2, 1, bias=False)
    with torch.no_grad(): lin.weight.copy_(T([[1., 1.]]))
    xs = T([[1., 0.], [3., 0.]])
    F = fisher_diagonal(lin, lambda: ((lin(xs) - 1) ** 2).mean(), batches=3)
    torch.testing.assert_close(F['weight'], T([[2., 0.]]))  # all the Fisher mass on the weight the loss depends on
    l2, ewc = AnchorPenalty(lin, 2.0), AnchorPenalty(lin, 2.0, F)
    with torch.no_grad(): lin.weight.copy_(T([[2., 3.]]))
    assert math.isclose(l2(lin).item(), 1.0 * (1 + 4)) and math.isclose(ewc(lin).item(), 1.0 * 2 * 1)


def test_lora_starts_exactly_where_it_was_and_merges_to_plain_layers():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3))
    x = torch.randn(4, 5); y0 = m(x)
    ps = add_lora(m, rank=2)
    assert torch.equal(m(x), y0) and sum(p.numel() for p in ps) == 2 * (5 + 7) + 2 * (7 + 3)
    assert isinstance(m[0], LoRA) and torch.equal(m[0].weight, m[0].base.weight)  # direct `.weight` reads see the adapted weight
    with pytest.raises(ValueError, match='already'): add_lora(m)
    with torch.no_grad():
        for p in ps: p.add_(torch.randn_like(p))
    y1 = m(x); w_before = m[0].base.weight.clone()
    merge_lora(m)
    torch.testing.assert_close(m(x), y1)
    assert torch.linalg.matrix_rank(m[0].weight - w_before, rtol=1e-3).item() <= 2  # a rank-2 update
    with pytest.raises(ValueError, match='rank'): LoRA(nn.Linear(2, 2), rank=0)


# ---------------------------------------------------------------------------------------------------------- protocols
def test_names_parse_and_are_listed():
    assert [get_protocol(n).name for n in BEYOND] == list(BEYOND)
    assert set(BEYOND) >= {'joint_pcgrad', 'joint_mgda', 'joint_cagrad', 'joint_adaptive', 'joint_snr', 'joint_hcw',
                           'sim_to_exp_replay', 'sim_to_exp_l2sp', 'sim_to_exp_ewc', 'sim_to_exp_lora'}
    assert get_protocol('sim_to_exp_lora@16').rank == 16 and get_protocol('joint_adaptive@0.3').lam == 0.3
    dom = {n: get_protocol(n).domains for n in ('joint_hcw', 'sim_to_exp_replay', 'sim_to_exp_ewc', 'joint_mgda@0.3')}
    assert dom == {'joint_hcw': ('sim', 'exp'), 'sim_to_exp_replay': ('sim', 'exp'), 'sim_to_exp_ewc': ('exp',), 'joint_mgda@0.3': ('sim', 'exp')}
    for bad in ('sim_to_exp_lora@0', 'sim_to_exp_lora@2.5', 'joint_hcw@0.2', 'sim_to_exp_ewc@-1', 'joint_gradnorm'):
        with pytest.raises(ProtocolError): get_protocol(bad)


def test_replay_fine_tune_draws_both_domains():
    ph = get_protocol('sim_to_exp_replay').phases(10)
    assert ph[0].weights == {'sim': 1.0} and ph[1].weights == {'sim': .25, 'exp': .75} and sum(p.steps for p in ph) == 10


def test_snr_needs_two_windows_per_batch(toy):
    with pytest.raises(ProtocolError, match='batch_size'): Trainer(net(), toy, 'joint_snr', **(KW | dict(batch_size=1)))


def test_hcw_needs_window_datasets(toy):
    with pytest.raises(ProtocolError, match='joint_hcw'): train(net(), toy, 'joint_hcw', steps=2, **KW)


def test_lora_fine_tune_moves_only_the_adapted_maps_by_low_rank(toy):
    m = net()
    tr = Trainer(m, toy, SimToExpLoRA(1), steps=12, **KW)
    seen = {}
    def cb(t):
        if t.updates_done == 6: seen.update({k: v.clone() for k, v in t.model.state_dict().items()})
    tr.fit(callbacks=[cb])
    assert set(m.state_dict()) == set(ToyNet().state_dict())  # merged: the plain architecture
    after = m.state_dict()
    assert all(torch.equal(after[k], seen[k]) for k in seen if not k.startswith('head'))  # 3×3 convs frozen
    d = (after['head.weight'] - seen['head.weight']).flatten(1)
    assert d.abs().max() > 0 and torch.linalg.matrix_rank(d, rtol=1e-3).item() <= 1  # up to float32 rounding of the merge


def test_l2sp_stiffness_keeps_the_fine_tune_near_the_pretrained_weights(toy):
    moved = {}
    for name in ('sim_to_exp', 'sim_to_exp_l2sp@1000'):
        m = net(); at = {}
        def cb(t):
            if t.updates_done == 6: at.update({k: v.detach().clone() for k, v in t.model.named_parameters()})
        h = train(m, toy, name, steps=12, callbacks=[cb], **(KW | dict(restore_best=False)))
        moved[name] = sum(float(((p.detach() - at[k]) ** 2).sum()) for k, p in m.named_parameters())
    assert moved['sim_to_exp_l2sp@1000'] < 0.5 * moved['sim_to_exp']
    assert h.aux['penalty'] and all(v >= 0 for v in h.aux['penalty'])


@pytest.mark.parametrize('protocol,stop_at', [('joint_adaptive', 11), ('joint_snr', 11), ('joint_mgda', 7),
                                              ('sim_to_exp_ewc', 16), ('sim_to_exp_lora', 16), ('sim_to_exp_replay', 16)])
def test_beyond_protocols_resume_bit_for_bit(toy, tmp_path, protocol, stop_at):
    from test_protocols import _run
    ref, href = _run(toy, tmp_path / 'a', protocol)
    with pytest.raises(KeyboardInterrupt): _run(toy, tmp_path / 'b', protocol, stop_at=stop_at)
    ck = load_torch(tmp_path / 'b' / 'last.pt')
    state = dict(joint_adaptive={'balance'}, joint_snr={'gate'}, sim_to_exp_ewc={'penalty'}).get(protocol, set())
    assert ck['updates_done'] == stop_at // 5 * 5 and set(ck['phase_state']) == state
    res, hres = _run(toy, tmp_path / 'b', protocol, resume=True)
    for (k, a), b in zip(ref.state_dict().items(), res.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)
    assert href.train == hres.train and href.val == hres.val and href.aux == hres.aux


def test_report_ranks_every_protocol_against_joint():
    from simreal_nb.reading.analysis import synthetic_results
    from simreal_nb.reading.report import report_text
    from simreal_nb.reading.report_tables import ranking_table
    errs = {'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1),
            'joint': [(0.25, 0.15), (0.25, 0.16), (0.25, 0.14)],
            'joint_mgda': [(0.20, 0.12), (0.21, 0.13), (0.19, 0.12)],     # lower in every seed, interval above 0
            'sim_to_exp_lora': [(0.24, 0.15), (0.27, 0.15), (0.25, 0.15)],  # within the noise
            'persistence': (0.7, 0.6)}
    res = synthetic_results(systems=('A',), errors=errs)
    rt = ranking_table(res)
    assert list(rt.index.get_level_values('protocol')) == ['joint_mgda', 'joint', 'sim_to_exp_lora', 'sim_to_exp', 'sim_only', 'exp_only']
    assert rt['verdict'].tolist() == ['better', '(reference)', 'no clear difference', 'worse', 'worse', 'worse']
    ratios = [0.16 / 0.2, 0.17 / 0.205, 0.155 / 0.195]  # bM(0.5) of mgda over Joint's, per seed
    assert math.isclose(rt.loc[('A', 'S', 'joint_mgda'), 'vs joint %'], 100 * (1 - math.exp(np.mean(np.log(ratios)))), rel_tol=1e-6)
    assert rt.loc[('A', 'S', 'joint_mgda'), 'vs joint % lo'] < rt.loc[('A', 'S', 'joint_mgda'), 'vs joint %'] < rt.loc[('A', 'S', 'joint_mgda'), 'vs joint % hi']
    assert '## Every protocol ranked by bRMSE at λ = 0.5' in report_text(res)
    paper_only = synthetic_results(systems=('A',))
    assert 'Every protocol ranked' not in report_text(paper_only)


def test_pooled_ranking_pairs_every_setting_and_seed_where_both_ran():
    from simreal_nb.reading.analysis import synthetic_results
    from simreal_nb.reading.report import report_text
    from simreal_nb.reading.report_tables import pooled_ranking
    errs = {'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1), 'joint': (0.2, 0.2),
            'joint_mgda': [(0.16, 0.16), (0.18, 0.18), (0.14, 0.14)],   # 20 %, 10 %, 30 % lower than Joint
            'joint_snr': (0.22, 0.22), 'persistence': (0.7, 0.6)}     # 10 % higher everywhere
    res = synthetic_results(systems=('A', 'B'), errors=errs)
    res['score'].loc[dict(system='B', protocol='joint_mgda', seed=2)] = np.nan   # not run there
    res['score'].loc[dict(system='B', protocol='joint_snr')] = np.nan            # a whole setting missing
    pr = pooled_ranking(res)
    assert list(pr.index[:3]) == ['joint_mgda', 'joint', 'joint_snr'] and 'persistence' not in pr.index
    # mgda: five pairs 20, 10, 30 (A), 20, 10 (B) % lower: the geometric-mean change of ratios 0.8, 0.9, 0.7, 0.8, 0.9; lower in all five -> better
    assert math.isclose(pr.loc['joint_mgda', 'vs joint %'], 100 * (1 - math.exp(np.mean(np.log([0.8, 0.9, 0.7, 0.8, 0.9])))))
    assert pr.loc['joint_mgda', 'pairs lower'] == '5/5'
    assert pr.loc['joint_mgda', 'verdict'] == 'better' and pr.loc['joint_mgda', 'settings'] == 2
    assert math.isclose(pr.loc['joint_snr', 'vs joint %'], -10.0) and pr.loc['joint_snr', 'pairs lower'] == '0/3'
    assert pr.loc['joint_snr', 'settings'] == 1 and pr.loc['joint', 'verdict'] == '(reference)'
    assert pr.loc['joint_mgda', 'mean rank'] == 1.0   # lowest seed-mean bM in both settings
    text = report_text(res)
    assert 'pooled over every (setting, seed) pair' in text
    assert 'seeds: 3 (fewer where not all were run — B/S: 2 for joint_mgda; B/S: 0 for joint_snr)' in text
    assert 'over the seeds each cell has (up to 3)' in text
    assert 'pooled over every' not in report_text(synthetic_results(systems=('A',), errors=errs))
    assert 'at other weights of the two domains' in text


def test_verdict_is_taken_on_the_log_ratio():
    from simreal_nb.reading.analysis import synthetic_results
    from simreal_nb.reading.report_tables import ranking_table
    errs = {'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1), 'joint': (0.2, 0.2),
            'sim_to_exp_lora': [(2.9, 2.9), (1.9, 1.9), (5.3, 5.3)]}  # 14.5x, 9.5x, 26.5x Joint's error
    rt = ranking_table(synthetic_results(systems=('A',), errors=errs)).loc[('A', 'S', 'sim_to_exp_lora')]
    pct = np.array([-1350.0, -850.0, -2550.0])  # the arithmetic % changes: their t-interval includes zero
    assert pct.mean() + 4.303 * pct.std(ddof=1) / math.sqrt(3) > 0
    assert rt['verdict'] == 'worse' and rt['vs joint % hi'] < 0  # on the log scale it does not
    assert math.isclose(rt['vs joint %'], 100 * (1 - math.exp(np.mean(np.log([14.5, 9.5, 26.5])))))


def test_lambda_ranking_follows_the_trade_off_across_lambda():
    from simreal_nb.reading.analysis import synthetic_results
    from simreal_nb.reading.report_tables import lambda_ranking, pooled_ranking
    errs = {'sim_only': (0.05, 1.0), 'exp_only': (1.0, 0.05), 'sim_to_exp': (0.6, 0.1), 'joint': (0.2, 0.2),
            'joint_mgda': [(0.16, 0.16), (0.18, 0.18), (0.14, 0.14)], 'persistence': (0.7, 0.6)}
    res = synthetic_results(systems=('A', 'B'), errors=errs)
    lr = lambda_ranking(res, lams=(0.2, 0.9))
    mgda = 100 * (1 - math.exp(np.mean(np.log([0.8, 0.9, 0.7]))))  # 20 %, 10 %, 30 % lower in each setting
    assert np.allclose(lr.loc['joint_mgda', ['λ=0.2 %', 'λ=0.9 %']].astype(float), mgda)  # equal sim and exp changes: the same at every λ
    # sim_only against Joint: bM(0.2) = 0.81 vs 0.2 (-305 %), bM(0.9) = 0.145 vs 0.2 (+27.5 %), in all six pairs
    assert math.isclose(lr.loc['sim_only', 'λ=0.2 %'], -305.0) and lr.loc['sim_only', 'λ=0.2 verdict'] == 'worse'
    assert math.isclose(lr.loc['sim_only', 'λ=0.9 %'], 27.5) and lr.loc['sim_only', 'λ=0.9 verdict'] == 'better'
    assert lr.index[0] == 'sim_only' and 'persistence' not in lr.index  # ordered by the middle λ, 0.9 here
    pr = pooled_ranking(res, lam=0.2)
    assert np.allclose(lr['λ=0.2 %'].reindex(pr.index), pr['vs joint %'])


class HeadNet(ToyNet):
    decoder_prefixes = ('head.',)


@pytest.mark.parametrize('name,part', [('sim_to_exp_frozen', 'stem'), ('sim_to_exp_frozen_decoder', 'head')])
def test_frozen_fine_tunes_keep_their_part(toy, name, part):
    torch.manual_seed(0); m = HeadNet()
    at = {}
    def cb(t):
        if t.updates_done == 6: at.update({k: v.clone() for k, v in t.model.state_dict().items()})
    train(m, toy, name, steps=12, callbacks=[cb], **KW)
    after = m.state_dict()
    assert all(torch.equal(after[k], at[k]) for k in at if k.startswith(part + '.'))
    assert any(not torch.equal(after[k], at[k]) for k in at if not k.startswith(part + '.'))


def test_every_model_names_its_stem_and_decoder():
    from simreal_nb.models.factory import make_model
    for arch in ('fno', 'fan', 'unet'):
        m = make_model(arch, 'S', fields=('u', 'v', 'p'), grid=(16, 32), n_cond=1)
        names = [n for n, _ in m.named_parameters()]
        for part in ('stem', 'decoder'):
            pre = getattr(m, f'{part}_prefixes')
            assert any(n.startswith(pre) for n in names), (arch, part)


def test_causal_penalty_gap_and_threshold():
    from simreal_nb.training.beyond import CausalPenalty
    torch.manual_seed(0)
    B, H, W = 32, 6, 6
    box = torch.zeros(H, W, dtype=torch.bool); box[1:4, 1:4] = True
    cmd = torch.randn(B, 1 + 3)  # one parameter, then the command at 2 input frames and the predicted frame
    y = (cmd[:, 3] - cmd[:, 2]).view(B, 1, 1, 1, 1).expand(B, 1, 2, H, W).clone()
    b = dict(x=torch.zeros(B, 2, 2, H, W), y=y, cond=cmd, valid=torch.ones(B, 1, H, W, dtype=torch.bool))
    cp = CausalPenalty(1, 2, 1, box, threshold=0.1)
    pen, gap = cp(y, b)
    assert abs(gap.item()) < 1e-5 and pen.item() == 0  # the data's own response
    noise = torch.randn(B, 1, 2, H, W, generator=torch.Generator().manual_seed(3)).mean((-2, -1), keepdim=True).expand_as(y)
    pen, gap = cp(noise.clone(), b)  # a response unrelated to the command: correlation ≈ 0, gap ≈ −1
    assert gap.item() < -0.6 and math.isclose(pen.item(), (abs(gap.item()) - 0.1) ** 2, rel_tol=1e-5)
    with pytest.raises(ValueError, match='box'): CausalPenalty(1, 2, 1, torch.zeros(H, W, dtype=torch.bool))


def test_joint_causal_needs_a_command(toy):
    assert get_protocol('joint_causal').phases(10)[0].causal == 1.0 and get_protocol('joint_causal@0.3').lam == 0.3
    with pytest.raises(ProtocolError, match='command'): train(net(), toy, 'joint_causal', steps=2, **KW)


def test_joint_causal_trains_on_the_controlled_twin():
    from simreal_nb.twins.systems import make_twins
    from simreal_nb.data.domains import make_domain_data
    from simreal_nb.models.factory import make_model
    tw = make_twins('controlled', size='test')
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1)
    torch.manual_seed(0)
    m = make_model('fno', 'S', fields=dd.fields, grid=dd.grid, n_cond=dd.n_cond, n_in=2, n_out=1, width=8, modes=4, layers=1)
    h = train(m, dd, 'joint_causal', steps=4, batch_size=8, log_every=2, progress=False, **FIXED_BUDGET)
    assert len(h.aux['causal_gap_exp']) == 2 and all(-2 <= g <= 2 for g in h.aux['causal_gap_sim'])


def test_run_help_lists_every_beyond_protocol():
    import subprocess, sys
    from pathlib import Path
    out = subprocess.run([str(Path(sys.executable).parent / 'simreal'), 'run', '--help'], capture_output=True, text=True)
    text = ' '.join(out.stdout.split())
    assert out.returncode == 0 and all(name in text for name in BEYOND), text
