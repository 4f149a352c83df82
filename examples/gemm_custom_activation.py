"""Batched small GEMMs with a custom activation fused into the store, with mathpy's block GEMM.

``out[b] = gelu(A[b] @ B[b])`` for many 64 x 64 matrices: one block per matrix, K looped in slices through shared
memory, accumulators in registers, the activation (any numba device function) applied as the results are stored.

Run on a GPU:                        python examples/gemm_custom_activation.py
Run without one (small sizes):       NUMBA_ENABLE_CUDASIM=1 python examples/gemm_custom_activation.py --small
"""

import math
import sys
import time

import numpy as np

try:
    import mathpy  # noqa: F401
except ImportError:  # running from a source checkout without installing it
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda  # noqa: E402

patch_numpy_for_numba_cuda()  # numba-cuda 0.30 needs this on NumPy >= 2.5
import numba  # noqa: E402
from numba import cuda  # noqa: E402

import mathpy.device  # noqa: E402

small = "--small" in sys.argv
m = n = 16 if small else 64
k_total, k_slice, batch = (32, 16, 3) if small else (256, 32, 4096)

C0 = np.float32(math.sqrt(2.0 / math.pi))
C1 = np.float32(0.044715)
HALF = np.float32(0.5)
ONE = np.float32(1.0)


@cuda.jit(device=True)
def gelu(x):  # tanh approximation, all in float32
    return HALF * x * (ONE + math.tanh(C0 * (x + C1 * x * x * x)))


GEMM = mathpy.device.matmul(m, n, k_slice, np.float32, a_arrangement="col_major", epilog=gelu)
SA, SB, ACC = GEMM.a_size, GEMM.b_size, GEMM.accumulator_size
N_SLICES = k_total // k_slice


@cuda.jit
def gemm_gelu(a, b, out):
    smem = cuda.shared.array(0, numba.float32)
    smem_a = smem[:SA]
    smem_b = smem[SA:SA + SB]
    acc = cuda.local.array(ACC, numba.float32)
    batch_index = cuda.blockIdx.x
    GEMM.clear(acc)
    for s in range(N_SLICES):
        GEMM.load_a(a, batch_index, s * k_slice, smem_a)
        GEMM.load_b(b, batch_index, s * k_slice, smem_b)
        cuda.syncthreads()
        GEMM.mma(smem_a, smem_b, acc)
        cuda.syncthreads()
    GEMM.store_accumulator_batched(1.0, acc, 0.0, out, batch_index)


def main():
    if not cuda.is_available():  # True under numba's CUDA simulator too
        sys.exit("gemm_custom_activation.py: no CUDA GPU found; run it on numba's CUDA simulator instead: "
                 "NUMBA_ENABLE_CUDASIM=1 python examples/gemm_custom_activation.py --small")
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((batch, m, k_total)) / np.sqrt(k_total)).astype(np.float32)
    b = rng.standard_normal((batch, k_total, n)).astype(np.float32)
    d_a, d_b = cuda.to_device(a), cuda.to_device(b)
    d_out = cuda.device_array((batch, m, n), np.float32)
    launch = gemm_gelu[batch, GEMM.block_dim, 0, GEMM.shared_memory_size_ab]
    launch(d_a, d_b, d_out)
    out = d_out.copy_to_host()

    y = a.astype(np.float64) @ b.astype(np.float64)
    expected = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    err = np.abs(out - expected).max() / np.abs(expected).max()
    print(f"GEMM + GELU: {batch} x ({m} x {k_total} @ {k_total} x {n}), block_dim={GEMM.block_dim}, "
          f"thread tile {GEMM.tile_m}x{GEMM.tile_n}, max relative error {err:.2e}")
    if err > 1e-5:
        raise SystemExit(f"FAILED: error {err:.2e} above 1e-5")
    if not small:
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            launch(d_a, d_b, d_out)
        cuda.synchronize()
        ms = (time.perf_counter() - t0) / 20 * 1e3
        print(f"{ms:.3f} ms per call, {2 * batch * m * n * k_total / (ms * 1e-3) / 1e9:.0f} GFLOP/s")
    print("OK")


if __name__ == "__main__":
    main()
