"""The `simreal` exit-code contract, run as a user runs it (in a subprocess): a user's mistake gives exit status 2 and
one line on stderr naming the problem, never a traceback; a bug keeps its traceback and exits with status 1."""
import importlib, inspect, json, os, pkgutil, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
import simreal_nb
from simreal_nb.face import cli

def simreal(*args, env=None, code=None, timeout=300):
    "Run `simreal ARGS` the way tests/test_cli.py does (or `code` instead of the plain entry point)."
    r = subprocess.run([sys.executable, '-c', code or 'from simreal_nb.face.cli import main; main()', *map(str, args)],
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': '', **(env or {})})
    return r

@pytest.fixture(scope='module')
def files(tmp_path_factory):
    "Inputs a user gets wrong: random bytes, a real netCDF cut in half, a foreign netCDF, a plain file, a RealPDEBench download with a cut file."
    t = tmp_path_factory.mktemp('inputs')
    r = simreal('data', 'make', 'cylinder', '--size', 'test', '--out', t / 'twins')  # a real, small netCDF
    assert r.returncode == 0, r.stderr[-2000:]
    whole = (t / 'twins' / 'cylinder_sim.nc').read_bytes()
    junk = os.urandom(4096)
    for name, content in {'junk': junk, 'cut': whole[:len(whole) // 2], 'foreign': whole}.items():
        (t / name).mkdir(); (t / name / 'results.nc').write_bytes(content)   # run directories with a bad results.nc
    (t / 'pair').mkdir()  # an imported pair whose sim file is truncated
    (t / 'pair' / 'cylinder_sim.nc').write_bytes(whole[:len(whole) // 2])
    (t / 'pair' / 'cylinder_exp.nc').write_bytes((t / 'twins' / 'cylinder_exp.nc').read_bytes())
    (t / 'resume_json').mkdir(); (t / 'resume_json' / 'manifest.json').write_text('{"version": ')   # a crashed run folder
    (t / 'resume_cell' / 'cells').mkdir(parents=True); (t / 'resume_cell' / 'cells' / 'x.nc').write_bytes(junk)
    (t / 'a_file').write_text('a plain file, not a folder')
    (t / 'junk.vc7').write_bytes(junk)
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    write_example_realpdebench(t / 'download', 'cylinder')
    h5 = sorted((t / 'download').rglob('*.h5'))[0]
    h5.write_bytes(h5.read_bytes()[:h5.stat().st_size // 2])
    return t

def check_user_error(r, *says):
    "Status 2, no traceback, exactly one line on stderr, from `simreal ...`, naming the problem (`says`)."
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert 'Traceback' not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('simreal'), r.stderr
    for s in says: assert s in lines[0], (s, lines[0])
    return lines[0]

# (arguments with {t} for the inputs folder and {o} for a fresh output path, what the line must name)
CASES = {
    'unknown command':           (['fly'], ["unknown command 'fly'", 'expected one of', 'ada twins']),
    'incomplete command':        (['data'], ["unknown command 'data'", 'data make']),
    'data list: extra argument': (['data', 'list', '--all'], ['unrecognized arguments: --all']),
    'data make: unknown system': (['data', 'make', 'cylindre', '--size', 'test', '--out', '{o}'], ["'cylindre'", 'kolmogorov']),
    'data make: negative seed':  (['data', 'make', 'cylinder', '--seed', '-1', '--out', '{o}'], ['--seed', '>= 0', '-1']),
    'data make: seed not int':   (['data', 'make', 'cylinder', '--seed', 'one', '--out', '{o}'], ['--seed', "'one'"]),
    'data make: no system':      (['data', 'make', '--out', '{o}'], ['required', 'system']),
    'data make: out is a file':  (['data', 'make', 'cylinder', '--out', '{t}/a_file'], ['a_file', 'is a file', 'expected a directory']),
    'data make: out under file': (['data', 'make', 'cylinder', '--out', '{t}/a_file/sub'], ['a_file is a file', 'expected a directory']),
    'realpdebench: no scenario': (['data', 'import', 'realpdebench', '{t}/download', '--out', '{o}'], ['--scenario', 'required', 'foil']),
    'realpdebench: bad scenario': (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'pipe', '--out', '{o}'],
                                   ["'pipe'", 'cylinder']),
    'realpdebench: bad layout':  (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'cylinder', '--layout', 'zip',
                                   '--out', '{o}'], ['--layout', 'hdf5', "'zip'"]),
    'realpdebench: bad name':    (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'cylinder', '--name', 'a/b',
                                   '--out', '{o}'], ['--name', "'a/b'"]),
    'realpdebench: missing':     (['data', 'import', 'realpdebench', '{t}/nowhere', '--scenario', 'cylinder', '--out', '{o}'],
                                  ['nowhere', 'no such folder']),
    'realpdebench: truncated':   (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'cylinder', '--out', '{o}'],
                                  ['.h5', 'truncated']),
    'realpdebench: out is a file': (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'cylinder', '--out', '{t}/a_file'],
                                    ['--out', 'is a file']),
    'piv: missing file':         (['data', 'import', 'piv', '{t}/nowhere.vc7', '--out', '{o}'], ['nowhere.vc7', 'no such file']),
    'sim: missing file':         (['data', 'import', 'sim', '{t}/nowhere.vtu', '--out', '{o}'], ['nowhere.vtu', 'no such file']),
    'sim: bad dt':               (['data', 'import', 'sim', '{t}/nowhere.vtu', '--dt', '0', '--out', '{o}'], ['--dt', '> 0']),
    'pair: missing manifest':    (['data', 'pair', '{t}/nowhere.toml', '--out', '{o}'], ['nowhere.toml', 'cannot read the manifest']),
    'scarcity: one seed':        (['scarcity', '--seeds', '1', '--out', '{o}'], ['--seeds', 'integer >= 2']),
    'piv: corrupt file':         (['data', 'import', 'piv', '{t}/junk.vc7', '--out', '{o}'], ['junk.vc7', 'cannot read']),
    'piv: bad units':            (['data', 'import', 'piv', '{t}/junk.vc7', '--units', 'mm', '--out', '{o}'], ['--units', 'LENGTH,VELOCITY']),
    'piv: bad dt':               (['data', 'import', 'piv', '{t}/junk.vc7', '--dt', '-0.5', '--out', '{o}'], ['--dt', '> 0']),
    'piv: bad reader':           (['data', 'import', 'piv', '{t}/junk.vc7', '--fmt', 'tiff', '--out', '{o}'], ['--fmt', 'pivlab', "'tiff'"]),
    'piv: out under a file':     (['data', 'import', 'piv', '{t}/junk.vc7', '--out', '{t}/a_file/piv'], ['a_file is a file']),
    'run: unknown preset':       (['run', '--preset', 'huge', '--out', '{o}'], ["unknown preset 'huge'", 'quick']),
    'tune: unknown preset':      (['tune', '--preset', 'huge', '--out', '{o}'], ["unknown 'huge'", 'quick']),
    'tune: unknown system':      (['tune', '--preset', 'test', '--systems', 'cylindre', '--out', '{o}'], ["'cylindre'", 'kolmogorov']),
    'tune: negative seed':       (['tune', '--seed', '-1', '--out', '{o}'], ['--seed', '>= 0']),
    'run: negative workers':     (['run', '--preset', 'test', '--workers', '-2', '--out', '{o}'], ['--workers', '>= 0']),
    'run: unknown device':       (['run', '--preset', 'test', '--device', 'tpu', '--out', '{o}'], ["'tpu'", 'cuda']),
    'run: out is a file':        (['run', '--preset', 'test', '--out', '{t}/a_file'], ['a_file', 'is a file']),
    'run: corrupt manifest':     (['run', '--preset', 'test', '--out', '{t}/resume_json'], ['manifest.json', 'not valid JSON']),
    'run: corrupt cell':         (['run', '--preset', 'test', '--out', '{t}/resume_cell'], ['x.nc', 'not a readable netCDF file',
                                                                                         'delete it']),
    'run: truncated data':       (['run', '--preset', 'test', '--data', '{t}/pair', '--out', '{o}'], ['cylinder_sim.nc', 'truncated']),
    'report: missing folder':    (['report', '{t}/nowhere'], ['nowhere', 'no such directory', 'simreal run']),
    'report: no results.nc':     (['report', '{t}/twins'], ['results.nc', 'no such file', 'simreal run']),
    'report: corrupt results':   (['report', '{t}/junk'], ['junk/results.nc', 'not a readable netCDF file', 'simreal run']),
    'report: truncated results': (['report', '{t}/cut'], ['cut/results.nc', 'truncated file', 'simreal run']),
    'report: foreign netCDF':    (['report', '{t}/foreign'], ['foreign/results.nc', "['score']", 'simreal run']),
    'report: no argument':       (['report'], ['required', 'run_dir']),
    'bench models: bad preset':  (['bench', 'models', '--presets', 'XL', '--steps', '1'], ["'XL'", 'Ti']),
    'bench models: zero steps':  (['bench', 'models', '--steps', '0'], ['--steps', '>= 1']),
    'bench joint: batch < 1':    (['bench', 'joint', '--batch', '-4'], ['--batch', '>= 1']),
    'bench data: extra option':  (['bench', 'data', '--size', 'test'], ['unrecognized arguments']),
    'ada mog: negative seed':    (['ada', 'mog', '--seed', '-1', '--out', '{o}'], ['--seed', '>= 0']),
    'ada mog: out is a file':    (['ada', 'mog', '--out', '{t}/a_file'], ['is a file']),
    'ada chain: out under file': (['ada', 'chain', '--quick', '--out', '{t}/a_file/chain'], ['a_file is a file']),
    'ada chain: seed not int':   (['ada', 'chain', '--seed', '1.5'], ['--seed', "'1.5'"]),
    'ada twins: no --out':       (['ada', 'twins', '--preset', 'test'], ['--out', 'required']),
    'ada twins: unknown system': (['ada', 'twins', '--system', 'pipe', '--preset', 'test', '--out', '{o}'], ["'pipe'", 'cylinder']),
    'ada twins: bad preset':     (['ada', 'twins', '--preset', 'huge', '--out', '{o}'], ["'huge'", 'test']),
    'ada twins: negative seed':  (['ada', 'twins', '--seed', '-3', '--preset', 'test', '--out', '{o}'], ['--seed', '-3']),
    'ada twins: out is a file':  (['ada', 'twins', '--preset', 'test', '--out', '{t}/a_file'], ['a_file', 'is a file']),
    'ada mog: bad seeds':        (['ada', 'mog', '--quick', '--seeds', '0,x', '--out', '{o}'], ['--seeds', 'integers']),
    'ada mog: repeated seeds':   (['ada', 'mog', '--quick', '--seeds', '1,1', '--out', '{o}'], ['--seeds', 'distinct']),
    'ada mog: negative beta':    (['ada', 'mog', '--quick', '--betas', '0.1,-1', '--out', '{o}'], ['--betas', '>= 0']),
    'ada mog: unknown target':   (['ada', 'mog', '--quick', '--target', 'nu', '--out', '{o}'], ['--target', "'nu'", 'identifiable']),
    'ada twins: bad seeds':      (['ada', 'twins', '--preset', 'test', '--seeds', '0,0', '--out', '{o}'], ['--seeds', 'distinct']),
    'run: bad lambdas':          (['run', '--preset', 'test', '--lambdas', '0.1,1.5', '--out', '{o}'], ['--lambdas', '[0, 1]']),
    'docs: out is a file':       (['docs', '--out', '{t}/a_file'], ['a_file', 'is a file']),
    'docs: workers 0':           (['docs', '--workers', '0', '--out', '{o}'], ['--workers', '>= 1']),
    'train: no --out':           (['train', '--preset', 'test'], ['--out', 'required']),
    'physics-check: no dir':     (['physics-check', '{t}/nowhere'], ['nowhere', 'not a directory']),
    'physics-check: not a run':  (['physics-check', '{t}'], ['manifest']),
    'physics-check: bad device': (['physics-check', '{t}', '--device', 'gpu'], ["'gpu'", 'cuda']),
    'data make: seed > 63 bits': (['data', 'make', 'cylinder', '--seed', str(2 ** 70), '--size', 'test', '--out', '{o}'], ['2**63']),
    'run: empty protocols':      (['run', '--preset', 'test', '--protocols', ',', '--out', '{o}'], ['--protocols', 'names nothing']),
    'report: empty run dir':     (['report', ''], ['RUN_DIR: empty']),
    'physics-check: empty dir':  (['physics-check', ' '], ['RUN_DIR: empty']),
    'run: baselines only':       (['run', '--preset', 'test', '--protocols', 'persistence', '--out', '{o}'], ['trains nothing', 'persistence']),
    # every value checked at the boundary: devices by the one rule, seeds in numpy's and torch's range, '@' settings in
    # their family's range, lists that name nothing
    'physics-check: meta device': (['physics-check', '{t}', '--device', 'meta'], ["device 'meta': a meta device", "'cuda'"]),
    'physics-check: mps device': (['physics-check', '{t}', '--device', 'mps'], ["device 'mps': a mps device", "'cpu'"]),
    'run: meta device':          (['run', '--preset', 'test', '--device', 'meta', '--out', '{o}'], ['--device', "'meta'"]),
    'train: mps device':         (['train', '--preset', 'test', '--device', 'mps', '--out', '{o}'], ['--device', "'mps'"]),
    'tune: meta device':         (['tune', '--preset', 'test', '--device', 'meta', '--out', '{o}'], ['--device', "'meta'"]),
    'ada mog: seed 2**63':       (['ada', 'mog', '--quick', '--seed', str(2 ** 63), '--out', '{o}'], ['--seed', 'in [0, 2**32)']),
    'ada mog: betas seed 2**63': (['ada', 'mog', '--quick', '--betas', '0.1', '--seed', str(2 ** 63), '--out', '{o}'], ['--seed', '2**32']),
    'ada chain: seeds 2**40':    (['ada', 'chain', '--quick', '--seeds', f'0,{2 ** 40}', '--out', '{o}'], ['--seeds', '2**32']),
    'train: seed 2**64':         (['train', '--preset', 'test', '--seed', str(2 ** 64), '--out', '{o}'], ['--seed', '2**32']),
    'run: l2sp 1e308':           (['run', '--preset', 'test', '--protocols', 'sim_to_exp_l2sp@1e308', '--out', '{o}'],
                                  ["'sim_to_exp_l2sp@1e308'", 'in [1e-12, 1000]']),
    'train: ewc inf':            (['train', '--preset', 'test', '--protocol', 'sim_to_exp_ewc@inf', '--out', '{o}'], ['in [1e-12, 1000]']),
    'train: lora rank 10**6':    (['train', '--preset', 'test', '--protocol', f'sim_to_exp_lora@{10 ** 6}', '--out', '{o}'],
                                  ['the LoRA rank', 'in [1, 256]']),
    'run: empty systems':        (['run', '--preset', 'test', '--systems', ',', '--out', '{o}'], ['--systems', 'names nothing']),
    'run: empty capacities':     (['run', '--preset', 'test', '--capacities', ',', '--out', '{o}'], ['--capacities', 'names nothing']),
    'run: empty archs':          (['run', '--preset', 'test', '--archs', ' , ', '--out', '{o}'], ['--archs', 'names nothing']),
    'run: empty exp-trajs':      (['run', '--preset', 'test', '--exp-trajs', ',', '--out', '{o}'], ['--exp-trajs', 'names nothing']),
    'tune: empty systems':       (['tune', '--preset', 'test', '--systems', ',', '--out', '{o}'], ['--systems', 'names nothing']),
    'realpdebench: empty sim ids': (['data', 'import', 'realpdebench', '{t}/download', '--scenario', 'cylinder', '--sim-ids', ',',
                                     '--out', '{o}'], ['--sim-ids', 'names nothing']),
    'data make: out = an option': (['data', 'make', 'cylinder', '--out=-h'], ['--out=-h', 'an option', 'not a value']),
    'advise: unknown twin': (['advise', '--system', 'cylindre', '--out', '{o}'], ['--system', "unknown twin 'cylindre'"]),
    'advise: no such pair': (['advise', '--data', '{t}', '--system', 'wake', '--out', '{o}'], ['--data', 'no pair wake_sim.nc']),
}

@pytest.mark.parametrize('case', list(CASES))
def test_user_error_is_one_line_and_status_2(case, files, tmp_path):
    args, says = CASES[case]
    out = tmp_path / 'out'
    r = simreal(*(a.format(t=files, o=out) for a in args))
    check_user_error(r, *says)
    assert not out.exists()  # refused before anything was written

def test_every_subcommand_is_covered():
    covered = {tuple(a for a in args if not a.startswith(('-', '{')))[:3] for args, _ in CASES.values()}
    for words in cli.COMMANDS: assert any(c[:len(words)] == words for c in covered), words

def test_unwritable_folder(tmp_path):
    ro = tmp_path / 'read_only'; ro.mkdir(); ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK): pytest.skip('this user (root?) can write to a read-only folder')
        line = check_user_error(simreal('data', 'make', 'cylinder', '--out', ro / 'twins'), 'not writable', 'read_only')
        assert not (ro / 'twins').exists(), line
    finally: ro.chmod(0o755)

def test_internal_error_keeps_traceback_and_status_1():
    "A bug is not a user error: Python prints the traceback and exits with status 1 (in a real process)."
    code = ("import simreal_nb.face.cli, simreal_nb.face.cli_data\n"
            "def boom(*args, **kwargs): raise RuntimeError('a bug')\n"
            "simreal_nb.face.cli_data.check_out_dir = boom; simreal_nb.face.cli.main()")  # `data make` calls check_out_dir first
    r = simreal('data', 'make', 'cylinder', code=code)
    assert r.returncode == 1 and 'Traceback' in r.stderr and 'RuntimeError: a bug' in r.stderr, r.stderr

def test_debug_shows_user_error_traceback(files):
    r = simreal('report', files / 'junk', env={'SIMREAL_DEBUG': '1'})
    assert r.returncode == 1 and 'Traceback' in r.stderr and 'UsageError' in r.stderr, r.stderr[-2000:]

def test_main_in_process(monkeypatch, capsys, tmp_path):
    "In-process: a user error is `SystemExit(2)` whose text is the line on stderr; a bug propagates unchanged."
    with pytest.raises(SystemExit) as e: cli.main(['data', 'make', 'cylinder', '--seed', '-1', '--out', str(tmp_path / 'x')])
    assert e.value.code == 2 and str(e.value) == capsys.readouterr().err.strip() == 'simreal data make: --seed: expected an integer >= 0, got -1'
    def boom(): raise RuntimeError('a bug')
    monkeypatch.setitem(cli.COMMANDS, ('boom',), boom)
    with pytest.raises(RuntimeError, match='a bug'): cli.main(['boom'])
    def bad_numpy(): raise ValueError('operands could not be broadcast together')  # a plain ValueError is a bug too
    monkeypatch.setitem(cli.COMMANDS, ('boom',), bad_numpy)
    with pytest.raises(ValueError): cli.main(['boom'])
    assert cli.main(['data', 'list']) is None and capsys.readouterr().out.split()[0] == 'cylinder'  # status 0

def test_ada_twins_calls_run_twins(monkeypatch, capsys, tmp_path):
    "`simreal ada twins` hands its options to `ada.run_twins` and prints where metrics.json is (run_twins stubbed: no training)."
    import simreal_nb.ada.adabench as ada
    calls = []
    def fake(out, system='cylinder', seed=0, preset='default', verbose=True, cache_dir=None):
        calls.append((out, system, seed, preset)); Path(out).mkdir(parents=True, exist_ok=True); (Path(out) / 'metrics.json').write_text('{}')
        return {'base': {'w1_uv': float(seed)}}
    assert list(inspect.signature(ada.run_twins).parameters)[:4] == ['out', 'system', 'seed', 'preset']  # what the stub stands for
    monkeypatch.setattr(ada, 'run_twins', fake)
    cli.main(['ada', 'twins', '--out', str(tmp_path / 'tw'), '--system', 'foil', '--seed', '3', '--preset', 'test'])
    assert calls == [(str(tmp_path / 'tw'), 'foil', 3, 'test')]
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"metrics: {tmp_path / 'tw' / 'metrics.json'}"
    cli.main(['ada', 'twins', '--out', str(tmp_path / 'tw2')])
    assert calls[-1] == (str(tmp_path / 'tw2'), 'cylinder', 0, 'default')
    cli.main(['ada', 'twins', '--out', str(tmp_path / 'tw3'), '--seeds', '0,2'])       # one run per seed, then mean ± std
    assert calls[-2:] == [(str(tmp_path / 'tw3' / 'seed0'), 'cylinder', 0, 'default'), (str(tmp_path / 'tw3' / 'seed2'), 'cylinder', 2, 'default')]
    s = json.loads((tmp_path / 'tw3' / 'summary.json').read_text())
    assert s['seeds'] == [0, 2] and s['metrics']['base'] == {'w1_uv': 1.0, 'w1_uv_std': 2 ** 0.5}

def test_run_lambdas_adds_joint_at_each_training_weight(monkeypatch, tmp_path):
    "`simreal run --lambdas 0.1,0.9` adds joint@0.1 and joint@0.9 to the preset's protocols (run_experiment stubbed)."
    import simreal_nb.study.experiment as ex
    seen = {}
    monkeypatch.setattr(ex, 'run_experiment', lambda out, cfg, grid, **kw: seen.update(grid=grid))
    cli.main(['run', '--preset', 'test', '--lambdas', '0.1,0.9', '--out', str(tmp_path / 'r'), '--workers', '0'])
    assert [p.name for p in seen['grid'].protocols] == ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'pooled', 'joint@0.1', 'joint@0.9']

def test_every_package_error_is_an_input_error_or_documented_as_not_one():
    "Each error class a module defines derives from errors.InputError (exit 2) or is listed in errors.NOT_INPUT with its reason (a traceback)."
    from simreal_nb.core.errors import InputError, SimrealError, NOT_INPUT
    own = set()
    for m in pkgutil.walk_packages(simreal_nb.__path__, 'simreal_nb.'):  # every module of every part
        mod = importlib.import_module(m.name)
        own |= {c for c in vars(mod).values() if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == mod.__name__}
    assert {c.__name__ for c in own} >= {'ADAInputError', 'RealPDEBenchError', 'PIVFormatError', 'GridError', 'UsageError', 'NonFiniteLossError'}
    for c in own:
        if c.__name__ in NOT_INPUT or c in (SimrealError, InputError) or issubclass(c, (SystemExit, KeyboardInterrupt)): continue  # exits and interrupts are not errors
        assert issubclass(c, InputError), f"{c.__module__}.{c.__name__}: neither an errors.InputError nor listed in errors.NOT_INPUT"
        assert issubclass(c, ValueError) and cli.is_user_error(c('x')), c
    for name in NOT_INPUT:
        c = next((c for c in own if c.__name__ == name), None)
        assert c is not None and not issubclass(c, InputError) and not cli.is_user_error(c('x')), name
    assert not cli.is_user_error(ValueError('x')) and not cli.is_user_error(KeyError('x')) and not cli.is_user_error(OSError('x'))

def test_run_lambdas_at_the_default_weight_adds_no_cell(monkeypatch, tmp_path):
    "`--lambdas 0.5` names plain Joint again: the grid's cells hold one Joint (keyed by the canonical name), not a second."
    import simreal_nb.study.experiment as ex
    seen = {}
    monkeypatch.setattr(ex, 'run_experiment', lambda out, cfg, grid, **kw: seen.update(grid=grid))
    cli.main(['run', '--preset', 'test', '--lambdas', '0.5,0.3', '--out', str(tmp_path / 'r'), '--workers', '0'])
    protos = [c.protocol.name for c in seen['grid'].cells('fno') if c.system == 'cylinder' and c.seed == 0]
    assert protos.count('joint') == 1 and 'joint@0.5' not in protos and 'joint@0.3' in protos



@pytest.mark.parametrize('value', ['my-dir', 'ü-é dir', 'a--b', '-lead'])
def test_option_equals_value_parses_like_two_tokens(monkeypatch, tmp_path, value):
    "`--out=VALUE` and `--out VALUE` reach the command with VALUE as typed: dashes, unicode and a leading dash kept."
    import simreal_nb.study.experiment as ex
    seen = []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, cfg, grid, **kw: seen.append(str(out)))
    path = str(tmp_path / 'runs') + '/' + value
    cli.main(['run', '--preset', 'test', '--workers', '0', f'--out={path}'])
    if not value.startswith('-'): cli.main(['run', '--preset', 'test', '--workers', '0', '--out', path])
    assert set(seen) == {path}


def test_negative_number_after_equals_is_named_as_typed(capsys):
    "`--seeds=-1` is refused naming -1 (not a rewritten `_1`)."
    with pytest.raises(SystemExit) as e: cli.main(['run', '--preset', 'test', '--seeds=-1', '--out=unused-dir'])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert '-1' in err and '_1' not in err, err


def test_run_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    "`simreal run --out DIR` over a folder of someone else's files: exit 2 naming them, nothing written there; --overwrite lets it in."
    out = tmp_path / 'mine'; out.mkdir()
    (out / 'report.md').write_text('my notes'); (out / 'results.nc').write_bytes(b'not ours')
    args = ['run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'sim_only', '--seeds', '1', '--workers', '0']
    with pytest.raises(SystemExit) as e: cli.main([*args, '--out', str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'report.md' in err and 'results.nc' in err and '--overwrite' in err, err
    assert sorted(p.name for p in out.iterdir()) == ['report.md', 'results.nc'] and (out / 'report.md').read_text() == 'my notes'
    cli.main([*args, '--out', str(out), '--overwrite'])
    assert (out / 'manifest.json').exists() and (out / 'report.md').read_text() != 'my notes'
    cli.main([*args, '--out', str(out)])  # its own folder now: resumes without --overwrite


@pytest.mark.parametrize('out,says', [('', 'empty'), ('  ', 'empty')])
def test_run_empty_out_is_a_user_error(out, says, capsys):
    with pytest.raises(SystemExit) as e: cli.main(['run', '--preset', 'test', '--out', out])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_run_dangling_symlink_out_is_named_as_such(tmp_path, capsys):
    link = tmp_path / 'link'; link.symlink_to(tmp_path / 'nowhere' / 'at-all')
    loop = tmp_path / 'loop'; loop.symlink_to(loop)
    for p in (link, loop):
        with pytest.raises(SystemExit) as e: cli.main(['run', '--preset', 'test', '--out', str(p)])
        assert e.value.code == 2 and 'symbolic link to nothing' in capsys.readouterr().err


def test_data_make_refuses_to_replace_files_unless_told(tmp_path, capsys):
    "`simreal data make` into a folder that already holds SYSTEM_sim.nc: exit 2 naming it, the file untouched; --overwrite replaces."
    out = tmp_path / 'd'; out.mkdir()
    (out / 'cylinder_sim.nc').write_bytes(b'my own file')
    with pytest.raises(SystemExit) as e: cli.main(['data', 'make', 'cylinder', '--size', 'test', '--out', str(out)])
    assert e.value.code == 2 and 'cylinder_sim.nc: exists' in capsys.readouterr().err
    assert (out / 'cylinder_sim.nc').read_bytes() == b'my own file' and not (out / 'cylinder_exp.nc').exists()
    cli.main(['data', 'make', 'cylinder', '--size', 'test', '--out', str(out), '--overwrite'])
    assert (out / 'cylinder_sim.nc').read_bytes()[:4] != b'my o' and (out / 'cylinder_exp_truth.nc').exists()


def test_data_import_piv_refuses_to_replace_piv_exp_unless_told(tmp_path, capsys):
    out = tmp_path / 'd'; out.mkdir(); (out / 'piv_exp.nc').write_bytes(b'mine')
    with pytest.raises(SystemExit) as e: cli.main(['data', 'import', 'piv', str(tmp_path / 'frames'), '--out', str(out)])
    assert e.value.code == 2 and 'piv_exp.nc: exists' in capsys.readouterr().err and (out / 'piv_exp.nc').read_bytes() == b'mine'


def test_docs_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    "`simreal docs --out DIR` over someone else's index.html: exit 2 naming it, untouched; a build with overwrite, then its own folder again."
    from simreal_nb.face.docs import build_docs
    out = tmp_path / 'site'; out.mkdir(); (out / 'index.html').write_text('my page')
    with pytest.raises(SystemExit) as e: cli.main(['docs', '--out', str(out), '--notebooks', 'index', '--no-execute'])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert 'index.html' in err and '--overwrite' in err and (out / 'index.html').read_text() == 'my page', err
    build_docs(out, notebooks=['index'], execute=False, assets=False, overwrite=True, verbose=False)
    assert 'my page' not in (out / 'index.html').read_text() and json.loads((out / 'build.json').read_text())['pages']
    build_docs(out, notebooks=['index'], execute=False, assets=False, verbose=False)  # its own site now: no overwrite needed


def test_run_exp_trajs_at_or_above_the_count_is_all(tmp_path, capsys):
    "`--exp-trajs 100,all` where the system has fewer trajectories: one set, computed once, reported once (no merge error)."
    args = ['run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'sim_only', '--exp-trajs', '1,100,all',
            '--workers', '0', '--out', str(tmp_path / 'r')]
    cli.main(args)
    assert "100 ≥ cylinder's" in capsys.readouterr().out
    import xarray as xr
    with xr.open_dataset(tmp_path / 'r' / 'results.nc', engine='h5netcdf') as res: n = res.exp_trajs.values.tolist()
    assert n == [1, 2]  # the test preset's cylinder trains on 2 experimental trajectories: 100 and all are the same 2
    assert sorted(p.name for p in (tmp_path / 'r' / 'cells').glob('*sim_only*.nc')) == [
        'cylinder__S__fno__x1__sim_only__s0.nc', 'cylinder__S__fno__xall__sim_only__s0.nc']
    cli.main(args)  # the rerun finds everything done


@pytest.mark.parametrize('name,edit,says', [
    ('manifest.json', lambda m: {**m, 'config': [8, 4]}, "'config' holds a list ([8, 4]), not an object"),
    ('manifest.json', lambda m: {**m, 'data': 3}, "'data' holds a number (3), not a string or null"),
    ('timing.json', lambda m: {'_data_s': 'slow'}, "'_data_s' holds a string"),
    ('timing.json', lambda m: {'_run_s': True}, "'_run_s' holds true or false"),
])
def test_run_dir_json_of_wrong_types_is_a_user_error(tmp_path, capsys, name, edit, says):
    "A manifest.json / timing.json with the right keys but values of the wrong types: exit 2 naming the file and the key, before training."
    from simreal_nb.study.grid import PRESETS
    from simreal_nb.study.rundir import manifest_of
    out = tmp_path / 'r'; out.mkdir()
    man = manifest_of(PRESETS['test'].config)
    (out / 'manifest.json').write_text(json.dumps(edit(man) if name == 'manifest.json' else man))
    if name == 'timing.json': (out / name).write_text(json.dumps(edit({})))
    with pytest.raises(SystemExit) as e:
        cli.main(['run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'sim_only', '--workers', '0', '--out', str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f'{out / name}: ' in err and says in err, err
    assert not (out / 'cells').exists() or not any((out / 'cells').glob('*.nc'))


def test_report_refuses_a_score_of_other_dims(tmp_path, capsys):
    "`simreal report` on a results.nc whose score has an extra dim (or lacks one): exit 2 naming the file and the dims expected."
    import numpy as np, xarray as xr
    from simreal_nb.reading.report import RESULT_DIMS, RESULT_SETTINGS
    dims = sorted(RESULT_DIMS) + sorted(RESULT_SETTINGS)
    for extra in (['lead'], []):
        d = tmp_path / f"r{len(extra)}"; d.mkdir()
        use = dims + extra if extra else [d for d in dims if d != 'metric']
        xr.Dataset(dict(score=(use, np.zeros([1] * len(use))))).to_netcdf(d / 'results.nc', engine='h5netcdf')
        with pytest.raises(SystemExit) as e: cli.main(['report', str(d)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"{d / 'results.nc'}: its 'score' has dims" in err and 'metric' in err, err


def test_full_disk_while_saving_a_checkpoint_names_the_file(tmp_path, monkeypatch, capsys):
    "A checkpoint write that hits a full disk (ENOSPC inside torch.save): exit 2 naming the checkpoint, no temporary file left."
    import errno
    from simreal_nb.core import store
    real = store.write_bytes
    def half(tmp):
        with open(tmp, 'wb') as f: f.write(b'half')
        raise OSError(errno.ENOSPC, 'No space left on device')  # what a write raises on a full device
    def full(path, data):  # checkpoints only: the bytes torch.save made in memory meet a full disk
        return store.atomic_write(path, half) if str(path).endswith('.pt') else real(path, data)
    monkeypatch.setattr(store, 'write_bytes', full)
    out = tmp_path / 'job'
    with pytest.raises(SystemExit) as e: cli.main(['train', '--preset', 'test', '--protocol', 'sim_only', '--out', str(out)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.endswith('.pt: No space left on device') and str(out) in err, err
    assert not [p for p in out.rglob('*') if store.is_temporary(p.name)]


def test_torch_save_on_a_full_device_raises_oserror():
    "The premise of the test above, on a real full device: torch.save into a file object raises OSError(ENOSPC), not RuntimeError."
    import errno, torch
    if not Path('/dev/full').exists(): pytest.skip('no /dev/full here')
    with pytest.raises(OSError) as e:
        with open('/dev/full', 'wb') as f: torch.save({'w': torch.zeros(10 ** 5)}, f); f.flush()
    assert e.value.errno == errno.ENOSPC


def test_ada_refuses_a_folder_it_did_not_write(tmp_path, monkeypatch, capsys):
    "`simreal ada twins --out DIR` over someone else's table.md: exit 2 naming it, before anything runs; --overwrite lets it in (run stubbed)."
    import simreal_nb.ada.adabench as ada
    ran = []
    def fake(out, system='cylinder', seed=0, preset='default', verbose=True, cache_dir=None):
        ran.append(out); Path(out).mkdir(parents=True, exist_ok=True); (Path(out) / 'metrics.json').write_text('{}'); return {'base': {'w': 1.0}}
    monkeypatch.setattr(ada, 'run_twins', fake)
    out = tmp_path / 'a'; out.mkdir(); (out / 'table.md').write_text('my table')
    with pytest.raises(SystemExit) as e: cli.main(['ada', 'twins', '--out', str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and 'table.md' in err and '--overwrite' in err and not ran and (out / 'table.md').read_text() == 'my table'
    cli.main(['ada', 'twins', '--out', str(out), '--overwrite'])
    cli.main(['ada', 'twins', '--out', str(out)])  # metrics.json: the folder of an earlier ada run now
    multi = tmp_path / 'm'
    (multi / 'seed0').mkdir(parents=True); (multi / 'seed0' / 'metrics.json').write_text('{}')  # a --seeds run killed after seed 0
    cli.main(['ada', 'twins', '--out', str(multi), '--seeds', '0,1'])
    assert len(ran) == 4 and json.loads((multi / 'summary.json').read_text())['seeds'] == [0, 1]


def test_train_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    "`simreal train --out DIR` over someone else's files: exit 2 naming them, untouched (no job.json written)."
    out = tmp_path / 'j'; out.mkdir(); (out / 'notes.txt').write_text('mine')
    with pytest.raises(SystemExit) as e: cli.main(['train', '--preset', 'test', '--protocol', 'sim_only', '--out', str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and 'notes.txt' in err and '--overwrite' in err and sorted(p.name for p in out.iterdir()) == ['notes.txt']


# ---------------------------------------------------------------------------------------------------- ownership
def _fail(argv, capsys, *says):
    "`cli.main(argv)` ends with status 2 and one stderr line holding every one of `says`; that line."
    with pytest.raises(SystemExit) as e: cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, (e.value.code, err)
    for s in says: assert s in err, (s, err)
    return err


def _results_nc(path):
    "A results.nc whose `score` has the dims `simreal run` writes (enough for the checks before the report is built)."
    import numpy as np, xarray as xr
    from simreal_nb.reading.report import RESULT_DIMS
    dims = sorted(RESULT_DIMS)
    xr.Dataset(dict(score=(dims, np.zeros([1] * len(dims))))).to_netcdf(path, engine='h5netcdf')


def test_report_refuses_a_folder_no_run_wrote(tmp_path, capsys):
    "`simreal report DIR` on a folder without a run's manifest.json: exit 2 naming the files it would replace, all untouched."
    d = tmp_path / 'mine'; d.mkdir(); _results_nc(d / 'results.nc')
    (d / 'report.md').write_text('my notes'); (d / 'scores.nc').write_bytes(b'my scores')
    _fail(['report', str(d)], capsys, 'no manifest.json', 'simreal run', 'report.md, scores.nc would be replaced', '--overwrite')
    assert (d / 'report.md').read_text() == 'my notes' and (d / 'scores.nc').read_bytes() == b'my scores'
    assert sorted(p.name for p in d.iterdir()) == ['report.md', 'results.nc', 'scores.nc']


def test_train_and_run_refuse_each_others_folders(tmp_path, capsys):
    "`simreal train --out` a run's folder and `simreal run --out` a job's: exit 2 naming the command that wrote it, nothing written."
    from simreal_nb.study.grid import PRESETS
    from simreal_nb.study.rundir import manifest_of
    run_dir = tmp_path / 'run'; run_dir.mkdir(); (run_dir / 'manifest.json').write_text(json.dumps(manifest_of(PRESETS['test'].config)))
    job_dir = tmp_path / 'job'; job_dir.mkdir(); (job_dir / 'job.json').write_text('{}')
    for overwrite in ([], ['--overwrite']):  # --overwrite is for plain folders, never another command's
        _fail(['train', '--preset', 'test', '--protocol', 'sim_only', '--out', str(run_dir), *overwrite], capsys,
              'a folder `simreal run` wrote (manifest.json)', 'expected a new folder or one `simreal train` wrote')
        _fail(['run', '--preset', 'test', '--workers', '0', '--out', str(job_dir), *overwrite], capsys,
              'a folder `simreal train` wrote (job.json)', 'expected a new folder or one `simreal run` wrote')
    assert sorted(p.name for p in run_dir.iterdir()) == ['manifest.json'] and sorted(p.name for p in job_dir.iterdir()) == ['job.json']


def test_ada_refuses_another_commands_folder(tmp_path, monkeypatch, capsys):
    "`simreal ada mog --out` an `ada chain` folder (stamped, or of an older version: its run_info.json), a run's: exit 2 naming it, nothing run."
    import simreal_nb.ada.adabench as ada, simreal_nb.ada.adamog as adamog
    ran = []
    monkeypatch.setattr(adamog, 'run_mog', lambda out, **kw: ran.append(out))
    def chain_run(out, **kw): ran.append(out); Path(out).mkdir(exist_ok=True); Path(out, 'metrics.json').write_text('{}')
    monkeypatch.setattr(ada, 'run_chain', chain_run)
    chain = tmp_path / 'chain'
    cli.main(['ada', 'chain', '--quick', '--out', str(chain)])  # stamps the folder as its own
    assert json.loads((chain / 'ada.json').read_text()) == {'command': 'simreal ada chain'}
    old = tmp_path / 'old'; old.mkdir()  # an ada chain folder of a version before the stamp
    (old / 'metrics.json').write_text('{}'); (old / 'run_info.json').write_text(json.dumps(dict(order=['x'], seed=0)))
    run = tmp_path / 'run'; run.mkdir(); (run / 'manifest.json').write_text('{}')
    for d, sign in ((chain, 'ada.json'), (old, 'its results'), (run, 'manifest.json')):
        theirs = 'simreal run' if d == run else 'simreal ada chain'
        for args in ([], ['--overwrite'], ['--betas', '0.1']):
            _fail(['ada', 'mog', '--quick', '--out', str(d), *args], capsys, f'a folder `{theirs}` wrote ({sign})', 'simreal ada mog')
    _fail(['ada', 'twins', '--preset', 'test', '--out', str(chain)], capsys, 'a folder `simreal ada chain` wrote')
    cli.main(['ada', 'chain', '--quick', '--out', str(old)])  # its own command resumes into it
    assert len(ran) == 2 and not (tmp_path / 'run' / 'ada.json').exists()


def test_empty_simreal_cache_is_a_user_error(tmp_path):
    "SIMREAL_CACHE set but empty (it would put a cache into the current folder): exit 2, one line, nothing written."
    r = subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', 'data', 'make', 'cylinder', '--size', 'test',
                        '--out', 'twins'], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, 'SIMREAL_CACHE': '', 'SIMREAL_DEBUG': ''}, timeout=300)
    check_user_error(r, 'SIMREAL_CACHE: set but empty', 'expected a folder path')
    assert list(tmp_path.iterdir()) == []
    from simreal_nb.core.store import cache_folder, CacheError
    with pytest.raises(CacheError): cache_folder('twins', '')


def test_report_overwrite_writes_into_a_folder_no_run_wrote(tmp_path, capsys):
    "A run's results.nc copied into a folder of one's own: `report` refuses it, `report --overwrite` replaces the report there; a run's own folder needs no flag."
    import shutil
    run = tmp_path / 'run'
    cli.main(['run', '--preset', 'test', '--systems', 'cylinder', '--protocols', 'sim_only', '--seeds', '1', '--workers', '0', '--out', str(run)])
    mine = tmp_path / 'mine'; mine.mkdir(); shutil.copy(run / 'results.nc', mine / 'results.nc')
    (mine / 'report.md').write_text('my notes')
    _fail(['report', str(mine)], capsys, 'no manifest.json', '(its report.md would be replaced)')
    assert (mine / 'report.md').read_text() == 'my notes' and not (mine / 'scores.nc').exists()
    cli.main(['report', str(mine), '--overwrite'])
    assert (mine / 'report.md').read_text() != 'my notes' and (mine / 'scores.nc').exists()
    cli.main(['report', str(run)])


@pytest.mark.parametrize('value', ['-dir', '-1', '--not-an-option'])
def test_a_value_starting_with_a_dash_reads_the_same_in_both_spellings(monkeypatch, tmp_path, value):
    "`--out -dir` and `--out=-dir` reach the command with the same value (one used to write, the other to refuse)."
    import simreal_nb.study.experiment as ex
    seen = []
    monkeypatch.setattr(ex, 'run_experiment', lambda out, cfg, grid, **kw: seen.append(str(out)))
    monkeypatch.chdir(tmp_path)
    cli.main(['run', '--preset', 'test', '--workers', '0', '--out', value])
    cli.main(['run', '--preset', 'test', '--workers', '0', f'--out={value}'])
    assert seen == [value, value]


def test_exp_valid_in_one_trajectory_is_refused_before_training(tmp_path, capsys):
    "Imported exp data valid in one trajectory only: exit 2 naming the splits left without a valid point, before any update (no checkpoint)."
    import numpy as np, xarray as xr
    d = tmp_path / 'd'
    cli.main(['data', 'make', 'cylinder', '--size', 'test', '--out', str(d)])
    with xr.open_dataset(d / 'cylinder_exp.nc', engine='h5netcdf') as e: e = e.load()
    ok = np.zeros([e.sizes[k] for k in ('traj', 'time', 'y', 'x')], bool); ok[0] = True
    for f in ('u', 'v'): e[f] = e[f].where(ok)
    e['valid'] = (('traj', 'time', 'y', 'x'), ok)
    (d / 'cylinder_exp.nc').unlink(); (d / 'cylinder_exp_truth.nc').unlink(); (d / 'cylinder.set.json').unlink()  # data of one's own now
    e.to_netcdf(d / 'cylinder_exp.nc', engine='h5netcdf')
    capsys.readouterr()
    job = tmp_path / 'job'
    _fail(['train', '--preset', 'test', '--data', str(d), '--out', str(job)], capsys, 'cylinder_exp.nc', 'the exp data leave the',
          'without a valid point', 'expected valid points')
    assert not list(job.glob('*.pt')) and not (job / 'scores.nc').exists()


def test_data_import_piv_names_its_flags_not_python_keywords(tmp_path, capsys):
    "OpenPIV frames without acquisition time: the refusal names `--dt`, the flag that fixes it, not the keyword `dt=`."
    frames = tmp_path / 'frames'; frames.mkdir()
    x, y = np.meshgrid(np.arange(4.) * 16, np.arange(3.) * 16)
    for k in range(2):
        np.savetxt(frames / f'exp{k:04d}.txt', np.c_[x.ravel(), y.ravel(), np.ones(12), np.full(12, k),
                                                     np.zeros(12), np.zeros(12)], header='x y u v flags mask')
    with pytest.raises(SystemExit) as e:
        cli.main(['data', 'import', 'piv', str(frames), '--units', 'mm,m/s', '--out', str(tmp_path / 'o')])
    err = capsys.readouterr().err
    assert e.value.code == 2 and 'no acquisition time' in err and '--dt' in err and 'dt=' not in err, err
    cli.main(['data', 'import', 'piv', str(frames), '--units', 'mm,m/s', '--dt', '0.01', '--out', str(tmp_path / 'o')])
    assert (tmp_path / 'o' / 'piv_exp.nc').exists()
