"""A pytest plugin (``-p _scipy_global_backend``) that makes mathpy SciPy's global FFT backend, SciPy's own
implementation registered behind it, for a run of SciPy's own ``scipy/fft/tests`` (tests/test_scipy_backend.py).

It counts the calls mathpy served and those it left to SciPy (by function name) and writes them as JSON to the file
named by ``MATHPY_SCIPY_BACKEND_LOG`` at the end of the run, so that the test can see that mathpy did the work.
"""

import collections
import json
import os

import scipy.fft

import mathpy.fft

_served, _declined = collections.Counter(), collections.Counter()


class _CountingBackend:
    """mathpy's backend, counting what it serves."""

    __ua_domain__ = mathpy.fft.scipy_backend.__ua_domain__

    @staticmethod
    def __ua_function__(method, args, kwargs):
        result = mathpy.fft.scipy_backend.__ua_function__(method, args, kwargs)
        name = getattr(method, "__name__", str(method))
        (_declined if result is NotImplemented else _served)[name] += 1
        return result


def pytest_configure(config):
    scipy.fft.set_global_backend(_CountingBackend)
    scipy.fft.register_backend("scipy")


def pytest_unconfigure(config):
    path = os.environ.get("MATHPY_SCIPY_BACKEND_LOG")
    if path and os.getpid() == _PID:  # not from a forked worker of SciPy's multiprocessing tests
        with open(path, "w") as f:
            json.dump({"served": _served, "declined": _declined}, f)


_PID = os.getpid()
