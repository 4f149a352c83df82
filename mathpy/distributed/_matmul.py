"""Distributed matrix products ``D = epilog(alpha * A @ B + beta * C)``: the stateful :class:`Matmul` and the stateless
:func:`matmul` (a thin layer over it).

Each rank passes its parts of the 2-D global matrices A (m x k), B (k x n) and optionally C (m x n) and gets its part
of D back, in its package and on its device. ``distributions=(dist_a, dist_b, dist_d)`` (or one distribution for
all three) are ``Slab(0)`` / "row", ``Slab(1)`` / "column", or ``BlockCyclic(grid, blocks)``; C is distributed as D.
Epilogs are mathpy's (:class:`mathpy.MatmulEpilog`); their inputs and outputs are the rank's own, as if its part of D
were a product of its own: ``bias`` has one entry per local row of D, aux outputs have the local part's shape, and
DRELU_BGRAD / DGELU_BGRAD sum over the local columns.

Two algorithms, chosen by the bytes each moves (``algorithm=`` forces one):

- **gather**: every rank gathers the rows of A and the columns of B that its part of D needs (an all-gather when it
  needs all of them, else an all-to-all), then computes its part with one local :class:`mathpy.Matmul`. When only
  one operand moves and it arrives in blocks of K (``row``: A, B, D row-distributed; ``column``: all
  column-distributed), the transfer overlaps the product of the rank's own K block (``overlap=True``): the local
  product is split in K, one :class:`mathpy.Matmul` per rank's block, each accumulating onto the last, the epilog in
  the final one. Half-precision results accumulate in float32 and are rounded once at the end.
- **reduce** (A column-distributed and B row-distributed over the same K blocks, D a slab): every rank multiplies
  its K block into the partial parts of the other ranks' D, one ``reduce_scatter`` sums them, and each rank adds its
  own K block's product with the epilog.

>>> import numpy as np, mathpy.distributed as md
>>> context = md.initialize(transport=md.LocalTransport())   # a job of one process, for the doctest
>>> a, b = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
>>> md.matmul(a, b, distributions="row", epilog="bias", epilog_inputs={"bias": np.arange(4, dtype=np.float32)})
array([[3., 3.],
       [4., 4.],
       [5., 5.],
       [6., 6.]], dtype=float32)
>>> md.finalize()
"""

import numpy as np

from .. import _operands
from .._errors import InvalidPlanStateError
from .._streams import stream_pointer
from ..host.matmul import MatmulOptions
from ..host.matmul._epilog import epilog_spec
from ._agreement import Problems, agree, checked, require_same
from ._arrays import arrays_for
from ._context import get_context
from ._distribution import Partition, Slab, as_distribution, same_set
from ._errors import DistributionMismatchError
from ._exchange import Exchange
from ._matmul_local import GatherProduct, OverlappedProduct, ReduceProduct, accumulation_dtype

__all__ = ["Matmul", "matmul"]

_ALGORITHMS = (None, "gather", "reduce")


def _distributions(value):
    if isinstance(value, (list, tuple)):
        if len(value) != 3:
            raise ValueError(f"distributions must be one distribution or three (A, B, D), not {len(value)}")
        return tuple(as_distribution(v, f"distributions[{i}]") for i, v in enumerate(value))
    one = as_distribution(value, "distributions")
    return one, one, one


def _need(target, rows, cols):
    """The replicated-where-needed partition with ``rows`` and ``cols`` per rank."""
    return Partition(target, list(zip(rows, cols)))


class Matmul:
    """A planned distributed ``D = epilog(alpha * A @ B + beta * C)`` over 2-D matrices. Collective: every rank
    constructs it and calls :meth:`plan`, :meth:`execute`, :meth:`reset_operands` together.

    Parameters
    ----------
    a, b, c
        This rank's parts (NumPy, CuPy or torch; one package and device).
    distributions
        ``(dist_a, dist_b, dist_d)`` or one for all (C follows D).
    alpha, beta
        Scalars (beta defaults to 1 with c, else 0).
    options
        :class:`mathpy.MatmulOptions` (dtypes, compute type) or a dict.
    algorithm
        None (fewest bytes moved), "gather" or "reduce".
    overlap
        Overlap the gather with the rank's own K block where the distributions allow it.
    context
        The :class:`~mathpy.distributed.Context` (default: :func:`~mathpy.distributed.initialize`'s).
    stream
        The stream of the work done while it is built (none: the local products are planned by :meth:`plan`);
        every later call takes its own ``stream``, by default the package's current one when the call is made.
    """

    def __init__(self, a, b, c=None, *, distributions, alpha=1, beta=None, options=None, algorithm=None, overlap=True,
                 context=None, stream=None):
        self._context = context = get_context(context)
        transport = context.transport
        problems, facts = Problems(), {}
        with problems:
            dists = _distributions(distributions)
            if algorithm not in _ALGORITHMS:
                raise ValueError(f"algorithm must be one of {list(_ALGORITHMS)}, not {algorithm!r}")
            if not isinstance(overlap, bool):
                raise TypeError(f"overlap must be a bool, not {overlap!r}")
            ops = _operands.wrap_operands({"a": a, "b": b, "c": c})
            for name, op in ops.items():
                if op is not None and op.ndim != 2:
                    raise ValueError(f"the distributed matmul multiplies matrices: this rank's part of {name} is "
                                     f"{op.ndim}-D")
            if isinstance(options, dict):
                options = MatmulOptions(**options)
            options = options or MatmulOptions()
            if not isinstance(options, MatmulOptions):
                raise TypeError(f"options must be None, a dict or a MatmulOptions, not {type(options).__name__}")
            for dist, name in zip(dists, "abd"):
                dist.check(2, transport.size)
            a_op = ops["a"]
            if a_op.device_id is not None and context.device_id is not None and a_op.device_id != context.device_id:
                raise ValueError(f"the operands live on cuda:{a_op.device_id} but this rank uses cuda:"
                                 f"{context.device_id}")
            facts = {"a": ops["a"].shape, "b": ops["b"].shape, "c": None if c is None else ops["c"].shape,
                     "dtypes": tuple(None if op is None else op.dtype.name for op in ops.values()),
                     "memory": "host" if a_op.device_id is None else "gpu", "has_c": c is not None,
                     "distributions": dists, "alpha": alpha, "beta": beta, "options": options,
                     "algorithm": algorithm, "overlap": overlap}
        gathered = agree(transport, "distributed matmul", facts, problems.message)
        require_same("distributed matmul", gathered, ["dtypes", "memory", "has_c", "distributions", "alpha", "beta",
                                                      "options", "algorithm", "overlap"])
        dist_a, dist_b, dist_d = dists
        what = "distributed matmul"
        m, k = checked(what + " (a)", dist_a.global_shape, [g["a"] for g in gathered], None)
        k_b, n = checked(what + " (b)", dist_b.global_shape, [g["b"] for g in gathered], None)
        if k != k_b:
            raise DistributionMismatchError(f"{what}: the global a is {m} x {k} but the global b is {k_b} x {n}")
        if c is not None:
            shape_c = checked(what + " (c, distributed as d)", dist_d.global_shape, [g["c"] for g in gathered], None)
            if shape_c != (m, n):
                raise DistributionMismatchError(f"{what}: the global c is {shape_c[0]} x {shape_c[1]}, the product "
                                                f"is {m} x {n}")
        size = transport.size
        pa = dist_a.partition((m, k), size)
        pb = dist_b.partition((k, n), size)
        pd = dist_d.partition((m, n), size)
        empty = [r for r in range(size) if pa.is_empty(r) or pb.is_empty(r) or pd.is_empty(r)]
        if empty:
            raise DistributionMismatchError(f"{what}: ranks {empty} would hold an empty part of a, b or d (global "
                                            f"{m} x {k} @ {k} x {n} over {size} ranks); use fewer ranks or another "
                                            f"distribution")
        self._ops, self._options = ops, options
        self._alpha, self._beta = alpha, (beta if beta is not None else (1 if c is not None else 0))
        self._shapes = (m, k, n)
        self._partitions = (pa, pb, pd)
        self._arrays = arrays_for(a_op.package, a_op.device_id)
        self._package, self._device_id = a_op.package, a_op.device_id
        self._handle(stream)  # checked now; each call resolves its own
        self._algorithm = self._choose(algorithm, dists)
        self._overlap = overlap
        self._product = None
        self._freed = False

    # --- the algorithm -----------------------------------------------------------------------------------------------
    def _choose(self, requested, dists):
        """"gather" or "reduce", the same on every rank (decided from global facts only)."""
        pa, pb, pd = self._partitions
        m, k, n = self._shapes
        size = self._context.size
        self._a_need = _need((m, k), [s[0] for s in pd.sets], [range(k)] * size)
        self._b_need = _need((k, n), [range(k)] * size, [s[1] for s in pd.sets])
        reducible = (size > 1 and all(same_set(pa.sets[r][1], pb.sets[r][0]) and same_set(pa.sets[r][0], range(m))
                                      and same_set(pb.sets[r][1], range(n)) for r in range(size))
                     and isinstance(dists[2], Slab) and self._ops["a"].itemsize > 1)  # float8: gather
        if requested == "reduce" and not reducible:
            raise DistributionMismatchError(
                "distributed matmul: algorithm='reduce' needs a column-distributed a and a row-distributed b over the "
                "same blocks of K, and a slab-distributed d")
        if requested == "gather" or not reducible:
            return "gather"
        if requested == "reduce":
            return "reduce"
        itemsize = self._ops["a"].itemsize
        gathered = sum(Exchange(p, need, 0).total_crossing for p, need in ((pa, self._a_need), (pb, self._b_need)))
        reduced = m * n * (size - 1)  # every rank sends (P - 1) / P of an m x n partial
        acc = accumulation_dtype(_result_dtype(self._ops, self._options)).itemsize
        return "reduce" if reduced * acc < gathered * itemsize else "gather"

    @property
    def algorithm(self):
        """"gather" or "reduce" (see the module docstring); after :meth:`plan`, "gather+overlap" when it overlaps."""
        if self._product is not None and isinstance(self._product, OverlappedProduct):
            return "gather+overlap"
        return self._algorithm

    @property
    def global_shapes(self):
        """(m, k, n)."""
        return self._shapes

    @property
    def result_partition(self):
        return self._partitions[2]

    def _overlappable(self, spec):
        """Which operand ("a" or "b") arrives in K blocks while the other is already whole in K here, or None."""
        pa, pb, pd = self._partitions
        m, k, n = self._shapes
        size = self._context.size
        if not self._overlap or size == 1 or spec.bgrad in ("a", "b"):
            return None
        if self._ops["a"].itemsize == 1 or _result_dtype(self._ops, self._options).itemsize == 1:
            return None  # float8: scale factors apply per product, not per K block
        if pa == self._a_need and self._b_need.is_replicated() and _blocks_of(pb, 0):
            return "b"  # row: A rows local with all of K, B arrives in blocks of rows (K)
        if pb == self._b_need and self._a_need.is_replicated() and _blocks_of(pa, 1):
            return "a"  # column: B columns local with all of K, A arrives in blocks of columns (K)
        return None

    # --- life cycle --------------------------------------------------------------------------------------------------
    def _check_live(self, what):
        if self._freed:
            raise InvalidPlanStateError(f"{what}: this distributed Matmul was freed; create a new one")

    def _handle(self, stream):
        """``stream`` as a raw handle (None: the package's current one now; None on the host)."""
        return None if self._device_id is None else stream_pointer(stream, self._package, self._device_id)

    def plan(self, epilog=None, epilog_inputs=None, *, stream=None):
        """Plan the local products with ``epilog`` (its ``epilog_inputs`` are this rank's own), their workspaces and
        buffers on ``stream`` (default: the current one). Collective: an error on one rank (a bad epilog input, say)
        is raised on every rank."""
        self._check_live("plan")
        problems = Problems()
        product = None
        with problems, self._arrays.on_stream(self._handle(stream)):
            spec = epilog_spec(epilog)
            arrays, rank = self._arrays, self._context.rank
            common = dict(ops=self._ops, alpha=self._alpha, beta=self._beta, options=self._options,
                          epilog=epilog, epilog_inputs=epilog_inputs, arrays=arrays, rank=rank,
                          partitions=self._partitions)
            if self._algorithm == "reduce":
                product = ReduceProduct(**common)
            else:
                which = self._overlappable(spec)
                exchanges = {"a": Exchange(self._partitions[0], self._a_need, rank),
                             "b": Exchange(self._partitions[1], self._b_need, rank)}
                if which is not None:
                    product = OverlappedProduct(which=which, exchange=exchanges[which], **common)
                else:
                    product = GatherProduct(exchanges=exchanges, **common)
        agree(self._context.transport, "distributed matmul plan", {}, problems.message)
        if self._product is not None:
            self._product.free()
        self._product = product

    def execute(self, *, stream=None):
        """Compute this rank's part of D on ``stream`` (default: the package's current one at this call): the result,
        or ``(result, aux)`` when the epilog has outputs."""
        self._check_live("execute")
        if self._product is None:
            raise InvalidPlanStateError("execute() before plan(): call plan() first")
        return self._product.run(self._context.transport, self._handle(stream))

    def reset_operands(self, a=None, b=None, c=None, epilog_inputs=None):
        """New parts of the same shapes, dtypes, layouts, package and device (collective: all ranks raise together
        when one rank's new part differs)."""
        self._check_live("reset_operands")
        problems = Problems()
        with problems:
            if self._product is None:
                raise ValueError("reset_operands before plan()")
            new = {}
            for name, value in (("a", a), ("b", b), ("c", c)):
                if value is None:
                    continue
                old = self._ops[name]
                if old is None:
                    raise ValueError("reset_operands(c=...): the Matmul was built without c")
                op = _operands.wrap_operand(value, name)
                _operands.check_like_planned(op, old, f"reset_operands: the new {name}'s")
                new[name] = op
            self._product.check_inputs(epilog_inputs)
            self._product.reset({name: op.tensor for name, op in new.items()}, epilog_inputs)
            self._ops.update(new)
        agree(self._context.transport, "distributed matmul reset_operands", {}, problems.message)

    def free(self):
        """Release the local plans and buffers now; idempotent."""
        if self._freed:
            return
        self._freed = True
        if self._product is not None:
            self._product.free()
        self._product = self._ops = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        m, k, n = self._shapes
        return f"Matmul({m} x {k} @ {k} x {n}, {self._algorithm}, rank {self._context.rank} of {self._context.size})"


def _blocks_of(partition, axis):
    """Whether every rank holds a contiguous block along ``axis`` and the other axis whole."""
    other = 1 - axis
    return all(isinstance(sets[axis], range) and same_set(sets[other], range(partition.shape[other]))
               for sets in partition.sets)


def _result_dtype(ops, options):
    if options.result_type is not None:
        return np.dtype(options.result_type)
    return ops["a"].dtype


def matmul(a, b, c=None, *, distributions, alpha=1, beta=None, epilog=None, epilog_inputs=None, options=None,
           algorithm=None, overlap=True, context=None, stream=None):
    """``epilog(alpha * A @ B + beta * C)`` of distributed matrices; returns this rank's part of D, or ``(part,
    aux)`` when the epilog has outputs. See :class:`Matmul` for the parameters."""
    with Matmul(a, b, c, distributions=distributions, alpha=alpha, beta=beta, options=options, algorithm=algorithm,
                overlap=overlap, context=context) as mm:
        mm.plan(epilog=epilog, epilog_inputs=epilog_inputs, stream=stream)
        return mm.execute(stream=stream)
