"""CUFFTEngine's orchestration on the CPU, with cuFFT replaced by a recorder, the device by mathpy's device queries
answering "one GPU", and the workspace allocator by a recording array package (the engine's ``allocator`` seam):
call order, arguments, per-stream work areas, looped executes, rollback on failure, free() and the finalizer. The same
engine runs for real in tests/test_fft_cuda.py on a GPU."""

import contextlib
import ctypes
import gc
import types

import numpy as np
import pytest

from _fake_gpu import HostMemory, pretend_a_gpu
from mathpy import _runtime
from mathpy._errors import CUDALibraryError, InvalidPlanStateError, UnsupportedLayoutError
from mathpy._execution import ExecutionCUDA
from mathpy.bindings import cufft as real_cufft
from mathpy.bindings._types import DataType
from mathpy.host.fft import _cufft
from mathpy.host.fft._layout import Transform, cufft_params


class FakeCufft:
    """Records every call; ``fail`` names a function that returns CUFFT_INTERNAL_ERROR."""

    def __init__(self, workspace=4096, fail=None):
        self.calls, self.workspace, self.fail, self.next_handle = [], workspace, fail, 7
        self.lib = types.SimpleNamespace(**{name: self._recorder(name) for name in (
            "cufftCreate", "cufftDestroy", "cufftSetAutoAllocation", "cufftSetWorkArea", "cufftXtMakePlanMany")})
        self.check = real_cufft.check

    def _maybe_fail(self, name):
        if name == self.fail:
            raise CUDALibraryError("cufft", name, 5, "CUFFT_INTERNAL_ERROR")

    def _recorder(self, name):
        def call(*args):
            if name == "cufftCreate":
                args[0]._obj.value = self.next_handle
                self.calls.append((name,))
            elif name == "cufftXtMakePlanMany":
                (handle, rank, n, inembed, istride, idist, in_type, onembed, ostride, odist, out_type, batch,
                 work, exec_type) = args
                self.calls.append((name, handle, rank, tuple(n), inembed and tuple(inembed), istride, idist, in_type,
                                   onembed and tuple(onembed), ostride, odist, out_type, batch, exec_type))
                self._maybe_fail(name)
                work._obj.value = self.workspace
                return
            else:
                self.calls.append((name, *args))
            self._maybe_fail(name)
        return call

    def set_jit_callback(self, handle, symbol, buffer, size, callback_type, caller_info):
        self.calls.append(("cufftXtSetJITCallback", handle, symbol, bytes(buffer)[:size], callback_type,
                           caller_info[0]))
        self._maybe_fail("cufftXtSetJITCallback")

    def unchecked(self, name):
        def call(*args):
            self.calls.append((name, *[a.value if isinstance(a, ctypes.c_int) else a for a in args]))
            return 0
        return call


@pytest.fixture
def fake(monkeypatch):
    recorder = FakeCufft()
    monkeypatch.setattr(_cufft, "cufft", recorder)  # the library
    monkeypatch.setattr(_cufft, "_hot", {})          # its hot-path functions, made again from the recorder
    pretend_a_gpu(monkeypatch)
    monkeypatch.setattr(_runtime, "device_scope", lambda device_id: contextlib.nullcontext())
    memory = HostMemory()
    recorder.memory = memory
    recorder.allocations = memory.allocations
    return recorder


def make(t, stream=None, **kwargs):
    memory = _cufft.cufft.memory
    return _cufft.CUFFTEngine(t, execution=ExecutionCUDA(0), allocator=memory.on(0, stream), **kwargs)


C2C = Transform("C2C", np.float32, (8, 64), (64, 1), (8, 64), (64, 1), (1,))


def names(calls):
    return [c[0] for c in calls]


def test_plan_sequence_and_arguments(fake):
    engine = make(C2C, stream=11)
    assert names(fake.calls) == ["cufftCreate", "cufftSetAutoAllocation", "cufftXtMakePlanMany", "cufftSetWorkArea"]
    assert fake.calls[1] == ("cufftSetAutoAllocation", 7, 0)
    plan = fake.calls[2]
    # a contiguous batch is cuFFT's basic layout: NULL embeds, as torch and CuPy plan it
    assert plan == ("cufftXtMakePlanMany", 7, 1, (64,), None, 1, 64, DataType.C_32F, None, 1, 64, DataType.C_32F, 8,
                    DataType.C_32F)
    assert fake.allocations == [((4096,), np.dtype(np.uint8), 0, 11)]  # on the plan's (home) stream
    assert engine.workspace_bytes == 4096 and fake.calls[3][2] != 0
    engine.free()


@pytest.mark.parametrize("t,basic", [
    (C2C, True),
    (Transform("C2C", np.float32, (8, 64), (65, 1), (8, 64), (64, 1), (1,)), False),        # padded rows
    (Transform("C2C", np.float32, (8, 64), (1, 8), (8, 64), (1, 8), (1,)), False),          # istride 8
    (Transform("R2C", np.float32, (8, 64), (64, 1), (8, 33), (33, 1), (1,)), True),
    (Transform("R2C", np.float32, (8, 64), (66, 1), (8, 33), (33, 1), (1,)), False),        # padded real rows
    (Transform("C2R", np.float32, (4, 8, 33), (264, 33, 1), (4, 8, 64), (512, 64, 1), (1, 2)), True),
    (Transform("C2C", np.float32, (4, 8, 16), (128, 16, 1), (4, 8, 16), (128, 16, 1), (1, 2)), True),
    (Transform("C2C", np.float32, (4, 8, 16), (128, 16, 1), (4, 8, 16), (256, 16, 1), (1, 2)), False),
])
def test_null_embeds_only_for_the_basic_layout(fake, t, basic):
    make(t).free()
    plan = [c for c in fake.calls if c[0] == "cufftXtMakePlanMany"][0]
    assert (plan[4] is None and plan[8] is None) == basic
    assert (plan[4] is None) == (plan[8] is None)


@pytest.mark.parametrize("fft_type", ["R2C", "C2R"])
def test_halved_axis_of_length_one_is_planned_in_two_parts(fake, fft_type):
    """cuFFT drops a trailing length-1 dimension of a multi-dimensional R2C/C2R (wrong answers): two plans instead."""
    real, half = ((3, 1), (1, 1)), ((3, 1), (1, 1))
    t = Transform(fft_type, np.float32, *(real + half if fft_type == "R2C" else half + real), (0, 1))
    engine = make(t)
    plans = [c for c in fake.calls if c[0] == "cufftXtMakePlanMany"]
    assert [p[3] for p in plans] == ([(1,), (3,)] if fft_type == "R2C" else [(3,), (1,)])
    fake.calls.clear()
    engine.execute(1024, 2048, None, 0)
    execs = [c for c in fake.calls if c[0] == "cufftXtExec"]
    if fft_type == "C2R":
        assert [e[2:] for e in execs] == [(1024, 1024, 1), (1024, 2048, 1)]
    else:
        assert [e[2:] for e in execs] == [(1024, 2048, -1), (2048, 2048, -1)]
    engine.free()
    assert engine.freed
    assert names(fake.calls).count("cufftDestroy") == 2


def test_misaligned_real_pointer_runs_on_aligned_copies(fake, monkeypatch):
    copies = []
    monkeypatch.setattr(_runtime, "copy_device_to_device",
                        lambda dst, src, nbytes, stream: copies.append((dst, src, nbytes)))
    t = Transform("R2C", np.float32, (16, 64), (130, 2), (16, 33), (33, 1), (1,))
    engine = make(t)
    fake.calls.clear()
    engine.execute(4100, 8192, None, 5)      # the real input 4 bytes past an 8-byte boundary
    (execute,) = [c for c in fake.calls if c[0] == "cufftXtExec"]
    assert execute[2] % 8 == 0 and execute[2] != 4100 and execute[3] == 8192
    assert copies == [(execute[2], 4100, (15 * 130 + 63 * 2 + 1) * 4)]
    engine.free()


@pytest.mark.parametrize("fft_type,precision,types_", [
    ("R2C", np.float64, (DataType.R_64F, DataType.C_64F, DataType.C_64F)),
    ("C2R", np.float32, (DataType.C_32F, DataType.R_32F, DataType.C_32F)),
    ("C2C", np.float16, (DataType.C_16F, DataType.C_16F, DataType.C_16F)),
])
def test_data_types(fake, fft_type, precision, types_):
    shapes = {"R2C": ((4, 64), (4, 33)), "C2R": ((4, 33), (4, 64)), "C2C": ((4, 64), (4, 64))}[fft_type]
    (i, o) = shapes
    t = Transform(fft_type, precision, i, (i[1], 1), o, (o[1], 1), (1,))
    make(t).free()
    plan = [c for c in fake.calls if c[0] == "cufftXtMakePlanMany"][0]
    assert (plan[7], plan[11], plan[13]) == types_
    assert plan[3] == (64,)


def test_callbacks_are_set_before_planning(fake):
    prolog = types.SimpleNamespace(ltoir=b"PROLOG-IR", symbol=None, cufft_type=0, data_ptr=0, key="p")
    epilog = types.SimpleNamespace(ltoir=b"EPILOG-IR", symbol="my_store", cufft_callback_type=4, data_ptr=0xABC0,
                                   key="e")
    engine = make(C2C, prolog=prolog, epilog=epilog)
    assert names(fake.calls)[:4] == ["cufftCreate", "cufftXtSetJITCallback", "cufftXtSetJITCallback",
                                     "cufftSetAutoAllocation"]
    assert fake.calls[1][1:] == (7, None, b"PROLOG-IR", 0, None)
    assert fake.calls[2][1:] == (7, b"my_store", b"EPILOG-IR", 4, 0xABC0)
    engine.free()


def test_callback_of_the_wrong_type_is_refused_before_anything(fake):
    t = Transform("R2C", np.float32, (4, 64), (64, 1), (4, 33), (33, 1), (1,))
    complex_load = types.SimpleNamespace(ltoir=b"x", symbol=None, cufft_type=0, data_ptr=0)
    with pytest.raises(ValueError, match="float32"):
        make(t, prolog=complex_load)
    real_load = types.SimpleNamespace(ltoir=b"x", symbol=None, cufft_type=2, data_ptr=0)
    with pytest.raises(ValueError, match="epilog"):
        make(t, epilog=real_load)
    assert fake.calls == []


def test_half_precision_rules(fake):
    t = Transform("C2C", np.float16, (4, 100), (100, 1), (4, 100), (100, 1), (1,))
    with pytest.raises(ValueError, match="power-of-two"):
        make(t)
    t = Transform("C2C", np.float16, (4, 64), (64, 1), (4, 64), (64, 1), (1,))
    with pytest.raises(ValueError, match="no half-precision"):
        make(t, epilog=types.SimpleNamespace(ltoir=b"x", symbol=None, cufft_type=4, data_ptr=0))
    strided = Transform("R2C", np.float16, (64, 4), (4, 1), (33, 4), (4, 1), (0,))
    with pytest.raises(UnsupportedLayoutError, match="unit-stride"):
        make(strided)
    strided = Transform("C2R", np.float16, (33, 4), (4, 1), (64, 4), (4, 1), (0,))
    with pytest.raises(UnsupportedLayoutError, match="unit-stride"):
        make(strided)
    assert fake.calls == []


def test_unexpressible_layout_is_refused_before_anything(fake):
    t = Transform("C2C", np.float32, (8, 64), (64, -1), (8, 64), (64, 1), (1,))
    with pytest.raises(UnsupportedLayoutError):
        make(t)
    looped = Transform("C2C", np.float32, (4, 48, 5), (240, 5, 1), (4, 48, 5), (240, 5, 1), (1,))
    with pytest.raises(UnsupportedLayoutError):
        make(looped, epilog=types.SimpleNamespace(ltoir=b"x", symbol=None, cufft_type=4, data_ptr=0))
    assert fake.calls == []


@pytest.mark.parametrize("failing", ["cufftXtSetJITCallback", "cufftSetAutoAllocation", "cufftXtMakePlanMany",
                                     "cufftSetWorkArea"])
def test_failed_plan_destroys_the_handle(fake, failing):
    fake.fail = failing
    prolog = types.SimpleNamespace(ltoir=b"IR", symbol=None, cufft_type=0, data_ptr=0)
    with pytest.raises(CUDALibraryError):
        make(C2C, prolog=prolog)
    assert names(fake.calls)[-1] == "cufftDestroy" and fake.calls[-1][1] == 7
    assert names(fake.calls).count("cufftDestroy") == 1


def test_execute_sets_the_stream_only_when_it_changes(fake):
    engine = make(C2C, stream=5)
    fake.calls.clear()
    engine.execute(1000, 2000, -1, 5)
    engine.execute(1000, 2000, 1, 5)
    assert fake.calls == [("cufftSetStream", 7, 5), ("cufftXtExec", 7, 1000, 2000, -1),
                          ("cufftXtExec", 7, 1000, 2000, 1)]
    engine.free()


def test_other_streams_get_a_workspace_of_their_own(fake):
    """One plan serves every stream: an execute on a stream other than the plan's home one takes a workspace from the
    pool in that stream's order, so executes on two streams never share scratch memory and nothing waits."""
    engine = make(C2C, stream=5)
    home = [c for c in fake.calls if c[0] == "cufftSetWorkArea"][-1][2]
    fake.calls.clear()
    engine.execute(1000, 3000, -1, 6)
    assert fake.allocations[-1] == ((4096,), np.dtype(np.uint8), 0, 6)  # allocated in stream 6's order
    (stream, area, execute) = fake.calls
    assert stream == ("cufftSetStream", 7, 6) and area[0] == "cufftSetWorkArea" and area[2] != home
    assert execute == ("cufftXtExec", 7, 1000, 3000, -1)
    fake.calls.clear()
    engine.execute(1000, 3000, -1, 5)  # back home: the plan's own workspace again
    assert fake.calls == [("cufftSetStream", 7, 5), ("cufftSetWorkArea", 7, home), ("cufftXtExec", 7, 1000, 3000, -1)]
    engine.free()
    assert "cudaStreamSynchronize" not in names(fake.calls)  # its workspace was only used on its own stream


def test_looped_batch_executes_at_byte_offsets(fake):
    t = Transform("C2C", np.float64, (4, 48, 5), (240, 5, 1), (4, 48, 5), (240, 5, 1), (1,))
    params = cufft_params(t)
    assert params.batch == 5 and params.loops == ((4, 240, 240),)
    engine = make(t)
    fake.calls.clear()
    engine.execute(0, 10_000_000, -1, 0)
    execs = [c for c in fake.calls if c[0] == "cufftXtExec"]
    assert [(c[2], c[3]) for c in execs] == [(k * 240 * 16, 10_000_000 + k * 240 * 16) for k in range(4)]
    engine.free()


def test_free_is_idempotent_and_final(fake):
    engine = make(C2C)
    engine.free()
    engine.free()
    assert names(fake.calls).count("cufftDestroy") == 1 and engine.freed
    with pytest.raises(InvalidPlanStateError):
        engine.execute(1, 2, -1, 0)
    assert "freed" in repr(engine)


def test_dropped_engine_is_destroyed_by_the_finalizer(fake):
    make(C2C)
    gc.collect()
    assert names(fake.calls).count("cufftDestroy") == 1


def test_no_workspace_when_cufft_needs_none(fake):
    fake.workspace = 0
    engine = make(C2C)
    assert fake.allocations == [] and "cufftSetWorkArea" not in names(fake.calls)
    engine.free()


def test_streams_need_nothing_without_a_workspace(fake):
    fake.workspace = 0
    engine = make(C2C)
    engine.execute(1, 2, -1, 5)
    engine.execute(1, 2, -1, 6)
    assert "cufftSetWorkArea" not in names(fake.calls) and fake.allocations == []
    engine.free()


def test_binding_symbols_resolve_where_cufft_is_installed():
    """Every declared function exists in the installed libcufft (no GPU needed to load it)."""
    from mathpy._errors import LibraryNotFoundError
    try:
        real_cufft.lib.cdll
    except LibraryNotFoundError:
        pytest.skip("libcufft is not installed here")
    version = real_cufft.version()
    assert version >= 11000
    jit = "cufftXtSetJITCallback" if version >= 12000 else "cufftXtSetJITCallback_12_7"
    for name in ("cufftCreate", "cufftDestroy", "cufftSetAutoAllocation", "cufftSetWorkArea", "cufftSetStream",
                 "cufftGetVersion", "cufftGetProperty", "cufftXtMakePlanMany", "cufftXtExec", jit):
        assert real_cufft.lib.has(name), name
    assert real_cufft.unchecked("cufftXtExec").restype is ctypes.c_int


def test_executor_is_one_call_and_falls_back(fake):
    engine = make(C2C)
    run = engine.executor()
    run(1024, 2048, -1, 5)                          # first call: sets the stream through execute()
    fake.calls.clear()
    run(1024, 2048, 1, 5)
    assert fake.calls == [("cufftXtExec", 7, 1024, 2048, 1)]
    run(1024, 2048, -1, 6)                          # another stream: execute() sets it and a workspace for it
    assert ("cufftSetStream", 7, 6) in fake.calls
    fake.calls.clear()
    allocated = len(fake.allocations)
    run(1024, 2048, -1, 6)                          # and again: its workspace is per execute, not kept
    assert len(fake.allocations) == allocated + 1 and names(fake.calls)[-1] == "cufftXtExec"
    engine.free()
    with pytest.raises(InvalidPlanStateError):
        run(1024, 2048, -1, 6)


def test_free_inside_an_execute_waits_for_it_and_a_freed_plan_never_runs(fake):
    """A free() that runs inside an execute on the same thread (a finalizer run by the workspace allocation, say)
    destroys the plan when that execute ends, not under it; afterwards the executor's one-call path does not run the
    freed plan (InvalidPlanStateError: the stateless calls then plan again)."""
    engine = make(C2C, stream=0)
    run = engine.executor()
    with engine.lock:
        run(1024, 2048, -1, 0)                      # the home stream: the executor's one-call path is ready for it
    allocate = fake.memory._empty

    def allocate_and_free(*args):
        engine.free()
        assert "cufftDestroy" not in names(fake.calls)  # not under the execute that is allocating
        return allocate(*args)
    fake.memory._empty = allocate_and_free
    fake.calls.clear()
    with engine.lock:
        run(1024, 2048, -1, 5)                      # another stream: a workspace is allocated inside the execute
    assert names(fake.calls)[-2:] == ["cufftXtExec", "cufftDestroy"] and engine.freed
    fake.memory._empty = allocate
    other = make(C2C, stream=0)
    run = other.executor()
    with other.lock:
        run(1024, 2048, -1, 0)                      # ready on the home stream: the next call would be one cufftXtExec
    other.free()                                    # (an eviction on another thread)
    fake.calls.clear()
    with other.lock, pytest.raises(InvalidPlanStateError):
        run(1024, 2048, -1, 0)
    assert fake.calls == []
