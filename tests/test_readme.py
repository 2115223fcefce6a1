"The README's Python snippet, run as a reader would, prints the numbers the README shows under it."
import contextlib, io, math, re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def readme_snippet(text:str):
    "The README's ```python blocks joined, and the indented output block that follows the last one."
    blocks = re.findall(r'```python\n(.*?)```\n', text, re.S)
    tail = text.split('```python\n')[-1].split('```\n', 1)[1]
    shown = re.match(r'\n((?: {4}.*\n|\n)+)', tail)
    assert blocks and shown, "README.md: expected ```python blocks followed by their printed output (an indented block)"
    return '\n'.join(blocks), '\n'.join(l[4:] for l in shown.group(1).splitlines()).strip()

def same_printout(got:str, shown:str, tol:float=5e-4) -> bool:
    "Token by token: words equal, numbers within `tol` (the last printed digit may differ across CPUs)."
    a, b = got.split(), shown.split()
    def close(x, y):
        try: return math.isclose(float(x), float(y), abs_tol=tol)
        except ValueError: return x == y
    return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))

def test_same_printout_tells_numbers_apart():
    assert same_printout('sim 0.3266 0.3949', 'sim  0.3268 0.3949') and not same_printout('sim 0.3266', 'sim 0.3831')
    assert not same_printout('exp 0.3266', 'sim 0.3266')

def test_readme_snippet_reproduces_its_printed_numbers(tmp_path, monkeypatch):
    code, shown = readme_snippet((ROOT / 'README.md').read_text())
    monkeypatch.setenv('SIMREAL_CACHE', str(tmp_path))  # the twins generated afresh, as on a reader's machine
    out = io.StringIO()
    with contextlib.redirect_stdout(out): exec(compile(code, 'README.md', 'exec'), {'__name__': '__readme__'})
    assert same_printout(out.getvalue().strip(), shown), f"README prints\n{shown}\nthe snippet now prints\n{out.getvalue()}"
