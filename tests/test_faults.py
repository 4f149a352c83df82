"""Faults on the CPU: every library status at every planning and execution call of the cuFFT and cuBLASLt engines
(mocked: the emulated cuFFT of tests/_cufft_emulator.py; the real libcublasLt with its status injected at the C
function), and a KeyboardInterrupt in the middle of planning. Each must give an error naming the function and the
status, leave no handle, descriptor or workspace behind, and leave the object usable (after an execute failure) or
cleanly freed (after a planning failure). The GPU side (real out-of-memory, 16 threads, an operand freed while its
stream runs) is tests/test_faults_gpu.py."""

import gc
import types
import weakref
from unittest import mock

import numpy as np
import pytest

import mathpy.fft as mfft
from mathpy._errors import CUDALibraryError, LibraryNotFoundError
from mathpy._execution import ExecutionCUDA
from mathpy.bindings import _loader
from mathpy.bindings import cublaslt as lt
from mathpy.bindings import cufft as cufft_binding
from mathpy.host.fft import _cpu as cpu_engine
from mathpy.host.fft import _cufft
from mathpy.host.fft._layout import Transform
from mathpy.host.matmul import _cublaslt as engine_module
from mathpy.host.matmul._cublaslt import CublasLtEngine
from mathpy.host.matmul._problem import MatmulProblem, col_major, row_major

from _cufft_emulator import RecordingMemory, emulated_cufft  # noqa: F401  (the fixture)

CUFFT_STATUSES = sorted(s for s in cufft_binding.STATUS_NAMES if s)
CUBLAS_STATUSES = sorted(s for s in lt.STATUS_NAMES if s and s != 15)  # 15: "no algorithm", not a failure
R2C = Transform("R2C", np.float32, (4, 16), (16, 1), (4, 9), (9, 1), (1,))
PROLOG = type("Prolog", (), {"ltoir": b"IR", "symbol": None, "cufft_type": 2, "data_ptr": 0})()


# --- cuFFT ----------------------------------------------------------------------------------------------------------

@pytest.fixture
def cufft(emulated_cufft):  # noqa: F811
    emulated_cufft.workspace = 4096  # a workspace is allocated before cufftSetWorkArea
    return emulated_cufft


def _engine(transform=R2C, **kwargs):
    return _cufft.CUFFTEngine(transform, execution=ExecutionCUDA(0), allocator=_cufft.cufft.memory.on(0, 0), **kwargs)


def _workspaces_released(emulator):
    refs = [weakref.ref(a) for a in emulator.allocations]
    emulator.allocations.clear()
    gc.collect()
    assert all(ref() is None for ref in refs), "a workspace is still referenced"


@pytest.mark.parametrize("status", CUFFT_STATUSES)
@pytest.mark.parametrize("function", ["cufftCreate", "cufftXtSetJITCallback", "cufftSetAutoAllocation",
                                      "cufftXtMakePlanMany", "cufftSetWorkArea"])
def test_cufft_planning_failure(cufft, function, status):
    before = _cufft.live_handles()
    cufft.fail = {function: status}
    with pytest.raises(CUDALibraryError) as error:
        _engine(prolog=PROLOG)
    assert f"{cufft_binding.STATUS_NAMES[status]} ({status})" in str(error.value) and function in str(error.value)
    assert error.value.status == status
    del error  # its traceback holds the failed constructor's frame (and so its locals) alive
    assert not cufft.plans and _cufft.live_handles() == before
    _workspaces_released(cufft)


def test_cufft_refusing_callbacks_for_a_transform_says_so(cufft):
    """CUFFT_NOT_SUPPORTED from planning with callbacks (cuFFT 12 on the H200 for a 4099-point C2C) names the cause
    and the ways around it; without callbacks the status keeps the plain message."""
    cufft.fail = {"cufftXtMakePlanMany": 16}
    with pytest.raises(CUDALibraryError, match=r"CUFFT_NOT_SUPPORTED \(16\).*no kernels with callbacks.*pad"):
        _engine(prolog=PROLOG)
    with pytest.raises(CUDALibraryError) as error:
        _engine()
    assert str(error.value) == "CUFFT_NOT_SUPPORTED (16): cufft cufftXtMakePlanMany failed"
    del error


@pytest.mark.parametrize("status", CUFFT_STATUSES)
@pytest.mark.parametrize("function", ["cufftXtExec", "cufftSetStream"])
def test_cufft_execute_failure_leaves_the_plan_usable(cufft, function, status):
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    y = np.zeros((4, 9), np.complex64)
    cufft.buffers[:] = [x, y]
    before = _cufft.live_handles()
    engine = _engine()
    cufft.fail = {function: status}
    with pytest.raises(CUDALibraryError, match=f"{cufft_binding.STATUS_NAMES[status]} \\({status}\\)"):
        engine.execute(x.ctypes.data, y.ctypes.data, -1, 5)
    cufft.fail = {}
    engine.execute(x.ctypes.data, y.ctypes.data, -1, 7)
    np.testing.assert_allclose(y, np.fft.rfft(x), rtol=1e-5, atol=1e-5)
    engine.free()
    assert not cufft.plans and _cufft.live_handles() == before
    _workspaces_released(cufft)


@pytest.mark.parametrize("function", ["cufftXtSetJITCallback", "cufftXtMakePlanMany", "cufftSetWorkArea"])
def test_keyboard_interrupt_while_planning_cufft(cufft, function):
    before = _cufft.live_handles()
    cufft.fail = {function: KeyboardInterrupt()}
    with pytest.raises(KeyboardInterrupt) as error:
        _engine(prolog=PROLOG)
    del error  # its traceback holds the failed constructor's frame (and so its locals) alive
    assert not cufft.plans and _cufft.live_handles() == before
    _workspaces_released(cufft)
    cufft.fail = {}
    _engine(prolog=PROLOG).free()  # the next plan works


def test_keyboard_interrupt_while_planning_a_stateless_call(monkeypatch):
    """An interrupt while the stateless call plans leaves no half-built plan in the cache: the next call plans anew
    and is right."""
    x = np.random.default_rng(1).standard_normal((3, 20)).astype(np.complex128)
    original = cpu_engine.CPUEngine.__init__
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        original(self, *args, **kwargs)

    mfft.plan_cache_clear()
    monkeypatch.setattr(cpu_engine.CPUEngine, "__init__", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mfft.fft(x)
    assert mfft.plan_cache_info().plans == 0
    np.testing.assert_allclose(mfft.fft(x), np.fft.fft(x), rtol=1e-12, atol=1e-12)
    assert len(calls) == 2 and mfft.plan_cache_info().plans == 1


# --- cuBLASLt -------------------------------------------------------------------------------------------------------

def _library_or_skip():
    try:
        lt.version()
    except (LibraryNotFoundError, OSError) as e:
        pytest.skip(f"libcublasLt is not installed here ({e.__class__.__name__})")


_CREATE_DESTROY = [("cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy"),
                   ("cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy"),
                   ("cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy")]


def _heuristics(handle, desc, la, lb, lc, ld, preference, count):
    results = []
    for i in range(min(count, 2)):
        result = lt.HeuristicResult()
        result.algo.data[0] = i + 1
        result.workspaceSize = 1024
        results.append(result)
    return results


@pytest.fixture
def cublaslt():
    """The real libcublasLt (descriptors) with a mocked handle and heuristic; counts live descriptors; ``inject``
    makes a C function's n-th call fail with a status (through the binding's one check) or raise."""
    _library_or_skip()
    state = types.SimpleNamespace(live=0, failures={})

    def wrapped(name):
        function = real[name]

        def call(*args):
            failure = state.failures.get(name)
            if failure is not None:
                failure[0] -= 1
                if failure[0] == 0:
                    if isinstance(failure[1], BaseException):
                        raise type(failure[1])(*failure[1].args)
                    return _loader._check("cublasLt", lt.STATUS_NAMES, name, failure[1], None, args)
            result = function(*args)
            if name.endswith("Create"):
                state.live += 1
            elif name.endswith("Destroy"):
                state.live -= 1
            return result
        return call

    names = [n for pair in _CREATE_DESTROY for n in pair] + ["cublasLtMatmulDescSetAttribute",
                                                            "cublasLtMatrixLayoutSetAttribute",
                                                            "cublasLtMatmulPreferenceSetAttribute"]
    for name in names:
        getattr(lt.library, name)  # resolve the real functions first
    real = dict(lt.library._resolved)
    memory = RecordingMemory()
    with mock.patch.dict(lt.library._resolved, {name: wrapped(name) for name in names}), \
            mock.patch.object(engine_module._cuda, "require_device"), \
            mock.patch.object(engine_module._cuda, "device_count", return_value=1), \
            mock.patch.object(engine_module._cuda, "compute_capability", return_value=(9, 0)), \
            mock.patch.object(engine_module, "get_handle", return_value=0), \
            mock.patch.object(engine_module.lt, "heuristics", side_effect=_heuristics) as heuristics:
        state.heuristics = heuristics
        state.memory = memory

        def inject(name, failure, nth=1):
            state.failures[name] = [nth, failure]
        state.inject = inject
        yield state


def _problem():
    m, n, k = 8, 6, 4
    return MatmulProblem(m, n, k, 1, (), row_major(m, k, 1, np.float32), row_major(k, n, 1, np.float32), None,
                         col_major(m, n, 1, np.float32), "32F", np.dtype(np.float32), None, (), ())


def _build(state):
    return CublasLtEngine(_problem(), execution=ExecutionCUDA(0), allocator=state.memory.on(0, 0))


def _all_released(state):
    gc.collect()
    assert state.live == 0, f"{state.live} cuBLASLt descriptors were not destroyed"
    refs = [weakref.ref(array) for array in state.memory.arrays]
    state.memory.arrays.clear()
    gc.collect()
    assert all(ref() is None for ref in refs), "a workspace is still referenced"


@pytest.mark.parametrize("status", CUBLAS_STATUSES)
@pytest.mark.parametrize("function,nth", [("cublasLtMatmulDescCreate", 1), ("cublasLtMatmulDescSetAttribute", 2),
                                          ("cublasLtMatrixLayoutCreate", 1), ("cublasLtMatrixLayoutCreate", 3),
                                          ("cublasLtMatmulPreferenceCreate", 1),
                                          ("cublasLtMatmulPreferenceSetAttribute", 1)])
def test_cublaslt_planning_failure(cublaslt, function, nth, status):
    cublaslt.inject(function, status, nth)
    with pytest.raises(CUDALibraryError) as error:
        _build(cublaslt)
    assert f"{lt.STATUS_NAMES[status]} ({status})" in str(error.value) and function in str(error.value)
    del error  # its traceback holds the failed constructor's frame (and so its locals) alive
    _all_released(cublaslt)


@pytest.mark.parametrize("status", CUBLAS_STATUSES)
def test_cublaslt_heuristic_failure_is_a_clear_error(cublaslt, status):
    failure = CUDALibraryError("cublasLt", "cublasLtMatmulAlgoGetHeuristic", status, lt.STATUS_NAMES[status])
    cublaslt.heuristics.side_effect = failure
    with pytest.raises(ValueError, match=f"no algorithm for this product.*{lt.STATUS_NAMES[status]}") as error:
        _build(cublaslt)
    del error
    _all_released(cublaslt)


@pytest.mark.parametrize("status", CUBLAS_STATUSES)
def test_cublaslt_execute_failure_leaves_the_plan_usable(cublaslt, status):
    engine = _build(cublaslt)
    calls = []

    def failing(*args):
        calls.append(args)
        if len(calls) == 1:
            return _loader._check("cublasLt", lt.STATUS_NAMES, "cublasLtMatmul", status, None, args)
    engine._matmul = failing
    with pytest.raises(CUDALibraryError, match=f"{lt.STATUS_NAMES[status]} \\({status}\\)"):
        engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
    engine.execute(0x1000, 0x2000, None, 0x3000, {}, {}, 1.0, 0.0, 0)
    assert len(calls) == 2 and 0x1000 in (calls[1][3], calls[1][5])
    engine.free()
    _all_released(cublaslt)


@pytest.mark.parametrize("where", ["heuristics", "cublasLtMatrixLayoutCreate"])
def test_keyboard_interrupt_while_planning_cublaslt(cublaslt, where):
    if where == "heuristics":
        cublaslt.heuristics.side_effect = KeyboardInterrupt()
    else:
        cublaslt.inject(where, KeyboardInterrupt(), 2)
    with pytest.raises(KeyboardInterrupt) as error:
        _build(cublaslt)
    del error
    _all_released(cublaslt)
    cublaslt.heuristics.side_effect = _heuristics
    cublaslt.failures.clear()
    _build(cublaslt).free()
    _all_released(cublaslt)
