"""Whole-matrix GEMM kernels with a fused elementwise epilog, generated as Python source for numba-cuda.

``D[b] = epilog(alpha * A[b] @ B[b] + beta * C[b])`` where the epilog is any numba device function of the value and
its coordinates. Two generators share the epilog code:

- :func:`hopper_source` (sm_90a, fp16/bf16): a warp-specialised kernel. Warpgroup 0 is the producer: one thread
  issues bulk tensor copies (TMA, 128-byte swizzle) of an ``BM x 64`` slice of A and a ``64 x BN`` slice of B into a
  ring of ``stages`` shared-memory buffers, each guarded by a "full" mbarrier (transaction bytes) and an "empty" one
  (one arrival per consumer warp). Warpgroups 1 and 2 are consumers: each waits on "full", issues four
  ``wgmma.mma_async.m64n{BN}k16`` (operands read straight from shared memory through descriptors, fp32 accumulators in
  registers: BN / 2 per thread), keeps one group in flight (``wgmma.wait_group 1``) and releases the previous stage.
  ``setmaxnreg`` moves registers from the producer (40) to the consumers (232) so 128 accumulators fit without
  spilling. The epilog runs on the accumulators in registers and stores D directly (two 16-bit values per 32-bit store
  where the row allows it): no extra pass over D.
- :func:`generic_source` (any cc >= 7.0, fp16/bf16/fp32/fp64, any strides): one block per ``BM x BN`` tile, K in
  slices copied to shared memory with bounds checks, the block GEMM of :mod:`._matmul` (``mma``: tensor cores for
  16-bit types on sm_80+, CUDA cores otherwise) and the same epilog.

Kernel parameters are scalars only (pointers as uint64), so a launcher can pass them through ``cuLaunchKernel``
without numba's array marshalling; the order is :data:`HOPPER_PARAMS` / :data:`GENERIC_PARAMS` followed by
:data:`DATA_PARAMS` when the epilog reads a data array.

Accumulator ownership (wgmma ``m64nN`` D fragment, the same as ``mma.sync.m16n8`` repeated over N): in consumer
warpgroup ``g`` (0 or 1), warp ``w`` (0..3), lane ``l``, value ``i`` (0..BN/2-1) is row ``64 g + 16 w + l // 4 +
8 ((i % 4) // 2)`` and column ``8 (i // 4) + 2 (l % 4) + i % 2`` of the tile.

Measured on an H200 (bf16, 2026-11-30, docs/benchmarks.md): the main loop reaches 0.94x cuBLASLt on 8192^3 with an
epilog that reads one value per row; an epilog reading a full-size matrix (``data[row, col]``) is bound by memory
latency: each thread issues its data loads one element at a time (behind the exp / divide of the function) and only
8 warps per SM run the epilog, so 16384 x 16384 x 256 with ``silu(x) * gate[row, col]`` takes 1.78 ms against
0.89 ms for cuBLASLt + torch. Not done yet, in the order expected to pay: (1) when ``data`` has the result's shape,
the producer copies the block's data tile into shared memory with TMA during the main loop and the kernel-side
``data[...]`` reads shared memory for indices inside the tile; (2) a persistent grid whose producer fills the next
tile's stages while the consumers run the epilog; (3) D stored through shared memory with TMA. Two blocks per SM
are not possible with 384 threads: ptxas needs 90 registers per thread for an m64n128 wgmma and the cap would be 80.
"""

import dataclasses

import numpy as np

__all__ = ["HopperConfig", "GenericConfig", "hopper_source", "generic_source", "HOPPER_PARAMS", "GENERIC_PARAMS",
           "DATA_PARAMS", "epilog_lines"]

HOPPER_PARAMS = ("tmap_a", "tmap_b", "d_ptr", "c_ptr", "m", "n", "k", "ldd", "ldc", "d_batch", "c_batch", "alpha",
                 "beta", "tiles_m", "tiles_n")
GENERIC_PARAMS = ("a_ptr", "b_ptr", "d_ptr", "c_ptr", "m", "n", "k", "a_rs", "a_cs", "a_batch", "b_rs", "b_cs",
                  "b_batch", "ldd", "ldc", "c_cs", "d_batch", "c_batch", "alpha", "beta", "tiles_m", "tiles_n")
DATA_PARAMS = ("data_ptr", "data_s0", "data_s1", "data_s2", "data_t0", "data_t1", "data_t2")

_STORE_KINDS = ("bfloat16", "float16", "float32", "float64")
# 8-column chunks whose epilog values are computed before they are stored: enough independent data loads in flight
# per thread without spilling (all 32 chunks of a 256-wide row spill 400 bytes with a silu epilog)
_GROUP = 4


@dataclasses.dataclass(frozen=True)
class HopperConfig:
    """One Hopper kernel: ``ab`` "bf16" or "f16"; ``out`` the dtype of D (and C); ``bn`` 128 or 256 (BM is 128);
    ``stages`` shared-memory buffers; ``a_mn_major`` / ``b_mn_major``: A is M-contiguous (column-major) / B is
    N-contiguous (row-major) in global memory; ``batched_a`` / ``batched_b``: 3-D tensor maps (batch coordinate);
    ``has_c``; ``epilog``: "none", "value" (f(value, row, col, data)) or "batch" (f(value, batch, row, col, data));
    ``has_data``: the epilog reads a data array; ``group_m``: tile rows per rasterisation group (L2 reuse).
    One block per SM: two blocks would cap registers at 80 per thread, and ptxas needs 90 for an m64n128 wgmma."""

    ab: str
    out: str
    bn: int = 256
    stages: int = 4
    a_mn_major: bool = False
    b_mn_major: bool = True
    batched_a: bool = False
    batched_b: bool = False
    has_c: bool = False
    epilog: str = "none"
    has_data: bool = False
    group_m: int = 8

    bm = 128
    bk = 64
    threads = 384

    @property
    def a_bytes(self):
        return self.bm * self.bk * 2

    @property
    def b_bytes(self):
        return self.bn * self.bk * 2

    @property
    def stage_bytes(self):
        return self.a_bytes + self.b_bytes

    @property
    def shared_memory_size(self):
        # 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte period, then the mbarriers
        return 1024 + self.stages * self.stage_bytes + 16 * self.stages

    #: (producer, consumer) registers per thread after ``setmaxnreg``: the entry cap at 384 threads is 168; the
    #: producer warpgroup gives its share to the two consumer warpgroups (128 * 40 + 256 * 232 <= 65536).
    registers = (40, 232)

    def tma_boxes(self):
        """((inner, outer) box of A, (inner, outer) box of B): the TMA box shapes the host encodes, in elements."""
        a_box = (64, 64) if self.a_mn_major else (self.bk, self.bm)
        b_box = (64, self.bk) if self.b_mn_major else (self.bk, self.bn)
        return a_box, b_box


@dataclasses.dataclass(frozen=True)
class GenericConfig:
    """One generic kernel (any architecture the block GEMM supports): ``precision`` of A and B (storage and block
    GEMM), ``out`` the dtype of D and C, tile ``bm x bn`` with k-slices of ``bk``, ``block_size`` threads; ``has_c``,
    ``epilog``, ``has_data`` as in :class:`HopperConfig`."""

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


def _store_value(out, value):
    """Expression converting a compute-precision value to the stored type's bits/value."""
    if out == "bfloat16":
        return f"BF16_BITS({value})"
    if out == "float16":
        return f"F16_BITS({value})"
    return value


def _data_header(config):
    if not config.has_data:
        return []
    return ["    DATA = MAKE_DATA(data_ptr, data_s0, data_s1, data_s2, data_t0, data_t1, data_t2)"]


def hopper_source(config):
    """Python source of ``kernel(*HOPPER_PARAMS[, *DATA_PARAMS])`` for :class:`HopperConfig` ``config``."""
    c = config
    S, BN, BM, BK = c.stages, c.bn, c.bm, c.bk
    params = list(HOPPER_PARAMS) + (list(DATA_PARAMS) if c.has_data else [])
    L = [f"def kernel({', '.join(params)}):"]
    L += ["    smem = cuda.shared.array(0, np.uint8)",
          "    base = (SMEM_ADDRESS(smem) + U32(1023)) & U32(0xFFFFFC00)",
          f"    bars = base + U32({S * c.stage_bytes})",
          "    tid = cuda.threadIdx.x",
          "    wg = tid // 128",
          # grouped rasterisation: GROUP tile rows share B tiles while they are hot in L2
          "    bid = cuda.blockIdx.x",
          "    batch = cuda.blockIdx.y",
          f"    per_group = {c.group_m} * tiles_n",
          "    first_m = (bid // per_group) * " + str(c.group_m),
          f"    rows_in_group = min(tiles_m - first_m, {c.group_m})",
          "    tm = first_m + (bid % per_group) % rows_in_group",
          "    tn = (bid % per_group) // rows_in_group",
          f"    m0 = tm * {BM}",
          f"    n0 = tn * {BN}",
          f"    kt_total = (k + {BK - 1}) // {BK}",
          "    if tid == 0:"]
    for s in range(S):
        L.append(f"        MBAR_INIT(bars + U32({8 * s}), U32(1))")
        L.append(f"        MBAR_INIT(bars + U32({8 * (S + s)}), U32(8))")
    L += ["        FENCE_BARRIER_INIT()",
          "    cuda.syncthreads()",
          "    if wg == 0:",
          "        SETMAXNREG_DEC()",
          "        if tid == 0:",
          "            for kt in range(kt_total):",
          f"                s = kt % {S}",
          f"                phase = (kt // {S}) & 1",
          f"                empty = bars + U32({8 * S}) + U32(8 * s)",
          "                while not MBAR_TRY_WAIT(empty, phase ^ 1):",
          "                    pass",
          "                full = bars + U32(8 * s)",
          f"                MBAR_EXPECT_TX(full, U32({c.stage_bytes}))",
          f"                sa = base + U32(s * {c.stage_bytes})",
          f"                sb = sa + U32({c.a_bytes})",
          f"                k0 = kt * {BK}"]
    a_batch = ", batch" if c.batched_a else ""
    b_batch = ", batch" if c.batched_b else ""
    a_tma = "TMA3" if c.batched_a else "TMA2"
    b_tma = "TMA3" if c.batched_b else "TMA2"
    if c.a_mn_major:  # two boxes of 64 rows (M) x 64 k
        for j in range(BM // 64):
            L.append(f"                {a_tma}(sa + U32({j * 8192}), tmap_a, m0 + {64 * j}, k0{a_batch}, full)")
    else:
        L.append(f"                {a_tma}(sa, tmap_a, k0, m0{a_batch}, full)")
    if c.b_mn_major:  # BN / 64 boxes of 64 columns (N) x 64 k
        for j in range(BN // 64):
            L.append(f"                {b_tma}(sb + U32({j * 8192}), tmap_b, n0 + {64 * j}, k0{b_batch}, full)")
    else:
        L.append(f"                {b_tma}(sb, tmap_b, k0, n0{b_batch}, full)")
    # consumers
    L += ["    else:",
          "        SETMAXNREG_INC()",
          "        g = wg - 1",
          "        warp = (tid // 32) % 4",
          "        lane = tid % 32",
          "        acc = ZEROS()",
          "        for kt in range(kt_total):",
          f"            s = kt % {S}",
          f"            phase = (kt // {S}) & 1",
          "            full = bars + U32(8 * s)",
          "            while not MBAR_TRY_WAIT(full, phase):",
          "                pass",
          f"            sa = base + U32(s * {c.stage_bytes}) + U32(g * 8192)",
          f"            sb = base + U32(s * {c.stage_bytes} + {c.a_bytes})",
          "            da = DESC_A | U64(sa >> U32(4))",
          "            db = DESC_B | U64(sb >> U32(4))",
          "            WGMMA_FENCE()"]
    a_step = 128 if c.a_mn_major else 2  # 16-byte units per k16 step: 16 rows of 128 B, or 32 bytes along K
    b_step = 128 if c.b_mn_major else 2
    for kk in range(BK // 16):
        L.append(f"            acc = WGMMA(da + U64({kk * a_step}), db + U64({kk * b_step}), acc)")
    L += ["            WGMMA_COMMIT()",
          "            WGMMA_WAIT1()",
          "            if kt > 0 and lane == 0:",
          f"                MBAR_ARRIVE(bars + U32({8 * S}) + U32(8 * ((kt - 1) % {S})))",
          "        WGMMA_WAIT0()"]
    L += ["    " + line for line in _data_header(c)]
    L += _hopper_epilog(c)
    return "\n".join(L) + "\n"


def _hopper_epilog(c):
    """The consumers' epilog. Rows r0 (values q = 0, 1 of each 8-column chunk j) and r0 + 8 (q = 2, 3). A tile that
    lies wholly inside D (the common case, uniform per block) computes all 64 values of a row before storing any:
    straight-line code whose data loads the compiler issues together, then 32 paired stores. Edge tiles check every
    coordinate (the epilog is never called outside D)."""
    BN = c.bn
    L = ["        r0 = m0 + g * 64 + warp * 16 + lane // 4",
         "        cbase = n0 + 2 * (lane % 4)",
         "        al = COMPUTE(alpha)",
         "        be = COMPUTE(beta)",
         f"        if m0 + {c.bm} <= m and n0 + {BN} <= n:"]

    def whole_tile(indent, with_c):
        pad = " " * indent
        out = []
        for half in range(2):
            out.append(f"{pad}row = r0 + {8 * half}")
            out.append(f"{pad}drow = d_ptr + U64((batch * d_batch + row * ldd) * DSIZE)")
            if with_c:
                out.append(f"{pad}crow = c_ptr + U64((batch * c_batch + row * ldc) * DSIZE)")
            for group in range(0, BN // 8, _GROUP):  # values of _GROUP chunks, then their stores
                for j in range(group, group + _GROUP):
                    for q in range(2):
                        i = 4 * j + 2 * half + q
                        col = f"cbase + {8 * j + q}"
                        value = f"al * acc[{i}]" + (f" + be * LOAD_C(crow, {col})" if with_c else "")
                        out += epilog_lines(indent, value, "batch", "row", col, c, f"v{j}_{q}")
                for j in range(group, group + _GROUP):
                    out.append(f"{pad}STORE_PAIR(drow, cbase + {8 * j}, v{j}_0, v{j}_1)")
        return out

    if c.has_c:
        L.append("            if be != ZERO:")
        L += whole_tile(16, True)
        L.append("            else:")
        L += whole_tile(16, False)
    else:
        L += whole_tile(12, False)
    L.append("        else:")
    for half in range(2):
        L.append(f"            row = r0 + {8 * half}")
        L.append("            if row < m:")
        L.append("                drow = d_ptr + U64((batch * d_batch + row * ldd) * DSIZE)")
        if c.has_c:
            L.append("                crow = c_ptr + U64((batch * c_batch + row * ldc) * DSIZE)")
        for j in range(BN // 8):
            L.append(f"                col = cbase + {8 * j}")
            L.append("                if col < n:")
            for q in range(2):
                i = 4 * j + 2 * half + q
                pad = "                    " if q == 0 else "                        "
                if q == 1:
                    L.append("                    v1 = ZERO")
                    L.append("                    if col + 1 < n:")
                cexpr = f"col + {q}" if q else "col"
                L.append(f"{pad}v{q} = al * acc[{i}]")
                if c.has_c:
                    L.append(f"{pad}if be != ZERO:")
                    L.append(f"{pad}    v{q} = v{q} + be * LOAD_C(crow, {cexpr})")
                L += epilog_lines(len(pad), f"v{q}", "batch", "row", cexpr, c, f"v{q}")
            L.append("                    if col + 1 < n:")
            L.append("                        STORE_PAIR(drow, col, v0, v1)")
            L.append("                    else:")
            L.append("                        STORE_ONE(drow, col, v0)")
    return L


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
