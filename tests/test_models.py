"Properties of the models: interface contract, masks, field permutation, determinism, checkpoints, errors."
import os, warnings
import pytest
import torch
from simreal_nb.models.factory import make_model, save_model, load_model, n_params, CAPACITIES, CheckpointError
from simreal_nb.models.nets import ModelInputError, FieldAttentionNet

GRID = (16, 32)
ARCHS = ('fan', 'fno', 'unet')

def small(arch, seed=0, **kw):
    "A small model of `arch` (tiny widths so the suite stays fast)."
    torch.manual_seed(seed)
    size = dict(fan=dict(dim=32, depth=2, heads=4, mlp=64), fno=dict(width=8, modes=4, layers=2),
                unet=dict(base=8, levels=2))[arch]
    kw = {**dict(grid=GRID), **kw}
    return make_model(arch, 'S', **{**size, **kw}).eval()

def batch(B=4, T=2, C=3, K=0, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, C, *GRID, generator=g)
    mask = torch.ones(B, C, dtype=torch.bool); mask[B // 2:, -1] = False
    cond = torch.randn(B, K, generator=g) if K else None
    return x, mask, cond

@pytest.mark.parametrize('arch', ARCHS)
@pytest.mark.parametrize('n_in,n_out,K', [(1, 1, 0), (2, 3, 2)])
def test_shape_contract(arch, n_in, n_out, K):
    m = small(arch, n_in=n_in, n_out=n_out, n_cond=K)
    x, mask, cond = batch(T=n_in, K=K)
    with torch.no_grad(): y = m(x, mask, cond)
    assert y.shape == (4, n_out, 3, *GRID) and y.dtype == torch.float32 and torch.isfinite(y).all()

@pytest.mark.parametrize('arch', ARCHS)
def test_missing_field_values_do_not_matter(arch):
    m = small(arch, n_in=2, n_cond=2)
    x, mask, cond = batch(K=2)
    x2 = x.clone(); x2[2:, :, 2] = torch.randn(2, 2, *GRID) * 1e3
    x3 = x.clone(); x3[2:, :, 2] = float('nan')
    with torch.no_grad(): y, y2, y3 = m(x, mask, cond), m(x2, mask, cond), m(x3, mask, cond)
    assert torch.equal(y, y2) and torch.equal(y, y3)

def test_missing_field_is_not_attended():
    "A 3-field model with p masked == the same weights built for ('u','v') only (no zero token attended)."
    m = small('fan', n_in=2)
    uv = make_model('fan', 'S', fields=('u', 'v'), n_in=2, grid=GRID, dim=32, depth=2, heads=4, mlp=64).eval()
    missing, unexpected = uv.load_state_dict(m.state_dict(), strict=False)
    assert missing == [] and unexpected == ['field_embed.p']
    x, mask, _ = batch()
    with torch.no_grad(): y, y_uv = m(x, mask), uv(x[2:, :, :2], mask[2:, :2])
    torch.testing.assert_close(y_uv, y[2:, :, :2], rtol=1e-5, atol=1e-5)

def test_present_field_is_used():
    "Masking p changes the u, v predictions (the network uses p when present): guards a vacuous mask test."
    m = small('fan')
    x, mask, _ = batch(T=1)
    full = torch.ones_like(mask)
    with torch.no_grad(): a, b = m(x, full), m(x, mask)
    assert not torch.allclose(a[2:, :, :2], b[2:, :, :2])

@pytest.mark.parametrize('perm', [(2, 0, 1), (1, 0, 2), (2, 1, 0)])
def test_field_order_permutation(perm):
    m = small('fan', n_in=2, n_cond=2)
    fields = tuple(m.fields[i] for i in perm)
    mp = make_model('fan', 'S', fields=fields, n_in=2, n_cond=2, grid=GRID, dim=32, depth=2, heads=4, mlp=64).eval()
    mp.load_state_dict(m.state_dict())
    x, mask, cond = batch(K=2)
    p = list(perm)
    with torch.no_grad(): y, yp = m(x, mask, cond), mp(x[:, :, p], mask[:, p], cond)
    torch.testing.assert_close(yp, y[:, :, p], rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize('arch', ARCHS)
def test_deterministic_under_seed(arch):
    x, mask, _ = batch(T=1)
    a, b, c = small(arch, seed=3), small(arch, seed=3), small(arch, seed=4)
    for (n1, p1), (n2, p2) in zip(a.state_dict().items(), b.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    with torch.no_grad(): assert torch.equal(a(x, mask), b(x, mask)) and not torch.equal(a(x, mask), c(x, mask))

@pytest.mark.parametrize('arch', ARCHS)
def test_save_load_round_trip(arch, tmp_path):
    m = small(arch, n_in=2, n_out=2, n_cond=3)
    with torch.no_grad():  # perturb away from the init so the round trip is not trivially the default init
        for p in m.parameters(): p.add_(0.01 * torch.randn_like(p))
    path = save_model(m, tmp_path / 'sub' / 'm.pt')
    assert path.exists() and not list(path.parent.glob('*.tmp'))
    back = load_model(path).eval()
    assert type(back) is type(m) and back.init_kwargs == m.init_kwargs
    x, mask, cond = batch(T=2, K=3)
    with torch.no_grad(): assert torch.equal(back(x, mask, cond), m(x, mask, cond))

def test_checkpoint_is_weights_only_and_versioned(tmp_path):
    m = small('fan')
    path = save_model(m, tmp_path / 'm.pt')
    ck = torch.load(path, weights_only=True)
    assert ck['cls'] == 'FieldAttentionNet' and ck['version'] and 'state_dict' in ck
    ck['version'] = '0.0.0-other'
    torch.save(ck, tmp_path / 'old.pt')
    with pytest.warns(UserWarning, match='version'): load_model(tmp_path / 'old.pt')
    with pytest.raises(CheckpointError, match='version'): load_model(tmp_path / 'old.pt', strict_version=True)
    torch.save({'a': torch.zeros(1)}, tmp_path / 'bad.pt')
    with pytest.raises(CheckpointError, match='path'): load_model(tmp_path / 'bad.pt')

def test_save_failure_leaves_no_partial_file(tmp_path, monkeypatch):
    m = small('fan')
    def boom(*a, **k): raise RuntimeError('disk full')
    monkeypatch.setattr(torch, 'save', boom)
    with pytest.raises(RuntimeError): save_model(m, tmp_path / 'm.pt')
    assert list(tmp_path.iterdir()) == []

@pytest.mark.parametrize('call,arg', [
    (lambda m, x, k, c: m(x[0], k, c), 'x:'),                                        # wrong rank
    (lambda m, x, k, c: m(x[:, :1], k, c), 'x:'),                                    # wrong n_in
    (lambda m, x, k, c: m(x, torch.zeros_like(k), c), 'field_mask:'),                # all missing
    (lambda m, x, k, c: m(x, k.clone().index_fill_(0, torch.tensor([1]), False), c), 'field_mask: sample 1'),
    (lambda m, x, k, c: m(x, k.float(), c), 'field_mask:'),                          # not bool
    (lambda m, x, k, c: m(x, k, None), 'cond:'),                                     # missing cond
    (lambda m, x, k, c: m(x, k, c[:, :1]), 'cond:'),                                 # wrong K
])
def test_bad_call_errors(call, arg):
    m = small('fan', n_in=2, n_cond=2)
    x, mask, cond = batch(K=2)
    with pytest.raises(ModelInputError, match=arg): call(m, x, mask, cond)

@pytest.mark.parametrize('kw,arg', [
    (dict(grid=(18, 32)), 'grid: .*patch=4'),
    (dict(fields=('u', 'w')), "fields: unknown field name 'w'"),
    (dict(fields=('u', 'u')), 'fields: .*duplicates'),
    (dict(arch='xyz'), 'arch:'),
    (dict(capacity='XL'), 'capacity:'),
    (dict(arch='fno', capacity='MS'), 'capacity:'),
    (dict(arch='unet', grid=(20, 32)), 'grid: .*2\\*\\*levels'),
    (dict(n_in=0), 'n_in:'),
])
def test_bad_factory_errors(kw, arg):
    with pytest.raises(ModelInputError, match=arg): make_model(**kw)

def test_unknown_override_is_a_clear_type_error():
    with pytest.raises(TypeError, match="overrides: unknown keyword"): make_model('fan', 'S', widht=3)

def test_capacity_presets():
    assert {'S', 'M', 'Ti', 'MS'} <= set(CAPACITIES)
    assert CAPACITIES['Ti']['fan'] == dict(dim=256, depth=4, heads=4, mlp=1024)
    assert CAPACITIES['MS']['fan'] == dict(dim=512, depth=4, heads=8, mlp=2048)
    s, mm = (n_params(make_model('fan', c)) for c in ('S', 'M'))
    assert s < mm

