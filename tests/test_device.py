"""Host-side tests of mathpy.device: validation, description attributes, and the PTX the GPU would run
(compiled for sm_90 without a GPU). Device code itself runs in tests/test_device_sim.py (simulator) and
tests/test_device_gpu.py (real GPU)."""

import re

import numpy as np
import pytest

import mathpy.device as md


# ---------------------------------------------------------------- FFT descriptions
def test_fft_description_attributes():
    FFT = md.fft(size=1024, precision=np.float32, direction="forward")
    assert FFT.elements_per_thread == 16 and FFT.storage_size == 16
    assert FFT.block_dim == (64, FFT.ffts_per_block, 1)
    assert FFT.block_size == 64 * FFT.ffts_per_block
    assert FFT.radices == [16, 16, 4]
    assert FFT.shared_memory_size == FFT.ffts_per_block * 2 * (1023 + 31 + 1) * 4
    assert FFT.shared_memory_size <= 48 * 1024
    assert FFT.grid_dim(10) == (-(-10 // FFT.ffts_per_block), 1, 1)
    assert FFT.complex_dtype == np.complex64 and FFT.real_dtype == np.float32


def test_fft_description_is_cached():
    a = md.fft(size=64, precision=np.float32)
    b = md.fft(size=64, precision="float32", direction="forward", fft_type="c2c")
    assert a is b
    assert md.fft(size=64, precision=np.complex128).real_dtype == np.float64


@pytest.mark.parametrize("fft_type, n_in, n_out, in_dtype, out_dtype", [
    ("r2c", 256, 129, np.float32, np.complex64),
    ("c2r", 129, 256, np.complex64, np.float32),
])
def test_fft_real_transform_shapes(fft_type, n_in, n_out, in_dtype, out_dtype):
    FFT = md.fft(size=256, fft_type=fft_type)
    assert FFT.direction == ("forward" if fft_type == "r2c" else "inverse")
    assert (FFT.input_length, FFT.output_length) == (n_in, n_out)
    assert (FFT.input_dtype, FFT.output_dtype) == (np.dtype(in_dtype), np.dtype(out_dtype))
    # even sizes run a complex FFT of half the size; the extra slot carries the Nyquist element
    assert FFT.packed and FFT.threads_per_fft * FFT.elements_per_thread == 128
    assert FFT.storage_size == FFT.elements_per_thread + 1
    odd = md.fft(size=15, fft_type=fft_type)
    assert not odd.packed and odd.storage_size == odd.elements_per_thread == 15


def test_fft_sync_scope():
    assert md.fft(size=256).sync_scope == "warp"  # 32 threads per FFT
    assert md.fft(size=1024).sync_scope == "block"
    assert md.fft(size=64, ffts_per_block=3).sync_scope == "block"  # 24 threads: a partial warp


def test_fft_mixed_radix_sizes():
    assert md.fft(size=384).radices == [12, 4, 4, 2]
    assert md.fft(size=1000).radices == [10, 10, 10]
    assert md.fft(size=7).block_dim[0] == 1 and md.fft(size=7).radices == [7]
    assert md.fft(size=64).elements_per_thread == 8  # powers of two keep their tuned defaults


def test_fft_large_sizes_fit_shared_memory():
    d64 = md.fft(size=4096, precision=np.float64)
    assert d64.shared_layout == "split" and d64.shared_memory_size <= 48 * 1024
    assert md.fft(size=8192, precision=np.float32).shared_layout == "split"
    assert md.fft(size=8, precision=np.float32).shared_memory_size == 0  # one thread per FFT: no exchange


@pytest.mark.parametrize("kwargs, words", [
    ({"size": 22}, ["size=22", "prime factors", "4096"]),
    ({"size": 17 * 64}, ["size=1088", "2, 3, 5, 7"]),
    ({"size": 1}, ["size=1", "allowed"]),
    ({"size": 16384}, ["size=16384", "8192"]),
    ({"size": 2.0}, ["size=2.0", "integer"]),
    ({"size": 64, "precision": np.float16}, ["float16", "np.float32 or np.float64"]),
    ({"size": 64, "direction": "backward"}, ["direction='backward'", "'forward', 'inverse'"]),
    ({"size": 64, "fft_type": "r2r"}, ["fft_type='r2r'", "'c2c', 'r2c', 'c2r'"]),
    ({"size": 64, "fft_type": "r2c", "direction": "inverse"}, ["'inverse'", "'forward'"]),
    ({"size": 64, "fft_type": "c2r", "direction": "forward"}, ["'forward'", "'inverse'"]),
    ({"size": 64, "elements_per_thread": 3}, ["elements_per_thread=3", "[2, 4, 8, 16]"]),
    ({"size": 96, "elements_per_thread": 16}, ["elements_per_thread=16", "[6, 12]"]),
    ({"size": 4, "elements_per_thread": 8}, ["elements_per_thread=8", "[2, 4]"]),
    ({"size": 4096, "elements_per_thread": 2}, ["elements_per_thread=2", "[4, 8, 16]"]),
    ({"size": 1024, "ffts_per_block": 17}, ["ffts_per_block=17", "1 to 16"]),
    ({"size": 64, "ffts_per_block": 0}, ["ffts_per_block=0", "allowed"]),
    ({"size": 4096, "precision": np.float64, "ffts_per_block": 2}, ["shared memory", "49152", "at most 1"]),
])
def test_fft_bad_descriptions(kwargs, words):
    with pytest.raises(ValueError) as info:
        md.fft(**kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


# ---------------------------------------------------------------- GEMM descriptions
def test_matmul_description_attributes():
    G = md.matmul(128, 128, 32, np.float32)
    assert G.block_dim == (256, 1, 1)
    assert (G.tile_m, G.tile_n, G.accumulator_size) == (8, 8, 64)
    assert G.lda == 33 and (G.a_size, G.b_size, G.c_size) == (128 * 33, 32 * 128, 128 * 128)
    assert G.shared_memory_size_ab == (128 * 33 + 32 * 128) * 4
    assert md.matmul(128, 128, 32, np.float32, a_arrangement="col_major").lda == 129
    assert G.compute_dtype == np.float32
    h = md.matmul(64, 64, 64, np.float16)
    assert h.storage_dtype == np.float16 and h.compute_dtype == np.float32
    b = md.matmul(64, 64, 64, "bf16")
    assert b.precision == "bfloat16" and b.storage_dtype == np.uint16 and b.compute_dtype == np.float32
    assert md.matmul(16, 16, 16, np.float64).compute_dtype == np.float64


@pytest.mark.parametrize("args, kwargs, words", [
    ((0, 8, 8), {}, ["m=0", "1 to 512"]),
    ((8, 1024, 8), {}, ["n=1024", "1 to 512"]),
    ((8, 8, 8), {"precision": np.int32}, ["int32", "np.float16, 'bfloat16', np.float32, np.float64"]),
    ((8, 8, 8), {"precision": "tf32"}, ["'tf32'", "allowed"]),
    ((64, 64, 8), {"block_size": 100}, ["block_size=100", "allowed", "256"]),
    ((64, 64, 8), {"block_size": 2048}, ["block_size=2048", "allowed"]),
    ((128, 128, 64), {"precision": np.float32}, ["66048", "49152", "k-slice"]),
    ((64, 64, 8), {"a_arrangement": "diagonal"}, ["a_arrangement='diagonal'", "row_major"]),
    ((64, 64, 8), {"epilogue": 3}, ["epilogue=3"]),
])
def test_matmul_bad_descriptions(args, kwargs, words):
    with pytest.raises(ValueError) as info:
        md.matmul(*args, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_matmul_shared_c_too_large_is_reported_before_compiling():
    G = md.matmul(128, 128, 16, np.float32)  # A + B fit (16 KiB); A + B + C do not (80 KiB)
    with pytest.raises(ValueError, match="store_accumulator_batched"):
        G.execute


# ---------------------------------------------------------------- PTX inspection (no GPU needed)
@pytest.fixture
def sm90(monkeypatch):
    """numba-cuda asks the current device for its compute capability when it compiles a device function that a
    kernel calls; without a GPU, answer sm_90 (the H200's)."""
    from mathpy._compat import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = (9, 0)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: _Device())


def _ptx(kernel_fn, argtypes):
    from numba import cuda

    ptx, _ = cuda.compile_ptx(kernel_fn, argtypes, cc=(9, 0))
    return ptx


@pytest.mark.slow
@pytest.mark.parametrize("size, precision", [(256, np.float32), (1024, np.float32), (64, np.float64)])
def test_fft_ptx_keeps_data_in_registers(sm90, size, precision):
    import numba

    from mathpy.device._checks import fft_kernel

    FFT = md.fft(size=size, precision=precision)
    ct = numba.from_dtype(FFT.complex_dtype)
    ptx = _ptx(fft_kernel(FFT).py_func, (ct[:, :], ct[:, :]))
    assert not re.search(r"\b(ld|st)\.local", ptx), "register arrays spilled to local memory"
    assert "call.uni" not in ptx and "call " not in ptx, "device functions were not inlined"
    if precision == np.float32:
        assert ".f64" not in ptx, "single-precision FFT promoted to double"
    assert "ld.shared" in ptx and "st.shared" in ptx
    if FFT.sync_scope == "warp":  # an FFT inside one warp synchronizes the warp only
        assert "bar.warp.sync" in ptx and "bar.sync" not in ptx
    else:
        assert "bar.sync" in ptx


@pytest.mark.slow
@pytest.mark.parametrize("precision", [np.float32, np.float16, "bfloat16", np.float64])
def test_matmul_ptx_keeps_accumulators_in_registers(sm90, precision):
    import numba

    from mathpy.device._checks import matmul_kernel

    G = md.matmul(64, 64, 32, precision, a_arrangement="col_major")
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_kernel(G, 64).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)
    fma = "fma.rn.f64" if precision == np.float64 else "fma.rn.f32"
    assert len(re.findall(fma, ptx)) >= G.accumulator_size


@pytest.mark.slow
@pytest.mark.parametrize("size, precision, fft_type", [
    (256, np.float32, "r2c"), (256, np.float32, "c2r"), (64, np.float64, "r2c"), (96, np.float64, "c2r"),
    (15, np.float32, "c2r"), (1000, np.float32, "c2c"), (7, np.float32, "c2c"),
])
def test_fft_variants_compile_for_sm90(sm90, size, precision, fft_type):
    """The GPU code path (vector complex loads/stores, libdevice sincospi) types and compiles for every kind."""
    import numba

    from mathpy.device._checks import fft_kernel

    FFT = md.fft(size=size, precision=precision, fft_type=fft_type)
    it, ot = numba.from_dtype(FFT.input_dtype), numba.from_dtype(FFT.output_dtype)
    ptx = _ptx(fft_kernel(FFT).py_func, (it[:, :], ot[:, :]))
    assert not re.search(r"\b(ld|st)\.local", ptx)
    if FFT.complex_dtype == np.complex64:
        assert "ld.v2.f32" in ptx or "st.v2.f32" in ptx or "ld.global.v2.f32" in ptx


@pytest.mark.slow
def test_fused_convolution_kernel_compiles_for_sm90(sm90):
    import numba
    from numba import cuda

    FWD = md.fft(size=1024, precision=np.float32)
    INV = md.fft(size=1024, precision=np.float32, direction="inverse")
    storage = FWD.storage_size

    def conv(x, f, y):
        td = cuda.local.array(storage, numba.complex64)
        sm = cuda.shared.array(0, numba.float32)
        b = FWD.batch_index()
        FWD.load(x, td, b)
        FWD.execute(td, sm)
        FWD.multiply(td, f)
        INV.execute(td, sm)
        INV.store(td, y, b)

    c64 = numba.complex64
    ptx = _ptx(conv, (c64[:, :], c64[:], c64[:, :]))
    assert not re.search(r"\b(ld|st)\.local", ptx) and ".f64" not in ptx
    assert "ld.global.nc.v2.f32" in ptx  # the filter goes through the read-only cache
    assert "st.v2.f32" in ptx  # one vector store per complex64 element


@pytest.mark.slow
@pytest.mark.parametrize("precision", [np.float32, np.float16, "bfloat16", np.float64])
def test_matmul_shared_and_epilogue_compile_for_sm90(sm90, precision):
    import math

    import numba
    from numba import cuda

    from mathpy.device._checks import matmul_shared_kernel

    G = md.matmul(32, 32, 16, precision)
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_shared_kernel(G).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)

    @cuda.jit(device=True)
    def act(x):
        return math.tanh(x)

    from mathpy.device._checks import matmul_kernel

    G2 = md.matmul(32, 32, 16, precision, epilogue=act)
    ptx = _ptx(matmul_kernel(G2, 32).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert "tanh" in ptx or "ex2" in ptx  # the epilogue made it into the kernel
