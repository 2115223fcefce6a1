"""`simreal run --config FILE` (a TOML settings file under the command-line options), `simreal --version`, required
options shown as required, and `simreal data list` without the numerical stack."""
import configparser, json, os, subprocess, sys
from dataclasses import replace
from pathlib import Path
import pytest
from simreal_nb import __version__; from simreal_nb.face import cli
from simreal_nb.study.grid import PRESETS, Grid
from simreal_nb.study.runconfig import CONFIG_KINDS, GRID_KINDS, read_run_config, read_toml, write_run_config

ROOT = Path(__file__).resolve().parent.parent

def python(code:str):
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, env={**os.environ})

@pytest.fixture
def resolved(monkeypatch):
    "`run_experiment` stubbed: each `simreal run` records the settings it would run with, and computes nothing."
    import simreal_nb.study.experiment as ex
    seen = []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, config, grid, **kw: seen.append((config, grid)))
    def run(*args):
        seen.clear(); cli.main(['run', '--workers', '0', *map(str, args)])
        return seen[-1]
    return run

def test_data_list_imports_no_torch():
    r = python("import sys; from simreal_nb.face.cli import main; main(['data', 'list']); "
               "print(sorted(m for m in ('torch', 'xarray', 'numpy', 'simreal_nb.twins.systems') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split('\n')[:4] == ['cylinder', 'controlled', 'foil', 'kolmogorov'] and r.stdout.split('\n')[4] == '[]'

def test_system_names_are_the_registry():
    from simreal_nb.core.names import SYSTEM_NAMES
    from simreal_nb.twins.systems import SYSTEMS
    assert SYSTEM_NAMES == tuple(SYSTEMS)

def test_version():
    r = subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', '--version'], capture_output=True, text=True, timeout=60)
    ini = configparser.ConfigParser(); ini.read(ROOT / 'settings.ini')
    assert r.returncode == 0 and r.stdout.strip() == f"simreal {__version__}" and __version__ == ini['DEFAULT']['version']

def test_required_options_are_shown_required(capsys):
    for words, flag in ((('train',), '--out OUT'), (('ada', 'twins'), '--out OUT'), (('data', 'import', 'realpdebench'), '--scenario SCENARIO')):
        usage = ' '.join(cli.command_parser(words).format_usage().split())
        assert f' {flag} ' in usage and f'[{flag}]' not in usage, usage
    with pytest.raises(SystemExit): cli.main(['train', '--help'])
    assert ' --out OUT ' in ' '.join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as e: cli.main(['train', '--preset', 'test'])  # still refused by the command, naming what it expects
    assert e.value.code == 2 and 'expected the job directory' in capsys.readouterr().err

def test_config_toml_round_trip(resolved, tmp_path):
    "The settings a run resolves, written as its config.toml, resolve to the same settings through `--config`."
    cases = [('--preset', 'test', '--systems', 'cylinder,foil', '--protocols', 'joint,sim_only', '--seeds', 2, '--exp-trajs', '2,all',
              '--lambdas', '0.3', '--archs', 'fan'),
             ('--quick', '--exposure-control'), ('--preset', 'paper', '--capacities', 'Ti')]
    for i, args in enumerate(cases):
        config, grid = resolved('--out', tmp_path / f'run{i}', *args)
        f = write_run_config(tmp_path / f'run{i}', config, grid)
        assert f.name == 'config.toml' and resolved('--out', tmp_path / 'again', '--config', f) == (config, grid)
        for preset in PRESETS:  # a whole file wins over any preset
            assert resolved('--out', tmp_path / 'again', '--config', f, '--preset', preset) == (config, grid)

def test_options_win_over_the_file(resolved, tmp_path):
    f = tmp_path / 'mine.toml'
    f.write_text('preset = "test"\n[grid]\nsystems = ["foil"]\nseeds = [0, 4]\nprotocols = ["joint"]\n[config]\nsteps = 12\nlr = 1e-3\n')
    config, grid = resolved('--out', tmp_path / 'r', '--config', f)
    assert config == replace(PRESETS['test'].config, steps=12, lr=1e-3)
    assert grid == replace(PRESETS['test'].grid, systems=('foil',), seeds=(0, 4), protocols=('joint',))
    config, grid = resolved('--out', tmp_path / 'r', '--config', f, '--seeds', 3, '--systems', 'cylinder', '--lambdas', '0.7')
    assert grid.seeds == 3 and grid.systems == ('cylinder',) and [p.name for p in grid.protocols] == ['joint', 'joint@0.7']  # added to the file's
    config, grid = resolved('--out', tmp_path / 'r', '--config', f, '--preset', 'paper')  # --preset over the file's preset
    assert config == replace(PRESETS['paper'].config, steps=12, lr=1e-3) and grid.capacities == PRESETS['paper'].grid.capacities

@pytest.mark.parametrize('text, words', [
    ('[grid]\nsytems = ["foil"]\n', ['unknown key grid.sytems', 'expected one of systems']),
    ('[config]\nsteps = "many"\n', ['config.steps', 'expected an integer', "'many'"]),
    ('[config]\npatience = 1.5\n', ['config.patience', 'expected an integer or "none"']),
    ('[grid]\nexp_trajs = [0.5]\n', ['grid.exp_trajs', 'integers or "all"']),
    ('[grid]\nbaselines = "yes"\n', ['grid.baselines', 'true or false']),
    ('workers = 4\n', ["unknown key 'workers'", 'preset']),
    ('preset = "huge"\n', ["unknown preset 'huge'"]),
    ('[config\n', ['not valid TOML']),
])
def test_bad_files_are_refused_in_one_line(text, words, tmp_path, capsys, resolved):
    f = tmp_path / 'bad.toml'; f.write_text(text)
    with pytest.raises(SystemExit) as e: cli.main(['run', '--config', str(f), '--out', str(tmp_path / 'r')])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and str(f) in err and all(w in err for w in words), err
    assert not (tmp_path / 'r').exists()

def test_missing_file_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e: cli.main(['run', '--config', str(tmp_path / 'none.toml'), '--out', str(tmp_path / 'r')])
    assert e.value.code == 2 and 'no such file' in capsys.readouterr().err

def test_example_file_is_the_default_preset():
    f = ROOT / 'configs' / 'default.toml'
    assert read_run_config(f) == ('default', PRESETS['default'].config, PRESETS['default'].grid)
    data, text = read_toml(f), f.read_text(encoding='utf-8')
    assert set(data['config']) == set(CONFIG_KINDS) - {'tuned'} and set(data['grid']) == set(GRID_KINDS)
    assert all(f'\n# ' in text.split(f'\n{k} = ')[0][-300:] for k in [*data['config'], *data['grid']])  # each key under its comment

def test_quick_with_a_file_that_changes_it_is_refused(resolved, tmp_path, capsys):
    "`--quick` fixes the quick preset: a --config file changing any of its settings is refused in one line, nothing written."
    f = tmp_path / 'mine.toml'
    f.write_text('[grid]\nseeds = 3\n[config]\nsteps = 12\n')
    with pytest.raises(SystemExit) as e: cli.main(['run', '--quick', '--config', str(f), '--out', str(tmp_path / 'r')])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert 'config.steps' in err and 'grid.seeds' in err and 'drop --quick' in err and not (tmp_path / 'r').exists()
    default = ROOT / 'configs' / 'default.toml'  # the case that once ran the whole default grid under --quick
    with pytest.raises(SystemExit): cli.main(['run', '--quick', '--config', str(default), '--out', str(tmp_path / 'r')])
    assert "preset" in capsys.readouterr().err and not (tmp_path / 'r').exists()
    f.write_text('preset = "quick"\n[grid]\nseeds = 1\n')  # a file that agrees with --quick runs the quick preset
    assert resolved('--out', tmp_path / 'r', '--quick', '--config', f) == (PRESETS['quick'].config, PRESETS['quick'].grid)
