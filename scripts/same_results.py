"""Check that a change alters no number: the same commands with the package at a reference commit and as it is now.

    python scripts/same_results.py [--ref COMMIT] [--quick]

Each command (`simreal run --preset test`, the beyond-Joint protocols at the test preset, `simreal ada mog --quick`,
and with `--quick` the `simreal run --quick` grid) runs twice in fresh processes, each with an empty data cache of its
own: once with the package exported from `--ref` by `git archive` (put first on PYTHONPATH), once with the working
tree. The outputs are then compared bit for bit: every variable of results.nc and every number of the ADA
metrics.json, except wall times (names ending in `_s`, and `done_at_s` / `time_s` entries). One JSON line per command;
exit status 1 if any differs."""
import argparse, io, json, os, subprocess, sys, tarfile, tempfile
from pathlib import Path
import numpy as np
import xarray as xr

ROOT = Path(__file__).resolve().parents[1]
BEYOND = 'joint_pcgrad,joint_mgda,joint_cagrad,joint_adaptive,joint_snr,joint_hcw,sim_to_exp_replay,sim_to_exp_l2sp,sim_to_exp_ewc,sim_to_exp_lora'
COMMANDS = {'test grid': ['run', '--preset', 'test', '--workers', '0'],
            'beyond-Joint, test preset': ['run', '--preset', 'test', '--workers', '0', '--systems', 'cylinder', '--protocols', BEYOND],
            'ADA mog, test preset': ['ada', 'mog', '--quick']}

def package_at(commit:str) -> Path:
    "A folder holding `simreal_nb` as it was at `commit`."
    tar = subprocess.run(['git', 'archive', commit, 'simreal_nb'], cwd=ROOT, capture_output=True, check=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix='same_results_'))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t: t.extractall(tmp, filter='data')
    return tmp

def simreal(args, out, path, cache):
    env = {**os.environ, 'SIMREAL_CACHE': str(cache), 'MPLBACKEND': 'Agg', 'OMP_NUM_THREADS': '1',
           'PYTHONPATH': os.pathsep.join(p for p in (str(path or ''), os.environ.get('PYTHONPATH', '')) if p)}
    flat = not (Path(path or ROOT) / 'simreal_nb' / 'face' / 'cli.py').exists()  # a commit from before the parts were folders
    code = ('import simreal_nb, sys; print(simreal_nb.__file__, file=sys.stderr); '
            f"from simreal_nb.{'cli' if flat else 'face.cli'} import main; main()")
    Path(out).parent.mkdir(parents=True, exist_ok=True)  # run from there: `python -c` puts the working folder first on sys.path
    r = subprocess.run([sys.executable, '-c', code, *args, '--out', str(out)], env=env, capture_output=True, text=True, cwd=Path(out).parent)
    if r.returncode: raise SystemExit(f"{' '.join(args)} failed ({'reference' if path else 'new'}):\n{r.stderr[-3000:]}")
    return r.stderr.splitlines()[0]

def timing(name:str) -> bool: return name.endswith('_s') or name in ('seconds', 'time')

def differences(a:Path, b:Path) -> list:
    "What differs between two output folders (results.nc or metrics.json files), wall times aside."
    if (a / 'results.nc').exists():
        x, y = (xr.open_dataset(d / 'results.nc', engine='h5netcdf').load() for d in (a, b))
        out = [f'variables {sorted(set(x.data_vars) ^ set(y.data_vars))}'] if set(x.data_vars) != set(y.data_vars) else []
        extra = sorted(set(x.coords) ^ set(y.coords))     # a coordinate one side adds is one difference, not one per variable
        if extra: out.append(f'coords {extra}')
        x, y = x.drop_vars([c for c in extra if c in x.coords]), y.drop_vars([c for c in extra if c in y.coords])
        for v in sorted(set(x.data_vars) & set(y.data_vars)):
            if timing(v): continue
            try: xr.testing.assert_identical(x[v], y[v])
            except AssertionError: out.append(v)
        return out
    def numbers(o, key=''):
        if isinstance(o, dict): return {f'{key}/{k}': v for kk, vv in o.items() if not timing(kk) for k, v in numbers(vv, kk).items()}
        if isinstance(o, list): return {f'{key}[{i}]': v for i, vv in enumerate(o) for k, v in numbers(vv).items()}
        return {'': o}
    fa, fb = (sorted(p.relative_to(d) for d in (d,) for p in d.rglob('metrics.json')) for d in (a, b))
    if fa != fb: return [f'files {fa} vs {fb}']
    out = []
    for f in fa:
        na, nb = numbers(json.loads((a / f).read_text())), numbers(json.loads((b / f).read_text()))
        out += [f'{f}:{k}' for k in sorted(set(na) | set(nb)) if k not in na or k not in nb or na[k] != nb[k]]
    return out

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ref', default='HEAD', help='reference commit (default: the last commit)')
    ap.add_argument('--quick', action='store_true', help='also the quick grid (`simreal run --quick`, minutes)')
    ap.add_argument('--only', default=None, help=f'semicolon-separated names of the commands to run, among {list(COMMANDS)} and "quick grid"')
    a = ap.parse_args(argv)
    cmds = dict(COMMANDS, **({'quick grid': ['run', '--quick']} if a.quick else {}))
    if a.only:
        names = [n.strip() for n in a.only.split(';')]
        unknown = [n for n in names if n not in cmds]
        if unknown: raise SystemExit(f"--only: unknown commands {unknown}; expected some of {list(cmds)}")
        cmds = {n: cmds[n] for n in names}
    ref, tmp, bad = package_at(a.ref), Path(tempfile.mkdtemp(prefix='same_results_runs_')), 0
    for name, args in cmds.items():
        seen = {side: simreal(args, tmp / name / side, ref if side == 'ref' else None, tmp / 'cache' / side) for side in ('ref', 'new')}
        diff = differences(tmp / name / 'ref', tmp / name / 'new')
        if not Path(seen['ref']).is_relative_to(ref): raise SystemExit(f"the reference run imported {seen['ref']}, not the package at {a.ref}")
        bad += bool(diff)
        print(json.dumps(dict(command=' '.join(args), ref=a.ref, identical=not diff, differs=diff[:20],
                              ref_from_archive=Path(seen['ref']).is_relative_to(ref), new_from_tree=Path(seen['new']).is_relative_to(ROOT))), flush=True)
    return 1 if bad else 0

if __name__ == '__main__': sys.exit(main())
