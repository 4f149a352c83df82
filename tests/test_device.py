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
    # row-major fp32: vector tiles (16-byte rows of 4 k), lda padded by 4; col-major: strided tiles, padded by 1
    assert G.vector_tiles and G.lda == 36 and (G.a_size, G.b_size, G.c_size) == (128 * 36, 32 * 128, 128 * 128)
    assert G.shared_memory_size_ab == (128 * 36 + 32 * 128) * 4
    assert G.launch_bounds == (256, 1)  # 64 accumulators + 4 k of each A row and 4 B columns: one block per SM
    col = md.matmul(128, 128, 32, np.float32, a_arrangement="col_major")
    assert not col.vector_tiles and col.lda == 129 and col.launch_bounds == (256, 2)  # 64 fp32 accumulators
    assert not md.matmul(128, 128, 30, np.float32).vector_tiles  # k not a multiple of 4
    assert G.compute_dtype == np.float32
    h = md.matmul(64, 64, 64, np.float16)
    assert h.storage_dtype == np.float16 and h.compute_dtype == np.float32
    b = md.matmul(64, 64, 64, "bf16")
    assert b.precision == "bfloat16" and b.storage_dtype == np.uint16 and b.compute_dtype == np.float32
    assert md.matmul(16, 16, 16, np.float64).compute_dtype == np.float64
    assert md.matmul(128, 128, 16, np.float64).launch_bounds == (256, 1)  # 128 registers of accumulators alone


@pytest.mark.parametrize("args, kwargs, words", [
    ((0, 8, 8), {}, ["m=0", "1 to 512"]),
    ((8, 1024, 8), {}, ["n=1024", "1 to 512"]),
    ((8, 8, 8), {"precision": np.int32}, ["int32", "np.float16, 'bfloat16', np.float32, np.float64"]),
    ((8, 8, 8), {"precision": "tf32"}, ["'tf32'", "allowed"]),
    ((64, 64, 8), {"block_size": 100}, ["block_size=100", "allowed", "256"]),
    ((64, 64, 8), {"block_size": 2048}, ["block_size=2048", "allowed"]),
    ((128, 128, 64), {"precision": np.float32}, ["67584", "49152", "k-slice"]),
    ((64, 64, 8), {"a_arrangement": "diagonal"}, ["a_arrangement='diagonal'", "row_major"]),
    ((64, 64, 8), {"epilog": 3}, ["epilog=3"]),
    ((64, 64, 8), {"epilog": abs, "epilogue": abs}, ["epilog= only"]),
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


def test_matmul_shared_c_too_large_is_reported_after_other_functions_were_generated():
    G = md.matmul(128, 128, 16, np.float32)
    assert G.mma is G.mma  # generates every device function of the description
    for name in ("execute", "load_c", "store_c"):
        with pytest.raises(ValueError, match="store_accumulator_batched"):
            getattr(G, name)


# ---------------------------------------------------------------- PTX inspection (no GPU needed)
@pytest.fixture
def sm90(monkeypatch):
    """numba-cuda asks the current device for its compute capability when it compiles a device function that a
    kernel calls; without a GPU, answer sm_90 (the H200's)."""
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

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

    from _device_checks import fft_kernel

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

    from _device_checks import matmul_kernel

    G = md.matmul(64, 64, 32, precision, a_arrangement="col_major", tensor_cores=False)
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_kernel(G, 64).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)
    fma = "fma.rn.f64" if precision == np.float64 else "fma.rn.f32"
    assert len(re.findall(fma, ptx)) >= G.accumulator_size
    assert "mma.sync" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("precision, ptx_type, m, n, k, arrangement", [
    (np.float16, "f16", 64, 64, 32, "row_major"), ("bfloat16", "bf16", 128, 128, 16, "col_major"),
    ("bfloat16", "bf16", 48, 40, 16, "row_major"),
])
def test_matmul_tensor_core_ptx(sm90, precision, ptx_type, m, n, k, arrangement):
    """fp16/bf16 run mma.sync.m16n8k16 (fp32 accumulation) with fragments read from shared memory, accumulators in
    registers."""
    import numba

    from _device_checks import matmul_kernel

    G = md.matmul(m, n, k, precision, a_arrangement=arrangement)
    assert G.tensor_cores
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_kernel(G, 2 * k).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx), "fragments or accumulators spilled to local memory"
    mma = re.findall(rf"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{ptx_type}\.{ptx_type}\.f32", ptx)
    fragments = (G.warp_tile_m // 16) * (G.warp_tile_n // 8)
    assert len(mma) >= fragments and len(mma) % fragments == 0
    assert "ld.shared" in ptx
    if arrangement == "row_major":
        assert "ld.shared.u32" in ptx  # A fragment registers on the unaligned path: one 32-bit load each
    assert re.search(r"\bld(\.global)?\.u64", ptx) and "st.shared.u64" in ptx  # 8-byte operand copies
    # the aligned path: one ldmatrix.x4 per A fragment (.trans when A is stored k-major), one .x4.trans per two B
    # fragments (.x2.trans for an odd last one)
    loads = re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x(\d)(\.trans)?\.shared\.b16", ptx)
    a_loads = [x for x in loads if x == ("4", "" if arrangement == "row_major" else ".trans")]
    b_loads = [x for x in loads if x[1] == ".trans"]
    assert len(a_loads) >= G.warp_tile_m // 16 and len(b_loads) >= (G.warp_tile_n // 8 + 1) // 2, loads


@pytest.mark.slow
@pytest.mark.parametrize("arrangement", ["row_major", "col_major"])
def test_matmul_fp64_tensor_core_ptx(sm90, arrangement):
    """fp64 runs mma.sync.m8n8k4.f64 (the fp64 tensor cores) on fragments read from shared memory; the pipelined
    kernel copies B (and a row-major A) with 16-byte cp.async."""
    import numba

    from _device_checks import matmul_pipelined_kernel

    G = md.matmul(64, 64, 16, np.float64, a_arrangement=arrangement)
    assert G.tensor_cores and (G.warp_tile_m, G.warp_tile_n) == (32, 32) and G.accumulator_size == 32
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_pipelined_kernel(G, 64).py_func,
               (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)
    dmma = re.findall(r"mma\.sync\.aligned\.m8n8k4\.row\.col\.f64\.f64\.f64\.f64", ptx)
    fragments = (G.warp_tile_m // 8) * (G.warp_tile_n // 8)
    assert len(dmma) >= fragments and len(dmma) % fragments == 0
    copies = len(re.findall(r"cp\.async\.cg\.shared\.global", ptx))
    assert copies >= (2 if arrangement == "row_major" else 1) and "cp.async.wait_all" in ptx


@pytest.mark.slow
def test_matmul_16bit_copies_and_stores_are_vectorised(sm90):
    """fp16 tensor-core path: 16-byte cp.async copies of A and B, pairs of accumulators stored as one 32-bit store."""
    import numba

    from _device_checks import matmul_pipelined_kernel

    G = md.matmul(64, 64, 32, np.float16)
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_pipelined_kernel(G, 64).py_func,
               (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)) >= 2 and "cp.async.wait_all" in ptx
    assert len(re.findall(r"cvt\.rn\.f16x2\.f32", ptx)) >= G.accumulator_size // 2
    assert re.search(r"st(\.global)?\.u32", ptx)


@pytest.mark.slow
@pytest.mark.parametrize("kernel, precision, kb, stages", [("multistage", "float16", 32, 4),
                                                           ("multistage", "float64", 16, 6),
                                                           ("persistent", "float16", 32, 4)])
def test_matmul_multistage_kernel_keeps_slices_in_flight(sm90, kernel, precision, kb, stages):
    """The multistage kernel (and its persistent form, whose ring runs on across batch entries) closes one cp.async
    group per k-slice and waits for all but the newest stages - 2 (the assembler keeps one wait_group of the
    predicated set: its operand is a constant), and the shared memory it needs is over 48 KiB, so allow_shared_memory
    has something to do."""
    import numba

    import _device_checks as _checks

    make = _checks.matmul_multistage_kernel if kernel == "multistage" else _checks.matmul_persistent_kernel
    G = md.matmul(128, 128, kb, precision)
    assert stages * G.shared_memory_size_ab > 48 * 1024
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(make(G, 128, stages).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert "cp.async.commit_group" in ptx and f"cp.async.wait_group {stages - 2};" in ptx
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)) >= 4  # A and B, prologue and ring
    with pytest.raises(ValueError, match="stages=1"):
        make(G, 128, 1)
    with pytest.raises(ValueError, match="k_total=100"):
        make(G, 100, stages)


def test_allow_shared_memory_needs_a_byte_count():
    from mathpy.device._launch import allow_shared_memory

    with pytest.raises(ValueError, match="nbytes=-1"):
        allow_shared_memory(None, -1)


def test_matmul_tensor_core_descriptions():
    h = md.matmul(64, 64, 32, np.float16)
    assert h.tensor_cores and h.block_dim == (256, 1, 1) and (h.warp_m, h.warp_n) == (2, 4)
    assert (h.warp_tile_m, h.warp_tile_n) == (32, 16) and h.accumulator_size == 64 * 64 // 256 == h.tile_m * h.tile_n
    assert h.lda == 40 and h.ldb == 72 and h.b_size == 32 * 72 and h.a_size == 64 * 40
    assert h.shared_memory_size_ab == (64 * 40 + 32 * 72) * 2
    c = md.matmul(64, 64, 32, "bf16", a_arrangement="col_major")
    assert c.tensor_cores and c.lda == 72 and c.a_size == 32 * 72
    assert md.matmul(48, 40, 16, np.float16).block_size == 96  # 3 warps of 16 x 40
    assert not md.matmul(16, 48, 8, np.float16).tensor_cores  # k not a multiple of 16: CUDA cores
    assert not md.matmul(64, 64, 32, np.float16, tensor_cores=False).tensor_cores
    assert md.matmul(64, 64, 32, np.float16, tensor_cores=False).ldb == 64
    assert not md.matmul(64, 64, 32, np.float32).tensor_cores
    assert not md.matmul(64, 64, 32, np.float16, block_size=16).tensor_cores  # not whole warps: CUDA cores


@pytest.mark.parametrize("args, kwargs, words", [
    ((64, 64, 32), {"precision": np.float32, "tensor_cores": True}, ["tensor_cores=True", "float16, bfloat16 or float64"]),
    ((64, 64, 6), {"precision": np.float64, "tensor_cores": True}, ["k of 4", "k=6"]),
    ((64, 64, 8), {"precision": np.float16, "tensor_cores": True}, ["k of 16", "k=8"]),
    ((64, 60, 16), {"precision": "bf16", "tensor_cores": True}, ["n of 8", "n=60"]),
    ((64, 64, 16), {"precision": np.float16, "tensor_cores": True, "block_size": 100}, ["block_size=100", "allowed"]),
    ((64, 64, 16), {"precision": np.float16, "tensor_cores": "yes"}, ["tensor_cores='yes'", "True, False"]),
])
def test_matmul_tensor_core_bad_descriptions(args, kwargs, words):
    with pytest.raises(ValueError) as info:
        md.matmul(*args, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.slow
@pytest.mark.parametrize("size, precision, fft_type", [
    (256, np.float32, "r2c"), (256, np.float32, "c2r"), (64, np.float64, "r2c"), (96, np.float64, "c2r"),
    (15, np.float32, "c2r"), (1000, np.float32, "c2c"), (7, np.float32, "c2c"),
])
def test_fft_variants_compile_for_sm90(sm90, size, precision, fft_type):
    """The GPU code path (vector complex loads/stores, libdevice sincospi) types and compiles for every kind."""
    import numba

    from _device_checks import fft_kernel

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
def test_matmul_shared_and_epilog_compile_for_sm90(sm90, precision):
    import math

    import numba
    from numba import cuda

    from _device_checks import matmul_shared_kernel

    G = md.matmul(32, 32, 16, precision)
    st = numba.from_dtype(G.storage_dtype)
    ptx = _ptx(matmul_shared_kernel(G).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert not re.search(r"\b(ld|st)\.local", ptx)

    @cuda.jit(device=True)
    def act(x):
        return math.tanh(x)

    from _device_checks import matmul_kernel

    G2 = md.matmul(32, 32, 16, precision, epilog=act)
    ptx = _ptx(matmul_kernel(G2, 32).py_func, (st[:, :, :], st[:, :, :], st[:, :, :], numba.float64, numba.float64))
    assert "tanh" in ptx or "ex2" in ptx  # the epilog made it into the kernel
    with pytest.warns(DeprecationWarning, match="epilog="):
        assert md.matmul(32, 32, 16, precision, epilogue=act) is G2  # the deprecated spelling, the same description


# ---------------------------------------------------------------- tensor-core fragments, emulated on the CPU
class _WarpMMA:
    """``mma.sync.aligned.m16n8k16.row.col.f32`` as the PTX ISA defines it, for Python threads standing in for the
    lanes: every lane hands in its fragment registers, the warp meets at a barrier, each lane gets its part of D.
    Lane (g = lane // 4, t = lane % 4) holds A[g | g+8, 2t..2t+1 | 2t+8..2t+9], B[2t..2t+1 | 2t+8..2t+9, g] and
    C/D[g | g+8, 2t..2t+1]."""

    def __init__(self, warps, halves_to_float):
        import threading

        self.to_float = halves_to_float
        self.barriers = [threading.Barrier(32, timeout=30) for _ in range(warps)]
        self.slots = [[None] * 32 for _ in range(warps)]

    def __call__(self, lane_id, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        warp, lane = divmod(lane_id, 32)
        slots, barrier = self.slots[warp], self.barriers[warp]
        slots[lane] = (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        barrier.wait()
        A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
        for ln, regs in enumerate(slots):
            g, t = divmod(ln, 4)
            for reg, (r, kk) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
                A[r, kk], A[r, kk + 1] = self.to_float(regs[reg])
            for reg, kk in enumerate((2 * t, 2 * t + 8)):
                B[kk, g], B[kk + 1, g] = self.to_float(regs[4 + reg])
            C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1] = regs[6:]
        barrier.wait()  # everyone has read the slots before any lane reuses them
        D = A @ B + C
        g, t = divmod(lane, 4)
        return tuple(np.float32(v) for v in (D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]))


class _WarpLdmatrix:
    """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16`` as the PTX ISA defines it: lanes 8 j .. 8 j + 7
    give the addresses of the 8 rows of matrix j (16-byte aligned: an index that is a multiple of 8 values); lane l
    receives, in register j, row l // 4, values 2 (l % 4) and 2 (l % 4) + 1 of matrix j (``.trans``: of its
    transpose). Also checks that the 8 rows of each matrix fall in 8 different 16-byte bank groups (conflict-free)."""

    def __init__(self, warps, count, trans):
        import threading

        self.count, self.trans = count, trans
        self.barriers = [threading.Barrier(32, timeout=30) for _ in range(warps)]
        self.slots = [[None] * 32 for _ in range(warps)]
        self.conflicts = 0

    def __call__(self, lane_id, arr, index):
        warp, lane = divmod(lane_id, 32)
        slots, barrier = self.slots[warp], self.barriers[warp]
        slots[lane] = int(index)
        barrier.wait()
        regs = []
        for j in range(self.count):
            rows = slots[8 * j:8 * j + 8]
            assert all(r % 8 == 0 for r in rows), f"ldmatrix rows must be 16-byte aligned: {rows}"
            if len({(2 * r // 16) % 8 for r in rows}) < 8:
                self.conflicts += 1
            mat = np.array([[arr[r + c] for c in range(8)] for r in rows])
            if self.trans:
                mat = mat.T
            g, t = divmod(lane, 4)
            regs.append(int(mat[g, 2 * t]) | (int(mat[g, 2 * t + 1]) << 16))
        barrier.wait()
        return tuple(regs)


@pytest.mark.parametrize("m, n, k, precision, arrangement, block_size, ldmatrix", [
    (32, 16, 32, np.float16, "row_major", 64, True),
    (48, 40, 16, "bfloat16", "col_major", 96, True),
    (64, 64, 32, np.float16, "col_major", 256, True),
    (16, 16, 16, "bfloat16", "row_major", 32, True),
    (64, 48, 32, np.float16, "row_major", 128, False),   # arrays not 16-byte aligned: scalar fragment loads
    (32, 32, 16, "bfloat16", "col_major", 64, False),
])
def test_matmul_tensor_core_fragments_emulated(m, n, k, precision, arrangement, block_size, ldmatrix):
    """Runs the generated GPU source of mma() + store_accumulator() (the inline-PTX path, not the simulator's scalar
    stand-in) with one Python thread per lane and the PTX ISA's ldmatrix and mma.sync semantics: checks the fragment
    indexing (ldmatrix's lane addresses, or the scalar loads when the shared arrays are not 16-byte aligned), the warp
    grid and the accumulator ownership against A @ B, and that every ldmatrix is free of bank conflicts."""
    import threading
    import types as pytypes

    from _device_checks import bf16_bits, bf16_to_float32

    G = md.matmul(m, n, k, precision, a_arrangement=arrangement, block_size=block_size)
    assert G.tensor_cores and G.block_size == block_size
    G.mma  # generates G.source (the GPU variant: this process does not run the simulator)
    assert "MMA(" in G.source and "PACK(" in G.source and "LDSM4" in G.source
    bf16 = G.precision == "bfloat16"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    if bf16:
        a_bits, b_bits = bf16_bits(a), bf16_bits(b)
        a, b = bf16_to_float32(a_bits).astype(np.float64), bf16_to_float32(b_bits).astype(np.float64)
    else:
        a_bits, b_bits = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)
        a, b = a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64)
    smem_a = np.zeros(G.a_size, np.uint16)
    for i in range(m):
        for p in range(k):
            smem_a[i * G.lda + p if arrangement == "row_major" else p * G.lda + i] = a_bits[i, p]
    smem_b = np.zeros(G.b_size, np.uint16)
    for p in range(k):
        smem_b[p * G.ldb:p * G.ldb + n] = b_bits[p]

    def to_float(reg):
        lo, hi = np.array([int(reg) & 0xFFFF, int(reg) >> 16], np.uint16)
        if bf16:
            return bf16_to_float32(np.array([lo, hi]))
        return np.array([lo, hi], np.uint16).view(np.float16).astype(np.float64)

    local = threading.local()
    warp_mma = _WarpMMA(block_size // 32, to_float)
    loads = {name: _WarpLdmatrix(block_size // 32, count, trans)
             for name, count, trans in (("LDSM4", 4, False), ("LDSM4T", 4, True), ("LDSM2T", 2, True))}
    fake_cuda = pytypes.SimpleNamespace()

    class _Idx:
        @property
        def x(self):
            return local.tid

    fake_cuda.threadIdx = _Idx()
    ns = {
        "np": np, "cuda": fake_cuda, "COMPUTE": np.float32, "ZERO": np.float32(0), "EPILOGUE": None,
        "TOC": lambda v: bf16_to_float32(np.array([v], np.uint16))[0], "FROMC": lambda v: v,
        "PAIR": lambda arr, i: int(arr[i]) | (int(arr[i + 1]) << 16),
        "PACK": lambda arr, i, j: int(arr[i]) | (int(arr[j]) << 16),
        "MMA": lambda *regs: warp_mma(local.tid, *regs),
        "ALIGNED16": lambda arr: ldmatrix,
        **{name: (lambda w: lambda arr, i: w(local.tid, arr, i))(w) for name, w in loads.items()},
    }
    exec(compile(G.source, "<tensor-core source>", "exec"), ns)
    out = np.zeros(m * n, np.float64)
    errors = []

    def lane(tid):
        local.tid = tid
        try:
            acc = np.zeros(G.accumulator_size, np.float32)
            ns["mma"](smem_a, smem_b, acc)
            ns["store_accumulator"](1.0, acc, 0.0, out)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            for barrier in warp_mma.barriers + [b for w in loads.values() for b in w.barriers]:
                barrier.abort()

    threads = [threading.Thread(target=lane, args=(tid,)) for tid in range(block_size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=1e-5, atol=1e-4)
    assert all(w.conflicts == 0 for w in loads.values())
    assert ("LDSM4" in G.source) and (sum(w.slots[0][0] is not None for w in loads.values()) > 0) == ldmatrix
