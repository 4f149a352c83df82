"""How many examples a property test draws, by hypothesis profile (registered in tests/conftest.py).

- ``default`` (CI, development): each test's own small count, so the whole suite stays fast on 2 cores;
- ``thorough`` (``pytest --hypothesis-profile=thorough``): :data:`THOROUGH` examples per test, and the property tests
  are parametrized so that each test is one public API on one array package (execution space). On a GPU machine
  ``pytest -m gpu -n 14 --hypothesis-profile=thorough tests/test_fft_accuracy.py tests/test_matmul_api.py``;
  ``MATHPY_HYPOTHESIS_EXAMPLES=N`` overrides the count (for a shorter run).
"""

import os

from hypothesis import HealthCheck, settings

__all__ = ["THOROUGH", "examples", "property_settings"]

THOROUGH = int(os.environ.get("MATHPY_HYPOTHESIS_EXAMPLES", "10000"))


def examples(default):
    """``default`` under the default profile, the active profile's count otherwise."""
    if settings.get_current_profile_name() in ("default", "ci"):
        return default
    return settings().max_examples


def property_settings(default):
    """``hypothesis.settings`` for a property test that draws ``default`` examples under the default profile."""
    return settings(max_examples=examples(default), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
