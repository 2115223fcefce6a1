"""Execute notebooks the way `nbdev_test` does and keep what their demo cells print and draw.

    python scripts/fill_outputs.py nbs/data/16_realpdebench.ipynb nbs/training/41_beyond.ipynb ...

Each notebook runs in its own folder with IN_TEST set (the test sizes) and its `#| slow` cells skipped, as the
default `nbdev_test` runs it; every code cell's outputs are then written back into the notebook (run `nbdev_clean`
afterwards). A notebook that fails is left unchanged and the script exits with status 1."""
import os, re, sys
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

SKIP = {'slow'}  # the flags `nbdev_test` skips by default (settings.ini: tst_flags)

def flags(source:str) -> set:
    "The `#| flag` directives at the top of a cell."
    return {m.group(1) for m in re.finditer(r'^#\|\s*([\w-]+)\s*$', source, re.M)}

def fill(path:Path) -> bool:
    nb = read_nb(path)
    os.environ['IN_TEST'] = '1'
    shell = CaptureShell(path)
    cwd = os.getcwd()
    try:
        os.chdir(path.parent)
        shell.run_all(nb, exc_stop=True, preproc=lambda c: c.cell_type != 'code' or bool(flags(c.source) & SKIP))
    except Exception:
        sys.stderr.write(shell.prettytb(fname=path) + '\n'); return False
    finally: os.chdir(cwd)
    write_nb(nb, path)
    return True

if __name__ == '__main__':
    bad = [p for p in map(Path, sys.argv[1:]) if not fill(p.resolve())]
    for p in bad: print(f'failed: {p}', file=sys.stderr)
    sys.exit(1 if bad else 0)
