"""Reference checks of the block FFT and GEMM against NumPy: one kernel per case, run on the GPU or under numba's CUDA
simulator. Used by the tests (the simulator runs in a subprocess: ``python tests/_device_checks.py``), the GPU tests
and the benchmark's correctness checks.
"""

import functools
import json
import sys
import time

import numpy as np

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()
import numba  # noqa: E402  (after the NumPy fix; kernels need `cuda` as a module global for the simulator)
from numba import cuda  # noqa: E402

__all__ = ["fft_kernel", "convolution_kernel", "run_fft_case", "run_convolution_case", "matmul_kernel",
           "matmul_pipelined_kernel", "matmul_multistage_kernel", "matmul_shared_kernel", "run_matmul_case",
           "bf16_bits", "bf16_to_float32", "TOLERANCE"]


def bf16_bits(x):
    """float array -> uint16 bf16 bit patterns (round to nearest even)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_float32(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


@functools.lru_cache(maxsize=None)
def fft_kernel(FFT):
    """A batched kernel ``kernel(x, y)`` doing load / execute / store with the description *FFT*."""
    storage = FFT.storage_size
    value_type = numba.from_dtype(FFT.complex_dtype)
    real_type = numba.from_dtype(FFT.real_dtype)

    @cuda.jit
    def kernel(x, y):
        thread_data = cuda.local.array(storage, value_type)
        shared_mem = cuda.shared.array(0, real_type)
        batch = FFT.batch_index()
        FFT.load(x, thread_data, batch)
        FFT.execute(thread_data, shared_mem)
        FFT.store(thread_data, y, batch)

    return kernel


def fft_reference(FFT, x):
    n = FFT.size
    x = np.asarray(x)
    if FFT.fft_type == "r2c":
        return np.fft.rfft(x.astype(np.float64), axis=-1)
    if FFT.fft_type == "c2r":
        return np.fft.irfft(x.astype(np.complex128), n=n, axis=-1) * n
    if FFT.direction == "forward":
        return np.fft.fft(x.astype(np.complex128), axis=-1)
    return np.fft.ifft(x.astype(np.complex128), axis=-1) * n


def fft_input(FFT, batch, seed=0):
    rng = np.random.default_rng(seed)
    shape = (batch, FFT.input_length)
    if FFT.fft_type == "r2c":
        return rng.standard_normal(shape).astype(FFT.real_dtype)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(FFT.complex_dtype)


def run_fft_case(size, precision, fft_type="c2c", direction=None, batch=3, **kw):
    """Run one block FFT case (GPU or simulator) and return the max error relative to the largest reference value."""
    from mathpy.device import fft

    FFT = fft(size=size, precision=precision, fft_type=fft_type, direction=direction, **kw)
    x = fft_input(FFT, batch)
    y = np.zeros((batch, FFT.output_length), FFT.output_dtype)
    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    fft_kernel(FFT)[FFT.grid_dim(batch), FFT.block_dim, 0, FFT.shared_memory_size](d_x, d_y)
    y = d_y.copy_to_host()
    ref = fft_reference(FFT, x)
    return float(np.abs(y - ref).max() / np.abs(ref).max())


@functools.lru_cache(maxsize=None)
def convolution_kernel(FWD, INV):
    """``kernel(x, f, y)``: load, forward FFT, multiply by the filter spectrum f, inverse FFT, store."""
    storage = FWD.storage_size
    value_type = numba.from_dtype(FWD.complex_dtype)
    real_type = numba.from_dtype(FWD.real_dtype)

    @cuda.jit
    def kernel(x, f, y):
        thread_data = cuda.local.array(storage, value_type)
        shared_mem = cuda.shared.array(0, real_type)
        batch = FWD.batch_index()
        FWD.load(x, thread_data, batch)
        FWD.execute(thread_data, shared_mem)
        FWD.multiply(thread_data, f)
        INV.execute(thread_data, shared_mem)
        INV.store(thread_data, y, batch)

    return kernel


def run_convolution_case(size, precision, real, batch=3):
    """Fused circular convolution (load, FFT, multiply by a filter spectrum, inverse FFT, store) of complex
    (``real=False``: c2c / c2c) or real signals (r2c / c2r); returns the error relative to NumPy."""
    from mathpy.device import fft

    kind = ("r2c", "c2r") if real else ("c2c", "c2c")
    FWD = fft(size=size, precision=precision, fft_type=kind[0], direction="forward")
    INV = fft(size=size, precision=precision, fft_type=kind[1], direction="inverse",
              elements_per_thread=FWD.elements_per_thread, ffts_per_block=FWD.ffts_per_block)
    kernel = convolution_kernel(FWD, INV)
    rng = np.random.default_rng(2)
    taps = rng.standard_normal(size)
    if real:
        x = rng.standard_normal((batch, size)).astype(FWD.real_dtype)
        spectrum = np.fft.rfft(taps) / size
        expected = np.fft.irfft(np.fft.rfft(x.astype(np.float64)) * np.fft.rfft(taps), n=size)
    else:
        x = (rng.standard_normal((batch, size)) + 1j * rng.standard_normal((batch, size))).astype(FWD.complex_dtype)
        spectrum = np.fft.fft(taps) / size
        expected = np.fft.ifft(np.fft.fft(x.astype(np.complex128)) * np.fft.fft(taps))
    f = spectrum.astype(FWD.complex_dtype)
    y = np.zeros((batch, size), INV.output_dtype)
    d_x, d_f, d_y = cuda.to_device(x), cuda.to_device(f), cuda.to_device(y)
    kernel[FWD.grid_dim(batch), FWD.block_dim, 0, FWD.shared_memory_size](d_x, d_f, d_y)
    y = d_y.copy_to_host()
    return float(np.abs(y - expected).max() / np.abs(expected).max())


def _gemm_jit(GEMM):
    """``cuda.jit`` with the description's suggested launch bounds (the simulator's jit takes none)."""
    if numba.config.ENABLE_CUDASIM:
        return cuda.jit
    return cuda.jit(launch_bounds=GEMM.launch_bounds)


@functools.lru_cache(maxsize=None)
def matmul_kernel(GEMM, k_total):
    """A batched kernel ``kernel(a, b, c, alpha, beta)``: one block per batch entry, looping over K in slices of
    ``GEMM.k`` with register accumulators (``mma``), then ``store_accumulator_batched``."""
    if k_total % GEMM.k:
        raise ValueError(f"k_total={k_total} must be a multiple of the description's k={GEMM.k}")
    storage = numba.from_dtype(GEMM.storage_dtype)
    compute = numba.from_dtype(GEMM.compute_dtype)
    sa, sb, acc_size, kb = GEMM.a_size, GEMM.b_size, GEMM.accumulator_size, GEMM.k
    n_slices = k_total // kb

    @_gemm_jit(GEMM)
    def kernel(a, b, c, alpha, beta):
        smem = cuda.shared.array(0, storage)
        smem_a = smem[:sa]
        smem_b = smem[sa : sa + sb]
        acc = cuda.local.array(acc_size, compute)
        batch = cuda.blockIdx.x
        GEMM.clear(acc)
        for s in range(n_slices):
            GEMM.load_ab(a, b, batch, s * kb, smem_a, smem_b)  # both copies in flight, then one wait
            cuda.syncthreads()
            GEMM.mma(smem_a, smem_b, acc)
            cuda.syncthreads()
        GEMM.store_accumulator_batched(alpha, acc, beta, c, batch)

    return kernel


@functools.lru_cache(maxsize=None)
def matmul_pipelined_kernel(GEMM, k_total):
    """As :func:`matmul_kernel` with two shared-memory buffers: the copies of k-slice ``s + 1`` (``load_ab_async``)
    run while slice ``s`` is multiplied. Needs ``2 * GEMM.shared_memory_size_ab`` bytes of dynamic shared memory."""
    if k_total % GEMM.k:
        raise ValueError(f"k_total={k_total} must be a multiple of the description's k={GEMM.k}")
    if 2 * GEMM.shared_memory_size_ab > 48 * 1024:  # numba-cuda launches with at most 48 KiB of dynamic shared memory
        raise ValueError(f"two buffers of {GEMM.shared_memory_size_ab} bytes exceed 48 KiB; describe a smaller k-slice")
    storage = numba.from_dtype(GEMM.storage_dtype)
    compute = numba.from_dtype(GEMM.compute_dtype)
    sa, sb, acc_size, kb = GEMM.a_size, GEMM.b_size, GEMM.accumulator_size, GEMM.k
    half = sa + sb
    n_slices = k_total // kb

    @_gemm_jit(GEMM)
    def kernel(a, b, c, alpha, beta):
        smem = cuda.shared.array(0, storage)
        acc = cuda.local.array(acc_size, compute)
        batch = cuda.blockIdx.x
        GEMM.clear(acc)
        GEMM.load_ab_async(a, b, batch, 0, smem[:sa], smem[sa:half])
        for s in range(n_slices):
            GEMM.wait_loads()
            cuda.syncthreads()
            cur = (s % 2) * half
            if s + 1 < n_slices:
                nxt = half - cur
                GEMM.load_ab_async(a, b, batch, (s + 1) * kb, smem[nxt:nxt + sa], smem[nxt + sa:nxt + half])
            GEMM.mma(smem[cur:cur + sa], smem[cur + sa:cur + half], acc)
            cuda.syncthreads()
        GEMM.store_accumulator_batched(alpha, acc, beta, c, batch)

    return kernel


def _ring(GEMM, k_total, stages):
    """What a kernel with a ring of ``stages`` shared-memory buffers of k-slices needs, checked: storage and compute
    numba types, A's slice size, the accumulator size, the slice depth, A and B's slice size together, the slices in
    K, and how many slices are in flight ahead of the one multiplied."""
    if k_total % GEMM.k:
        raise ValueError(f"k_total={k_total} must be a multiple of the description's k={GEMM.k}")
    if not 2 <= stages <= 9:
        raise ValueError(f"stages={stages} must be 2..9 (cp.async keeps at most 7 groups waiting)")
    return (numba.from_dtype(GEMM.storage_dtype), numba.from_dtype(GEMM.compute_dtype), GEMM.a_size,
            GEMM.accumulator_size, GEMM.k, GEMM.a_size + GEMM.b_size, k_total // GEMM.k, stages - 1)


@functools.lru_cache(maxsize=None)
def matmul_multistage_kernel(GEMM, k_total, stages):
    """As :func:`matmul_kernel` with ``stages`` shared-memory buffers in a ring: the copies of the next
    ``stages - 1`` k-slices are in flight (one ``cp.async`` group each) while one is multiplied, so a block has its
    whole A and B on the way at once when ``stages`` covers K. Needs ``stages * GEMM.shared_memory_size_ab`` bytes of
    dynamic shared memory (over 48 KiB: :func:`mathpy.device.allow_shared_memory` first)."""
    storage, compute, sa, acc_size, kb, size, n_slices, ahead = _ring(GEMM, k_total, stages)

    @_gemm_jit(GEMM)
    def kernel(a, b, c, alpha, beta):
        smem = cuda.shared.array(0, storage)
        acc = cuda.local.array(acc_size, compute)
        batch = cuda.blockIdx.x
        GEMM.clear(acc)
        for s in range(ahead):  # the first stages - 1 slices, one group each (empty groups past K)
            if s < n_slices:
                r = s * size
                GEMM.load_ab_async(a, b, batch, s * kb, smem[r:r + sa], smem[r + sa:r + size])
            GEMM.commit_loads()
        for s in range(n_slices):
            GEMM.wait_pending_loads(ahead - 1)  # slice s has landed (for this thread's copies)
            cuda.syncthreads()  # ... for every thread's, and the buffer refilled next is no longer read
            nxt = s + ahead
            if nxt < n_slices:
                r = (nxt % stages) * size
                GEMM.load_ab_async(a, b, batch, nxt * kb, smem[r:r + sa], smem[r + sa:r + size])
            GEMM.commit_loads()
            cur = (s % stages) * size
            GEMM.mma(smem[cur:cur + sa], smem[cur + sa:cur + size], acc)
        GEMM.store_accumulator_batched(alpha, acc, beta, c, batch)

    return kernel


@functools.lru_cache(maxsize=None)
def matmul_persistent_kernel(GEMM, k_total, stages):
    """As :func:`matmul_multistage_kernel`, persistent: a grid of fewer blocks than batch entries (a few per SM),
    each walking the entries ``blockIdx.x, blockIdx.x + gridDim.x, ...`` as one stream of k-slices through its ring of
    ``stages`` buffers, so the copies of the next entry's first slices are in flight while the current entry's last
    slices are multiplied and its results stored (a one-block-per-entry kernel starts every entry with an empty
    pipeline and ends it with an idle one). For batches of small products, which are limited by how many bytes are
    in flight, not by the tensor cores."""
    storage, compute, sa, acc_size, kb, size, n_slices, ahead = _ring(GEMM, k_total, stages)

    @_gemm_jit(GEMM)
    def kernel(a, b, c, alpha, beta):
        smem = cuda.shared.array(0, storage)
        acc = cuda.local.array(acc_size, compute)
        first, step = cuda.blockIdx.x, cuda.gridDim.x
        entries = (c.shape[0] - first + step - 1) // step
        total = entries * n_slices  # this block's (entry, slice) items, in order
        GEMM.clear(acc)
        for t in range(ahead):
            if t < total:
                r = t * size
                GEMM.load_ab_async(a, b, first + (t // n_slices) * step, (t % n_slices) * kb, smem[r:r + sa],
                                   smem[r + sa:r + size])
            GEMM.commit_loads()
        for t in range(total):
            GEMM.wait_pending_loads(ahead - 1)  # item t has landed (for this thread's copies)
            cuda.syncthreads()  # ... for every thread's, and the buffer refilled next is no longer read
            nxt = t + ahead
            if nxt < total:
                r = (nxt % stages) * size
                GEMM.load_ab_async(a, b, first + (nxt // n_slices) * step, (nxt % n_slices) * kb, smem[r:r + sa],
                                   smem[r + sa:r + size])
            GEMM.commit_loads()
            cur = (t % stages) * size
            GEMM.mma(smem[cur:cur + sa], smem[cur + sa:cur + size], acc)
            if t % n_slices == n_slices - 1:  # the entry's last slice: its results, then a fresh accumulator
                GEMM.store_accumulator_batched(alpha, acc, beta, c, first + (t // n_slices) * step)
                GEMM.clear(acc)

    return kernel


def persistent_grid(GEMM, stages, batch, sms):
    """Blocks of a persistent launch: as many per SM as the shared memory (227 KiB) and the launch bounds allow."""
    per_sm = max(1, min(232448 // (stages * GEMM.shared_memory_size_ab), GEMM.launch_bounds[1]))
    return min(batch, per_sm * sms)


@functools.lru_cache(maxsize=None)
def matmul_shared_kernel(GEMM):
    """A batched kernel doing the whole GEMM with A, B and C in shared memory (``execute``)."""
    storage = numba.from_dtype(GEMM.storage_dtype)
    sa, sb = GEMM.a_size, GEMM.b_size

    @_gemm_jit(GEMM)
    def kernel(a, b, c, alpha, beta):
        smem = cuda.shared.array(0, storage)
        smem_a = smem[:sa]
        smem_b = smem[sa : sa + sb]
        smem_c = smem[sa + sb :]
        batch = cuda.blockIdx.x
        GEMM.load_a(a, batch, 0, smem_a)
        GEMM.load_b(b, batch, 0, smem_b)
        GEMM.load_c(c, batch, smem_c)
        cuda.syncthreads()
        GEMM.execute(alpha, smem_a, smem_b, beta, smem_c)
        cuda.syncthreads()
        GEMM.store_c(smem_c, c, batch)

    return kernel


def _to_storage(GEMM, x):
    return bf16_bits(x) if GEMM.precision == "bfloat16" else x.astype(GEMM.storage_dtype)


def _from_storage(GEMM, x):
    return bf16_to_float32(x).astype(np.float64) if GEMM.precision == "bfloat16" else x.astype(np.float64)


def run_matmul_case(m, n, k, precision, k_total=None, mode="registers", batch=2, alpha=1.5, beta=-0.5,
                    misaligned=False, stages=3, **kw):
    """Run one block GEMM case; returns the max error relative to the largest reference value. mode: "registers"
    (mma over K slices), "pipelined" (two buffers, the next slice copied during the mma), "multistage" (``stages``
    buffers in a ring), "persistent" (the ring across batch entries, 2 blocks) or "shared" (execute with C in
    shared memory, k_total == k). ``misaligned``: A and B are
    views one element into wider arrays (odd strides, unaligned data), so copies take the element-wise path."""
    from mathpy.device import matmul

    GEMM = matmul(m, n, k, precision, **kw)
    k_total = k if k_total is None else k_total
    rng = np.random.default_rng(1)
    pad = 1 if misaligned else 0
    a = _to_storage(GEMM, rng.standard_normal((batch, m, k_total + pad)))
    b = _to_storage(GEMM, rng.standard_normal((batch, k_total, n + pad)))
    c = _to_storage(GEMM, rng.standard_normal((batch, m, n)))
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    if misaligned:
        a, b, d_a, d_b = a[:, :, 1:], b[:, :, 1:], d_a[:, :, 1:], d_b[:, :, 1:]
    ref = alpha * (_from_storage(GEMM, a) @ _from_storage(GEMM, b)) + beta * _from_storage(GEMM, c)
    if mode == "registers":
        matmul_kernel(GEMM, k_total)[batch, GEMM.block_dim, 0, GEMM.shared_memory_size_ab](d_a, d_b, d_c, alpha, beta)
    elif mode == "pipelined":
        matmul_pipelined_kernel(GEMM, k_total)[batch, GEMM.block_dim, 0, 2 * GEMM.shared_memory_size_ab](
            d_a, d_b, d_c, alpha, beta)
    elif mode in ("multistage", "persistent"):
        from mathpy.device._launch import allow_shared_memory

        persistent = mode == "persistent"
        kernel = (matmul_persistent_kernel if persistent else matmul_multistage_kernel)(GEMM, k_total, stages)
        shared = stages * GEMM.shared_memory_size_ab
        allow_shared_memory(kernel, shared, d_a, d_b, d_c, alpha, beta)
        grid = min(2, batch) if persistent else batch  # persistent: blocks walk several entries
        kernel[grid, GEMM.block_dim, 0, shared](d_a, d_b, d_c, alpha, beta)
    else:
        matmul_shared_kernel(GEMM)[batch, GEMM.block_dim, 0, GEMM.shared_memory_size](d_a, d_b, d_c, alpha, beta)
    out = _from_storage(GEMM, d_c.copy_to_host())
    return float(np.abs(out - ref).max() / np.abs(ref).max())


# Cases the simulator runs in CI (small: the simulator runs each thread as a Python thread).
SIM_FFT_CASES = (
    [(n, "float32", "c2c", "forward", {}) for n in (2, 4, 8, 16, 32, 64, 128, 256)]
    + [(n, "float64", "c2c", "inverse", {}) for n in (2, 16, 64)]
    + [
        (64, "float32", "c2c", "inverse", {"elements_per_thread": 4, "ffts_per_block": 2}),
        (128, "float64", "c2c", "forward", {"elements_per_thread": 8, "ffts_per_block": 1}),
        (32, "float32", "c2c", "forward", {"elements_per_thread": 2, "ffts_per_block": 3}),
        (512, "float32", "c2c", "forward", {"ffts_per_block": 1}),
        (1024, "float32", "c2c", "inverse", {"ffts_per_block": 1}),
        (2048, "float64", "c2c", "forward", {"ffts_per_block": 2}),  # split re/im shared-memory exchange
        (4096, "float32", "c2c", "forward", {}),
        (4096, "float64", "c2c", "inverse", {}),  # split exchange
        (8192, "float32", "c2c", "forward", {}),  # split exchange, 512 threads
        (6, "float32", "c2c", "forward", {}),
        (15, "float64", "c2c", "inverse", {}),
        (48, "float32", "c2c", "forward", {}),
        (100, "float32", "c2c", "inverse", {}),
        (1000, "float32", "c2c", "forward", {}),
        (343, "float64", "c2c", "forward", {}),
        (12, "float32", "r2c", None, {}),
        (96, "float32", "c2r", None, {}),
        (16, "float32", "r2c", None, {}),
        (15, "float32", "r2c", None, {}),  # odd: full-length complex transform
        (25, "float64", "c2r", None, {}),
        (8192, "float64", "r2c", None, {}),  # packed, split exchange
        (4096, "float32", "c2r", None, {}),
        (4, "float32", "c2r", None, {}),
        (64, "float32", "r2c", None, {"elements_per_thread": 4, "ffts_per_block": 1}),
        (256, "float64", "r2c", None, {"ffts_per_block": 1}),
        (8, "float64", "c2r", None, {}),
        (64, "float32", "c2r", None, {"elements_per_thread": 8, "ffts_per_block": 2}),
        (32, "float32", "c2r", None, {"elements_per_thread": 2, "ffts_per_block": 1}),
        (256, "float32", "c2r", None, {"ffts_per_block": 1}),
    ]
)
SIM_CONV_CASES = [(64, "float32", False), (256, "float32", True), (12, "float64", True), (15, "float32", True),
                  (1024, "float64", True)]
SIM_MATMUL_CASES = [
    (16, 16, 8, "float32", 16, "registers", {}),
    (32, 16, 16, "float64", 32, "registers", {"a_arrangement": "col_major"}),
    (16, 32, 8, "float16", 8, "shared", {}),
    (16, 16, 16, "bfloat16", 32, "registers", {"a_arrangement": "col_major"}),
    (16, 16, 16, "bfloat16", 16, "shared", {}),
    (32, 16, 16, "float16", 32, "registers", {"block_size": 64}),  # tensor-core ownership, 2 warps
    (32, 32, 16, "float16", 16, "shared", {"block_size": 64, "a_arrangement": "col_major"}),
    (16, 16, 16, "bfloat16", 16, "registers", {"tensor_cores": False}),
    (16, 16, 16, "float16", 32, "registers", {"misaligned": True}),
    (24, 8, 4, "float32", 4, "shared", {"block_size": 12}),
    (8, 8, 8, "float64", 8, "shared", {}),
    (16, 16, 8, "float64", 24, "pipelined", {"block_size": 32}),  # fp64 tensor-core ownership (m8n8k4), 1 warp
    (32, 16, 16, "float16", 48, "pipelined", {"block_size": 64}),
    (16, 16, 8, "float32", 24, "pipelined", {}),
    (16, 16, 8, "float32", 40, "multistage", {}),  # 5 slices through a ring of 3 buffers
    (32, 16, 16, "float16", 80, "multistage", {"block_size": 64, "stages": 4}),
    (16, 16, 8, "float32", 24, "persistent", {}),  # 2 blocks over 2 entries of 3 slices, a ring of 3
    (32, 16, 16, "float16", 32, "persistent", {"block_size": 64, "stages": 4, "batch": 5}),  # 3 + 2 entries
]


TOLERANCE = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 2e-2}


def _main(argv):
    """Run the simulator cases (or the GPU cases when the simulator is off) and print one JSON line per case."""
    which = argv[1] if len(argv) > 1 else "all"
    results = []
    if which in ("fft", "all"):
        for size, prec, fft_type, direction, kw in SIM_FFT_CASES:
            t0 = time.perf_counter()
            err = run_fft_case(size, prec, fft_type, direction, **kw)
            results.append(
                {"kind": "fft", "case": f"fft-{size}-{prec}-{fft_type}-{direction}-{kw}", "error": err,
                 "precision": prec, "seconds": time.perf_counter() - t0}
            )
            print(json.dumps(results[-1]), flush=True)
    if which in ("conv", "all"):
        for size, prec, real in SIM_CONV_CASES:
            t0 = time.perf_counter()
            err = run_convolution_case(size, prec, real)
            results.append(
                {"kind": "conv", "case": f"conv-{size}-{prec}-{'real' if real else 'complex'}", "error": err,
                 "precision": prec, "seconds": time.perf_counter() - t0}
            )
            print(json.dumps(results[-1]), flush=True)
    if which in ("matmul", "all"):
        for m, n, k, prec, k_total, mode, kw in SIM_MATMUL_CASES:
            t0 = time.perf_counter()
            err = run_matmul_case(m, n, k, prec, k_total=k_total, mode=mode, **kw)
            results.append(
                {"kind": "matmul", "case": f"matmul-{m}x{n}x{k}-{prec}-{k_total}-{mode}-{kw}", "error": err,
                 "precision": prec, "seconds": time.perf_counter() - t0}
            )
            print(json.dumps(results[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
