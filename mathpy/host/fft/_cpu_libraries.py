"""The CPU FFT libraries a transform can run on, in one table, and how one is chosen for each transform.

=============  =========  ==================================  ==============================================
name           package    threads                             plans
=============  =========  ==================================  ==============================================
``pocketfft``  scipy      ``nthreads`` per call               none to make (pocketfft caches twiddles itself)
``fftw``       pyFFTW     ``threads`` per plan                ``pyfftw.FFTW`` objects, FFTW_MEASURE
``mkl``        mkl_fft    MKL's own (threadpoolctl limits it)  MKL's descriptor cache
=============  =========  ==================================  ==============================================

Every library is reached through an *executor* of one :class:`~._layout.Transform` (shapes, strides, dtypes, axes):
``run(x, out, forward, norm)`` transforms NumPy array ``x`` into ``out`` (both in the Transform's layouts) and scales
by ``norm``: 0 none, 1 ``1/sqrt(N)``, 2 ``1/N`` (N the product of the logical lengths), inside the library where it
can (pocketfft) and in a parallel pass otherwise (FFTW, MKL).

:class:`Executor` chooses at a transform's first call: with one library named (``ExecutionCPU(fft_library=...)``),
that library's plan (FFTW: measured); with none named, every installed library's plan is timed on copies of the
call's arrays, in blocks of calls (the libraries whose threads spin last), and the fastest kept
(:attr:`Executor.timings` says what it measured). Every
call then runs that plan: a transform gives the same bits at every call and on every thread.

>>> [library.name for library in candidates("pocketfft", None)]
['pocketfft']
"""

import importlib
import math
import statistics
import sys
import threading
import time

import numpy as np

from ... import _threads
from ..._log import logger
from . import _fftw_c
from ._call import scale_parts

__all__ = ["LIBRARIES", "aligned_layout", "candidates", "Executor", "FFTW_PLANNING_SECONDS", "like", "scale_in_place",
           "transform_bytes"]

#: At most this many seconds of FFTW_MEASURE planning per plan (pyFFTW's ``planning_timelimit``): large 2-D plans
#: measured without a limit took 13 s on 2 cores.
FFTW_PLANNING_SECONDS = 2.0
#: Timed calls of each library when several can run a transform, the first one cold; small transforms get more calls,
#: up to MAX_TUNING_ROUNDS each or about TUNING_SECONDS in all.
TUNING_ROUNDS, MAX_TUNING_ROUNDS, TUNING_SECONDS = 6, 40, 0.05
_SIMD_ALIGNMENT = 16  # FFTW's: plans made on 16-byte aligned arrays run on any 16-byte aligned arrays
_INVERSE_NORMS = ("forward", "ortho", "backward")  # NumPy's norm names of codes 0 / 1 / 2 for an inverse transform
_FORWARD_NORMS = ("backward", "ortho", "forward")


def _address(array):
    return array.__array_interface__["data"][0]


def like(array):
    """A new array of ``array``'s shape, dtype and strides whose address has the same remainder modulo 64."""
    span = sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    raw = np.empty(span + 64, np.uint8)
    shift = (_address(array) - _address(raw)) % 64
    return np.lib.stride_tricks.as_strided(raw[shift:shift + span].view(array.dtype), array.shape, array.strides)


def _norm_factor(norm, transform, dtype):
    """1/sqrt(N) (``norm`` 1) or 1/N (2) in ``dtype`` (a double factor would cost long double its extra digits)."""
    n = dtype.type(math.prod(transform.n))
    return dtype.type(1) / (np.sqrt(n) if norm == 1 else n)


def transform_bytes(t):
    """Bytes of a Transform's input and output."""
    return math.prod(t.input_shape) * t.input_dtype.itemsize + math.prod(t.output_shape) * t.output_dtype.itemsize


def scale_in_place(out, factor, threads):
    """``out *= factor`` for a real ``factor``, part by part for a complex ``out`` (:func:`._call.scale_parts`), on up
    to ``threads`` threads (NumPy releases the GIL in its loops)."""
    rows = out.shape[0] if out.ndim else 1
    threads = _threads.threads_for_bytes(threads, out.nbytes) if out.ndim else 1
    if threads <= 1 or rows < 2:
        scale_parts(out, factor)
        return
    step = -(-rows // threads)
    _threads.run_chunks(lambda i: scale_parts(out[i * step:(i + 1) * step], factor), -(-rows // step), threads)


class _Library:
    """One row of the table: ``available()`` (imported on first use), ``supports(transform)``,
    ``executor(transform, threads, destroy_input)``."""

    name = package = module = ""
    precisions = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.longdouble))
    plans = False  # whether a plan owns arrays of the layouts (pyFFTW's: FFTW_MEASURE writes into what it plans on)
    spin_seconds = 0.0  # how long its threads keep spinning after a multi-threaded call (OpenMP's; Executor._choose)
    chunks = True  # whether it may run the chunks of a fused pass, one thread each

    def __init__(self):
        self._module = None

    def load(self):
        """The library's Python module, or None when it is not installed."""
        if self._module is None:
            module = _imported(self.module)
            self._module = False if module is None else module
            if module is not None:
                self.loaded(module)
        return self._module or None

    def loaded(self, module):
        """Called once after the module imported."""

    def available(self):
        return self.load() is not None

    def supports(self, transform):
        return transform.precision in self.precisions


class _Pocketfft(_Library):
    """SciPy's FFT through its own binding (``out=`` and the norm inside the transform): pocketfft's up to SciPy 1.17,
    ducc0's from 1.18 (pocketfft's successor, by the same author, with the same calls); SciPy's public functions and
    one copy where neither binding is found or takes these calls."""

    name, package = "pocketfft", "scipy"
    modules = ("scipy.fft._pocketfft.pypocketfft", "scipy.fft._duccfft.pyduccfft")
    module = modules[0]

    _loading = threading.Lock()

    def load(self):
        if self._module is None:
            with self._loading:  # (one thread looks; the others wait for its answer)
                if self._module is None:
                    self._module = next((module for module in map(_imported, self.modules)
                                         if module is not None and self._takes_our_calls(module)), False)
        return self._module or _PublicScipy

    @staticmethod
    def _takes_our_calls(module):
        """Whether ``module.c2c`` is the call mathpy makes: a 1/N-normalised FFT of [1, 1] into ``out`` is [1, 0]."""
        probe, out = np.ones(2, np.complex64), np.zeros(2, np.complex64)
        try:
            module.c2c(probe, (0,), True, 2, out, 1)
        except Exception:  # noqa: BLE001 - a binding that takes other arguments, or fails: not ours to call
            return False
        return bool(np.allclose(out, [1, 0]))

    @property
    def binding(self):
        """The module the transforms call (None: SciPy's public functions)."""
        module = self.load()
        return None if module is _PublicScipy else module.__name__

    def executor(self, t, threads, destroy_input=False):
        pp, axes = self.load(), t.axes
        if t.fft_type == "C2C":
            def run(x, out, forward, norm):
                pp.c2c(x, axes, forward, norm, out, threads)
        elif t.fft_type == "R2C":
            def run(x, out, forward, norm):
                pp.r2c(x, axes, True, norm, out, threads)
        else:
            last = t.output_shape[axes[-1]]

            def run(x, out, forward, norm):
                pp.c2r(x, axes, last, False, norm, out, threads)
        return run


def _imported(name):
    """Module ``name``, or None when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class _PublicScipy:
    """pypocketfft's three functions on SciPy's public ones (a result array, then one copy into ``out``)."""

    @staticmethod
    def c2c(x, axes, forward, norm, out, threads):
        import scipy.fft
        fn, names = (scipy.fft.fftn, _FORWARD_NORMS) if forward else (scipy.fft.ifftn, _INVERSE_NORMS)
        np.copyto(out, fn(x, axes=axes, norm=names[norm], workers=threads))

    @staticmethod
    def r2c(x, axes, forward, norm, out, threads):
        import scipy.fft
        np.copyto(out, scipy.fft.rfftn(x, axes=axes, norm=_FORWARD_NORMS[norm], workers=threads))

    @staticmethod
    def c2r(x, axes, last, forward, norm, out, threads):
        import scipy.fft
        s = [x.shape[a] for a in axes[:-1]] + [last]
        np.copyto(out, scipy.fft.irfftn(x, s=s, axes=axes, norm=_INVERSE_NORMS[norm], workers=threads))


class _FFTW(_Library):
    """FFTW through pyFFTW: plans made on arrays of the Transform's strides, one per direction and alignment, executed
    on the caller's arrays with ``update_arrays``."""

    name, package, module = "fftw", "pyFFTW", "pyfftw"
    plans = True
    # pyFFTW's wheels run FFTW's threads on GNU OpenMP (a libgomp of their own), which spins for milliseconds at its
    # default wait policy: imported by mathpy, it loads under a short spin count (load)
    spin_seconds = _threads.DEFAULT_OMP_SPIN_SECONDS

    def load(self):
        if self._module is not None or self.module in sys.modules:  # (its OpenMP read the environment already)
            return super().load()
        with _threads.short_omp_spin() as spin:
            module = super().load()
        if module is not None:
            type(self).spin_seconds = spin
        return module

    def executor(self, t, threads, destroy_input=False):
        return _FFTWPlans(self.load(), t, threads, destroy_input)


class _FFTWPlans:
    """The pyFFTW plans of one Transform. Each plan owns arrays of the Transform's layout (FFTW_MEASURE writes into
    the arrays it plans on, so never the caller's) and runs on the caller's through ``update_arrays``; plans are
    borrowed from a free list, so concurrent callers each run their own (pyFFTW's planner serialises planning, and
    FFTW's wisdom makes the second plan of a layout cheap)."""

    def __init__(self, pyfftw, transform, threads, destroy_input):
        self._pyfftw, self.transform, self.threads = pyfftw, transform, threads
        t = transform
        # FFTW's multi-axis C2R overwrites its input: the caller's must survive unless it is our scratch
        self._copy_input = t.fft_type == "C2R" and len(t.axes) > 1 and not destroy_input
        flags = ["FFTW_MEASURE"]
        if destroy_input:
            flags.append("FFTW_DESTROY_INPUT")
        self._flags = tuple(flags)
        self._limit = FFTW_PLANNING_SECONDS
        self._free = {}  # (aligned, forward, in place) -> [(plan, own input, own output)]
        # the layout's strides in bytes: an array that has them is passed as it is, without _restrided's work
        self._byte_strides = tuple(tuple(s * np.dtype(dtype).itemsize for s in strides) for strides, dtype in
                                   ((t.input_strides, t.input_dtype), (t.output_strides, t.output_dtype)))

    def _make(self, aligned, forward, inplace):
        t = self.transform
        x = aligned_layout(t.input_shape, t.input_strides, t.input_dtype)
        out = x.view(t.output_dtype) if inplace else aligned_layout(t.output_shape, t.output_strides, t.output_dtype)
        flags = self._flags if aligned else self._flags + ("FFTW_UNALIGNED",)
        direction = "FFTW_FORWARD" if forward and t.fft_type != "C2R" else "FFTW_BACKWARD"
        start = time.perf_counter()
        with _fftw_c.planner_lock:  # (FFTW's thread count and time limit are globals that the C API's plans set too)
            plan = self._pyfftw.FFTW(x, out, axes=t.axes, direction=direction, flags=flags, threads=self.threads,
                                     planning_timelimit=self._limit)
        logger.debug("FFTW plan %s %s threads=%d aligned=%s in %.1f ms", t, flags, self.threads, aligned,
                     (time.perf_counter() - start) * 1e3)
        return plan, x, out

    def __call__(self, x, out, forward, norm):
        t = self.transform
        forward, inplace = bool(forward) or t.fft_type == "R2C", x is out
        # pyFFTW compares strides literally, those of length-1 axes too, which NumPy sets freely: the Transform's
        in_bytes, out_bytes = self._byte_strides
        if x.strides != in_bytes:
            x = _restrided(x, t.input_strides)
        if inplace:
            out = x
        elif out.strides != out_bytes:
            out = _restrided(out, t.output_strides)
        aligned = (True, forward, inplace) in self._free or (_address(x) | _address(out)) % _SIMD_ALIGNMENT == 0
        if not (aligned and self._run((True, forward, inplace), x, out)):  # SIMD plans first
            if not self._run((False, forward, inplace), x, out):  # pyFFTW refused these arrays' alignment
                raise RuntimeError(f"pyFFTW refused the arrays of {t} (input strides {x.strides}, output strides "
                                   f"{out.strides} bytes): no transform was run")
        if norm:
            scale_in_place(out, _norm_factor(norm, self.transform, np.dtype(out.dtype.char.lower())), self.threads)

    def _run(self, key, x, out):
        """Execute a plan of ``key`` on ``x`` and ``out``; False when pyFFTW refuses their alignment."""
        free = self._free.setdefault(key, [])
        entry = free.pop() if free else self._make(*key)
        plan, own_x, own_out = entry
        try:
            if self._copy_input:
                np.copyto(own_x, x)
                x = own_x
            try:
                plan.update_arrays(x, out)
            except ValueError:
                return False
            plan.execute()
            if self.threads > 1:
                _threads.spun(_FFTW.spin_seconds)
            plan.update_arrays(own_x, own_out)  # hold no caller's array between calls
            return True
        finally:
            free.append(entry)


def _restrided(array, strides):
    """``array`` with the element ``strides`` of its layout on its length-1 axes (a view; the same array when they
    already are)."""
    size = array.itemsize
    want = tuple(s * size if n == 1 else a for n, s, a in zip(array.shape, strides, array.strides))
    return array if want == array.strides else np.lib.stride_tricks.as_strided(array, array.shape, want)


def aligned_layout(shape, strides, dtype):
    """An array of ``shape`` and element ``strides`` whose first element is 64-byte aligned."""
    dtype = np.dtype(dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    raw = np.empty(span * dtype.itemsize + 64, np.uint8)
    shift = -_address(raw) % 64
    base = raw[shift:shift + span * dtype.itemsize].view(dtype)
    return np.lib.stride_tricks.as_strided(base, shape, tuple(s * dtype.itemsize for s in strides))


class _MKL(_Library):
    """Intel MKL's DFTI through mkl_fft (``out=``); its threads are MKL's setting, limited for the call through
    threadpoolctl when ``num_threads`` is given. mkl_fft 2.3's N-D functions scale right only with
    ``norm="backward"`` (with ``"ortho"`` / ``"forward"`` they divide by the whole array's size, not the transformed
    axes'), so every call asks for that and any other norm is a parallel pass after."""

    name, package, module = "mkl", "mkl_fft", "mkl_fft"
    precisions = (np.dtype(np.float32), np.dtype(np.float64))
    spin_seconds = 0.2  # MKL's threads on Intel OpenMP, which spin for its KMP_BLOCKTIME, 200 ms by default
    chunks = False  # one MKL thread per chunk would be a process-wide setting (threadpoolctl) per chunk

    def loaded(self, module):
        _threads.forget_libraries()  # threadpoolctl must see MKL, loaded only now

    def executor(self, t, threads, destroy_input=False, limit=None):
        mkl, axes = self.load(), t.axes
        if t.fft_type == "C2C":
            def transform(x, out, forward):
                (mkl.fftn if forward else mkl.ifftn)(x, axes=axes, norm="backward", out=out)
        elif t.fft_type == "R2C":
            def transform(x, out, forward):
                mkl.rfftn(x, axes=axes, norm="backward", out=out)
        else:
            s = t.n

            def transform(x, out, forward):
                mkl.irfftn(x, s=s, axes=axes, norm="backward", out=out)
        real = np.dtype(t.output_dtype.char.lower())
        n = real.type(math.prod(t.n))

        def run(x, out, forward, norm):
            with _threads.blas_threads(limit):
                transform(x, out, forward)
            _threads.spun(_MKL.spin_seconds)  # (MKL's thread count is its own: assume it ran on several)
            inverse = t.fft_type == "C2R" or (t.fft_type == "C2C" and not forward)  # MKL divided it by N
            if inverse and norm != 2:
                scale_in_place(out, n if norm == 0 else np.sqrt(n), threads)
            elif not inverse and norm:
                scale_in_place(out, _norm_factor(norm, t, real), threads)
        return run


#: The libraries, in the order a transform tries them when none is named (pocketfft first: it needs no planning).
LIBRARIES = {library.name: library for library in (_Pocketfft(), _FFTW(), _MKL())}


def candidates(name, transform):
    """The libraries that may run ``transform`` (None: any transform): ``[LIBRARIES[name]]`` for a named one
    (pocketfft instead when it cannot take the transform; ImportError when it is not installed), else every
    installed library that can take it, pocketfft first."""
    if name is not None:
        library = LIBRARIES[name]
        if not library.available():
            installed = [n for n, lib in LIBRARIES.items() if lib.available()]
            raise ImportError(f"ExecutionCPU(fft_library={name!r}) needs {library.package}, which is not installed "
                              f"(pip install {library.package}, or mathpy[cpu] for pyFFTW); installed: {installed}")
        if transform is None or library.supports(transform):
            return [library]
        logger.debug("CPU FFT library %s cannot take %s: it runs on pocketfft", name, transform)
        return [LIBRARIES["pocketfft"]]
    return [lib for lib in LIBRARIES.values() if lib.available() and (transform is None or lib.supports(transform))]


class Executor:
    """One Transform on the libraries ``libraries`` (from :func:`candidates`) with ``threads`` threads: at the first
    call, the measured plan of the only library, or the fastest measured plan of several, timed on copies of that
    call's arrays; every call runs that plan, so that a transform gives the same bits at every call and on every
    thread. ``destroy_input``: the input is scratch that the library may overwrite. ``timings``: seconds per library
    measured when choosing; ``library``: the one running (None before the first call)."""

    def __init__(self, transform, libraries, threads, destroy_input=False, limit=None):
        # small transforms on fewer threads: waking a thread costs more than its share of the work
        threads = _threads.threads_for_bytes(threads, transform_bytes(transform))
        self.transform, self.threads, self.timings = transform, threads, {}
        self._libraries, self._destroy, self._limit = list(libraries), destroy_input, limit
        self._run, self.library = None, None
        self._choosing = threading.Lock()

    def _make(self, library):
        extra = {"limit": self._limit} if isinstance(library, _MKL) else {}
        return library.executor(self.transform, self.threads, self._destroy, **extra)

    def __call__(self, x, out, forward, norm):
        if self._run is None:
            with self._choosing:  # the other threads wait: every call runs the chosen plan
                if self._run is None:
                    self._choose(x, out, forward, norm)
        return self._run(x, out, forward, norm)

    def _choose(self, x, out, forward, norm):
        """Time every library on copies of the first call's arrays, with its norm: a library that cannot scale inside
        its transform (FFTW, MKL) pays its extra pass in the timing too.

        Each library is timed in a block of calls of its own, the libraries whose threads spin after a call
        (``spin_seconds``: OpenMP's workers, FFTW's in pyFFTW's wheels and MKL's, keep their cores busy for
        milliseconds) last, and no block starts while some library's threads may still spin
        (:func:`mathpy._threads.spun`, noted by every multi-threaded call, this transform's or another's): timed right
        after one of their calls, another library's threads share the cores with the spinning ones (on 16 cores,
        SciPy's FFT took 2.2 ms after an FFTW call against 1.3 alone), and an interleaved order would choose the
        spinning library for that."""
        measured = {lib.name: self._make(lib) for lib in self._libraries}
        library = self._libraries[0].name
        if len(measured) > 1:
            x_copy, out_copy = like(x), (None if x is out else like(out))
            spins = {lib.name: lib.spin_seconds > 0 for lib in self._libraries}
            samples = {name: [] for name in measured}
            for name in sorted(measured, key=spins.get):  # (a stable sort: the table's order otherwise)
                _threads.wait_for_spinning()
                run, times, rounds = measured[name], samples[name], TUNING_ROUNDS
                while len(times) < rounds:
                    np.copyto(x_copy, x)
                    start = time.perf_counter()
                    run(x_copy, x_copy if out_copy is None else out_copy, forward, norm)
                    times.append(time.perf_counter() - start)
                    if len(times) == 2:  # small transforms: more calls, as many as TUNING_SECONDS allow
                        share = TUNING_SECONDS / len(measured)
                        rounds = max(TUNING_ROUNDS, min(MAX_TUNING_ROUNDS, int(share / max(times[1], 1e-9))))
            self.timings = {name: statistics.median(times[1:]) for name, times in samples.items()}  # [0]: cold
            library = min(self.timings, key=self.timings.get)
            logger.debug("CPU FFT %s threads=%d: %s (measured %s)", self.transform, self.threads, library,
                         {k: f"{v * 1e3:.3f} ms" for k, v in self.timings.items()})
        self.library, self._run = library, measured[library]
