"""nvmath's ``Algorithm``: one planned candidate of a matrix product, over mathpy's algorithm object
(:class:`mathpy.host.matmul._algorithms.CublasLtAlgorithm` on the GPU, the CPU engine's single algorithm)."""

import dataclasses

import numpy as np

from .....bindings import cublaslt as _lt

__all__ = ["Algorithm", "AlgorithmCapabilities"]


@dataclasses.dataclass(frozen=True)
class AlgorithmCapabilities:
    """What an algorithm supports, as cuBLASLt reports it (fields: the ``CUBLASLT_ALGO_CAP_*`` names in lower case;
    None where this cuBLASLt does not report one)."""

    splitk_support: int | None = None
    reduction_scheme_mask: int | None = None
    cta_swizzling_support: int | None = None
    strided_batch_support: int | None = None
    out_of_place_result_support: int | None = None
    uplo_support: int | None = None
    tile_ids: tuple | None = None
    custom_option_max: int | None = None
    custom_memory_order: int | None = None
    pointer_mode_mask: int | None = None
    epilogue_mask: int | None = None
    stages_ids: tuple | None = None
    ld_negative: int | None = None
    numerical_impl_flags: int | None = None
    min_alignment_a_bytes: int | None = None
    min_alignment_b_bytes: int | None = None
    min_alignment_c_bytes: int | None = None
    min_alignment_d_bytes: int | None = None
    pointer_array_batch_support: int | None = None
    floating_point_emulation_support: int | None = None
    pointer_array_grouped_support: int | None = None


_FIELDS = {f.name for f in dataclasses.fields(AlgorithmCapabilities)}


def _setting(name):
    """A property that reads the native algorithm's configuration and, set, replaces it by a reconfigured copy."""
    def get(self):
        return getattr(self.native, name, None)

    def set_(self, value):
        self.native = self.native.configured(**{name: value})
    return property(get, set_)


class Algorithm:
    """A candidate returned by ``Matmul.plan()`` / ``Matmul.algorithms`` (not constructed by users): its
    capabilities and configuration (``tile``, ``stages``, ``split_k``, ... settable for manual tuning: a set value
    takes effect when the algorithm is given to ``Matmul.plan(algorithms=[...])``, which has cuBLASLt check it)."""

    def __init__(self, native):
        self.native = native  # mathpy's algorithm object (what mathpy.Matmul.plan returns)

    @property
    def capabilities(self):
        found = getattr(self.native, "capabilities", {}) or {}
        return AlgorithmCapabilities(**{k: v for k, v in found.items() if k in _FIELDS})

    algorithm_id = property(lambda self: getattr(self.native, "algorithm_id", None))
    tile = _setting("tile")
    stages = _setting("stages")
    split_k = _setting("split_k")
    reduction_scheme = _setting("reduction_scheme")
    cta_swizzling = _setting("cta_swizzling")
    custom_option = _setting("custom_option")
    inner_shape = _setting("inner_shape")
    cluster_shape = _setting("cluster_shape")

    def as_numpy(self):
        """The algorithm as a NumPy array of cuBLASLt's 96-byte heuristic result (save it with ``np.save``)."""
        result = _lt.HeuristicResult()
        result.algo = self.native.algo
        result.workspaceSize, result.wavesCount = self.native.workspace_bytes, self.native.waves_count
        return np.frombuffer(bytes(result), dtype=np.uint8).copy()

    @classmethod
    def from_numpy(cls, array):
        """An Algorithm from :meth:`as_numpy`'s array (give it to ``Matmul.plan(algorithms=[...])``)."""
        from .....host.matmul._algorithms import CublasLtAlgorithm
        data = np.ascontiguousarray(array).view(np.uint8).tobytes()
        return cls(CublasLtAlgorithm(_lt.HeuristicResult.from_buffer_copy(data), None))

    def __eq__(self, other):
        return isinstance(other, Algorithm) and self.native == other.native

    def __hash__(self):
        return hash(self.native)

    def __repr__(self):
        return f"Algorithm({self.native!r})"
