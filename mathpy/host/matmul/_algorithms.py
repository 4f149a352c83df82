"""cuBLASLt's candidate algorithms as the matmul engine keeps them, and the rules that reorder them.

:class:`CublasLtAlgorithm` is one heuristic answer; :class:`Candidates` is the engine's list (changing it switches the
engine to its first entry).

**Skinny problems.** cuBLASLt's first heuristic answer is often not the fastest when M or N is small or K is small
(measured: 64 x 8192 x 8192 bf16 runs 1.7x slower with it than torch's choice). For such problems
(:func:`needs_autotune`) the engine autotunes by itself on the first execute, on that call's operands: it times a
wider pool of heuristic candidates (the fastest kernel for a skinny product is often further down the list), puts the
winner first and keeps it; the plan's ``algorithms`` stay at most ``limit`` long. The stateless ``mathpy.matmul``
pays this (a few ms) once per cached plan. The engine's ``autotune_first_execute=False`` keeps the heuristic's order.

**Tiny products** (at most :data:`HOST_BOUND_FLOPS`) are bound by the host's cost per call:
:func:`single_kernel_first` moves the first candidate that runs as one kernel (no split-K) to the front.
"""

from ..._log import logger
from ...bindings import cublaslt as lt

__all__ = ["CublasLtAlgorithm", "Candidates", "needs_autotune", "single_kernel_first", "HOST_BOUND_FLOPS"]


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
    """One heuristic candidate: cuBLASLt's opaque algorithm plus what the heuristic said of it."""

    __slots__ = ("algo", "workspace_bytes", "waves_count", "rank", "_config")

    def __init__(self, result, rank):
        self.algo = lt.MatmulAlgo.from_buffer_copy(result.algo)
        self.workspace_bytes = int(result.workspaceSize)
        self.waves_count = float(result.wavesCount)
        self.rank = rank  # position in the heuristic's answer (0 = its first choice)
        self._config = None

    @property
    def config(self):
        """``{"id", "tile_id", "splitk_num", ...}``: the algorithm's configuration as cuBLASLt reports it."""
        if self._config is None:
            self._config = lt.algo_config(self.algo)
        return self._config

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
