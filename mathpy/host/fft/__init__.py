"""FFTs on cuFFT (GPU) and scipy.fft (CPU), NumPy-compatible, with Python prolog/epilog callbacks fused into cuFFT.

Public as :mod:`mathpy.fft`:

- stateless functions with NumPy 2's signatures: :func:`fft`, :func:`ifft`, :func:`rfft`, :func:`irfft`, :func:`fft2`,
  :func:`ifft2`, :func:`rfft2`, :func:`irfft2`, :func:`fftn`, :func:`ifftn`, :func:`rfftn`, :func:`irfftn`,
  :func:`hfft`, :func:`ihfft`, plus keyword-only ``prolog=``, ``epilog=``, ``options=``, ``execution=``, ``stream=``;
- :func:`fftfreq`, :func:`rfftfreq`, :func:`fftshift`, :func:`ifftshift`;
- the stateful :class:`FFT` (``plan`` / ``execute`` / ``reset_operand`` / ``free``, ``create_key``),
  :class:`FFTOptions` and :class:`FFTDirection`;
- callbacks: :class:`Callback` (a function with user data), :func:`compile_prolog` / :func:`compile_epilog`
  (LTO-IR for nvmath-python-style callbacks);
- the plan cache behind the stateless calls: :func:`plan_cache_info`, :func:`plan_cache_clear`,
  :func:`set_plan_cache_size`;
- ``scipy_backend``: ``with scipy.fft.set_backend(mathpy.fft.scipy_backend): scipy.fft.fft(x)``.

Conventions:

- The stateless functions follow numpy.fft (NumPy 2): its dtypes (float16 input is computed in single precision,
  integers and bools in double, long double in long double on the CPU; cuFFT has no long double, so the GPU refuses
  it with a TypeError), repeated axes, ``s`` with -1 or None, its errors and DeprecationWarnings. Results come back
  in the caller's package and on its device; ``execution=`` may run a transform elsewhere (data is moved both ways).
  torch's complex32, which NumPy lacks, is computed in complex64 likewise.
- Half precision is the stateful :class:`FFT`'s (and :mod:`mathpy.compat.nvmath`'s, which uses it), on the GPU only,
  as in nvmath-python 1.0: torch float16 tensors give R2C with a ``torch.complex32`` result, complex32 tensors C2C
  (complex32) or C2R (``fft_type="C2R"``, float16). Only torch has complex32, so NumPy and CuPy float16 operands are
  refused there (TypeError), as is half precision on the CPU. cuFFT's half-precision plans take power-of-two lengths
  only (other lengths: ValueError at construction, naming the axis and length) and no callbacks (ValueError at
  ``plan``); R2C input and C2R output are staged with the halved axis at unit stride when the operand's layout has
  it elsewhere. complex32 is described by :data:`mathpy._dtypes.COMPLEX32` (two float16), strides in its elements.
- :class:`FFT` is unnormalised (like cuFFT); the stateless functions apply ``norm=`` after the epilog, so callbacks
  always see the unnormalised transform.
- Callback offsets index :attr:`FFT.input_layout` (prolog) and :attr:`FFT.output_layout` (epilog), identical on the
  CPU and the GPU (``_layout.engine_layout``); for the stateless functions that is the layout of the operand after
  promotion and ``n``/``s`` padding or cropping (a new C-contiguous array whenever either changed it).
- Plans behind the stateless functions are cached (LRU, bounded by count and workspace bytes), keyed by the layouts,
  dtypes, axes, execution space, device and the callbacks with their user data; not by stream (one plan serves every
  stream). A repeated stateless call with the same argument facts runs the first call's prepared call.

Engines: ``_cpu.CPUEngine`` (scipy.fft, CPU callbacks through numba) and ``_cufft.CUFFTEngine`` (cuFFT with LTO
callbacks); both execute a ``_layout.Transform`` unnormalised and see callbacks with the same offsets.

>>> import numpy as np
>>> import mathpy.fft
>>> x = np.random.default_rng(0).standard_normal((4, 16))
>>> bool(np.allclose(mathpy.fft.rfft(x), np.fft.rfft(x)))
True
"""

from ...jit import compile_epilog, compile_prolog
from . import _scipy_backend as scipy_backend
from ._callback import Callback
from ._freq import fftfreq, fftshift, ifftshift, rfftfreq
from ._functions import (fft, fft2, fftn, hfft, ifft, ifft2, ifftn, ihfft, irfft, irfft2, irfftn, rfft, rfft2,
                         rfftn)
from ._options import FFTDirection, FFTOptions
from ._fft import FFT, plan_cache_clear, plan_cache_info, set_plan_cache_size

__all__ = [
    "fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfft",
    "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift", "FFT", "FFTOptions", "FFTDirection", "Callback",
    "compile_prolog", "compile_epilog", "plan_cache_info", "plan_cache_clear", "set_plan_cache_size", "scipy_backend",
]
