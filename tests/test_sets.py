"""Files that belong together are written and read as one set: two `simreal data make` into one --out cannot
interleave (one is refused: a lock), a set whose members come from different writes (a crash between renames, a file
copied from another realisation) is refused naming them, and the twin cache's entries appear whole or not at all."""
import json, os, shutil, subprocess, sys, time
from pathlib import Path
import pytest
from simreal_nb.core.store import SetError, read_dataset, write_set, check_set, is_temporary

ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'


def simreal(*args, cache, **kw):
    return subprocess.Popen([sys.executable, '-c', CODE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**ENV, 'SIMREAL_CACHE': str(cache)}, **kw)


def done(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


HOLDER = ("import sys\nfrom simreal_nb.core.store import folder_lock\nfrom simreal_nb.face.cli import main\n"
          "with folder_lock(sys.argv[1]):  # hold --out as a running `data make` does, until told to go on, then make the set\n"
          "    print('held', flush=True); sys.stdin.readline(); main(sys.argv[2:])")


def test_two_data_makes_into_one_out_one_is_refused(tmp_path):
    "A second `data make` on an --out the first is writing into: exit 2 at once, one line naming the folder and the process; the first's set whole."
    out, cache = tmp_path / 'twins', tmp_path / 'cache'
    a = subprocess.Popen([sys.executable, '-c', HOLDER, str(out), 'data', 'make', 'cylinder', '--size', 'test', '--seed', '0', '--out', str(out)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**ENV, 'SIMREAL_CACHE': str(cache)})
    assert a.stdout.readline().strip() == 'held'  # the first holds --out: no race with how fast it generates
    b = simreal('data', 'make', 'cylinder', '--size', 'test', '--seed', 1, '--out', out, '--overwrite', cache=cache)
    rb, _, eb = done(b)
    a.stdin.write('\n'); a.stdin.flush()
    ra, _, ea = done(a)
    assert ra == 0, ea[-2000:]
    lines = eb.strip().splitlines()
    assert rb == 2 and len(lines) == 1 and 'Traceback' not in eb, eb[-2000:]
    assert f'--out {out}: in use by another simreal command (process {a.pid})' in lines[0], lines[0]
    rec = json.loads((out / 'cylinder.set.json').read_text())
    assert rec['seed'] == 0 and rec['command'] == 'simreal data make'
    for k in ('sim', 'exp', 'exp_truth'): assert read_dataset(out / f'cylinder_{k}.nc', domain=k).attrs['domain'] == k
    assert sorted(os.listdir(out)) == ['cylinder.set.json', 'cylinder_exp.nc', 'cylinder_exp_truth.nc', 'cylinder_sim.nc']


def test_a_set_of_two_realisations_is_refused_naming_the_member(tmp_path):
    "exp_truth of seed 1 beside sim and exp of seed 0 (what an interrupted --overwrite left before): `run --data` refuses in one line, before any folder is made."
    from simreal_nb.twins.systems import write_twins
    cache = tmp_path / 'cache'
    a = write_twins('kolmogorov', tmp_path / 'data', seed=0, size='test', cache_dir=cache)
    b = write_twins('kolmogorov', tmp_path / 'other', seed=1, size='test', cache_dir=cache)
    shutil.copyfile(b['exp_truth'], a['exp_truth'])
    with pytest.raises(SetError, match=r"kolmogorov\.set\.json: the files of set 'kolmogorov' \(command simreal data make, "
                                       r"system kolmogorov, seed 0, size test\) no longer belong together: "
                                       r"kolmogorov_exp_truth\.nc is another file than the set's"):
        read_dataset(a['sim'])
    r = simreal('run', '--preset', 'test', '--data', tmp_path / 'data', '--out', tmp_path / 'run', cache=cache)
    rc, _, err = done(r)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and 'kolmogorov_exp_truth.nc is another file' in err, err[-2000:]
    assert not (tmp_path / 'run').exists()
    (tmp_path / 'data' / 'kolmogorov_exp.nc').unlink()  # a member missing
    with pytest.raises(SetError, match='kolmogorov_exp.nc is missing'): check_set(a['sim'])


def test_a_crash_between_the_renames_leaves_a_set_that_is_refused(tmp_path, monkeypatch):
    "Killed after the set's record and one rename: the members disagree with the record, and a reader says so; written again, the set reads."
    from simreal_nb.core import store
    import xarray as xr, numpy as np
    ds = lambda v: xr.Dataset({'a': ('x', np.full(3, v))})
    write_set(tmp_path, 'pair', {'one': ('one.nc', ds(0.)), 'two': ('two.nc', ds(0.))}, dict(seed=0), validate=False)
    real, n = os.replace, []
    def crash(src, dst):
        n.append(dst)
        if len(n) == 3: raise KeyboardInterrupt  # the record written, the first member renamed, not the second
        return real(src, dst)
    monkeypatch.setattr(store.os, 'replace', crash)
    with pytest.raises(KeyboardInterrupt):
        write_set(tmp_path, 'pair', {'one': ('one.nc', ds(1.)), 'two': ('two.nc', ds(1.))}, dict(seed=1), validate=False)
    monkeypatch.setattr(store.os, 'replace', real)
    assert not [p for p in tmp_path.iterdir() if is_temporary(p.name)]
    with pytest.raises(SetError, match=r'\(seed 1\) no longer belong together: two.nc is another file'):
        read_dataset(tmp_path / 'one.nc', validate=False)
    write_set(tmp_path, 'pair', {'one': ('one.nc', ds(1.)), 'two': ('two.nc', ds(1.))}, dict(seed=1), validate=False)
    assert float(read_dataset(tmp_path / 'two.nc', validate=False)['a'][0]) == 1.0


def test_two_processes_filling_one_cache_entry_leave_one_whole_entry(tmp_path):
    "Two processes generating the same twin into an empty cache: both get the data, one entry (staged, renamed whole), no staging folder left."
    code = ("import sys; from simreal_nb.twins.systems import load_twins; "
            "tw = load_twins('kolmogorov', seed=0, size='test', cache_dir=sys.argv[1]); print(tw['sim'].sizes['traj'])")
    ps = [subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV) for _ in range(2)]
    for p in ps:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and 'could not cache' not in err, err[-2000:]
    root = tmp_path / 'twins'
    entries = list(root.iterdir())
    assert len(entries) == 1 and not entries[0].name.startswith('.'), [e.name for e in entries]
    assert sorted(p.name for p in entries[0].iterdir()) == ['exp.nc', 'exp_truth.nc', 'manifest.json', 'sim.nc']
    man = json.loads((entries[0] / 'manifest.json').read_text())
    assert (man['system'], man['seed'], man['size']) == ('kolmogorov', 0, 'test')
