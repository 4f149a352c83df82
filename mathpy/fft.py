"""mathpy.fft: ``import mathpy.fft as fft`` replaces ``numpy.fft``, on cuFFT and the CPU, with fused Python callbacks.

The reference of every name is its docstring (``help(mathpy.fft.fft)``); this module's text is the package's, in
:mod:`mathpy.host.fft`.
"""

from .host.fft import *  # noqa: F403
from .host.fft import __all__  # noqa: F401
from .host.fft import __doc__  # noqa: F401,F811  help(mathpy.fft) and the API page show the package's overview
