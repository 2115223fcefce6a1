"""Properties of the training protocols and the trainer (typed history, checkpoints, resume, NaN stop)."""
import json, math, os, subprocess, sys, textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from simreal_nb.core.names import PROTOCOLS, ProtocolError
from simreal_nb.training.protocols import Joint, NonFiniteLossError, SimToExp, SimToExpFrozen, get_protocol
from simreal_nb.training.batches import CyclingSampler, collate, masked_mse
from simreal_nb.training.step import Stepper, combine_grads
from simreal_nb.training.protocols import Phase
from simreal_nb.training.trainer import FIXED_BUDGET, History, Trainer, train
from simreal_nb.core.store import CheckpointError, load_torch


# ---------------------------------------------------------------------------------------------------------- fixtures
def toy_frames(n_traj, n_t, gap=0.0, seed=0, H=8, W=8):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 2 * math.pi, H), torch.linspace(0, 2 * math.pi, W), indexing='ij')
    out, cs = [], []
    for _ in range(n_traj):
        ph, c = float(torch.rand((), generator=g)) * 6, 0.3 + 0.2 * float(torch.rand((), generator=g))
        a = xx - (c * (1 + gap)) * torch.arange(n_t)[:, None, None] + ph
        out.append(torch.stack([torch.sin(a), torch.cos(a + yy), torch.sin(a) * torch.cos(yy)], 1)); cs.append([c])
    return torch.stack(out), torch.tensor(cs)


class ToyWindows(torch.utils.data.Dataset):
    "Stand-in for domains.WindowDataset (same item dict and rebuild signature)."
    def __init__(self, ds, n_in=1, n_out=1, stride=1, normalizer=None, fields=('u', 'v', 'p'), cond=None):
        self.ds, self.n_in, self.n_out, self.stride, self.normalizer, self.fields = ds, n_in, n_out, stride, normalizer, fields
        self.cond_names, self.n_params, self.attrs = cond, ds['cond'].shape[1], dict(domain=ds['domain'])
        N, T = ds['frames'].shape[:2]
        self.index = [(n, t) for n in range(N) for t in range(0, T - n_in - n_out + 1, stride)]

    def __len__(self): return len(self.index)

    def __getitem__(self, i):
        n, t = self.index[i]; fr, m = self.ds['frames'][n], self.ds['present']
        mm = m[None, :, None, None].float()
        valid = torch.ones(self.n_out, *fr.shape[-2:], dtype=torch.bool); valid[:, 0, 0] = False
        return dict(x=fr[t:t + self.n_in] * mm, y=fr[t + self.n_in:t + self.n_in + self.n_out] * mm, field_mask=m,
                    valid=valid, cond=self.ds['cond'][n])


def domain(n_traj, n_t, gap, present, seed, name):
    fr, c = toy_frames(n_traj, n_t, gap, seed)
    return ToyWindows(dict(frames=fr, cond=c, present=torch.tensor(present), domain=name))


def toy_data(seed=0, n_t=12):
    sim = {s: domain(n, n_t, 0.0, (True, True, True), seed + i, 'sim') for i, (s, n) in enumerate([('train', 4), ('val', 1), ('test', 1)])}
    exp = {s: domain(n, n_t, 0.15, (True, True, False), seed + 10 + i, 'exp') for i, (s, n) in enumerate([('train', 2), ('val', 1), ('test', 1)])}
    return dict(sim=sim, exp=exp, normalizer=None, fields=('u', 'v', 'p'))


class ToyNet(nn.Module):
    stem_prefixes = ('stem.',)

    def __init__(self, C=3, n_in=1, n_out=1, n_cond=1, width=8, dropout=0.1):
        super().__init__()
        self.n_out = n_out
        self.stem = nn.Conv2d(C * n_in + n_cond, width, 3, padding=1, padding_mode='circular')
        self.body = nn.Sequential(nn.GELU(), nn.Dropout(dropout), nn.Conv2d(width, width, 3, padding=1), nn.GELU())
        self.head = nn.Conv2d(width, C * n_out, 1)

    def forward(self, x, field_mask, cond=None):
        B, T, C, H, W = x.shape
        x = x * field_mask[:, None, :, None, None].to(x.dtype)
        h = [x.reshape(B, T * C, H, W)]
        if cond is not None: h.append(cond[:, :, None, None].expand(B, cond.shape[1], H, W).to(x.dtype))
        return x[:, -1:] + self.head(self.body(self.stem(torch.cat(h, 1)))).view(B, self.n_out, C, H, W)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope='module')
def toy(): return toy_data()


KW = FIXED_BUDGET | dict(batch_size=4, lr=3e-3, log_every=4, eval_every=5, progress=False)  # exactly `steps` updates, cosine


def net(seed=0):
    torch.manual_seed(seed); return ToyNet()


# ---------------------------------------------------------------------------------------------------------- protocols
def test_protocol_names_and_budgets():
    assert [get_protocol(n).name for n in ('sim_only', 'exp_only', 'sim_to_exp', 'joint', 'joint@0.3', 'joint@1')] == \
        ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'joint@0.3', 'joint@1']
    assert get_protocol('joint').lam == 0.5 and get_protocol('joint@0.25').lam == 0.25
    assert get_protocol(Joint(0.3)) == Joint(0.3)
    for n in ('sim_only', 'exp_only', 'sim_to_exp', 'joint@0.7'):
        assert sum(p.steps for p in get_protocol(n).phases(37)) == 37
    pre, ft = SimToExp().phases(100)
    assert (pre.steps, pre.weights, ft.steps, ft.weights) == (50, {'sim': 1.0}, 50, {'exp': 1.0})
    assert Joint(0.3).phases(10)[0].weights == {'sim': 0.3, 'exp': 0.7}


@pytest.mark.parametrize('bad,err', [('joint@1.01', ProtocolError), ('joint@-0.5', ProtocolError),
                                     ('joint@nan', ProtocolError), ('joint@inf', ProtocolError),
                                     ('joint@x', ProtocolError), ('sim_only@0.5', ProtocolError), ('nope', ProtocolError),
                                     (3, ProtocolError)])
def test_protocol_errors(bad, err):
    with pytest.raises(err):
        get_protocol(bad)
    with pytest.raises(ValueError):  # both are ValueErrors
        get_protocol(bad)


def test_lambda_error_names_the_argument():
    with pytest.raises(ProtocolError, match=r'lam.*\[0, 1\].*1\.5'):
        Joint(1.5)


def test_names_round_trip():
    assert [get_protocol(n).name for n in PROTOCOLS] == list(PROTOCOLS)
    from simreal_nb.core.names import joint_name
    for lam in (0.5, 0.3, 0.25, 1.0, 0.0):
        assert Joint(lam).name == joint_name(lam)
        assert Joint(lam, combiner='cagrad').name == joint_name(lam).replace('joint', 'joint_cagrad')
        assert get_protocol(Joint(lam, combiner='pcgrad').name) == Joint(lam, combiner='pcgrad')


def test_protocols_only_trains():
    "Scoring lives in evaluation, files in store, the protocol vocabulary here and not in metrics: one of each."
    import simreal_nb.core.metrics as metrics, simreal_nb.training.batches as B, simreal_nb.core.store as store
    import simreal_nb.training.protocols as P
    assert B.CheckpointError is store.CheckpointError and not hasattr(metrics, 'PROTOCOLS')
    gone = ('evaluate', 'rollout', 'predict_windows', 'EVAL_MODES', 'score_fields', 'atomic_save', 'atomic_write_text',
            'load_checkpoint', '_check_lam', '_is_truth', '_attrs_of')
    assert [n for n in gone if hasattr(P, n)] == []
    assert not hasattr(Trainer(net(), dict(sim=toy_data()['sim']), 'sim_only'), 'step')  # the counter is `updates_done`


def test_definitions_step_and_trainer_apart():
    "The protocol definitions, the batches, the training step and the trainer are four modules, each importing only the ones below it."
    import simreal_nb.training.protocols as P, simreal_nb.training.batches as B
    import simreal_nb.training.step as S, simreal_nb.training.trainer as T
    assert [n for n in ('Stepper', 'combine_grads', 'DIRECTIONS', 'Trainer', 'TrainConfig', 'History', 'train') if hasattr(P, n)] == []
    assert [n for n in ('masked_mse', 'CyclingSampler', 'fetch_batch', 'split_pool', 'check_data') if hasattr(P, n)] == []
    assert [n for n in ('Protocol', 'Joint', 'get_protocol', 'Stepper', 'Trainer') if hasattr(B, n)] == []
    assert [n for n in ('Trainer', 'TrainConfig', 'History', 'rng_state', 'train', 'Joint') if hasattr(S, n)] == []
    assert T.Stepper is S.Stepper and T.get_protocol is P.get_protocol and S.masked_mse is B.masked_mse
    assert set(S.DIRECTIONS) == set(P.COMBINERS) - {'sum'}  # the table the stepper looks up: one entry per combiner


def test_masked_mse_ignores_missing_fields_and_invalid_points():
    y = torch.randn(2, 3, 3, 4, 5)
    fm = torch.tensor([[True, True, False]] * 2)
    valid = torch.ones(2, 3, 4, 5, dtype=torch.bool); valid[:, :, :2] = False
    p = y.clone(); p[:, :, 2] = 1e6; p[:, :, :, :2] = float('nan')  # garbage where masked
    y2 = y.clone(); y2[:, :, :, :2] = float('nan')
    assert masked_mse(p, y2, fm, valid) == 0
    p = y + 2.0
    assert torch.isclose(masked_mse(p, y, fm, valid), torch.tensor(4.0))
    with pytest.raises(ValueError, match='field_mask'):
        masked_mse(p, y, fm[:, :2], valid)


def test_sampler_reproducible_and_resumable():
    a = CyclingSampler(7, 3, seed=5, stream=1)
    seq = [a.next() for _ in range(6)]
    flat = sum(seq, [])
    assert sorted(flat[:7]) == list(range(7)) and sorted(flat[7:14]) == list(range(7))
    assert flat[:7] != flat[7:14]  # reshuffled per epoch
    b = CyclingSampler(7, 3, seed=5, stream=1)
    for _ in range(3): b.next()
    c = CyclingSampler(7, 3, seed=5, stream=1); c.load_state_dict(b.state_dict())
    assert [c.next() for _ in range(3)] == seq[3:]
    assert CyclingSampler(7, 3, seed=5, stream=2).next() != seq[0] or CyclingSampler(7, 3, seed=6, stream=1).next() != seq[0]


# ---------------------------------------------------------------------------------------------------------- joint
def test_joint_uses_both_batches(toy):
    m = net()
    st = Stepper(m, device='cpu')
    m.eval()  # no dropout: compare gradients exactly
    bs, be = (collate([toy[d]['train'][i] for i in range(4)]) for d in ('sim', 'exp'))
    flat = lambda: torch.cat([p.grad.flatten() for p in m.parameters()])
    st.grads({'sim': bs}, {'sim': 1.0}); gs = flat()
    st.grads({'exp': be}, {'exp': 1.0}); ge = flat()
    for lam in (0.0, 0.3, 1.0):
        st.grads({'sim': bs, 'exp': be}, {'sim': lam, 'exp': 1 - lam}); gj = flat()
        torch.testing.assert_close(gj, lam * gs + (1 - lam) * ge, rtol=1e-4, atol=1e-6)
        _, _, info = st.grads({'sim': bs, 'exp': be}, {'sim': lam, 'exp': 1 - lam}, diag=True)
        torch.testing.assert_close(flat(), gj, rtol=1e-4, atol=1e-6)
        assert math.isclose(info['cos'], float(torch.nn.functional.cosine_similarity(gs, ge, dim=0)), rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(info['dot'], float(gs.double() @ ge.double()), rel_tol=1e-4)


def test_joint_concat_matches_separate_forwards(toy):
    m = net(); m.eval()
    bs, be = (collate([toy[d]['train'][i] for i in range(3)]) for d in ('sim', 'exp'))
    a = Stepper(m, device='cpu', concat=True).losses({'sim': bs, 'exp': be})
    b = Stepper(m, device='cpu', concat=False).losses({'sim': bs, 'exp': be})
    for d in a: torch.testing.assert_close(a[d], b[d], rtol=1e-5, atol=1e-7)


def test_gradient_conflict_logged_and_saved(toy, tmp_path):
    h = train(net(), toy, 'joint@0.3', steps=16, ckpt_dir=str(tmp_path), **KW)
    c = h.conflict
    assert c.step == [0, 4, 8, 12] and len(c.cos) == 4 and all(-1 <= x <= 1 for x in c.cos)
    assert all(math.isclose(x, d / (a * b), rel_tol=1e-9) for x, d, a, b in zip(c.cos, c.dot, c.norm_sim, c.norm_exp))
    assert h.grad_conflict_frac == np.mean([d < 0 for d in c.dot])
    saved = json.loads((tmp_path / 'history.json').read_text())
    assert saved['conflict']['cos'] == pytest.approx(c.cos) and saved['protocol'] == 'joint@0.3'
    assert saved['grad_conflict_frac'] == h.grad_conflict_frac and History.from_dict(saved) == h
    h1 = train(net(), toy, 'sim_only', steps=8, **KW)
    assert h1.conflict.cos == [] and h1.grad_conflict_frac is None  # one domain: nothing to compare


# ---------------------------------------------------------------------------------------------------------- trainer
def test_history_is_typed_and_round_trips(toy, tmp_path):
    h = train(net(), toy, 'sim_to_exp', steps=10, ckpt_dir=str(tmp_path), **KW)
    assert isinstance(h, History) and h.protocol == 'sim_to_exp' and h.lam is None and h.done
    assert [p['label'] for p in h.phases] == ['pretrain', 'finetune'] and [p['steps'] for p in h.phases] == [5, 5]
    assert h.train.step == [4, 5, 8, 10] and h.train.phase == [0, 0, 1, 1]  # every log_every=4 updates and at each phase end
    assert h.train.exp[:2] == [None, None] and h.train.sim[2:] == [None, None]  # a domain the phase does not draw
    assert h.val.step == [5, 10] and h.val.phase == [0, 1] and len(h.val) == 2  # eval_every=5 = the phase ends
    d = h.to_dict()
    assert History.from_dict(json.loads(json.dumps(d))) == h == History.from_dict(torch.load(tmp_path / 'last.pt', weights_only=True)['history'])
    assert History.from_dict(json.loads((tmp_path / 'history.json').read_text())) == h
    with pytest.raises(ValueError, match='unknown keys'):
        History.from_dict(d | dict(stepz=1))
    with pytest.raises(ValueError, match='objective'):
        h.val.add(step=1, phase=0, sim=0.1, exp=0.2)


def test_update_counts_and_logs_conflict(toy):
    tr = Trainer(net(), toy, 'joint', steps=6, **KW)
    out = tr.update()
    assert tr.updates_done == 1 and tr.phase_idx == 0 and tr.history.conflict.step == [0]
    assert tr.history.conflict.cos == [out['cos']] and out['loss'] == pytest.approx(0.5 * out['sim'] + 0.5 * out['exp'])
    for _ in range(4): tr.update()
    assert tr.updates_done == 5 and tr.history.conflict.step == [0, 4] and tr.history.train.step == []  # fit logs, not update
    assert tr.samplers['sim'].state_dict()['pos'] == 5 * KW['batch_size'] % len(toy['sim']['train'])


def test_checkpoint_of_another_format_is_refused(toy, tmp_path):
    _run(toy, tmp_path, 'joint', steps=10)
    ck = torch.load(tmp_path / 'last.pt', weights_only=True)
    torch.save(ck | dict(format='simreal_nb.protocols/1'), tmp_path / 'old.pt')
    with pytest.raises(CheckpointError, match='format'):
        Trainer(net(), toy, 'joint', steps=10, **KW).load(tmp_path / 'old.pt')
    with pytest.raises(CheckpointError, match='no file'):
        Trainer(net(), toy, 'joint', steps=10, **KW).load(tmp_path / 'missing.pt')


def test_bad_input_before_training(toy):
    with pytest.raises(ProtocolError, match="needs 'exp'"):
        Trainer(net(), dict(sim=toy['sim']), 'joint')
    with pytest.raises(ProtocolError, match="needs 'exp'"):
        Trainer(net(), dict(sim=toy['sim'], exp=None), 'exp_only')
    empty = domain(1, 1, 0.0, (True, True, False), 0, 'exp')  # 1 frame: no window
    with pytest.raises(ProtocolError, match="'exp' train split is empty"):
        Trainer(net(), dict(sim=toy['sim'], exp=dict(train=empty)), 'sim_to_exp')
    truth = ToyWindows(toy['exp']['train'].ds | dict(domain='exp_truth'))
    with pytest.raises(ProtocolError, match='exp_truth'):
        Trainer(net(), dict(sim=toy['sim'], exp=dict(train=truth)), 'joint')
    with pytest.raises(ProtocolError, match='lam'):
        Trainer(net(), toy, 'joint@2')
    with pytest.raises(ProtocolError, match='batch_size'):
        Trainer(net(), toy, 'joint', batch_size=0)
    Trainer(net(), dict(sim=toy['sim']), 'sim_only')  # fine without exp


def test_equal_budgets_and_same_sim_stream(toy):
    seen = {}
    for name in ('sim_only', 'joint'):
        tr = Trainer(net(), toy, name, steps=6, **KW)
        tr.fit()
        seen[name] = tr.samplers['sim'].state_dict()
        assert tr.history.steps_done == 6 and tr.updates_done == 6
    assert seen['sim_only'] == seen['joint']  # the same sim windows were drawn


def _run(toy, ckdir, protocol='sim_to_exp', stop_at=None, resume=False, steps=24, **kw):
    m = net()
    def cb(tr):
        if stop_at is not None and tr.updates_done == stop_at: raise KeyboardInterrupt
    h = train(m, toy, protocol, resume=resume, callbacks=[cb], steps=steps, ckpt_every=5, ckpt_dir=str(ckdir), **(KW | kw))
    return m, h


@pytest.mark.parametrize('protocol,stop_at', [('sim_to_exp', 8), ('sim_to_exp', 14), ('joint@0.3', 11)])
def test_resume_equals_uninterrupted(toy, tmp_path, protocol, stop_at):
    ref, href = _run(toy, tmp_path / 'a', protocol, patience=2)
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path / 'b', protocol, stop_at=stop_at, patience=2)
    assert load_torch(tmp_path / 'b' / 'last.pt')['updates_done'] == stop_at // 5 * 5
    res, hres = _run(toy, tmp_path / 'b', protocol, resume=True, patience=2)
    for (k, a), b in zip(ref.state_dict().items(), res.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)  # bitwise on CPU
    for k in ('train', 'val', 'conflict', 'best_step', 'stopped_early'): assert getattr(href, k) == getattr(hres, k), k
    assert hres.resumed_from == [stop_at // 5 * 5] and href.resumed_from == []



def test_resume_plateau_equals_uninterrupted(toy, tmp_path):
    "Learning-rate cuts of the plateau schedule survive an interruption: bitwise the same run after resuming."
    kw = dict(steps=40, patience=1, schedule='plateau', min_delta=0.5, lr_drops=2, warmup=0)
    ref, href = _run(toy, tmp_path / 'a', 'joint@0.3', **kw)
    lrs = [x for x in href.train.lr if x is not None]
    assert min(lrs) < 0.2 * max(lrs) and href.stopped_early == [True]  # a second cut (lr logged as interval means), then the stop
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path / 'b', 'joint@0.3', stop_at=href.val.step[-2] + 1, **kw)
    res, hres = _run(toy, tmp_path / 'b', 'joint@0.3', resume=True, **kw)
    for (k, a), b in zip(ref.state_dict().items(), res.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)
    assert href.val == hres.val and href.train.lr == hres.train.lr

def test_resume_after_kill(toy, tmp_path):
    "A subprocess is SIGKILLed in the middle of training; resuming here gives the uninterrupted result."
    here = Path(__file__).parent
    script = textwrap.dedent(f"""
        import os, signal, sys, torch
        sys.path.insert(0, {str(here)!r})
        torch.set_num_threads(1)
        from test_protocols import toy_data, net, KW
        from simreal_nb.training.trainer import train
        def kill(tr):
            if tr.updates_done == 13: os.kill(os.getpid(), signal.SIGKILL)
        train(net(), toy_data(), 'joint', steps=24, ckpt_every=5, ckpt_dir={str(tmp_path / 'k')!r}, callbacks=[kill], **KW)
        """)
    p = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    assert load_torch(tmp_path / 'k' / 'last.pt')['updates_done'] == 10
    assert not [f for f in os.listdir(tmp_path / 'k') if 'tmp' in f]  # no temporary file left behind
    res, _ = _run(toy, tmp_path / 'k', 'joint', resume=True)
    ref, _ = _run(toy, tmp_path / 'r', 'joint')
    for a, b in zip(ref.state_dict().values(), res.state_dict().values()): torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_checkpoint_loads_weights_only(toy, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path, 'joint', steps=10, stop_at=7)
    ck = torch.load(tmp_path / 'last.pt', weights_only=True)  # mid-run: everything to continue
    assert ck['updates_done'] == 5 and not ck['history']['done'] and set(ck['rng']) >= {'torch', 'numpy', 'python'}
    s = ck['samplers']['sim']
    assert ck['optimizer']['state'] and ck['scheduler']['last_epoch'] == 5 and s['epoch'] * s['n'] + s['pos'] == 5 * KW['batch_size']
    m, _ = _run(toy, tmp_path, 'joint', steps=10, resume=True)
    ck = torch.load(tmp_path / 'last.pt', weights_only=True)  # finished: slim (weights + history)
    assert ck['updates_done'] == 10 and ck['history']['done'] and ck['optimizer'] is None and ck['best_state'] is None
    fresh, h = _run(toy, tmp_path, 'joint', steps=10, resume=True)  # resuming a finished run restores its weights
    for a, b in zip(m.state_dict().values(), fresh.state_dict().values()): torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert h.done and h.steps_done == 10 and h.resumed_from == [5, 10]
    with pytest.raises(CheckpointError, match='settings differ'):
        Trainer(net(), toy, 'joint', steps=12, ckpt_dir=str(tmp_path), **KW).fit(resume=True)
    with pytest.raises(CheckpointError, match='protocol'):
        Trainer(net(), toy, 'joint@0.2', steps=10, ckpt_dir=str(tmp_path), ckpt_every=5, **KW).fit(resume=True)


def test_nan_stops_and_keeps_last_good_checkpoint(toy, tmp_path):
    m = net()
    def poison(tr):
        if tr.updates_done == 7: m.head.bias.data[0] = float('nan')
    with pytest.raises(NonFiniteLossError, match='step 7') as e:
        train(m, toy, 'joint', steps=20, ckpt_every=5, ckpt_dir=str(tmp_path), callbacks=[poison], **KW)
    assert isinstance(e.value, FloatingPointError) and e.value.step == 7
    ck = load_torch(e.value.checkpoint)
    assert ck['updates_done'] == 5 and all(torch.isfinite(v).all() for v in ck['model'].values())


def test_freeze_stem_keeps_stem_during_finetune(toy):
    m = net()
    snap = {}
    def cb(tr):
        if tr.updates_done == 6: snap.update({k: v.clone() for k, v in m.state_dict().items()})
    train(m, toy, SimToExpFrozen(), steps=12, callbacks=[cb], restore_best=False, **KW)
    after = m.state_dict()
    assert torch.equal(snap['stem.weight'], after['stem.weight']) and not torch.equal(snap['head.weight'], after['head.weight'])
    assert all(p.requires_grad for p in m.parameters())  # unfrozen again after training
    class NoStem(nn.Module):
        def __init__(self): super().__init__(); self.lin = nn.Linear(1, 1)
    with pytest.raises(ProtocolError, match='stem'):
        Trainer(NoStem(), toy, SimToExpFrozen(), steps=4, **KW)


def test_early_stopping_on_protocol_objective(toy):
    h = train(net(), toy, 'sim_to_exp', steps=40, **(KW | dict(eval_every=1, patience=1, lr=0.3)))
    assert any(h.stopped_early)  # lr too high: validation stops improving
    assert h.steps_done == 40 and len(h.best_step) == 2
    v = h.val
    assert all(o == pytest.approx(s if ph == 0 else e) for o, s, e, ph in zip(v.objective, v.sim, v.exp, v.phase))
    hj = train(net(), toy, 'joint@0.3', steps=5, **KW)
    assert hj.val.objective[-1] == pytest.approx(0.3 * hj.val.sim[-1] + 0.7 * hj.val.exp[-1])


def test_nonfinite_gradient_stops_before_the_update(toy):
    class InfGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x): return x.clone()
        @staticmethod
        def backward(ctx, g): return g * float('inf')
    class Bad(ToyNet):
        def forward(self, x, field_mask, cond=None): return InfGrad.apply(super().forward(x, field_mask, cond))
    torch.manual_seed(0); m = Bad(dropout=0.0)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match='gradient norm') as e:
        train(m, toy, 'sim_only', steps=5, **KW)
    assert e.value.step == 0 and e.value.checkpoint is None
    for k, v in m.state_dict().items(): assert torch.equal(v, before[k])  # no update applied



# ---------------------------------------------------------------------------------------------------------- combiners
def test_combiner_names():
    p = get_protocol('joint_pcgrad@0.3')
    assert (p.name, p.lam, p.combiner) == ('joint_pcgrad@0.3', 0.3, 'pcgrad')
    assert get_protocol('joint_cagrad').name == 'joint_cagrad' and get_protocol('joint').combiner == 'sum'
    with pytest.raises(ProtocolError, match='combiner'):
        Joint(0.5, combiner='mean')
    with pytest.raises(ProtocolError, match=r'\[0, 1\]'):
        get_protocol('joint_pcgrad@2')


def test_combine_grads_properties():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.randn(50, generator=g, dtype=torch.float64), torch.randn(50, generator=g, dtype=torch.float64)
        lam = float(torch.rand((), generator=g))
        s = combine_grads(a, b, lam)
        torch.testing.assert_close(s, lam * a + (1 - lam) * b)
        pc = combine_grads(a, b, lam, 'pcgrad')
        if a @ b >= 0: torch.testing.assert_close(pc, s)
        else:  # each projected part is orthogonal to the other domain's gradient
            pa = lam * a - ((lam * a) @ ((1 - lam) * b)) / (((1 - lam) * b) @ ((1 - lam) * b)) * (1 - lam) * b
            assert abs(float(pa @ b)) < 1e-9 and float(pc @ a) >= -1e-9 and float(pc @ b) >= -1e-9
        torch.testing.assert_close(combine_grads(a, b, lam, 'cagrad', c=0.0), s)
        ca = combine_grads(a, b, lam, 'cagrad', c=0.5)
        worst = lambda d: min(float(d @ a), float(d @ b)) / float(d.norm())
        assert worst(ca) >= worst(s) - 1e-9  # CAGrad never worsens the worse domain's rate


def test_joint_combiner_update_uses_combine_grads(toy):
    m = net(); m.eval()
    bs, be = (collate([toy[d]['train'][i] for i in range(4)]) for d in ('sim', 'exp'))
    st = Stepper(m, device='cpu')
    flat = lambda: torch.cat([p.grad.flatten() for p in m.parameters()])
    st.grads({'sim': bs}, {'sim': 1.0}); gs = flat()
    st.grads({'exp': be}, {'exp': 1.0}); ge = flat()
    for method in ('pcgrad', 'cagrad'):
        _, _, info = st.grads({'sim': bs, 'exp': be}, {'sim': 0.3, 'exp': 0.7}, Phase('joint', 1, {}, combiner=method))
        torch.testing.assert_close(flat(), combine_grads(gs, ge, 0.3, method), rtol=1e-4, atol=1e-6)
        assert info is not None and -1 <= info['cos'] <= 1


@pytest.mark.parametrize('name', ['joint_pcgrad', 'joint_cagrad@0.7'])
def test_trainer_runs_combiners(toy, name):
    h = train(net(), toy, name, steps=8, **KW)
    assert h.protocol == name and h.steps_done == 8 and h.conflict.step == [0, 4]


# ---------------------------------------------------------------------------------------------------------- data parallel
_DP_SCRIPT = """
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, {here!r})
torch.set_num_threads(1)
from test_protocols import toy_data, net, KW
from simreal_nb.training.trainer import train
from simreal_nb.core.store import load_torch
rank, world = int(sys.argv[1]), 2
dist.init_process_group('gloo', init_method='file://{tmp}/pg', rank=rank, world_size=world)
toy = toy_data()
def run(d, stop_at=None, resume=False):
    m = net(seed=rank)  # different init per rank: the trainer must broadcast rank 0's weights
    def cb(tr):
        if stop_at is not None and tr.updates_done == stop_at: raise KeyboardInterrupt
    h = train(m, toy, 'joint_pcgrad', resume=resume, callbacks=[cb], steps=12, ckpt_every=5, ckpt_dir=d, **KW)
    return m, h
ref, h = run('{tmp}/a')
try: run('{tmp}/b', stop_at=8)
except KeyboardInterrupt: pass
res, _ = run('{tmp}/b', resume=True)
torch.save(dict(ref=ref.state_dict(), res=res.state_dict(), sim_pos=h.train.sim), '{tmp}/out%d.pt' % rank)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_data_parallel_two_ranks(tmp_path):
    "Two gloo ranks: weights stay identical across ranks, and an interrupted data-parallel run resumes exactly."
    script = _DP_SCRIPT.format(here=str(Path(__file__).parent), tmp=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, '-c', script, str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    o = [torch.load(tmp_path / f'out{r}.pt', weights_only=True) for r in range(2)]
    for k in o[0]['ref']:
        torch.testing.assert_close(o[0]['ref'][k], o[1]['ref'][k], rtol=0, atol=0)  # ranks in sync
        torch.testing.assert_close(o[0]['ref'][k], o[0]['res'][k], rtol=0, atol=0)  # resume == uninterrupted
    assert o[0]['sim_pos'] == o[1]['sim_pos']  # logged losses are averaged over ranks
    ck = load_torch(tmp_path / 'b' / 'last.pt')
    assert ck['world'] == 2 and ck['history']['done']
    assert ck['ranks'][0]['samplers']['sim']['stream'] != ck['ranks'][1]['samplers']['sim']['stream']  # own batches


def test_control_copies_joint_updates_windows_and_cuts(toy, tmp_path):
    "An equal-exposure control makes exactly Joint's updates, at Joint's windows per update, on Joint's replayed schedule."
    from simreal_nb.core.names import EXPOSURE_CONTROLS
    from simreal_nb.training.protocols import ExpOnly, SimToExp
    kw = KW | dict(steps=60, eval_every=5, patience=1, min_delta=0.2, schedule='plateau', lr=0.05, warmup=0)
    hj = train(net(), toy, 'joint', **kw)
    cuts = [(k, s) for ph, k, s in hj.lr_cuts if ph == 0]
    assert cuts and all(s == 0.2 for _, s in cuts)
    hc = train(net(), toy, ExpOnly(match=hj.steps_done, lr_cuts=cuts), ckpt_dir=str(tmp_path), **kw)
    assert hc.protocol == EXPOSURE_CONTROLS[0] and hc.steps_done == hj.steps_done and hc.stopped_early == [False]
    assert hc.batches == {'exp': 2 * hj.steps_done} and hc.lr_cuts == []  # Joint's windows; no cut of its own
    lr_j, lr_c = dict(zip(hj.train.step, hj.train.lr)), dict(zip(hc.train.step, hc.train.lr))
    assert all(np.isclose(lr_j[s], lr_c[s]) for s in set(lr_j) & set(lr_c))  # Joint's learning rate at every logged update
    assert hc.best_step[0] == hc.val.step[int(np.argmin(hc.val.exp))]  # the best validation's weights, not the last
    # the fine-tune of Sim→Exp copies Joint, not the pre-training
    h2 = train(net(), toy, SimToExp(match=30, lr_cuts=cuts), **(kw | dict(steps=20)))
    assert h2.protocol == 'sim_to_exp_eq' and [p['steps'] for p in h2.phases] == [10, 30] and h2.batches['exp'] == 60
    assert [p.lr_cuts for p in get_protocol('sim_to_exp_eq@30').phases(20)] == [None, ()]
    for bad in ('exp_only_eq', 'exp_only_eq@0', 'sim_to_exp_eq@1.5'):
        with pytest.raises(ProtocolError): get_protocol(bad)
    with pytest.raises(ProtocolError, match='match'): ExpOnly(match=-1)
    with pytest.raises(ProtocolError, match='lr_cuts'): ExpOnly(match=5, lr_cuts=[(3, 0.2), (1, 0.2)])


def test_replayed_control_resumes_like_an_uninterrupted_one(toy, tmp_path):
    "Interrupted inside a replayed schedule: resuming gives the uninterrupted run, bitwise."
    from simreal_nb.training.protocols import ExpOnly
    p = ExpOnly(match=22, lr_cuts=[(10, 0.2), (15, 0.2)])
    ref, href = _run(toy, tmp_path / 'a', p, eval_every=1, warmup=0)
    with pytest.raises(KeyboardInterrupt): _run(toy, tmp_path / 'b', p, stop_at=13, eval_every=1, warmup=0)
    res, hres = _run(toy, tmp_path / 'b', p, resume=True, eval_every=1, warmup=0)
    for (n, a), b in zip(ref.state_dict().items(), res.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=n)
    assert href.val == hres.val and href.batches == hres.batches == {'exp': 44} and hres.resumed_from


# ---------------------------------------------------------------------------------------------------------- values
def grid_protocols():
    "Every protocol of the named grids, of the scarcity study's choices, beyond Joint, and the baselines, once each."
    from simreal_nb.study.grid import PRESETS
    from simreal_nb.study.scarcity import choice_grid
    from simreal_nb.core.names import BASELINES
    from simreal_nb.training.protocols import BEYOND, grid_protocol
    names = list(BEYOND) + list(BASELINES) + [n for ns in choice_grid().values() for n in ns]
    ps = [p for pr in PRESETS.values() for p in pr.grid.protocols] + [grid_protocol(n) for n in names]
    return list(dict.fromkeys(ps))


def test_protocols_are_frozen_values():
    import dataclasses
    from simreal_nb.training.protocols import Protocol
    ps = grid_protocols()
    assert len(ps) > 20 and all(isinstance(p, Protocol) for p in ps)
    for p in ps:
        assert dataclasses.is_dataclass(p) and type(p).__dataclass_params__.frozen, type(p)
        for f in dataclasses.fields(p):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(p, f.name, getattr(p, f.name))
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.name = 'joint'
    # a tuned copy is another protocol; the original is untouched
    p = SimToExp(); q = dataclasses.replace(p, finetune_lr_scale=0.3)
    assert (p.finetune_lr_scale, q.finetune_lr_scale, p == q, q.name) == (1.0, 0.3, False, 'sim_to_exp')


def test_replace_keeps_the_name_round_trip():
    "parse(name(p)) == p for every protocol of the grids, and for each with another '@' setting made by `replace`."
    from dataclasses import replace
    from simreal_nb.training.protocols import grid_protocol, ExpOnly, Pooled, SimToExpReplay, SimToExpAnchored, SimToExpLoRA
    for p in grid_protocols():
        assert grid_protocol(p.name) == p and replace(p) == p and grid_protocol(replace(p).name) == p, p
        assert hash(replace(p)) == hash(p)
    settings = [(Joint(), 'lam', 0.3, 'joint@0.3'), (Joint(combiner='mgda'), 'lam', 0.2, 'joint_mgda@0.2'),
                (Pooled(), 'share', 0.4, 'pooled@0.4'), (ExpOnly(), 'lr', 0.004, 'exp_only@0.004'),
                (SimToExp(named=True), 'finetune_lr_scale', 0.1, 'sim_to_exp@0.1'),
                (SimToExpReplay(), 'share', 0.5, 'sim_to_exp_replay@0.5'),
                (SimToExpAnchored('ewc'), 'alpha', 0.1, 'sim_to_exp_ewc@0.1'), (SimToExpLoRA(), 'rank', 8, 'sim_to_exp_lora@8')]
    for p, k, v, name in settings:
        q = replace(p, **{k: v})
        assert q.name == name and get_protocol(name) == q and getattr(p, k) != v
    with pytest.raises(ProtocolError):  # `replace` checks like the constructor
        replace(Joint(), lam=1.5)


def test_only_the_parser_splits_a_name():
    """No module but `protocols.get_protocol` splits a name at '@' (`partition`, `split`), and none but
    `names.protocol_name` appends the '_eq' of a control to a name."""
    import ast
    import simreal_nb
    root = Path(simreal_nb.__file__).parent
    found = []
    for path in sorted(root.rglob('*.py')):
        if path.name == '_modidx.py': continue
        tree, rel = ast.parse(path.read_text()), path.relative_to(root).as_posix()
        owner = {}  # node -> the name of the innermost function around it
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(fn):
                    if n is not fn: owner[n] = fn.name  # inner functions are walked later and win
        for n in ast.walk(tree):
            where = (rel, owner.get(n))
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ('partition', 'rpartition', 'split', 'rsplit') and n.args
                    and isinstance(n.args[0], ast.Constant) and n.args[0].value == '@'
                    and where != ('training/protocols.py', 'get_protocol')):
                found.append((*where, n.lineno))
            if (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith('_eq')
                    and where != ('core/names.py', 'protocol_name')):
                found.append((*where, n.lineno))
    assert not found, found
