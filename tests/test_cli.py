"The `simreal` console script, run as a user runs it: in a subprocess."
import json, os, re, subprocess, sys
from pathlib import Path
import numpy as np
import xarray as xr

def simreal(*args, timeout=600):
    r = subprocess.run([sys.executable, '-c', 'from simreal_nb.face.cli import main; main()', *args],
                       capture_output=True, text=True, timeout=timeout, env={**os.environ, 'MPLBACKEND': 'Agg'})
    return r

def test_help_lists_subcommands():
    r = simreal('--help')
    assert r.returncode == 0 and r.stdout.startswith('usage: simreal COMMAND [ARGS]')
    listed = re.findall(r'^  (\S+(?: \S+)?) {2,}\S', r.stdout, re.M)  # '  <command>  <first line of its doc>'
    for cmd in ('data list', 'data make', 'run', 'report', 'bench models', 'bench joint', 'bench data', 'ada mog', 'ada chain'):
        assert cmd in listed, cmd
    assert re.search(r'^  report +Rebuild report\.md, figures/ and scores\.nc of a run from its results\.nc alone\.$', r.stdout, re.M)

def test_unknown_command_fails_clearly():
    r = simreal('fly')
    assert r.returncode != 0 and 'Traceback' not in r.stderr
    head, known = r.stderr.strip().split('; expected one of: ')
    assert head == "simreal: unknown command 'fly'"
    assert {'run', 'report', 'data list'} <= set(known.split(', '))

def test_data_list():
    r = simreal('data', 'list')
    assert r.returncode == 0 and r.stdout.split() == ['cylinder', 'controlled', 'foil', 'kolmogorov']

def test_run_writes_results_report_and_timing(tmp_path):
    out = tmp_path / 'run'
    r = simreal('run', '--preset', 'test', '--out', str(out), '--systems', 'kolmogorov', '--capacities', 'S', '--workers', '0')
    assert r.returncode == 0, r.stderr[-3000:]
    with xr.open_dataset(out / 'results.nc', engine='h5netcdf') as res: res = res.load()
    s = res.score
    assert set(s.dims) >= {'system', 'capacity', 'protocol', 'seed', 'domain', 'field', 'metric'}
    assert list(s.protocol.values) == ['sim_only', 'exp_only', 'sim_to_exp', 'joint', 'pooled', 'persistence', 'mean_field', 'analog']
    assert s.attrs['units'] == '1'
    assert list(s.metric.values) == ['rmse', 'rel_l2', 'frmse'] and set(s.domain.values) == {'sim', 'exp'}
    assert s.sel(domain='exp', field='p').isnull().all()
    assert np.isfinite(s.sel(domain='sim', field='p', metric='rmse')).all()
    assert np.isfinite(s.sel(field='all')).all()
    assert json.loads(res.attrs['config'])['size'] == 'test'
    report = (out / 'report.md').read_text()
    assert f'8 cells (0 already done) -> {out}' in r.stdout and 'estimate: about ' in r.stdout and 'at most' in r.stdout
    assert 'in this process: 8 cells, 5 trained and 3 baselines' in r.stdout and '{' not in r.stdout  # in words, not a dict
    summary = r.stdout[r.stdout.index('done in '):].splitlines()  # the run ends with a summary, not the report
    assert len(summary) <= 15 and summary[0].endswith(f'8 cells in {out}') and report not in r.stdout
    assert f"report:  {out / 'report.md'}" in summary[1] and f"figures: {out / 'figures'}/" in summary[2]
    assert "## The paper's findings, measured here" in report and '## RMSE per domain and bRMSE at λ = 0.5' in report
    for png in ('pareto_rmse.png', 'rollouts_kolmogorov.png'):
        assert (out / 'figures' / png).read_bytes()[:4] == b'\x89PNG'
    timing = json.loads((out / 'timing.json').read_text())
    assert len([k for k in timing if not k.startswith('_')]) == 8
    # the report is rebuilt from results.nc alone
    (out / 'report.md').unlink()
    r = simreal('report', str(out))
    assert r.returncode == 0 and r.stdout.strip() == str(out / 'report.md')
    assert (out / 'report.md').read_text() == report

def test_run_bad_names_fail_before_compute(tmp_path):
    r = simreal('run', '--quick', '--out', str(tmp_path / 'x'), '--systems', 'cylindre')
    assert r.returncode != 0 and 'cylindre' in r.stderr and 'kolmogorov' in r.stderr
    r = simreal('run', '--preset', 'huge', '--out', str(tmp_path / 'x'))
    assert r.returncode != 0 and "unknown preset 'huge'" in r.stderr and 'Traceback' not in r.stderr
    r = simreal('run', '--exp-trajs', 'two', '--out', str(tmp_path / 'x'))
    assert r.returncode != 0 and '--exp-trajs' in r.stderr
    assert not (tmp_path / 'x').exists()


def test_run_on_imported_data(tmp_path):
    "`simreal run --data DIR` runs the grid on every NAME_sim.nc / NAME_exp.nc pair in DIR; a folder without one is refused."
    assert simreal('data', 'make', 'kolmogorov', '--out', str(tmp_path / 'data'), '--size', 'test').returncode == 0
    r = simreal('run', '--preset', 'test', '--data', str(tmp_path / 'data'), '--protocols', 'sim_only', '--workers', '0',
                '--out', str(tmp_path / 'run'))
    assert r.returncode == 0, r.stderr[-3000:]
    with xr.open_dataset(tmp_path / 'run' / 'results.nc', engine='h5netcdf') as res:
        assert list(res.system.values) == ['kolmogorov'] and np.isfinite(res.score.sel(protocol='sim_only', field='all')).all()
    r = simreal('run', '--preset', 'test', '--data', str(tmp_path), '--out', str(tmp_path / 'run2'))
    assert r.returncode != 0 and 'no NAME_sim.nc' in r.stderr and 'Traceback' not in r.stderr
