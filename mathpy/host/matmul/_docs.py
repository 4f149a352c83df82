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
    can address them). A torch tensor with a lazy conjugate or negative bit (``x.conj()``, ``x.conj().imag``) is
    read as its values, resolved into a copy when it is given: a :class:`~mathpy.Matmul` keeps that copy, so later
    writes through the view do not reach it (``reset_operands`` takes a new one).
c : array, optional
    Added to the product (``beta * c``); it broadcasts to the result's shape and has the result's dtype. A lazy
    torch view as ``c`` of an in-place product (``MatmulOptions(inplace=True)``) is refused: it cannot be written.
alpha : number, optional
    Scales the product (default 1): an integer for integer operands, 0 or 1 for bool ones.
beta : number, optional
    Scales ``c`` (default 1 with ``c``, else 0; non-zero needs ``c``).""",
    "epilog": """\
epilog : MatmulEpilog, str, int or function, optional
    An epilog fused into the product, floating-point operands only. Either one of cuBLASLt's
    (:class:`~mathpy.MatmulEpilog` or its name: ``"relu"``, ``"gelu"``, ``"bias"``, ``"relu_bias"``,
    ``"relu_aux"``, ``"drelu_bgrad"``, ``"bgrada"``, ...), or a Python function ``f(value, row, col, data)``
    (``f(value, batch, row, col, data)`` for a batched product) that returns the element to store:
    ``value`` is ``alpha * a @ b + beta * c`` at ``(row, col)`` in the compute precision (float32 for 16-bit
    and float32 operands, float64 for float64), ``row`` / ``col`` / ``batch`` its int64 coordinates in the
    result, ``data`` the array ``epilog_inputs["data"]`` (indexed as a NumPy array of its shape: ``data[row]``,
    ``data[row, col]``...) or None. The function is compiled with numba (CPU) or numba-cuda (GPU) and applied
    to each element before it is stored, in the GEMM kernel itself on the GPU (on Hopper a persistent TMA +
    wgmma kernel): no second pass over the result. float16, bfloat16, float32 and float64 operands; the
    result is C-ordered.
epilog_inputs : dict, optional
    The epilog's inputs by name (``"bias"``: one value per row of the result; ``"relu_aux"`` / ``"gelu_aux"``:
    the aux output of the forward epilog; ``"aux_scale"``: a float8 GELU aux's scale, a number or a one-element
    float32 array; ``"data"``: a Python epilog's array, optional), of the operands' package and device.""",
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
    cuBLASLt has no algorithm for, a lazy torch view (conjugate or negative bit) as ``c`` of an in-place product.
:class:`~mathpy.NoDeviceError`
    GPU execution was asked for on a machine without a usable GPU.""",
    "notes": """\
The CPU computes with NumPy (its BLAS for floating point, straight into the result, then alpha, ``beta * c``, the
bias, RELU / GELU or a Python epilog in one pass over it on every thread; float16, bfloat16 and float8 in float32,
rounded once, as cuBLASLt's 32F compute type does; integers, bool, long double and object arrays exactly as NumPy
does; ``ExecutionCPU(num_threads=...)`` limits the BLAS's threads for the call). A GPU
runs cuBLASLt: int8 (and bool, as int8) on its integer kernels with int32 sums; other integers, long double and
object arrays are CPU only. Both execution spaces give the same numbers and formats, epilog outputs included.

The result is C-ordered for C-ordered operands, as numpy.matmul's; in general it follows nvmath-python's rule:
``c``'s order, else column-major when the epilog has a per-row operand, else ``a``'s order.
``MatmulOptions(result_order="F")`` asks for cuBLASLt's own column-major order (a few percent faster for
16-bit products).""",
}

# The methods of Matmul: their parameters, returns and raises (the summaries stay in _matmul.py)
_METHODS = {
    "plan": """\
Parameters
----------
epilog : MatmulEpilog, str, int or callable, optional
    An epilog fused into the product: a :class:`~mathpy.MatmulEpilog` (or its name) run by cuBLASLt,
    floating-point operands only; or a Python function ``f(value, row, col, data)`` /
    ``f(value, batch, row, col, data)`` fused into mathpy's own GEMM (:mod:`._fused`).
epilog_inputs : dict, optional
    The epilog's inputs by name (``"bias"``, ``"relu_aux"``, ``"gelu_aux"``, ``"aux_scale"``; ``"data"``,
    optional, for a Python epilog), of the operands' package and device.
preferences : MatmulPlanPreferences or dict, optional
    How many candidate algorithms to ask for, the largest workspace; the GELU aux's dtype (``aux_type``) and
    amax (``aux_amax``).
algorithms : list, optional
    Restrict the candidates to these (from an earlier ``plan()`` of the same problem, possibly reconfigured
    with ``CublasLtAlgorithm.configured``: cuBLASLt checks them).
stream : int or stream object, optional
    The plan's home stream: its workspace is allocated in this stream's order and serves executions there
    (default: the current stream now); executions on other streams take a workspace of their own.

Returns
-------
list
    The candidate algorithms, the one in use first (one ``CPUAlgorithm`` on the CPU).

Raises
------
ValueError
    An unknown or misspelled epilog or epilog input (named, with the epilog's inputs), a missing input, an
    epilog the dtypes do not take, ``result_order="C"`` with a per-row epilog operand, no algorithm, a ``data``
    smaller than the indices a Python epilog's source shows (named, with the shape it needs).
TypeError
    An epilog input of the wrong dtype or not an array.
:class:`~mathpy.InvalidPlanStateError`
    The Matmul was freed.
:class:`~mathpy.StreamCaptureError`
    The stream is capturing a CUDA graph: plan before the capture.

Notes
-----
Planning again replaces the plan; a failure leaves the Matmul unplanned.""",
    "autotune": """\
Parameters
----------
iterations : int, optional
    Runs per candidate (default 3).
prune : int, optional
    Keep only that many candidates, the fastest.
release_workspace : bool, optional
    Give the workspace back afterwards.
stream : int or stream object, optional
    The stream the candidates are timed on (default: the current stream now).

Returns
-------
list of (algorithm, float)
    ``(algorithm, seconds)`` pairs, fastest first.

Raises
------
:class:`~mathpy.InvalidPlanStateError`
    Before :meth:`plan`, or after :meth:`free`.
ValueError
    ``iterations`` or ``prune`` that is not a positive int.
:class:`~mathpy.StreamCaptureError`
    The stream is capturing a CUDA graph (timing waits on the host): autotune before the capture.""",
    "execute": """\
Parameters
----------
stream : int or stream object, optional
    The CUDA stream for this execution (default: the operands' package's current stream, resolved at this
    call). Ignored on the CPU. The execution is recorded when the stream is capturing a CUDA graph.
algorithm : algorithm, optional
    One of :attr:`algorithms` to run this time (default: the first).
release_workspace : bool, optional
    Give the workspace back after this call (the next one takes it again).

Returns
-------
array or (array, dict)
    The result, in the operands' package and on their device; ``(result, outputs)`` when the epilog has
    outputs (by name: ``"relu_aux"``, ``"gelu_aux"``, bias gradients, ``"gelu_aux_amax"``, ``"result_amax"``).

Raises
------
:class:`~mathpy.InvalidPlanStateError`
    Before :meth:`plan`, after :meth:`free`, or after :meth:`release_operands`.
:class:`~mathpy.StreamCaptureError`
    A capture of work a graph cannot record: host (NumPy) operands or results with GPU execution,
    ``blocking=True``, ``release_workspace=True``.
:class:`~mathpy.OutOfBoundsError`
    With ``MatmulOptions(check_bounds=True)``: a Python epilog read an operand outside its shape (both named).""",
    "reset_operands": """\
Parameters
----------
a, b, c : array, optional
    New operands of the same shapes, dtypes, layouts, package and device as the planned ones (a lazy torch
    view: its resolved copy, taken now).
epilog_inputs : dict, optional
    New epilog inputs by name (after :meth:`plan`).
alpha, beta : number, optional
    New scalars.
quantization_scales : dict or object, optional
    New scale tensors (for the scales given as tensors).
stream : int or stream object, optional
    Accepted for nvmath-python's signature and checked; nothing is copied here (each :meth:`execute` reads
    the operands on its own stream).

Raises
------
ValueError
    An operand that differs from the planned one (nothing changes), ``c`` for a Matmul built without it, an
    epilog input the plan's epilog does not take, a lazy torch view as ``c`` of an in-place product. After
    :meth:`release_operands` every operand must be given again.
:class:`~mathpy.InvalidPlanStateError`
    The Matmul was freed.""",
}
MATMUL_DOCS.update(_METHODS)
