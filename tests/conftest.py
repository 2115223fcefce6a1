"""Shared pytest configuration.

Hypothesis profiles (used by tests/test_properties.py):

- `default`: few examples, no deadline, derandomized (the same examples on every run, so CI is deterministic),
  no example database (nothing is written to the repository).
- `long`: 600 random examples per property, for hunting bugs by hand:
  `SIMREAL_HYPOTHESIS=long nice pytest tests/test_properties.py`.

The profile is chosen with the environment variable SIMREAL_HYPOTHESIS (default: `default`).

The `load_benchmark` fixture loads a script of benchmarks/ as a module, for the tests of its functions."""
import importlib.util, os
from pathlib import Path
import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is only needed by the property tests, which skip themselves without it
    settings = None

if settings is not None:
    _quiet = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    settings.register_profile('default', max_examples=40, deadline=None, derandomize=True, database=None,
                              suppress_health_check=_quiet, print_blob=True)
    settings.register_profile('long', max_examples=600, deadline=None, derandomize=False, database=None,
                              suppress_health_check=_quiet, print_blob=True)
    settings.load_profile(os.environ.get('SIMREAL_HYPOTHESIS', 'default'))


@pytest.fixture
def load_benchmark():
    "A loader: `load_benchmark('ablate_ada')` is benchmarks/ablate_ada.py as a module."
    def load(name:str):
        path = Path(__file__).resolve().parents[1] / 'benchmarks' / f'{name}.py'
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        return mod
    return load
