"""What one FFT is, resolved once per operand signature: the :class:`FFTProblem`.

From the operand's signature (package, device, shape, strides, dtype), the axes, the options and the execution space
it decides the FFT type, the engine's :class:`~._layout.Transform` (the layouts callbacks see), whether the input is
used where it lies or staged through a dense copy, and which package holds the data on the device. It is immutable
and memoised (:func:`fft_problem`), so the stateful :class:`~._fft.FFT` and the stateless functions share it
between calls and threads; the engines consume only its ``transform``.

>>> import numpy as np
>>> from mathpy import _operands, ExecutionCPU
>>> from mathpy.host.fft._options import FFTOptions
>>> p = fft_problem(_operands.wrap_operand(np.zeros((4, 8), np.float32)), None, FFTOptions(), ExecutionCPU())
>>> p.fft_type, p.axes, p.transform.output_shape, p.copy_input
('R2C', (0, 1), (4, 5), False)
"""

import operator

import numpy as np

from ... import _cuda, _memo, _operands
from ..._dtypes import COMPLEX32, dtype_name
from ..._errors import UnsupportedLayoutError
from ..._execution import ExecutionCUDA
from ..._strides import c_strides, dense_permutation
from . import _layout

__all__ = ["FFTProblem", "fft_problem", "normalize_axes", "resolve_type", "check_half", "DIRECTIONS"]

DIRECTIONS = {"forward": -1, "inverse": 1, -1: -1, 1: 1}  # FFTDirection members are equal to (and hash as) -1 / 1
_HALF = np.dtype(np.float16)
_REAL = {_HALF, np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.longdouble)}
_COMPLEX = {COMPLEX32: _HALF, np.dtype(np.complex64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.float64), np.dtype(np.clongdouble): np.dtype(np.longdouble)}
#: long double where it is wider than double (it is double itself on some platforms): CPU only
_LONG_DOUBLE = np.dtype(np.longdouble) if np.finfo(np.longdouble).nmant > 52 else None


def resolve_type(dtype, fft_type):
    """(fft type, real precision) for an operand dtype, or TypeError/ValueError quoting what is allowed."""
    if dtype in _REAL:
        chosen = fft_type or "R2C"
        if chosen != "R2C":
            raise ValueError(f"fft_type {chosen!r} needs a complex operand; a real {dtype} operand allows only 'R2C'")
        return chosen, dtype
    if dtype in _COMPLEX:
        chosen = fft_type or "C2C"
        if chosen == "R2C":
            raise ValueError(f"fft_type 'R2C' needs a real operand (float16/float32/float64), not {dtype_name(dtype)}")
        return chosen, _COMPLEX[dtype]
    raise TypeError(f"the FFT operand has dtype {dtype_name(dtype)}; supported are float32, float64, complex64, "
                    f"complex128, float16 and complex32 (torch tensors, GPU only) and long double (CPU only). The "
                    f"stateless functions (mathpy.fft.fft, ...) promote integers and float16.")


def check_half(op, fft_type, lengths, on_gpu):
    """Half precision's rules, checked before any work: GPU execution, a torch operand (NumPy and CuPy have no
    complex32 to hold a complex half input or result; nvmath-python 1.0 has none for them either), and power-of-two
    transform ``lengths`` ({axis: logical length}), the halved axis of R2C/C2R longer than 1."""
    if not on_gpu:
        raise TypeError("half precision FFTs (float16 / complex32) run only on the GPU (execution='cuda'); use float32 "
                        "on the CPU")
    if op.package != "torch":
        raise TypeError(f"half precision FFTs (float16 / complex32) take torch tensors: {op.package} has no complex32 "
                        f"dtype for the complex {'result' if fft_type == 'R2C' else 'data'} of a {fft_type} "
                        f"transform; pass a torch tensor (torch.from_dlpack(operand)) or use float32")
    for axis, n in lengths.items():
        if n & (n - 1):
            raise ValueError(f"half precision (float16 / complex32) FFTs need power-of-two lengths (cuFFT has no other "
                             f"half-precision sizes): axis {axis} has length {n}; allowed are 1, 2, 4, 8, 16, ... "
                             f"Use float32, or pad to a power of two")
    if fft_type != "C2C" and list(lengths.values())[-1] == 1:
        raise ValueError(f"a half-precision {fft_type} transform needs its halved axis {list(lengths)[-1]} longer than "
                         f"1 (cuFFT 12.0 computes length 1 wrongly in half precision); use float32")


def normalize_axes(axes, ndim):
    """Non-negative axes, checked for range and duplicates (ValueError quoting the bad axis)."""
    if ndim == 0:
        raise ValueError("the FFT operand is 0-d (a scalar): it has no axis to transform; give it at least one "
                         "dimension (x.reshape(1))")
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    result = []
    for axis in axes:
        try:
            axis = operator.index(axis)
        except TypeError:
            raise TypeError(f"axes must be integers, got {axis!r}") from None
        if not -ndim <= axis < ndim:
            raise ValueError(f"axis {axis} is out of range for an operand of {ndim} dimension(s) "
                             f"(allowed: {-ndim}..{ndim - 1})")
        result.append(axis % ndim)
    if len(set(result)) != len(result):
        raise ValueError(f"axes {tuple(axes)} repeat an axis")
    if not result:
        raise ValueError("axes must name at least one axis")
    return tuple(result)


def _interleaved(shape, strides, axes):
    """Whether some batch axis is stored inside the transform axes (its stride is below the largest transform
    stride): nvmath-python's criterion for an "optimized" result layout."""
    batch = [strides[a] for a in range(len(shape)) if a not in axes and shape[a] > 1]
    transform = [strides[a] for a in axes if shape[a] > 1]
    return bool(batch and transform) and min(batch) <= max(transform)


def _transform_axes_innermost(strides, axes):
    """The storage order (outermost first) with the batch axes outside the transform axes, each group in the input's
    order; the halved axis of R2C/C2R (``axes[-1]``, innermost in the engine's axes) stays innermost."""
    batch = sorted((a for a in range(len(strides)) if a not in axes), key=lambda a: -strides[a])
    inner = sorted(axes[:-1], key=lambda a: -strides[a]) + [axes[-1]]
    return tuple(batch + inner)


def _unit_real_side(fft_type, params):
    """Whether cuFFT's half-precision kernels can take ``params``: R2C reads and C2R writes its real side only with
    unit stride."""
    return (fft_type != "R2C" or params.istride == 1) and (fft_type != "C2R" or params.ostride == 1)


def _choose_layouts(fft_type, precision, shape, in_strides_candidate, out_shape, axes, optimized=False):
    """The Transform one plan addresses without looping (callbacks see its layouts): the input in
    ``engine_layout(candidate)``, the output dense in the input's axis order (``optimized``: with the transform axes
    innermost when the samples interleave); when one plan cannot address that pair without loops, the same from
    C-contiguous input strides instead. Half precision also needs the real side of R2C/C2R at unit stride: failing
    both, its input is made dense with the batch axes outermost and the halved axis innermost."""
    def transform_from(in_strides):
        order = dense_permutation(in_strides)
        if optimized and _interleaved(shape, in_strides, axes):
            order = _transform_axes_innermost(in_strides, axes if fft_type != "C2C" else
                                              tuple(sorted(axes, key=lambda a: -in_strides[a])))
        out_strides = _layout.dense_strides(out_shape, order)
        out_strides = _layout.engine_layout(out_shape, out_strides, axes)
        return _layout.Transform(fft_type, precision, shape, in_strides, out_shape, out_strides, axes)

    def addressable(transform):
        try:
            params = _layout.cufft_params(transform, allow_loops=False)
        except UnsupportedLayoutError:
            return False
        return precision != _HALF or _unit_real_side(fft_type, params)

    candidates = [_layout.engine_layout(shape, in_strides_candidate, axes),
                  _layout.engine_layout(shape, c_strides(shape), axes)]
    if precision == _HALF:
        candidates.append(_layout.dense_strides(shape, [a for a in range(len(shape)) if a not in axes] + list(axes)))
    for in_strides in candidates:
        transform = transform_from(in_strides)
        if addressable(transform):
            return transform
    return transform_from(candidates[1])


class FFTProblem:
    """One FFT resolved for an operand signature (see the module docstring). Attributes:

    fft_type, axes (as given, normalised), transform (the engine's), execution, options;
    on_gpu; local (the operand lives where the FFT executes); copy_input (the engine reads a dense staging copy);
    default_direction (-1, or +1 for C2R); device_id (None on the CPU); holder (the package that holds the data on
    the device, or "numpy" on the CPU); in_order / out_order (storage axis orders of the dense staging input and
    the output); scale_type (the real precision's scalar type); engine_key (what makes engines differ, without
    callbacks); direct (the GPU engine reads the operand in place and nothing has to be copied back)."""

    __slots__ = ("fft_type", "axes", "transform", "execution", "options", "on_gpu", "local", "copy_input",
                 "default_direction", "device_id", "holder", "in_order", "out_order", "scale_type", "engine_key",
                 "direct")

    def __init__(self, op, axes, options, execution):
        fft_type, precision = resolve_type(op.dtype, options.fft_type)
        axes = normalize_axes(axes, op.ndim)
        if len(axes) > 3:
            raise ValueError(f"FFT transforms at most 3 axes per plan, got axes {axes}; the stateless functions "
                             f"(mathpy.fft.fftn, ...) decompose more")
        shape = op.shape
        if any(extent == 0 for extent in shape):
            raise ValueError(f"the FFT operand has a zero-size axis (shape {shape})")
        engine_axes = tuple(sorted(axes)) if fft_type == "C2C" else tuple(sorted(axes[:-1])) + (axes[-1],)
        last = engine_axes[-1]
        out_shape = list(shape)
        if fft_type == "R2C":
            out_shape[last] = shape[last] // 2 + 1
        elif fft_type == "C2R":
            out_shape[last] = 2 * (shape[last] - 1) + (options.last_axis_parity == "odd")
            if out_shape[last] < 1:
                raise ValueError(f"a C2R transform of length {shape[last]} along axis {last} with even parity has no "
                                 f"output; use last_axis_parity='odd' or a longer axis")
        out_shape = tuple(out_shape)

        on_gpu = isinstance(execution, ExecutionCUDA)
        if on_gpu:
            _cuda.require_device(execution.device_id)  # before anything asks for a GPU array package
            if not op.on_host and op.device_id != execution.device_id:
                raise ValueError(f"the operand lives on cuda:{op.device_id} but execution asks for "
                                 f"cuda:{execution.device_id}; move the operand or change execution")
        if on_gpu and precision == _LONG_DOUBLE:
            raise TypeError(f"{op.dtype} FFTs run only on the CPU (cuFFT has no long double); use execution='cpu', "
                            f"or convert the operand to float64/complex128 to run it on the GPU")
        if precision == _HALF:
            check_half(op, fft_type, {a: (out_shape if fft_type == "C2R" else shape)[a] for a in engine_axes}, on_gpu)
        local = op.on_host != on_gpu
        # cuFFT's C2R overwrites its input: the GPU always transforms a copy.
        use_operand = local and not (on_gpu and fft_type == "C2R")
        candidate = op.strides if use_operand else c_strides(shape)
        if options.inplace:
            if fft_type != "C2C":
                raise ValueError(f"in-place FFTs are C2C only; this is {fft_type}")
            if not local and not op.on_host:
                raise ValueError(f"an in-place FFT of an operand on a GPU runs on that GPU (execution "
                                 f"{execution.name!r} was asked for)")
            # a host operand on the GPU (nvmath-python's rule): transformed in place in its dense device copy, which
            # is copied back into it (FFTCall.execute)
            strides = op.strides if local else _layout.engine_layout(shape, c_strides(shape), engine_axes)
            if _layout.engine_layout(shape, strides, engine_axes) != strides:
                raise UnsupportedLayoutError(f"an in-place FFT needs a layout the library addresses directly; shape "
                                             f"{shape} with strides {op.strides} over axes {axes} is not one")
            transform = _layout.Transform(fft_type, precision, shape, strides, out_shape, strides, engine_axes)
        else:
            transform = _choose_layouts(fft_type, precision, shape, candidate, out_shape, engine_axes,
                                        options.result_layout == "optimized")

        self.fft_type, self.axes, self.transform = fft_type, axes, transform
        self.execution, self.options = execution, options
        self.on_gpu, self.local = on_gpu, local
        self.copy_input = not (use_operand and transform.input_strides == op.strides)
        self.default_direction = 1 if fft_type == "C2R" else -1
        self.device_id = execution.device_id if on_gpu else None
        if on_gpu:  # complex32 lives only in torch: half precision stages a host tensor through torch too
            self.holder = op.package if not op.on_host or precision == _HALF else _operands.device_package()
        else:
            self.holder = "numpy"
        self.in_order = dense_permutation(transform.input_strides)
        self.out_order = dense_permutation(transform.output_strides)
        self.scale_type = np.dtype(precision).type
        # what makes engines differ besides callbacks: a caller's memory manager holds the workspace of its own plans
        self.engine_key = (transform, execution, self.device_id) + \
            (() if options.allocator is None or not on_gpu else (options.allocator,))
        self.direct = on_gpu and not self.copy_input and not options.inplace and options.blocking is not True

    def direction(self, direction):
        """The engine's direction (-1 / +1) for ``direction`` as the API takes it (None: the type's own)."""
        if direction is None:
            return self.default_direction
        try:
            value = DIRECTIONS[direction]
        except (KeyError, TypeError):
            raise ValueError(f"direction {direction!r} is not supported; allowed are FFTDirection.FORWARD / INVERSE, "
                             f"'forward', 'inverse', -1, 1") from None
        if self.fft_type != "C2C" and value != self.default_direction:
            raise ValueError(f"a {self.fft_type} FFT runs only "
                             f"{'forward' if self.default_direction == -1 else 'inverse'}")
        return value


_problems = _memo.Memo("problems", group="fft", max_entries=512)  # signature -> FFTProblem


def fft_problem(op, axes, options, execution):
    """The :class:`FFTProblem` for an operand signature, memoised (``axes`` normalised or None)."""
    signature = (op.package, op.device_id, op.shape, op.strides, op.dtype, axes, options, execution)
    found = _problems.get(signature)
    if found is None:
        found = FFTProblem(op, axes, options, execution)
        _problems.put(signature, found)
    return found
