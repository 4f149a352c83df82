"""A scipy.fft backend (the uarray protocol CuPy and pyFFTW implement): run SciPy FFT calls through mathpy.

>>> import numpy as np, scipy.fft
>>> import mathpy.fft
>>> with scipy.fft.set_backend(mathpy.fft.scipy_backend):
...     y = scipy.fft.fft(np.ones(4))
>>> y
array([4.+0.j, 0.+0.j, 0.+0.j, 0.+0.j])

Functions mathpy has (fft, ifft, rfft, irfft, hfft, ihfft and their 2-D / N-D forms) run through mathpy when their
arguments have a mathpy equivalent: ``overwrite_x`` is ignored and, for a host array, ``workers`` becomes
``ExecutionCPU(num_threads=workers, fft_library="pocketfft")`` (SciPy's own library) with SciPy's rules (None:
``scipy.fft.get_workers()``, 1 unless a ``scipy.fft.set_workers`` block says otherwise; negative counts from ``os.cpu_count()``; SciPy's ValueErrors for 0
and for counts below ``-os.cpu_count()``). For anything else (dct, dst, hfftn, a ``plan`` other than None, another
keyword) ``NotImplemented`` lets SciPy try the next backend; so does a TypeError of mathpy (e.g. a dtype it does not
take) in the 1-D functions and the rfft*/irfft* ones.

As SciPy's global backend, with SciPy's own implementation behind it for the functions mathpy does not serve (SciPy's
``scipy/fft/tests`` pass so: ``tests/test_scipy_backend.py`` runs them)::

    scipy.fft.set_global_backend(mathpy.fft.scipy_backend)
    scipy.fft.register_backend("scipy")
"""

import os

from ..._execution import ExecutionCPU
from . import _functions

__all__ = ["__ua_domain__", "__ua_function__"]

__ua_domain__ = "numpy.scipy.fft"

_NAMES = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
          "rfftn", "irfftn")
_ONE_D = {"fft", "ifft", "rfft", "irfft", "hfft", "ihfft"}


def __ua_function__(method, args, kwargs):
    name = getattr(method, "__name__", None)
    if name not in _NAMES:
        return NotImplemented
    kwargs = dict(kwargs)
    if len(args) > 4:  # SciPy's positional order: (x, n|s, axis|axes, norm, overwrite_x, workers)
        extra = dict(zip(("overwrite_x", "workers", "plan"), args[4:]))
        if set(extra) & set(kwargs):
            return NotImplemented
        kwargs.update(extra)
        args = args[:4]
    if kwargs.pop("plan", None) is not None:
        return NotImplemented
    kwargs.pop("overwrite_x", None)
    workers = kwargs.pop("workers", None)
    if set(kwargs) - {"n", "axis", "s", "axes", "norm"}:
        return NotImplemented
    workers = _workers(workers)
    from ... import _operands
    if _operands.wrap_operand(args[0]).on_host:
        # SciPy's own library: the backend gives scipy.fft's numbers (whatever faster library is installed)
        kwargs["execution"] = ExecutionCPU(num_threads=workers, fft_library="pocketfft")
    if name.endswith("n"):  # SciPy's s without axes means the last len(s) axes, without NumPy 2's deprecation
        positional = dict(zip(("s", "axes", "norm"), args[1:]))
        if set(positional) & set(kwargs):
            return NotImplemented
        kwargs.update(positional)
        args = args[:1]
        s = kwargs.get("s")
        if s is not None and kwargs.get("axes") is None:
            kwargs["axes"] = tuple(range(-(1 if isinstance(s, int) else len(s)), 0))
    try:
        return getattr(_functions, name)(*args, **kwargs)
    except TypeError:
        if name in _ONE_D or name.startswith(("rfft", "irfft")):
            return NotImplemented  # e.g. a dtype mathpy does not take; SciPy may
        raise


def _workers(workers):
    """SciPy's count of ``workers``: None is the ``set_workers`` default, a negative count is counted back from
    ``os.cpu_count()`` (-1: all), 0 and counts below ``-os.cpu_count()`` are SciPy's ValueErrors."""
    if workers is None:
        import scipy.fft
        return scipy.fft.get_workers()
    cpus = os.cpu_count() or 1
    if workers == 0:
        raise ValueError("workers must not be zero")
    if workers < -cpus:
        raise ValueError(f"workers value out of range; got {workers}, must not be less than {-cpus}")
    return workers + 1 + cpus if workers < 0 else workers
