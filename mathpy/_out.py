"""NumPy's ``out=``, shared by the host APIs: which objects are taken, when one may be written, and the copy of a
result into it. Each API checks the shape with its own NumPy rule (``numpy.fft``'s exact shape, ``numpy.matmul``'s
gufunc core and loop dimensions) and then calls :func:`check_writable` and :func:`copy_into`.

>>> import numpy as np
>>> out = out_operand(np.zeros(3, np.float32), wrap_operand(np.ones(3)))
>>> check_writable(out, np.dtype(np.float64), "matmul")      # float64 -> float32 is a same-kind cast
>>> check_writable(out, np.dtype(np.complex128), "matmul")
Traceback (most recent call last):
...
TypeError: Cannot cast ufunc 'matmul' output from dtype('complex128') to dtype('float32') with casting rule 'same_kind'
"""

import numpy as np

from . import _operands
from ._operands import wrap_operand

__all__ = ["out_operand", "check_writable", "copy_into"]


def out_operand(out, like):
    """``out=`` wrapped as an Operand, of ``like``'s package and device (ValueError naming both otherwise); NumPy's
    TypeError for what is not an array. A ufunc's one-element tuple form (``out=(array,)``) is taken too."""
    if type(out) is tuple:
        if len(out) != 1:
            raise ValueError(f"The 'out' tuple must have exactly one entry per ufunc output (got {len(out)})")
        out = out[0]
        if out is None:
            return None
    if _operands.package_of(out) is None and not hasattr(out, "__cuda_array_interface__") and \
            not hasattr(out, "__dlpack__"):
        raise TypeError(f"return arrays must be of ArrayType (out= must be a NumPy, CuPy or torch array, not "
                        f"{type(out).__name__})")
    return _operands.wrap_operands({"a": like.tensor, "out": out}, written=("out",))["out"]


def check_writable(out_op, dtype, name):
    """NumPy's checks of an ``out`` that a result of ``dtype`` goes into: writable (ValueError "output array is
    read-only") and reachable by a same-kind cast (NumPy's UFuncTypeError is a TypeError with these words)."""
    if out_op.package == "numpy" and not out_op.tensor.flags.writeable:
        raise ValueError("output array is read-only")
    if not np.can_cast(dtype, out_op.dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc '{name}' output from {dtype!r} to {out_op.dtype!r} with casting rule "
                        f"'same_kind'")


def copy_into(out, result, stream):
    """Copy ``result`` (NumPy on the host or a device array; broadcast to ``out``'s shape, cast to its dtype) into
    the caller's ``out`` (an Operand of any package, on any device), ordered on raw ``stream`` on a GPU."""
    if out.on_host:
        source = result if isinstance(result, (np.ndarray, np.generic)) else \
            _operands.to_host(wrap_operand(result), stream).tensor
        np.copyto(out.numpy(), source, casting="same_kind")
        return
    source = wrap_operand(result)
    if source.on_host:
        source = _operands.to_device(source, out.device_id, stream)
    out.interface.on(out.device_id, stream).copy_into(out.tensor, source.tensor)
