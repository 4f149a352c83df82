"""Which way a matmul with a Python epilog runs on a GPU, decided at plan time (pure Python: tested without a GPU by
passing a compute capability).

Routes:

- ``"library"``: cuBLASLt alone, when the function is one of cuBLASLt's own epilogs
  (:mod:`mathpy.jit._epilog_recognize`): ``act(c * value + bias[col] + r * residual[row, col])`` with ``act`` RELU,
  GELU (tanh form) or none, a bias by column or by row (a bias by row makes the result column-major, as cuBLASLt's
  BIAS epilog needs), a full-size residual taken as cuBLASLt's C. No pass over D beyond the product's own.
- ``"fused"``: mathpy's persistent TMA + wgmma kernel with the epilog applied in registers
  (:mod:`mathpy.device._gemm_hopper`), where it was measured to beat cuBLASLt followed by the epilog.
- ``"elementwise"``: cuBLASLt computes the product into D, then one compiled elementwise pass applies the epilog to D
  in place (:mod:`mathpy.device._epilog_pass`): one read and one write of D, on the call's stream.
- ``"generic"``: the block-GEMM kernel with the epilog (:mod:`mathpy.device._gemm_kernel`), on request only: it is
  correct on any architecture and layout but slower than cuBLASLt's GEMM (0.3-0.7x on the H200).

The rule (``route="auto"``), in this order; each decision is logged with its reason:

1. **library** when the function is recognised and its operands fit cuBLASLt (a bias: 1-D, contiguous, the result's
   dtype, length N for ``bias[col]`` or M for ``bias[row]``; a residual: the result's shape (with or without the batch
   axis matching the batch), dtype and row-major layout; no ``c`` of the caller when there is a residual; a real
   result dtype unless the epilog is only a residual; GELU for 16-bit results only: cuBLASLt's GELU is 1.5e-5 / 5e-9
   off in float32 / float64). cuBLASLt's GEMM is at least as fast as mathpy's, and its epilog costs no extra pass, so
   nothing beats it where it applies.
2. **fused** when all of: compute capability 9.0 (``wgmma``, ``setmaxnreg``: sm_90a only); float16/bfloat16 A and B
   whose layouts a TMA tensor map can describe, a float16/bfloat16/float32 result; whole tiles (``M % 128 == 0``,
   ``N % BN == 0`` with BN 256, or 128 when N <= 128, ``K % 64 == 0``: the kernel's edge tiles run bounds-checked
   code, and the one shape measured off the grid, 5000 x 3000 x 2000 bf16, lost at 0.84x); at least one tile per SM
   (fewer leave SMs idle where cuBLASLt picks smaller tiles); and at least :data:`MIN_FUSED_FLOPS` (2^34, about
   17 GFLOP, 25 us at 700 TFLOP/s). The products measured to win (1.12-1.65x: 4096^3, 8 x 2048^3, 8192^2 x 1024,
   16384^2 x 256) are 137 GFLOP each; under ~17 GFLOP the fused call's host work (encoding and copying its tensor
   maps) is comparable to the GPU time it saves.
3. **elementwise** otherwise: float32, float64 and complex64 (the fused kernel is 16-bit only: float32 on CUDA cores
   ran at 0.14x), shapes off the tile grid, small products, and every architecture other than 9.0 (sm_80, sm_100...).

``MatmulPlanPreferences(epilog_route=...)`` overrides the rule: ``"fused"``, ``"library"`` and ``"generic"`` raise a
ValueError naming what rules them out where they cannot run; ``"elementwise"`` always runs.
"""

import dataclasses

__all__ = ["Route", "LibraryPlan", "choose_route", "library_plan", "ROUTES", "MIN_FUSED_FLOPS", "hopper_possible",
           "tma_ok", "hopper_tile_n"]

from ._options import EPILOG_ROUTES as ROUTES  # noqa: E402 (one list: the preference validates against it)
#: The smallest product (2 M N K x batch) the fused kernel is chosen for.
MIN_FUSED_FLOPS = 2 ** 34
_SIXTEEN = ("float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class LibraryPlan:
    """cuBLASLt's form of a recognised epilog: ``epilog`` (a MatmulEpilog name: DEFAULT, RELU, GELU, BIAS,
    RELU_BIAS, GELU_BIAS), the operand taken as the bias and along which axis it runs, the operand taken as C, and
    the factors of the value (folded into alpha and beta) and of the residual (beta)."""

    epilog: str
    bias: str | None = None
    bias_axis: str | None = None
    residual: str | None = None
    value_scale: float = 1.0
    residual_scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class Route:
    """The route (:data:`ROUTES` but "auto"), why it was chosen, cuBLASLt's form for "library", and the result's
    order ("C" row-major; "F" column-major for a bias by row)."""

    name: str
    reason: str
    library: LibraryPlan | None = None
    order: str = "C"

    def __str__(self):
        return f"route: {self.name} because {self.reason}"


def hopper_tile_n(n):
    """The fused kernel's tile width for N columns."""
    return 128 if n <= 128 else 256


def tma_ok(layout, itemsize):
    """A layout a 2-D / 3-D tensor map can describe: unit stride along one axis, the other strides multiples of
    16 bytes (batch stride 0 = broadcast: a 2-D map)."""
    if layout.row_stride != 1 and layout.col_stride != 1:
        return False
    ld = layout.ld
    if (ld * itemsize) % 16 or ld < 1:
        return False
    return layout.batch_stride == 0 or layout.batch == 1 or (layout.batch_stride * itemsize) % 16 == 0


def hopper_possible(p, cc):
    """None when the fused kernel can run problem ``p`` (layouts of A, B, C; result row-major) on ``cc``, else why
    not."""
    ab, out = p.a.dtype.name, p.d_dtype.name
    if tuple(cc) != (9, 0):
        return f"compute capability {cc[0]}.{cc[1]} has no wgmma (the fused kernel needs 9.0)"
    if ab not in _SIXTEEN:
        return f"the fused kernel multiplies float16/bfloat16 only, not {ab}"
    if out not in (*_SIXTEEN, "float32"):
        return f"the fused kernel stores float16/bfloat16/float32 results, not {out}"
    if not (tma_ok(p.a, p.a.dtype.itemsize) and tma_ok(p.b, p.b.dtype.itemsize)):
        return "A or B has a layout no TMA tensor map describes (a unit stride and 16-byte multiples needed)"
    if p.compute_type != "32F":
        return f"compute type {p.compute_type} (the fused kernel accumulates in float32: 32F)"
    if p.c is not None and p.c.col_stride != 1:
        return "C is not row-major"
    if p.n % 2:
        return f"N = {p.n} is odd (the kernel stores pairs)"
    return None


def _edge_tiles(p):
    """None when the product is whole tiles of the fused kernel, else why not."""
    bn = hopper_tile_n(p.n)
    if p.m % 128 or p.n % bn or p.k % 64:
        return f"{p.m} x {p.n} x {p.k} is not whole 128 x {bn} tiles with K a multiple of 64"
    return None


def _whole_tiles(p, sms):
    """None when the shape is one the fused kernel was measured to win on, else why not."""
    edge = _edge_tiles(p)
    if edge is not None:
        return f"{edge} (edge tiles run bounds-checked code)"
    bn = hopper_tile_n(p.n)
    tiles = (p.m // 128) * (p.n // bn) * p.batch
    if tiles < sms:
        return f"{tiles} tiles leave SMs of the {sms} idle"
    flops = 2 * p.m * p.n * p.k * p.batch
    if flops < MIN_FUSED_FLOPS:
        return f"the product ({flops / 1e9:.1f} GFLOP) is under {MIN_FUSED_FLOPS / 1e9:.0f} GFLOP"
    return None


def library_plan(recognized, operands, p):
    """``(LibraryPlan, result order)`` for a recognised epilog whose operands fit cuBLASLt, else ``(None, why)``.
    ``operands``: name -> DataLayout (None for an operand given as None); ``p``: the product's facts."""
    if recognized is None:
        return None, "the function is not one of cuBLASLt's epilogs"
    out = p.d_dtype
    if out.name not in ("float16", "bfloat16", "float32", "float64", "complex64"):
        return None, f"cuBLASLt's epilogs do not take {out.name}"
    if recognized.activation == "gelu" and out.itemsize > 2:
        # cuBLASLt's GELU is within a unit of a 16-bit result, but 1.5e-5 / 5e-9 off in float32 / float64 (H200,
        # cuBLASLt 13.1): far from the function as written in those precisions, which the pass computes
        return None, f"cuBLASLt's GELU is an approximation coarser than a {out.name} result"
    bias_terms = [t for t in recognized.terms if t[1] in (("col",), ("row",))]
    if out.kind == "c" and (bias_terms or recognized.activation is not None):
        return None, f"cuBLASLt has no bias or activation epilogs for {out.name}"
    bias = residual = None
    axis, residual_scale = None, 1.0
    for name, index, coefficient in recognized.terms:
        layout = operands.get(name)
        if layout is None:
            return None, f"operand {name!r} is not an array"
        if index in (("col",), ("row",)) and bias is None and coefficient == 1.0:
            length = p.n if index == ("col",) else p.m
            if layout.shape != (length,) or layout.dtype != out.name or (length > 1 and layout.strides != (1,)):
                return None, (f"bias {name!r} is not a contiguous {out.name} vector of length {length} (cuBLASLt's "
                              f"bias)")
            bias, axis = name, index[0]
        elif index in (("row", "col"), ("batch", "row", "col")) and residual is None:
            shape = (p.m, p.n) if len(index) == 2 else (p.batch, p.m, p.n)
            if (layout.shape != shape or layout.dtype != out.name or layout.strides[-1] != 1
                    or (p.m > 1 and layout.strides[-2] < p.n) or (len(index) == 2 and p.batch > 1)):
                return None, f"residual {name!r} is not a row-major {out.name} array of shape {shape} (cuBLASLt's C)"
            residual, residual_scale = name, coefficient
        else:
            return None, f"the read of {name!r} at {list(index)} is not a bias or a residual cuBLASLt takes"
    if residual is not None and p.c is not None:
        return None, "the matmul has its own C, and the residual would need that slot"
    if residual is not None and axis == "row":
        return None, "a bias by row needs a column-major result, the residual a row-major one"
    name = {None: "DEFAULT", "relu": "RELU", "gelu": "GELU"}[recognized.activation]
    if bias is not None:
        name = "BIAS" if name == "DEFAULT" else f"{name}_BIAS"
    plan = LibraryPlan(name, bias, axis, residual, recognized.value_scale, residual_scale)
    return plan, "F" if axis == "row" else "C"


def choose_route(p, recognized, operands, cc, sms, requested="auto"):
    """The :class:`Route` of product ``p`` (facts: m, n, k, batch, layouts a, b, c, d_dtype) with an epilog
    ``recognized`` as cuBLASLt's (or None) reading ``operands`` (name -> DataLayout or None), on a GPU of compute
    capability ``cc`` with ``sms`` multiprocessors; ``requested``: one of :data:`ROUTES`."""
    if requested not in ROUTES:
        raise ValueError(f"epilog_route={requested!r} is not a route; allowed: {list(ROUTES)}")
    library, order = library_plan(recognized, operands, p)
    if requested == "library":
        if library is None:
            raise ValueError(f"epilog_route='library' is not possible: {order}")
        return Route("library", f"it was requested; cuBLASLt's {library.epilog} epilog", library, order)
    if requested in ("fused", "generic", "elementwise"):
        if requested == "fused":
            why = hopper_possible(p, cc)
            if why is not None:
                raise ValueError(f"epilog_route='fused' is not possible: {why}")
        if requested == "generic" and p.d_dtype.kind == "c":
            raise ValueError("epilog_route='generic' is not possible: the block GEMM has no complex kernels")
        return Route(requested, "it was requested")
    if library is not None:
        return Route("library", f"the function is cuBLASLt's {library.epilog} epilog (no pass over D beyond the "
                                f"product)", library, order)
    why = hopper_possible(p, cc) or _whole_tiles(p, sms)
    if why is None:
        return Route("fused", f"{p.m} x {p.n} x {p.k} (batch {p.batch}) {p.a.dtype.name} is whole tiles filling "
                              f"the {sms} SMs, where the fused kernel beats cuBLASLt + a pass")
    return Route("elementwise", f"{why}; cuBLASLt's product and one pass over D are faster there")

