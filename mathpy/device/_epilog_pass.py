"""The elementwise pass of a Python matmul epilog: ``D[b, i, j] = epilog(D[b, i, j], b, i, j, *operands)`` in place,
one read and one write of D, for a D that cuBLASLt computed (the route where mathpy's own GEMM would be slower:
float32, float64 and complex64, shapes off the tile grid, small products, GPUs without wgmma).

Generated as Python source for numba-cuda and compiled once per result dtype, without the user's function: it calls
the external epilog function of :mod:`._gemm_kernel`'s convention, linked in by nvJitLink (:mod:`mathpy.jit._link`).

Work split: a block of :data:`THREADS` threads covers ``THREADS >> row_shift`` rows of D and ``(1 << row_shift) *
V`` consecutive columns of each, where ``V`` is the elements per 16 bytes (8 for 16-bit results, 4 for float32, 2
for float64 and complex64). ``row_shift`` is chosen per launch so that narrow results (N smaller than a block's
columns) still keep every thread busy: ``1 << row_shift`` is the smallest power of two of threads that covers N.
Where a row is 16-byte aligned, each thread reads and writes its ``V`` elements as one 16-byte access (the row's last
thread element by element when the row ends inside its vector); in a row that is not, the row's threads take one
element each, ``1 << row_shift`` columns apart, so the warp's accesses stay coalesced. Rows and batches beyond the
grid (65535 blocks per axis) are walked by grid-stride loops.
"""

import dataclasses

import numpy as np

from ._gemm_kernel import COMPUTE_OF, operand_params

__all__ = ["PassConfig", "pass_source", "pass_namespace", "PASS_PARAMS", "THREADS", "MIN_BLOCKS", "launch_shape",
           "PASS_KINDS"]

PASS_PARAMS = ("d_ptr", "m", "n", "ldd", "d_batch", "batches", "row_shift")
THREADS = 256
#: Blocks per SM the register allocation must allow (launch bounds): at most 64 registers per thread, 32 warps per SM
#: to keep enough loads in flight for a memory-bound pass (unbounded, ptxas gave a bf16 gated-SiLU pass 164 registers:
#: one block, 8 warps per SM).
MIN_BLOCKS = 4
#: Result dtypes the pass stores, and their bytes per element.
PASS_KINDS = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "complex64": 8}
_MAX_GRID_YZ = 65535


@dataclasses.dataclass(frozen=True)
class PassConfig:
    """One elementwise pass: ``out`` the dtype of D (:data:`PASS_KINDS`), for an epilog of ``operands`` operands
    (``checked``: the epilog function also gets their shapes, check_bounds)."""

    out: str
    operands: int = 0
    checked: bool = False
    threads = THREADS

    def __post_init__(self):
        if self.out not in PASS_KINDS:
            raise ValueError(f"the elementwise epilog pass stores {sorted(PASS_KINDS)}, not {self.out}")

    @property
    def vector(self):
        """Elements per 16-byte access."""
        return 16 // PASS_KINDS[self.out]


def launch_shape(m, n, batches, vector):
    """``(grid, row_shift)`` of a pass over a ``batches x m x n`` D."""
    per_row = -(-n // vector)  # threads a row needs
    shift = min(max(per_row - 1, 0).bit_length(), THREADS.bit_length() - 1)
    columns = (1 << shift) * vector
    rows_per_block = THREADS >> shift
    grid = (-(-n // columns), min(-(-m // rows_per_block), _MAX_GRID_YZ), min(batches, _MAX_GRID_YZ))
    return grid, shift


def pass_source(config):
    """Python source of ``kernel(*PASS_PARAMS, *operand_params)`` (see the module docstring)."""
    V = config.vector
    ops = "".join(f", {p}" for p in operand_params(config.operands, config.checked))

    def call(value, col):
        return f"EPI({value}, b, row, {col}{ops})"

    L = [f"def kernel({', '.join(PASS_PARAMS)}{ops}):",
         "    t = cuda.threadIdx.x",
         "    lane = t & ((1 << row_shift) - 1)",
         "    width = 1 << row_shift",
         f"    first = cuda.blockIdx.x * width * {V}",
         f"    c0 = first + lane * {V}",
         f"    rows_per_block = {config.threads} >> row_shift",
         "    for b in range(cuda.blockIdx.z, batches, cuda.gridDim.z):",
         "        for row0 in range(cuda.blockIdx.y * rows_per_block, m, cuda.gridDim.y * rows_per_block):",
         "            row = row0 + (t >> row_shift)",
         "            if row < m:",
         "                base = d_ptr + U64((b * d_batch + row * ldd) * DSIZE)",
         "                if ALIGNED16(base):",
         f"                    if c0 + {V} <= n:",
         "                        x = LOADV(base, c0)"]
    L += [f"                        y{q} = {call(f'x[{q}]', f'c0 + {q}')}" for q in range(V)]
    L += [f"                        STOREV(base, c0, {', '.join(f'y{q}' for q in range(V))})",
          "                    else:",
          f"                        for q in range({V}):",
          "                            col = c0 + q",
          "                            if col < n:",
          f"                                STORE1(base, col, {call('LOAD1(base, col)', 'col')})",
          "                else:",
          f"                    for q in range({V}):",
          "                        col = first + lane + q * width",
          "                        if col < n:",
          f"                            STORE1(base, col, {call('LOAD1(base, col)', 'col')})"]
    return "\n".join(L) + "\n"


def pass_namespace(config):
    """The names the pass's source uses, for the GPU build."""
    from numba import cuda

    from . import _pass_access as A
    from ._gemm_kernel import epilog_declaration

    V = config.vector
    return {"cuda": cuda, "U64": np.uint64, "INT64": np.int64, "DSIZE": PASS_KINDS[config.out],
            "ALIGNED16": A.aligned16, "LOADV": A.load_vector(config.out, V), "STOREV": A.store_vector(config.out, V),
            "LOAD1": A.load_one(config.out), "STORE1": A.store_one(config.out),
            "EPI": epilog_declaration(COMPUTE_OF[config.out], config.operands, checked=config.checked)}
