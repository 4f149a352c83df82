"""The mathpy pipeline's solve: every stamp's normal equations gathered from where the correlation plans stored their
source and solved in float64, by one numba-cuda kernel on the GPU (a NumPy loop of the same arithmetic on the CPU),
which stores the float32 solution where the kernel + PSF plan's prolog reads it.

Why a kernel of its own: the array pipeline's path (a gather, a float64 copy, CuPy's batched LU on cuBLAS, a copy
into the model buffer) is about ten operations; on the H200 it took 0.35 ms of GPU time for 256 systems of 84
unknowns, this kernel 0.26 ms (bench_difference_imaging, "mathpy" against "mathpy-lu"). Both are far from the 0.002
ms of reading the systems: here each block runs 84 dependent elimination steps, one barrier each, with little work
per step.

The math: the normal matrix M is symmetric positive definite (a Gram matrix plus a ridge), so Gaussian elimination
needs no pivoting and, by symmetry, only the lower triangle: ``M = L D L^T`` with L unit lower triangular. The
right-hand side r rides along as row N of the symmetric matrix ``[[M, r], [r^T, .]]``: eliminating its first N
pivots turns that row into ``D^-1 L^-1 r``, and a back substitution with ``L^T`` gives the solution x. The gathered
M is symmetric only to float32 rounding (the FFTs round J's autocorrelation at lags s and -s separately, 1e-7 of
its largest entry at 512^2); reading one triangle solves the exactly symmetric system next to it, whose solution
differs from the LU solve of the whole M by that rounding times M's condition number, far below the pipeline's
float32 tolerance.

Shared memory holds the packed lower triangle ``(N + 1)(N + 2) / 2 - 1`` float64 values (N = 84: 29 KB), within
the 48 KB a numba-cuda kernel gets: :data:`MAX_UNKNOWNS` (109: kernel radius 4) is the largest system it takes.
"""

import warnings

import numpy as np

__all__ = ["MAX_UNKNOWNS", "THREADS", "GatheredSolve", "check_unknowns", "ldlt_solve", "packed_index", "packed_size"]

#: Shared memory a numba-cuda kernel may use without a launch attribute (bytes).
SHARED_BYTES = 48 * 1024
#: The largest number of unknowns whose packed float64 system fits :data:`SHARED_BYTES`.
MAX_UNKNOWNS = max(n for n in range(1, 256) if 8 * (n * (n + 3) // 2) <= SHARED_BYTES)
#: Threads per block (one block per system): eight warps share each elimination step's trailing update.
THREADS = 256


def check_unknowns(unknowns):
    """ValueError unless the kernel takes systems of ``unknowns`` unknowns."""
    if not 1 <= unknowns <= MAX_UNKNOWNS:
        raise ValueError(f"the fused solve takes systems of 1 to {MAX_UNKNOWNS} unknowns (their float64 lower "
                         f"triangle in {SHARED_BYTES // 1024} KB of shared memory), got {unknowns}: a kernel radius "
                         f"of at most 4; solve larger systems with solver='lu'")


def packed_size(unknowns):
    """Values of one packed system: the lower triangle of M (row-major) followed by r."""
    return unknowns * (unknowns + 3) // 2


def packed_index(system_index):
    """(B, :func:`packed_size`) positions of the packed systems' values, from the (B, N, N + 1) positions of the
    augmented systems ``[M | r]``: M's lower triangle row by row (entry (i, j) at ``i (i + 1) / 2 + j``), then r
    as row N."""
    n = system_index.shape[1]
    rows, cols = np.tril_indices(n)
    return np.ascontiguousarray(np.concatenate([system_index[:, rows, cols], system_index[:, :, n]], axis=1))


def ldlt_solve(system):
    """Solutions (B, N) float64 of the augmented systems ``system`` (B, N, N + 1) = [M | r], M symmetric positive
    definite: the kernel's arithmetic (symmetric elimination without pivoting, then back substitution) in NumPy."""
    system = np.asarray(system)
    b, n = system.shape[:2]
    a = np.zeros((b, n + 1, n + 1))
    a[:, :n, :n] = system[:, :, :n]
    a[:, n, :n] = system[:, :, n]
    for k in range(n):
        inv = 1 / a[:, k, k]
        column = a[:, k + 1:, k].copy()                        # unscaled: what the trailing update subtracts
        a[:, k + 1:, k + 1:] -= (column * inv[:, None])[:, :, None] * column[:, None, :]
        a[:, k + 1:, k] = column * inv[:, None]                # L's column k
    x = a[:, n, :n].copy()                                      # D^-1 L^-1 r
    for k in range(n - 1, 0, -1):
        x[:, :k] -= a[:, k, :k] * x[:, k, None]
    return x


class GatheredSolve:
    """``GatheredSolve(xp, source, system_index, solution)()`` solves every stamp's system ``source[system_index[b]]``
    ((B, N, N + 1) positions in the float32 array ``source``) into ``solution`` (float32 (B, N), C-contiguous), on the
    device ``xp`` works on: one kernel launch on the stream current when it is made (CuPy), or :func:`ldlt_solve`
    (NumPy). ``source`` and ``solution`` are read and written in place at every call."""

    def __init__(self, xp, source, system_index, solution):
        b, n = system_index.shape[:2]
        if tuple(solution.shape) != (b, n):
            raise ValueError(f"solution has shape {tuple(solution.shape)}; the systems need ({b}, {n})")
        check_unknowns(n)
        self.xp, self.source, self.solution = xp, source, solution
        if xp is np:
            self.system_index = system_index
            return
        from numba import cuda

        from .solve_kernel import kernel_function

        self.index = xp.asarray(packed_index(system_index).astype(np.int32))
        kernel = cuda.jit("void(float32[::1], int32[:, ::1], float32[:, ::1])")(kernel_function(n))
        stream = xp.cuda.get_current_stream().ptr
        stream = cuda.external_stream(stream) if stream else cuda.default_stream()
        # numba views of CuPy's memory made once, without the stream synchronisation numba would otherwise do
        self._arguments = tuple(cuda.from_cuda_array_interface(a.__cuda_array_interface__, owner=a, sync=False)
                                for a in (source, self.index, solution))
        with warnings.catch_warnings():  # one block per stamp by design: numba warns below 128 blocks
            warnings.filterwarnings("ignore", message=".*under-utilization")
            self._launch = kernel[b, THREADS, stream]

    def __call__(self):
        if self.xp is np:
            self.solution[...] = ldlt_solve(self.source[self.system_index])
        else:
            self._launch(*self._arguments)
