"""The cuFFT engine (mathpy.host.fft._cufft.CUFFTEngine) on a GPU, checked against NumPy.

Run on a GPU machine: ``python -m pytest tests/test_fft_cuda.py -m gpu -q`` (needs CuPy; skipped without a GPU).
Arrays are CuPy views with the layouts under test; the engine gets their raw pointers, as the API gives them.
"""

import gc
import types

import numpy as np
import pytest

from mathpy import _cuda
from mathpy._errors import CUDALibraryError, InvalidPlanStateError, UnsupportedLayoutError
from mathpy._execution import ExecutionCUDA
from mathpy.host.fft._layout import Transform, cufft_expressible, engine_layout

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy") if _cuda.is_available() else None
CUDA = ExecutionCUDA(0)
TOLERANCE = {np.float16: 3e-2, np.float32: 2e-5, np.float64: 1e-12}
RNG = np.random.default_rng(1234)


def engine(transform, stream=None, **kwargs):
    from mathpy import _packages
    from mathpy.host.fft._cufft import CUFFTEngine
    return CUFFTEngine(transform, execution=CUDA, allocator=_packages.get("cupy").on(0, stream), **kwargs)


def strides_of(array):
    return tuple(s // array.itemsize for s in array.strides)


def random(shape, dtype):
    dtype = np.dtype(dtype)
    x = RNG.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def expected(fft_type, x, axes, n, direction):
    """Unnormalised reference, computed in double precision."""
    x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    scale = np.prod(n)
    if fft_type == "C2C":
        return np.fft.fftn(x, axes=axes) if direction == -1 else np.fft.ifftn(x, axes=axes) * scale
    if fft_type == "R2C":
        return np.fft.rfftn(x, axes=axes)
    return np.fft.irfftn(x, s=n, axes=axes) * scale


def relative_error(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def view(base, make_view):
    """The same view of a host base and a device copy of it."""
    host = make_view(base)
    device = make_view(cp.asarray(base))
    return host, device


# (name, fft_type-independent base shape, view of the base, axes); R2C/C2R shrink the last axis as needed
LAYOUTS = [
    ("1d-batched", (16, 64), lambda a: a, (1,)),
    ("1d-axis0-fortran-batch", (64, 16), lambda a: a, (0,)),
    ("1d-transposed", (16, 64), lambda a: a.T, (0,)),
    ("1d-strided-padded", (16, 130), lambda a: a[:, 1:129:2], (1,)),
    ("1d-batch-between", (4, 48, 5), lambda a: a, (1,)),           # two batch groups: looped without callbacks
    ("2d", (8, 32, 24), lambda a: a, (1, 2)),
    ("2d-with-inner-batch", (32, 3, 24), lambda a: a, (0, 2)),      # batch axis inside the transform: embed
    ("2d-padded-rows", (6, 20, 40), lambda a: a[:, 2:18, 4:36], (1, 2)),
    ("3d", (3, 16, 8, 12), lambda a: a, (1, 2, 3)),
    ("3d-permuted-batch-last", (16, 8, 12, 3), lambda a: a, (0, 1, 2)),
]


def padded_copy(host):
    """A device copy of ``host`` inside a buffer one element larger along every axis: strides with embed > n."""
    buffer = cp.zeros(tuple(extent + 1 for extent in host.shape), host.dtype)
    inner = buffer[tuple(slice(0, extent) for extent in host.shape)]
    inner[...] = cp.asarray(host)
    return inner


def run(t, device_in, device_out, direction, **kwargs):
    plan = engine(t, **kwargs)
    try:
        plan.execute(device_in.data.ptr, device_out.data.ptr, direction, cp.cuda.get_current_stream().ptr)
        return cp.asnumpy(device_out)
    finally:
        plan.free()


@pytest.mark.parametrize("precision", [np.float32, np.float64])
@pytest.mark.parametrize("name,base_shape,make_view,axes", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
@pytest.mark.parametrize("direction", [-1, 1])
def test_c2c_layouts(precision, name, base_shape, make_view, axes, direction):
    """Input in the layout under test, output in the same kind of view of another buffer."""
    dtype = np.result_type(precision, np.complex64)
    x, dx = view(random(base_shape, dtype), make_view)
    out = make_view(cp.zeros(base_shape, dtype))
    t = Transform("C2C", precision, x.shape, strides_of(dx), out.shape, strides_of(out), axes)
    got = run(t, dx, out, direction)
    assert relative_error(got, expected("C2C", x, axes, t.n, direction)) < TOLERANCE[precision]


@pytest.mark.parametrize("precision", [np.float32, np.float64])
@pytest.mark.parametrize("name,base_shape,make_view,axes", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
def test_r2c_layouts(precision, name, base_shape, make_view, axes):
    """Real input in the layout under test, complex output padded along every axis."""
    x, dx = view(random(base_shape, precision), make_view)
    out_shape = list(x.shape)
    out_shape[axes[-1]] = x.shape[axes[-1]] // 2 + 1
    out = padded_copy(np.zeros(out_shape, np.result_type(precision, np.complex64)))
    t = Transform("R2C", precision, x.shape, strides_of(dx), out.shape, strides_of(out), axes)
    got = run(t, dx, out, -1)
    assert relative_error(got, expected("R2C", x, axes, t.n, -1)) < TOLERANCE[precision]


@pytest.mark.parametrize("precision", [np.float32, np.float64])
@pytest.mark.parametrize("name,base_shape,make_view,axes", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
def test_c2r_layouts(precision, name, base_shape, make_view, axes):
    """Hermitian complex input padded along every axis, real output in the layout under test."""
    logical = make_view(random(base_shape, np.float64))               # the real result
    n = tuple(logical.shape[a] for a in axes)
    spectrum = np.fft.rfftn(logical, axes=axes).astype(np.result_type(precision, np.complex64))
    device_in = padded_copy(spectrum)
    out = make_view(cp.zeros(base_shape, precision))
    t = Transform("C2R", precision, device_in.shape, strides_of(device_in), out.shape, strides_of(out), axes)
    got = run(t, device_in, out, 1)
    assert relative_error(got, logical * np.prod(n)) < TOLERANCE[precision]


def test_c2r_engine_says_it_overwrites_its_input():
    t = Transform("C2R", np.float32, (4, 33), (33, 1), (4, 64), (64, 1), (1,))
    plan = engine(t)
    assert plan.overwrites_input
    plan.free()


@pytest.mark.parametrize("fft_type", ["C2C", "R2C", "C2R"])
def test_half_precision_power_of_two(fft_type):
    batch, n = 8, 256
    if fft_type == "C2C":
        x = random((batch, n), np.complex64)
        dx = cp.asarray(np.stack([x.real, x.imag], -1).astype(np.float16))   # complex half: pairs of float16
        out = cp.empty((batch, n, 2), np.float16)
        t = Transform("C2C", np.float16, (batch, n), (n, 1), (batch, n), (n, 1), (1,))
        want = np.fft.fft(dx.get().astype(np.float32).view(np.complex64)[..., 0], axis=1)
    elif fft_type == "R2C":
        dx = cp.asarray(random((batch, n), np.float16))
        out = cp.empty((batch, n // 2 + 1, 2), np.float16)
        t = Transform("R2C", np.float16, (batch, n), (n, 1), (batch, n // 2 + 1), (n // 2 + 1, 1), (1,))
        want = np.fft.rfft(dx.get().astype(np.float64), axis=1)
    else:
        spectrum = np.fft.rfft(random((batch, n), np.float64), axis=1)
        dx = cp.asarray(np.stack([spectrum.real, spectrum.imag], -1).astype(np.float16))
        out = cp.empty((batch, n), np.float16)
        t = Transform("C2R", np.float16, (batch, n // 2 + 1), (n // 2 + 1, 1), (batch, n), (n, 1), (1,))
        half = dx.get().astype(np.float64)
        want = np.fft.irfft(half[..., 0] + 1j * half[..., 1], n=n, axis=1) * n
    plan = engine(t)
    try:
        plan.execute(dx.data.ptr, out.data.ptr, -1 if fft_type != "C2R" else 1, 0)
        got = cp.asnumpy(out).astype(np.float64)
    finally:
        plan.free()
    if got.ndim == 3:
        got = got[..., 0] + 1j * got[..., 1]
    assert relative_error(got, want) < TOLERANCE[np.float16]


def test_half_precision_rejects_other_lengths():
    t = Transform("C2C", np.float16, (4, 100), (100, 1), (4, 100), (100, 1), (1,))
    with pytest.raises(ValueError, match="power-of-two"):
        engine(t)


@pytest.mark.parametrize("precision", [np.float32, np.float64])
def test_in_place_c2c(precision):
    x = random((32, 128), np.result_type(precision, np.complex64))
    dx = cp.asarray(x)
    t = Transform("C2C", precision, x.shape, (128, 1), x.shape, (128, 1), (1,))
    plan = engine(t)
    plan.execute(dx.data.ptr, dx.data.ptr, -1, 0)
    got = cp.asnumpy(dx)
    plan.free()
    assert relative_error(got, np.fft.fft(x, axis=1)) < TOLERANCE[precision]


def test_in_place_r2c_padded():
    """The classic in-place R2C layout: rows of 2 * (n//2 + 1) reals hold n//2 + 1 complex results."""
    batch, n = 16, 64
    m = n // 2 + 1
    buffer = cp.zeros((batch, 2 * m), np.float32)
    x = random((batch, n), np.float32)
    buffer[:, :n] = cp.asarray(x)
    t = Transform("R2C", np.float32, (batch, n), (2 * m, 1), (batch, m), (m, 1), (1,))
    plan = engine(t)
    plan.execute(buffer.data.ptr, buffer.data.ptr, -1, 0)
    got = cp.asnumpy(buffer).view(np.complex64)
    plan.free()
    assert relative_error(got, np.fft.rfft(x, axis=1)) < TOLERANCE[np.float32]


def test_streams_and_repeated_execution():
    x = random((64, 256), np.complex64)
    dx, out = cp.asarray(x), cp.empty((64, 256), np.complex64)
    t = Transform("C2C", np.float32, x.shape, (256, 1), x.shape, (256, 1), (1,))
    plan = engine(t)
    want = np.fft.fft(x, axis=1)
    for stream in (cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True), cp.cuda.Stream.null):
        out.fill(0)
        cp.cuda.Device().synchronize()
        plan.execute(dx.data.ptr, out.data.ptr, -1, stream.ptr)
        stream.synchronize()
        assert relative_error(cp.asnumpy(out), want) < 2e-5
    plan.free()


def test_freed_engine():
    t = Transform("C2C", np.float32, (4, 64), (64, 1), (4, 64), (64, 1), (1,))
    plan = engine(t)
    plan.free()
    plan.free()  # idempotent
    assert plan.freed
    x = cp.zeros((4, 64), np.complex64)
    with pytest.raises(InvalidPlanStateError):
        plan.execute(x.data.ptr, x.data.ptr, -1, 0)


def test_unsupported_layout_is_refused_before_planning():
    # a reversed view: negative strides are not cuFFT-expressible; the API copies to engine_layout first
    t = Transform("C2C", np.float32, (4, 64), (64, -1), (4, 64), (64, 1), (1,))
    assert not cufft_expressible(t.input_shape, t.input_strides, t.axes)
    assert engine_layout(t.input_shape, t.input_strides, t.axes) == (64, 1)
    with pytest.raises(UnsupportedLayoutError):
        engine(t)


def device_memory():
    """(bytes of live CuPy arrays, cuFFT handles alive): this process's own figures. Global free device memory is
    no measure under pytest-xdist, where other processes allocate concurrently."""
    from mathpy.host.fft._cufft import live_handles
    return cp.get_default_memory_pool().used_bytes(), live_handles()


# C2C problems that may need a cuFFT workspace; which do depends on the cuFFT version (cuFFT 12.0 plans a prime
# length 2003 without one), so the tests take the first that does and check the size against cufftGetSize
WORKSPACE_CANDIDATES = [(4, 2003), (2, 1 << 20), (4, 1000003), (1, 1 << 24)]


def workspace_transform():
    """A C2C Transform whose plan needs a workspace (skip when cuFFT needs none for every candidate)."""
    import ctypes
    from mathpy.bindings import cufft
    for shape in WORKSPACE_CANDIDATES:
        t = Transform("C2C", np.float32, shape, (shape[1], 1), shape, (shape[1], 1), (1,))
        p = engine(t)
        try:
            size = ctypes.c_size_t()
            cufft.lib.cufftGetSize(p._resources.handle, ctypes.byref(size))
            assert p.workspace_bytes == size.value, (shape, p.workspace_bytes, size.value)
            if p.workspace_bytes:
                return t
        finally:
            p.free()
    pytest.skip(f"cuFFT {cufft.version()} needs no workspace for any of {WORKSPACE_CANDIDATES}")


def test_one_plan_on_two_streams_at_once():
    """A plan with a workspace, executed back to back on its home stream and on another one with no synchronisation
    between them: each stream gets its own workspace, so both results are right."""
    t = workspace_transform()
    home, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    xs = [cp.asarray(random(t.input_shape, np.complex64)) for _ in range(2)]
    outs = [cp.empty_like(x) for x in xs]
    cp.cuda.Device().synchronize()
    plan = engine(t, stream=home.ptr)
    try:
        for _ in range(20):
            plan.execute(xs[0].data.ptr, outs[0].data.ptr, -1, home.ptr)
            plan.execute(xs[1].data.ptr, outs[1].data.ptr, -1, other.ptr)
        home.synchronize()
        other.synchronize()
    finally:
        plan.free()
    for x, out in zip(xs, outs):
        assert relative_error(cp.asnumpy(out), np.fft.fft(cp.asnumpy(x), axis=1)) < 2e-5


def host_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_ten_thousand_plans_do_not_leak():
    x = cp.asarray(random((8, 64), np.complex64))
    out = cp.empty_like(x)
    with_workspace = workspace_transform()
    x2 = cp.asarray(random(with_workspace.input_shape, np.complex64))
    out2 = cp.empty_like(x2)
    transforms = [(Transform("C2C", np.float32, (8, 64), (64, 1), (8, 64), (64, 1), (1,)), x, out),
                  (with_workspace, x2, out2)]
    for t, a, b in transforms:  # warm up cuFFT's own one-time allocations
        p = engine(t)
        p.execute(a.data.ptr, b.data.ptr, -1, 0)
        p.free()
    cp.cuda.Device().synchronize()
    gc.collect()
    pool_before, device_before = device_memory()
    rss_before = host_rss()
    for i in range(10_000):
        t, a, b = transforms[i % 2]
        p = engine(t)
        p.execute(a.data.ptr, b.data.ptr, -1, 0)
        p.free()
    cp.cuda.Device().synchronize()
    gc.collect()
    pool_after, device_after = device_memory()
    rss_after = host_rss()
    assert pool_after == pool_before, (pool_before, pool_after)
    assert device_after == device_before, f"{device_after - device_before} cuFFT handles leaked"
    assert rss_after - rss_before <= 32 << 20, (rss_before, rss_after)


def test_dropped_engine_is_finalized():
    from mathpy.host.fft._cufft import live_handles
    pool = cp.get_default_memory_pool()
    t = workspace_transform()
    gc.collect()  # garbage of earlier tests must not be collected between the two measurements
    before, handles = pool.used_bytes(), live_handles()
    p = engine(t)
    assert p.workspace_bytes > 0 and pool.used_bytes() == before + p.workspace_bytes
    assert live_handles() == handles + 1
    del p
    gc.collect()
    assert pool.used_bytes() == before and live_handles() == handles


def test_failed_plan_leaves_nothing_allocated():
    """A store callback's LTO-IR handed over as a load callback: cuFFT's link finds no load symbol and planning
    fails; the handle is destroyed and no workspace is left behind."""
    pool = cp.get_default_memory_pool()
    gc.collect()
    before = pool.used_bytes()
    store = bound(epilog_times_two, "epilog", "complex64")
    mislabelled = types.SimpleNamespace(ltoir=store.ltoir, symbol=None, cufft_type=0, data_ptr=0, key="mislabelled")
    t = Transform("C2C", np.float32, (8, 64), (64, 1), (8, 64), (64, 1), (1,))
    with pytest.raises(CUDALibraryError):
        engine(t, prolog=mislabelled)
    gc.collect()
    assert pool.used_bytes() == before


# --- callbacks through the engine ------------------------------------------------------------------------------------

def bound(fn, fft_type, element_dtype, user_info=None):
    """What the API hands the engine: the compiled callback plus the user data's device pointer."""
    from mathpy.jit import compile_callback
    compiled = compile_callback(fn, fft_type, element_dtype, None if user_info is None else user_info.dtype)
    return types.SimpleNamespace(ltoir=compiled.ltoir, symbol=compiled.symbol,
                                 cufft_type=compiled.cufft_callback_type, data=user_info,
                                 data_ptr=0 if user_info is None else user_info.data.ptr, key=compiled.key)


THREE_F32, TWO_F32, TWO_F64 = np.float32(3), np.float32(2), np.float64(2)


def prolog_times_three(data, offset, info, unused):
    return data[offset] * THREE_F32


def epilog_times_two(data, offset, value, info, unused):
    data[offset] = value * TWO_F32


def epilog_times_two_double(data, offset, value, info, unused):
    data[offset] = value * TWO_F64


def epilog_filter(data, offset, value, info, unused):
    data[offset] = value * info[offset]


def test_c2c_prolog_and_epilog():
    x = random((128, 256), np.complex64)
    dx, out = cp.asarray(x), cp.empty((128, 256), np.complex64)
    t = Transform("C2C", np.float32, x.shape, (256, 1), x.shape, (256, 1), (1,))
    plan = engine(t, prolog=bound(prolog_times_three, "prolog", "complex64"),
                  epilog=bound(epilog_times_two, "epilog", "complex64"))
    plan.execute(dx.data.ptr, out.data.ptr, -1, 0)
    got = cp.asnumpy(out)
    plan.free()
    assert relative_error(got, 6 * np.fft.fft(x, axis=1)) < 2e-5


def test_epilog_with_user_data_follows_output_layout():
    """Epilog offsets are the output's element offsets: a filter laid out like the output multiplies elementwise."""
    x = random((64, 128), np.complex64)
    filt = random((64, 128), np.complex64)
    dx, out, dfilt = cp.asarray(x), cp.empty((64, 128), np.complex64), cp.asarray(filt)
    t = Transform("C2C", np.float32, x.shape, (128, 1), x.shape, (128, 1), (1,))
    plan = engine(t, epilog=bound(epilog_filter, "epilog", "complex64", dfilt))
    plan.execute(dx.data.ptr, out.data.ptr, -1, 0)
    got = cp.asnumpy(out)
    plan.free()
    assert relative_error(got, np.fft.fft(x, axis=1) * filt) < 2e-5


def test_r2c_epilog_double():
    x = random((32, 64), np.float64)
    dx, out = cp.asarray(x), cp.empty((32, 33), np.complex128)
    t = Transform("R2C", np.float64, x.shape, (64, 1), out.shape, (33, 1), (1,))
    plan = engine(t, epilog=bound(epilog_times_two_double, "epilog", "complex128"))
    plan.execute(dx.data.ptr, out.data.ptr, -1, 0)
    got = cp.asnumpy(out)
    plan.free()
    assert relative_error(got, 2 * np.fft.rfft(x, axis=1)) < 1e-12


def test_callback_type_mismatch_is_a_clear_error():
    t = Transform("R2C", np.float32, (4, 64), (64, 1), (4, 33), (33, 1), (1,))
    with pytest.raises(ValueError, match="compile it for float32"):
        engine(t, prolog=bound(prolog_times_three, "prolog", "complex64"))


def test_callbacks_refuse_looped_layouts():
    t = Transform("C2C", np.float32, (4, 48, 5), (240, 5, 1), (4, 48, 5), (240, 5, 1), (1,))
    with pytest.raises(UnsupportedLayoutError, match="callbacks"):
        engine(t, epilog=bound(epilog_times_two, "epilog", "complex64"))


def test_workspace_from_torch_allocator():
    torch = pytest.importorskip("torch")
    from mathpy.host.fft._cufft import CUFFTEngine
    stream = torch.cuda.current_stream().cuda_stream
    t = workspace_transform()
    x = torch.randn(*t.input_shape, dtype=torch.complex64, device="cuda")
    out = torch.empty_like(x)
    gc.collect()
    before = torch.cuda.memory_allocated()
    from mathpy import _packages
    plan = CUFFTEngine(t, execution=CUDA, allocator=_packages.get("torch").on(0, stream))
    assert plan.workspace_bytes > 0 and torch.cuda.memory_allocated() >= before + plan.workspace_bytes
    plan.execute(x.data_ptr(), out.data_ptr(), -1, stream)
    torch.cuda.synchronize()
    plan.free()
    assert torch.cuda.memory_allocated() == before
    assert relative_error(out.cpu().numpy(), np.fft.fft(x.cpu().numpy(), axis=1)) < 2e-5


@pytest.mark.parametrize("shape,axes", [((3, 1), (0, 1)), ((2, 5, 1), (1, 2)), ((4, 6, 1), (0, 1, 2))])
@pytest.mark.parametrize("fft_type", ["R2C", "C2R"])
def test_halved_axis_of_length_one(fft_type, shape, axes):
    """cuFFT 12 drops a trailing length-1 dimension of a multi-dimensional R2C/C2R plan (it then halved the axis
    before it: torch-cuda irfft2 with s=[3, 1] was wrong); the engine plans such transforms in two parts."""
    if fft_type == "R2C":
        x = random(shape, np.float32)
        out = cp.zeros(shape, np.complex64)
        t = Transform("R2C", np.float32, shape, strides_of(out), shape, strides_of(out), axes)
        got = run(t, cp.asarray(x), out, -1)
        want = np.fft.rfftn(x.astype(np.float64), axes=axes)
    else:
        spectrum = random(shape, np.complex64)
        out = cp.zeros(shape, np.float32)
        t = Transform("C2R", np.float32, shape, strides_of(out), shape, strides_of(out), axes)
        got = run(t, cp.asarray(spectrum), out, 1)
        n = tuple(shape[a] for a in axes)
        want = np.fft.irfftn(spectrum.astype(np.complex128), s=n, axes=axes) * np.prod(n)
    assert relative_error(got, want) < TOLERANCE[np.float32]
