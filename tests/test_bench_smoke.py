"benchmarks/: every script declares --smoke (the runner, benchmarks/smoke.py, runs them all with it in CI), read from the source, none run."
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / 'benchmarks'


def test_every_benchmark_declares_smoke(load_benchmark):
    runner = load_benchmark('smoke')
    names = [p.name for p in runner.scripts()]
    assert names == sorted(p.name for p in BENCH.glob('*.py') if p.name != 'smoke.py') and len(names) >= 22
    missing = [p.name for p in runner.scripts() if not runner.declares_smoke(p)]
    assert not missing, f"benchmarks without a --smoke option: {missing}"


def test_declares_smoke_reads_add_argument_calls(tmp_path, load_benchmark):
    declares = load_benchmark('smoke').declares_smoke
    (tmp_path / 'yes.py').write_text("import argparse\nap = argparse.ArgumentParser()\nap.add_argument('--smoke', action='store_true')\n")
    (tmp_path / 'no.py').write_text("import argparse\nap = argparse.ArgumentParser()\nap.add_argument('--steps')\n# '--smoke' in a comment\nHELP = '--smoke'\n")
    assert declares(tmp_path / 'yes.py') and not declares(tmp_path / 'no.py')
