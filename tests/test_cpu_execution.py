"""The CPU execution space (issue 26): every CPU FFT library gives NumPy's results, the library choice and its
fallbacks, ``ExecutionCPU(num_threads=...)`` reaching the FFT, the fused passes and the BLAS, fused callbacks and
epilogs equal to their unfused references, and the stateless matmul's remembered CPU call.

Tolerances come from tests/_tolerance.py (FFT: normwise, u log2(n); matmul: elementwise gamma_k |A||B| bounds)."""

import importlib
import json
import os
import subprocess
import sys
import threading
import time
import types
import warnings

import numba
import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import _engines, _threads
from mathpy.host.fft import _cpu_libraries as libraries
from mathpy.host.fft import _fftw_c
from mathpy.host.fft._cpu import PARALLEL_MIN_THREADS as CPU_PARALLEL_MIN_THREADS, CPUEngine
from mathpy.host.fft._layout import Transform
from mathpy.host.matmul import _cpu as matmul_cpu
from mathpy.host.matmul import _cpu_epilog as matmul_cpu_epilog
from mathpy.host.matmul import _stateless as matmul_stateless
from mathpy.host.matmul._epilog import gelu
from mathpy.jit import _cpu_passes as passes

from _tolerance import assert_fft_close, assert_within, epilog_bounds, matmul_bound

POCKETFFT = libraries.LIBRARIES["pocketfft"]
INSTALLED = [name for name, library in libraries.LIBRARIES.items() if library.available()]


def operand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def reference(name, x, **kwargs):
    """NumPy's transform computed in double (long double kept), the reference of every library."""
    wide = x.astype(np.clongdouble if x.dtype in (np.longdouble, np.clongdouble) else
                    (np.complex128 if x.dtype.kind == "c" else np.float64))
    return getattr(np.fft, name)(wide, **kwargs)


def check(got, expected, dtype, n, what):
    real = np.dtype(dtype).char.lower() if np.dtype(dtype).kind == "c" else np.dtype(dtype)
    assert_fft_close(got, expected, np.dtype(real), n, what)


# --- every library gives NumPy's results ----------------------------------------------------------------------------

CASES = [  # (function, shape, dtype, keyword arguments, logical length n)
    ("fft", (6, 97), np.complex64, {}, 97),  # prime
    ("ifft", (5, 15), np.complex128, {"norm": "ortho"}, 15),  # odd
    ("fft", (64, 3), np.complex64, {"axis": 0, "norm": "forward"}, 64),
    ("fftn", (4, 9, 10), np.complex128, {"axes": (0, 1, 2)}, 360),
    ("ifft2", (3, 8, 12), np.complex64, {}, 96),
    ("rfft", (7, 33), np.float32, {}, 33),
    ("irfft", (7, 17), np.complex64, {"n": 33}, 33),  # odd real length
    ("rfftn", (6, 10, 14), np.float64, {"axes": (1, 2), "norm": "ortho"}, 140),
    ("irfftn", (5, 6, 8), np.complex128, {"axes": (0, 2), "s": (5, 14)}, 70),
    ("fft", (3, 40), np.clongdouble, {}, 40),
    # length-1 axes padded by s= (found by hypothesis: pyFFTW compared the strides NumPy gives length-1 axes, refused
    # both plans, and the result was left unwritten)
    ("rfftn", (1, 6, 5, 1, 1), np.float32, {"axes": (4, 3, 0), "s": (2, 7, 1)}, 14),
    ("fftn", (1, 2, 1, 1), np.complex64, {"axes": (3, 2, 0), "s": (1, 2, 1)}, 2),
]


@pytest.mark.parametrize("library", INSTALLED)
@pytest.mark.parametrize("name, shape, dtype, kwargs, n", CASES, ids=[f"{c[0]}-{c[1]}-{np.dtype(c[2]).name}"
                                                                      for c in CASES])
def test_every_library_gives_numpys_results(library, name, shape, dtype, kwargs, n):
    x = operand(shape, dtype)
    expected = reference(name, x, **kwargs)
    execution = mathpy.ExecutionCPU(fft_library=library)
    for call in ("first (quick plan)", "second (measured plan)", "third"):
        got = getattr(mfft, name)(x, execution=execution, **kwargs)
        assert got.dtype == getattr(np.fft, name)(x, **kwargs).dtype and got.shape == expected.shape
        check(got, expected, dtype, n, f"{library} {name} {shape} {kwargs}, {call} call")


@pytest.mark.skipif("fftw" not in INSTALLED, reason="pyFFTW is not installed (mathpy[cpu])")
def test_arrays_pyfftw_refuses_raise_instead_of_leaving_the_result_unwritten(monkeypatch):
    x = operand((4, 32), np.complex64)
    execution = mathpy.ExecutionCPU(fft_library="fftw")
    mfft.fft(x, execution=execution)
    monkeypatch.setattr(libraries._FFTWPlans, "_run", lambda self, key, x, out: False)
    with pytest.raises(RuntimeError, match="pyFFTW refused the arrays of"):
        mfft.fft(x, execution=execution)


@pytest.mark.parametrize("library", INSTALLED)
def test_strided_and_in_place_operands(library):
    execution = mathpy.ExecutionCPU(fft_library=library)
    base = operand((12, 40), np.complex64)
    x = base[::2, 1:33]  # strides that are not the dense ones
    for _ in range(2):
        check(mfft.fft(x, execution=execution), reference("fft", x), np.complex64, 32, f"{library} strided view")
    raw = np.zeros(12 * 32 * 8 + 8, np.uint8)
    shift = 8 + (-raw.__array_interface__["data"][0]) % 16  # 8 bytes past a 16-byte boundary: no SIMD alignment
    odd = raw[shift:shift + 12 * 32 * 8].view(np.complex64).reshape(12, 32)
    odd[...] = operand((12, 32), np.complex64, seed=4)
    for _ in range(3):
        check(mfft.fft(odd, execution=execution), reference("fft", odd), np.complex64, 32, f"{library} misaligned")
    y = operand((8, 16), np.complex128)
    plan = mfft.FFT(y, axes=(1,), options={"inplace": True}, execution=execution)
    plan.plan()
    for _ in range(3):  # each execution transforms the last one's result again: compare step by step
        before = y.copy()
        assert plan.execute() is y
        check(y, reference("fft", before), np.complex128, 16, f"{library} in place")
    plan.free()


def test_long_double_keeps_its_digits_on_every_library():
    x = operand((3, 24), np.clongdouble)
    expected = np.fft.ifft(x)
    for library in INSTALLED:
        if not libraries.LIBRARIES[library].supports(Transform("C2C", np.longdouble, (3, 24), (24, 1), (3, 24),
                                                               (24, 1), (1,))):
            continue
        for _ in range(2):
            got = mfft.ifft(x, execution=mathpy.ExecutionCPU(fft_library=library))
            assert got.dtype == np.clongdouble
            assert_fft_close(got, expected, np.dtype(np.longdouble), 24, f"{library} long double", sources=2)


# --- the choice of library --------------------------------------------------------------------------------------------

class _Stub(libraries._Library):
    """A library for the tests: pocketfft's transform, plus a delay, recording the threads it is given."""

    module = "numpy"

    def __init__(self, name, delay=0.0):
        super().__init__()
        self.name, self.package, self.delay, self.threads = name, name, delay, []

    def executor(self, t, threads, measure=False, destroy_input=False, limit=None):
        self.threads.append(threads)
        run = POCKETFFT.executor(t, threads)

        def slow(x, out, forward, norm):
            run(x, out, forward, norm)
            time.sleep(self.delay)
        return slow


class _Missing(libraries._Library):
    name, package, module = "fftw", "pyFFTW", "mathpy_no_such_module"


def test_without_pyfftw_the_default_runs_on_pocketfft_and_naming_fftw_says_what_to_install(monkeypatch):
    monkeypatch.setitem(libraries.LIBRARIES, "fftw", _Missing())
    mfft.plan_cache_clear()
    x = operand((4, 64), np.complex64)
    for _ in range(3):
        check(mfft.fft(x, execution=mathpy.ExecutionCPU(num_threads=1)), reference("fft", x), np.complex64, 64,
              "default without pyFFTW")
    assert [lib.name for lib in libraries.candidates(None, None)] == \
        [name for name in INSTALLED if name != "fftw"]
    with pytest.raises(ImportError, match=r"fft_library='fftw'.* needs pyFFTW, which is not installed.*pip install "
                                          r"pyFFTW"):
        mfft.fft(x, execution=mathpy.ExecutionCPU(fft_library="fftw"))


def _binding_calls(monkeypatch, modules):
    """A fresh pocketfft library that looks for its binding among ``modules`` (name -> module or None for missing),
    run on C2C, R2C and C2R transforms against NumPy; returns the binding it found."""
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)  # (None: the import fails)
    library = libraries._Pocketfft()
    monkeypatch.setattr(library, "modules", tuple(modules))
    x = operand((3, 16), np.complex64)
    cases = [(Transform("C2C", np.float32, (3, 16), (16, 1), (3, 16), (16, 1), (1,)), x, np.fft.fft(x)),
             (Transform("R2C", np.float32, (3, 16), (16, 1), (3, 9), (9, 1), (1,)), x.real.copy(),
              np.fft.rfft(x.real)),
             (Transform("C2R", np.float32, (3, 9), (9, 1), (3, 16), (16, 1), (1,)), x[:, :9].copy(),
              np.fft.irfft(x[:, :9], 16, norm="forward"))]  # (unnormalised: norm code 0)
    for t, data, want in cases:
        out = np.empty(t.output_shape, t.output_dtype)
        library.executor(t, 1)(data, out, True, 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    return library.binding


def test_scipy_118s_ducc_binding_is_found_where_pocketffts_is_gone(monkeypatch):
    """SciPy 1.18 replaced pypocketfft with ducc0's binding (the same calls): it is called directly, not through
    SciPy's public functions and a copy; a binding that takes other calls is passed over."""
    real = importlib.import_module(libraries._Pocketfft.modules[0])
    calls = []

    def counted(name):
        def call(*args):
            calls.append(name)
            return getattr(real, name)(*args)
        return call

    ducc = types.SimpleNamespace(__name__="fake_scipy_fft_duccfft", **{f: counted(f) for f in ("c2c", "r2c", "c2r")})
    found = _binding_calls(monkeypatch, {"fake_gone_pypocketfft": None, "fake_scipy_fft_duccfft": ducc})
    assert found == "fake_scipy_fft_duccfft" and calls == ["c2c", "c2c", "r2c", "c2r"]  # (the first: the probe)
    other = types.SimpleNamespace(__name__="fake_other", c2c=lambda a, axes: None)  # another signature
    assert _binding_calls(monkeypatch, {"fake_gone_pypocketfft": None, "fake_other": other}) is None

    def fails(*args):
        raise RuntimeError("not this way")
    wrong = types.SimpleNamespace(__name__="fake_wrong", c2c=lambda *args: None)  # the same call, another meaning
    assert _binding_calls(monkeypatch, {"fake_failing": types.SimpleNamespace(__name__="fake_failing", c2c=fails),
                                        "fake_wrong": wrong}) is None


def test_a_library_that_cannot_take_the_transform_leaves_it_to_pocketfft():
    t = Transform("C2C", np.longdouble, (2, 8), (8, 1), (2, 8), (8, 1), (1,))
    assert [lib.name for lib in libraries.candidates("pocketfft", t)] == ["pocketfft"]
    mkl = libraries.LIBRARIES["mkl"]
    if mkl.available():
        assert [lib.name for lib in libraries.candidates("mkl", t)] == ["pocketfft"]


def test_the_fastest_library_is_chosen_at_the_first_call_and_kept():
    slow, fast = _Stub("slow", delay=0.004), _Stub("fast")
    t = Transform("C2C", np.float64, (4, 32), (32, 1), (4, 32), (32, 1), (1,))
    executor = libraries.Executor(t, [slow, fast], threads=1)
    assert executor.library is None
    x, out = operand((4, 32), np.complex128), np.empty((4, 32), np.complex128)
    executor(x, out, True, 0)
    assert set(executor.timings) == {"slow", "fast"} and executor.library == "fast"
    assert executor.timings["slow"] > executor.timings["fast"]
    check(out, reference("fft", x), np.complex128, 32, "the chosen library's result")
    timings = dict(executor.timings)
    executor(x, out, True, 0)
    assert executor.timings == timings and len(slow.threads) == len(fast.threads) == 1  # planned once


class _Clock:
    """A stand-in for the time module: calls advance it by what they "take"; a spinning library's call leaves the
    cores busy for 50 ms, in which another library's calls take 4 times as long."""

    def __init__(self):
        self.now, self.busy_until, self.busy_by = 0.0, -1.0, None

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class _Timed(libraries._Library):
    def __init__(self, name, clock, seconds, spins):
        super().__init__()
        self.name = self.package = name
        self.clock, self.seconds, self.spin_seconds = clock, seconds, 0.05 if spins else 0.0

    def available(self):
        return True

    def executor(self, t, threads, destroy_input=False, limit=None):
        run = POCKETFFT.executor(t, threads)

        def timed(x, out, forward, norm):
            run(x, out, forward, norm)
            clock = self.clock  # (its own spinning workers are the ones it wakes: they slow only the others)
            slowed = clock.now < clock.busy_until and clock.busy_by is not self
            clock.now += 4 * self.seconds if slowed else self.seconds
            if self.spin_seconds:
                _spin(clock, self)
        return timed


def _spin(clock, by):
    """A multi-threaded call of a spinning library: its threads keep the cores busy for 50 ms, and it says so."""
    clock.busy_until, clock.busy_by = clock.now + 0.05, by
    _threads.spun(0.05)


@pytest.mark.parametrize("spinner_first, spun_before", [(False, False), (True, False), (False, True)])
def test_the_choice_times_spinning_libraries_apart(monkeypatch, spinner_first, spun_before):
    """A library whose threads spin after its calls (OpenMP's) would make the library timed after it look slow: the
    choice times each library in a block of its own, the spinning ones last, never while some library's threads may
    still spin (another transform's call just before, ``spun_before``), and finds the truly faster one. (In rounds,
    the quiet library's calls after the first all follow a spinning call: 4 ms against the spinner's 2.)"""
    clock = _Clock()
    monkeypatch.setattr(libraries, "time", clock)
    monkeypatch.setattr(_threads, "time", clock)  # (its note of spinning threads, and the wait for them)
    monkeypatch.setitem(_threads._spinning, "until", 0.0)
    if spun_before:
        _spin(clock, None)
    quiet, spinner = _Timed("quiet", clock, 0.001, False), _Timed("spinner", clock, 0.002, True)
    t = Transform("C2C", np.float64, (64, 512), (512, 1), (64, 512), (512, 1), (1,))
    executor = libraries.Executor(t, [spinner, quiet] if spinner_first else [quiet, spinner], threads=2)
    assert executor.threads == 2  # (spinning counts only for a multi-threaded call)
    x, out = operand((64, 512), np.complex128), np.empty((64, 512), np.complex128)
    executor(x, out, True, 0)
    assert executor.library == "quiet" and executor.timings == pytest.approx({"quiet": 0.001, "spinner": 0.002})
    check(out, reference("fft", x), np.complex128, 512, "the chosen library's result")


class _SlowToScale(_Stub):
    """A library whose scaling is an extra pass that costs ``delay`` (as FFTW's and MKL's do); unscaled, it is free."""

    def executor(self, t, threads, destroy_input=False, limit=None):
        run = POCKETFFT.executor(t, threads)

        def scaled_apart(x, out, forward, norm):
            run(x, out, forward, norm)
            if norm:
                time.sleep(self.delay)
        return scaled_apart


@pytest.mark.parametrize("norm", [0, 2])
def test_the_choice_times_the_first_calls_norm(norm):
    """A library that scales in a pass of its own pays it in the timing when the call asks for a norm."""
    scales_apart, steady = _SlowToScale("scales apart", delay=0.004), _Stub("steady", delay=0.001)
    t = Transform("C2C", np.float64, (4, 32), (32, 1), (4, 32), (32, 1), (1,))
    executor = libraries.Executor(t, [scales_apart, steady], threads=1)
    x, out = operand((4, 32), np.complex128), np.empty((4, 32), np.complex128)
    executor(x, out, True, norm)
    assert executor.library == ("steady" if norm else "scales apart")
    check(out, reference("fft", x, norm="forward" if norm else "backward"), np.complex128, 32, "the chosen result")


class _Nudged(_Stub):
    """pocketfft's result times (1 + 2^-20): right to the tolerance, other bits than pocketfft's."""

    def executor(self, t, threads, destroy_input=False, limit=None):
        run = super().executor(t, threads)

        def nudged(x, out, forward, norm):
            run(x, out, forward, norm)
            out *= 1 + 2.0 ** -20
        return nudged


def test_every_call_and_thread_gets_the_same_bits(monkeypatch):
    """The library is chosen before any result is returned: repeated and concurrent calls agree bit for bit, even when
    the libraries' results differ in their last bits."""
    monkeypatch.setattr(libraries, "LIBRARIES", {"pocketfft": _Stub("pocketfft", delay=0.003), "fftw": _Nudged("fftw")})
    mfft.plan_cache_clear()
    x = operand((16, 336), np.complex128)
    results = []

    def call():
        results.append(mfft.fft(x, execution=mathpy.ExecutionCPU(num_threads=2)))
    workers = [threading.Thread(target=call) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    call()
    assert len(results) == 5 and all(np.array_equal(r, results[-1]) for r in results)
    plain = mfft.fft(x, execution=mathpy.ExecutionCPU(num_threads=2, fft_library="pocketfft"))
    assert not np.array_equal(results[-1], plain)  # the nudged library ran: the test can tell the two apart
    mfft.plan_cache_clear()


def test_execution_cpu_checks_its_fields():
    with pytest.raises(ValueError, match=r"fft_library must be None or one of \['pocketfft', 'fftw', 'mkl'\], not "
                                         r"'fftw3'"):
        mathpy.ExecutionCPU(fft_library="fftw3")
    with pytest.raises(ValueError, match="num_threads must be None or a positive int, not True"):
        mathpy.ExecutionCPU(num_threads=True)
    with pytest.raises(ValueError, match="fp_reports must be True or False, not 'yes'"):
        mathpy.ExecutionCPU(fp_reports="yes")
    assert mathpy.ExecutionCPU(fft_library="fftw") != mathpy.ExecutionCPU()  # plans differ by library
    assert mathpy.ExecutionCPU(fp_reports=True) != mathpy.ExecutionCPU()  # (and calls by their reports)
    with mathpy.execution_space({"name": "cpu", "fp_reports": True}):
        assert mathpy.get_execution_space().fp_reports is True


# --- threads ----------------------------------------------------------------------------------------------------------

def test_num_threads_reaches_the_fft_library(monkeypatch):
    stub = _Stub("pocketfft")
    monkeypatch.setitem(libraries.LIBRARIES, "pocketfft", stub)
    mfft.plan_cache_clear()
    x = operand((64, 4096), np.complex64)  # 4 MB: large enough for every thread
    mfft.fft(x, execution=mathpy.ExecutionCPU(num_threads=3, fft_library="pocketfft"))
    mfft.fft(operand((2, 8), np.complex64), execution=mathpy.ExecutionCPU(num_threads=3, fft_library="pocketfft"))
    assert stub.threads == [3, 1]  # a small transform runs on fewer threads


def test_num_threads_bounds_the_fused_passes(monkeypatch):
    seen = []
    original = _threads.run_chunks

    def recording(work, count, threads):
        seen.append(threads)
        original(work, count, threads)
    monkeypatch.setattr(_threads, "run_chunks", recording)
    x = operand((64, 4096), np.complex64)  # 2 MB: enough work for every thread
    window = operand((4096,), np.float32, seed=1)
    for threads in (1, 3):
        got = mfft.fft(x, prolog=mfft.Callback(window_prolog, window),
                       execution=mathpy.ExecutionCPU(num_threads=threads, fft_library="pocketfft"))
        check(got, reference("fft", x * window), np.complex64, 4096, f"prolog on {threads} threads")
        assert seen and max(seen) == threads
        seen.clear()


def test_num_threads_limits_the_blas_inside_the_call(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []

    def gemm(a, b, out):
        seen.append({i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"})
        return np.matmul(a, b, out=out)
    monkeypatch.setattr(matmul_cpu, "_gemm", gemm)
    before = {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}
    a = operand((96, 96), np.float64)
    mathpy.matmul(a, a, execution=mathpy.ExecutionCPU(num_threads=1))
    assert seen == [{1}]
    assert {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()} == before  # restored
    seen.clear()
    mathpy.matmul(a, a, execution="cpu")  # no count: the BLAS as it is
    assert seen == [{i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}]


_START_NUMBA = """
import json, os, sys
from numba.np.ufunc import parallel
seen = {}
launch = parallel._launch_threads
def spy():
    seen["at launch"] = os.environ.get("GOMP_SPINCOUNT")
    launch()
parallel._launch_threads = spy
from mathpy import _threads
numba = _threads.parallel_numba()
print(json.dumps({"layer": numba and numba.threading_layer(), "at launch": seen.get("at launch"),
                  "after": os.environ.get("GOMP_SPINCOUNT"), "spin": _threads.numba_spin_seconds()}))
"""


@pytest.mark.parametrize("env, at_launch, spin", [
    ({}, str(_threads.OMP_SPIN_COUNT), _threads.SHORT_SPIN_SECONDS),
    ({"OMP_WAIT_POLICY": "active"}, None, _threads.DEFAULT_OMP_SPIN_SECONDS),
    ({"OMP_WAIT_POLICY": "PASSIVE"}, None, 0.0),
    ({"GOMP_SPINCOUNT": "100"}, "100", _threads.SHORT_SPIN_SECONDS),
])
def test_numba_threads_start_with_a_short_spin_unless_the_environment_sets_one(env, at_launch, spin):
    """GNU OpenMP reads its spin count once, as numba's layer loads it: mathpy starts the layer with a short one and
    takes it out of the environment again; a user's wait policy or count stays theirs."""
    seen = _in_subprocess(_START_NUMBA, env, NUMBA_THREADING_LAYER="omp")
    if seen["layer"] is None:  # pragma: no cover (no GNU OpenMP here)
        pytest.skip("numba's OpenMP layer does not load here")
    assert seen == {"layer": "omp", "at launch": at_launch, "after": env.get("GOMP_SPINCOUNT"), "spin": spin}


_LOAD_FFTW = """
import importlib, json, os
from mathpy.host.fft import _cpu_libraries as libraries
seen = {}
def spy(name):
    seen[name] = os.environ.get("GOMP_SPINCOUNT")
    return importlib.import_module(name)
libraries._imported = spy
fftw = libraries.LIBRARIES["fftw"]
fftw.load()
print(json.dumps({"at import": seen.get("pyfftw"), "after": os.environ.get("GOMP_SPINCOUNT"),
                  "spin": fftw.spin_seconds}))
"""


@pytest.mark.skipif("fftw" not in INSTALLED, reason="needs pyFFTW")
@pytest.mark.parametrize("env, at_import, spin", [
    ({}, str(_threads.OMP_SPIN_COUNT), _threads.SHORT_SPIN_SECONDS),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, None, _threads.DEFAULT_OMP_SPIN_SECONDS),
])
def test_pyfftw_loads_its_openmp_under_a_short_spin_unless_the_environment_sets_one(env, at_import, spin):
    seen = _in_subprocess(_LOAD_FFTW, env)
    assert seen == {"at import": at_import, "after": None, "spin": spin}


_SMALL_PASS = """
import json
import numpy as np
import mathpy
from mathpy import _threads
a = np.ones((64, 64), np.float32)
mathpy.matmul(a, a, alpha=2.0, epilog="relu", execution=mathpy.ExecutionCPU(num_threads=2))
print(json.dumps({"numba started": "module" in _threads._numba}))
"""


def test_a_pass_on_the_pool_does_not_start_numbas_threads():
    # (their OpenMP team would sit beside the BLAS's for nothing)
    assert _in_subprocess(_SMALL_PASS, {}) == {"numba started": False}


def _in_subprocess(script, env, **more):
    """The JSON ``script`` prints last, run in a new Python with ``env`` (and ``more``) as the only OpenMP
    settings."""
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                                     "NUMBA_THREADING_LAYER")}
    environment.update(env, **more)
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_run_chunks_runs_every_chunk_once_and_raises_the_first_error():
    done, lock = [], threading.Lock()

    def work(i):
        with lock:
            done.append(i)
    _threads.run_chunks(work, 37, threads=4)
    assert sorted(done) == list(range(37))

    def failing(i):
        if i == 5:
            raise ValueError("chunk 5")
    with pytest.raises(ValueError, match="chunk 5"):
        _threads.run_chunks(failing, 20, threads=3)


# --- fused FFT callbacks equal their unfused references --------------------------------------------------------------

def window_prolog(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % user_info.size]


def filter_epilog(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % user_info.size]


def _strided(values, strides):
    """``values`` copied into a new buffer laid out with element ``strides``."""
    span = 1 + sum((n - 1) * s for n, s in zip(values.shape, strides))
    view = np.lib.stride_tricks.as_strided(np.zeros(span, values.dtype), values.shape,
                                           tuple(s * values.itemsize for s in strides))
    view[...] = values
    return view


def _offsets(shape, strides):
    return sum(np.arange(n).reshape((-1,) + (1,) * (len(shape) - k - 1)) * s
               for k, (n, s) in enumerate(zip(shape, strides)))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, in_strides, out_strides, axes", [
    ((64, 48), (48, 1), (48, 1), (1,)),  # blocked: many transforms per thread
    ((3, 48), (50, 1), (48, 1), (1,)),  # few transforms: whole-transform passes, a padded input
    ((48, 20), (20, 1), (1, 48), (0,)),  # the transform axis strided; an output in the other order
    ((2, 16, 12), (192, 12, 1), (192, 12, 1), (1, 2)),  # 2-D transforms
    ((1, 16, 12), (192, 12, 1), (192, 12, 1), (1, 2)),  # one 2-D transform: the passes' rows are its first axis
    ((20, 6, 8), (1, 20, 120), (1, 20, 120), (1,)),  # batch axes that do not fold into one stride
    ((12, 5, 7), (35, 7, 1), (1, 12, 60), (2,)),  # prime and odd lengths, batches in another order on the way out
])
def test_fused_callbacks_equal_the_unfused_expression(threads, shape, in_strides, out_strides, axes):
    execution = mathpy.ExecutionCPU(num_threads=threads)
    t = Transform("C2C", np.float64, shape, in_strides, shape, out_strides, axes)
    span = max(1 + sum((n - 1) * s for n, s in zip(shape, st)) for st in (in_strides, out_strides))
    weights = operand((span,), np.float64, seed=2)
    # the engine reads a bound callback's function and user data (one weight per element of the memory span here)
    engine = CPUEngine(t, execution=execution,
                       prolog=types.SimpleNamespace(function=window_prolog, user_info=weights, check_bounds=False),
                       epilog=types.SimpleNamespace(function=filter_epilog, user_info=weights, check_bounds=False))
    x_values = operand(shape, np.complex128)
    x = _strided(x_values, in_strides)
    n = int(np.prod([shape[a] for a in axes]))
    loaded = x_values * weights[_offsets(shape, in_strides)]
    unnormalised = reference("fftn", loaded, axes=axes)
    expected = unnormalised * weights[_offsets(shape, out_strides)] / n  # the epilog sees it, then the scale
    for strategy in (None,) + engine.strategies:
        if strategy is not None:
            engine.strategy = strategy
        for _ in range(3):  # quick plans, then measured ones (and the faster strategy, unless one is set)
            out = _strided(np.zeros(shape, np.complex128), out_strides)
            engine.execute(x, out, -1, scale=1 / n)
            check(out, expected, np.complex128, n, f"prolog and epilog, {threads} threads, {engine.strategy}")
            np.testing.assert_array_equal(x, x_values)  # the input is left as it was
    batch = int(np.prod([e for a, e in enumerate(shape) if a not in axes]))
    # ("parallel" competes from 4 threads on: the tests below)
    assert engine.strategies == (("passes", "blocks") if batch >= 2 * threads else ("passes",))
    with pytest.raises(ValueError, match="strategy 'rows' is not one of this plan's"):
        engine.strategy = "rows"


needs_fftw_c = pytest.mark.skipif(_fftw_c.library(np.float32) is None, reason="needs pyFFTW's FFTW libraries (Linux)")


def _parallel_engine(fft_type, dtype, count, n, prolog=window_prolog, epilog=filter_epilog):
    """A CPU engine of ``count`` transforms of ``n`` with a prolog and an epilog reading one weight per element, on
    enough threads for the "parallel" strategy; (engine, input shape, output shape, weights)."""
    half = n // 2 + 1
    in_shape, out_shape = {"R2C": ((count, n), (count, half)), "C2R": ((count, half), (count, n)),
                           "C2C": ((count, n), (count, n))}[fft_type]
    t = Transform(fft_type, dtype, in_shape, (in_shape[1], 1), out_shape, (out_shape[1], 1), (1,))
    weights = operand((count * n,), dtype, seed=4)
    engine = CPUEngine(t, execution=mathpy.ExecutionCPU(num_threads=CPU_PARALLEL_MIN_THREADS),
                       prolog=types.SimpleNamespace(function=prolog, user_info=weights, check_bounds=False),
                       epilog=types.SimpleNamespace(function=epilog, user_info=weights, check_bounds=False))
    return engine, in_shape, out_shape, weights


@needs_fftw_c
@pytest.mark.parametrize("fft_type, dtype, n", [("R2C", np.float32, 31), ("C2R", np.float32, 31),
                                                ("C2C", np.float32, 30), ("C2C", np.float64, 30)])
def test_parallel_strategy_runs_every_transform_type_with_a_short_last_block(fft_type, dtype, n):
    # 37 transforms on four threads (numba's, at most its pool): blocks of 10 and a last one of 7 (its plan runs on 10
    # rows: three are not stored), each transformed by FFTW's C API inside numba's loop. A real block of 10 x 31
    # float32 is 1240 bytes: each thread's block is rounded up to stay 16-byte aligned, as FFTW's plan was made.
    count = 37
    engine, in_shape, out_shape, weights = _parallel_engine(fft_type, dtype, count, n)
    assert engine.strategies == ("passes", "blocks", "parallel")
    engine.strategy = "parallel"
    complex_dtype = np.result_type(dtype, np.complex64)
    x = operand(in_shape, dtype if fft_type == "R2C" else complex_dtype)
    loaded = x * weights[_offsets(in_shape, (in_shape[1], 1))]
    out_weights = weights[_offsets(out_shape, (out_shape[1], 1))]
    cases = {"R2C": lambda: [(-1, 1 / n, reference("rfft", loaded))],  # (direction, scale, unnormalised result)
             "C2R": lambda: [(1, 1 / n, reference("irfft", loaded, n=n, norm="forward"))],
             "C2C": lambda: [(-1, 1 / n, reference("fft", loaded)),
                             (1, None, reference("ifft", loaded, norm="forward"))]}[fft_type]()
    numba = pytest.importorskip("numba")
    numba.set_num_threads(1)  # the caller's setting, which the call changes to its own and back
    try:
        for _ in range(2):  # the plans made at the first call, then reused
            for direction, scale, unnormalised in cases:
                out = np.zeros(out_shape, dtype if fft_type == "C2R" else complex_dtype)
                engine.execute(x, out, direction, scale=scale)
                expected = unnormalised * out_weights * (1 if scale is None else scale)
                check(out, expected, dtype, n, f"{fft_type} {np.dtype(dtype)} direction {direction} parallel")
                assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert engine.strategy == "parallel" and engine.library == "fftw"


def raising_epilog(data_out, offset, value, user_info, unused):
    if value.real > 1e30:
        raise ValueError("too large")
    data_out[offset] = value


def _checked(value):
    if value.real > 1e30:
        raise ValueError("too large")
    return value


#: A module of compiled helpers, as a user's ``helpers.bounded(value)`` reaches one
helpers = types.ModuleType("helpers")
helpers.bounded = numba.njit(_checked)


def epilog_through_a_module(data_out, offset, value, user_info, unused):
    data_out[offset] = helpers.bounded(value)


def test_a_helper_that_raises_is_found_through_a_module():
    assert passes.may_raise(raising_epilog) and passes.may_raise(epilog_through_a_module)
    assert not passes.may_raise(silu_gate) and not passes.may_raise(batch_scale)


@needs_fftw_c
@pytest.mark.parametrize("epilog", [raising_epilog, epilog_through_a_module])
def test_parallel_strategy_is_not_offered_to_callbacks_that_raise(epilog):
    # numba's parallel loop would lose the exception (the element unwritten); the other strategies raise it
    engine, *_ = _parallel_engine("C2C", np.float32, 37, 30, epilog=epilog)
    assert engine.strategies == ("passes", "blocks")


@needs_fftw_c
def test_a_parallel_strategy_that_fails_leaves_the_choice(monkeypatch):
    engine, in_shape, out_shape, weights = _parallel_engine("C2C", np.float64, 37, 30)

    def no_plan(forward):
        raise RuntimeError("FFTW made no plan")
    monkeypatch.setattr(engine._fused, "_plan", no_plan)
    x = operand(in_shape, np.complex128)
    out = np.zeros(out_shape, np.complex128)
    engine.execute(x, out, -1)
    assert engine.strategies == ("passes", "blocks") and engine.strategy in ("passes", "blocks")
    expected = reference("fft", x * weights[_offsets(in_shape, (30, 1))]) * weights[_offsets(out_shape, (30, 1))]
    check(out, expected, np.float64, 30, "after the parallel strategy failed")


def test_fused_callbacks_through_the_api():
    x = operand((64, 48), np.complex64)
    weights = operand((64, 48), np.float32, seed=2)  # one weight per element of the result (C order)
    for _ in range(2):
        got = mfft.ifft(x, epilog=mfft.Callback(filter_epilog, weights), norm="ortho",
                        execution=mathpy.ExecutionCPU(num_threads=2))
        check(got, reference("ifft", x, norm="forward") * weights / np.sqrt(48), np.complex64, 48, "epilog, ortho")


def test_fused_real_transforms_equal_the_unfused_expression():
    x = operand((40, 30), np.float32)
    window = operand((30,), np.float32, seed=3)
    execution = mathpy.ExecutionCPU(num_threads=2)
    spectrum = mfft.rfft(x, prolog=mfft.Callback(window_prolog, window), execution=execution)
    check(spectrum, reference("rfft", x * window), np.float32, 30, "R2C prolog")
    back = mfft.irfft(spectrum, n=30, epilog=mfft.Callback(filter_epilog, window), execution=execution)
    check(back, reference("irfft", spectrum, n=30) * window, np.float32, 30, "C2R epilog")


# --- matmul: the native product and its fused pass -------------------------------------------------------------------

def _bounds(a, b, dtype, epilog, bias, x, d, alpha=1.0):
    return epilog_bounds(epilog, a, b, dtype, alpha, bias, x, d)


@pytest.fixture(params=["pool", "parallel"])
def pass_path(request, monkeypatch):
    """Where a matmul's pass over D runs, in a block per thread whatever the operands' size: mathpy's pool (2 threads),
    or one numba parallel loop (4 threads asked; numba's team is at most its pool, 2 on a 2-core machine). ``.ran``:
    the thread counts of the parallel loops that ran."""
    ran, real = [], matmul_cpu_epilog._in_parallel
    monkeypatch.setattr(matmul_cpu_epilog, "_in_parallel", lambda *args: ran.append(args[2]) or real(*args))
    monkeypatch.setattr(matmul_cpu_epilog, "_blocks", lambda x, threads: threads)
    threads = 2
    if request.param == "parallel":
        threads = _threads.PARALLEL_MIN_THREADS
        monkeypatch.setattr(matmul_cpu_epilog, "parallel", lambda threads: True)  # (whatever numba's pool)
    return types.SimpleNamespace(name=request.param, threads=threads, ran=ran,
                                 execution=mathpy.ExecutionCPU(num_threads=threads))


def test_a_pass_runs_in_parallel_only_where_numbas_pool_has_the_threads(monkeypatch):
    import numba
    for pool, threads, parallel in [(16, 16, True), (16, 4, True), (16, 3, False), (2, 16, False), (4, 16, True)]:
        monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", pool)
        assert matmul_cpu_epilog.parallel(threads) is parallel, (pool, threads)


@pytest.mark.parametrize("epilog, inputs", [("relu_bias", True), ("gelu_aux_bias", True), (None, False),
                                            ("python", True)])
@pytest.mark.parametrize("a_shape, b_shape", [((0, 5), (5, 7)), ((4, 5), (5, 0)), ((0, 3, 5), (0, 5, 7))])
def test_empty_results_pass_through_the_epilog(pass_path, epilog, inputs, a_shape, b_shape):
    a, b = np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)
    m, n = a_shape[-2], b_shape[-1]
    kwargs = {"alpha": 2.0}
    if epilog in ("relu_bias", "gelu_aux_bias"):
        kwargs.update(epilog=epilog, epilog_inputs={"bias": np.ones(m, np.float32)})
    elif epilog == "python":
        kwargs.update(epilog=batch_scale if len(a_shape) == 3 else silu_gate,
                      epilog_inputs={"scale": np.ones(0, np.float32)} if len(a_shape) == 3 else
                      {"data": np.ones((m, n), np.float32)})
    got = mathpy.matmul(a, b, execution=pass_path.execution, **kwargs)
    if epilog == "gelu_aux_bias":
        got, aux = got
        assert not aux["gelu_aux"].any()  # (its padding rows zero)
    assert got.shape == np.matmul(a, b).shape and got.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("epilog", ["relu_bias", "gelu_bias", "relu_aux_bias", "gelu_aux", "relu", "bias"])
def test_epilogs_in_one_pass_equal_their_definitions(dtype, epilog, pass_path):
    a, b = operand((3, 37, 19), dtype), operand((3, 19, 29), dtype, seed=1)
    bias = operand((37,), dtype, seed=2)
    x = a.astype(np.float64) @ b.astype(np.float64) + (bias[:, None] if "bias" in epilog else 0)
    d_exact = np.maximum(x, 0) if "relu" in epilog else gelu(x) if "gelu" in epilog else x
    inputs = {"bias": bias} if "bias" in epilog else None
    result = mathpy.matmul(a, b, epilog=epilog, epilog_inputs=inputs, execution=pass_path.execution)
    # (GELU's tanh runs in NumPy's ufuncs on the pool)
    assert pass_path.ran == ([pass_path.threads] if pass_path.name == "parallel" and "gelu" not in epilog else [])
    d, aux = result if isinstance(result, tuple) else (result, {})
    x_bound, d_bound = _bounds(a, b, dtype, epilog, bias[:, None] if inputs else None, x, d_exact)
    assert_within(d, d_exact, d_bound, epilog)
    if "relu_aux" in aux:  # the bitmask of X > 0, exactly, except where X is within its error of 0
        mask = np.unpackbits(np.swapaxes(aux["relu_aux"], -1, -2), axis=-1, bitorder="little")[..., :37]
        certain = np.abs(x) > x_bound
        assert np.array_equal(np.swapaxes(mask, -1, -2).astype(bool)[certain], (x > 0)[certain])
        assert not np.swapaxes(mask, -1, -2)[..., 37:, :].any() and aux["relu_aux"].shape == (3, 16, 29)
    if "gelu_aux" in aux:
        assert_within(aux["gelu_aux"][:, :37], x, x_bound, "gelu aux")
        assert not aux["gelu_aux"][:, 37:].any()  # padding rows zero


def test_alpha_beta_c_and_complex_in_the_pass(pass_path):
    a, b = operand((21, 30), np.complex64), operand((30, 10), np.complex64, seed=1)
    c = operand((21, 10), np.complex64, seed=2)
    exact = 2.5 * (a.astype(np.complex128) @ b.astype(np.complex128)) - 0.5 * c
    got = mathpy.matmul(a, b, c, alpha=2.5, beta=-0.5, execution=pass_path.execution)
    assert len(pass_path.ran) == (pass_path.name == "parallel")
    assert_within(got, exact, matmul_bound(a, b, np.complex64, alpha=2.5, exact=exact) + 1e-6 * np.abs(c), "complex")
    got = mathpy.matmul(a.real.copy(), b.real.copy(), alpha=-3.0, execution=pass_path.execution)  # alpha alone
    exact = -3.0 * (a.real.astype(np.float64) @ b.real.astype(np.float64))
    assert_within(got, exact, matmul_bound(a.real, b.real, np.float32, alpha=3.0, exact=exact), "alpha")


def test_relu_keeps_nan():
    a = np.array([[np.nan, 1.0], [1.0, 1.0]], np.float32)
    got = mathpy.matmul(a, np.eye(2, dtype=np.float32), epilog="relu", execution="cpu")
    assert np.isnan(got[0, 0]) and got[1, 1] == 1


def silu_gate(value, row, col, data):
    return value / (np.float32(1) + np.exp(-value)) * data[row, col]


def gate_and_bias(value, row, col, gate, bias):
    return value * gate[row, col] + bias[col]


def batch_scale(value, batch, row, col, scale):
    return value * scale[batch] + row - col


def checked_silu_gate(value, row, col, data):
    if row >= data.shape[0]:  # (an assert here would be pytest's rewritten one, which numba cannot compile)
        raise IndexError("row")
    return value / (np.float32(1) + np.exp(-value)) * data[row, col]


def test_python_epilog_in_one_threaded_pass(pass_path):
    a, b = operand((2, 65, 33), np.float32), operand((2, 33, 40), np.float32, seed=1)
    gate = operand((65, 40), np.float32, seed=2)
    x = a.astype(np.float64) @ b.astype(np.float64)
    exact = x / (1 + np.exp(-x)) * gate
    bound = 2 * matmul_bound(a, b, np.float32, exact=x) * (1.1 * np.abs(gate)) + 4e-7 * np.abs(exact)
    for epilog, parallel in [(silu_gate, True), (checked_silu_gate, False)]:  # (one that can raise: on the pool)
        pass_path.ran.clear()
        got = mathpy.matmul(a, b, epilog=epilog, epilog_inputs={"data": gate}, execution=pass_path.execution)
        assert pass_path.ran == ([pass_path.threads] if pass_path.name == "parallel" and parallel else [])
        assert_within(got, exact, bound, epilog.__name__)


def test_python_epilog_with_the_batch_coordinate_in_each_pass(pass_path):
    a, b = operand((3, 31, 17), np.float64), operand((3, 17, 23), np.float64, seed=1)
    scale = operand((3,), np.float64, seed=2)
    x = a @ b
    exact = x * scale[:, None, None] + np.arange(31)[:, None] - np.arange(23)
    got = mathpy.matmul(a, b, epilog=batch_scale, epilog_inputs={"scale": scale}, execution=pass_path.execution)
    assert len(pass_path.ran) == (pass_path.name == "parallel")
    assert_within(got, exact, matmul_bound(a, b, np.float64, exact=x) * np.abs(scale)[:, None, None] * 1.01 + 1e-13,
                  "batch scale")


# --- the stateless matmul's remembered CPU call ----------------------------------------------------------------------

@pytest.mark.parametrize("a_shape, b_shape, kwargs", [
    ((64, 64), (64, 64), {}),
    ((4, 16, 8), (8, 12), {}),  # batch broadcasting
    ((8,), (8, 5), {}),  # a vector
    ((7,), (7,), {}),  # a NumPy scalar
    ((16, 8), (8, 12), {"alpha": 3.0}),
    ((16, 8), (8, 12), {"epilog": "relu_bias", "epilog_inputs": {"bias": "bias"}}),
    ((2, 16, 8), (2, 8, 12), {"epilog": silu_gate, "epilog_inputs": {"data": "gate"}}),
    ((16, 8), (8, 12), {"epilog": gate_and_bias, "epilog_inputs": {"gate": "gate", "bias": "bias_n"}}),  # named
])
def test_repeated_stateless_calls_run_the_remembered_call(a_shape, b_shape, kwargs):
    a, b = operand(a_shape, np.float32), operand(b_shape, np.float32, seed=1)
    named = {"bias": operand((16,), np.float32, seed=2), "gate": operand((16, 12), np.float32, seed=3),
             "bias_n": operand((12,), np.float32, seed=4)}
    kwargs = {k: ({n: named[v] for n, v in v.items()} if k == "epilog_inputs" else v) for k, v in kwargs.items()}
    matmul_stateless.forget()
    first = mathpy.matmul(a, b, execution="cpu", **kwargs)
    remembered = matmul_stateless.remembered()
    assert remembered == 1, "the call was not remembered"
    hits = mathpy.matmul_plan_cache.info().hits
    again = mathpy.matmul(a.copy(), b.copy(), execution="cpu", **kwargs)  # other arrays of the same facts
    assert mathpy.matmul_plan_cache.info().hits == hits + 1
    assert type(again) is type(first) and np.shape(again) == np.shape(first)
    assert np.array_equal(again, first)  # the same product and pass: the same bits
    if np.ndim(first) >= 2:
        assert again.strides == first.strides  # the plan's result layout
    with mathpy.Matmul(a, b, execution="cpu", **{k: v for k, v in kwargs.items() if k == "alpha"}) as plan:
        plan.plan(**{k: v for k, v in kwargs.items() if k in ("epilog", "epilog_inputs")})
        assert np.array_equal(plan.execute(), first)


def test_calls_the_cpu_memo_does_not_take_go_the_full_way():
    a = operand((16, 8), np.float32)
    matmul_stateless.forget()
    mathpy.matmul(a, a.T, a @ a.T, beta=0.5, execution="cpu")  # C
    mathpy.matmul(a, a.T, epilog="relu_aux", execution="cpu")  # epilog outputs
    mathpy.matmul(a.astype(np.float16), a.T.astype(np.float16), execution="cpu")  # a float32 product, rounded
    assert matmul_stateless.remembered() == 0


def test_a_bias_of_the_wrong_shape_is_still_refused_on_a_repeated_call():
    a = operand((16, 8), np.float32)
    bias = operand((16,), np.float32)
    mathpy.matmul(a, a.T, epilog="bias", epilog_inputs={"bias": bias}, execution="cpu")
    with pytest.raises(ValueError):
        mathpy.matmul(a, a.T, epilog="bias", epilog_inputs={"bias": bias[:8]}, execution="cpu")


def test_engine_seam_still_replaces_the_cpu_matmul():
    made = []

    class Counting(matmul_cpu.CPUEngine):
        def __init__(self, problem, **kwargs):
            made.append(problem)
            super().__init__(problem, **kwargs)
    a = operand((5, 5), np.float64)
    mathpy.matmul_plan_cache.clear()
    with _engines.use("matmul", "cpu", Counting):
        np.testing.assert_array_equal(mathpy.matmul(a, a, execution="cpu"), a @ a)
    assert made


def test_cpu_engine_runs_after_free():
    """The stateless calls touch CPU engines without borrowing them: free() must leave them runnable."""
    t = Transform("C2C", np.float64, (2, 8), (8, 1), (2, 8), (8, 1), (1,))
    engine = CPUEngine(t, execution=mathpy.ExecutionCPU())
    engine.free()
    x, out = operand((2, 8), np.complex128), np.empty((2, 8), np.complex128)
    engine.execute(x, out, -1)
    check(out, reference("fft", x), np.complex128, 8, "after free")


def test_scaling_keeps_infinities_real():
    """A norm scales each part of a complex value, as NumPy does: ``inf+0j`` stays ``inf+0j``, never ``inf+nanj``."""
    from mathpy.jit import _cpu_passes as passes

    values = np.array([[np.inf + 0j, 2 + 0j, -np.inf + 1j]], np.complex64)
    span = np.zeros(3, np.complex64)
    rows, inner = np.zeros(1, np.int64), np.arange(3, dtype=np.int64)
    passes.storer(None)(span, rows, inner, 1, values, None, np.float32(0.5))
    np.testing.assert_array_equal(span, [np.inf + 0j, 1 + 0j, -np.inf + 0.5j])
    out = np.repeat(values, 4096, axis=0)  # large enough for every thread
    libraries.scale_in_place(out, np.float32(0.5), threads=2)
    assert not np.isnan(out).any() and np.array_equal(out[:, 0].real, np.full(4096, np.inf, np.float32))


def test_numpys_floating_point_reports_on_large_results_checked_on_every_thread():
    big = np.full((64, 4096), 3e38, np.complex64)  # 4 MB: the result's finiteness is summed in pieces
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mfft.fft(big, execution=mathpy.ExecutionCPU(num_threads=2, fp_reports=True))
    assert "overflow encountered in fft" in [str(w.message) for w in caught]  # (and inf - inf: invalid values)
    values = operand((64, 4096), np.complex64)
    np.testing.assert_allclose(_threads.parallel_sum(values, 2), np.add.reduce(values, axis=None), rtol=1e-5)
    values[37, 5] = np.nan
    assert np.isnan(_threads.parallel_sum(values, 2))


def test_repeated_out_calls_run_the_remembered_call_and_odd_outs_take_the_full_path(monkeypatch):
    """fft(x, out=out) on NumPy arrays runs the remembered prepared call straight into ``out`` (no planning: the full
    path's borrow_call is not reached); an ``out`` it cannot write directly (other strides, read-only, overlapping
    the input, another dtype) takes the full path and gets NumPy's behaviour."""
    from mathpy.host.fft import _numpy_call, _stateless
    _stateless.forget()
    x = operand((8, 64), np.complex64)
    expected = reference("fft", x)
    out = np.empty_like(x)
    assert mfft.fft(x, out=out) is out  # the full path, which leaves its prepared call
    check(out, expected, np.complex64, 64, "out= (full path)")
    made = []
    monkeypatch.setattr(_numpy_call, "borrow_call", lambda *a, **k: made.append(1))
    for _ in range(3):
        out[...] = 0
        assert mfft.fft(x, out=out) is out
        check(out, expected, np.complex64, 64, "out= (remembered call)")
    assert not made
    monkeypatch.undo()
    wide = np.empty((8, 128), np.complex64)[:, ::2]  # other strides: the full path writes through the view
    assert mfft.fft(x, out=wide) is wide
    check(wide, expected, np.complex64, 64, "strided out=")
    frozen = np.empty_like(x)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mfft.fft(x, out=frozen)
    y = x.copy()
    assert mfft.fft(y, out=y) is y  # out is the input: NumPy transforms it in place
    check(y, expected, np.complex64, 64, "out= the input")
    double = np.empty(x.shape, np.complex128)
    assert mfft.fft(x, out=double) is double
    check(double, expected, np.complex64, 64, "complex128 out=")


@pytest.mark.parametrize("call", ["fft", "matmul"])
def test_a_bad_stream_is_an_error_on_the_cpu_too_first_and_repeated_calls(call):
    """The CPU runs on no stream, but ``stream=`` is checked as on the GPU: the first call (full path) and a repeated
    one (the remembered prepared call) alike."""
    x = np.ones((4, 8), np.complex64) if call == "fft" else np.ones((4, 4))
    run = (lambda **kw: mfft.fft(x, **kw)) if call == "fft" else (lambda **kw: mathpy.matmul(x, x, **kw))
    mathpy.plan_cache_clear()
    with pytest.raises(TypeError, match="stream must be"):
        run(stream="default")
    run(), run()  # remembered
    with pytest.raises(TypeError, match="stream must be"):
        run(stream="default")
    run(stream=0)  # an int handle is a valid stream (unused on the CPU)
