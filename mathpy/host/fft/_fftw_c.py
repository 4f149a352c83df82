"""FFTW's C API, from the copy of FFTW that pyFFTW loaded, for the CPU engine's fused ``"parallel"`` strategy
(:mod:`._cpu`): numba loops call ``fftw_execute_dft`` (and its real siblings) on each thread's block of transforms,
between the prolog and the epilog, without the GIL and without FFTW's own OpenMP threads.

pyFFTW reaches FFTW through Cython and gives Python no plan pointer, so the plans here are made through ctypes on
the same shared libraries (found in the process's memory map after pyFFTW is imported: its wheel's renamed copies,
or the system's): one planner, one set of wisdom. Plans are single-threaded (``plan_with_nthreads(1)``, from the
threads library pyFFTW loads beside each precision) and made under FFTW's planner lock
(``make_planner_thread_safe``) and :data:`planner_lock`. The thread count and time limit are the planner's globals,
which pyFFTW sets outside its own lock: mathpy's pyFFTW plans are made under :data:`planner_lock` too, so that neither
takes the other's settings; a user's pyFFTW planning in another thread at that moment still could.

Dense blocks only: a block is ``rows`` transforms in C order, one after the other (``plan_many`` with no embedding),
which is what the strategy's per-thread buffers hold.

>>> import numpy as np
>>> api = library(np.float64)
>>> api is None or callable(api.execute["C2C"])
True
"""

import ctypes
import re
import sys
import threading

import numpy as np

from ..._log import logger

__all__ = ["library", "planner_lock", "FFTW_MEASURE", "FFTW_DESTROY_INPUT"]

FFTW_MEASURE, FFTW_DESTROY_INPUT = 0, 1
_PREFIXES = {np.dtype(np.float32): "fftwf", np.dtype(np.float64): "fftw"}  # long double: numba has no such arrays
_lock = planner_lock = threading.Lock()  # (exported: mathpy's pyFFTW planning takes it too)
_found = {}  # precision -> _Library, or None when FFTW's C API cannot be reached


def _loaded_paths(prefix):
    """The shared libraries of FFTW's ``prefix`` ("fftw", "fftwf") in this process: (the transforms' library, its
    threads library), or None. Read from /proc/self/maps (Linux): pyFFTW's wheels load renamed copies
    (``libfftw3f-<hash>.so.3``), which no name search would find."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return None
    stem = {"fftw": "libfftw3", "fftwf": "libfftw3f"}[prefix]
    paths = set(re.findall(r"(/\S*/" + stem + r"(?:_omp|_threads)?(?:-[0-9a-f]+)?\.so[.0-9]*)\s*$", maps, re.M))
    main = [p for p in paths if not re.search(r"_(omp|threads)", p.rsplit("/", 1)[1])]
    threads = [p for p in paths if p not in main]
    return (main[0], threads[0]) if len(main) == 1 and len(threads) == 1 else None


class _Library:
    """The C functions of one precision: ``execute[kind]`` (a ctypes function numba can call: plan, in, out as
    addresses) and :meth:`plan`."""

    def __init__(self, prefix, main, threads):
        self._main, self._threads = ctypes.CDLL(main), ctypes.CDLL(threads)
        address, size, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        self._plans = {}
        for kind, name in (("C2C", "plan_many_dft"), ("R2C", "plan_many_dft_r2c"), ("C2R", "plan_many_dft_c2r")):
            fn = getattr(self._main, f"{prefix}_{name}")
            sign = [i] if kind == "C2C" else []  # only the complex transform takes a direction
            fn.argtypes = [i, ctypes.POINTER(i), i, address, address, i, i, address, address, i, i, *sign,
                           ctypes.c_uint]
            fn.restype = address
            self._plans[kind] = fn
        # size_t arguments, not c_void_p: numba passes array addresses (``a.ctypes.data``) as integers
        signature = ctypes.CFUNCTYPE(None, size, size, size)
        self.execute = {kind: signature(ctypes.cast(getattr(self._main, f"{prefix}_execute_{name}"), address).value)
                        for kind, name in (("C2C", "dft"), ("R2C", "dft_r2c"), ("C2R", "dft_c2r"))}
        self._destroy = getattr(self._main, f"{prefix}_destroy_plan")
        self._destroy.argtypes = [address]
        self._with_threads = getattr(self._threads, f"{prefix}_plan_with_nthreads")
        self._with_threads.argtypes = [i]
        self._time_limit = getattr(self._main, f"{prefix}_set_timelimit")
        self._time_limit.argtypes = [ctypes.c_double]
        safe = getattr(self._threads, f"{prefix}_make_planner_thread_safe", None)  # FFTW 3.3.5 on
        if safe is None:
            raise OSError(f"{threads} has no {prefix}_make_planner_thread_safe (FFTW older than 3.3.5)")
        safe()

    def plan(self, kind, n, rows, source, destination, forward, flags, seconds):
        """A single-threaded plan of ``rows`` dense transforms of logical lengths ``n`` from array ``source`` into
        ``destination`` (planning may write both), or None when FFTW cannot make one with these ``flags``."""
        lengths = (ctypes.c_int * len(n))(*n)
        half = int(np.prod(n[:-1])) * (n[-1] // 2 + 1)
        full = int(np.prod(n))
        distances = {"C2C": (full, full), "R2C": (full, half), "C2R": (half, full)}[kind]
        sign = [-1 if forward else 1] if kind == "C2C" else []
        with _lock:  # (the two settings are the planner's globals)
            self._with_threads(1)
            self._time_limit(seconds)
            plan = self._plans[kind](len(n), lengths, rows, source.ctypes.data, None, 1, distances[0],
                                     destination.ctypes.data, None, 1, distances[1], *sign, flags)
        return plan or None

    def destroy(self, plan):
        # (no lock of ours: FFTW's thread-safe planner locks itself, and this runs from a finalizer, maybe while this
        # thread holds ours)
        self._destroy(plan)


def library(precision):
    """FFTW's C API of ``precision`` (float32 or float64) as pyFFTW loaded it, or None (pyFFTW is not installed, the
    precision has no numba arrays, or its libraries cannot be told apart)."""
    precision = np.dtype(precision)
    if precision not in _found:
        with _lock:
            if precision not in _found:
                _found[precision] = _load(precision)
    return _found[precision]


def _load(precision):
    prefix = _PREFIXES.get(precision)
    if prefix is None or not sys.platform.startswith("linux"):
        return None
    try:
        import pyfftw  # noqa: F401 - loads FFTW's libraries into the process
    except ImportError:
        return None
    paths = _loaded_paths(prefix)
    if paths is None:
        logger.debug("FFTW's C API (%s): its libraries were not found among the loaded ones", prefix)
        return None
    try:
        return _Library(prefix, *paths)
    except (OSError, AttributeError) as e:
        logger.debug("FFTW's C API (%s) from %s: %s", prefix, paths, e)
        return None
