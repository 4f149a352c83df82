"""One handler per epilog operand: the bias, the RELU bitmask, the GELU pre-activation, the bias gradients, the
``data`` of a Python epilog, and the operands of float8 products that travel the same way: the result's amax and the
GELU aux's amax (outputs returned with the epilog's) and the quantization scales given as tensors (inputs read at
every execution).

:func:`given_inputs` checks which ``epilog_inputs`` an epilog takes. Each handler owns everything about its operand
(formats in :mod:`._epilog`):

- ``stage(op, product, spec, d_dtype)``: validate a given input (dtype, shape) and choose its layout (inputs only);
- ``layout(product, batch, d_dtype)``: the layout of an output the API allocates, and ``shape(layout, batch_shape)``
  / ``allocation(...)``: the array the caller gets and how it is allocated (outputs only);
- ``check(spec, d_dtype)``: what the result dtype must allow;
- ``set_attributes(desc, layout, d_dtype, batch)``: its cuBLASLt descriptor attributes; returns the attribute that
  takes its pointer at each execution;
- ``cpu_view(layout, base)``: the CPU engine's NumPy view of it.

Adding an epilog operand touches this file (and ``_epilog``'s table of which epilog takes which operand).

>>> sorted(HANDLERS)
['a_scale', 'aux_scale', 'b_scale', 'bgrada', 'bgradb', 'bias', 'd_scale', 'data', 'dgelu_bgrad', 'drelu_bgrad',
 'gelu_aux', 'gelu_aux_amax', 'relu_aux', 'result_amax']
>>> HANDLERS["relu_aux"].layout(8, 4, 3, None).col_stride       # in bits: 16 bytes per column
128
"""

import dataclasses
import math

import numpy as np

from ..._strides import c_strides
from ._epilog import EPILOG_INPUT_NAMES, gelu_aux_rows, relu_aux_rows
from ._layouts import Staged, batch_stride, strided_view
from ._options import BF16, E4M3, F16, FLOAT8_DTYPES
from ._problem import MatrixLayout

__all__ = ["HANDLERS", "given_inputs", "output_layouts", "SCALE_NAMES", "scale_items", "split_scales",
           "gelu_aux_dtype", "is_number", "c_stand_in", "Data"]


def _lt():
    from ...bindings import cublaslt
    return cublaslt


class Bias:
    """``bias``: one value per row of the result; shape ``(M,)``, ``(M, 1)`` or ``(*batch, M, 1)``."""

    name = "bias"

    def check(self, spec, d_dtype):
        pass

    def stage(self, op, product, spec, d_dtype):
        m, batch_shape = product.m, product.batch_shape
        batch = math.prod(batch_shape)
        shape, strides = tuple(op.shape), tuple(op.strides)
        allowed = (BF16, F16) if d_dtype in FLOAT8_DTYPES else (d_dtype,)
        if op.dtype not in allowed:
            raise TypeError(f"epilog input 'bias' has dtype {op.dtype.name}; for a {d_dtype.name} result it must be "
                            f"{' or '.join(d.name for d in allowed)}")
        if shape in ((m,), (m, 1)):
            bshape, bstrides, stride = (), (), strides[0]
        elif len(shape) >= 3 and shape[-2:] == (m, 1) and shape[:-2] == tuple(batch_shape):
            bshape, bstrides, stride = shape[:-2], strides[:-2], strides[-2]
        else:
            allowed_shapes = [(m,), (m, 1)] + ([(*batch_shape, m, 1)] if batch_shape else [])
            raise ValueError(f"epilog input 'bias' has shape {shape}; it must hold one value per row of the result "
                             f"(M = {m}): allowed shapes are {allowed_shapes}")
        stride_b = batch_stride(batch_shape, bshape, bstrides, m)
        mode = None
        if product.moves or (stride != 1 and m > 1) or stride_b is None:
            mode, stride_b = "contiguous", (m if bshape else 0)
        if batch == 1:
            stride_b = 0 if not bshape else m
        return Staged("bias", op, MatrixLayout(m, 1, 1, m, batch, stride_b, op.dtype), mode, None, product.moves)

    def set_attributes(self, desc, layout, d_dtype, batch):
        lt = _lt()
        if layout.dtype != d_dtype:
            lt.set_attribute(desc, lt.MatmulDesc.BIAS_DATA_TYPE, lt.cuda_data_type(layout.dtype))
        if batch > 1:
            lt.set_attribute(desc, lt.MatmulDesc.BIAS_BATCH_STRIDE, layout.batch_stride)
        return lt.MatmulDesc.BIAS_POINTER

    def cpu_view(self, layout, base):
        return strided_view(base, (layout.batch, layout.rows), (layout.batch_stride, 1))


class BiasGradient(Bias):
    """A bias gradient output: ``drelu_bgrad`` / ``dgelu_bgrad`` (sum of D over N) and ``bgrada`` (sum of A over K),
    length M; ``bgradb`` (sum of B over K), length N. Shape ``(L,)``, or ``(*batch, L, 1)`` when batched. cuBLASLt
    writes it through the bias pointer."""

    def __init__(self, name):
        self.name = name

    def layout(self, m, n, batch, d_dtype):
        length = n if self.name == "bgradb" else m
        return MatrixLayout(length, 1, 1, length, batch, length, np.dtype(d_dtype))

    def shape(self, layout, batch_shape):
        return (*batch_shape, layout.rows, 1) if batch_shape else (layout.rows,)

    def allocation(self, layout, batch_shape, on_gpu):
        """``(shape to allocate, swap the last two axes after, zero-filled)``."""
        return self.shape(layout, batch_shape), False, False


class _Aux:
    """An auxiliary matrix: column-major ``(*batch, rows, N)`` with batches contiguous; ``rows`` and its unit (bits for
    the RELU bitmask) are the subclass's."""

    unit = 1
    forward = ""

    def rows(self, m):
        raise NotImplementedError

    def dtype(self, d_dtype):
        raise NotImplementedError

    def layout(self, m, n, batch, d_dtype):
        rows = self.rows(m)
        return MatrixLayout(m, n, 1, self.unit * rows, batch, self.unit * rows * n, self.dtype(d_dtype))

    def shape(self, layout, batch_shape):
        return (*batch_shape, layout.col_stride // self.unit, layout.cols)

    def allocation(self, layout, batch_shape, on_gpu):
        shape = self.shape(layout, batch_shape)
        return (*shape[:-2], shape[-1], shape[-2]), True, False

    def stage(self, op, product, spec, d_dtype):
        m, n, batch_shape = product.m, product.n, product.batch_shape
        batch = math.prod(batch_shape)
        shape, strides = tuple(op.shape), tuple(op.strides)
        rows, dtype, unit = self.rows(m), self.dtype(d_dtype), self.unit
        if op.dtype != dtype:
            raise TypeError(f"epilog input {self.name!r} has dtype {op.dtype.name}; {spec.name} needs {dtype.name} "
                            f"(the dtype of the {self.name!r} output of {self.forward} / {self.forward}_BIAS)")
        if shape[-2:] != (rows, n) or (len(shape) > 2 and shape[:-2] != tuple(batch_shape)):
            allowed_shapes = [(rows, n)] + ([(*batch_shape, rows, n)] if batch_shape else [])
            raise ValueError(f"epilog input {self.name!r} has shape {shape}; for a {m} x {n} result it must be one of "
                             f"{allowed_shapes} (the format of the {self.name!r} output of {self.forward} / "
                             f"{self.forward}_BIAS)")
        bshape, bstrides = shape[:-2], strides[:-2]
        stride_b = batch_stride(batch_shape, bshape, bstrides, rows * n)
        canonical = strides[-2] == 1 and (strides[-1] == rows or n == 1) and stride_b is not None
        mode = None
        if product.moves or not canonical:
            mode, stride_b = "colmajor", (rows * n if bshape else 0)
        if batch == 1:
            stride_b = 0
        layout = MatrixLayout(m, n, 1, rows * unit, batch, stride_b * unit, dtype)
        return Staged(self.name, op, layout, mode, None, product.moves)

    def set_attributes(self, desc, layout, d_dtype, batch):
        lt = _lt()
        lt.set_attribute(desc, lt.MatmulDesc.EPILOGUE_AUX_LD, layout.col_stride)
        if batch > 1:
            lt.set_attribute(desc, lt.MatmulDesc.EPILOGUE_AUX_BATCH_STRIDE, layout.batch_stride)
        return lt.MatmulDesc.EPILOGUE_AUX_POINTER

    def cpu_view(self, layout, base):
        rows = layout.col_stride // self.unit
        return strided_view(base, (layout.batch, rows, layout.cols), (layout.batch_stride // self.unit, 1, rows))


class ReluAux(_Aux):
    """``relu_aux``: the RELU bitmask, uint8, strides in bits in its layout (cuBLASLt's unit). cuBLASLt never writes
    its padding bits: the GPU allocates it zeroed, as the CPU engine writes them."""

    name, unit, forward = "relu_aux", 8, "RELU_AUX"

    def check(self, spec, d_dtype):
        pass

    def rows(self, m):
        return relu_aux_rows(m)

    def dtype(self, d_dtype):
        return np.dtype(np.uint8)

    def allocation(self, layout, batch_shape, on_gpu):
        shape, swap, _ = super().allocation(layout, batch_shape, on_gpu)
        return shape, swap, on_gpu


class GeluAux(_Aux):
    """``gelu_aux``: the pre-activation values in the result's dtype, rows padded to a multiple of 8."""

    name, unit, forward = "gelu_aux", 1, "GELU_AUX"

    def check(self, spec, d_dtype):
        if d_dtype in FLOAT8_DTYPES and spec.activation == "dgelu":  # (GELU_AUX* outputs: see gelu_aux_dtype)
            raise ValueError(f"epilog {spec.name} is not supported for float8 results; use result_type "
                             f"bfloat16/float16/float32 in MatmulOptions")

    def rows(self, m):
        return gelu_aux_rows(m)

    def dtype(self, d_dtype):
        return np.dtype(d_dtype)

    def set_attributes(self, desc, layout, d_dtype, batch):
        attribute = super().set_attributes(desc, layout, d_dtype, batch)
        # cuBLASLt's default aux type is D's, or C's for a float8 D: a float8 D's aux type is always said (an e4m3 aux
        # left to the default was taken as C's 16 bits, and the aux scale and amax then found no algorithm)
        if layout.dtype != d_dtype or d_dtype in FLOAT8_DTYPES:
            lt = _lt()
            lt.set_attribute(desc, lt.MatmulDesc.EPILOGUE_AUX_DATA_TYPE, lt.cuda_data_type(layout.dtype))
        return attribute


class Data:
    """An operand of a Python epilog (``_fused``), under its own ``name`` (``data`` by default); any shape of up to 3
    dimensions and its own strides, read as it is (a C-order copy when it moves or has negative strides)."""

    def __init__(self, name="data"):
        self.name = name

    def check(self, spec, d_dtype):
        pass

    def stage(self, op, product, spec, d_dtype):
        from ._fused import stage_data

        layout, copy = stage_data(op, self.name)
        mode = "contiguous" if copy or product.moves else None
        if mode:
            layout = dataclasses.replace(layout, strides=c_strides(layout.shape))
        return Staged(self.name, op, layout, mode, None, product.moves)

    def cpu_view(self, layout, base):
        return base



class ResultAmax:
    """``result_amax``: the largest absolute value of the result before ``d_scale`` (cuBLASLt's AMAX_D), one float32
    for the whole (batched) product, shape ``(1,)``; float8 results only (``MatmulOptions(result_amax=True)``).
    ``gelu_aux_amax`` (:class:`AuxAmax`) is the same for the GELU aux."""

    name = "result_amax"

    def check(self, spec, d_dtype):
        if d_dtype not in FLOAT8_DTYPES:
            raise ValueError(f"result_amax applies to float8 results only; the result is {np.dtype(d_dtype).name}")

    def layout(self, m, n, batch, d_dtype):
        return MatrixLayout(1, 1, 1, 1, 1, 0, np.dtype(np.float32))

    def shape(self, layout, batch_shape):
        return (1,)

    def allocation(self, layout, batch_shape, on_gpu):
        return (1,), False, False

    def set_attributes(self, desc, layout, d_dtype, batch):
        return _lt().MatmulDesc.AMAX_D_POINTER

    def cpu_view(self, layout, base):
        return base.reshape(1)


class AuxAmax(ResultAmax):
    """``gelu_aux_amax``: the largest absolute value of the GELU aux before ``aux_scale`` (cuBLASLt's
    EPILOGUE_AUX_AMAX), float32, shape ``(1,)``; float8 aux only (``MatmulPlanPreferences(aux_amax=True)``, checked
    by :func:`gelu_aux_dtype`)."""

    name = "gelu_aux_amax"

    def check(self, spec, d_dtype):
        pass

    def set_attributes(self, desc, layout, d_dtype, batch):
        return _lt().MatmulDesc.EPILOGUE_AUX_AMAX_POINTER


class QuantizationScale:
    """``a_scale`` / ``b_scale`` / ``d_scale`` given as a tensor (``quantization_scales=``), or ``aux_scale`` (an
    epilog input): one float32 value, shape ``()`` or ``(1,)``, in the operands' package and device, read at every
    execution (change it in place, or with ``reset_operands``, between executions). cuBLASLt wants the pointer
    256-byte aligned (a freshly allocated tensor is)."""

    def __init__(self, name):
        self.name = name

    def check(self, spec, d_dtype):
        pass

    def stage(self, op, product, spec, d_dtype):
        if op.dtype != np.float32 or tuple(op.shape) not in ((), (1,)):
            raise ValueError(f"quantization scale {self.name[:-6]!r} given as an array must be one float32 value of "
                             f"shape () or (1,); it is {op.dtype.name} of shape {tuple(op.shape)}")
        return Staged(self.name, op, MatrixLayout(1, 1, 1, 1, 1, 0, np.dtype(np.float32)),
                      "contiguous" if product.moves else None, None, product.moves)

    def set_attributes(self, desc, layout, d_dtype, batch):
        lt = _lt()
        return {"a_scale": lt.MatmulDesc.A_SCALE_POINTER, "b_scale": lt.MatmulDesc.B_SCALE_POINTER,
                "d_scale": lt.MatmulDesc.D_SCALE_POINTER,
                "aux_scale": lt.MatmulDesc.EPILOGUE_AUX_SCALE_POINTER}[self.name]

    def cpu_view(self, layout, base):
        return base.reshape(1)


SCALE_NAMES = ("a_scale", "b_scale", "d_scale", "aux_scale")
HANDLERS = {"bias": Bias(), "relu_aux": ReluAux(), "gelu_aux": GeluAux(), "data": Data(),
            "result_amax": ResultAmax(), "gelu_aux_amax": AuxAmax(),
            **{name: QuantizationScale(name) for name in SCALE_NAMES},
            **{name: BiasGradient(name) for name in ("drelu_bgrad", "dgelu_bgrad", "bgrada", "bgradb")}}


def output_layouts(spec, m, n, batch, d_dtype, amax=False, aux_dtype=None, aux_amax=False):
    """``((name, MatrixLayout), ...)`` of the outputs the API allocates: the epilog's of ``spec`` (the GELU aux in
    ``aux_dtype``, see :func:`gelu_aux_dtype`), the aux's amax when ``aux_amax`` and the result's when ``amax``."""
    names = (*spec.outputs, *(("gelu_aux_amax",) if aux_amax else ()), *(("result_amax",) if amax else ()))
    return tuple((name, HANDLERS[name].layout(m, n, batch, aux_dtype if name == "gelu_aux" and aux_dtype is not None
                                              else d_dtype))
                 for name in names)


def c_stand_in(epilog_outputs):
    """C's dtype for a float8 result without C (cuBLASLt reads none, but wants a 16-bit CType): float16 with a
    float16 or e4m3 GELU aux (cuBLASLt pairs those with a float16 C only), else bfloat16."""
    aux = dict(epilog_outputs).get("gelu_aux")
    return BF16 if aux is None or aux.dtype == BF16 else F16


def gelu_aux_dtype(spec, aux_type, aux_amax, aux_scale, a_dtype, b_dtype, d_dtype, c_dtype):
    """The dtype of the ``gelu_aux`` output (None without one), or a ValueError naming what is not allowed.

    ``aux_type`` (None: the default) and ``aux_amax`` are :class:`~._options.MatmulPlanPreferences`'s; ``aux_scale``
    whether an ``aux_scale`` epilog input was given; ``c_dtype`` C's dtype (None without C). cuBLASLt's rules
    (``CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE``): the aux has D's dtype, but with a float8 result it has C's
    (16 bits; float16 without C, as nvmath-python chooses, or bfloat16 when asked: C's stand-in then takes it);
    float8_e4m3fn is allowed for GELU_AUX with e4m3 A, B and D and a float16 C, and is stored as ``aux_scale * X``
    (saturated), its amax taken of X before the scale. An amax or a scale needs a float8 aux."""
    if spec.aux_out != "gelu_aux":
        if aux_type is not None or aux_amax or aux_scale:
            given = [n for n, v in (("aux_type", aux_type), ("aux_amax", aux_amax), ("aux_scale", aux_scale)) if v]
            raise ValueError(f"{' and '.join(given)} apply to the GELU aux output (epilogs GELU_AUX, GELU_AUX_BIAS); "
                             f"the epilog is {spec.name}")
        return None
    float8_d = d_dtype in FLOAT8_DTYPES
    default = (c_dtype or F16) if float8_d else np.dtype(d_dtype)
    allowed = [default]
    if float8_d and c_dtype is None:
        allowed.append(BF16)  # no C: its stand-in takes the aux's 16-bit type
    if (d_dtype, a_dtype, b_dtype) == (E4M3, E4M3, E4M3) and c_dtype in (None, F16) and not spec.bias:
        allowed.append(E4M3)
    aux = default if aux_type is None else np.dtype(aux_type)
    if aux not in allowed:
        raise ValueError(f"aux_type {aux.name} is not supported for epilog {spec.name} with {a_dtype.name} x "
                         f"{b_dtype.name} operands, a {np.dtype(d_dtype).name} result and "
                         f"{'no C' if c_dtype is None else 'a ' + c_dtype.name + ' C'}; allowed are "
                         f"{[d.name for d in allowed]} (cuBLASLt: a float8_e4m3fn aux needs epilog GELU_AUX, e4m3 "
                         f"a, b and result, and a float16 c or none)")
    if aux not in FLOAT8_DTYPES and (aux_amax or aux_scale):
        given = [n for n, v in (("aux_amax", aux_amax), ("aux_scale", aux_scale)) if v]
        raise ValueError(f"{' and '.join(given)} apply to a float8 GELU aux only (aux_type float8_e4m3fn); the aux "
                         f"is {aux.name}")
    return aux


_SCALE_KEYS = {"a": "a_scale", "b": "b_scale", "c": "c_scale", "d": "d_scale"}


def scale_items(scales):
    """``{"a_scale": value, ...}`` of ``quantization_scales`` given as a dict or an object with a, b, c, d."""
    if isinstance(scales, dict):
        items = scales
    else:
        items = {key: getattr(scales, key) for key in _SCALE_KEYS if hasattr(scales, key)}
    unknown = sorted(set(items) - set(_SCALE_KEYS))
    if unknown:
        raise ValueError(f"quantization_scales: unknown keys {unknown}; allowed are {sorted(_SCALE_KEYS)}")
    return {_SCALE_KEYS[key]: value for key, value in items.items() if value is not None}


def is_number(value):
    """Whether a scale is given as a number (folded into the plan) rather than an array (read at each execution)."""
    return isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_))


def split_scales(scales, options):
    """``(options with the scales given as numbers, {name: array} of those given as arrays)``."""
    if scales is None:
        return options, {}
    numbers, tensors = {}, {}
    for name, value in scale_items(scales).items():
        if name == "c_scale":
            raise ValueError("a scale for c applies to float8 c only, and c is never float8 (16-bit or float32)")
        if is_number(value):
            if getattr(options, name) is not None:
                raise ValueError(f"{name} is given twice: in options and in quantization_scales")
            numbers[name] = float(value)
        else:
            tensors[name] = value
    return (dataclasses.replace(options, **numbers) if numbers else options), tensors


def given_inputs(epilog_inputs, epilog, spec, fused):
    """``(inputs by name, aux_scale, the names the epilog takes)`` from ``epilog_inputs``; TypeError for a non-dict,
    ValueError naming an unknown or a missing input."""
    given = {} if epilog_inputs is None else epilog_inputs
    if not isinstance(given, dict):
        raise TypeError(f"epilog_inputs must be a dict, not {type(given).__name__}")
    given = dict(given)
    aux_scale = given.pop("aux_scale", None)  # a float8 GELU aux's scale: checked with its dtype by plan()
    wanted = fused.operands if fused is not None else spec.inputs
    missing = [name for name in spec.inputs if name not in given]
    unknown = sorted(set(given) - set(wanted), key=str)
    if unknown:  # first: a misspelled name is also a missing one, and the misspelling is what to fix
        allowed = list(wanted) or "none"
        name = fused.where if fused is not None else "None" if epilog is None else spec.name
        raise ValueError(f"epilog_inputs {unknown} are not inputs of epilog {name}: it takes {allowed}"
                         + (f" (missing {missing})" if missing else "")
                         + f"; the inputs of all epilogs are {list(EPILOG_INPUT_NAMES)}, and 'data' of a "
                           f"Python epilog")
    if missing:
        raise ValueError(f"epilog {spec.name} needs epilog_inputs {list(spec.inputs)}; missing {missing}")
    return given, aux_scale, wanted
