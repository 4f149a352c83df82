"""The matmul API's shared docstring text (filled into :func:`~._stateless.matmul`, :class:`~._matmul.Matmul` and
its methods by :func:`mathpy._docstrings.fill`): written once, read in every ``help()``."""

from ..._docstrings import COMMON

__all__ = ["MATMUL_DOCS"]

MATMUL_DOCS = {
    **COMMON,
    "operands": """\
a, b : array
    The operands, of one package and device: NumPy, CuPy or torch arrays, sequences of numbers, or objects with
    ``__dlpack__`` / ``__cuda_array_interface__``. numpy.matmul's rules: 1-D operands are a row (``a``) or a
    column (``b``) whose axis is dropped from the result, batch dimensions broadcast, mixed dtypes are promoted
    as NumPy promotes them. Any stride is taken (transposed and strided operands are not copied when the library
    can address them).
c : array, optional
    Added to the product (``beta * c``); it broadcasts to the result's shape and has the result's dtype.
alpha : number, optional
    Scales the product (default 1): an integer for integer operands, 0 or 1 for bool ones.
beta : number, optional
    Scales ``c`` (default 1 with ``c``, else 0; non-zero needs ``c``).""",
    "epilog": """\
epilog : MatmulEpilog, str or int, optional
    An epilog fused into the product (:class:`~mathpy.MatmulEpilog`: ``"relu"``, ``"gelu"``, ``"bias"``,
    ``"relu_bias"``, ``"relu_aux"``, ``"drelu_bgrad"``, ``"bgrada"``, ...), floating-point operands only.
epilog_inputs : dict, optional
    The epilog's inputs by name (``"bias"``: one value per row of the result; ``"relu_aux"`` / ``"gelu_aux"``:
    the aux output of the forward epilog), of the operands' package and device.""",
    "options": """\
options : MatmulOptions or dict, optional
    :class:`~mathpy.MatmulOptions`: result, compute and scale types, TF32, float8 scales, the result's memory
    order (``result_order``), blocking.""",
    "quantization_scales": """\
quantization_scales : dict or object, optional
    float8 scale factors ``{"a": ..., "b": ..., "d": ...}`` (or an object with those attributes): numbers, as
    ``MatmulOptions.a_scale`` etc., or one-element float32 arrays of the operands' package and device, read at
    every execution.""",
    "raises": """\
TypeError
    An operand is not an array (``"a: expected an array, got NoneType"``), dtypes that do not combine (named,
    with the allowed ones), an integer product other than int8 (or bool) to run on a GPU, a bad ``alpha`` /
    ``beta`` or epilog input dtype.
ValueError
    Shapes that do not match (``a``'s columns and ``b``'s rows, batch dimensions, ``c``), a bad option or
    epilog, an epilog input of the wrong shape or a misspelled one (named, with the epilog's inputs), an epilog
    on non-floating operands, ``result_order="C"`` with an epilog that needs a column-major result, a product
    cuBLASLt has no algorithm for.
:class:`~mathpy.NoDeviceError`
    GPU execution was asked for on a machine without a usable GPU.""",
    "notes": """\
The CPU computes with NumPy (its BLAS for floating point; float16, bfloat16 and float8 in float32, rounded once,
as cuBLASLt's 32F compute type does; integers, bool, long double and object arrays exactly as NumPy does). A GPU
runs cuBLASLt: int8 (and bool, as int8) on its integer kernels with int32 sums; other integers, long double and
object arrays are CPU only. Both execution spaces give the same numbers and formats, epilog outputs included.

The result is C-ordered for C-ordered operands, as numpy.matmul's; in general it follows nvmath-python's rule:
``c``'s order, else column-major when the epilog has a per-row operand, else ``a``'s order.
``MatmulOptions(result_order="F")`` asks for cuBLASLt's own column-major order (a few percent faster for
16-bit products).""",
}
