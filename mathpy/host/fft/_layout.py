"""FFT problems as engines see them, and how cuFFT's advanced data layout addresses them (pure Python, no GPU).

cuFFT addresses element ``(b, x0, x1, x2)`` of a batched rank-3 transform at ::

    b * idist + ((x0 * inembed[1] + x1) * inembed[2] + x2) * istride

(rank 1 and 2 likewise), so a layout is expressible by one plan when

- the transform axes, in the Transform's order, have strides ``stride[k] = stride[k+1] * embed[k+1]`` with
  ``embed[k+1] >= extent[k+1]`` (the last axis is the innermost; its stride is ``istride``), all positive;
- the batch axes (every other axis with extent > 1) fold into one ``(batch, dist)`` pair: consecutive batch axes
  ``a < b`` fold when ``stride[a] == stride[b] * extent[b]``, in the input and the output alike.

Transform axes of extent 1 are identities: they are treated as batch axes of extent 1 (dropped), except the last one
(the halved axis of R2C/C2R; for C2C it is dropped too when another transform axis remains).
Batch axes left over in several groups are not one plan; without callbacks :class:`CUFFTEngine` loops over all groups
but the largest with pointer offsets (at most ``MAX_LOOPED_EXECUTES`` executes per call); with callbacks it must not,
because prolog/epilog offsets would then restart for every execute.

Axis order: the order of ``Transform.axes`` is cuFFT's dimension order (the last one innermost, and the halved one for
R2C/C2R). A multi-axis C2C transform (and the leading axes of an R2C/C2R one) does not depend on the order of its axes,
so the API passes them in ascending order, which makes C-contiguous layouts expressible.

>>> cufft_expressible((8, 16), (16, 1), (1,))
True
>>> cufft_expressible((8, 16), (1, 8), (1,))          # Fortran order: istride 8, idist 1
True
>>> cufft_expressible((4, 8, 16), (128, 16, 1), (1,))  # batch axes 0 and 2 do not fold into one distance
False
>>> cufft_expressible((4, 8, 16), (128, 16, 1), (1,), allow_loops=True)
True
>>> engine_layout((4, 8, 16), (128, 16, 1), (1,))      # transform axis innermost, batch axes folded
(128, 1, 8)
>>> p = cufft_params(Transform("C2C", "float32", (32, 64), (1, 32), (32, 64), (64, 1), (1,)))
>>> p.rank, p.n, p.inembed, p.istride, p.idist, p.onembed, p.ostride, p.odist, p.batch
(1, (64,), (64,), 32, 1, (64,), 1, 64, 32)
"""

import dataclasses
import math
import operator

import numpy as np

from ..._dtypes import COMPLEX32
from ..._errors import UnsupportedLayoutError
from ..._strides import c_strides, dense_permutation, dense_strides

__all__ = ["effective_axes", "FFT_TYPES", "MAX_LOOPED_EXECUTES", "Transform", "CufftParams", "cufft_expressible",
           "engine_layout", "c_strides", "dense_strides", "dense_permutation", "cufft_params"]

FFT_TYPES = ("C2C", "R2C", "C2R")
MAX_LOOPED_EXECUTES = 64  # at most this many executes per call over batch axes one plan cannot fold
_PRECISIONS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.longdouble))
_COMPLEX = {np.dtype(np.float16): COMPLEX32, np.dtype(np.float32): np.dtype(np.complex64),
            np.dtype(np.float64): np.dtype(np.complex128), np.dtype(np.longdouble): np.dtype(np.clongdouble)}


@dataclasses.dataclass(frozen=True)
class Transform:
    """One FFT problem as an engine sees it, after the API resolved n/s, axes and dtypes (and padded or cropped the
    input to n). Shapes and strides are in elements (of the input's / output's own dtype: real for the R2C input and
    the C2R output, complex otherwise). All axes are non-negative and at most 3 per Transform (the API decomposes more
    axes into several Transforms).

    fft_type: "C2C" | "R2C" | "C2R". precision: the real precision, float16 (GPU only), float32, float64 or long
    double (CPU only).
    input_strides: the layout prolog offsets refer to; output_strides: the layout epilog offsets refer to.
    axes: transform axes in order; for R2C/C2R the LAST one is the halved axis (output / input extent n//2+1).
    The input and output may alias (in-place) only when the API allocated/validated it so.
    """

    fft_type: str
    precision: np.dtype
    input_shape: tuple
    input_strides: tuple
    output_shape: tuple
    output_strides: tuple
    axes: tuple

    def __post_init__(self):
        set_ = object.__setattr__
        if self.fft_type not in FFT_TYPES:
            raise ValueError(f"fft_type {self.fft_type!r} is not one of {FFT_TYPES}")
        precision = np.dtype(self.precision)
        if precision not in _PRECISIONS:
            raise ValueError(f"precision {precision} is not one of float16, float32, float64, longdouble")
        set_(self, "precision", precision)
        for name in ("input_shape", "input_strides", "output_shape", "output_strides", "axes"):
            set_(self, name, tuple(int(v) for v in getattr(self, name)))
        ndim = len(self.input_shape)
        if not (len(self.input_strides) == len(self.output_shape) == len(self.output_strides) == ndim):
            raise ValueError(f"input/output shapes and strides must have one length: {self}")
        if not 1 <= len(self.axes) <= 3 or len(set(self.axes)) != len(self.axes) or \
                any(not 0 <= a < ndim for a in self.axes):
            raise ValueError(f"axes {self.axes} must be 1 to 3 distinct axes in 0..{ndim - 1}")
        last = self.axes[-1]
        for axis in range(ndim):
            i, o = self.input_shape[axis], self.output_shape[axis]
            if axis == last and self.fft_type == "R2C":
                ok = o == i // 2 + 1
            elif axis == last and self.fft_type == "C2R":
                ok = i == o // 2 + 1
            else:
                ok = i == o
            if not ok or i < 1 or o < 1:
                raise ValueError(f"{self.fft_type} input shape {self.input_shape} and output shape {self.output_shape} "
                                 f"do not match along axis {axis}")
        # plan caches hash Transforms on every stateless call: hash once
        set_(self, "_hash", hash(_fields_of_transform(self)))

    def __hash__(self):
        return self._hash

    @property
    def n(self):
        """The logical transform lengths along ``axes`` (the real lengths for R2C/C2R)."""
        shape = self.output_shape if self.fft_type == "C2R" else self.input_shape
        return tuple(shape[a] for a in self.axes)

    @property
    def batch_size(self):
        return math.prod(e for a, e in enumerate(self.input_shape) if a not in self.axes)

    @property
    def input_dtype(self):
        """The input's element dtype (:data:`~mathpy._dtypes.COMPLEX32` for complex half, which NumPy lacks)."""
        return self.precision if self.fft_type == "R2C" else _complex(self.precision)

    @property
    def output_dtype(self):
        return self.precision if self.fft_type == "C2R" else _complex(self.precision)


_fields_of_transform = operator.attrgetter(*(f.name for f in dataclasses.fields(Transform)))


def _complex(precision):
    """The complex dtype of real ``precision``; COMPLEX32 for float16 (cuFFT's complex half: two float16)."""
    return _COMPLEX[precision]


# --- one layout --------------------------------------------------------------------------------------------------

def effective_axes(shape, axes, fft_type=None):
    """(transform axes cuFFT sees, batch axes): extent-1 transform axes other than the last (the halved one of
    R2C/C2R) become batch axes; for C2C (``fft_type`` known) so does the last one, as long as one axis remains."""
    transform = [a for a in axes[:-1] if shape[a] > 1] + [axes[-1]]
    if fft_type == "C2C" and len(transform) > 1 and shape[axes[-1]] == 1:
        transform.pop()
    batch = [a for a in range(len(shape)) if a not in transform]
    return transform, batch


def _transform_embed(shape, strides, transform):
    """(embed, stride) of the transform axes (cuFFT order), or None when not expressible."""
    extents = [shape[a] for a in transform]
    steps = [strides[a] for a in transform]
    if len(transform) == 1 and extents[0] == 1:
        return (1,), 1
    if any(s <= 0 for s in steps):
        return None
    embed = [extents[0]] + [0] * (len(transform) - 1)
    for k in range(len(transform) - 1, 0, -1):
        outer, inner = steps[k - 1], steps[k]
        if outer % inner or outer // inner < extents[k]:
            return None
        embed[k] = outer // inner
    return tuple(embed), steps[-1]


def _batch_groups(shape, layouts, batch):
    """Batch axes with extent > 1 folded into groups ``(count, (step per layout, ...))``, outermost first, or None
    when a stride is not positive."""
    groups = []
    for axis in batch:
        extent = shape[axis]
        if extent == 1:
            continue
        steps = tuple(strides[axis] for strides in layouts)
        if any(s <= 0 for s in steps):
            return None
        if groups:
            count, outer = groups[-1]
            if all(o == s * extent for o, s in zip(outer, steps)):
                groups[-1] = (count * extent, steps)
                continue
        groups.append((extent, steps))
    return groups


def _fold(shape, layouts, batch, allow_loops):
    """:func:`_batch_groups` in axis order when one plan (with loops if allowed) addresses that; else in the order of
    each layout's strides, widest first, when that does: each batch element is transformed alone, so the batch axes
    may be taken in any order, and a view that permuted them folds again (an R2C of length 1 over a (3, 5, 5, 1, 5)
    array with strides (125, 5, 25, 1, 1) needed 75 executes in axis order, one plan in stride order)."""
    groups = _batch_groups(shape, layouts, batch)
    if groups is None or _addressable(groups, allow_loops):
        return groups
    for layout in layouts:
        permuted = _batch_groups(shape, layouts, sorted(batch, key=lambda a: -layout[a]))
        if _addressable(permuted, allow_loops):
            return permuted
    return groups


def _addressable(groups, allow_loops):
    return len(groups) <= 1 or (allow_loops and _looped_executes(groups) <= MAX_LOOPED_EXECUTES)


def _looped_executes(groups):
    """How many executes one call needs when the largest group is the plan's batch."""
    if len(groups) <= 1:
        return 1
    counts = sorted(count for count, _ in groups)
    return math.prod(counts[:-1])


def cufft_expressible(shape, strides, axes, *, allow_loops=False):
    """Whether one cuFFT advanced-layout plan (n, embed, stride, dist, batch) can address this layout.

    With ``allow_loops=True`` (only without callbacks), batch axes that do not fold into one distance are accepted when
    looping over them costs at most ``MAX_LOOPED_EXECUTES`` executes per call.
    """
    shape, strides, axes = tuple(shape), tuple(strides), tuple(axes)
    transform, batch = effective_axes(shape, axes)
    if _transform_embed(shape, strides, transform) is None:
        return False
    groups = _batch_groups(shape, (strides,), batch)  # in axis order, as a pair of such layouts folds together
    return groups is not None and _addressable(groups, allow_loops)


def engine_layout(shape, strides, axes, *, allow_loops=False):
    """The strides an engine reads/writes with: ``strides`` when cufft_expressible, else C-contiguous strides for
    ``shape`` when those are expressible, else the dense layout with the batch axes outermost (in axis order) and the
    transform axes innermost in ``axes`` order. BOTH engines use it, so prolog/epilog offsets mean the same on the CPU
    and the GPU. The result is always dense; :func:`dense_permutation` says how to allocate it.

    >>> engine_layout((4, 6), (1, 4), (1,))
    (1, 4)
    >>> engine_layout((4, 6), (12, 2), (1,))                # istride 2, idist 12
    (12, 2)
    >>> engine_layout((4, 6), (6, -1), (1,))                # a reversed view is copied
    (6, 1)
    >>> engine_layout((4, 6), (6, 1), (0,))                 # transform axis 0: istride 6, idist 1
    (6, 1)
    >>> engine_layout((2, 4, 6), (24, 6, 1), (2, 1))        # axis 1 must be inside axis 2
    (24, 1, 4)
    """
    shape, strides, axes = tuple(shape), tuple(strides), tuple(axes)
    if cufft_expressible(shape, strides, axes, allow_loops=allow_loops):
        return strides
    contiguous = c_strides(shape)
    if cufft_expressible(shape, contiguous, axes, allow_loops=allow_loops):
        return contiguous
    return dense_strides(shape, [a for a in range(len(shape)) if a not in axes] + list(axes))


# --- both layouts of a Transform ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CufftParams:
    """cufftXtMakePlanMany's layout arguments for a Transform, plus the executes to loop over (count, input step,
    output step in elements), outermost first, when batch axes do not fold into one distance."""

    rank: int
    n: tuple
    inembed: tuple
    istride: int
    idist: int
    onembed: tuple
    ostride: int
    odist: int
    batch: int
    loops: tuple = ()

    def as_tuple(self):
        return (self.rank, self.n, self.inembed, self.istride, self.idist, self.onembed, self.ostride, self.odist,
                self.batch)

    @property
    def executes(self):
        return math.prod(count for count, _, _ in self.loops)


def _plan_group(fft_type, groups, allow_loops):
    """Which batch group the plan's (batch, dist) covers; the others are looped over. The largest, except that for
    R2C/C2R a group whose real-side step is odd goes into the plan when that lets every looped offset stay a whole
    number of complex elements: cuFFT refuses real pointers not aligned to the complex element (CUFFT_INVALID_VALUE
    at exec)."""
    order = sorted(range(len(groups)), key=lambda g: (groups[g][0], g), reverse=True)
    if fft_type == "C2C" or len(groups) < 2:
        return order[0]
    real = 0 if fft_type == "R2C" else 1  # the real side's index in each group's (input step, output step)
    for g in order:
        looped = [groups[h] for h in range(len(groups)) if h != g]
        if all(steps[real] % 2 == 0 for _, steps in looped) and \
                (not allow_loops or math.prod(count for count, _ in looped) <= MAX_LOOPED_EXECUTES):
            return g
    return order[0]


def cufft_params(transform, *, allow_loops=True):
    """The :class:`CufftParams` of ``transform``; UnsupportedLayoutError when one plan (with at most
    ``MAX_LOOPED_EXECUTES`` looped executes when ``allow_loops``) cannot address both its input and output layouts."""
    t = transform
    transform_axes, batch = effective_axes(t.input_shape, t.axes, t.fft_type)
    inner_in = _transform_embed(t.input_shape, t.input_strides, transform_axes)
    inner_out = _transform_embed(t.output_shape, t.output_strides, transform_axes)
    if inner_in is None or inner_out is None:
        side = "input" if inner_in is None else "output"
        raise UnsupportedLayoutError(
            f"cuFFT cannot address the {side} layout (shape {getattr(t, side + '_shape')}, strides "
            f"{getattr(t, side + '_strides')}) over axes {t.axes}: copy it to engine_layout(...) first")
    groups = _fold(t.input_shape, (t.input_strides, t.output_strides), batch, allow_loops)
    if groups is None:
        raise UnsupportedLayoutError(f"batch strides must be positive: input {t.input_strides}, output "
                                     f"{t.output_strides}")
    if len(groups) > 1 and not (allow_loops and _looped_executes(groups) <= MAX_LOOPED_EXECUTES):
        raise UnsupportedLayoutError(
            f"the batch axes of input strides {t.input_strides} / output strides {t.output_strides} do not fold "
            f"into one distance" + ("" if allow_loops else " (looping is not allowed with callbacks)") +
            ": copy to engine_layout(...) first")
    n_shape = t.output_shape if t.fft_type == "C2R" else t.input_shape
    n = tuple(n_shape[a] for a in transform_axes)
    (inembed, istride), (onembed, ostride) = inner_in, inner_out
    if groups:
        plan_group = _plan_group(t.fft_type, groups, allow_loops)
        batch_count, (idist, odist) = groups[plan_group]
        loops = tuple((count, i, o) for g, (count, (i, o)) in enumerate(groups) if g != plan_group)
    else:
        batch_count, loops = 1, ()
        idist = istride * math.prod(inembed)  # unused with batch 1; the transform's span keeps cuFFT's checks happy
        odist = ostride * math.prod(onembed)
    return CufftParams(len(n), n, inembed, istride, idist, onembed, ostride, odist, batch_count, loops)
