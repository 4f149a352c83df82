"""The pipeline's GPU source extractor: the local maxima of the score image above the threshold, found by one
numba-cuda kernel on the device and brought to the host as one short list.

Each thread looks at one pixel; a pixel above the threshold that no pixel of its clipped (2 radius + 1)^2
neighbourhood exceeds appends its flat index and value to the output through an atomic counter (most pixels fail the
threshold test after one read, so the kernel reads the image about once). The host then reads the count and the first
``count`` entries: the only wait for the device, where the maximum filter of :func:`.sfft.detect`'s "filter" method
runs a filter pass, a comparison, a compaction that waits for its own count, a gather and a transfer. The append order
depends on scheduling; :func:`.sfft.detect` sorts the peaks (brightest first, ties by position), so the result does
not.

Imported only where the kernel runs (importing numba-cuda takes a second); the kernel runs unchanged under numba's
CUDA simulator, which the CPU tests use.
"""

import warnings

import numpy as np

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()  # numba-cuda 0.30 on NumPy >= 2.5

from numba import cuda  # noqa: E402

__all__ = ["THREADS", "find_peaks", "launch_peaks", "peaks_kernel"]

#: Threads per block (columns, rows): a warp reads 32 neighbouring pixels of one row.
THREADS = (32, 8)


def peaks_kernel(score, threshold, radius, count, flat, values):
    """Append (flat index, value) of every local maximum above ``threshold`` to ``flat`` / ``values`` (``count[0]``
    counts them all, also those past the buffers' end)."""
    col, row = cuda.grid(2)
    n0, n1 = score.shape
    if row >= n0 or col >= n1:
        return
    value = score[row, col]
    if not value > threshold:
        return
    for r in range(max(row - radius, 0), min(row + radius, n0 - 1) + 1):
        for c in range(max(col - radius, 0), min(col + radius, n1 - 1) + 1):
            if score[r, c] > value:
                return
    k = cuda.atomic.add(count, 0, 1)
    if k < flat.size:
        flat[k] = row * n1 + col
        values[k] = value


_compiled = {}


def _kernel():
    if "kernel" not in _compiled:
        _compiled["kernel"] = cuda.jit("void(float32[:, ::1], float32, int32, int32[::1], int64[::1], float32[::1])")(
            peaks_kernel)
    return _compiled["kernel"]


def launch_peaks(score, threshold, radius, count, flat, values):
    """Enqueue the kernel on CuPy's current stream: the peaks of the float32 image ``score`` above ``threshold`` go
    to ``flat`` / ``values`` (CuPy int64 / float32), their number to ``count`` (CuPy int32[1], zeroed by the caller;
    it counts the peaks past the buffers' end too). Nothing waits for the device."""
    import cupy
    if score.dtype != np.float32 or not score.flags.c_contiguous or score.ndim != 2:
        raise TypeError(f"the score image must be a C-contiguous 2-D float32 array, got {score.dtype} "
                        f"{score.shape}")
    n0, n1 = score.shape
    blocks = ((n1 + THREADS[0] - 1) // THREADS[0], (n0 + THREADS[1] - 1) // THREADS[1])
    stream = cupy.cuda.get_current_stream().ptr
    stream = cuda.external_stream(stream) if stream else cuda.default_stream()
    arguments = [cuda.from_cuda_array_interface(a.__cuda_array_interface__, owner=a, sync=False)
                 for a in (score, count, flat, values)]
    with warnings.catch_warnings():  # small images: numba warns below 128 blocks
        warnings.filterwarnings("ignore", message=".*under-utilization")
        _kernel()[blocks, THREADS, stream](arguments[0], np.float32(threshold), np.int32(radius), *arguments[1:])


def find_peaks(score, threshold, radius, capacity=4096):
    """(flat indices int64, values float32) NumPy arrays of the local maxima of the CuPy float32 image ``score``
    above ``threshold``, unordered; on CuPy's current stream. Enough room for ``capacity`` peaks, else a second
    launch with room for all."""
    import cupy
    while True:
        count = cupy.zeros(1, np.int32)
        flat, values = cupy.empty(capacity, np.int64), cupy.empty(capacity, np.float32)
        launch_peaks(score, threshold, radius, count, flat, values)
        found = int(count.get()[0])
        if found <= capacity:
            return flat[:found].get(), values[:found].get()
        capacity = found
