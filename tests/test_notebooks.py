"""The notebooks as committed: they teach with their outputs, and carry no saved widget state.

The house style: a short paragraph, a small definition, then a cell that shows it working on real values — so a demo cell
that prints or draws something keeps what it printed or drew in the committed notebook (`scripts/fill_outputs.py`
refills them the way `nbdev_test` runs them). Widget state (hundreds of KB of JSON per inspector) is not committed:
the docs build executes the notebooks and saves it into the pages it renders."""
import ast, re
from pathlib import Path
import nbformat
import pytest

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p.relative_to(NBS).as_posix() for p in NBS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
TEACHING = ['core/10_store.ipynb', 'data/16_realpdebench.ipynb', 'training/41_beyond.ipynb', 'checks/82_rigs.ipynb', 'face/95_bench.ipynb']  # refilled and kept so
QUIET = {'print', 'display'}  # calls whose output a reader should see

def shows_something(source:str) -> bool:
    "Whether a code cell, run, prints or displays: a `print`/`display` call, or a last statement that is a bare expression (not `;`-silenced, not an assertion helper)."
    if re.search(r'^#\|\s*(export|exporti|hide|slow)\b', source, re.M): return False  # not run by default, or not shown
    code = '\n'.join(l for l in source.splitlines() if not l.lstrip().startswith(('%', '!')))
    try: tree = ast.parse(code)
    except SyntaxError: return False
    if not tree.body or code.rstrip().endswith(';'): return False
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in QUIET for n in ast.walk(tree)): return True
    last = tree.body[-1]
    if not isinstance(last, ast.Expr) or isinstance(last.value, ast.Constant): return False
    f = getattr(last.value, 'func', None)
    name = getattr(f, 'id', None) or getattr(f, 'attr', '') or ''
    return not name.startswith(('test_', 'assert')) and name not in ('close', 'savefig', 'rmtree', 'unlink', 'mkdir')

def test_the_rule_itself():
    assert shows_something("x = 1\nx") and shows_something("for i in range(2): print(i)") and shows_something("df.head()")
    assert not shows_something("x = 1") and not shows_something("#| export\ndef f(): return 1\nf()")
    assert not shows_something("plt.plot([1]);") and not shows_something("test_fail(lambda: f(), contains='x')")

@pytest.mark.parametrize('name', TEACHING)
def test_demo_cells_keep_their_outputs(name):
    nb = nbformat.read(NBS / name, as_version=4)
    bare = [i for i, c in enumerate(nb.cells) if c.cell_type == 'code' and shows_something(c.source) and not c.get('outputs')]
    assert not bare, f"{name}: cells {bare} print or display but hold no output; run `python scripts/fill_outputs.py nbs/{name}` and `nbdev_clean`"

@pytest.mark.parametrize('name', NOTEBOOKS)
def test_no_widget_state_is_committed(name):
    nb = nbformat.read(NBS / name, as_version=4)
    assert 'widgets' not in nb.metadata, f"{name}: holds saved widget state (metadata.widgets); remove it (the docs build saves its own)"

# The house style: no long run of exported code before a cell that uses it. A run is a sequence of `#| export` or
# `#| exporti` cells, counted in statements (nested ones included), so that wrapping a long line does not lengthen it; it
# ends at the next non-empty code cell that is run for the reader (not `#| hide`, not `#| default_exp`, not only a
# `show_doc(...)` call).
MAX_EXPORT_RUN = 100
_EXPORTED = re.compile(r'^#\|\s*(export|exporti)\b', re.M)
_QUIET_CELL = re.compile(r'^#\|\s*(hide|default_exp)\b', re.M)
_SHOW_DOC = re.compile(r'\s*show_doc\(.*\)\s*$')

def statements(src:str) -> int:
    "Statements in a code cell's source, nested ones included (its `#|` directives left out)."
    code = '\n'.join(l for l in src.splitlines() if not l.startswith('#|'))
    return sum(isinstance(n, ast.stmt) for n in ast.walk(ast.parse(code)))

def export_runs(cells) -> list:
    "The runs of exported code in `cells` (dicts with `cell_type` and `source`), as (statements, index of first cell)."
    runs, n, first = [], 0, None
    for i, c in enumerate(cells):
        if c['cell_type'] != 'code': continue
        src = c['source']
        if _EXPORTED.search(src):
            if not n: first = i
            n += statements(src)
            continue
        body = [l for l in src.splitlines() if l.strip() and not l.startswith('#|')]
        if not body or _QUIET_CELL.search(src) or all(_SHOW_DOC.match(l) for l in body): continue
        if n: runs.append((n, first))
        n, first = 0, None
    if n: runs.append((n, first))
    return runs

def test_export_runs_are_counted():
    code = lambda s: {'cell_type': 'code', 'source': s}
    cells = [code('#| default_exp m'), code('#| export\nx = 1\ny = 2'), {'cell_type': 'markdown', 'source': 'prose'},
             code('#| exporti\nz = 3'), code('show_doc(f)'), code('#| hide\nimport os'), code(''), code('x + z'),
             code('#| export\nw = 4'), code('#| export\ndef f(x):\n    if x: return (1,\n                      2)')]
    assert export_runs(cells) == [(3, 1), (4, 8)]  # the last cell: def, if, return

@pytest.mark.parametrize('name', NOTEBOOKS)
def test_no_long_export_run(name):
    nb = nbformat.read(NBS / name, as_version=4)
    long = [(n, i) for n, i in export_runs(nb.cells) if n > MAX_EXPORT_RUN]
    assert not long, '; '.join(f'{name}: a run of {n} exported statements from cell {i} with no cell that uses them '
                               f'(limit {MAX_EXPORT_RUN}); add a demo cell after a definition' for n, i in long)
