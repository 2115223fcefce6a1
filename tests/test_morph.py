"""MORPH itself: its outputs against MORPH's own (tests/data/morph), its checkpoint forms, the refusal, shape inference."""
from pathlib import Path
import pytest
import torch
from simreal_nb.core.errors import InputError
from simreal_nb.core.store import CheckpointError
from simreal_nb.models.morph import (MORPH, MORPH_SIZES, MorphCheckpointError, MorphInputError, morph, load_morph,
                              infer_morph_config, morph_layout, to_morph, from_morph, patch_rule)

DATA = Path(__file__).parent / 'data' / 'morph'
IO = torch.load(DATA / 'morph_tiny_io.pt', weights_only=True)
HEADS = dict(heads=IO['config']['heads'], heads_xa=IO['config']['heads_xa'])  # 16-wide tokens: not MORPH's default heads


def rel(a, b): return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize('case', ['2d', '3d', '1d'])
def test_reproduces_morph(case):
    net = load_morph(DATA / 'morph_tiny_dp.pt', **HEADS)
    with torch.no_grad(): y = net(IO['x' + case])
    assert y.shape[1] == 1 and rel(y[:, 0], IO['y' + case]) <= 1e-5


def test_reproduces_morph_L_position_table():
    net = load_morph(DATA / 'morph_tiny_ckpt.pt', model_size='L', **HEADS)
    with torch.no_grad(): assert rel(net(IO['x2d'])[:, 0], IO['y2d_L']) <= 1e-5
    plain = load_morph(DATA / 'morph_tiny_ckpt.pt', **HEADS)
    with torch.no_grad(): assert rel(plain(IO['x2d'])[:, 0], IO['y2d_L']) > 1e-3   # the two tables differ


def test_checkpoint_forms(tmp_path):
    ck = torch.load(DATA / 'morph_tiny_ckpt.pt', weights_only=True)
    dp = torch.load(DATA / 'morph_tiny_dp.pt', weights_only=True)
    assert set(ck) >= {'epoch', 'model_state_dict'} and all(k.startswith('module.') for k in dp['model_state_dict'])
    torch.save(ck['model_state_dict'], tmp_path / 'bare.pt')
    torch.save(dp['model_state_dict'], tmp_path / 'bare_dp.pt')
    forms = [DATA / 'morph_tiny_ckpt.pt', DATA / 'morph_tiny_dp.pt', tmp_path / 'bare.pt', tmp_path / 'bare_dp.pt',
             ck, ck['model_state_dict'], dp['model_state_dict']]
    with torch.no_grad():
        outs = [load_morph(f, **HEADS)(IO['x2d']) for f in forms]
    for y in outs: torch.testing.assert_close(y, outs[0], rtol=0, atol=0)
    assert not load_morph(ck, **HEADS).training


def test_refusal_names_every_bad_key():
    sd = dict(torch.load(DATA / 'morph_tiny_dp.pt', weights_only=True)['model_state_dict'])
    del sd['module.transformer_blocks.1.norm1.weight']
    sd['module.extra.weight'] = torch.zeros(2)
    sd['module.decoder.norm.bias'] = torch.zeros(17)
    with pytest.raises(MorphCheckpointError) as e: load_morph(sd, **HEADS)
    msg = str(e.value)
    assert "missing keys ['transformer_blocks.1.norm1.weight']" in msg
    assert "unexpected keys ['extra.weight']" in msg
    assert 'decoder.norm.bias (17,) (expected (16,))' in msg
    assert isinstance(e.value, InputError)


def test_refuses_a_checkpoint_of_another_size():
    sd = torch.load(DATA / 'morph_tiny_ckpt.pt', weights_only=True)['model_state_dict']
    with pytest.raises(MorphCheckpointError, match='mis-shaped'): load_morph(sd, dim=32, heads=2, heads_xa=4)
    with pytest.raises(MorphCheckpointError, match='missing keys'): load_morph(sd, depth=3, **HEADS)
    with pytest.raises(MorphCheckpointError, match='heads'): load_morph(sd)   # dim 16: no MORPH default for heads
    with pytest.raises(CheckpointError, match='weights_only'): load_morph(DATA / 'README.md')   # not a torch file


def test_shape_inference_tiny():
    sd = torch.load(DATA / 'morph_tiny_dp.pt', weights_only=True)['model_state_dict']
    cfg = infer_morph_config(sd)
    want = {k: v for k, v in IO['config'].items() if k not in ('heads', 'heads_xa')}
    assert {k: cfg[k] for k in want} == want


@pytest.mark.parametrize('size,ar', [('Ti', 1), ('S', 4), ('M', 1), ('L', 16)])
def test_shape_inference_sizes(size, ar):
    with torch.device('meta'): sd = morph(size, max_ar=ar, lora_r_attn=8, lora_r_mlp=4).state_dict()
    cfg = infer_morph_config(sd)
    assert {k: cfg[k] for k in MORPH_SIZES[size]} == MORPH_SIZES[size]
    assert (cfg['max_ar'], cfg['max_patches'], cfg['patch_size'], cfg['max_fields'], cfg['max_components']) == (ar, 4096, 8, 3, 3)
    assert (cfg['lora_r_attn'], cfg['lora_r_mlp'], cfg['heads_xa'], cfg['model_size']) == (8, 4, 32, size)


def test_parameter_counts_match_morph():
    counts = {('Ti', 1): 9_864_408, ('S', 1): 32_829_656, ('M', 1): 125_602_008, ('L', 1): 420_378_840,
              ('L', 16): 483_293_400}   # MORPH's own ViT3DRegression at the foundation model's settings
    for (size, ar), n in counts.items():
        with torch.device('meta'): m = morph(size, max_ar=ar)
        assert sum(p.numel() for p in m.parameters()) == n


def test_lora_on_a_plain_checkpoint_starts_fresh():
    sd = {k: v for k, v in torch.load(DATA / 'morph_tiny_ckpt.pt', weights_only=True)['model_state_dict'].items()
          if not k.endswith(('.A', '.B'))}
    plain = load_morph(sd, lora_r_attn=0, lora_r_mlp=0, **HEADS)
    lora = load_morph(sd, lora_r_attn=4, lora_r_mlp=2, **HEADS)
    assert sum(k.endswith('.A') for k in lora.state_dict()) > 0
    with torch.no_grad(): torch.testing.assert_close(lora(IO['x2d']), plain(IO['x2d']))


def test_mask_equals_dropping_the_field():
    net = load_morph(DATA / 'morph_tiny_ckpt.pt', **HEADS)
    x = IO['x2d']
    mask = torch.tensor([[True, False], [True, True]])
    with torch.no_grad():
        y = net(x, mask)
        torch.testing.assert_close(y[:1], net(x[:1, :, :1], n_fields=2))
        torch.testing.assert_close(y[1:], net(x[1:]))


def test_patch_rule_and_input_errors():
    assert patch_rule((1, 16, 32), (8, 8, 8)) == ((1, 8, 8), (1, 2, 4))
    net = MORPH(patch_size=4, dim=16, depth=1, heads=2, heads_xa=4, mlp_dim=16, max_ar=1, max_patches=8)
    with pytest.raises(MorphInputError, match='not a multiple'): net(torch.zeros(1, 1, 1, 1, 1, 6, 8))
    with pytest.raises(MorphInputError, match='max_ar=1'): net(torch.zeros(1, 2, 1, 1, 1, 4, 8))
    with pytest.raises(MorphInputError, match='at most 3 of 3'): net(torch.zeros(1, 1, 4, 1, 1, 4, 8))
    with pytest.raises(MorphInputError, match='7-D'): net(torch.zeros(1, 1, 1, 4, 8))


def test_contract_layout():
    lay = morph_layout(('u', 'v', 'p'))
    x = torch.randn(3, 2, 3, 4, 8)
    x[2, :, 2] = float('nan')  # an absent pressure may hold anything
    mask = torch.tensor([[True, True, True], [True, True, True], [True, True, False]])
    vol, present = to_morph(x, mask, lay)
    assert vol.shape == (3, 2, 2, 2, 1, 4, 8) and present.tolist() == [[True, True]] * 2 + [[True, False]]
    assert torch.isfinite(vol).all() and (vol[2, :, 1] == 0).all()
    torch.testing.assert_close(from_morph(vol[:2], lay, 3), x[:2])
    assert morph_layout(('u', 'v')) == ((0, 1),) and morph_layout(('p', 'u', 'v')) == ((1, 2), (0,))


# ---- MORPH behind the shared interface (models.MorphField, make_model('morph', ...)) ----

def test_capacities_hold_morph_sizes():
    from simreal_nb.models.factory import CAPACITIES, ARCHS
    from simreal_nb.models.nets import MorphField
    assert ARCHS['morph'] is MorphField
    for cap in ('Ti', 'S', 'M', 'L'):
        assert {k: CAPACITIES[cap]['morph'][k] for k in MORPH_SIZES[cap]} == MORPH_SIZES[cap]
    assert CAPACITIES['L']['morph']['model_size'] == 'L'
    assert CAPACITIES['Ti']['fan'] == dict(dim=256, depth=4, heads=4, mlp=1024)   # existing entries unchanged
    assert CAPACITIES['S']['fan'] == dict(dim=192, depth=4, heads=3, mlp=768)


def test_morph_field_mixed_batch_equals_each_sample_alone(tmp_path):
    from simreal_nb.models.factory import save_model, load_model
    from simreal_nb.models.nets import MorphField
    torch.manual_seed(0)
    m = MorphField(grid=(16, 32), n_in=2, n_out=2, n_cond=1, dim=32, heads=2, heads_xa=4, depth=1, mlp_dim=32).eval()
    x, cond = torch.randn(3, 2, 3, 16, 32), torch.randn(3, 1)
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
    x[1, :, 2] = float('nan')
    with torch.no_grad():
        y = m(x, mask, cond)
        alone = torch.cat([m(x[i:i + 1], mask[i:i + 1], cond[i:i + 1]) for i in range(3)])
    assert y.shape == (3, 2, 3, 16, 32) and torch.isfinite(y).all()
    torch.testing.assert_close(y, alone)
    save_model(m, tmp_path / 'm.pt')
    back = load_model(tmp_path / 'm.pt').eval()
    with torch.no_grad(): torch.testing.assert_close(back(x, mask, cond), y)


def test_morph_field_is_morph_on_one_field_set():
    "Without conditioning and with every sample's fields alike, MorphField is MORPH on the contract's MORPH layout."
    from simreal_nb.models.nets import MorphField
    torch.manual_seed(0)
    m = MorphField(fields=('u', 'v'), grid=(16, 16), n_in=2, dim=32, heads=2, heads_xa=4, depth=1, mlp_dim=32).eval()
    x = torch.randn(2, 2, 2, 16, 16)
    mask = torch.ones(2, 2, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(m(x, mask), m.net(x[:, :, None, :, None])[:, :, 0, :, 0])


def test_make_model_morph_Ti_trains_on_cylinder_windows():
    from torch.utils.data import default_collate
    from simreal_nb.twins.systems import make_twins
    from simreal_nb.data.domains import make_domain_data
    from simreal_nb.models.factory import make_model
    from simreal_nb.training.trainer import train, FIXED_BUDGET
    tw = make_twins('cylinder', size='test')
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1)
    torch.manual_seed(0)
    m = make_model('morph', 'Ti', fields=dd.fields, n_in=dd.n_in, n_out=dd.n_out, grid=dd.grid, n_cond=dd.n_cond)
    sb = default_collate([dd.sim['train'][i] for i in range(2)])
    eb = default_collate([dd.exp['train'][i] for i in range(2)])
    jb = {k: torch.cat([sb[k], eb[k]]) for k in ('x', 'y', 'field_mask', 'cond')}
    y = m(jb['x'], jb['field_mask'], jb['cond'])
    assert y.shape == jb['y'].shape and torch.isfinite(y).all()
    ((y - torch.nan_to_num(jb['y'])) ** 2).mean().backward()
    unused = {n for n, p in m.named_parameters() if p.grad is None}
    assert all('attn_d.q.' in n or 'attn_d.k.' in n for n in unused)   # depth 1: one token per depth sequence, as in MORPH
    h = train(m, dd, 'joint', steps=5, batch_size=2, progress=False, **FIXED_BUDGET)
    assert h.steps_done == 5 and all(torch.isfinite(torch.tensor(h.val.objective)))


# ---- MORPH's fine-tuning levels and starting from a checkpoint (models.init_weights) ----

TINY = dict(patch_size=4, dim=16, depth=2, heads=2, heads_xa=4, mlp_dim=32, conv_filter=16, max_patches=16)  # the fixture's MORPH


def test_init_from_morph_checkpoint_is_morph(tmp_path):
    "MORPH's fine-tuned checkpoint (adapters folded in) into a MorphField of its widths: MORPH's own output, every checkpoint form."
    from simreal_nb.models.factory import init_weights, checkpoint_digest
    from simreal_nb.models.nets import MorphField
    for f in (DATA / 'morph_tiny_ckpt.pt', DATA / 'morph_tiny_dp.pt'):
        m = init_weights(MorphField(grid=(8, 12), n_in=2, **TINY), f).eval()
        assert not any(k.endswith(('.A', '.B')) for k in m.state_dict())
        with torch.no_grad(): assert rel(m.net(IO['x2d'])[:, 0], IO['y2d']) <= 1e-5
    assert checkpoint_digest(DATA / 'morph_tiny_ckpt.pt') != checkpoint_digest(DATA / 'morph_tiny_dp.pt')


def test_init_widens_the_time_table_as_morph_does():
    from simreal_nb.models.factory import init_weights
    from simreal_nb.models.nets import MorphField
    sd = torch.load(DATA / 'morph_tiny_ckpt.pt', weights_only=True)['model_state_dict']
    table = sd['pos_encoding.pos_embedding']                                  # 2 time rows
    for n_in, rows in ((1, [0]), (2, [0, 1]), (3, [0, 1, 1]), (5, [0, 1, 0, 1, 1])):
        m = init_weights(MorphField(grid=(8, 12), n_in=n_in, **TINY), DATA / 'morph_tiny_ckpt.pt')
        torch.testing.assert_close(m.net.pos_encoding.pos_embedding.detach(), table[:, rows], rtol=0, atol=0)


def test_init_refuses_what_does_not_fit(tmp_path):
    from simreal_nb.models.factory import init_weights, make_model, save_model
    from simreal_nb.models.nets import MorphField
    with pytest.raises(MorphCheckpointError) as e:
        init_weights(MorphField(grid=(8, 12), n_in=2, **{**TINY, 'depth': 1, 'max_patches': 32}), DATA / 'morph_tiny_ckpt.pt')
    msg = str(e.value)
    assert "unexpected keys ['net.transformer_blocks.1." in msg and 'net.pos_encoding.pos_embedding (1, 2, 16, 16) (expected (1, 2, 32, 16))' in msg
    fno = make_model('fno', 'S', n_in=2, grid=(16, 32))
    with pytest.raises(CheckpointError, match='not a model saved by save_model; expected'): init_weights(fno, DATA / 'morph_tiny_ckpt.pt')
    save_model(fno, tmp_path / 'fno.pt')
    with pytest.raises(CheckpointError, match="missing keys none; unexpected keys none; mis-shaped \\['lift.weight"):
        init_weights(make_model('fno', 'S', n_in=1, grid=(16, 32)), tmp_path / 'fno.pt')
    with pytest.raises(CheckpointError, match='holds a FNO2d'): init_weights(make_model('unet', 'S', n_in=2, grid=(16, 32)), tmp_path / 'fno.pt')
    with pytest.raises(CheckpointError, match='weights_only'): init_weights(fno, DATA / 'README.md')
    torch.manual_seed(1)
    back = init_weights(make_model('fno', 'S', n_in=2, grid=(16, 32)), tmp_path / 'fno.pt')
    for a, b in zip(back.state_dict().values(), fno.state_dict().values()): assert torch.equal(a, b)


@pytest.mark.parametrize('level', ['latent', 'encoder', 'decoder', 'full'])
def test_tune_level_trains_morphs_groups(level):
    from simreal_nb.models.nets import MorphField
    m = MorphField(grid=(8, 12), n_in=2, n_cond=1, **TINY)
    names = set(m.tune_level(level))
    assert names == {k for k, p in m.named_parameters() if p.requires_grad}
    groups = dict(
        lora={k for k, _ in m.named_parameters() if k.endswith(('.A', '.B'))},
        norms={k for k, _ in m.named_parameters() if '.norm' in k}, table={'net.pos_encoding.pos_embedding'},
        cond={k for k, _ in m.named_parameters() if k.startswith('cond_mlp.')},
        embed={k for k, _ in m.named_parameters() if k.startswith('net.patch_embedding.')},
        dec={'net.decoder.linear.weight', 'net.decoder.linear.bias'})
    want = {'latent': ('lora', 'norms', 'table', 'cond'), 'encoder': ('lora', 'norms', 'table', 'cond', 'embed'),
            'decoder': ('lora', 'norms', 'table', 'cond', 'embed', 'dec')}.get(level)
    if want is None: assert names == {k for k, _ in m.named_parameters()} and not groups['lora']   # MORPH's level 4: no adapters
    else:
        assert names == set().union(*(groups[g] for g in want))
        assert len(groups['lora']) == 2 * (2 * 4 * 4 + 2 * 2)                  # every attention and MLP layer, A and B
        assert m.net.transformer_blocks[0].axial_attn.attn_h.v.A.shape[0] == 16 and m.net.transformer_blocks[0].mlp[0].A.shape[0] == 12
    m.end_level()
    assert not any(k.endswith(('.A', '.B')) for k in m.state_dict())


def test_levels_through_the_trainer():
    "Sim→Exp at the latent level: the pre-training trains everything, the fine-tune the level; the frozen weights do not move."
    from simreal_nb.twins.systems import make_twins
    from simreal_nb.data.domains import make_domain_data
    from simreal_nb.models.nets import MorphField
    from simreal_nb.training.trainer import train, FIXED_BUDGET
    from simreal_nb.core.names import ProtocolError
    tw = make_twins('cylinder', size='test')
    dd = make_domain_data(tw['sim'], tw['exp'], n_in=2, n_out=1)
    torch.manual_seed(0)
    m = MorphField(fields=dd.fields, grid=dd.grid, n_in=2, n_cond=dd.n_cond, **{**TINY, 'max_patches': 64})
    seen, frozen = {}, {}
    def cb(tr):
        seen.setdefault(tr.phase_idx, {k for k, p in tr.model.named_parameters() if p.requires_grad})
        if tr.phase_idx == 1 and not frozen:
            frozen.update({k: v.clone() for k, v in tr.model.state_dict().items() if k.startswith(('net.patch_embedding.', 'net.decoder.linear.'))})
    h = train(m, dd, 'sim_to_exp', steps=6, batch_size=2, progress=False, level='latent', callbacks=[cb], **FIXED_BUDGET)
    assert seen[0] == {k for k, _ in m.named_parameters()} and h.phases[1]['level'] == 'latent' and 'level' not in h.phases[0]
    assert any(k.endswith('.A') for k in seen[1]) and not any(k.startswith('net.patch_embedding.') for k in seen[1])
    assert frozen and all(torch.equal(m.state_dict()[k], v) for k, v in frozen.items())
    assert not any(k.endswith(('.A', '.B')) for k in m.state_dict()) and all(p.requires_grad for p in m.parameters())
    with pytest.raises(ProtocolError, match='choose one'):
        train(m, dd, 'sim_to_exp_lora', steps=4, batch_size=2, progress=False, level='latent', **FIXED_BUDGET)
    h = train(m, dd, 'joint', steps=3, batch_size=2, progress=False, level='encoder', pretrained=True, **FIXED_BUDGET)
    assert h.phases[0]['level'] == 'encoder' and h.steps_done == 3
