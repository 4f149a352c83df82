"""Whole-matrix GEMM kernels with a fused elementwise epilog, generated as Python source for numba-cuda: the pieces
every generator shares (the epilog's calling convention and the operand parameters) and the generic kernel.

``D[b] = epilog(alpha * A[b] @ B[b] + beta * C[b])``. The kernels do not contain the user's function: they call the
external device function :data:`EPILOG_SYMBOL` (C ABI, declared with ``cuda.declare_device``), which
:mod:`mathpy.jit._epilog_wrapper` compiles from the user's function on its own, and nvJitLink links the two LTO-IR
modules into one cubin (the link inlines the call). So a kernel is compiled once per configuration and number of
operands, whatever the epilog, and a new epilog costs a small compile and a link. The convention
(:func:`epilog_signature`)::

    compute EPI(compute value, int64 batch, int64 row, int64 col,
                [uint64 ptr, int64 t0, t1, t2,                # each operand: address and strides in elements,
                 [int64 s0, s1, s2]] * operands,              # and its shape in a checked build (check_bounds)
                [int64 sbase, int64 m0, int64 n0])            # only when operand 0 is staged (Hopper)

Few arguments matter: numba's front end types every call site (the Hopper kernel has 256 of them), and its time
grows with their arguments. So the operands' shapes travel only in *checked* builds (a configuration's ``checked``
field: ``check_bounds``, :mod:`mathpy.jit._bounds`), whose views compare every index with them; an unchecked kernel
neither takes nor passes them.

Generators:

- :func:`mathpy.device._gemm_hopper.hopper_source` (sm_90a, fp16/bf16): the persistent, warp-specialised TMA + wgmma
  kernel (its module says how it works).
- :func:`generic_source` (any cc >= 7.0, fp16/bf16/fp32/fp64, any strides): one block per ``BM x BN`` tile, K in
  slices copied to shared memory with bounds checks, the block GEMM of :mod:`._matmul` (``mma``: tensor cores for
  16-bit types on sm_80+, CUDA cores otherwise) and the same epilog.
- :func:`mathpy.device._epilog_pass.pass_source`: no product, the epilog alone as one pass over a D that cuBLASLt
  computed.

Kernel parameters are scalars only (pointers as uint64), so a launcher can pass them through ``cuLaunchKernel``
without numba's array marshalling; the order is the generator's parameter list followed by :data:`OPERAND_PARAMS` when
the kernel calls an epilog (:func:`operand_params`).
"""

import dataclasses

import numpy as np

__all__ = ["GenericConfig", "generic_source", "GENERIC_PARAMS", "operand_params", "operand_fields", "OPERAND_FIELDS",
           "CHECKED_FIELDS", "MAX_OPERANDS", "EPILOG_SYMBOL", "epilog_signature", "epilog_declaration", "epilog_lines",
           "output_kind", "COMPUTE_OF"]

GENERIC_PARAMS = ("a_ptr", "b_ptr", "d_ptr", "c_ptr", "m", "n", "k", "a_rs", "a_cs", "a_batch", "b_rs", "b_cs",
                  "b_batch", "ldd", "ldc", "c_cs", "d_batch", "c_batch", "alpha", "beta", "tiles_m", "tiles_n")
#: The symbol of the epilog device function the kernels call.
EPILOG_SYMBOL = "mathpy_matmul_epilog"
#: How many operands an epilog may read.
MAX_OPERANDS = 8
#: The scalars of one operand: address and strides in elements (3, unused ones 0).
OPERAND_FIELDS = ("ptr", "t0", "t1", "t2")
#: ... followed, in a checked build, by its shape (3, unused ones 0).
CHECKED_FIELDS = OPERAND_FIELDS + ("s0", "s1", "s2")
#: The compute precision of a result dtype (the type of ``value`` and of what the epilog returns).
COMPUTE_OF = {"bfloat16": "float32", "float16": "float32", "float32": "float32", "float64": "float64",
              "complex64": "complex64"}

_STORE_KINDS = ("bfloat16", "float16", "float32", "float64")


def operand_fields(checked=False):
    """The scalars of one operand: :data:`OPERAND_FIELDS`, or :data:`CHECKED_FIELDS` in a checked build."""
    return CHECKED_FIELDS if checked else OPERAND_FIELDS


def operand_params(count, checked=False):
    """The kernel parameters of ``count`` operands: ``o{i}_ptr, o{i}_t0, o{i}_t1, o{i}_t2`` (then ``o{i}_s0..2``
    when ``checked``)."""
    return [f"o{i}_{field}" for i in range(count) for field in operand_fields(checked)]


def epilog_signature(compute, count, staged=False, checked=False):
    """The numba signature of the epilog device function for ``compute`` ("float32", "float64", "complex64") with
    ``count`` operands (``staged``: operand 0's tile is in shared memory; ``checked``: each operand's shape
    follows its strides)."""
    from numba import types

    value = {"float32": types.float32, "float64": types.float64, "complex64": types.complex64}[compute]
    slots = [types.uint64 if field == "ptr" else types.int64 for _ in range(count) for field in
             operand_fields(checked)]
    return value(value, types.int64, types.int64, types.int64, *slots, *((types.int64,) * (3 if staged else 0)))


def epilog_declaration(compute, count, staged=False, checked=False):
    """``EPI``: the external epilog device function, as a kernel calls it."""
    from numba import cuda

    return cuda.declare_device(EPILOG_SYMBOL, epilog_signature(compute, count, staged, checked), abi="c")


@dataclasses.dataclass(frozen=True)
class GenericConfig:
    """One generic kernel (any architecture the block GEMM supports): ``precision`` of A and B (storage and block
    GEMM), ``out`` the dtype of D and C, tile ``bm x bn`` with k-slices of ``bk``, ``block_size`` threads; ``has_c``,
    ``epilog`` (the kernel calls :data:`EPILOG_SYMBOL`), its ``operands`` and ``checked`` as in
    :class:`~._gemm_hopper.HopperConfig`."""

    precision: str
    out: str
    bm: int = 64
    bn: int = 64
    bk: int = 32
    block_size: int = 256
    has_c: bool = False
    epilog: bool = False
    operands: int = 0
    checked: bool = False


def epilog_lines(indent, value, batch, row, col, config, out_var, staged=None):
    """Lines computing ``out_var``: the epilog applied to ``value`` (alpha/beta applied) at (batch, row, col), integers
    the call converts to int64; ``staged``: the staged tile's "shared address, first row, first column" as the kernel
    names them."""
    pad = " " * indent
    if not config.epilog:
        return [f"{pad}{out_var} = {value}"]
    args = [value, batch, row, col, *operand_params(config.operands, config.checked)] + ([staged] if staged else [])
    return [f"{pad}{out_var} = EPI({', '.join(args)})"]


def generic_source(config, owners, header, acc_size):
    """Python source of ``kernel(*GENERIC_PARAMS[, *OPERAND_PARAMS])`` for :class:`GenericConfig` ``config``; ``owners``
    / ``header``: the block GEMM's (row, column) expressions of each accumulator and the lines defining their names
    (``_matmul.accumulator_owners``)."""
    c = config
    BM, BN, BK = c.bm, c.bn, c.bk
    params = list(GENERIC_PARAMS) + (operand_params(c.operands, c.checked) if c.epilog else [])
    L = [f"def kernel({', '.join(params)}):"]
    L += ["    smem = cuda.shared.array(0, STORAGE)",
          "    smem_a = smem[:A_SIZE]",
          "    smem_b = smem[A_SIZE:A_SIZE + B_SIZE]",
          "    acc = cuda.local.array(ACC_SIZE, COMPUTE)",
          "    bid = cuda.blockIdx.x",
          "    batch = cuda.blockIdx.y",
          "    tm = bid % tiles_m",
          "    tn = bid // tiles_m",
          f"    m0 = tm * {BM}",
          f"    n0 = tn * {BN}",
          "    t = cuda.threadIdx.x",
          "    abase = a_ptr + U64(batch * a_batch * ASIZE)",
          "    bbase = b_ptr + U64(batch * b_batch * ASIZE)",
          "    GEMM.clear(acc)",
          f"    for k0 in range(0, k, {BK}):"]
    L += [f"        for idx in range(t, {BM * BK}, {c.block_size}):",
          f"            i = idx // {BK}",
          f"            p = idx - i * {BK}",
          "            row = m0 + i",
          "            kk = k0 + p",
          "            v = ZERO_S",
          "            if row < m and kk < k:",
          "                v = LOAD_S(abase + U64((row * a_rs + kk * a_cs) * ASIZE))",
          "            smem_a[A_INDEX(i, p)] = v",
          f"        for idx in range(t, {BK * BN}, {c.block_size}):",
          f"            p = idx // {BN}",
          f"            j = idx - p * {BN}",
          "            kk = k0 + p",
          "            col = n0 + j",
          "            v = ZERO_S",
          "            if kk < k and col < n:",
          "                v = LOAD_S(bbase + U64((kk * b_rs + col * b_cs) * ASIZE))",
          "            smem_b[p * LDB + j] = v",
          "        cuda.syncthreads()",
          "        GEMM.mma(smem_a, smem_b, acc)",
          "        cuda.syncthreads()"]
    L += ["    al = COMPUTE(alpha)", "    be = COMPUTE(beta)"]
    L += header
    L.append("    dbase = d_ptr + U64(batch * d_batch * DSIZE)")
    if c.has_c:
        L.append("    cbase = c_ptr + U64(batch * c_batch * DSIZE)")
    for e, (r, col) in enumerate(owners):
        L.append(f"    row = m0 + {r}")
        L.append(f"    col = n0 + {col}")
        L.append("    if row < m and col < n:")
        L.append(f"        v = al * acc[{e}]")
        if c.has_c:
            L.append("        if be != ZERO:")
            L.append("            v = v + be * LOAD_C(cbase, row * ldc + col * c_cs)")
        L += epilog_lines(8, "v", "batch", "row", "col", c, "v")
        L.append("        STORE_ONE(dbase + U64(row * ldd * DSIZE), col, v)")
    assert len(owners) == acc_size
    return "\n".join(L) + "\n"


def output_kind(dtype):
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in _STORE_KINDS:
        raise ValueError(f"result dtype {name} is not supported by the fused-epilog GEMM; allowed: {_STORE_KINDS}")
    return name
