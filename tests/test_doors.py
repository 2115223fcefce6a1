"""One configuration, three doors: a model trained by hand with `train()`, a cell of `simreal run`, and a job of
`simreal train --config FILE` train with the same settings; each training knob is declared once."""
from dataclasses import replace, fields, is_dataclass
import inspect
import pytest
from simreal_nb.face import cli
from simreal_nb.study.grid import PRESETS, GridConfig, Cell, resolve
from simreal_nb.training.trainer import TrainConfig, TrainSettings, TRAIN_DEFAULTS

class _Stop(Exception): pass

def _cell_training_settings(monkeypatch, cfg:GridConfig, protocol:str='joint') -> dict:
    "The training settings a grid cell hands to `train()` (caught before any update), as keywords."
    import simreal_nb.study.cell as cell_mod
    from simreal_nb.study.cell import cell_data, train_cell
    seen = {}
    def caught(model, data, protocol, config=None, **kw): seen.update({**vars(config), **kw}); raise _Stop
    monkeypatch.setattr(cell_mod, 'train', caught)
    dd, _, _ = cell_data('kolmogorov', replace(cfg, size='test'), None, 0)
    with pytest.raises(_Stop): train_cell(Cell('kolmogorov', 'S', protocol, 0, cfg.arch), cfg, dd, 'cpu', '/nonexistent-ckpt')
    return seen

def test_each_training_knob_is_declared_once():
    "A training knob is declared in one class only: `TrainConfig` and `GridConfig` inherit the twelve, and no dataclass of the package restates a field of its base unchanged."
    import importlib, pkgutil, simreal_nb
    own = lambda c: set(c.__dict__.get('__annotations__', {}))
    assert own(TrainSettings) == set(TRAIN_DEFAULTS) and len(TRAIN_DEFAULTS) == 12
    assert not own(TrainConfig) & set(TRAIN_DEFAULTS) and not own(GridConfig) & set(TRAIN_DEFAULTS)
    restated = []
    for m in pkgutil.walk_packages(simreal_nb.__path__, 'simreal_nb.'):
        try: mod = importlib.import_module(m.name)
        except ImportError: continue
        for _, c in inspect.getmembers(mod, inspect.isclass):
            if not is_dataclass(c) or c.__module__ != mod.__name__: continue
            for base in c.__mro__[1:]:
                if not is_dataclass(base): continue
                same = lambda k: all(getattr(x.__dataclass_fields__[k], a) == getattr(base.__dataclass_fields__[k], a)
                                     for x in (c,) for a in ('type', 'default', 'default_factory'))
                # a subclass may change a default (ADA's configs do); restating one unchanged is a second declaration
                restated += [f'{c.__name__}.{k} (declared by {base.__name__})' for k in own(c) & own(base) if same(k)]
    assert not restated, restated
    from simreal_nb.study.runconfig import CONFIG_KINDS
    assert list(CONFIG_KINDS) == [f.name for f in fields(GridConfig)] and CONFIG_KINDS['warmup'] == 'number'

def test_train_and_a_run_cell_share_every_training_default(monkeypatch):
    cfg = PRESETS['default'].config
    untuned = replace(cfg, tuned=None)  # the learning rate the grid falls back to without `simreal tune`'s choice
    cell = _cell_training_settings(monkeypatch, untuned)
    by_hand = TrainConfig()
    for k in TRAIN_DEFAULTS:
        assert getattr(by_hand, k) == getattr(untuned, k) == cell[k] == TRAIN_DEFAULTS[k], k

def test_three_doors_train_alike(monkeypatch, tmp_path):
    "A cell of a run, `simreal train --config FILE` and `train()` by hand given `resolve`'s answer reach the trainer with the same knobs, the file's tuned learning rate among them."
    from simreal_nb.study.cell import cell_data, cell_model, train_cell
    from simreal_nb.study.runconfig import write_run_config
    from simreal_nb.training.trainer import Trainer, train
    cfg = replace(PRESETS['test'].config, steps=7, tuned=dict(systems=dict(cylinder=dict(sim_only=dict(lr=8e-3)))))
    seen = []
    def caught(self, *a, **kw): seen.append(self.cfg); raise _Stop
    monkeypatch.setattr(Trainer, 'fit', caught)
    cell = Cell('cylinder', 'S', 'sim_only', 0, cfg.arch)
    dd, _, _ = cell_data('cylinder', cfg, None, 0)
    with pytest.raises(_Stop): train_cell(cell, cfg, dd, 'cpu', tmp_path / 'cell')  # door 1: a cell of `simreal run`
    f = write_run_config(tmp_path, cfg, PRESETS['test'].grid)
    with pytest.raises(_Stop):  # door 2: one cell alone, from a run's settings file
        cli.main(['train', '--config', str(f), '--system', 'cylinder', '--protocol', 'sim_only', '--device', 'cpu',
                  '--out', str(tmp_path / 'job')])
    protocol, settings = resolve(cfg, 'cylinder', 'sim_only', cfg.arch, 'S')
    with pytest.raises(_Stop): train(cell_model(cell, cfg, dd), dd, protocol, config=settings)  # door 3: by hand
    knobs = [{k: getattr(c, k) for k in TRAIN_DEFAULTS} for c in seen]
    assert len(knobs) == 3 and knobs[0] == knobs[1] == knobs[2], knobs
    assert knobs[0]['lr'] == 8e-3 and knobs[0]['steps'] == 7
    assert TrainConfig().lr == TRAIN_DEFAULTS['lr'] != 8e-3  # without `resolve`, `train()` knows no system's choice

def test_a_cell_trains_with_its_tuned_learning_rate(monkeypatch):
    cfg = PRESETS['default'].config
    chosen = cfg.settings_of('cylinder', 'joint')['lr']
    tuned = replace(cfg, tuned=dict(systems=dict(kolmogorov=dict(joint=dict(lr=chosen * 3, finetune_lr_scale=1.0)))))
    assert _cell_training_settings(monkeypatch, tuned)['lr'] == pytest.approx(chosen * 3)

def test_the_config_file_door_resolves_the_preset(monkeypatch, tmp_path):
    import simreal_nb.study.experiment as ex
    from simreal_nb.study.runconfig import write_run_config
    seen = []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, config, grid, **kw: seen.append((config, grid)))
    cli.main(['run', '--workers', '0', '--out', str(tmp_path / 'a')])
    f = write_run_config(tmp_path / 'a', *seen[-1])
    cli.main(['run', '--workers', '0', '--out', str(tmp_path / 'b'), '--config', str(f)])
    assert seen[0] == seen[1] and seen[1][0] == PRESETS['default'].config
    assert {k: getattr(seen[1][0], k) for k in TRAIN_DEFAULTS} == TRAIN_DEFAULTS

def test_lambdas_walk_as_a_protocol_object_from_the_command_line_to_the_step(monkeypatch, tmp_path):
    "`--lambdas 0.3` is Joint(0.3) from the command line on: the grid's cell carries that object, and the first optimiser step weighs the sim risk by 0.3."
    import simreal_nb.study.experiment as ex
    from simreal_nb.training.step import Stepper
    from simreal_nb.study.cell import cell_data, train_cell
    from simreal_nb.training.protocols import Joint
    seen, steps = {}, []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, config, grid, **kw: seen.update(config=config, grid=grid))
    cli.main(['run', '--preset', 'test', '--systems', 'kolmogorov', '--protocols', 'sim_only', '--lambdas', '0.3',
              '--workers', '0', '--out', str(tmp_path / 'run')])
    assert Joint(0.3) in seen['grid'].protocols  # made at the command line, not spelled 'joint@0.3'
    cell, = [c for c in seen['grid'].cells(seen['config'].arch) if c.protocol == Joint(0.3)]
    assert isinstance(cell.protocol, Joint) and cell.key.split('__')[4] == 'joint@0.3'  # the name only spells the key
    def spy(self, batches, weights, phase=None, **kw): steps.append((phase, dict(weights))); raise _Stop
    monkeypatch.setattr(Stepper, 'step', spy)
    dd, _, _ = cell_data('kolmogorov', seen['config'], None, 0)
    with pytest.raises(_Stop): train_cell(cell, seen['config'], dd, 'cpu', tmp_path / 'ckpt')
    (phase, weights), = steps  # the phase reaches the step whole
    assert phase.label == 'joint' and phase.weights == weights == pytest.approx({'sim': 0.3, 'exp': 0.7})

def test_no_module_parses_a_protocol_name_but_the_protocols_module():
    "Past the boundary (`protocols.get_protocol`, `grid_protocol`) a protocol is an object: no other module splits or prefix-matches a name."
    import re
    from pathlib import Path
    import simreal_nb
    parsing = re.compile(r"partition\('@'\)|split\('@'|startswith\((JOINT|SIM_TO_EXP|EXP_ONLY|SIM_ONLY)\b|startswith\('(joint|sim_to_exp|exp_only|sim_only)")
    found = [f'{p.name}:{i}' for p in sorted(Path(simreal_nb.__file__).parent.rglob('*.py')) if p.name != 'protocols.py'
             for i, line in enumerate(p.read_text().splitlines(), 1) if parsing.search(line)]
    assert not found, found
