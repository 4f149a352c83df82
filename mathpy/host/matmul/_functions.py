"""The matmul API's public function: :func:`matmul`, numpy.matmul's semantics on cuBLASLt or the CPU, routed to
:mod:`mathpy.torch` when a tensor needs a gradient or a torch.compile trace (:mod:`mathpy._torch_route`), else run by
:func:`._stateless.run` (the memo of prepared calls, planned by :mod:`._resolve` as :class:`~._matmul.Matmul` plans)."""

from ... import _torch_route
from ..._docstrings import fill
from . import _stateless
from ._docs import MATMUL_DOCS

__all__ = ["matmul"]

_torch = []  # mathpy.torch's matmul module, imported on the first routed call: import mathpy never imports torch


def _torch_matmul():
    if not _torch:  # (an import statement here would cost its import machinery at every call)
        from ...torch import _matmul
        _torch.append(_matmul)
    return _torch[0]


@fill(MATMUL_DOCS)
def matmul(a, b, c=None, *, alpha=1, beta=None, epilog=None, epilog_inputs=None, options=None, preferences=None,
           execution=None, stream=None, quantization_scales=None, out=None):
    """Compute ``epilog(alpha * a @ b + beta * c)`` with numpy.matmul's semantics, on cuBLASLt or the CPU.

    With ``a`` and ``b`` only, this is :func:`numpy.matmul`: the same result shape, dtype and values, for every
    package and device.

    Parameters
    ----------
    {operands}
    {epilog}
    {options}
    preferences : MatmulPlanPreferences or dict, optional
        Planning limits: how many candidate algorithms, the largest workspace.
    execution : str, ExecutionCPU, ExecutionCUDA or dict, optional
        {execution}
    stream : int or stream object, optional
        {stream}
    {quantization_scales}
    out : array, optional
        numpy.matmul's ``out``: an array of the operands' package and device (or a one-element tuple of one) that
        receives the result and is returned. Its last axes are the result's (its shape must end with them); it may
        have more leading axes, over which the result is repeated, as NumPy broadcasts the operands' batch over
        them. The result is cast to its dtype with NumPy's ``"same_kind"`` rule. It may overlap the operands: the
        product is computed first, then copied into it.

    Returns
    -------
    array or (array, dict)
        The result, in the operands' package and on their device (a NumPy scalar for 1-D NumPy operands, as
        numpy.matmul); ``out`` when given; ``(result, outputs)`` when the epilog has outputs
        (``outputs["relu_aux"]``, ...).

    Raises
    ------
    {raises}
    TypeError, ValueError
        A bad ``out``, with NumPy's types and words: not an array (``"return arrays must be of ArrayType"``), of
        another package or device, a shape that does not end with the result's or whose leading axes the batch
        does not broadcast to, read-only, or a dtype the result cannot be cast to (``"same_kind"``).

    Notes
    -----
    {notes}

    Plans are cached in :data:`~mathpy.matmul_plan_cache`; a repeated GPU call whose operands need no copy reruns
    the first call's prepared call on the new operands' memory (about 20 us of host time on an H200).

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> mathpy.matmul(a, a.T)
    array([[ 5., 14.],
           [14., 50.]], dtype=float32)
    >>> mathpy.matmul(np.array([[1, 2]], np.int8), np.array([[100], [14]], np.int8))   # int8 wraps, as NumPy
    array([[-128]], dtype=int8)
    >>> mathpy.matmul(a, a.T, epilog="relu_bias", epilog_inputs={"bias": np.array([-10.0, -40.0], np.float32)})
    array([[ 0.,  4.],
           [ 0., 10.]], dtype=float32)
    >>> def leaky(value, row, col, data):     # a Python epilog, fused into the product
    ...     return value if value > 0 else value * np.float32(0.1)
    >>> mathpy.matmul(a, -a.T, epilog=leaky)
    array([[-0.5, -1.4],
           [-1.4, -5. ]], dtype=float32)
    >>> d = np.empty((2, 2), np.float64)
    >>> mathpy.matmul(a, a.T, out=d) is d        # numpy.matmul's out=, cast as NumPy casts
    True
    """
    if _torch_route.wanted(a, b, c, epilog_inputs, out):  # autograd / torch.compile: mathpy.torch
        if out is not None:
            raise TypeError("matmul(out=...) has no backward and no torch.compile form (as torch's own out= "
                            "arguments): leave out= away, or call it under torch.no_grad() with detached tensors")
        return _torch_matmul().route(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution,
                                     stream)
    return _stateless.run(a, b, c, alpha=alpha, beta=beta, epilog=epilog, epilog_inputs=epilog_inputs, options=options,
                          preferences=preferences, execution=execution, stream=stream,
                          quantization_scales=quantization_scales, out=out)
