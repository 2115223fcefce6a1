"""A property test of the `simreal` command line: random tokens and values for every option of every command.

Each example is a command line a hostile or careless user could type: a command's words, any of its options in either
spelling (`--exp-trajs 3` or `--exp_trajs=3`), each with a value drawn from numbers at the edges (negative, zero,
beyond 64 bits, nan, inf), empty and odd strings, comma lists with repeats, names that are nearly right, unicode, and
random text; positionals and stray tokens too. The property: `main` ends with status 0, or status 2 and one line on
stderr, or it reaches the command's library call (stubbed here, so nothing is computed or written) — never any
other exception, which would be a traceback for the user. The library calls that check their own arguments first
(`Grid.cells` for `run`) do so inside the stubs."""
import json
import pytest

pytest.importorskip('hypothesis')
from hypothesis import HealthCheck, given, settings, strategies as st
from fastcore.script import anno_parser
from simreal_nb.face import cli

class Reached(Exception):
    "The command got past every check to the library call that would compute."

def _reached(*a, **kw): raise Reached()

def _grid_then_reached(out, config, grid, **kw):
    "`run_experiment` as far as its grid: the names, seeds and size of the grid checked (`Grid.cells`), then stop."
    if kw.get('data') is None: grid.cells(config.arch)
    raise Reached()

STUBS = [('simreal_nb.twins.systems', 'write_twins'), ('simreal_nb.data.realpdebench', 'import_realpdebench'), ('simreal_nb.data.piv', 'import_piv'),
         ('simreal_nb.study.jobs', 'train_job'), ('simreal_nb.reading.report', 'write_report'), ('simreal_nb.face.bench', 'bench_models'),
         ('simreal_nb.face.bench', 'bench_joint'), ('simreal_nb.face.bench', 'bench_systems'), ('simreal_nb.ada.adamog', 'run_mog'),
         ('simreal_nb.ada.adamog', 'mog_beta_sweep'), ('simreal_nb.ada.adabench', 'run_chain'), ('simreal_nb.ada.adabench', 'run_twins'),
         ('simreal_nb.checks.physics', 'physics_check'), ('simreal_nb.face.docs', 'build_docs'), ('simreal_nb.face.cli', '_dask_client'),
         ('simreal_nb.study.tuning', 'tune'), ('simreal_nb.study.scarcity', 'run_scarcity'),
         ('simreal_nb.study.advise', 'run_pilot')]

HOSTILE = ['', ' ', '-1', '0', '1', '2', '3', '0.5', '-0.5', '1e400', 'nan', 'inf', '-inf', str(2 ** 64), str(-2 ** 70), '007',
           'all', ',', ',,', '1,all', '100,all', '0,0', '1,1', 'a,b', '1,-2', 'cylinder', 'cylindre', 'cylinder,foil', 'S', 'XL',
           'S,S', 'joint', 'joint@2', 'joint@0.5', 'joint@nan', 'sim_to_exp_lora@0', 'persistence', 'cpu', 'cuda', 'cuda:7', 'tpu',
           'test', 'quick', 'default', 'fno', 'fan,unet', 'hdf5', 'arrow', 'pivlab', 'm,m/s', 'ü-é', 'a-b', '--', '-x', 'x=y',
           '\t', 'runs/new', 'out dir', 'tcp://127.0.0.1:1']
values = st.one_of(st.sampled_from(HOSTILE),
                   st.text(st.characters(blacklist_characters='/\\.\x00', blacklist_categories=('Cs',)), max_size=6))

def _spell(flag:str, draw) -> str:
    "An option as a user may type it: dashes or underscores in its name."
    return flag.replace('_', '-') if draw(st.booleans()) else flag

@st.composite
def command_lines(draw, words:tuple):
    "A random command line of the command `words`: a random subset of its options and positionals, in random order."
    parser = anno_parser(cli.COMMANDS[words])
    parts = []
    for a in parser._actions:
        if not a.option_strings:  # a positional: usually given, sometimes not, sometimes twice
            parts.append([draw(values) for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2])))])
            continue
        if a.option_strings[0] in ('-h', '--help', '--pdb', '--xtra') or draw(st.integers(0, 3)): continue  # each option one time in four
        flag = _spell(a.option_strings[0], draw)
        v = str(a.default) if a.default is not None and not draw(st.integers(0, 2)) else draw(values)  # its default one time in three
        if a.nargs == 0: parts.append([flag] if draw(st.integers(0, 9)) else [f'{flag}={v}'])  # a switch, or one given a value
        elif draw(st.booleans()): parts.append([f'{flag}={v}'])
        else: parts.append([flag, v])
    if draw(st.integers(0, 4)) == 0: parts.append([draw(values)])  # a stray token
    order = draw(st.permutations(range(len(parts))))
    return [*words, *(t for i in order for t in parts[i])]

@pytest.mark.parametrize('words', sorted(cli.COMMANDS), ids=' '.join)
@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_no_command_line_ends_in_a_traceback(words, data, monkeypatch, capsys, tmp_path):
    import importlib
    argv = data.draw(command_lines(words), label='argv')
    import simreal_nb.study.experiment as ex
    monkeypatch.chdir(tmp_path)  # relative paths only (values hold no '/' but the ones above): nothing outside
    for mod, name in STUBS: monkeypatch.setattr(importlib.import_module(mod), name, _reached)
    monkeypatch.setattr(ex, 'run_experiment', _grid_then_reached)
    capsys.readouterr()
    try: cli.main(argv); code = 0
    except Reached: code = 'reached'
    except SystemExit as e: code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (0, 2, 'reached'), (argv, code)
    if code == 2: assert len(err) == 1 and err[0].startswith('simreal'), (argv, err)
