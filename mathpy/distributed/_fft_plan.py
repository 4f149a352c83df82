"""The steps of a distributed FFT: which axes each local transform takes, and the exchanges between them.

A multi-dimensional FFT is a sequence of 1-D transforms along its axes, in any order, except that a real-to-complex
transform takes the halved axis first (its input is real) and a complex-to-real one takes it last. An axis can be
transformed locally when every rank holds it whole. :func:`plan_steps` starts from the input partition and, greedily,

1. transforms every pending axis that is whole on every rank (one local FFT over all of them), else
2. exchanges into the candidate partition that lets the most pending axes be transformed next; ties go to the
   requested output partition, then to the exchange that changes fewer split axes (a pencil transpose among the ranks
   of one grid row), then to the candidates' order;

and at the end exchanges into the requested output partition if it is not already there. Candidates are slabs along
each axis (slab strategy), or for 3-D pencils, the ``p0 x p1`` grid splitting each ordered pair of axes (pencil
strategy). Slab X in, forward: transform axes (1, 2), one exchange to slab Y, transform axis 0 (cuFFTMp's order).

>>> from mathpy.distributed._distribution import Slab, Pencil
>>> steps = plan_steps("C2C", (8, 8, 8), Slab.X, Slab.X.partition((8, 8, 8), 2), None, None, 2)
>>> [(s.kind, s.axes if s.kind == "fft" else s.distribution) for s in steps]
[('fft', (1, 2)), ('exchange', Slab(axis=1)), ('fft', (0,))]
>>> grid = Pencil((2, 2))
>>> steps = plan_steps("C2C", (8, 8, 8), grid, grid.partition((8, 8, 8), 4), None, None, 4)
>>> [(s.kind, s.axes if s.kind == "fft" else s.distribution.axes) for s in steps]
[('fft', (2,)), ('exchange', (0, 2)), ('fft', (1,)), ('exchange', (1, 2)), ('fft', (0,))]
"""

import dataclasses
import itertools

from ._distribution import Partition, Pencil, Slab

__all__ = ["Step", "plan_steps", "output_shape"]


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """One step: ``kind`` "fft" (a local transform of ``axes``, of ``fft_type``, the halved axis last) or
    "exchange" (into ``distribution``). ``before`` / ``after``: the partitions around the step (global shapes
    included: an R2C or C2R step changes the halved axis' extent). An "fft" step's ``distribution`` is the Slab or
    Pencil its data is in (None for boxes)."""

    kind: str
    before: Partition
    after: Partition
    axes: tuple = ()
    fft_type: str = "C2C"
    distribution: object = None


def output_shape(fft_type, shape, parity):
    """The global result shape of a transform of ``fft_type`` over all axes of ``shape``."""
    shape = list(shape)
    if fft_type == "R2C":
        shape[-1] = shape[-1] // 2 + 1
    elif fft_type == "C2R":
        shape[-1] = 2 * (shape[-1] - 1) + (parity == "odd")
    return tuple(shape)


def _transformable(partition, pending, fft_type, last):
    group = pending & partition.full_axes()
    if fft_type == "R2C" and last in pending:
        return group if last in group else set()
    if fft_type == "C2R" and last in group and pending - group:
        group = group - {last}
    return group


def _resized(partition, axis, extent):
    """``partition`` of a shape whose ``axis`` (held whole wherever there is data) now has ``extent``."""
    shape = list(partition.shape)
    shape[axis] = extent
    sets = []
    for sets_of_rank in partition.sets:
        sets_of_rank = list(sets_of_rank)
        if len(sets_of_rank[axis]):
            sets_of_rank[axis] = range(extent)
        sets.append(tuple(sets_of_rank))
    return Partition(shape, sets)


def _candidates(ndim, nranks, distributions):
    """The strategy's candidate distributions, in preference order: pencils of the grid given (3-D), else slabs."""
    grid = next((d.grid for d in distributions if isinstance(d, Pencil)), None)
    if grid is not None and ndim >= 3:
        return [Pencil(grid, pair) for pair in itertools.permutations(range(ndim), 2)]
    return [Slab(axis) for axis in range(ndim)]


def _named(distribution):
    """The distribution a step's partition is, when it is one that keeps its meaning as the halved axis changes."""
    return distribution if isinstance(distribution, (Slab, Pencil)) else None


def _changes(current, candidate):
    if isinstance(current, Pencil) and isinstance(candidate, Pencil):
        return sum(a != b for a, b in zip(current.axes, candidate.axes))
    return 1 if isinstance(current, (Slab, Pencil)) else 2


def plan_steps(fft_type, shape, distribution, partition, out_distribution, out_partition, nranks, parity="even"):
    """The steps from ``partition`` (of global ``shape``, made from ``distribution``) to the transform's result, in
    ``out_partition`` when given (of the result's shape, from ``out_distribution``)."""
    ndim = len(shape)
    last = ndim - 1
    final_shape = output_shape(fft_type, shape, parity)
    candidates = _candidates(ndim, nranks, [distribution, out_distribution])
    current, current_distribution = partition, distribution
    pending, steps = set(range(ndim)), []
    for _ in range(4 * ndim + 2):
        if not pending:
            break
        group = _transformable(current, pending, fft_type, last)
        if group:
            kind = fft_type if last in group and fft_type != "C2C" else "C2C"
            after = current
            if kind != "C2C":
                after = _resized(current, last, final_shape[last])
            axes = tuple(sorted(group - {last})) + ((last,) if last in group else ())
            steps.append(Step("fft", current, after, axes, kind, _named(current_distribution)))
            current, pending = after, pending - group
            continue
        best = None
        for order, candidate in enumerate(candidates):
            target = candidate.partition(current.shape, nranks)
            if target == current:
                continue
            gain = len(_transformable(target, pending, fft_type, last))
            if not gain:
                continue
            matches = out_partition is not None and candidate.partition(final_shape, nranks) == out_partition
            key = (-gain, not matches, _changes(current_distribution, candidate), order)
            if best is None or key < best[0]:
                best = (key, candidate, target)
        if best is None:
            raise AssertionError(f"no exchange lets the FFT proceed from {current} (pending axes {pending})")
        _, candidate, target = best
        steps.append(Step("exchange", current, target, distribution=candidate))
        current, current_distribution = target, candidate
    else:
        raise AssertionError(f"the distributed FFT plan did not converge (pending axes {pending})")
    if out_partition is not None and out_partition != current:
        steps.append(Step("exchange", current, out_partition, distribution=out_distribution))
    return steps
