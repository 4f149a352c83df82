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
  registers (BN / 2 per thread), one group kept in flight. Then the epilog on the accumulators: the user's function
  with its ``data`` view reading the staged tile from shared memory. With ``store_tile`` every thread first computes
  all its values (rounded and packed in pairs), then (after a barrier among the consumers when the buffer still holds
  data they read) writes them into the buffer and hands it to the tile thread: D leaves in 16 KiB bulk stores, off the
  consumers' path, and they go on with the next tile's product. Without it they store D directly.

``setmaxnreg`` moves registers from warpgroup 0 (40) to the consumers (232). Accumulator ownership (the wgmma
``m64nN`` D fragment): in consumer warpgroup ``g``, warp ``w``, lane ``l``, value ``i`` is row ``64 g + 16 w + l // 4
+ 8 ((i % 4) // 2)`` and column ``8 (i // 4) + 2 (l % 4) + i % 2`` of the tile.

Shared memory: 1 KiB of alignment slack, the ring, the epilog buffer (``BM x BN`` 16-bit values as boxes of 64 columns
by BM rows of 128 bytes, 16-byte chunks swizzled by ``row % 8``: :func:`tile_offset`), then the mbarriers; at most
227 KiB (:func:`max_stages`). Kernel parameters are scalars only (pointers and tensor-map addresses as uint64):
:data:`HOPPER_PARAMS`, then :data:`~._gemm_kernel.DATA_PARAMS` when the epilog reads ``data``.

Why this shape (H200, docs/benchmarks.md): a first, non-persistent version whose consumers read the epilog's data
from device memory one element at a time waited on memory latency (``silu(x) * gate[row, col]`` on 16384 x 16384 x
256 took 1.78 ms, twice cuBLASLt + torch). Staging the gate tile and storing D in tiles brought it to 0.80 ms, and
compiling the epilog's divisions as ``div.full.f32`` for 16-bit results (``_gemm_build.full_range_division``) to
0.54 ms: 1.65x the best unfused peer; on 8192^3 the fused silu*gate runs at 0.99x cuBLASLt's GEMM alone.
"""

import dataclasses

from ._gemm_kernel import DATA_PARAMS, epilog_lines

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
    (batch coordinate); ``has_c``; ``epilog``: "none", "value" (f(value, row, col, data)) or "batch" (f(value, batch,
    row, col, data)); ``has_data``: the epilog reads a data array; ``stage_data``: a 16-bit ``data`` of the result's
    shape is copied tile by tile into shared memory (``batched_data``: with a batch axis); ``store_tile``: D (16-bit)
    leaves through shared memory with bulk tensor stores (``batched_d``: 3-D map); ``group_m``: tile rows per
    rasterisation group. One block per SM: two would cap registers at 80 per thread, and an m64n128 wgmma alone
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
    epilog: str = "none"
    has_data: bool = False
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
        if self.stage_data and not self.has_data:
            raise ValueError("stage_data needs an epilog that reads data")
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
    """Python source of ``kernel(*HOPPER_PARAMS[, *DATA_PARAMS])`` for :class:`HopperConfig` ``config``."""
    c = config
    S = c.stages
    params = list(HOPPER_PARAMS) + (list(DATA_PARAMS) if c.has_data else [])
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
    if c.has_data and not c.stage_data:
        L.append("        DATA = MAKE_DATA(data_ptr, data_s0, data_s1, data_s2, data_t0, data_t1, data_t2)")
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


def _value(c, i, col, with_c):
    return f"al * acc[{i}]" + (f" + be * LOAD_C(crow, {col})" if with_c else "")


def _row_lines(c, pad, half, with_c):
    out = [f"{pad}row = m0 + (lr0 | {8 * half})", f"{pad}drow = d_ptr + U64((tb * d_batch + row * ldd) * DSIZE)"]
    if with_c:
        out.append(f"{pad}crow = c_ptr + U64((tb * c_batch + row * ldc) * DSIZE)")
    return out


def _packed_whole(c, indent, with_c):
    """A whole tile, store_tile: every value of the thread, packed in pairs p{j}_{half}."""
    pad = " " * indent
    out = []
    for half in range(2):
        out += _row_lines(c, pad, half, with_c)
        for j in range(c.bn // 8):
            for q in range(2):
                col = f"n0 + (lc0 | {8 * j + q})"
                out += epilog_lines(indent, _value(c, 4 * j + 2 * half + q, col, with_c), "tb", "row", col, c,
                                    f"v{q}")
            out.append(f"{pad}p{j}_{half} = PACK(v0, v1)")
    return out


def _packed_edge(c, indent):
    """An edge tile, store_tile: values outside D are zeros (the bulk store skips them) and the epilog is not
    called there."""
    pad = " " * indent
    out = []
    for half in range(2):
        out += _row_lines(c, pad, half, c.has_c)
        for j in range(c.bn // 8):
            for q in range(2):
                out += [f"{pad}col = n0 + (lc0 | {8 * j + q})", f"{pad}v{q} = ZERO", f"{pad}if row < m and col < n:",
                        f"{pad}    v{q} = al * acc[{4 * j + 2 * half + q}]"]
                if c.has_c:
                    out += [f"{pad}    if be != ZERO:", f"{pad}        v{q} = v{q} + be * LOAD_C(crow, col)"]
                out += epilog_lines(indent + 4, f"v{q}", "tb", "row", "col", c, f"v{q}")
            out.append(f"{pad}p{j}_{half} = PACK(v0, v1)")
    return out


def _direct_whole(c, indent, with_c, group=4):
    """A whole tile stored straight from registers: ``group`` 8-column chunks of values, then their stores."""
    pad = " " * indent
    out = []
    for half in range(2):
        out += _row_lines(c, pad, half, with_c)
        for first in range(0, c.bn // 8, group):
            for j in range(first, first + group):
                for q in range(2):
                    col = f"n0 + (lc0 | {8 * j + q})"
                    out += epilog_lines(indent, _value(c, 4 * j + 2 * half + q, col, with_c), "tb", "row", col, c,
                                        f"v{j}_{q}")
            for j in range(first, first + group):
                out.append(f"{pad}STORE_PAIR(drow, n0 + (lc0 | {8 * j}), v{j}_0, v{j}_1)")
    return out


def _direct_edge(c, indent):
    pad = " " * indent
    out = []
    for half in range(2):
        out += [f"{pad}row = m0 + (lr0 | {8 * half})", f"{pad}if row < m:"]
        inner = pad + "    "
        out.append(f"{inner}drow = d_ptr + U64((tb * d_batch + row * ldd) * DSIZE)")
        if c.has_c:
            out.append(f"{inner}crow = c_ptr + U64((tb * c_batch + row * ldc) * DSIZE)")
        for j in range(c.bn // 8):
            out += [f"{inner}col = n0 + (lc0 | {8 * j})", f"{inner}col1 = n0 + (lc0 | {8 * j + 1})",
                    f"{inner}if col < n:"]
            for q in range(2):
                vpad = inner + ("    " if q == 0 else "        ")
                if q == 1:
                    out += [f"{inner}    v1 = ZERO", f"{inner}    if col1 < n:"]
                cexpr = "col1" if q else "col"
                out.append(f"{vpad}v{q} = al * acc[{4 * j + 2 * half + q}]")
                if c.has_c:
                    out += [f"{vpad}if be != ZERO:", f"{vpad}    v{q} = v{q} + be * LOAD_C(crow, {cexpr})"]
                out += epilog_lines(len(vpad), f"v{q}", "tb", "row", cexpr, c, f"v{q}")
            out += [f"{inner}    if col1 < n:", f"{inner}        STORE_PAIR(drow, col, v0, v1)",
                    f"{inner}    else:", f"{inner}        STORE_ONE(drow, col, v0)"]
    return out


def _epilog(c):
    """The consumers' epilog for one tile (see the module docstring)."""
    pad = "            "
    L = []
    if c.tile_buffer:
        L += _wait(pad, "ready", "t & 1")
        L.append(f"{pad}tile = OPAQUE(tbuf)")  # the buffer's addresses are recomputed per tile, not kept live
    if c.stage_data:
        L.append(f"{pad}DATA = MAKE_DATA(data_ptr, data_s0, data_s1, data_s2, data_t0, data_t1, data_t2, "
                 "tile, tb, m0, n0)")
    L += [f"{pad}if m0 + {c.bm} <= m and n0 + {c.bn} <= n:"]
    whole, edge = (_packed_whole, _packed_edge) if c.store_tile else (_direct_whole, _direct_edge)
    if c.has_c:
        L += [f"{pad}    if be != ZERO:"] + whole(c, 20, True) + [f"{pad}    else:"] + whole(c, 20, False)
    else:
        L += whole(c, 16, False)
    L += [f"{pad}else:"] + edge(c, 16)
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
