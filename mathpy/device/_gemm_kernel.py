"""Whole-matrix GEMM kernels with a fused elementwise epilog, generated as Python source for numba-cuda: the pieces
both generators share (the epilog call, the data parameters) and the generic kernel.

``D[b] = epilog(alpha * A[b] @ B[b] + beta * C[b])`` where the epilog is any numba device function of the value and
its coordinates. Two generators:

- :func:`mathpy.device._gemm_hopper.hopper_source` (sm_90a, fp16/bf16): the persistent, warp-specialised TMA + wgmma
  kernel (its module says how it works).
- :func:`generic_source` (any cc >= 7.0, fp16/bf16/fp32/fp64, any strides): one block per ``BM x BN`` tile, K in
  slices copied to shared memory with bounds checks, the block GEMM of :mod:`._matmul` (``mma``: tensor cores for
  16-bit types on sm_80+, CUDA cores otherwise) and the same epilog.

Kernel parameters are scalars only (pointers as uint64), so a launcher can pass them through ``cuLaunchKernel``
without numba's array marshalling; the order is the generator's parameter list followed by :data:`DATA_PARAMS` when
the epilog reads a data array.
"""

import dataclasses

import numpy as np

__all__ = ["GenericConfig", "generic_source", "GENERIC_PARAMS", "DATA_PARAMS", "epilog_lines", "output_kind"]

GENERIC_PARAMS = ("a_ptr", "b_ptr", "d_ptr", "c_ptr", "m", "n", "k", "a_rs", "a_cs", "a_batch", "b_rs", "b_cs",
                  "b_batch", "ldd", "ldc", "c_cs", "d_batch", "c_batch", "alpha", "beta", "tiles_m", "tiles_n")
DATA_PARAMS = ("data_ptr", "data_s0", "data_s1", "data_s2", "data_t0", "data_t1", "data_t2")

_STORE_KINDS = ("bfloat16", "float16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class GenericConfig:
    """One generic kernel (any architecture the block GEMM supports): ``precision`` of A and B (storage and block
    GEMM), ``out`` the dtype of D and C, tile ``bm x bn`` with k-slices of ``bk``, ``block_size`` threads; ``has_c``,
    ``epilog``, ``has_data`` as in :class:`~._gemm_hopper.HopperConfig`."""

    precision: str
    out: str
    bm: int = 64
    bn: int = 64
    bk: int = 32
    block_size: int = 256
    has_c: bool = False
    epilog: str = "none"
    has_data: bool = False


def epilog_lines(indent, value, batch, row, col, config, out_var):
    """Lines computing ``out_var``: the epilog applied to ``value`` (alpha/beta applied) at (batch, row, col)."""
    pad = " " * indent
    if config.epilog == "none":
        return [f"{pad}{out_var} = {value}"]
    data = "DATA" if config.has_data else "None"
    if config.epilog == "value":
        return [f"{pad}{out_var} = EPI({value}, INT64({row}), INT64({col}), {data})"]
    return [f"{pad}{out_var} = EPI({value}, INT64({batch}), INT64({row}), INT64({col}), {data})"]


def _data_header(config):
    if not config.has_data:
        return []
    return ["    DATA = MAKE_DATA(data_ptr, data_s0, data_s1, data_s2, data_t0, data_t1, data_t2)"]


def generic_source(config, owners, header, acc_size):
    """Python source of ``kernel(*GENERIC_PARAMS[, *DATA_PARAMS])`` for :class:`GenericConfig` ``config``; ``owners``
    / ``header``: the block GEMM's (row, column) expressions of each accumulator and the lines defining their names
    (``_matmul._owners``)."""
    c = config
    BM, BN, BK = c.bm, c.bn, c.bk
    params = list(GENERIC_PARAMS) + (list(DATA_PARAMS) if c.has_data else [])
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
    L += _data_header(c)
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
