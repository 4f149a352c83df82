"""How a global array is split over the ranks: the distributions users name, and the :class:`Partition` they resolve to.

A distribution says which part of the global array each rank holds. With the global shape and the number of ranks it
resolves to a :class:`Partition`: for every rank, one sorted set of global indices per axis (a ``range`` when the set
is contiguous, else an int64 array). A rank's local array is the product of its sets, in increasing global order.

- ``Slab(axis)``: contiguous blocks along one axis in rank order; the first ``n % P`` ranks hold one index more
  (cuFFTMp's convention). ``Slab.X`` is ``Slab(0)``, ``Slab.Y`` is ``Slab(1)``; for matrices ``Slab(0)`` distributes
  rows and ``Slab(1)`` columns.
- ``Pencil(grid, axes=(0, 1))``: a ``p0 x p1`` grid of ranks (rank ``r`` at ``(r // p1, r % p1)``) splits two axes in
  blocks, the first grid dimension along ``axes[0]``.
- ``Box(lower, upper)``: each rank names its own box ``[lower, upper)``; together the boxes must tile the array.
- ``BlockCyclic(grid, blocks)``: ScaLAPACK's 2-D block-cyclic layout: a ``pr x pc`` grid (rank ``r`` at
  ``(r // pc, r % pc)``), blocks of ``mb x nb``; rank ``(i, j)`` holds the row blocks ``b`` with ``b % pr == i`` and
  the column blocks ``c`` with ``c % pc == j``, stored compactly in global order.

>>> Slab.X.partition((5, 4), 2).sets
((range(0, 3), range(0, 4)), (range(3, 5), range(0, 4)))
>>> BlockCyclic((2, 1), (1, 4)).partition((5, 4), 2).sets[0][0]
array([0, 2, 4])
>>> Slab.Y.global_shape([(4, 3), (4, 2)], None)
(4, 5)
>>> Slab.Y.global_shape([(4, 2), (4, 3)], None)
Traceback (most recent call last):
...
ValueError: rank 0 holds 2 indices along axis 1, but Slab(axis=1) of a global extent 5 over 2 ranks gives it 3 ...
"""

import dataclasses
import math
import operator

import numpy as np

__all__ = ["Slab", "Pencil", "Box", "BlockCyclic", "Partition", "as_distribution", "block_range", "same_set"]


def block_range(n, parts, index):
    """The contiguous block of ``range(n)`` that part ``index`` of ``parts`` holds (the first ``n % parts`` hold one
    more)."""
    base, extra = divmod(n, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (index < extra))


def _cyclic(n, block, parts, index):
    """The indices of ``range(n)`` in the blocks of ``block`` that are ``index`` modulo ``parts``."""
    if parts == 1:
        return range(n)
    starts = np.arange(index * block, n, parts * block)
    if starts.size == 0:
        return range(0)
    indices = (starts[:, None] + np.arange(block)[None, :]).ravel()
    indices = indices[indices < n]
    return _compact(indices)


def _compact(indices):
    """A ``range`` when ``indices`` (sorted, unique) are contiguous, else the read-only int64 array."""
    if indices.size == 0:
        return range(0)
    if int(indices[-1]) - int(indices[0]) + 1 == indices.size:
        return range(int(indices[0]), int(indices[-1]) + 1)
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    indices.flags.writeable = False
    return indices


def _positive_ints(value, length, what):
    try:
        values = tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(f"{what} must be a tuple of {length} ints, not {value!r}") from None
    if len(values) != length or any(v < 1 for v in values):
        raise ValueError(f"{what} must be {length} positive ints, not {value!r}")
    return values


class _Distribution:
    """What every distribution answers. ``peers``: every rank's distribution object, in rank order (only Box reads
    it: each rank names its own box)."""

    def check(self, ndim, nranks):
        """Raise ValueError when the distribution cannot describe an ``ndim``-D array over ``nranks`` ranks."""

    def partition(self, shape, nranks, peers=None):
        raise NotImplementedError

    def global_shape(self, local_shapes, peers):
        """The global shape the ranks' ``local_shapes`` make, or ValueError naming the first rank that does not fit."""
        shape = self._infer(local_shapes, peers)
        partition = self.partition(shape, len(local_shapes), peers)
        for rank, local in enumerate(local_shapes):
            expected = partition.local_shape(rank)
            if tuple(local) != expected:
                raise ValueError(self._misfit(rank, tuple(local), expected, shape, len(local_shapes)))
        return shape

    def _misfit(self, rank, local, expected, shape, nranks):
        return (f"rank {rank} holds a part of shape {local}, but {self} of the global shape {shape} over {nranks} "
                f"ranks gives it {expected}")

    @staticmethod
    def _common(local_shapes, split_axes):
        """The extents of the axes not in ``split_axes``, which every rank must hold whole (ValueError otherwise)."""
        first = local_shapes[0]
        for rank, local in enumerate(local_shapes):
            if len(local) != len(first):
                raise ValueError(f"rank {rank} holds a {len(local)}-D part, rank 0 a {len(first)}-D part")
            for axis, (a, b) in enumerate(zip(local, first)):
                if axis not in split_axes and a != b:
                    raise ValueError(f"axis {axis} is not distributed, so every rank holds it whole, but rank {rank} "
                                     f"holds {a} indices along it and rank 0 holds {b}")
        return list(first)


@dataclasses.dataclass(frozen=True)
class Slab(_Distribution):
    """Contiguous blocks along ``axis``, in rank order (see the module docstring)."""

    axis: int

    def __post_init__(self):
        if isinstance(self.axis, bool) or not isinstance(self.axis, (int, np.integer)) or self.axis < 0:
            raise ValueError(f"Slab.axis must be a non-negative int, not {self.axis!r}")

    def check(self, ndim, nranks):
        if self.axis >= ndim:
            raise ValueError(f"{self} splits axis {self.axis}, but the array has {ndim} dimension(s)")

    def partition(self, shape, nranks, peers=None):
        sets = []
        for rank in range(nranks):
            axes = [range(n) for n in shape]
            axes[self.axis] = block_range(shape[self.axis], nranks, rank)
            sets.append(tuple(axes))
        return Partition(shape, sets)

    def _infer(self, local_shapes, peers):
        shape = self._common(local_shapes, {self.axis})
        shape[self.axis] = sum(local[self.axis] for local in local_shapes)
        return tuple(shape)

    def _misfit(self, rank, local, expected, shape, nranks):
        return (f"rank {rank} holds {local[self.axis]} indices along axis {self.axis}, but {self} of a global extent "
                f"{shape[self.axis]} over {nranks} ranks gives it {expected[self.axis]} (the first "
                f"{shape[self.axis]} % {nranks} ranks hold one more); use Box for other splits")


Slab.X = Slab(0)
Slab.Y = Slab(1)
Slab.Z = Slab(2)


class _Grid(_Distribution):
    """A ``grid[0] x grid[1]`` grid of ranks (rank ``r`` at ``(r // grid[1], r % grid[1])``) splitting two axes."""

    def _check_grid(self, nranks):
        if math.prod(self.grid) != nranks:
            raise ValueError(f"{self}: a {self.grid[0]} x {self.grid[1]} grid needs {math.prod(self.grid)} ranks, "
                             f"the job has {nranks}")

    def coordinates(self, rank):
        return divmod(rank, self.grid[1])

    def _grid_extents(self, local_shapes, axes):
        """The global extents along the split ``axes``: the sums down the grid's first column and along its first
        row."""
        p0, p1 = self.grid
        return (sum(local_shapes[i * p1][axes[0]] for i in range(p0)), sum(local_shapes[j][axes[1]] for j in range(p1)))


@dataclasses.dataclass(frozen=True)
class Pencil(_Grid):
    """A ``grid[0] x grid[1]`` grid of ranks splitting ``axes[0]`` and ``axes[1]`` in blocks."""

    grid: tuple
    axes: tuple = (0, 1)

    def __post_init__(self):
        object.__setattr__(self, "grid", _positive_ints(self.grid, 2, "Pencil.grid"))
        try:
            axes = tuple(operator.index(a) for a in self.axes)
        except TypeError:
            raise TypeError(f"Pencil.axes must be two ints, not {self.axes!r}") from None
        if len(axes) != 2 or axes[0] == axes[1] or min(axes) < 0:
            raise ValueError(f"Pencil.axes must be two different non-negative axes, not {self.axes!r}")
        object.__setattr__(self, "axes", axes)

    def check(self, ndim, nranks):
        if max(self.axes) >= ndim:
            raise ValueError(f"{self} splits axes {self.axes}, but the array has {ndim} dimension(s)")
        self._check_grid(nranks)

    def partition(self, shape, nranks, peers=None):
        self.check(len(shape), nranks)
        sets = []
        for rank in range(nranks):
            axes = [range(n) for n in shape]
            for axis, parts, index in zip(self.axes, self.grid, self.coordinates(rank)):
                axes[axis] = block_range(shape[axis], parts, index)
            sets.append(tuple(axes))
        return Partition(shape, sets)

    def _infer(self, local_shapes, peers):
        self.check(len(local_shapes[0]), len(local_shapes))
        shape = self._common(local_shapes, set(self.axes))
        shape[self.axes[0]], shape[self.axes[1]] = self._grid_extents(local_shapes, self.axes)
        return tuple(shape)


@dataclasses.dataclass(frozen=True)
class Box(_Distribution):
    """This rank's part: the box ``[lower, upper)`` of the global array (each rank passes its own)."""

    lower: tuple
    upper: tuple

    def __post_init__(self):
        try:
            lower = tuple(operator.index(v) for v in self.lower)
            upper = tuple(operator.index(v) for v in self.upper)
        except TypeError:
            raise TypeError(f"Box corners must be tuples of ints, not {self.lower!r} and {self.upper!r}") from None
        if len(lower) != len(upper) or any(lo < 0 or hi < lo for lo, hi in zip(lower, upper)):
            raise ValueError(f"Box needs 0 <= lower <= upper per axis with one value per axis, not lower={lower}, "
                             f"upper={upper}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)

    def check(self, ndim, nranks):
        if len(self.lower) != ndim:
            raise ValueError(f"{self} has {len(self.lower)} corner coordinates for a {ndim}-D array")

    def partition(self, shape, nranks, peers=None):
        if peers is None or len(peers) != nranks or not all(isinstance(p, Box) for p in peers):
            raise ValueError("Box distributions need every rank's Box")
        for rank, box in enumerate(peers):
            if len(box.upper) != len(shape) or any(hi > n for hi, n in zip(box.upper, shape)):
                raise ValueError(f"rank {rank}'s {box} does not fit in the global shape {tuple(shape)}")
        volumes = sum(math.prod(hi - lo for lo, hi in zip(b.lower, b.upper)) for b in peers)
        if volumes != math.prod(shape):
            raise ValueError(f"the ranks' boxes hold {volumes} elements in all but the global shape {tuple(shape)} "
                             f"has {math.prod(shape)}: they must tile it without overlap")
        for i, a in enumerate(peers):
            for j in range(i + 1, len(peers)):
                b = peers[j]
                if all(max(a.lower[d], b.lower[d]) < min(a.upper[d], b.upper[d]) for d in range(len(shape))):
                    raise ValueError(f"the boxes of rank {i} ({a}) and rank {j} ({b}) overlap")
        return Partition(shape, [tuple(range(lo, hi) for lo, hi in zip(b.lower, b.upper)) for b in peers])

    def _infer(self, local_shapes, peers):
        for rank, (local, box) in enumerate(zip(local_shapes, peers)):
            extents = tuple(hi - lo for lo, hi in zip(box.lower, box.upper))
            if tuple(local) != extents:
                raise ValueError(f"rank {rank} holds a part of shape {tuple(local)} but its {box} has shape {extents}")
        return tuple(max(b.upper[d] for b in peers) for d in range(len(peers[0].upper)))


@dataclasses.dataclass(frozen=True)
class BlockCyclic(_Grid):
    """ScaLAPACK's 2-D block-cyclic layout over a ``grid[0] x grid[1]`` grid with ``blocks[0] x blocks[1]`` blocks."""

    grid: tuple
    blocks: tuple

    def __post_init__(self):
        object.__setattr__(self, "grid", _positive_ints(self.grid, 2, "BlockCyclic.grid"))
        object.__setattr__(self, "blocks", _positive_ints(self.blocks, 2, "BlockCyclic.blocks"))

    def check(self, ndim, nranks):
        if ndim != 2:
            raise ValueError(f"{self} distributes matrices (2-D), not {ndim}-D arrays")
        self._check_grid(nranks)

    def partition(self, shape, nranks, peers=None):
        self.check(len(shape), nranks)
        sets = []
        for rank in range(nranks):
            i, j = self.coordinates(rank)
            sets.append((_cyclic(shape[0], self.blocks[0], self.grid[0], i),
                         _cyclic(shape[1], self.blocks[1], self.grid[1], j)))
        return Partition(shape, sets)

    def _infer(self, local_shapes, peers):
        self.check(len(local_shapes[0]), len(local_shapes))
        return self._grid_extents(local_shapes, (0, 1))


_NAMES = {"row": Slab(0), "rows": Slab(0), "column": Slab(1), "columns": Slab(1), "x": Slab(0), "y": Slab(1)}


def as_distribution(value, what="distribution"):
    """A distribution object from itself or a name ("row", "column", "X", "Y")."""
    if isinstance(value, _Distribution):
        return value
    if isinstance(value, str) and value.lower() in _NAMES:
        return _NAMES[value.lower()]
    raise TypeError(f"{what} must be Slab, Pencil, Box or BlockCyclic (or one of {sorted(_NAMES)}), not {value!r}")


def same_set(a, b):
    if isinstance(a, range) and isinstance(b, range):
        return a == b
    if isinstance(a, range) or isinstance(b, range):
        return False
    return a.shape == b.shape and bool(np.array_equal(a, b))


class Partition:
    """For every rank, one sorted set of global indices per axis: ``sets[rank][axis]`` (a ``range`` or an int64
    array). Several ranks may hold the same index (a replicated partition, as matmul's gathered operands are)."""

    __slots__ = ("shape", "sets")

    def __init__(self, shape, sets):
        self.shape, self.sets = tuple(int(n) for n in shape), tuple(tuple(s) for s in sets)

    @property
    def nranks(self):
        return len(self.sets)

    def local_shape(self, rank):
        return tuple(len(s) for s in self.sets[rank])

    def is_empty(self, rank):
        return 0 in self.local_shape(rank)

    def full_axes(self):
        """The axes that every rank holding data holds whole (a transform along them needs no communication)."""
        full = set(range(len(self.shape)))
        for rank, sets in enumerate(self.sets):
            if not self.is_empty(rank):
                full -= {a for a, s in enumerate(sets) if not (isinstance(s, range) and len(s) == self.shape[a])}
        return full

    def box(self, rank):
        """(lower, upper) of rank's part when its sets are contiguous, else None."""
        sets = self.sets[rank]
        if not all(isinstance(s, range) for s in sets):
            return None
        return tuple(s.start for s in sets), tuple(s.stop for s in sets)

    def is_replicated(self):
        """Whether every rank holds the whole array."""
        return all(isinstance(s, range) and len(s) == n for sets in self.sets for s, n in zip(sets, self.shape))

    def __eq__(self, other):
        if not isinstance(other, Partition) or other.shape != self.shape or len(other.sets) != len(self.sets):
            return False
        return all(same_set(a, b) for mine, theirs in zip(self.sets, other.sets) for a, b in zip(mine, theirs))

    def __hash__(self):
        return hash(self.shape)

    def __repr__(self):
        return f"Partition(shape={self.shape}, {len(self.sets)} ranks)"
