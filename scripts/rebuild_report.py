"""Rebuild a committed report with the package as it is, keeping what its compact `scores.nc` cannot rebuild.

    python scripts/rebuild_report.py [--ref COMMIT] reports/default [reports/morph_quick ...]

A report folder in the repository keeps `scores.nc` (`report.compact_scores`: the per-cell numbers, without learning
curves, example frames, test distances and RealPDEBench's other numbers), `timing.json`, `report.md` and `figures/`;
the run's `results.nc` is not kept, so `simreal report` cannot run on it. This script writes the report text twice
from `scores.nc`, with the package at `--ref` (default HEAD, by `git archive`, in a process of its own) and with the
working tree, and applies the difference to the committed `report.md` (`git merge-file`): what the change to the
package changes, and nothing else. It redraws every figure `report._figures` can draw from `scores.nc` (the Pareto
figure) and leaves the others, whose lines in the report's figure list stay as they were. A conflict is reported and
the file left unchanged; `scores.nc` is never rewritten."""
import argparse, io, os, re, subprocess, sys, tarfile, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("import json, sys; from pathlib import Path; from simreal_nb.reading.report import read_results, report_text; "
        "f = Path(sys.argv[1]); t = f / 'timing.json'; "
        "timing = json.loads(t.read_text()) if t.exists() else None; "
        "sys.stdout.write(report_text(read_results(f / 'scores.nc'), timing))")

def package_at(commit:str, folder) -> Path:
    "`folder`, holding `simreal_nb` as it was at `commit`."
    tar = subprocess.run(['git', 'archive', commit, 'simreal_nb'], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t: t.extractall(folder, filter='data')
    return Path(folder)

def text_with(folder:Path, path:Path|None) -> str:
    "The report text of `folder`'s `scores.nc` by the package in `path` (None: the working tree)."
    env = {**os.environ, 'MPLBACKEND': 'Agg', 'PYTHONPATH': str(path or ROOT)}
    r = subprocess.run([sys.executable, '-c', TEXT, str(folder.resolve())], env=env, capture_output=True, text=True,
                       cwd=path or ROOT, check=True)
    return r.stdout

FIGURES = '\n## Figures\n'

def figure_list(committed:str, new:str) -> str:
    "The committed report's figure list, each figure the new text lists with its new line, new ones at the end."
    line = lambda t: {m.group(1): l for l in t.splitlines() if (m := re.match(r'^!\[.*\]\(figures/(.+)\.png\)$', l))}
    old, now = line(committed), line(new)
    return '\n\n'.join([now.get(n, l) for n, l in old.items()] + [l for n, l in now.items() if n not in old]) + '\n'

def rebuild(folder:Path, ref:Path) -> int:
    "Apply the package's change of `folder`'s report text to its `report.md` and redraw its figures; the conflicts."
    from simreal_nb.core.store import atomic_write, write_text
    from simreal_nb.reading.report import _figures, read_results
    ours, base, new = [t.partition(FIGURES) for t in ((folder / 'report.md').read_text(), text_with(folder, ref),
                                                       text_with(folder, None))]
    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d) / n for n in ('committed.md', 'ref.md', 'now.md')]
        for p, t in zip(paths, (ours, base, new)): p.write_text(t[0])
        r = subprocess.run(['git', 'merge-file', '-p', '-L', 'committed', '-L', 'ref', '-L', 'now', *map(str, paths)],
                           capture_output=True, text=True)
    if r.returncode: sys.stderr.write(r.stdout); return r.returncode
    write_text(folder / 'report.md', r.stdout + FIGURES + '\n' + figure_list(ours[2], new[2]))
    for name, _, make in _figures(read_results(folder / 'scores.nc')):
        fig = make()
        atomic_write(folder / 'figures' / f'{name}.png', lambda tmp: fig.savefig(tmp, format='png'))
    return 0

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ref', default='HEAD'); ap.add_argument('folders', nargs='+', type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix='rebuild_report_') as d:
        ref = package_at(a.ref, d)
        bad = [f for f in a.folders if rebuild(f, ref)]
    for f in a.folders: print(f"{f}: {'conflicts, left unchanged' if f in bad else 'report.md and figures rebuilt'}")
    sys.exit(1 if bad else 0)
