"""numpy.fft's functions on cuFFT and the CPU: ``import mathpy.fft as fft`` replaces ``numpy.fft``.

Each function takes NumPy 2's parameters (``n`` / ``s``, ``axis`` / ``axes``, ``norm``, ``out``) with NumPy's rules
(:mod:`._numpy_rules`: dtypes, repeated axes, lengths, errors and warnings), plus keyword-only ``prolog=`` /
``epilog=`` (callbacks fused into the transform), ``options=``, ``execution=`` and ``stream=``. How a call runs is in
:mod:`._numpy_call`; the docstrings' shared parameter text is in :mod:`._docs`.

>>> import numpy as np
>>> x = np.arange(6, dtype=np.float32)
>>> fft(x).dtype, rfft(x).shape, irfft(rfft(x), n=6).dtype
(dtype('complex64'), (4,), dtype('float32'))
>>> bool(np.allclose(ifft(fft(x)), x, atol=1e-6))
True
"""

from ... import _operands, _torch_route
from ..._docstrings import fill, render
from ..._out import copy_into
from . import _numpy_call
from ._docs import FFT_DOCS
from ._numpy_call import conj, scope
from ._numpy_rules import swap_norm

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "hfft", "ihfft"]


# --- the route to mathpy.torch -------------------------------------------------------------------------------------
# Every function asks _torch_route.wanted first: a tensor that needs a gradient, or a torch.compile trace, goes to
# mathpy.torch's op, whose kernel runs _numpy_call's functions (below this module: no import cycle).

_torch = []  # mathpy.torch's FFT module, imported on the first routed call: import mathpy never imports torch


def _torch_fft():
    if not _torch:  # (an import statement here would cost its import machinery at every call)
        from ...torch import _fft
        _torch.append(_fft)
    return _torch[0]


def _one_d(name, kind, inverse, a, n, axis, norm, out, prolog, epilog, options, execution, stream):
    if _torch_route.wanted(a, out, prolog, epilog):
        return _torch_fft().route(name, a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    return _numpy_call.one_d(name, kind, inverse, a, n, axis, norm, out, prolog, epilog, options, execution, stream)


def _n_d(name, kind, inverse, a, s, axes, norm, out, prolog, epilog, options, execution, stream):
    if _torch_route.wanted(a, out, prolog, epilog):
        return _torch_fft().route(name, a, s, axes, norm, out, prolog, epilog, options, execution, stream)
    return _numpy_call.n_d(name, kind, inverse, a, s, axes, norm, out, prolog, epilog, options, execution, stream)

# The parameters every function takes after ``a`` (1-D or N-D), its keyword-only ones, and the sections every
# function has
_SHARED = """\
prolog : callable, Callback, bytes or dict, optional
    {prolog}
epilog : callable, Callback, bytes or dict, optional
    {epilog}
options : FFTOptions or dict, optional
    {options}
execution : str, ExecutionCPU, ExecutionCUDA or dict, optional
    {execution}
stream : int or stream object, optional
    {stream}"""
_ONE_D = """\
n : int, optional
    {n}
axis : int, optional
    {axis}
norm : {"backward", "ortho", "forward"}, optional
    {norm}
out : array, optional
    {out}"""
_N_D = """\
s : sequence of ints, optional
    {s}
axes : sequence of ints, optional
    {axes}
norm : {"backward", "ortho", "forward"}, optional
    {norm}
out : array, optional
    {out}"""
_SECTIONS = """\
Raises
------
{raises}

Notes
-----
{notes}"""
_doc = fill({**FFT_DOCS, "keywords": render(_SHARED, FFT_DOCS), "sections": render(_SECTIONS, FFT_DOCS),
             "one_d": render(_ONE_D, FFT_DOCS), "n_d": render(_N_D, FFT_DOCS),
             "one_d_inverse_real": render(_ONE_D, {**FFT_DOCS, "n": FFT_DOCS["n_inverse_real"]})})


@_doc
def fft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
        stream=None):
    """Compute the one-dimensional discrete Fourier transform, as :func:`numpy.fft.fft`.

    Parameters
    ----------
    a : array_like
        {a}
    {one_d}
    {keywords}

    Returns
    -------
    array
        The complex transform: complex64 for float16, float32 and complex64 input, complex128 for float64,
        integer and bool input, long double complex for long double input.

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> x = np.array([1.0, 2.0, 1.0, -1.0])
    >>> mathpy.fft.fft(x)
    array([3.+0.j, 0.-3.j, 1.+0.j, 0.+3.j])

    A Python epilog fused into the transform (here on the CPU; on a GPU it is compiled into cuFFT's kernel):

    >>> def double(data_out, offset, value, user_info, unused):
    ...     data_out[offset] = value * 2
    >>> mathpy.fft.fft(x, epilog=double)
    array([6.+0.j, 0.-6.j, 2.+0.j, 0.+6.j])
    """
    return _one_d("fft", "C2C", False, a, n, axis, norm, out, prolog, epilog, options, execution, stream)


@_doc
def ifft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Compute the one-dimensional inverse discrete Fourier transform, as :func:`numpy.fft.ifft`.

    Parameters
    ----------
    a : array_like
        {a}
    {one_d}
    {keywords}

    Returns
    -------
    array
        The complex inverse transform (dtypes as :func:`fft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.ifft(np.array([3, -3j, 1, 3j]))
    array([ 1.+0.j,  2.+0.j,  1.+0.j, -1.+0.j])
    """
    return _one_d("ifft", "C2C", True, a, n, axis, norm, out, prolog, epilog, options, execution, stream)


@_doc
def rfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Compute the one-dimensional discrete Fourier transform of real input, as :func:`numpy.fft.rfft`: the
    ``n // 2 + 1`` non-negative frequency terms.

    Parameters
    ----------
    a : array_like
        {a}
        Real (a complex input is a TypeError).
    {one_d}
    {keywords}

    Returns
    -------
    array
        The complex half spectrum (complex64 for float16 and float32 input, complex128 for float64, integer and
        bool input), of length ``n // 2 + 1`` along ``axis``.

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.rfft(np.array([1.0, 2.0, 1.0, -1.0]))
    array([3.+0.j, 0.-3.j, 1.+0.j])
    """
    return _one_d("rfft", "R2C", False, a, n, axis, norm, out, prolog, epilog, options, execution, stream)


@_doc
def irfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the inverse of :func:`rfft`, as :func:`numpy.fft.irfft`: a real result of length ``n``.

    Parameters
    ----------
    a : array_like
        {a}
        The half spectrum of a Hermitian-symmetric signal.
    {one_d_inverse_real}
    {keywords}

    Returns
    -------
    array
        The real signal: float32 for complex64 input, float16 for float16 input (computed in single precision,
        as NumPy rounds it back), float64 for double, integer and bool input.

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.irfft(np.array([3, -3j, 1]), n=4)
    array([ 1.,  2.,  1., -1.])
    """
    return _one_d("irfft", "C2R", True, a, n, axis, norm, out, prolog, epilog, options, execution, stream)


@_doc
def hfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Compute the FFT of a signal with Hermitian symmetry given by its first half (a real spectrum), as
    :func:`numpy.fft.hfft`.

    Computed as ``irfft(conj(a), n, norm=<the opposite direction's norm>)``; callbacks apply to that transform.

    Parameters
    ----------
    a : array_like
        {a}
    {one_d_inverse_real}
    {keywords}

    Returns
    -------
    array
        The real spectrum (dtypes as :func:`irfft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.hfft(np.array([1, 2, 3]))
    array([ 8., -2.,  0., -2.])
    """
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch (hfft, not irfft)
        return _torch_fft().route("hfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    swapped = swap_norm(norm)  # before any work: a bad norm is refused as numpy.fft does
    op = _operands.wrap_operand(a, "a")
    if op.dtype.kind == "c":
        with scope(op, stream):
            op = conj(op)
    return _numpy_call.one_d("hfft", "C2R", True, op.tensor, n, axis, swapped, out, prolog, epilog, options,
                             execution, stream)


@_doc
def ihfft(a, n=None, axis=-1, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the inverse of :func:`hfft`, as :func:`numpy.fft.ihfft`: ``conj(rfft(a, n, norm=<swapped>))``.

    Parameters
    ----------
    a : array_like
        {a}
        Real.
    {one_d}
    {keywords}

    Returns
    -------
    array
        The complex half of a Hermitian-symmetric signal (dtypes as :func:`rfft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.ihfft(np.array([8.0, -2.0, 0.0, -2.0]))
    array([1.-0.j, 2.-0.j, 3.-0.j])
    """
    if _torch_route.wanted(a, out, prolog, epilog):  # autograd / torch.compile: mathpy.torch
        return _torch_fft().route("ihfft", a, n, axis, norm, out, prolog, epilog, options, execution, stream)
    swapped = swap_norm(norm)
    result = _numpy_call.one_d("ihfft", "R2C", False, a, n, axis, swapped, out, prolog, epilog, options, execution,
                               stream)
    result_op = _operands.wrap_operand(result)
    with scope(result_op, stream):
        conjugated = conj(result_op).tensor
    if out is None:
        return conjugated
    copy_into(result_op, conjugated, None)  # result is out
    return result


@_doc
def fftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Compute the N-dimensional discrete Fourier transform, as :func:`numpy.fft.fftn`.

    Parameters
    ----------
    a : array_like
        {a}
    {n_d}
    {keywords}

    Returns
    -------
    array
        The complex transform over ``axes`` (dtypes as :func:`fft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> grid = np.arange(6.0).reshape(2, 3)
    >>> mathpy.fft.fftn(grid, axes=(1,))
    array([[ 3. +0.j       , -1.5+0.8660254j, -1.5-0.8660254j],
           [12. +0.j       , -1.5+0.8660254j, -1.5-0.8660254j]])

    An axis named twice is transformed twice, as NumPy does:

    >>> mathpy.fft.fftn(grid, axes=(0, 0))
    array([[ 0.+0.j,  2.+0.j,  4.+0.j],
           [ 6.+0.j,  8.+0.j, 10.+0.j]])
    """
    return _n_d("fftn", "C2C", False, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def ifftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the N-dimensional inverse discrete Fourier transform, as :func:`numpy.fft.ifftn`.

    Parameters
    ----------
    a : array_like
        {a}
    {n_d}
    {keywords}

    Returns
    -------
    array
        The complex inverse transform over ``axes`` (dtypes as :func:`fft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> grid = np.arange(6.0).reshape(2, 3)
    >>> mathpy.fft.ifftn(mathpy.fft.fftn(grid)).real
    array([[0., 1., 2.],
           [3., 4., 5.]])
    """
    return _n_d("ifftn", "C2C", True, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def rfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the N-dimensional discrete Fourier transform of real input, as :func:`numpy.fft.rfftn`: the last
    axis of ``axes`` is transformed first (real to complex) and halved to ``s[-1] // 2 + 1``.

    Parameters
    ----------
    a : array_like
        {a}
        Real.
    {n_d}
    {keywords}

    Returns
    -------
    array
        The complex transform (dtypes as :func:`rfft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.rfftn(np.arange(6.0).reshape(2, 3))
    array([[15.+0.j        , -3.+1.73205081j],
           [-9.+0.j        ,  0.+0.j        ]])
    """
    return _n_d("rfftn", "R2C", False, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def irfftn(a, s=None, axes=None, norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Compute the inverse of :func:`rfftn`, as :func:`numpy.fft.irfftn`: the last axis of ``axes`` is
    transformed last (complex to real).

    Parameters
    ----------
    a : array_like
        {a}
    {n_d}
    {keywords}

    Returns
    -------
    array
        The real result: float32 for single precision input (float16 too), float64 for double, integer and bool
        input, long double for long double; float16 for float16 input transformed over one axis, as NumPy.

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> grid = np.arange(6.0).reshape(2, 3)
    >>> mathpy.fft.irfftn(mathpy.fft.rfftn(grid), s=grid.shape, axes=(0, 1))
    array([[0., 1., 2.],
           [3., 4., 5.]])
    """
    return _n_d("irfftn", "C2R", True, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def fft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
         stream=None):
    """Compute the two-dimensional discrete Fourier transform, as :func:`numpy.fft.fft2`: :func:`fftn` over the
    last two axes by default.

    Parameters
    ----------
    a : array_like
        {a}
    s : sequence of ints, optional
        {s}
    axes : sequence of ints, optional
        Axes to transform (default: the last two); see :func:`fftn`.
    norm : {"backward", "ortho", "forward"}, optional
        {norm}
    out : array, optional
        {out}
    {keywords}

    Returns
    -------
    array
        The complex transform (dtypes as :func:`fft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.fft2(np.arange(6.0).reshape(2, 3))
    array([[15.+0.j        , -3.+1.73205081j, -3.-1.73205081j],
           [-9.+0.j        ,  0.+0.j        ,  0.+0.j        ]])
    """
    return _n_d("fft2", "C2C", False, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the two-dimensional inverse discrete Fourier transform, as :func:`numpy.fft.ifft2`.

    Parameters
    ----------
    a : array_like
        {a}
    s : sequence of ints, optional
        {s}
    axes : sequence of ints, optional
        Axes to transform (default: the last two); see :func:`fftn`.
    norm : {"backward", "ortho", "forward"}, optional
        {norm}
    out : array, optional
        {out}
        (NumPy 2.4's ``ifft2`` ignores ``out``; mathpy fills it, as documented.)
    {keywords}

    Returns
    -------
    array
        The complex inverse transform (dtypes as :func:`fft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> grid = np.arange(6.0).reshape(2, 3)
    >>> out = np.empty((2, 3), complex)
    >>> mathpy.fft.ifft2(mathpy.fft.fft2(grid), out=out) is out
    True
    """
    return _n_d("ifft2", "C2C", True, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
          stream=None):
    """Compute the two-dimensional discrete Fourier transform of real input, as :func:`numpy.fft.rfft2`.

    Parameters
    ----------
    a : array_like
        {a}
        Real.
    s : sequence of ints, optional
        {s}
    axes : sequence of ints, optional
        Axes to transform (default: the last two; the last one is halved); see :func:`rfftn`.
    norm : {"backward", "ortho", "forward"}, optional
        {norm}
    out : array, optional
        {out}
    {keywords}

    Returns
    -------
    array
        The complex half spectrum (dtypes as :func:`rfft`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> mathpy.fft.rfft2(np.arange(6.0).reshape(2, 3)).shape
    (2, 2)
    """
    return _n_d("rfft2", "R2C", False, a, s, axes, norm, out, prolog, epilog, options, execution, stream)


@_doc
def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, prolog=None, epilog=None, options=None, execution=None,
           stream=None):
    """Compute the inverse of :func:`rfft2`, as :func:`numpy.fft.irfft2`.

    Parameters
    ----------
    a : array_like
        {a}
    s : sequence of ints, optional
        {s}
    axes : sequence of ints, optional
        Axes to transform (default: the last two; the last one is the real one); see :func:`irfftn`.
    norm : {"backward", "ortho", "forward"}, optional
        {norm}
    out : array, optional
        {out}
        (NumPy 2.4's ``irfft2`` ignores ``out``; mathpy fills it, as documented.)
    {keywords}

    Returns
    -------
    array
        The real result (dtypes as :func:`irfftn`).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy.fft
    >>> grid = np.arange(6.0).reshape(2, 3)
    >>> mathpy.fft.irfft2(mathpy.fft.rfft2(grid), s=(2, 3))
    array([[0., 1., 2.],
           [3., 4., 5.]])
    """
    return _n_d("irfft2", "C2R", True, a, s, axes, norm, out, prolog, epilog, options, execution, stream)
