"""Run every script of benchmarks/ at its smoke size (`--smoke`), one process each; exit nonzero if any fails or lacks it.

    python benchmarks/smoke.py [--jobs 2] [--only bench_speed,bench_twins] [--timeout 300]

Each script runs as `python SCRIPT --smoke` in a fresh process with one torch thread (OMP_NUM_THREADS=1), matplotlib's
Agg backend and one temporary folder, removed afterwards, as both its TMPDIR and its SIMREAL_CACHE (the scripts of one
run share the twins they generate; nothing is written to the user's cache or to reports/). One line per script,
`smoke NAME: ok in X s`, or `smoke NAME: FAILED (...) after X s` and the end of its stderr; then a summary with the
machine load before and after. A script whose source declares no `--smoke` option fails without being run, so that a
new benchmark cannot be added without one."""
import argparse, ast, os, shutil, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent

def scripts() -> list:
    "Every script of benchmarks/ but this runner, by name."
    return sorted(p for p in HERE.glob('*.py') if p.name != Path(__file__).name)

def declares_smoke(path:Path) -> bool:
    "Whether the script at `path` declares a `--smoke` option (an `add_argument('--smoke', ...)` call in its source)."
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == 'add_argument'
               and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == '--smoke' for n in ast.walk(tree))

def tail(text:str, lines:int=20) -> str:
    "The last `lines` lines of `text`, indented."
    return '\n'.join('    ' + l for l in text.rstrip().splitlines()[-lines:])

def smoke(path:Path, env:dict, timeout:float) -> tuple:
    "Run one script with --smoke: (ok, its log line and, on failure, the end of its stderr)."
    name = path.stem
    if not declares_smoke(path):
        return False, f"smoke {name}: FAILED (declares no --smoke option: every benchmark needs one) after 0.0 s"
    t = time.perf_counter()
    try: r = subprocess.run([sys.executable, str(path), '--smoke'], env=env, cwd=HERE.parent, capture_output=True,
                            text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors='replace') if isinstance(e.stderr, bytes) else (e.stderr or '')
        return False, f"smoke {name}: FAILED (over the {timeout:g} s timeout) after {time.perf_counter() - t:.1f} s\n{tail(err)}"
    s = time.perf_counter() - t
    if r.returncode == 0: return True, f"smoke {name}: ok in {s:.1f} s"
    return False, f"smoke {name}: FAILED (exit {r.returncode}) after {s:.1f} s\n{tail(r.stderr or r.stdout)}"

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--jobs', type=int, default=len(os.sched_getaffinity(0)), help='scripts run at once (default: one per core)')
    ap.add_argument('--only', default=None, help='comma-separated script names (default: all)')
    ap.add_argument('--timeout', type=float, default=300, help='seconds one script may take')
    a = ap.parse_args(argv)
    if a.jobs < 1: ap.error(f'--jobs {a.jobs}: expected an integer >= 1')
    todo = scripts()
    if a.only:
        names = a.only.split(',')
        if unknown := sorted(set(names) - {p.stem for p in todo}):
            ap.error(f"--only: no script {', '.join(unknown)} in benchmarks/; expected some of {', '.join(p.stem for p in todo)}")
        todo = [p for p in todo if p.stem in names]
    tmp = tempfile.mkdtemp(prefix='bench_smoke_')
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MPLBACKEND': 'Agg', 'TMPDIR': tmp, 'SIMREAL_CACHE': str(Path(tmp) / 'cache')}
    load, t = os.getloadavg(), time.perf_counter()
    failed = []
    try:
        with ThreadPoolExecutor(a.jobs) as pool:
            for path, (ok, line) in zip(todo, pool.map(lambda p: smoke(p, env, a.timeout), todo)):
                print(line, flush=True)
                if not ok: failed.append(path.stem)
    finally: shutil.rmtree(tmp, ignore_errors=True)
    took = f"in {time.perf_counter() - t:.1f} s ({a.jobs} at once; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after)"
    if failed: print(f"smoke: {len(failed)} of {len(todo)} scripts FAILED ({', '.join(failed)}) {took}")
    else: print(f"smoke: all {len(todo)} scripts ok {took}")
    return 1 if failed else 0

if __name__ == '__main__': sys.exit(main())
