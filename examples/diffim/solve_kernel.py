"""The numba-cuda kernel of :mod:`.gathered_solve` (imported only where it is compiled: importing numba-cuda takes a
second). It runs unchanged under numba's CUDA simulator, which the CPU tests use."""

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()  # numba-cuda 0.30 on NumPy >= 2.5

from numba import cuda, float32, float64  # noqa: E402

from .gathered_solve import THREADS, check_unknowns, packed_size  # noqa: E402

__all__ = ["kernel_function"]


def kernel_function(unknowns, threads=THREADS):
    """The kernel's Python function (compile it with ``numba.cuda.jit``) for systems of ``unknowns`` unknowns and
    blocks of ``threads`` threads (a multiple of 32): ``kernel[B, threads, stream](source, index, solution)`` reads
    the packed systems ``source[index[b, e]]`` (float32; ``index`` from :func:`.gathered_solve.packed_index`) and
    writes the solutions ``solution[b, :]`` (float32 (B, N))."""
    check_unknowns(unknowns)
    if threads < 32 or threads % 32:
        raise ValueError(f"threads must be a positive multiple of 32, got {threads}")
    n, size, rows_at_once = unknowns, packed_size(unknowns), threads // 32
    rhs = n * (n + 1) // 2

    def solve_systems(source, index, solution):
        a = cuda.shared.array(size, float64)
        b = cuda.blockIdx.x
        t = cuda.threadIdx.x
        lane, warp = t % 32, t // 32
        for e in range(t, size, threads):
            a[e] = float64(source[index[b, e]])
        cuda.syncthreads()
        # Elimination step k: the trailing rows k+1..N (N: the right-hand side) lose their projection on pivot k,
        # one warp per row, the lanes along the row; the multipliers of step k-1 (column k-1, which nothing reads
        # now) are scaled in the same pass, so each step needs one barrier.
        inv_previous = float64(0)
        for k in range(n):
            inv = 1 / a[k * (k + 1) // 2 + k]
            if k > 0:
                for i in range(k + t, n + 1, threads):
                    a[i * (i + 1) // 2 + k - 1] *= inv_previous
            for i in range(k + 1 + warp, n + 1, rows_at_once):
                row = i * (i + 1) // 2
                factor = a[row + k] * inv
                for j in range(k + 1 + lane, min(i, n - 1) + 1, 32):
                    a[row + j] -= factor * a[j * (j + 1) // 2 + k]
            inv_previous = inv
            cuda.syncthreads()
        if t == 0:
            a[rhs + n - 1] *= inv_previous
        cuda.syncthreads()
        # Back substitution with L^T, column by column: x_k is final once the larger unknowns were subtracted.
        for k in range(n - 1, 0, -1):
            x_k = a[rhs + k]
            row = k * (k + 1) // 2
            for i in range(t, k, threads):
                a[rhs + i] -= a[row + i] * x_k
            cuda.syncthreads()
        for i in range(t, n, threads):
            solution[b, i] = float32(a[rhs + i])

    return solve_systems
