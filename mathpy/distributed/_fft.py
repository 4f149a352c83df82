"""Distributed FFTs of 2-D and 3-D arrays: the stateful :class:`FFT` and the stateless :func:`fftn`, :func:`ifftn`,
:func:`rfftn`, :func:`irfftn` (thin layers over it).

Each rank passes its local part of the global array and gets its local part of the result back, in its own package
(NumPy, CuPy, torch) and on its device. ``distribution`` says how the input is split (``Slab.X``, ``Slab.Y``,
``Pencil(grid)``, or this rank's ``Box``); ``out_distribution`` how the result should be (default: where the transform
ends without a last exchange: ``Slab.Y`` for a forward ``Slab.X`` input, ``Slab.X`` for ``Slab.Y``, pencils with the
axes ``(1, 2)`` split for ``Pencil(grid)``). The steps (local FFTs and exchanges) are planned in ``_fft_plan``; local
transforms are mathpy's own :class:`mathpy.fft.FFT` plans (cuFFT on the GPU, scipy.fft on the CPU), exchanges one
all-to-all each (``_exchange``).

Callbacks: ``prolog=`` runs in the first local transform (it sees the input part as :attr:`FFT.prolog_layout`
describes, the rank's box of the global array :attr:`FFT.prolog_box`); ``epilog=`` in the last one
(:attr:`FFT.epilog_layout`, :attr:`FFT.epilog_box`), before a final exchange into ``out_distribution`` if one is needed.
Callbacks see the unnormalised transform; ``norm=`` applies after the epilog.

>>> import numpy as np, mathpy.distributed as md
>>> context = md.initialize(transport=md.LocalTransport())   # a job of one process, for the doctest
>>> x = np.arange(16.0).reshape(4, 4)
>>> bool(np.allclose(md.rfftn(x, md.Slab.X), np.fft.rfftn(x)))
True
>>> md.finalize()
"""

import dataclasses
import math
import time

import numpy as np

from .. import _operands
from .._errors import InvalidPlanStateError
from .._options import check_or_create_options
from .._streams import stream_pointer
from ..host.fft import FFT as LocalFFT
from ..host.fft import FFTOptions as LocalFFTOptions
from ._agreement import Problems, agree, checked, require_same
from ._arrays import arrays_for
from ._context import get_context
from ._distribution import Box, as_distribution
from ._errors import DistributionMismatchError
from ._exchange import Exchange
from ._fft_plan import output_shape, plan_steps

__all__ = ["FFT", "FFTOptions", "fftn", "ifftn", "rfftn", "irfftn"]

_REAL = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}
_COMPLEX = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_NORMS = (None, "backward", "ortho", "forward")
_DIRECTIONS = {"forward": "forward", "inverse": "inverse", -1: "forward", 1: "inverse"}


_LAYOUTS = ("auto", "c", "transform_last")
_LONG_STRIDED = 8192  # see _transform_last


@dataclasses.dataclass(frozen=True)
class FFTOptions:
    """``fft_type``: "C2C", "R2C" or "C2R" (None: R2C for real operands, C2C for complex ones); ``last_axis_parity``:
    "even" or "odd", the parity of the last axis of a C2R result (its extent is ``2 * (m - 1)`` or ``2 * m - 1``).

    ``local_layout``: how a transform that follows an exchange lays out its input, which the exchange writes: "c"
    (C order), "transform_last" (the transformed axes innermost: the exchange transposes while it unpacks, and the
    result of that step keeps that order, a strided view), or "auto" ("transform_last" for one long transform of an
    outer axis, where cuFFT's strided transforms are slow, else "c")."""

    fft_type: str | None = None
    last_axis_parity: str = "even"
    local_layout: str = "auto"

    def __post_init__(self):
        if self.local_layout not in _LAYOUTS:
            raise ValueError(f"FFTOptions.local_layout must be one of {list(_LAYOUTS)}, not {self.local_layout!r}")
        if self.fft_type not in (None, "C2C", "R2C", "C2R"):
            raise ValueError(f"FFTOptions.fft_type must be None, 'C2C', 'R2C' or 'C2R', not {self.fft_type!r}")
        if self.last_axis_parity not in ("even", "odd"):
            raise ValueError(f"FFTOptions.last_axis_parity must be 'even' or 'odd', not {self.last_axis_parity!r}")


def _fft_type(dtype, requested):
    if dtype in _REAL:
        if requested not in (None, "R2C"):
            raise ValueError(f"fft_type {requested!r} needs a complex operand; a real {dtype} operand allows 'R2C'")
        return "R2C"
    if dtype in _COMPLEX:
        if requested == "R2C":
            raise ValueError(f"fft_type 'R2C' needs a real operand (float32, float64), not {dtype}")
        return requested or "C2C"
    raise TypeError(f"the distributed FFT operand has dtype {dtype}; supported are float32, float64 (R2C), "
                    f"complex64 and complex128")


class _Local:
    """One local transform step: a mathpy FFT over the rank's part (None when the part is empty)."""

    def __init__(self, step, fft, out_shape, out_dtype):
        self.step, self.fft, self.out_shape, self.out_dtype = step, fft, out_shape, out_dtype


class FFT:
    """A planned distributed FFT over all axes of a 2-D or 3-D global array. Collective: every rank constructs it
    (and calls :meth:`plan`, :meth:`execute`, :meth:`reset_operand`) together.

    Parameters
    ----------
    operand
        This rank's part (NumPy, CuPy or torch; host memory runs on the CPU through gloo, device memory on its GPU
        through NCCL).
    distribution
        How the input is split: Slab, Pencil, or this rank's Box.
    out_distribution
        How the result is split (None: where the steps end, see the module docstring).
    options
        :class:`FFTOptions` or a dict of its fields.
    context
        The :class:`~mathpy.distributed.Context` (default: :func:`~mathpy.distributed.initialize`'s).
    stream
        The stream on which the buffers made here are allocated (default: the package's current one); every later
        call takes its own ``stream``, by default the package's current one when the call is made.

    Notes
    -----
    Unnormalised in both directions, as :class:`mathpy.fft.FFT`. Life cycle: ``plan(prolog=, epilog=)``,
    ``execute(direction=)`` any number of times (``reset_operand`` between), ``free()`` (or ``with``).
    """

    def __init__(self, operand, distribution, *, out_distribution=None, options=None, context=None, stream=None,
                 _also=None):
        self._context = context = get_context(context)
        transport = context.transport
        problems = Problems()
        facts = {}
        also, problems.message = _also or ({}, None)  # the stateless functions' own arguments (norm)
        with problems:
            options = check_or_create_options(FFTOptions, options, "options")
            distribution = as_distribution(distribution, "distribution")
            if out_distribution is not None:
                out_distribution = as_distribution(out_distribution, "out_distribution")
            op = _operands.wrap_operand(operand)
            if op.ndim not in (2, 3):
                raise ValueError(f"the distributed FFT transforms 2-D and 3-D arrays; this rank's part is {op.ndim}-D")
            fft_type = _fft_type(op.dtype, options.fft_type)
            distribution.check(op.ndim, transport.size)
            if out_distribution is not None:
                out_distribution.check(op.ndim, transport.size)
            facts = {"ndim": op.ndim, "dtype": op.dtype.name, "fft_type": fft_type, "memory": _memory(op),
                     "parity": options.last_axis_parity, "shape": op.shape,
                     "distribution": _kind(distribution), "out_distribution": _kind(out_distribution),
                     "box": distribution, "out_box": out_distribution, **also}
            if op.device_id is not None and context.device_id is not None and op.device_id != context.device_id:
                raise ValueError(f"the operand lives on cuda:{op.device_id} but this rank uses cuda:"
                                 f"{context.device_id}")
        gathered = agree(transport, "distributed FFT", facts, problems.message)
        require_same("distributed FFT", gathered, ["ndim", "dtype", "fft_type", "memory", "parity", "distribution",
                                                   "out_distribution", *also])
        peers = [g["box"] for g in gathered]
        shape = checked("distributed FFT", distribution.global_shape, [g["shape"] for g in gathered], peers)
        partition = distribution.partition(shape, transport.size, peers)
        final_shape = output_shape(fft_type, shape, options.last_axis_parity)
        if min(final_shape) < 1:
            raise DistributionMismatchError(f"distributed FFT: the result of shape {final_shape} is empty")
        out_partition = None
        if out_distribution is not None:
            out_partition = checked("distributed FFT", out_distribution.partition, final_shape, transport.size,
                                    [g["out_box"] for g in gathered])
        self._steps = plan_steps(fft_type, shape, distribution, partition, out_distribution, out_partition,
                                 transport.size, options.last_axis_parity)
        self._op, self._options, self._fft_type = op, options, fft_type
        self._global_shape, self._result_shape = shape, final_shape
        self._in_partition = partition
        self._out_partition = self._steps[-1].after if self._steps else partition
        self._arrays = arrays_for(op.package, op.device_id)
        with self._arrays.on_stream(self._handle(stream)):
            self._build(op)
        self._planned = self._freed = False

    def _build(self, op):
        """Make the exchanges and the local mathpy FFTs (not planned yet). A transform after an exchange is bound to
        a buffer the plan owns, into which that exchange receives (no copy, no re-binding per execute)."""
        rank, arrays = self._context.rank, self._arrays
        self._work = []
        complex_dtype = op.dtype if op.dtype in _COMPLEX else _REAL[op.dtype]
        dtype = op.dtype
        pending_buffer = None
        for index, step in enumerate(self._steps):
            if step.kind == "exchange":
                exchange = Exchange(step.before, step.after, rank)
                buffer = None
                following = self._steps[index + 1] if index + 1 < len(self._steps) else None
                if following is not None and following.kind == "fft" and not step.after.is_empty(rank):
                    shape = step.after.local_shape(rank)
                    order = _memory_order(shape, following.axes, self._options.local_layout)
                    buffer = arrays.empty_ordered(shape, dtype, order)
                self._work.append((exchange, buffer))
                pending_buffer = buffer
                continue
            out_dtype = _COMPLEX[complex_dtype] if step.fft_type == "C2R" else complex_dtype
            out_shape = step.after.local_shape(rank)
            local = None
            if not step.before.is_empty(rank):
                source = op.tensor if index == 0 else pending_buffer
                if source is None:
                    raise AssertionError("two local transforms in a row")
                options = LocalFFTOptions(fft_type=step.fft_type if step.fft_type == "C2R" else None,
                                          last_axis_parity=self._options.last_axis_parity)
                local = LocalFFT(source, axes=step.axes, options=options)
            self._work.append(_Local(step, local, out_shape, out_dtype))
            dtype = out_dtype
            pending_buffer = None
        self._result_dtype = dtype

    # --- what the plan is ------------------------------------------------------------------------------------------
    @property
    def global_shape(self):
        """The global shape of the input."""
        return self._global_shape

    @property
    def result_shape(self):
        """The global shape of the result."""
        return self._result_shape

    @property
    def result_partition(self):
        """The :class:`~mathpy.distributed.Partition` of the result (which rank holds which indices)."""
        return self._out_partition

    @property
    def result_distribution(self):
        """The distribution of the result, to pass on (to the inverse transform, say): a Slab or Pencil, or this
        rank's Box."""
        last = self._steps[-1].distribution if self._steps else None
        if last is not None:
            return last
        lower, upper = self.result_box
        return Box(lower, upper)

    @property
    def result_box(self):
        """(lower, upper) of this rank's part of the global result."""
        return self._out_partition.box(self._context.rank)

    @property
    def steps(self):
        """The plan as text: the local transforms and the exchanges, in order."""
        described = []
        for step in self._steps:
            if step.kind == "fft":
                described.append(f"{step.fft_type} FFT of axes {step.axes}")
            else:
                described.append(f"exchange into {step.distribution}")
        return described

    def _locals(self):
        return [w for w in self._work if isinstance(w, _Local)]

    @property
    def prolog_layout(self):
        """(shape, strides) of this rank's input to the first local transform: the prolog's ``offset`` indexes it."""
        local = self._locals()[0].fft
        return None if local is None else local.input_layout

    @property
    def epilog_layout(self):
        """(shape, strides) of this rank's output of the last local transform: the epilog's ``offset`` indexes it."""
        local = self._locals()[-1].fft
        return None if local is None else local.output_layout

    @property
    def prolog_box(self):
        """(lower, upper) of the part of the global input the first local transform sees on this rank."""
        return self._locals()[0].step.before.box(self._context.rank)

    @property
    def epilog_box(self):
        """(lower, upper) of the part of the global result the last local transform writes on this rank."""
        return self._locals()[-1].step.after.box(self._context.rank)

    # --- life cycle --------------------------------------------------------------------------------------------------
    def _check_live(self):
        if self._freed:
            raise InvalidPlanStateError("this distributed FFT was freed; create a new one")

    def _handle(self, stream):
        """``stream`` as a raw handle (None: the package's current one now; None on the host)."""
        op = self._op
        return None if op.device_id is None else stream_pointer(stream, op.package, op.device_id)

    def plan(self, prolog=None, epilog=None, *, stream=None):
        """Plan the local transforms, ``prolog`` fused into the first and ``epilog`` into the last (any callback
        :mod:`mathpy.fft` accepts; user data laid out as :attr:`prolog_layout` / :attr:`epilog_layout`), their
        workspaces on ``stream`` (default: the current one)."""
        self._check_live()
        locals_ = self._locals()
        handle = self._handle(stream)
        for index, local in enumerate(locals_):
            if local.fft is not None:
                local.fft.plan(prolog=prolog if index == 0 else None,
                               epilog=epilog if index == len(locals_) - 1 else None, stream=handle)
        self._planned = True

    def reset_operand(self, operand):
        """Use ``operand`` (same package, device, shape, strides and dtype as the planned one) from the next
        :meth:`execute` on. Collective: every rank resets, and all raise together if one rank's operand differs."""
        self._check_live()
        problems = Problems()
        with problems:
            new = _operands.wrap_operand(operand)
            _operands.check_like_planned(new, self._op, "reset_operand: the new operand's", "; create a new FFT for it")
        agree(self._context.transport, "distributed FFT reset_operand", {}, problems.message)
        first = self._work[0]
        if isinstance(first, _Local) and first.fft is not None:
            first.fft.reset_operand(new.tensor)
        self._op = new

    def execute(self, direction=None, *, stream=None, profile=None):
        """Run the transform on ``stream`` (default: the package's current one at this call) and return this rank's
        part of the result (a new array in the operand's package). ``direction``: "forward" / -1 or "inverse" / +1
        (C2C; R2C is forward, C2R inverse). Unnormalised.

        ``profile``: a list to which each step appends ``(description, seconds)``; the device is synchronised
        around every step for it (slower: for finding where the time goes)."""
        return self._execute(direction, None, stream, profile)

    def _execute(self, direction, scale, stream, profile=None):
        self._check_live()
        if not self._planned:
            raise InvalidPlanStateError("execute() before plan(): call plan() first")
        default = "inverse" if self._fft_type == "C2R" else "forward"
        direction = default if direction is None else _DIRECTIONS.get(direction)
        if direction is None or (self._fft_type != "C2C" and direction != default):
            raise ValueError(f"direction must be 'forward' (-1) or 'inverse' (+1); a {self._fft_type} FFT runs only "
                             f"{default}")
        arrays, transport, stream = self._arrays, self._context.transport, self._handle(stream)
        x = self._op.tensor
        with arrays.on_stream(stream):
            if profile is not None:
                arrays.synchronize()
            for item, described in zip(self._work, self.steps):
                started = time.perf_counter()
                if isinstance(item, _Local):
                    if item.fft is None:
                        x = arrays.empty(item.out_shape, item.out_dtype)
                    else:
                        x = item.fft.execute(direction=direction if item.step.fft_type == "C2C" else None)
                else:
                    exchange, buffer = item
                    x = exchange.run(x, arrays, transport, stream, out=buffer)
                if profile is not None:
                    arrays.synchronize()
                    profile.append((described, time.perf_counter() - started))
            if x is self._op.tensor:  # nothing moved and nothing was transformed: never hand back the operand
                x = _copy(arrays, x)
            if scale is not None and scale != 1:
                arrays.scale(x, scale)
        return x

    def free(self):
        """Release the local plans and buffers now; idempotent."""
        if self._freed:
            return
        self._freed = True
        for item in self._work:
            if isinstance(item, _Local) and item.fft is not None:
                item.fft.free()
        self._work = []
        self._op = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        state = "freed" if self._freed else ("planned" if self._planned else "not planned")
        return (f"FFT({self._fft_type}, global shape {self._global_shape}, rank {self._context.rank} of "
                f"{self._context.size}, {state})")


def _memory_order(shape, axes, choice):
    """The order in which a transform input's axes lie in memory (outermost first), per ``local_layout``. "auto"
    moves one long transform of an outer axis innermost: on an H200, cuFFT took 18.7 ms for the axis-0 transforms of
    a C-order 32768 x 16384 complex64 array (stride 16384) against about 4 ms along the contiguous axis."""
    ndim = len(shape)
    natural = tuple(range(ndim))
    moved = tuple(a for a in natural if a not in axes) + tuple(axes)
    if choice == "c" or moved == natural:
        return natural
    if choice == "transform_last" or (len(axes) == 1 and shape[axes[0]] >= _LONG_STRIDED):
        return moved
    return natural


def _copy(arrays, x):
    y = arrays.empty(tuple(x.shape), arrays.dtype(x))
    arrays.copy(y, x)
    return y


def _memory(op):
    return "host" if op.device_id is None else "gpu"


def _kind(distribution):
    """What every rank must agree on: the distribution itself, except that Box corners differ per rank."""
    if distribution is None:
        return None
    return "Box" if isinstance(distribution, Box) else distribution


def _scale(norm, shape, forward):
    if norm not in _NORMS:
        raise ValueError(f"norm {norm!r} is not supported; allowed are {list(_NORMS)}")
    n = math.prod(shape)
    if norm == "ortho":
        return 1 / math.sqrt(n)
    if (norm == "forward") == forward:
        return 1 / n
    return None


def _run(x, distribution, out_distribution, norm, prolog, epilog, context, stream, fft_type, parity, forward):
    problems = Problems()  # a bad norm is reported through the agreement, so that every rank raises
    with problems:
        _scale(norm, (1,), forward)
    options = {"fft_type": fft_type, "last_axis_parity": parity}  # checked by FFT, through the agreement
    with FFT(x, distribution, out_distribution=out_distribution, options=options, context=context, stream=stream,
             _also=({"norm": norm}, problems.message)) as plan:
        plan.plan(prolog=prolog, epilog=epilog, stream=stream)
        real_shape = plan.result_shape if fft_type == "C2R" else plan.global_shape
        return plan._execute("forward" if forward else "inverse", _scale(norm, real_shape, forward), stream)


def fftn(x, distribution, *, out_distribution=None, norm=None, prolog=None, epilog=None, context=None, stream=None):
    """The forward C2C FFT over all axes of the distributed complex array whose part this rank holds in ``x``."""
    return _run(x, distribution, out_distribution, norm, prolog, epilog, context, stream, "C2C", "even", True)


def ifftn(x, distribution, *, out_distribution=None, norm=None, prolog=None, epilog=None, context=None, stream=None):
    """The inverse C2C FFT over all axes (``norm`` as numpy.fft: "backward" scales by 1/n)."""
    return _run(x, distribution, out_distribution, norm, prolog, epilog, context, stream, "C2C", "even", False)


def rfftn(x, distribution, *, out_distribution=None, norm=None, prolog=None, epilog=None, context=None, stream=None):
    """The R2C FFT of a distributed real array; the last axis of the result has ``n // 2 + 1`` entries."""
    return _run(x, distribution, out_distribution, norm, prolog, epilog, context, stream, "R2C", "even", True)


def irfftn(x, distribution, *, out_distribution=None, last_axis_parity="even", norm=None, prolog=None, epilog=None,
           context=None, stream=None):
    """The C2R FFT (inverse of :func:`rfftn`); the last axis of the result has ``2 * (m - 1)`` entries, or
    ``2 * m - 1`` with ``last_axis_parity="odd"``."""
    return _run(x, distribution, out_distribution, norm, prolog, epilog, context, stream, "C2R", last_axis_parity,
                False)
