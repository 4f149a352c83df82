"""Fused FFT convolution in one numba-cuda kernel with mathpy's block FFT.

Each block loads signals, transforms them forward, multiplies by a filter spectrum, transforms back and stores the
result -- one read and one write of global memory instead of the three passes of ``ifft(fft(x) * filter)``.

Run on a GPU:                        python examples/fused_fft_convolution.py
Run without one (small sizes):       NUMBA_ENABLE_CUDASIM=1 python examples/fused_fft_convolution.py --small
"""

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
size, batch = (64, 6) if small else (1024, 16384)

# Forward and inverse transforms must agree on the block shape: same elements_per_thread and ffts_per_block.
FWD = mathpy.device.fft(size=size, precision=np.float32, direction="forward")
INV = mathpy.device.fft(
    size=size, precision=np.float32, direction="inverse",
    elements_per_thread=FWD.elements_per_thread, ffts_per_block=FWD.ffts_per_block,
)
STORAGE = FWD.storage_size  # array shapes inside kernels must be compile-time constants: copy to a global


@cuda.jit
def fft_convolve(signals, filter_spectrum, out):
    thread_data = cuda.local.array(STORAGE, numba.complex64)
    shared_mem = cuda.shared.array(0, numba.float32)
    batch_index = FWD.batch_index()
    FWD.load(signals, thread_data, batch_index)
    FWD.execute(thread_data, shared_mem)
    FWD.multiply(thread_data, filter_spectrum)  # the filter already holds the 1/size of the inverse
    INV.execute(thread_data, shared_mem)
    INV.store(thread_data, out, batch_index)


def main():
    if not cuda.is_available():  # True under numba's CUDA simulator too
        sys.exit("fused_fft_convolution.py: no CUDA GPU found; run it on numba's CUDA simulator instead: "
                 "NUMBA_ENABLE_CUDASIM=1 python examples/fused_fft_convolution.py --small")
    rng = np.random.default_rng(0)
    signals = (rng.standard_normal((batch, size)) + 1j * rng.standard_normal((batch, size))).astype(np.complex64)
    kernel_taps = np.zeros(size, np.complex64)
    kernel_taps[:5] = [0.1, 0.2, 0.4, 0.2, 0.1]  # a small smoothing kernel (circular convolution)
    filter_spectrum = (np.fft.fft(kernel_taps) / size).astype(np.complex64)

    d_signals = cuda.to_device(signals)
    d_filter = cuda.to_device(filter_spectrum)
    d_out = cuda.device_array_like(d_signals)
    launch = fft_convolve[FWD.grid_dim(batch), FWD.block_dim, 0, FWD.shared_memory_size]
    launch(d_signals, d_filter, d_out)
    out = d_out.copy_to_host()

    expected = np.fft.ifft(np.fft.fft(signals.astype(np.complex128)) * np.fft.fft(kernel_taps.astype(np.complex128)))
    err = np.abs(out - expected).max() / np.abs(expected).max()
    print(f"fused FFT convolution: size={size} batch={batch} block_dim={FWD.block_dim} "
          f"shared={FWD.shared_memory_size} B, max relative error {err:.2e}")
    if err > 1e-5:
        raise SystemExit(f"FAILED: error {err:.2e} above 1e-5")
    if not small:
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            launch(d_signals, d_filter, d_out)
        cuda.synchronize()
        ms = (time.perf_counter() - t0) / 20 * 1e3
        print(f"{ms:.3f} ms per call, {2 * signals.nbytes / (ms * 1e-3) / 1e9:.0f} GB/s effective")
    print("OK")


if __name__ == "__main__":
    main()
