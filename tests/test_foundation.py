"""The foundation every host API stands on: operands, execution spaces, streams, the plan cache, library loading."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import mathpy
from mathpy import _cuda
from mathpy._errors import CUDALibraryError, LibraryNotFoundError, NoDeviceError
from mathpy._execution import ExecutionCPU, ExecutionCUDA, resolve_execution
from mathpy._operands import as_package, to_device, to_host, wrap_operand, wrap_operands
from mathpy._plan_cache import PlanCache
from mathpy._streams import stream_pointer
from mathpy.bindings._loader import STATUS, Library


def test_import_needs_no_gpu_cupy_or_torch():
    code = ("import sys, mathpy; bad = [m for m in ('cupy', 'torch', 'numba.cuda') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_numpy_25_compatibility_fix():
    import numpy
    assert numpy.row_stack is not None  # restored (or never removed) after `import mathpy`
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda
    saved = numpy.__dict__.pop("row_stack")
    try:
        patch_numpy_for_numba_cuda()
        assert numpy.row_stack is numpy.vstack
    finally:
        numpy.row_stack = saved


class TestOperands:
    def test_strided_views_are_not_copied(self, xp):
        base = xp.asarray(np.arange(24, dtype=np.float32).reshape(4, 6))
        op = wrap_operand(base[:, ::2])
        assert op.shape == (4, 3) and op.strides == (6, 2) and op.dtype == np.float32
        assert (op.device_id is not None) == xp.on_gpu
        assert op.data_ptr == wrap_operand(base).data_ptr

    def test_transposed_layout(self, xp):
        op = wrap_operand(xp.asarray(np.ones((3, 5), np.complex64)).T)
        assert op.shape == (5, 3) and op.strides == (1, 5) and not op.is_c_contiguous

    @pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int64"])
    def test_dtypes_round_trip_between_packages(self, xp, dtype):
        from mathpy._dtypes import BFLOAT16
        npdtype = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
        if xp.name == "cupy" and dtype == "bfloat16":
            pytest.skip("CuPy has no bfloat16")
        host = (np.arange(6) + 1).astype(npdtype).reshape(2, 3)
        array = xp.asarray(host)
        op = wrap_operand(array)
        assert op.dtype == npdtype
        back = as_package(host, op)
        assert xp.is_native(back)
        np.testing.assert_array_equal(xp.to_numpy(back).astype(np.complex128), host.astype(np.complex128))

    def test_array_likes_and_dlpack(self):
        assert wrap_operand([[1.0, 2.0]]).shape == (1, 2)

        class Capsule:  # only the DLPack protocol, nothing else
            def __init__(self, array):
                self.array = array

            def __dlpack__(self, **kwargs):
                return self.array.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return self.array.__dlpack_device__()

        op = wrap_operand(Capsule(np.arange(4.0)))
        assert op.package == "numpy" and op.shape == (4,)

    @pytest.mark.parametrize("value, kind", [(object(), "object"), (None, "NoneType"), ("abc", "str"),
                                             ({"a": 1}, "dict")])
    def test_non_arrays_are_named(self, value, kind):
        with pytest.raises(TypeError, match=f"^x: expected an array, got {kind} "):
            wrap_operand(value, "x")

    def test_mixed_packages_are_an_error(self):
        torch = pytest.importorskip("torch")
        with pytest.raises(ValueError, match="a is a numpy array on the host but b is a torch array"):
            wrap_operands({"a": np.ones(2), "b": torch.ones(2)})

    @pytest.mark.gpu
    def test_host_and_device_moves(self, xp):
        host = np.arange(12.0).reshape(3, 4)
        device = to_device(wrap_operand(host), 0, None)
        assert device.device_id == 0
        np.testing.assert_array_equal(to_host(device, None).tensor, host)

    @pytest.mark.gpu
    def test_mixed_devices_are_an_error(self):
        cupy = pytest.importorskip("cupy")
        with pytest.raises(ValueError, match="on the host but b is a cupy array on cuda:0"):
            wrap_operands({"a": np.ones(2), "b": cupy.ones(2)})


class TestExecution:
    def test_operands_decide_by_default(self):
        assert resolve_execution(None, None) == ExecutionCPU()
        assert resolve_execution(None, 1) == ExecutionCUDA(1)

    def test_explicit_forms(self):
        assert resolve_execution("cuda", None) == ExecutionCUDA(0)
        assert resolve_execution({"name": "cpu", "num_threads": 2}, 0) == ExecutionCPU(2)
        assert resolve_execution(ExecutionCUDA(3), None) == ExecutionCUDA(3)

    @pytest.mark.parametrize("bad, error, match", [
        ("tpu", ValueError, r"execution 'tpu' is not supported; allowed are \['cpu', 'cuda'\]"),
        ({"name": "gpu"}, ValueError, "must be one of"),
        (3, TypeError, "not int"),
    ])
    def test_bad_execution_is_named(self, bad, error, match):
        with pytest.raises(error, match=match):
            resolve_execution(bad, None)

    def test_bad_options(self):
        with pytest.raises(ValueError, match="num_threads must be None or a positive int, not 0"):
            ExecutionCPU(num_threads=0)

    def test_scoped_default_is_restored_and_per_thread(self):
        seen = []
        with mathpy.execution_space("cuda"):
            assert resolve_execution(None, None) == ExecutionCUDA(0)
            worker = threading.Thread(target=lambda: seen.append(mathpy.get_execution_space()))
            worker.start()
            worker.join()
            with mathpy.execution_space(ExecutionCPU(4)):
                assert resolve_execution(None, 0) == ExecutionCPU(4)
            assert mathpy.get_execution_space() == ExecutionCUDA()
        assert mathpy.get_execution_space() is None and seen == [None]
        with pytest.raises(RuntimeError):
            with mathpy.execution_space("cpu"):
                raise RuntimeError
        assert mathpy.get_execution_space() is None


class TestStreams:
    def test_forms(self):
        class Protocol:
            def __cuda_stream__(self):
                return (0, 1234)

        class CuPyLike:
            ptr = 77

        assert stream_pointer(5, "cupy", 0) == 5
        assert stream_pointer(Protocol(), "cupy", 0) == 1234
        assert stream_pointer(CuPyLike(), "torch", 0) == 77
        with pytest.raises(TypeError, match="got str"):
            stream_pointer("default", "cupy", 0)
        with pytest.raises(ValueError, match="negative"):
            stream_pointer(-1, "cupy", 0)

    @pytest.mark.gpu
    def test_current_streams(self):
        torch = pytest.importorskip("torch")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            assert stream_pointer(None, "torch", 0) == stream.cuda_stream


class _Plan:
    freed = 0

    def __init__(self, nbytes=0):
        self.nbytes = nbytes
        self.is_freed = False

    def free(self):
        assert not self.is_freed
        self.is_freed = True
        _Plan.freed += 1


class TestPlanCache:
    def test_lru_by_count_and_bytes(self):
        cache = PlanCache("t", max_plans=2, max_bytes=10)
        plans = {}
        for key in "abc":
            with cache.borrow(key, lambda: (plans.setdefault(key, _Plan()), 1)):
                pass
        assert cache.keys() == ["b", "c"] and plans["a"].is_freed
        with cache.borrow("b", lambda: pytest.fail("b must be cached")):
            pass
        with cache.borrow("d", lambda: (plans.setdefault("d", _Plan()), 9)):  # 1 + 9 fits, LRU "c" goes by count
            pass
        assert cache.keys() == ["b", "d"] and plans["c"].is_freed
        info = cache.info()
        assert (info.hits, info.misses, info.bytes) == (1, 4, 10)

    def test_too_large_plans_are_used_once(self):
        cache = PlanCache("t", max_plans=4, max_bytes=10)
        with cache.borrow("big", lambda: (_Plan(), 11)) as plan:
            assert not plan.is_freed
        assert plan.is_freed and cache.keys() == []

    def test_a_borrowed_plan_is_never_freed_under_the_borrower(self):
        cache = PlanCache("t", max_plans=1, max_bytes=100)
        with cache.borrow("a", lambda: (_Plan(), 1)) as a:
            with cache.borrow("b", lambda: (_Plan(), 1)):
                assert not a.is_freed  # evicted but in use
            cache.clear()
        assert a.is_freed

    def test_threads(self):
        cache = PlanCache("t", max_plans=3, max_bytes=1 << 20)
        created = []
        errors = []

        def work(seed):
            try:
                for i in range(300):
                    key = (seed * i) % 5
                    with cache.borrow(key, lambda: (created.append(_Plan()) or created[-1], 1)) as plan:
                        assert not plan.is_freed
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(1, 5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(cache.keys()) <= 3
        cache.clear()
        assert all(p.is_freed for p in created)

    def test_touch_is_a_hit_that_keeps_the_plan_recent_without_borrowing_it(self):
        cache = PlanCache("t", max_plans=2, max_bytes=100)
        plans = {key: _Plan() for key in "abc"}
        for key in "ab":
            cache.release(cache.acquire(key, lambda: (plans[key], 1)))
        assert cache.touch("a") is plans["a"] and cache.touch("z") is None
        cache.release(cache.acquire("c", lambda: (plans["c"], 1)))  # evicts the least recent: "b", not "a"
        assert cache.keys() == ["a", "c"] and plans["b"].is_freed and not plans["a"].is_freed
        assert cache.info().hits == 1
        cache.touch("a")
        cache.clear()  # a touch is no borrow: the plan is freed with the cache (its user holds the plan's lock)
        assert plans["a"].is_freed and cache.touch("a") is None

    def test_bad_bounds(self):
        with pytest.raises(ValueError, match="max_plans must be a non-negative int, not -1"):
            PlanCache("t", max_plans=-1)
        # A cache refused for its bounds is not left registered: mathpy._memo.info() lists every cache there is.
        from mathpy import _memo
        assert "plans/t" not in _memo.info()


class TestLibraries:
    def test_status_names_come_from_one_check(self):
        import ctypes
        lib = Library("nvJitLink", {6: "NVJITLINK_ERROR_INTERNAL"}, extra="cu13")
        lib.declare({"nvJitLinkVersion": (STATUS, [ctypes.POINTER(ctypes.c_uint)] * 2)})
        try:
            major, minor = ctypes.c_uint(), ctypes.c_uint()
            lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
        except LibraryNotFoundError:
            pytest.skip("nvJitLink is not installed")
        assert major.value >= 12
        from mathpy.bindings._loader import _check
        with pytest.raises(CUDALibraryError, match=r"NVJITLINK_ERROR_INTERNAL \(6\): nvJitLink nvJitLinkCreate failed"):
            _check("nvJitLink", {6: "NVJITLINK_ERROR_INTERNAL"}, "nvJitLinkCreate", 6, None, ())

    def test_unchecked_function_returns_the_status_and_check_names_it(self):
        """The hot paths' form of a declared function: the same symbol and argtypes, the raw status back (no
        errcheck), and one check that raises as the checked binding does."""
        import ctypes
        lib = Library("nvJitLink", {1: "NVJITLINK_ERROR_UNRECOGNIZED_OPTION"}, extra="cu13")
        argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)]
        lib.declare({"nvJitLinkCreate": (STATUS, argtypes)})
        try:
            create = lib.unchecked("nvJitLinkCreate")
        except LibraryNotFoundError:
            pytest.skip("nvJitLink is not installed")
        assert create.argtypes == argtypes and create.restype is ctypes.c_int and create is not lib.nvJitLinkCreate
        handle, options = ctypes.c_void_p(), (ctypes.c_char_p * 1)(b"-no-such-option")
        status = create(ctypes.byref(handle), 1, options)
        assert status == 1  # returned, not raised
        lib.check("nvJitLinkCreate", 0)
        with pytest.raises(CUDALibraryError, match=r"NVJITLINK_ERROR_UNRECOGNIZED_OPTION \(1\): nvJitLink "
                                                   r"nvJitLinkCreate failed"):
            lib.check("nvJitLinkCreate", status)
        with pytest.raises(CUDALibraryError, match="NVJITLINK_ERROR_UNRECOGNIZED_OPTION"):
            lib.nvJitLinkCreate(ctypes.byref(handle), 1, options)  # the checked binding agrees

    def test_missing_library_says_what_to_install(self):
        lib = Library("cufft_does_not_exist", {}, extra="cu13")
        lib.declare({"cufftCreate": (STATUS, [])})
        with pytest.raises(LibraryNotFoundError, match=r"pip install -e '\.\[cu13\]'"):
            lib.cufftCreate()

    def test_undeclared_function(self):
        with pytest.raises(AttributeError, match="no declared function 'nope'"):
            Library("cufft", {}, extra="cu13").nope


class TestDevices:
    def test_no_gpu_is_a_clear_error(self, monkeypatch):
        if _cuda.is_available():
            pytest.skip("this machine has a GPU")
        with pytest.raises(NoDeviceError, match="needs an NVIDIA GPU"):
            _cuda.require_device(0)

    @pytest.mark.gpu
    def test_device_facts(self):
        assert _cuda.device_count() >= 1
        assert _cuda.compute_capability(0) >= (7, 0)
        assert _cuda.device_name(0)
        with pytest.raises(ValueError, match="out of range"):
            _cuda.require_device(_cuda.device_count())


def test_logger_is_named_mathpy():
    import logging
    assert logging.getLogger("mathpy") is mathpy._log.logger


def test_every_error_survives_pickling():
    """A process pool sends a worker's exception to the parent pickled; one that cannot be rebuilt kills the pool's
    result thread and the parent waits forever (CUDALibraryError could not: its arguments are not its message)."""
    import pickle

    errors = [CUDALibraryError("cufft", "cufftXtExec", 5, "CUFFT_INTERNAL_ERROR", "the plan was freed"),
              mathpy.UnsupportedLayoutError("copy it", permutation=(1, 0), axes=(1,)), NoDeviceError("no GPU"),
              LibraryNotFoundError("install cuFFT"), mathpy.InvalidPlanStateError("freed")]
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
