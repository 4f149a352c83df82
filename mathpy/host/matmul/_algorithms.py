"""cuBLASLt's candidate algorithms as the matmul engine keeps them, and the rules that reorder them.

:class:`CublasLtAlgorithm` is one heuristic answer, which users can inspect and reconfigure for manual tuning;
:class:`Candidates` is the engine's list (changing it switches the engine to its first entry).

**Skinny problems.** cuBLASLt's first heuristic answer is often not the fastest when M or N is small or K is small
(measured: 64 x 8192 x 8192 bf16 runs 1.7x slower with it than torch's choice). For such problems
(:func:`needs_autotune`) the engine autotunes by itself on the first execute, on that call's operands: it times a
wider pool of heuristic candidates (the fastest kernel for a skinny product is often further down the list), puts the
winner first and keeps it; the plan's ``algorithms`` stay at most ``limit`` long. The stateless ``mathpy.matmul``
pays this (a few ms) once per cached plan. The engine's ``autotune_first_execute=False`` keeps the heuristic's order.

**Tiny products** (at most :data:`HOST_BOUND_FLOPS`) are bound by the host's cost per call:
:func:`single_kernel_first` moves the first candidate that runs as one kernel (no split-K) to the front.

When cuBLASLt has no algorithm at all, :func:`no_algorithm_message` says what the product was and what to change.
"""

import contextlib

from ... import _cuda
from ..._log import logger
from ...bindings import cublaslt as lt
from ...bindings._cublaslt_tables import CLUSTER_SHAPE_IDS, CLUSTER_SHAPES, STAGE_IDS, STAGES, TILE_IDS, TILES
from ._epilog import MatmulEpilog
from ._orient import Operation

__all__ = ["CublasLtAlgorithm", "Candidates", "needs_autotune", "single_kernel_first", "HOST_BOUND_FLOPS", "using",
           "adopt", "release_workspace", "no_algorithm_message"]


def needs_autotune(m, n, k, batch, candidates):
    """Whether cuBLASLt's first heuristic answer is worth checking by timing: a skinny product (M or N at most 256,
    or K at most 512) big enough (>= 2 GFLOP) for the kernel choice to matter, with several candidates."""
    flops = 2.0 * m * n * k * batch
    return candidates > 1 and flops >= 2e9 and (min(m, n) <= 256 or k <= 512)


#: Products this small are bound by the host's cost per call: the engine prefers a candidate that runs as one kernel
#: (no split-K reduction kernel or output clearing, each a second launch).
HOST_BOUND_FLOPS = 2.0 ** 26


def single_kernel_first(candidates):
    """``candidates`` with the first one that does not split K moved to the front (unchanged when the configuration
    cannot be read or none qualifies)."""
    try:
        for i, alg in enumerate(candidates):
            if int(alg.config.get("splitk_num", 1)) <= 1:
                return [alg] + candidates[:i] + candidates[i + 1:]
    except Exception as e:  # a cuBLASLt that describes algorithms differently: keep the heuristic's order
        logger.debug("cuBLASLt: algorithm configuration unreadable (%s)", e)
    return candidates


class CublasLtAlgorithm:
    """One candidate: cuBLASLt's opaque algorithm plus what the heuristic (or ``cublasLtMatmulAlgoCheck``) said of it.

    For manual tuning: :attr:`capabilities` says what the algorithm supports (tile and stage IDs, split-K,
    swizzling, ...); :attr:`algorithm_id`, :attr:`tile`, :attr:`stages`, :attr:`split_k`,
    :attr:`reduction_scheme`, :attr:`cta_swizzling`, :attr:`custom_option`, :attr:`inner_shape` and
    :attr:`cluster_shape` read its configuration (tiles, stages and cluster shapes as tuples such as ``(128, 64)``,
    from :mod:`mathpy.bindings._cublaslt_tables`); :meth:`configured` returns a copy with some of them changed, which
    ``Matmul.plan(algorithms=[...])`` checks with cuBLASLt and uses. Algorithms are values: equal when their bytes
    are equal."""

    __slots__ = ("algo", "workspace_bytes", "waves_count", "rank", "_config", "_capabilities")

    def __init__(self, result, rank):
        self.algo = lt.MatmulAlgo.from_buffer_copy(result.algo)
        self.workspace_bytes = int(result.workspaceSize)
        self.waves_count = float(result.wavesCount)
        self.rank = rank  # position in the heuristic's answer (0 = its first choice; None: configured by hand)
        self._config = self._capabilities = None

    @property
    def config(self):
        """``{"id", "tile_id", "splitk_num", ...}``: the algorithm's configuration as cuBLASLt reports it."""
        if self._config is None:
            self._config = lt.algo_config(self.algo)
        return self._config

    @property
    def capabilities(self):
        """``{"splitk_support", "tile_ids", "stages_ids", "cta_swizzling_support", "custom_option_max", ...}``: what
        cuBLASLt says the algorithm supports (:class:`mathpy.bindings.cublaslt.AlgoCap` names in lower case; the
        ID lists as tuples of IDs, :attr:`tiles` and :attr:`stage_options` as shapes)."""
        if self._capabilities is None:
            self._capabilities = lt.algo_capabilities(self.algo)
        return self._capabilities

    tiles = property(lambda self: tuple(TILES.get(i, i) for i in self.capabilities.get("tile_ids", ())),
                     doc="The tile shapes the algorithm supports.")
    stage_options = property(lambda self: tuple(STAGES.get(i, i) for i in self.capabilities.get("stages_ids", ())),
                             doc="The stage configurations the algorithm supports.")
    algorithm_id = property(lambda self: self.config.get("id"), doc="cuBLASLt's algorithm ID.")
    tile = property(lambda self: TILES.get(self.config.get("tile_id"), self.config.get("tile_id")),
                    doc="The tile shape, e.g. (128, 256), or 'UNDEFINED'.")
    stages = property(lambda self: STAGES.get(self.config.get("stages_id"), self.config.get("stages_id")),
                      doc="The stage configuration, e.g. (64, 3) or (128, 'AUTO').")
    split_k = property(lambda self: self.config.get("splitk_num"), doc="Split-K count (1: no split).")
    reduction_scheme = property(lambda self: self.config.get("reduction_scheme"), doc="Split-K reduction scheme.")
    cta_swizzling = property(lambda self: self.config.get("cta_swizzling"), doc="CTA swizzling (0 / 1).")
    custom_option = property(lambda self: self.config.get("custom_option"), doc="The custom option.")
    inner_shape = property(lambda self: self.config.get("inner_shape_id"), doc="The inner shape ID.")
    cluster_shape = property(lambda self: CLUSTER_SHAPES.get(self.config.get("cluster_shape_id"),
                                                             self.config.get("cluster_shape_id")),
                             doc="The thread-block cluster shape, e.g. (2, 1, 1), or 'AUTO'.")

    def configured(self, *, tile=None, stages=None, split_k=None, reduction_scheme=None, cta_swizzling=None,
                   custom_option=None, inner_shape=None, cluster_shape=None):
        """A copy with the given configuration changed (shapes as tuples, as the properties give them; unknown ones
        are a ValueError naming the known). Its workspace size is unknown until a plan checks it
        (``Matmul.plan(algorithms=[...])``)."""
        changes = {lt.AlgoConfig.TILE_ID: _lookup(tile, TILE_IDS, "tile"),
                   lt.AlgoConfig.STAGES_ID: _lookup(stages, STAGE_IDS, "stages"),
                   lt.AlgoConfig.SPLITK_NUM: split_k, lt.AlgoConfig.REDUCTION_SCHEME: reduction_scheme,
                   lt.AlgoConfig.CTA_SWIZZLING: None if cta_swizzling is None else int(cta_swizzling),
                   lt.AlgoConfig.CUSTOM_OPTION: custom_option, lt.AlgoConfig.INNER_SHAPE_ID: inner_shape,
                   lt.AlgoConfig.CLUSTER_SHAPE_ID: _lookup(cluster_shape, CLUSTER_SHAPE_IDS, "cluster_shape")}
        copy = object.__new__(CublasLtAlgorithm)
        copy.algo = lt.MatmulAlgo.from_buffer_copy(self.algo)
        copy.workspace_bytes, copy.waves_count, copy.rank = self.workspace_bytes, self.waves_count, None
        copy._config = copy._capabilities = None
        for attribute, value in changes.items():
            if value is not None:
                lt.set_algo_config(copy.algo, attribute, value)
        return copy

    def __eq__(self, other):
        return isinstance(other, CublasLtAlgorithm) and bytes(self.algo) == bytes(other.algo)

    def __hash__(self):
        return hash(bytes(self.algo))

    def __repr__(self):
        try:
            config = self.config
        except Exception:
            config = {}
        described = ", ".join(f"{key}={value}" for key, value in config.items() if key in ("id", "tile_id",
                                                                                            "splitk_num", "stages_id"))
        return (f"CublasLtAlgorithm(rank={self.rank}, {described}{', ' if described else ''}"
                f"workspace={self.workspace_bytes}, waves={self.waves_count:.2f})")


def _lookup(value, table, what):
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    key = tuple(value) if isinstance(value, list) else value
    if key not in table:
        raise ValueError(f"{what} {value!r} is not one of cuBLASLt's; known are e.g. {list(table)[:8]} "
                         f"(see the algorithm's capabilities)")
    return table[key]


class Candidates(list):
    """The engine's candidate list; changing it (``algorithms[:] = chosen``) switches the engine to ``[0]``."""

    def __init__(self, items, on_change):
        super().__init__(items)
        self._on_change = on_change

    def _changed(self):
        if self:
            self._on_change(self[0])

    def __setitem__(self, index, value):
        super().__setitem__(index, value)
        self._changed()

    def __delitem__(self, index):
        super().__delitem__(index)
        self._changed()

    def __iadd__(self, other):
        result = super().__iadd__(other)
        self._changed()
        return result

    def append(self, value):
        super().append(value)
        self._changed()

    def extend(self, values):
        super().extend(values)
        self._changed()

    def insert(self, index, value):
        super().insert(index, value)
        self._changed()

    def pop(self, index=-1):
        value = super().pop(index)
        self._changed()
        return value

    def remove(self, value):
        super().remove(value)
        self._changed()

    def sort(self, **kwargs):
        super().sort(**kwargs)
        self._changed()

    def reverse(self):
        super().reverse()
        self._changed()


# The optional parts of the engine protocol, for any engine (the CPU's and the fused ones have one way of running).

def using(engine, algorithm):
    """The engine's context for executes with ``algorithm`` (one of its candidates)."""
    if algorithm is None:
        return contextlib.nullcontext()
    using = getattr(engine, "using", None)
    if using is not None:
        return using(algorithm)
    if algorithm not in engine.algorithms:
        raise ValueError(f"the algorithm {algorithm!r} is not one of this plan's candidates "
                         f"{list(engine.algorithms)!r}")
    return contextlib.nullcontext()


def adopt(engine, algorithms):
    """``algorithms`` as the engine's candidates (an engine that cannot check new ones keeps its own)."""
    adopt = getattr(engine, "adopt", None)
    return adopt(algorithms) if adopt is not None else [alg for alg in algorithms if alg in engine.algorithms]


def release_workspace(engine):
    """Have the engine give its workspace back (engines without one have nothing to do)."""
    release = getattr(engine, "release_workspace", None)
    if release is not None:
        release()


def no_algorithm_message(p, device_id, op_a, op_b, float8):
    """Why cuBLASLt found no algorithm for MatmulProblem ``p`` on ``device_id`` with these operations, and what to
    change."""
    what = (f"cuBLASLt {lt.version()} has no algorithm for this product: {p.m} x {p.n} x {p.k}, batch {p.batch}, "
            f"{p.a.dtype.name} @ {p.b.dtype.name} -> {p.d.dtype.name}, compute {p.compute_type}, "
            f"op(A)={op_a.name}, op(B)={op_b.name}, epilog {None if p.epilog is None else p.epilog.name}, "
            f"device {device_id} (cc {'.'.join(map(str, _cuda.compute_capability(device_id)))})")
    if p.epilog is MatmulEpilog.BGRADA and op_a is not Operation.N:
        what += ". BGRADA needs op(A) = N: a column-major A (the matmul API copies A so)"
    if p.epilog is MatmulEpilog.BGRADB and op_b is not Operation.T:
        what += ". BGRADB needs op(B) = T: a row-major B (the matmul API copies B so)"
    if float8 and (op_a, op_b) != (Operation.T, Operation.N):
        what += (". float8 needs A row-major and B column-major (cuBLASLt's 'TN' form: pass b as a transposed "
                 "row-major array, e.g. b = bt.T)")
    what += ". int8: M, K, leading dimensions multiple of 4, or execution='cpu'" if p.compute_type == "32I" else ""
    return what
