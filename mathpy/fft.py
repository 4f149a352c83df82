"""mathpy.fft: NumPy-compatible FFTs on cuFFT and the CPU, with fused Python callbacks.

See :mod:`mathpy.host.fft` for the reference; ``import mathpy.fft as fft`` replaces ``numpy.fft``.
"""

from .host.fft import *  # noqa: F403
from .host.fft import __all__  # noqa: F401
