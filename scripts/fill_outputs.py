"""Execute notebooks the way `nbdev_test` does and keep what their demo cells print and draw.

    python scripts/fill_outputs.py nbs/data/16_realpdebench.ipynb nbs/training/41_beyond.ipynb ...
    python scripts/fill_outputs.py --slow nbs/face/95_bench.ipynb
    python scripts/fill_outputs.py --full nbs/tutorials/own_data.ipynb

Each notebook runs in its own folder with IN_TEST set (the test sizes) and its `#| slow` cells skipped, as the
default `nbdev_test` runs it (with `--slow`, as `nbdev_test --flags slow` runs it: the slow cells too); every code
cell's outputs are then written back into the notebook (run `nbdev_clean` afterwards). With `--full` IN_TEST is not
set: the page runs at its own sizes (a tutorial that shows a quick run), its slow cells still skipped. A notebook that fails is left
unchanged and the script exits with status 1."""
import os, re, sys
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

SKIP = {'slow'}  # the flags `nbdev_test` skips by default (settings.ini: tst_flags)

def flags(source:str) -> set:
    "The `#| flag` directives at the top of a cell."
    return {m.group(1) for m in re.finditer(r'^#\|\s*([\w-]+)\s*$', source, re.M)}

def fill(path:Path, skip:set=SKIP, in_test:bool=True) -> bool:
    "Execute the notebook at `path` as `nbdev_test` would (IN_TEST set unless `in_test` is False); keep its outputs."
    nb = read_nb(path)
    if in_test: os.environ['IN_TEST'] = '1'
    else: os.environ.pop('IN_TEST', None)
    shell = CaptureShell(path)
    cwd = os.getcwd()
    try:
        os.chdir(path.parent)
        shell.run_all(nb, exc_stop=True, preproc=lambda c: c.cell_type != 'code' or bool(flags(c.source) & skip))
    except Exception:
        sys.stderr.write(shell.prettytb(fname=path) + '\n'); return False
    finally: os.chdir(cwd)
    write_nb(nb, path)
    return True

if __name__ == '__main__':
    args = sys.argv[1:]
    skip = set() if '--slow' in args else SKIP
    paths = [Path(a) for a in args if a not in ('--slow', '--full')]
    bad = [p for p in paths if not fill(p.resolve(), skip, in_test='--full' not in args)]
    for p in bad: print(f'failed: {p}', file=sys.stderr)
    sys.exit(1 if bad else 0)
