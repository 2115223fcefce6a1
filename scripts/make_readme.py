#!/usr/bin/env python
"""Write README.md from nbs/index.ipynb (nbconvert markdown), or with --check fail when the two differ.

nbdev normally renders the README through Quarto; this keeps the same single source without needing Quarto."""
import sys, re, copy
from pathlib import Path
import nbformat
from nbconvert import MarkdownExporter

ROOT = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r'^\s*#\s*\|')

def readme_text(nb_path=ROOT/'nbs'/'index.ipynb') -> str:
    "Markdown of the index notebook: hidden cells dropped, nbdev directives stripped."
    nb = nbformat.read(nb_path, as_version=4)
    cells = []
    for cell in nb.cells:
        lines = cell.source.splitlines()
        if cell.cell_type == 'code':
            if any(DIRECTIVE.match(l) and re.search(r'\bhide\b', l) for l in lines): continue
            cell = copy.deepcopy(cell)
            cell.source = '\n'.join(l for l in lines if not DIRECTIVE.match(l))
        cells.append(cell)
    nb.cells = cells
    nb.metadata['language_info'] = {'name': 'python'}  # fenced code blocks marked as python
    body, _ = MarkdownExporter().from_notebook_node(nb)
    body = re.sub(r'\n{3,}', '\n\n', body).strip() + '\n'
    return re.sub(r'\]\(([^)#:\s]+)(#[^)]*)?\)', _from_root, body)

def _from_root(m) -> str:
    "A link written for the docs site (relative to nbs/), rewritten relative to the repository root where it names a page."
    target, anchor = m.group(1), m.group(2) or ''
    return f'](nbs/{target}{anchor})' if (ROOT/'nbs'/target).exists() else m.group(0)

def main():
    text, readme = readme_text(), ROOT/'README.md'
    if '--check' in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            sys.exit('README.md is out of sync with nbs/index.ipynb: run `python scripts/make_readme.py`')
        print('README.md is in sync with nbs/index.ipynb')
    else:
        readme.write_text(text); print(f'wrote {readme}')

if __name__ == '__main__': main()
