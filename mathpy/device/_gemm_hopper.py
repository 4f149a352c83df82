"""The Hopper (sm_90a) whole-GEMM kernel with a fused Python epilog, generated as Python source for numba-cuda.

``D[b] = epilog(alpha * A[b] @ B[b] + beta * C[b])`` for 16-bit A and B, on ``BM x BN`` tiles (128 x 256, or
128 x 128 when N <= 128). A persistent, warp-specialised kernel: one block per SM walks the tiles
``blockIdx.x, blockIdx.x + gridDim.x, ...`` (batch-major, then groups of ``group_m`` tile rows so that B tiles are
reused from L2). 384 threads in three warpgroups:

- warpgroup 0, thread 0 (the *loader*): bulk tensor copies (TMA, 128-byte swizzle) of the ``BM x 64`` slices of A and
  ``64 x BN`` slices of B into a ring of ``stages`` shared-memory buffers, each guarded by a "full" mbarrier
  (transaction bytes) and an "empty" one (one arrival per consumer warp). The ring runs on across tiles, so the next
  tile's first slices are loaded while the consumers run the current tile's epilog.
- warpgroup 0, thread 32 (the *tile thread*, when the kernel has an epilog buffer): for each tile, copies the block's
  tile of ``data`` into the epilog buffer with TMA (``stage_data``), or just marks the buffer free; once the
  consumers have written the previous tile's results there, stores them to D with a bulk tensor store
  (``store_tile``) before reusing the buffer. Two mbarriers: "ready" (the buffer holds this tile's data / is free)
  and "done" (the consumer warps are finished with it).
- warpgroups 1 and 2 (the *consumers*): rows 0-63 and 64-127 of the tile; per 64-wide k-slice four
  ``wgmma.mma_async.m64n{BN}k16`` with operands read from shared memory through descriptors and fp32 accumulators in
  registers (BN / 2 per thread), one group kept in flight. Then the epilog on the accumulators: a call of the
  external epilog function (:data:`~._gemm_kernel.EPILOG_SYMBOL`, inlined by the link) per value, whose operand 0
  reads the staged tile from shared memory. With ``store_tile`` every thread first computes
  all its values (rounded and packed in pairs), then (after a barrier among the consumers when the buffer still holds
  data they read) writes them into the buffer and hands it to the tile thread: D leaves in 16 KiB bulk stores, off the
  consumers' path, and they go on with the next tile's product. Without it they store D directly.

``setmaxnreg`` moves registers from warpgroup 0 (40) to the consumers (232). Accumulator ownership (the wgmma
``m64nN`` D fragment): in consumer warpgroup ``g``, warp ``w``, lane ``l``, value ``i`` is row ``64 g + 16 w + l // 4
+ 8 ((i % 4) // 2)`` and column ``8 (i // 4) + 2 (l % 4) + i % 2`` of the tile.

Shared memory: 1 KiB of alignment slack, the ring, the epilog buffer (``BM x BN`` 16-bit values as boxes of 64 columns
by BM rows of 128 bytes, 16-byte chunks swizzled by ``row % 8``: :func:`tile_offset`), then the mbarriers; at most
227 KiB (:func:`max_stages`). Kernel parameters are scalars only (pointers and tensor-map addresses as uint64):
:data:`HOPPER_PARAMS`, then the operands' (:func:`~._gemm_kernel.operand_params`) when the kernel calls an epilog.

Source size is compile time: numba's front end (typing, SSA, liveness) grows faster than linearly with the number of
blocks and statements, and the first version (every value's epilog unrolled four times: whole tiles with and without
C, edge tiles with a bounds test per element) took about 170 s to compile on a 2-core CI machine. Now the whole-tile
epilog is written once (C, when the kernel has it, is added by an intrinsic that tests beta inside), and edge tiles
run the same straight-line code on coordinates clamped into the result (stores: the bulk store clips, or an
intrinsic with the bounds tests inside).

Why this shape (H200, docs/benchmarks.md): a first, non-persistent version whose consumers read the epilog's data
from device memory one element at a time waited on memory latency (``silu(x) * gate[row, col]`` on 16384 x 16384 x
256 took 1.78 ms, twice cuBLASLt + torch). Staging the gate tile and storing D in tiles brought it to 0.80 ms, and
compiling the epilog's divisions as ``div.full.f32`` for 16-bit results (``_gemm_build.full_range_division``) to
0.54 ms: 1.65x the best unfused peer; on 8192^3 the fused silu*gate runs at 0.99x cuBLASLt's GEMM alone.
"""

import dataclasses

from ._gemm_kernel import epilog_lines, operand_params

__all__ = ["HopperConfig", "hopper_source", "HOPPER_PARAMS", "max_stages", "tile_offset", "tensor_map_specs",
           "MAX_SHARED_MEMORY"]

HOPPER_PARAMS = ("tmap_a", "tmap_b", "tmap_data", "tmap_d", "d_ptr", "c_ptr", "m", "n", "k", "batches", "ldd", "ldc",
                 "d_batch", "c_batch", "alpha", "beta", "tiles_m", "tiles_n")

#: Dynamic shared memory a block may opt into on sm_90 (227 KiB).
MAX_SHARED_MEMORY = 232448
_BARRIER_BYTES = 8


@dataclasses.dataclass(frozen=True)
class HopperConfig:
    """One Hopper kernel: ``ab`` "bfloat16" or "float16"; ``out`` the dtype of D (and C); ``bn`` 128 or 256 (BM is
    128); ``stages`` ring buffers (:func:`max_stages`); ``a_mn_major`` / ``b_mn_major``: A is M-contiguous
    (column-major) / B is N-contiguous (row-major) in global memory; ``batched_a`` / ``batched_b``: 3-D tensor maps
    (batch coordinate); ``has_c``; ``epilog``: the kernel calls the epilog function, which reads ``operands``
    operands (``checked``: a check_bounds build, which passes it their shapes too); ``edges``: some tiles cross the
    result's last row or column (False: the edge-tile epilog is left out, half the code for ptxas to compile);
    ``stage_data``: operand 0 of the epilog, 16-bit of the result's shape, is copied tile by tile into shared memory
    (``batched_data``: with a batch axis); ``store_tile``: D (16-bit) leaves through shared memory with bulk tensor
    stores (``batched_d``: 3-D map); ``group_m``: tile rows per rasterisation group. One block per SM: two would cap registers at 80 per thread, and an m64n128 wgmma alone
    needs 90."""

    ab: str
    out: str
    bn: int = 256
    stages: int = 4
    a_mn_major: bool = False
    b_mn_major: bool = True
    batched_a: bool = False
    batched_b: bool = False
    has_c: bool = False
    epilog: bool = False
    operands: int = 0
    checked: bool = False
    edges: bool = True
    stage_data: bool = False
    batched_data: bool = False
    store_tile: bool = False
    batched_d: bool = False
    group_m: int = 8

    bm = 128
    bk = 64
    threads = 384
    #: (producer, consumer) registers per thread after ``setmaxnreg``: the entry cap at 384 threads is 168; the
    #: producer warpgroup gives its share to the two consumer warpgroups (128 * 40 + 256 * 232 <= 65536).
    registers = (40, 232)

    def __post_init__(self):
        if self.store_tile and self.out not in ("bfloat16", "float16"):
            raise ValueError(f"store_tile needs a 16-bit result, not {self.out}")
        if self.stage_data and not self.epilog:
            raise ValueError("stage_data needs an epilog (that reads the staged operand)")
        if self.shared_memory_size > MAX_SHARED_MEMORY:
            raise ValueError(f"{self.stages} stages need {self.shared_memory_size} bytes of shared memory, more than "
                             f"{MAX_SHARED_MEMORY}; at most {max_stages(self.bn, self.tile_buffer)}")

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
    def tile_buffer(self):
        """The kernel has an epilog buffer (and the tile thread)."""
        return self.stage_data or self.store_tile

    @property
    def tile_bytes(self):
        return self.bm * self.bn * 2 if self.tile_buffer else 0

    @property
    def barrier_count(self):
        return 2 * self.stages + (2 if self.tile_buffer else 0)

    @property
    def shared_memory_size(self):
        # 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte period
        return 1024 + self.stages * self.stage_bytes + self.tile_bytes + _BARRIER_BYTES * self.barrier_count

    def tma_boxes(self):
        """((inner, outer) box of A, (inner, outer) box of B): the TMA box shapes the host encodes, in elements."""
        a_box = (64, 64) if self.a_mn_major else (self.bk, self.bm)
        b_box = (64, self.bk) if self.b_mn_major else (self.bk, self.bn)
        return a_box, b_box


def max_stages(bn, tile_buffer, limit=None):
    """The most ring stages a 128 x ``bn`` kernel fits in 227 KiB (capped at ``limit``, default 4 for bn=256 and 6
    for bn=128: more buys nothing measurable)."""
    stage = (128 + bn) * 64 * 2
    fixed = 1024 + (128 * bn * 2 if tile_buffer else 0) + _BARRIER_BYTES * (2 if tile_buffer else 0)
    fit = (MAX_SHARED_MEMORY - fixed) // (stage + 2 * _BARRIER_BYTES)
    return min(fit, limit or (4 if bn == 256 else 6))


def tile_offset(row, col, bm=128):
    """Byte offset of element (row, col) of a 16-bit tile in the epilog buffer (what a TMA copy of 64 x bm boxes with
    the 128-byte swizzle writes): box ``col // 64``, row ``row`` of 128 bytes, 16-byte chunk ``(col % 64) // 8`` moved
    to ``that ^ (row % 8)``. The kernel's stores and the staged ``data`` view (``_epilog_data.tile_offset_ir``) use
    it."""
    chunk = ((col >> 3) & 7) ^ (row & 7)
    return (col >> 6) * bm * 128 + row * 128 + (chunk << 4) + ((col & 7) << 1)


def tensor_map_specs(config, m, n, k, batches, a, b, data=None, d=None):
    """The tensor maps of one execute as ``(address, dims, byte strides, box)`` (16-bit elements, 128-byte swizzle;
    dims innermost first; strides of the outer dims): A, B, then the staged data and D when the config uses them.
    ``a``, ``b``, ``data``, ``d``: (address, leading dimension, batch stride) in elements."""
    a_box, b_box = config.tma_boxes()
    specs = []
    for (address, ld, batch_stride), box, mn_major, batched, (inner, outer) in (
            (a, a_box, config.a_mn_major, config.batched_a, (k, m)),
            (b, b_box, config.b_mn_major, config.batched_b, (k, n))):
        dims = [outer, inner] if mn_major else [inner, outer]
        strides = [ld * 2]
        if batched:
            dims.append(batches)
            strides.append(batch_stride * 2)
        specs.append((address, dims, strides, box))
    for wanted, batched, operand in ((config.stage_data, config.batched_data, data),
                                     (config.store_tile, config.batched_d, d)):
        if wanted:
            address, ld, batch_stride = operand
            dims, strides = [n, m], [ld * 2]
            if batched:
                dims.append(batches)
                strides.append(batch_stride * 2)
            specs.append((address, dims, strides, (64, config.bm)))
    return specs


# ---------------------------------------------------------------- source generation

def _decode(pad):
    """Lines setting tb (batch), m0, n0 of work item ``w``: batch-major, then grouped rasterisation."""
    return [f"{pad}tb = w // per_batch",
            f"{pad}rest = w - tb * per_batch",
            f"{pad}first_m = (rest // per_group) * GROUP_M",
            f"{pad}rows_in_group = min(tiles_m - first_m, GROUP_M)",
            f"{pad}tm = first_m + (rest % per_group) % rows_in_group",
            f"{pad}tn = (rest % per_group) // rows_in_group",
            f"{pad}m0 = tm * BM",
            f"{pad}n0 = tn * BN"]


def _wait(pad, barrier, parity):
    return [f"{pad}while not MBAR_TRY_WAIT({barrier}, {parity}):", f"{pad}    pass"]


def hopper_source(config):
    """Python source of ``kernel(*HOPPER_PARAMS[, *operand_params])`` for :class:`HopperConfig` ``config``."""
    c = config
    S = c.stages
    params = list(HOPPER_PARAMS) + (operand_params(c.operands, c.checked) if c.epilog else [])
    L = [f"def kernel({', '.join(params)}):",
         "    smem = cuda.shared.array(0, BYTE)",
         "    base = (SMEM_ADDRESS(smem) + U32(1023)) & U32(0xFFFFFC00)",
         f"    tbuf = base + U32({S * c.stage_bytes})",
         f"    bars = tbuf + U32({c.tile_bytes})",
         f"    empties = bars + U32({8 * S})",
         f"    ready = bars + U32({16 * S})",
         f"    done = bars + U32({16 * S + 8})",
         "    tid = cuda.threadIdx.x",
         "    wg = tid // 128",
         "    per_batch = tiles_m * tiles_n",
         "    total = per_batch * batches",
         "    per_group = GROUP_M * tiles_n",
         "    kt_total = (k + 63) // 64",
         "    first_w = cuda.blockIdx.x",
         "    step = cuda.gridDim.x",
         "    if tid == 0:"]
    for s in range(S):
        L.append(f"        MBAR_INIT(bars + U32({8 * s}), U32(1))")
        L.append(f"        MBAR_INIT(empties + U32({8 * s}), U32(8))")
    if c.tile_buffer:
        L += ["        MBAR_INIT(ready, U32(1))", "        MBAR_INIT(done, U32(8))"]
    L += ["        FENCE_BARRIER_INIT()",
          "    cuda.syncthreads()",
          "    if wg == 0:",
          "        SETMAXNREG_DEC()"]
    L += _loader(c)
    if c.tile_buffer:
        L += _tile_thread(c)
    L += ["    else:",
          "        SETMAXNREG_INC()",
          # bit operations, so that the compiler knows the bits of every local row and column and can prove them
          # inside the tile (the staged data view's range check then folds away)
          "        g = ((tid >> 7) - 1) & 1",
          "        warp = (tid >> 5) & 3",
          "        lane = tid & 31",
          "        lr0 = (g << 6) | (warp << 4) | (lane >> 2)",  # the thread's first row and column within the tile
          "        lc0 = (lane & 3) << 1",
          "        al = COMPUTE(alpha)",
          "        be = COMPUTE(beta)"]
    L += ["        s = 0",
          "        phase = 0",
          "        prev = 0",
          "        t = 0",
          "        for w in range(first_w, total, step):"]
    L += _decode("            ")
    L += ["            acc = ZEROS()",
          "            for kt in range(kt_total):"]
    L += _wait("                ", "bars + U32(8 * s)", "phase")
    L += [f"                sa = base + U32(s * {c.stage_bytes}) + U32(g * 8192)",
          f"                sb = base + U32(s * {c.stage_bytes} + {c.a_bytes})",
          "                da = DESC_A | U64(sa >> U32(4))",
          "                db = DESC_B | U64(sb >> U32(4))",
          "                WGMMA_FENCE()"]
    a_step = 128 if c.a_mn_major else 2  # 16-byte units per k16 step: 16 rows of 128 B, or 32 bytes along K
    b_step = 128 if c.b_mn_major else 2
    for kk in range(c.bk // 16):
        L.append(f"                acc = WGMMA(da + U64({kk * a_step}), db + U64({kk * b_step}), acc)")
    L += ["                WGMMA_COMMIT()",
          "                WGMMA_WAIT1()",
          "                if kt > 0 and lane == 0:",
          "                    MBAR_ARRIVE(empties + U32(8 * prev))",
          "                prev = s",
          "                s += 1",
          f"                if s == {S}:",
          "                    s = 0",
          "                    phase ^= 1",
          "            WGMMA_WAIT0()",
          "            if lane == 0:",
          "                MBAR_ARRIVE(empties + U32(8 * prev))"]
    L += _epilog(c)
    L.append("            t += 1")
    return "\n".join(L) + "\n"


def _loader(c):
    L = ["        if tid == 0:",
         "            s = 0",
         "            phase = 0",
         "            for w in range(first_w, total, step):"]
    L += _decode("                ")
    L += ["                for kt in range(kt_total):"]
    L += _wait("                    ", "empties + U32(8 * s)", "phase ^ 1")
    L += ["                    full = bars + U32(8 * s)",
          f"                    MBAR_EXPECT_TX(full, U32({c.stage_bytes}))",
          f"                    sa = base + U32(s * {c.stage_bytes})",
          f"                    sb = sa + U32({c.a_bytes})",
          "                    k0 = kt * 64"]
    pad = "                    "
    a_batch = ", tb" if c.batched_a else ""
    b_batch = ", tb" if c.batched_b else ""
    a_tma = "TMA3" if c.batched_a else "TMA2"
    b_tma = "TMA3" if c.batched_b else "TMA2"
    if c.a_mn_major:  # two boxes of 64 rows (M) x 64 k
        for j in range(c.bm // 64):
            L.append(f"{pad}{a_tma}(sa + U32({j * 8192}), tmap_a, m0 + {64 * j}, k0{a_batch}, full)")
    else:
        L.append(f"{pad}{a_tma}(sa, tmap_a, k0, m0{a_batch}, full)")
    if c.b_mn_major:  # BN / 64 boxes of 64 columns (N) x 64 k
        for j in range(c.bn // 64):
            L.append(f"{pad}{b_tma}(sb + U32({j * 8192}), tmap_b, n0 + {64 * j}, k0{b_batch}, full)")
    else:
        L.append(f"{pad}{b_tma}(sb, tmap_b, k0, n0{b_batch}, full)")
    L += [f"{pad}s += 1",
          f"{pad}if s == {c.stages}:",
          f"{pad}    s = 0",
          f"{pad}    phase ^= 1"]
    return L


def _tile_stores(c, pad, b, m0, n0):
    box = c.bm * 128
    out = []
    for j in range(c.bn // 64):
        if c.batched_d:
            out.append(f"{pad}TMA_STORE3(tmap_d, {n0} + {64 * j}, {m0}, {b}, tbuf + U32({j * box}))")
        else:
            out.append(f"{pad}TMA_STORE2(tmap_d, {n0} + {64 * j}, {m0}, tbuf + U32({j * box}))")
    return out + [f"{pad}BULK_COMMIT()"]


def _tile_thread(c):
    """Warpgroup 0's thread 32: the epilog buffer's life per tile (store the previous results, then fill / free)."""
    L = ["        elif tid == 32:",
         "            t = 0",
         "            pb = 0",
         "            pm0 = 0",
         "            pn0 = 0",
         "            for w in range(first_w, total, step):"]
    L += _decode("                ")
    L += ["                if t > 0:"]
    L += _wait("                    ", "done", "(t - 1) & 1")
    if c.store_tile:
        L += _tile_stores(c, "                    ", "pb", "pm0", "pn0")
        L.append("                    BULK_WAIT_READ()")
    if c.stage_data:
        box = c.bm * 128
        L.append(f"                MBAR_EXPECT_TX(ready, U32({c.tile_bytes}))")
        for j in range(c.bn // 64):
            if c.batched_data:
                L.append(f"                TMA3(tbuf + U32({j * box}), tmap_data, n0 + {64 * j}, m0, tb, ready)")
            else:
                L.append(f"                TMA2(tbuf + U32({j * box}), tmap_data, n0 + {64 * j}, m0, ready)")
    else:
        L.append("                MBAR_ARRIVE(ready)")
    L += ["                pb = tb",
          "                pm0 = m0",
          "                pn0 = n0",
          "                t += 1",
          "            if t > 0:"]
    L += _wait("                ", "done", "(t - 1) & 1")
    if c.store_tile:
        L += _tile_stores(c, "                ", "pb", "pm0", "pn0")
        L.append("                BULK_WAIT()")
    return L


def _value(c, i, col):
    """Accumulator ``i`` scaled by alpha (the kernel scaled the whole tuple when it has no C) plus beta C."""
    return f"AXPBY(acc[{i}], al, be, crow, {col})" if c.has_c else f"acc[{i}]"


def _column(j, q, edge=False):
    """The thread's column ``8 j + q`` of its 8-column chunks (clamped into the result on edge tiles), computed where
    it is used: named once per tile, the 64 columns would all stay live through the epilog and spill registers."""
    col = f"n0 + (lct | {8 * j + q})"
    return f"min({col}, n - 1)" if edge else col


def _row_lines(c, pad, half, edge):
    """Lines setting ``row`` (and ``erow``: the row the epilog and C see, clamped into the result on edge tiles),
    ``drow`` (D's row address) and ``crow`` (C's)."""
    out = [f"{pad}row = m0 + (lrt | {8 * half})"]
    erow = "erow" if edge else "row"
    if edge:
        out.append(f"{pad}erow = min(row, m - 1)")
    out.append(f"{pad}drow = d_ptr + U64((tb * d_batch + row * ldd) * DSIZE)")
    if c.has_c:
        out.append(f"{pad}crow = c_ptr + U64((tb * c_batch + {erow} * ldc) * DSIZE)")
    return out


def _call(c, indent, i, col, edge, out_var):
    """The epilog of accumulator ``i`` at column ``col`` (already clamped on edge tiles)."""
    staged = "tile, m0, n0" if c.stage_data else None
    return epilog_lines(indent, _value(c, i, col), "tb", "erow" if edge else "row", col, c, out_var, staged)


def _packed(c, indent, edge):
    """store_tile: every value of the thread, packed in pairs p{j}_{half} (on edge tiles the values outside D are
    computed at clamped coordinates and dropped by the bulk store, which clips to the tensor map's extent)."""
    pad = " " * indent
    out = []
    for half in range(2):
        out += _row_lines(c, pad, half, edge)
        for j in range(c.bn // 8):
            for q in range(2):
                out += _call(c, indent, 4 * j + 2 * half + q, _column(j, q, edge), edge, f"v{q}")
            out.append(f"{pad}p{j}_{half} = PACK(v0, v1)")
    return out


def _direct(c, indent, edge, group=4):
    """Stored straight from registers: ``group`` 8-column chunks of values, then their stores (on edge tiles, stores
    with the bounds tests inside)."""
    pad = " " * indent
    out = []
    for half in range(2):
        out += _row_lines(c, pad, half, edge)
        if edge:
            out.append(f"{pad}row_ok = row < m")
        for first in range(0, c.bn // 8, group):
            for j in range(first, first + group):
                for q in range(2):
                    out += _call(c, indent, 4 * j + 2 * half + q, _column(j, q, edge), edge, f"v{j}_{q}")
            for j in range(first, first + group):
                out.append(f"{pad}STORE_EDGE(drow, {_column(j, 0)}, v{j}_0, v{j}_1, n, row_ok)" if edge else
                           f"{pad}STORE_PAIR(drow, {_column(j, 0)}, v{j}_0, v{j}_1)")
    return out


def _epilog(c):
    """The consumers' epilog for one tile (see the module docstring)."""
    pad = "            "
    L = []
    if c.tile_buffer:
        L += _wait(pad, "ready", "t & 1")
        L.append(f"{pad}tile = OPAQUE(tbuf)")  # the buffer's addresses are recomputed per tile, not kept live
    # the thread's first row and column within the tile, through an asm per tile (with their known bits masked back
    # in): the link's optimiser would otherwise hoist the 128 tile offsets of the values out of the tile loop and
    # keep them live through the product (spills); the masks keep the staged operand's range checks folding
    L += [f"{pad}lrt = INT64(OPAQUE(lr0)) & 127", f"{pad}lct = INT64(OPAQUE(lc0)) & 6"]
    body = _packed if c.store_tile else _direct
    if not c.has_c:
        L.append(f"{pad}acc = SCALE(acc, al)")
    if c.edges:
        L += [f"{pad}if m0 + {c.bm} <= m and n0 + {c.bn} <= n:"] + body(c, 16, False)
        L += [f"{pad}else:"] + body(c, 16, True)
    else:
        L += body(c, 12, False)
    if c.store_tile:
        if c.stage_data:  # the results overwrite the data the other warps may still be reading
            L.append(f"{pad}CONSUMERS_SYNC()")
        L += [f"{pad}swz = U32(lane >> 2) << U32(4)"]
        for half in range(2):
            L.append(f"{pad}srow = tile + U32((lr0 | {8 * half}) * 128 + 2 * lc0)")
            for j in range(c.bn // 8):
                # chunk j % 8 of box j // 8, swizzled by the row's (lane // 4) as tile_offset lays it out
                L.append(f"{pad}ST_SHARED(srow + U32({(j // 8) * c.bm * 128}) + (U32({(j % 8) * 16}) ^ swz), "
                         f"p{j}_{half})")
        L.append(f"{pad}FENCE_PROXY_ASYNC()")
    if c.tile_buffer:
        L += [f"{pad}SYNCWARP()", f"{pad}if lane == 0:", f"{pad}    MBAR_ARRIVE(done)"]
    return L
