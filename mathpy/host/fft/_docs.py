"""The FFT API's shared docstring text (filled into the docstrings of :mod:`._functions`, :mod:`._fft` and
:mod:`._options` by :func:`mathpy._docstrings.fill`): written once, read in every ``help()``."""

from ..._docstrings import COMMON

__all__ = ["FFT_DOCS"]

FFT_DOCS = {
    **COMMON,
    "a": """\
Input array: a NumPy, CuPy or torch array (on the CPU or a GPU), a sequence of numbers, or an object
with ``__dlpack__`` / ``__cuda_array_interface__``. A torch tensor with a lazy conjugate or negative bit
(``x.conj()``, ``x.conj().imag``) is read as its values, resolved into a copy when it is given; one to
be transformed in place is refused.""",
    "n": """\
Length of the transformed axis of the output: the input is cropped or zero-padded to it along ``axis``.
Default: the input's length along ``axis``.""",
    "n_inverse_real": """\
Length of the transformed axis of the real output. ``n // 2 + 1`` input points are used (cropped or
zero-padded). Default: ``2 * (m - 1)``, ``m`` being the input's length along ``axis``.""",
    "axis": """\
Axis over which to compute the transform (default: the last).""",
    "s": """\
Lengths of the output along ``axes`` (for the inverse real transforms, ``s[-1]`` is the real length of
the last axis and ``s[-1] // 2 + 1`` input points are used): the input is cropped or zero-padded to
them. ``-1`` keeps the input's length; ``None`` entries, and ``s`` without ``axes``, work with NumPy 2's
``DeprecationWarning``. Default: the input's lengths.""",
    "axes": """\
Axes to transform. An axis named twice is transformed twice (each time with its own length from ``s``),
as NumPy does; more than three axes are transformed in several plans. Default: all axes (the last
``len(s)`` when ``s`` is given).""",
    "norm": """\
``"backward"`` (default: the forward transform unscaled, the inverse scaled by ``1/n``), ``"ortho"``
(``1/sqrt(n)`` both ways) or ``"forward"`` (``1/n`` forward, the inverse unscaled). Applied after the
epilog: callbacks see the unnormalised transform.""",
    "out": """\
Array to put the result in, of ``a``'s package and device and of the result's shape; the result is cast
to its dtype (``same_kind`` casting). It is returned.""",
    "prolog": """\
A callback fused into the transform's loads: a Python function ``prolog(data_in, offset, user_info,
unused) -> value`` (nvmath-python's signature), a :class:`~mathpy.fft.Callback` with user data, or
LTO-IR bytes (GPU only). It reads the input after promotion and padding or cropping to ``n`` / ``s``;
``offset`` indexes that C-contiguous array. See the callback guide.""",
    "epilog": """\
A callback fused into the transform's stores: ``epilog(data_out, offset, value, user_info, unused)``
(stores ``value``, or what it makes of it, at ``data_out[offset]``), a :class:`~mathpy.fft.Callback` or
LTO-IR bytes. It sees the unnormalised result; ``offset`` indexes the output array.""",
    "options": """\
:class:`~mathpy.fft.FFTOptions` or a dict of its fields (``inplace``, ``blocking``); the function sets
``fft_type`` and ``last_axis_parity`` itself.""",
    "raises": """\
TypeError
    ``a`` is not an array (``"a: expected an array, got NoneType"``) or has no FFT dtype (strings,
    datetimes), a real-input transform got complex input, ``out`` is not an array or cannot hold the
    result's dtype, a callback does not compile (:class:`~mathpy.CallbackCompileError`), or long
    double input is to run on a GPU.
ValueError
    A length below 1 (NumPy's ``"Invalid number of FFT data points (0) specified."``), a bad
    ``norm``, ``s`` and ``axes`` of different lengths, ``out`` of the wrong shape or read-only. An
    axis out of range raises NumPy's ``AxisError``, a ValueError and an IndexError.
:class:`~mathpy.NoDeviceError`
    GPU execution was asked for on a machine without a usable GPU.""",
    "notes": """\
The CPU runs the fastest installed CPU FFT library (SciPy's pocketfft, FFTW through pyFFTW, MKL through mkl_fft:
:class:`~mathpy.ExecutionCPU` says how it is chosen, and ``num_threads`` its threads) with the callbacks compiled
by numba and fused into the passes around it; a GPU runs cuFFT with the callbacks compiled to LTO-IR and fused into
its kernels.
Both give NumPy's results: float16 input (and torch's complex32) is computed in single precision, integer
and bool input in double, long double input in long double (on the CPU only: cuFFT has none, so GPU
execution refuses it). Half-precision transforms (complex32 results) are :class:`~mathpy.fft.FFT`'s.
The result comes back in ``a``'s package and on its device.

Plans are cached (:func:`~mathpy.fft.plan_cache_info`), keyed by everything that makes plans differ but
the stream; a repeated call with the same argument facts reruns the first call's prepared call (about 10
us of host time on an H200).""",
}
