"""A run covers the models the code resolves, not only the settings as typed: resumed by code whose default changed
(FNO's width 32 -> 16 at capacity S), `simreal run` refuses in one line naming the difference instead of mixing
models of two sizes in one results.nc; a run made before the models were recorded still resumes, and cells of two
model sizes in it are refused when merged."""
import json, os, subprocess, sys
from pathlib import Path

ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'
CHANGED = ("from simreal_nb.models import factory as models; models.CAPACITIES['S']['fno'] = {**models.CAPACITIES['S']['fno'], 'width': 16}\n"
           + CODE)  # the same command, by code whose default FNO width at S is 16
ARGS = ['run', '--preset', 'test', '--systems', 'kolmogorov', '--capacities', 'S', '--protocols', 'sim_only', '--workers', '0']


def simreal(code, out, seeds):
    return subprocess.run([sys.executable, '-c', code, *ARGS, '--seeds', str(seeds), '--out', str(out)], capture_output=True,
                          text=True, timeout=600, env=ENV)


def model_cells(out): return sorted(p.stem for p in (Path(out) / 'cells').glob('*__sim_only__*.nc'))


def one_line(r):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, (r.returncode, r.stderr[-2000:])
    return lines[0]


def test_a_resume_after_a_default_changed_is_refused_naming_it(tmp_path):
    "Seed 0 by the old code, then seed 1 asked of code with FNO width 16: refused naming width 32 -> 16 and the parameter counts; nothing computed."
    out = tmp_path / 'run'
    r = simreal(CODE, out, 1); assert r.returncode == 0, r.stderr[-2000:]
    man = json.loads((out / 'manifest.json').read_text())
    assert man['models']['S/fno']['kwargs']['width'] == 32 and man['models']['S/fno']['cls'] == 'FNO2d'
    before = model_cells(out)
    line = one_line(simreal(CHANGED, out, 2))
    print(line)
    assert 'other models than this code builds (S/fno: width 32 -> 16, ' in line and 'parameters' in line and 'a default changed' in line
    assert model_cells(out) == before  # nothing computed
    r = simreal(CODE, out, 2); assert r.returncode == 0, r.stderr[-2000:]  # the code that made it resumes it
    assert len(model_cells(out)) == 2 and '2 cells' not in r.stdout


def test_a_run_from_before_models_were_recorded_resumes_and_mixed_sizes_are_refused(tmp_path):
    "A manifest without models (written before they were recorded) resumes; a cell of another model size beside the old ones is refused when the results are merged, naming both."
    out = tmp_path / 'run'
    r = simreal(CODE, out, 1); assert r.returncode == 0, r.stderr[-2000:]
    man = json.loads((out / 'manifest.json').read_text()); del man['models']
    (out / 'manifest.json').write_text(json.dumps(man, indent=1))
    r = simreal(CODE, out, 1); assert r.returncode == 0, r.stderr[-2000:]  # resumable: nothing to do, models now recorded
    assert json.loads((out / 'manifest.json').read_text())['models']['S/fno']['kwargs']['width'] == 32
    man = json.loads((out / 'manifest.json').read_text()); del man['models']
    (out / 'manifest.json').write_text(json.dumps(man, indent=1))
    line = one_line(simreal(CHANGED, out, 2))
    print(line)
    assert 'kolmogorov S fno sim_only hold models of different sizes (' in line and 'delete the cells of one size' in line
    assert all(c in line for c in model_cells(out)) and line.count(' parameters: ') == 2


JOB = ['train', '--preset', 'test', '--system', 'kolmogorov', '--protocol', 'sim_only', '--steps', '4']

def test_a_job_resumed_after_a_default_changed_is_refused_naming_it(tmp_path):
    "`simreal train` records its resolved model in job.json: the same job resumes, the same job asked of code with FNO width 16 is refused naming it."
    out = tmp_path / 'job'
    run = lambda code: subprocess.run([sys.executable, '-c', code, *JOB, '--out', str(out)], capture_output=True, text=True, timeout=600, env=ENV)
    r = run(CODE); assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / 'job.json').read_text())['models']['S/fno']['kwargs']['width'] == 32
    r = run(CODE); assert r.returncode == 0, r.stderr[-2000:]  # the same code: the same job, resumed
    line = one_line(run(CHANGED))
    assert 'another model than this code builds (S/fno: width 32 -> 16, ' in line and 'a default changed' in line
