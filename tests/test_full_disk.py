"""A full disk is an error, never a crash: on a real small file system (a tmpfs of a few MB, filled to leave a chosen
number of bytes free) every write the package makes (the netCDF files of `simreal data make` and both importers, a
checkpoint, JSON, a figure) ends in exit status 2 with one line naming the file, no temporary file, and no half set:
what the folder held before is still there and still reads as one set.

Mounting needs root (or CAP_SYS_ADMIN): where it is not permitted these tests are skipped, saying why; the /dev/full
tests in test_cli_errors.py run everywhere."""
import errno, json, os, shutil, subprocess, sys, uuid
from pathlib import Path
import pytest

ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'SIMREAL_DEBUG': ''}
CODE = 'from simreal_nb.face.cli import main; main()'
PIV = Path(__file__).resolve().parent / 'data' / 'piv' / 'Insight'


def _why_no_mount():
    "None where this process may mount a tmpfs; else the reason."
    if not hasattr(os, 'geteuid') or os.geteuid() != 0: return 'mounting a tmpfs needs root (or CAP_SYS_ADMIN); running as a user'
    if shutil.which('mount') is None or shutil.which('umount') is None: return 'no mount/umount command here'
    probe = Path(f'/tmp/simreal-mount-probe-{uuid.uuid4().hex}'); probe.mkdir()
    try:
        r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', str(probe)], capture_output=True, text=True)
        if r.returncode: return f'mounting a tmpfs is not permitted here ({r.stderr.strip() or r.returncode})'
        subprocess.run(['umount', str(probe)], check=True)
        return None
    finally: probe.rmdir()


WHY = _why_no_mount()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f'needs a small real file system: {WHY}')


@pytest.fixture
def small_fs(tmp_path):
    "mount(size) -> a fresh tmpfs of `size` bytes; fill(dir, free) leaves `free` bytes free on it; unmounted after the test."
    mounted = []
    def mount(size):
        d = tmp_path / f'fs{len(mounted)}'; d.mkdir()
        subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(d)], check=True)
        mounted.append(d)
        return d
    yield mount
    for d in mounted: subprocess.run(['umount', '-l', str(d)], check=False)


def fill(d, free:int):
    "Fill the file system of `d` until `free` bytes (rounded to pages) are left."
    have = shutil.disk_usage(d).free
    with open(d / 'filler', 'ab') as f:
        f.write(b'\0' * max(have - free, 0))
    return shutil.disk_usage(d).free


def simreal(*args, cache):
    return subprocess.run([sys.executable, '-c', CODE, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**ENV, 'SIMREAL_CACHE': str(cache)})


def temporaries(d): return [p.name for p in Path(d).rglob('*.tmp')]


def one_line_naming(r, folder):
    "Exit 2, one stderr line naming a file in `folder` and the full disk; no traceback, no crash (139)."
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr[-2000:]
    assert str(folder) in lines[0] and 'No space left on device' in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope='module')
def cache(tmp_path_factory):
    "A twin cache holding cylinder (test size) at seeds 0 and 1, so that each `data make` below only writes."
    c = tmp_path_factory.mktemp('cache')
    for seed in (0, 1):
        r = simreal('data', 'make', 'cylinder', '--size', 'test', '--seed', seed, '--out', c / f'warm{seed}', cache=c)
        assert r.returncode == 0, r.stderr
    return c


# free bytes left when the write starts: nothing, a page, part of the first file, past the first file, near the end
@pytest.mark.parametrize('free', [0, 4096, 300_000, 900_000, 1_500_000])
def test_data_make_on_a_full_disk_keeps_the_old_set(small_fs, cache, free):
    "`data make --overwrite` of seed 1 over a set of seed 0 on a disk that fills mid-write: exit 2 naming the file, seed 0's set intact."
    from simreal_nb.core.store import read_dataset
    d = small_fs(4 << 20)
    out = d / 'twins'
    r = simreal('data', 'make', 'cylinder', '--size', 'test', '--seed', 0, '--out', out, cache=cache)
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fill(d, free)
    r = simreal('data', 'make', 'cylinder', '--size', 'test', '--seed', 1, '--out', out, '--overwrite', cache=cache)
    print(one_line_naming(r, out))
    assert not temporaries(d), temporaries(d)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old set, byte for byte, and nothing else
    assert json.loads((out / 'cylinder.set.json').read_text())['seed'] == 0
    for k in ('sim', 'exp', 'exp_truth'): read_dataset(out / f'cylinder_{k}.nc', domain=k)


@pytest.mark.parametrize('free', [0, 8192, 60_000])
def test_realpdebench_import_on_a_full_disk(small_fs, cache, tmp_path, free):
    "A streamed RealPDEBench import that meets a full disk: exit 2 naming the file, no temporary file, no file of the set in place."
    from simreal_nb.data.realpdebench_files import write_example_realpdebench
    write_example_realpdebench(tmp_path / 'dl', 'cylinder', T=40, H=24, W=40)
    d = small_fs(2 << 20); out = d / 'imp'; out.mkdir()
    fill(d, free)
    r = simreal('data', 'import', 'realpdebench', tmp_path / 'dl', '--scenario', 'cylinder', '--sub-s', '1', '--out', out, cache=cache)
    print(one_line_naming(r, out))
    assert not temporaries(d) and sorted(os.listdir(out)) == []


def test_blockwriter_that_meets_a_full_disk_unchecked_does_not_crash(small_fs):
    "Where the disk fills between the free-space check and HDF5's write (another process), HDF5's error is an OSError naming the file: no segmentation fault."
    d = small_fs(256 << 10)
    code = f"""
import numpy as np, xarray as xr
from simreal_nb.core import store
store.check_space = lambda *a, **k: None  # as if another process filled the disk after the check
sk = xr.Dataset(coords=dict(traj=[0], time=np.arange(64.), y=np.arange(64.), x=np.arange(64.)), attrs=dict(domain='exp'))
w = store.BlockWriter({str(d / 'big.nc')!r}, sk, {{'u': {{}}}})
try:
    for t in range(0, 64, 4): w.write(0, slice(t, t + 4), {{'u': np.ones((4, 64, 64), np.float32)}})
    w.commit()
except OSError as e: print('OSError', e.errno, e.filename)
finally: w.discard()
"""
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ['OSError', str(errno.ENOSPC), str(d / 'big.nc')], r.stdout
    assert not temporaries(d)


def test_piv_import_on_a_full_disk(small_fs, cache):
    "`data import piv` on a full disk: exit 2 naming piv_exp.nc, nothing left behind."
    d = small_fs(1 << 20); out = d / 'piv'
    fill(d, 16384)
    r = simreal('data', 'import', 'piv', PIV, '--dt', '0.1', '--out', out, cache=cache)
    print(one_line_naming(r, out))
    assert not temporaries(d) and not out.exists()  # the folder it made for the file is gone again


@pytest.mark.parametrize('free', [0, 4096, 40_000])
def test_checkpoint_json_and_figure_on_a_full_disk(small_fs, free):
    "torch.save, JSON and a PNG figure on a full disk: an OSError(ENOSPC) naming the file (never torch's 'unexpected pos'), the old file kept, no temporary."
    import torch, matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from simreal_nb.core.store import save_torch, load_torch, write_text, atomic_write
    from simreal_nb.face.flags import is_user_error, error_line
    d = small_fs(1 << 20)
    save_torch({'w': torch.zeros(10)}, d / 'last.pt'); write_text(d / 'timing.json', '{"a": 1}')
    fig = plt.figure(figsize=(3, 3), dpi=100); plt.imshow(torch.rand(300, 300).numpy()); atomic_write(d / 'f.png', lambda t: fig.savefig(t, format='png'))
    old = {p.name: p.read_bytes() for p in d.iterdir()}
    fill(d, free)
    writes = {'last.pt': lambda: save_torch({'w': torch.rand(300_000)}, d / 'last.pt'),
              'timing.json': lambda: write_text(d / 'timing.json', json.dumps({'x': list(range(100_000))})),
              'f.png': lambda: atomic_write(d / 'f.png', lambda t: fig.savefig(t, format='png'))}
    for name, write in writes.items():
        with pytest.raises(OSError) as e: write()
        assert e.value.errno == errno.ENOSPC and e.value.filename == str(d / name), (name, e.value)
        assert is_user_error(e.value) and error_line(e.value) == f'{d / name}: No space left on device'
    plt.close(fig)
    assert not temporaries(d)
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.name != 'filler'} == old
    assert load_torch(d / 'last.pt')['w'].shape == (10,)
