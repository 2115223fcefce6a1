"""No private name crosses a module of the library: no `from .x import _name` and no `x._name` on an imported module.

A private name starts with `_` and is not a dunder. A helper another module needs is public (a docstring, in its
module's `__all__`); one only its own module uses keeps its underscore. `python tests/test_private_imports.py` prints
the crossings found."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / 'simreal_nb'


def is_private(name:str) -> bool:
    "Whether `name` is private: a leading underscore, not a dunder."
    return name.startswith('_') and not (name.startswith('__') and name.endswith('__'))


def module_name(path:Path) -> str:
    "The dotted name of the library file `path` (a package's `__init__.py` is the package)."
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__': parts.pop()
    return '.'.join(parts)


def is_module(dotted:str) -> bool:
    "Whether `dotted` names a module or package of the library."
    if not (dotted == 'simreal_nb' or dotted.startswith('simreal_nb.')): return False
    p = ROOT.joinpath(*dotted.split('.'))
    return p.with_suffix('.py').exists() or (p / '__init__.py').exists()


def resolve(here:str, is_pkg:bool, node:ast.ImportFrom) -> str|None:
    "The absolute module an `ImportFrom` in module `here` reads from; None when it is not the library."
    if node.level == 0: return node.module if node.module and node.module.split('.')[0] == 'simreal_nb' else None
    base = here.split('.') if is_pkg else here.split('.')[:-1]
    base = base[:len(base) - (node.level - 1)]
    return '.'.join(base + ([node.module] if node.module else []))


def crossings(path:Path) -> list[str]:
    "Each private name the library file `path` takes from another module: `file:line: what`."
    here, is_pkg = module_name(path), path.name == '__init__.py'
    tree = ast.parse(path.read_text(encoding='utf-8'))
    found, modules = [], {}  # modules: local name -> the library module it is bound to
    rel = path.relative_to(ROOT)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = resolve(here, is_pkg, node)
            if src is None or not src.startswith('simreal_nb'): continue
            for a in node.names:
                if is_module(f'{src}.{a.name}'): modules[a.asname or a.name] = f'{src}.{a.name}'
                if src != here and is_private(a.name): found.append(f'{rel}:{node.lineno}: from {src} import {a.name}')
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split('.')[0] != 'simreal_nb': continue
                if any(is_private(p) for p in a.name.split('.')): found.append(f'{rel}:{node.lineno}: import {a.name}')
                if a.asname: modules[a.asname] = a.name
                else: modules['simreal_nb'] = 'simreal_nb'
    for node in ast.walk(tree):  # X._name, X.y._name, … where X is bound to a library module
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)): continue
        chain, v = [], node.value
        while isinstance(v, ast.Attribute): chain.append(v.attr); v = v.value
        if not (isinstance(v, ast.Name) and v.id in modules): continue
        mod = '.'.join([modules[v.id]] + chain[::-1])
        if is_module(mod) and mod != here: found.append(f'{rel}:{node.lineno}: {mod}.{node.attr}')
    return found


def all_crossings() -> list[str]:
    "The crossings of every library file (not nbdev's `_modidx.py`)."
    return [c for p in sorted(PKG.rglob('*.py')) if p.name != '_modidx.py' for c in crossings(p)]


def test_the_scanner_sees_both_kinds(tmp_path, monkeypatch):
    pkg = tmp_path / 'simreal_nb'; (pkg / 'sub').mkdir(parents=True)
    for f in ['__init__.py', 'sub/__init__.py', 'sub/a.py']: (pkg / f).write_text('')
    (pkg / 'sub/b.py').write_text("from .a import (x,\n    _y)\nfrom . import a\nfrom .. import _z\n"
                                  "import simreal_nb.sub.a as A\ndef f(): return a._w, A._v, a.__doc__, _q._p\n")
    monkeypatch.setitem(globals(), 'ROOT', tmp_path)
    assert [c.split(': ', 1)[1] for c in crossings(pkg / 'sub/b.py')] == [
        'from simreal_nb.sub.a import _y', 'from simreal_nb import _z', 'simreal_nb.sub.a._w', 'simreal_nb.sub.a._v']


def test_no_private_name_crosses_a_module():
    found = all_crossings()
    assert not found, f'{len(found)} private names cross a module:\n' + '\n'.join(found)


if __name__ == '__main__':
    found = all_crossings()
    print('\n'.join(found)); print(len(found), 'crossings')
