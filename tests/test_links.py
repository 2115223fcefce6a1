"Every relative link and every `§` reference in the README, the notebooks and the docstrings names something the repository holds."
import ast, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r'\]\(([^)\s]+)\)')
CODE = re.compile(r'`[^`\n]*`')

def _relative(target:str) -> bool: return not (re.match(r'[a-zA-Z][\w+.-]*:', target) or target.startswith('#'))

def _dead(text:str, bases) -> list:
    "Relative link targets in markdown `text` (inline code ignored) that exist under none of `bases`."
    return [t for t in LINK.findall(CODE.sub('', text)) if _relative(t)
            and not any((b / t.split('#')[0]).exists() for b in bases)]

def _notebooks():
    return [p for p in sorted((ROOT / 'nbs').rglob('*.ipynb')) if not {'_proc', '.ipynb_checkpoints'} & set(p.parts)]

def _markdown(p:Path) -> str:
    return '\n'.join(''.join(c['source']) for c in json.loads(p.read_text())['cells'] if c['cell_type'] == 'markdown')

def test_readme_links_resolve_from_the_repository_root():
    dead = _dead((ROOT / 'README.md').read_text(), [ROOT])
    assert not dead, f"README.md links to files the repository does not have: {dead}"

def test_notebook_links_resolve_from_their_folder():
    dead = {str(p.relative_to(ROOT)): d for p in _notebooks() if (d := _dead(_markdown(p), [p.parent]))}
    assert not dead, f"notebooks link to files the repository does not have: {dead}"

def _docstrings(p:Path) -> str:
    tree = ast.parse(p.read_text())
    return '\n'.join(ast.get_docstring(n) or '' for n in ast.walk(tree)
                     if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))

def test_docstring_links_resolve():
    dead = {p.name: d for p in sorted((ROOT / 'simreal_nb').rglob('*.py')) if (d := _dead(_docstrings(p), [ROOT, ROOT / 'nbs']))}
    assert not dead, f"docstrings link to files the repository does not have: {dead}"

def test_section_references_name_a_file_of_the_repository():
    "A `§` reference reads `FILE §N`, FILE a path the repository holds (a design note outside it is no reference)."
    texts = {'README.md': (ROOT / 'README.md').read_text()}
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in _notebooks()})
    texts.update({str(p.relative_to(ROOT)): p.read_text() for d in ('simreal_nb', 'tests', 'benchmarks', 'scripts')
                  for p in sorted((ROOT / d).glob('*.py')) if p.name != 'test_links.py'})
    bad = []
    for name, text in texts.items():
        for m in re.finditer(r'([\w./-]*)[`\s,(]*§\s*\d', text):
            f = m.group(1)
            if not (f and ((ROOT / f).exists() or (ROOT / 'nbs' / f).exists())): bad.append((name, text[max(0, m.start() - 30):m.end() + 10]))
    assert not bad, f"§ references to no file of the repository: {bad}"

def test_link_checker_catches_a_dead_link(tmp_path):
    (tmp_path / 'page.ipynb').write_text('{}')
    assert _dead('see [a](page.ipynb#top), [b](gone.ipynb), `[c](also_gone.md)` and [d](https://example.org)', [tmp_path]) == ['gone.ipynb']
