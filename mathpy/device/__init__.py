"""Block-level FFT and GEMM for your own ``@numba.cuda.jit`` kernels.

A *description* built on the host fixes the problem (size, precision, direction, block shape). It validates the
request before anything is compiled (a ``ValueError`` names the bad value and the allowed ones), tells you how to
launch (``block_dim``, ``shared_memory_size`` bytes of dynamic shared memory, ``storage_size`` of the per-thread
register array, ``ffts_per_block``) and carries device functions that you call inside the kernel::

    import numba, numpy as np
    from numba import cuda
    import mathpy.device

    FFT = mathpy.device.fft(size=1024, precision=np.float32, direction="forward")
    STORAGE = FFT.storage_size                      # local array shapes must be compile-time constants

    @cuda.jit
    def kernel(x, y):
        thread_data = cuda.local.array(STORAGE, numba.complex64)
        shared_mem = cuda.shared.array(0, numba.float32)
        batch = FFT.batch_index()
        FFT.load(x, thread_data, batch)             # coalesced load of row `batch` of x (n_batch, 1024)
        FFT.execute(thread_data, shared_mem)        # the whole block takes part (it synchronizes)
        FFT.store(thread_data, y, batch)

    kernel[FFT.grid_dim(n_batch), FFT.block_dim, 0, FFT.shared_memory_size](x, y)

    GEMM = mathpy.device.matmul(64, 64, 32, np.float16)   # m, n, k-slice; GEMM.mma / execute / load_a / ...

See :class:`FFTDescription` and :class:`MatmulDescription` for the device functions, and ``examples/`` for a fused
FFT convolution and a GEMM with a custom activation.

Design
------
- **Pure numba-cuda, no MathDx.** cuFFTDx/cuBLASDx (what nvmath-python's device API wraps) are C++ header libraries:
  using them from numba means shipping MathDx (hundreds of MB of headers plus NVRTC and a C++ compile per
  description, seconds each), and they exist only for the CUDA versions MathDx supports. Generated Python compiles
  with the numba-cuda that the user already has, runs unchanged under numba's CUDA simulator (so the CPU test suite
  checks the real device code against NumPy), and inlines into the user's kernel as ordinary NVVM IR, where the
  optimizer sees the whole kernel. The price: the FFT's speed rests on the code we generate rather than on NVIDIA's
  tuning tables, and the GEMM reaches the tensor cores only through ``mma.sync`` written as inline PTX (numba-cuda
  has no ``mma``/``wgmma`` API, and libNVVM rejects the ``llvm.nvvm.mma``/``wmma`` intrinsic calls).
- **Code generation, not loops.** Each description writes straight-line Python for its size (every register index a
  literal, butterflies unrolled with constant twiddles, typed ``np.float32`` constants so nothing is promoted to
  double) and compiles it with ``cuda.jit(device=True, forceinline=True)``. Values live in scalar variables, which
  NVVM keeps in registers: the sm_90 PTX of the shipped configurations has no ``ld.local``/``st.local`` (a test
  checks it). Descriptions are cached (equal arguments give the same object), so their device functions compile
  once per process and signature.
- **How numba sees ``FFT.execute``.** Descriptions subclass ``types.ModuleType``; numba types a module global as
  ``types.Module`` and resolves its attributes at compile time, so ``FFT.execute(...)`` inside a kernel is a direct
  call of a device function -- no numba extension types needed.
- **FFT algorithm.** Stockham auto-sort, radix ``elements_per_thread`` (2..16) stages, then smaller radices dividing
  it for the remainder (96 with 12 per thread: radices 12, 4, 2); thread ``t`` holds elements ``t + i*T`` so the
  first stage reads and the last stage writes registers, and ``s`` stages need ``s-1`` shared-memory exchanges
  (planar real/imaginary buffers padded every 32 elements; for large double-precision sizes the real and imaginary
  parts are exchanged one after the other to fit 48 KiB). Inter-stage twiddles come from ``sincospi`` (at most two
  calls per butterfly, the rest by products): no table, no local memory. ``r2c``/``c2r`` of even size run a complex
  FFT of half the size on packed pairs of reals, with one extra shared-memory exchange to split/merge the spectrum
  (odd sizes run the full-length complex transform).
- **GEMM.** fp64 with m % 8 == n % 8 == k % 4 == 0 runs on the fp64 tensor cores (``mma.sync.m8n8k4.f64``, 8 x 8
  fragments). fp32 (and fp16/bf16 shapes the tensor cores cannot take): each thread owns a ``TM x TN`` tile of C in
  registers; with a row-major A (fp32, k % 4 == 0) it owns groups of 4 rows and 4 columns and reads 16-byte vectors
  (4 k of an A row, 4 columns of a B row), else the k loop reads A (broadcast within a warp, or conflict-free when A
  is stored column-major) and consecutive B columns element by element. On sm_80+ the copies into shared memory
  are 16-byte ``cp.async`` where the arrays are 16-byte aligned; ``load_ab_async`` + ``wait_loads`` let a kernel copy
  the next k-slice while it multiplies the current one, and ``commit_loads`` + ``wait_pending_loads`` keep several
  k-slices in flight (more than 48 KiB of shared memory: :func:`allow_shared_memory` before the launch). fp16/bf16
  with m % 16 == n % 8 == k % 16 == 0 and whole warps: each warp owns a tile of 16 x 8 fragments of C and runs
  ``mma.sync.aligned.m16n8k16`` (sm_80+, fp32 accumulation) on fragments read from padded shared memory; under the
  simulator the same description runs its k loop on scalars
  with the same ownership of C. fp16 and bf16 accumulate in fp32. bf16: NumPy/numba arrays have no bfloat16
  dtype, so bf16 operands are ``uint16``/``int16`` arrays of bf16 bit patterns (``torch_tensor.view(torch.int16)``),
  converted exactly on load and rounded to nearest-even on store.
"""

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()  # before any numba-cuda compile, also of the user's kernels (NumPy >= 2.5)

from ._fft import FFTDescription, fft  # noqa: E402
from ._launch import allow_shared_memory  # noqa: E402
from ._matmul import MatmulDescription, matmul  # noqa: E402

__all__ = ["fft", "FFTDescription", "matmul", "MatmulDescription", "allow_shared_memory"]
