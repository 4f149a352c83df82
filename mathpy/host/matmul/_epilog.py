"""Matmul epilogs: cuBLASLt's enumeration, what each one takes and gives back, and the exact formats of both.

An epilog is applied to ``X = alpha * A @ B + beta * C`` (computed in the compute/scale type) before ``D`` is stored:

================  ==========================================  ================  ===========================
epilog            D                                           inputs            outputs
================  ==========================================  ================  ===========================
RELU              relu(X)                                     -                 -
BIAS              X + bias                                    bias              -
RELU_BIAS         relu(X + bias)                              bias              -
GELU              gelu(X)                                     -                 -
GELU_BIAS         gelu(X + bias)                              bias              -
RELU_AUX          relu(X)                                     -                 relu_aux  (bitmask of X > 0)
RELU_AUX_BIAS     relu(X + bias)                              bias              relu_aux  (bitmask of X+bias > 0)
GELU_AUX          gelu(X)                                     -                 gelu_aux  (X)
GELU_AUX_BIAS     gelu(X + bias)                              bias              gelu_aux  (X + bias)
DRELU             X * relu'(aux)   (aux bit set: 1, else 0)   relu_aux          -
DRELU_BGRAD       X * relu'(aux)                              relu_aux          drelu_bgrad (sum of D over N)
DGELU             X * gelu'(aux)                              gelu_aux          -
DGELU_BGRAD       X * gelu'(aux)                              gelu_aux          dgelu_bgrad (sum of D over N)
BGRADA            X                                           -                 bgrada (sum of A over K)
BGRADB            X                                           -                 bgradb (sum of B over K)
================  ==========================================  ================  ===========================

Definitions (cuBLASLt's): ``relu(x) = max(x, 0)``; ``gelu`` is the tanh approximation
``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` and ``gelu'`` its exact derivative.

Accuracy: cuBLASLt 13.1's float64 GELU kernels (GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD)
evaluate the activation to about 5e-9 relative (2.6e-10 absolute), measured on an H200, not to float64's precision;
the CPU engine evaluates the definition in float64.

Not supported (a ValueError before any work, on every execution space): epilogs on complex operands; DGELU* with
float8 results. Layouts: cuBLASLt has BGRADA kernels only for a column-major A and BGRADB kernels only for
a row-major B; on the GPU the API copies A or B into that layout when needed.

RELU bitmask padding: cuBLASLt never writes the padding bits (nor the bits past M in the last byte of a column); the
GPU path allocates the bitmask zeroed, so padding bits are zero on every execution space.

Formats (shapes are for a result of shape ``(*batch, M, N)``; a non-batched product has ``batch == ()``):

- ``bias``: one value per row of the result: shape ``(M,)`` or ``(M, 1)`` (broadcast over the batch) or
  ``(*batch, M, 1)``; unit stride along M; dtype: the result's dtype (for float8 results: bfloat16 or float16).
- ``relu_aux`` (output of RELU_AUX*, input of DRELU*): a bitmask, uint8, shape ``(*batch, relu_aux_rows(M), N)``,
  column-major in the last two axes (strides ``(..., 1, relu_aux_rows(M))``), batches contiguous. Bit ``i`` of
  column ``j`` is bit ``i % 8`` (least significant first) of byte ``[i // 8, j]``; rows padded to a multiple of
  128 bits (``relu_aux_rows(M) = round_up(ceil(M / 8), 16)`` bytes). cuBLASLt's leading dimension is in bits:
  ``8 * relu_aux_rows(M)``. Padding bits are zero.
- ``gelu_aux`` (output of GELU_AUX*, input of DGELU*): the pre-activation values X, dtype of the result; for a
  float8 result C's (float16 without C), or as ``MatmulPlanPreferences.aux_type`` asks (float8_e4m3fn: stored as
  ``aux_scale * X``, saturated; ``gelu_aux_amax``, float32 of shape (1,), is max |X|), shape
  ``(*batch, gelu_aux_rows(M), N)`` with ``gelu_aux_rows(M) = round_up(M, 8)``, column-major in the last two axes,
  batches contiguous. Padding rows are unspecified.
- ``drelu_bgrad`` / ``dgelu_bgrad`` / ``bgrada``: length M; ``bgradb``: length N. Shape ``(L,)`` when not batched,
  ``(*batch, L, 1)`` when batched; dtype of the result.

>>> MatmulEpilog.RELU_BIAS.value, epilog_spec("gelu_aux_bias").outputs, MatmulEpilog is lt.MatmulEpilog
(6, ('gelu_aux',), True)
>>> relu_aux_rows(5), gelu_aux_rows(5)
(16, 8)
"""

import dataclasses
import math

import numpy as np

from ...bindings import cublaslt as lt

__all__ = ["MatmulEpilog", "EpilogSpec", "epilog_spec", "relu_aux_rows", "gelu_aux_rows", "gelu", "gelu_grad",
           "pack_bits", "unpack_bits", "EPILOG_INPUT_NAMES", "EPILOG_OUTPUT_NAMES", "as_epilog"]


# The binding's enum itself: the API passes its values to cuBLASLt unchanged, and the CPU engine implements them.
MatmulEpilog = lt.MatmulEpilog


@dataclasses.dataclass(frozen=True)
class EpilogSpec:
    """What one epilog does. ``activation``: None, "relu", "gelu", "drelu", "dgelu". ``bgrad``: None, "d" (sum of D
    over N), "a" (sum of A over K), "b" (sum of B over K)."""

    epilog: MatmulEpilog
    inputs: tuple  # names of required epilog inputs
    outputs: tuple  # names of the outputs returned in the aux dict
    activation: str | None
    bias: bool
    aux_out: str | None  # "relu_aux" / "gelu_aux" output
    bgrad: str | None

    @property
    def name(self):
        return self.epilog.name


def _spec(e, inputs=(), outputs=(), activation=None, bias=False, aux_out=None, bgrad=None):
    return EpilogSpec(e, tuple(inputs), tuple(outputs), activation, bias, aux_out, bgrad)


E = MatmulEpilog
_SPECS = {
    E.DEFAULT: _spec(E.DEFAULT),
    E.RELU: _spec(E.RELU, activation="relu"),
    E.BIAS: _spec(E.BIAS, ["bias"], bias=True),
    E.RELU_BIAS: _spec(E.RELU_BIAS, ["bias"], activation="relu", bias=True),
    E.GELU: _spec(E.GELU, activation="gelu"),
    E.GELU_BIAS: _spec(E.GELU_BIAS, ["bias"], activation="gelu", bias=True),
    E.RELU_AUX: _spec(E.RELU_AUX, [], ["relu_aux"], "relu", aux_out="relu_aux"),
    E.RELU_AUX_BIAS: _spec(E.RELU_AUX_BIAS, ["bias"], ["relu_aux"], "relu", True, aux_out="relu_aux"),
    E.GELU_AUX: _spec(E.GELU_AUX, [], ["gelu_aux"], "gelu", aux_out="gelu_aux"),
    E.GELU_AUX_BIAS: _spec(E.GELU_AUX_BIAS, ["bias"], ["gelu_aux"], "gelu", True, aux_out="gelu_aux"),
    E.DRELU: _spec(E.DRELU, ["relu_aux"], [], "drelu"),
    E.DRELU_BGRAD: _spec(E.DRELU_BGRAD, ["relu_aux"], ["drelu_bgrad"], "drelu", bgrad="d"),
    E.DGELU: _spec(E.DGELU, ["gelu_aux"], [], "dgelu"),
    E.DGELU_BGRAD: _spec(E.DGELU_BGRAD, ["gelu_aux"], ["dgelu_bgrad"], "dgelu", bgrad="d"),
    E.BGRADA: _spec(E.BGRADA, [], ["bgrada"], bgrad="a"),
    E.BGRADB: _spec(E.BGRADB, [], ["bgradb"], bgrad="b"),
}
del E

_VALUES = frozenset(e.value for e in MatmulEpilog)
# by name, in a plain dict: torch.compile (dynamo in torch 2.11) cannot trace ``in MatmulEpilog.__members__``
_NAMES = {e.name: e for e in MatmulEpilog}
EPILOG_INPUT_NAMES = ("bias", "relu_aux", "gelu_aux")
EPILOG_OUTPUT_NAMES = ("relu_aux", "gelu_aux", "drelu_bgrad", "dgelu_bgrad", "bgrada", "bgradb")


def as_epilog(value):
    """``value`` (None, a MatmulEpilog, its name in any case, or its int value) as a MatmulEpilog, or None for none.
    DEFAULT is returned as None: it means no epilog."""
    if value is None:
        return None
    if isinstance(value, MatmulEpilog):
        epilog = value
    elif isinstance(value, str) and value.upper() in _NAMES:
        epilog = _NAMES[value.upper()]
    elif isinstance(value, int) and not isinstance(value, bool) and value in _VALUES:
        epilog = MatmulEpilog(value)
    else:
        raise ValueError(f"epilog {value!r} is not supported; allowed are None or one of "
                         f"{[e.name for e in MatmulEpilog]}")
    return None if epilog is MatmulEpilog.DEFAULT else epilog


def epilog_spec(value):
    """The :class:`EpilogSpec` of an epilog (given as accepted by :func:`as_epilog`; None means DEFAULT)."""
    epilog = as_epilog(value)
    return _SPECS[MatmulEpilog.DEFAULT if epilog is None else epilog]


def relu_aux_rows(m):
    """Bytes per column of the RELU bitmask: ceil(m / 8) rounded up to 16 bytes (128 bits)."""
    return _round_up(math.ceil(m / 8), 16)


def gelu_aux_rows(m):
    """Rows of the GELU aux matrix: m rounded up to a multiple of 8."""
    return _round_up(m, 8)


def _round_up(value, base):
    return -(-value // base) * base


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def gelu(x):
    """cuBLASLt's GELU (tanh approximation), elementwise, in x's floating dtype."""
    x = np.asarray(x)
    dtype = x.dtype.type
    inner = dtype(_SQRT_2_OVER_PI) * (x + dtype(_GELU_C) * x * x * x)
    return dtype(0.5) * x * (dtype(1) + np.tanh(inner))


def gelu_grad(x):
    """d gelu / dx of the tanh approximation, elementwise."""
    x = np.asarray(x)
    dtype = x.dtype.type
    inner = dtype(_SQRT_2_OVER_PI) * (x + dtype(_GELU_C) * x * x * x)
    t = np.tanh(inner)
    d_inner = dtype(_SQRT_2_OVER_PI) * (dtype(1) + dtype(3 * _GELU_C) * x * x)
    return dtype(0.5) * (dtype(1) + t) + dtype(0.5) * x * (dtype(1) - t * t) * d_inner


def pack_bits(mask, rows):
    """Pack a boolean array ``(..., M, N)`` into the RELU bitmask format: uint8 ``(..., rows, N)``, column-major in
    the last two axes, least significant bit first, padding bits zero."""
    mask = np.asarray(mask, dtype=bool)
    *batch, m, n = mask.shape
    padded = np.zeros((*batch, n, rows * 8), dtype=bool)
    padded[..., :m] = np.swapaxes(mask, -1, -2)
    packed = np.packbits(padded, axis=-1, bitorder="little")  # (..., N, rows), C-contiguous
    return np.swapaxes(packed, -1, -2)


def unpack_bits(bits, m):
    """The boolean ``(..., M, N)`` mask held in a RELU bitmask ``(..., rows, N)`` (inverse of :func:`pack_bits`)."""
    bits = np.asarray(bits)
    unpacked = np.unpackbits(np.swapaxes(bits, -1, -2), axis=-1, bitorder="little")  # (..., N, rows * 8)
    return np.swapaxes(unpacked[..., :m], -1, -2).astype(bool)
