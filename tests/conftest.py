"""Shared pytest configuration.

Hypothesis profiles (used by tests/test_properties.py):

- `default`: few examples, no deadline, derandomized (the same examples on every run, so CI is deterministic),
  no example database (nothing is written to the repository).
- `long`: 600 random examples per property, for hunting bugs by hand:
  `SIMREAL_HYPOTHESIS=long nice pytest tests/test_properties.py`.

The profile is chosen with the environment variable SIMREAL_HYPOTHESIS (default: `default`)."""
import os

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
