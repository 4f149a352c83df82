"""nvmath's ``Algorithm``: one planned candidate of a matrix product, over mathpy's algorithm object."""

__all__ = ["Algorithm"]


class Algorithm:
    """A candidate algorithm returned by ``Matmul.plan()`` / ``Matmul.algorithms`` (not constructed by users).

    ``algorithm_id``, ``tile``, ``stages``, ``split_k``, ``reduction_scheme``, ``cta_swizzling`` and
    ``custom_option`` read the configuration cuBLASLt reports (CPU plans have one algorithm, NumPy's BLAS, whose
    configuration is empty: the fields are None)."""

    __slots__ = ("native",)

    def __init__(self, native):
        self.native = native  # mathpy's algorithm object (what mathpy.Matmul.plan returns)

    def _config(self, key):
        config = getattr(self.native, "config", None)
        return None if config is None else config.get(key)

    algorithm_id = property(lambda self: self._config("id"))
    tile = property(lambda self: self._config("tile_id"))
    stages = property(lambda self: self._config("stages_id"))
    split_k = property(lambda self: self._config("splitk_num"))
    reduction_scheme = property(lambda self: self._config("reduction_scheme"))
    cta_swizzling = property(lambda self: self._config("cta_swizzling"))
    custom_option = property(lambda self: self._config("custom_option"))

    @property
    def capabilities(self):
        raise NotImplementedError("Algorithm.capabilities: mathpy does not query cuBLASLt's algorithm capabilities "
                                  "yet")

    def __eq__(self, other):
        return isinstance(other, Algorithm) and self.native == other.native

    def __hash__(self):
        return hash(self.native)

    def __repr__(self):
        return f"Algorithm({self.native!r})"
