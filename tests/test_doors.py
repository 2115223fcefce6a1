"""One configuration, three doors: a model trained by hand with `train()`, a cell of `simreal run`, and a run read from
a config file train with the same settings when nothing is changed."""
from dataclasses import replace
import pytest
from simreal_nb import cli
from simreal_nb.grid import PRESETS, GridConfig, Cell
from simreal_nb.trainer import TrainConfig, TRAIN_DEFAULTS

class _Stop(Exception): pass

def _cell_training_settings(monkeypatch, cfg:GridConfig, protocol:str='joint') -> dict:
    "The keyword settings a grid cell hands to `train()` (caught before any update)."
    import simreal_nb.cell as cell_mod
    from simreal_nb.cell import cell_data, train_cell
    seen = {}
    def caught(model, data, protocol, **kw): seen.update(kw); raise _Stop
    monkeypatch.setattr(cell_mod, 'train', caught)
    dd, _, _ = cell_data('kolmogorov', replace(cfg, size='test'), None, 0)
    with pytest.raises(_Stop): train_cell(Cell('kolmogorov', 'S', protocol, 0, cfg.arch), cfg, dd, 'cpu', '/nonexistent-ckpt')
    return seen

def test_train_and_a_run_cell_share_every_training_default(monkeypatch):
    cfg = PRESETS['default'].config
    untuned = replace(cfg, tuned=None)  # the learning rate the grid falls back to without `simreal tune`'s choice
    cell = _cell_training_settings(monkeypatch, untuned)
    by_hand = TrainConfig()
    for k in TRAIN_DEFAULTS:
        assert getattr(by_hand, k) == getattr(untuned, k) == TRAIN_DEFAULTS[k], k
        if k in cell: assert cell[k] == TRAIN_DEFAULTS[k], (k, cell[k])
    assert set(TRAIN_DEFAULTS) - {'steps', 'ckpt_every'} <= set(cell), set(TRAIN_DEFAULTS) - set(cell)

def test_a_cell_trains_with_its_tuned_learning_rate(monkeypatch):
    cfg = PRESETS['default'].config
    chosen = cfg.settings_of('cylinder', 'joint')['lr']
    tuned = replace(cfg, tuned=dict(systems=dict(kolmogorov=dict(joint=dict(lr=chosen * 3, finetune_lr_scale=1.0)))))
    assert _cell_training_settings(monkeypatch, tuned)['lr'] == pytest.approx(chosen * 3)

def test_the_config_file_door_resolves_the_preset(monkeypatch, tmp_path):
    import simreal_nb.experiment as ex
    from simreal_nb.runconfig import write_run_config
    seen = []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, config, grid, **kw: seen.append((config, grid)))
    cli.main(['run', '--workers', '0', '--out', str(tmp_path / 'a')])
    f = write_run_config(tmp_path / 'a', *seen[-1])
    cli.main(['run', '--workers', '0', '--out', str(tmp_path / 'b'), '--config', str(f)])
    assert seen[0] == seen[1] and seen[1][0] == PRESETS['default'].config
    assert {k: getattr(seen[1][0], k) for k in TRAIN_DEFAULTS} == TRAIN_DEFAULTS
