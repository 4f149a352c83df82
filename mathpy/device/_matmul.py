"""Block-level GEMM for numba-cuda kernels: description object, validation and code generation.

The block computes ``C = alpha * A @ B + beta * C`` for an ``m x k`` A and a ``k x n`` B held in shared memory
(row-major, or A column-major to make its reads conflict-free), either into a C in shared memory (``execute``) or
into per-thread register accumulators (``mma`` + ``store_accumulator*``; the way to do a GEMM with a K loop). Thread
``tid`` owns the ``TM x TN`` elements at rows ``tid // NT_N + ii * NT_M`` and columns ``tid % NT_N + jj * NT_N``:
a warp reads consecutive B columns (no bank conflicts) and shares A elements (broadcasts). The k loop is a real loop;
the ``TM x TN`` multiply-adds inside it are unrolled straight-line code on scalar variables (registers).

Precisions: fp16 (``np.float16`` storage, fp32 accumulation), bf16 (NumPy has no bfloat16, so storage is ``uint16``/
``int16`` arrays holding the bf16 bit patterns -- e.g. ``torch_bf16_tensor.view(torch.int16)`` -- converted exactly to
fp32 on load and rounded to nearest-even on store; fp32 accumulation), fp32 and fp64.

Tensor cores (fp16/bf16, m % 16 == 0, n % 8 == 0, k % 16 == 0, whole warps; ``tensor_cores=`` of :func:`matmul`):
the warps form a ``warp_m x warp_n`` grid over C, each owning ``(warp_tile_m / 16) x (warp_tile_n / 8)`` fragments of
16 x 8. Per k-step of 16 a warp reads its A fragments (4 registers of two 16-bit values: rows g, g + 8 and k pairs
2t, 2t + 8 with g = lane // 4, t = lane % 4; one 32-bit load each when A is row-major) and B fragments (2 registers:
k pairs 2t, 2t + 8 of column g) from shared memory and issues ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}``
(inline PTX from :mod:`._intrinsics`) per fragment pair; a thread's accumulators are rows g, g + 8 and columns 2t,
2t + 1 of each fragment. Fragments are loaded with ``ldmatrix`` (one instruction per 16 x 16 A fragment, one per
two 16 x 8 B fragments) when the shared arrays are 16-byte aligned, with scalar shared loads otherwise. Leading
dimensions are padded to 8 more than a multiple of 16 (``lda = k + 8`` or ``m + 8``, ``ldb = n + 8`` or ``n + 16``)
so fragment reads are free of bank conflicts. numba's simulator has no warp-level ``mma``: there the same
description runs a scalar k loop with the same ownership and layout, so CI checks everything but the fragment
registers, which the GPU tests and an emulation of the instruction (tests/test_device.py) check.
"""

import functools
import math
import warnings

import numpy as np

from ._codegen import ConstantPool, DescriptionNamespace, compile_device_functions, simulator_enabled
from ._fft import MAX_SHARED_MEMORY, MAX_THREADS_PER_BLOCK, _int_arg

__all__ = ["matmul", "MatmulDescription"]

ALLOWED_PRECISIONS = ("float16", "bfloat16", "float32", "float64")
ALLOWED_ARRANGEMENTS = ("row_major", "col_major")
MAX_DIM = 512


def _normalize_precision(precision):
    if isinstance(precision, str):
        name = precision.lower()
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "fp64": "float64"}.get(
            name, name
        )
    else:
        name = getattr(precision, "__name__", None) or str(precision)
        try:
            name = np.dtype(precision).name
        except TypeError:
            pass
        if "bfloat16" in str(precision):  # torch.bfloat16, ml_dtypes.bfloat16
            name = "bfloat16"
    if name not in ALLOWED_PRECISIONS:
        raise ValueError(
            f"precision={precision!r} is not supported by the block GEMM; allowed: np.float16, 'bfloat16', "
            "np.float32, np.float64"
        )
    return name


class MatmulDescription(DescriptionNamespace):
    """A block GEMM configuration and its device functions (build it with :func:`matmul`).

    Launch with ``block_dim`` threads (1-D). Operands are flat arrays (shared memory, normally) with fixed leading
    dimensions: A ``m x k`` with ``lda`` padded against bank conflicts (row-major: ``a[i * lda + p]``; col-major:
    ``a[p * lda + i]``; ``a_size`` elements; CUDA cores: ``lda = k + 1`` or ``m + 1``, tensor cores: ``k + 8`` or
    ``m + 8`` and A 4-byte aligned), B ``k x n`` row-major (``b[p * ldb + j]``, ``ldb = n`` on CUDA cores, ``n + 8``
    or ``n + 16`` on tensor cores; ``b_size`` elements), C ``m x n`` row-major (``c[i * n + j]``), in ``storage_dtype``.
    ``tensor_cores`` says which engine the description uses. ``launch_bounds`` is a suggestion for the kernel's
    ``cuda.jit(launch_bounds=...)`` (GPU only; the simulator's ``jit`` has no such argument): it caps registers so
    that two blocks fit on an SM where the accumulators allow it (at 256 threads the 128 x 128 tiles otherwise take
    up to 216 registers and run one block per SM).

    Device functions:

    - ``execute(alpha, a, b, beta, c)``: ``c = alpha * a @ b + beta * c`` (c not read when beta == 0).
    - ``clear(acc)``; ``mma(a, b, acc)``: ``acc += a @ b`` on the thread's register accumulators, a local array of
      ``accumulator_size`` elements of ``compute_dtype``.
    - ``store_accumulator(alpha, acc, beta, c)`` into a flat C; ``store_accumulator_batched(alpha, acc, beta, c3,
      batch)`` into ``c3[batch]`` of a 3-D global array. Both apply the description's ``epilog`` if it has one.
    - ``load_a(a3, batch, k0, smem_a)``, ``load_b(b3, batch, k0, smem_b)``: copy the k-slice starting at ``k0`` of
      ``a3[batch]`` (``(m, K)``) / ``b3[batch]`` (``(K, n)``) into the shared operands (coalesced, all threads);
      ``load_ab(a3, b3, batch, k0, smem_a, smem_b)`` does both with the copies in flight together;
      ``load_c(c3, batch, smem_c)`` / ``store_c(smem_c, c3, batch)``. On the tensor-core paths (sm_80+) the copies
      are 16-byte ``cp.async`` when the arrays are 16-byte aligned.
    - ``load_ab_async(...)`` (same arguments as ``load_ab``) starts the copies and returns; ``wait_loads()`` waits
      for this thread's copies (then synchronise the block). With two buffers a kernel copies the next k-slice while
      it multiplies the current one (``_checks.matmul_pipelined_kernel``). Where the copies are synchronous
      (CUDA cores, the simulator) ``wait_loads`` does nothing.
    - ``commit_loads()`` closes the group of copies started since the last commit; ``wait_pending_loads(n)`` waits
      until at most ``n`` committed groups (0..7) are still in flight. With ``s`` buffers a kernel keeps ``s - 1``
      k-slices in flight while it multiplies one (``_checks.matmul_multistage_kernel``; more than 48 KiB of shared
      memory needs :func:`mathpy.device.allow_shared_memory` before the launch).

    Synchronize the block (``cuda.syncthreads()``) between filling the operands and calling ``execute``/``mma``, and
    before overwriting operands the previous call was reading.
    """

    def __init__(self, m, n, k, precision, block_size, a_arrangement, epilog, warp_grid):
        super().__init__(f"mathpy_device_matmul_{m}x{n}x{k}_{precision}")
        self.m, self.n, self.k = m, n, k
        self.precision = precision
        self.a_arrangement = a_arrangement
        self.epilog = epilog
        self.storage_dtype = np.dtype(np.uint16 if precision == "bfloat16" else precision)
        self.compute_dtype = np.dtype(np.float64 if precision == "float64" else np.float32)
        self.block_size = block_size
        self.block_dim = (block_size, 1, 1)
        self.tensor_cores = warp_grid is not None
        if self.tensor_cores and precision == "float64":
            # fp64 tensor cores (mma.sync.m8n8k4.f64): 8 x 8 fragments, a thread holds 2 values of each (row g,
            # columns 2t, 2t + 1). A row-major with lda = k + 4 and B with ldb = n + 8 (ldb = 8 mod 16 doubles): the
            # fragment reads (8 rows x 4 k, 4 k x 8 columns) fill all 32 banks twice, the least 256 bytes can take.
            self.warp_m, self.warp_n = warp_grid
            self.warp_tile_m, self.warp_tile_n = m // self.warp_m, n // self.warp_n
            self.nt_m = self.nt_n = None
            self.tile_m, self.tile_n = self.warp_tile_m // 8, 2 * (self.warp_tile_n // 8)
            self.lda = k + 4 if a_arrangement == "row_major" else m + 8
            self.ldb = n + 8
        elif self.tensor_cores:
            # Warps form a warp_m x warp_n grid; each owns a (m / warp_m) x (n / warp_n) tile of C made of 16 x 8
            # mma fragments; a thread holds 4 values per fragment (rows g, g + 8; columns 2t, 2t + 1 of it).
            self.warp_m, self.warp_n = warp_grid
            self.warp_tile_m, self.warp_tile_n = m // self.warp_m, n // self.warp_n
            self.nt_m = self.nt_n = None
            self.tile_m, self.tile_n = 2 * (self.warp_tile_m // 16), 2 * (self.warp_tile_n // 8)
            # Leading dimensions padded to 8 elements more than a multiple of 16 (rows 16 bytes past a 32-byte
            # multiple): the 8 rows an ldmatrix reads, and the scalar fragment reads, fall in distinct banks; rows stay
            # 16-byte aligned (ldmatrix, cp.async) and A's pairs 4-byte aligned.
            self.lda = k + 8 if a_arrangement == "row_major" else m + 8
            self.ldb = n + 8 if n % 16 == 0 else n + 16
        else:
            self.warp_m = self.warp_n = self.warp_tile_m = self.warp_tile_n = None
            self.nt_n, self.nt_m = _thread_grid(m, n, block_size)
            self.tile_m, self.tile_n = m // self.nt_m, n // self.nt_n
            # A's leading dimension is padded by one element: rows (row-major) or columns (col-major) then start in
            # different banks, so neither the copy into shared memory nor the reads of the k loop conflict.
            self.lda = k + 1 if a_arrangement == "row_major" else m + 1
            self.ldb = n
        # fp32 on CUDA cores, A row-major: a thread owns groups of 4 consecutive rows and 4 consecutive columns, so
        # its k loop reads 4 k of an A row and 4 columns of a B row as 16-byte vectors (4 shared loads per 64 FMAs
        # for an 8 x 8 tile instead of 16) and both operands are copied with 16-byte cp.async.
        self.vector_tiles = (not self.tensor_cores and precision == "float32" and a_arrangement == "row_major"
                             and k % 4 == 0 and n % 4 == 0 and self.tile_m % 4 == 0 and self.tile_n % 4 == 0)
        if self.vector_tiles:
            self.lda = k + 4
        self.accumulator_size = self.tile_m * self.tile_n
        # Suggested ``cuda.jit(launch_bounds=...)``: room for two blocks per SM (<= 128 registers per thread at 256
        # threads) when the accumulators and ~48 registers of fragments and addresses fit that.
        acc_registers = self.accumulator_size * (2 if precision == "float64" else 1)
        extra = 80 if self.vector_tiles else 48  # vector tiles hold 4 k of each A row and 4 B columns at once
        self.launch_bounds = (block_size, 2 if 2 * block_size * (acc_registers + extra) <= 65536 else 1)
        self.a_size = self.lda * (m if a_arrangement == "row_major" else k)
        self.b_size, self.c_size = k * self.ldb, m * n
        itemsize = self.storage_dtype.itemsize
        self.shared_memory_size_ab = (self.a_size + self.b_size) * itemsize
        self.shared_memory_size = (self.a_size + self.b_size + self.c_size) * itemsize
        if self.shared_memory_size_ab > MAX_SHARED_MEMORY:
            raise ValueError(
                f"the block GEMM m={m}, n={n}, k={k} in {precision} needs {self.shared_memory_size_ab} bytes of shared "
                f"memory for A and B, more than the {MAX_SHARED_MEMORY} allowed; use a smaller k (a k-slice) and "
                "loop over K with mma()"
            )

    def _describe(self):
        engine = (f"tensor cores, warp tile={self.warp_tile_m}x{self.warp_tile_n}" if self.tensor_cores
                  else f"thread tile={self.tile_m}x{self.tile_n}")
        return (
            f"m={self.m} n={self.n} k={self.k} precision={self.precision} block_dim={self.block_dim} "
            f"{engine} shared_memory_size={self.shared_memory_size}"
        )

    _function_names = (
        "execute",
        "clear",
        "mma",
        "store_accumulator",
        "store_accumulator_batched",
        "load_a",
        "load_b",
        "load_ab",
        "load_ab_async",
        "wait_loads",
        "commit_loads",
        "wait_pending_loads",
        "load_c",
        "store_c",
    )

    def _generate_functions(self):
        return _generate(self)

    def _check_function(self, name):
        if name in ("execute", "load_c", "store_c") and self.shared_memory_size > MAX_SHARED_MEMORY:
            raise ValueError(
                f"{name}() keeps C in shared memory: A, B and C need {self.shared_memory_size} bytes, more than "
                f"the {MAX_SHARED_MEMORY} allowed; use mma() with register accumulators and "
                "store_accumulator_batched() instead"
            )


def _thread_grid(m, n, block_size):
    """(threads along n, threads along m) splitting the m x n tile evenly, with the most square thread tile
    (fewest shared-memory reads per multiply-add) and at least 8 threads along n where possible (coalescing)."""
    best, best_score = None, None
    for nt_n in (32, 16, 8, 4, 2, 1):
        if n % nt_n or block_size % nt_n:
            continue
        nt_m = block_size // nt_n
        if m % nt_m:
            continue
        score = abs(math.log2((m // nt_m) / (n // nt_n))) + (1.0 if nt_n < 8 and n >= 8 else 0.0)
        if best_score is None or score < best_score:
            best, best_score = (nt_n, nt_m), score
    return best


def _valid_block_sizes(m, n):
    return [b for b in range(1, min(MAX_THREADS_PER_BLOCK, m * n) + 1) if _thread_grid(m, n, b)]


def _default_block_size(m, n):
    target = min(256, max(32, m * n // 16))
    options = _valid_block_sizes(m, n)
    return min(options, key=lambda b: (abs(math.log2(b / target)), -b))


def _fragment(precision):
    """(rows, columns, k) of one tensor-core fragment: m16n8k16 for fp16/bf16, m8n8k4 for fp64."""
    return (8, 8, 4) if precision == "float64" else (16, 8, 16)


def _warp_grid(m, n, k, block_size, precision="float16"):
    """(warps along m, warps along n) for the tensor-core path, or None when the shape cannot use it: m, n and k
    multiples of the fragment (16, 8, 16; fp64: 8, 8, 4), whole warps, and the warp grid splitting C into whole
    fragments. The most square warp tile wins (fewest fragment loads per mma)."""
    fm, fn, fk = _fragment(precision)
    if m % fm or n % fn or k % fk or block_size % 32:
        return None
    warps = block_size // 32
    best, best_score = None, None
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if m % (fm * wm) or n % (fn * wn):
            continue
        score = (abs(math.log2((m // wm) / (n // wn))), wm)
        if best_score is None or score < best_score:
            best, best_score = (wm, wn), score
    return best


def _default_tensor_core_block_size(m, n, k, precision="float16"):
    # fp64: 32 x 32 warp tiles where that fits 256 threads (64 x 64: 4 warps); 128 x 128 takes 8 warps of 64 x 32
    # (512 threads of 32 x 32 would cap registers at 128 and spill ~400 bytes a thread, measured with ptxas 13.0)
    target = min(256, max(32, m * n // 32)) if precision == "float64" else min(256, max(32, m * n // 16))
    options = [b for b in range(32, MAX_THREADS_PER_BLOCK + 1, 32) if _warp_grid(m, n, k, b, precision)]
    if not options:
        return None
    return min(options, key=lambda b: (abs(math.log2(b / target)), -b))


def _device_supports_mma():
    """False only when a GPU is visible and older than sm_80 (mma.sync m16n8k16 for fp16/bf16 needs sm_80)."""
    try:
        from .. import _cuda

        if not _cuda.is_available():
            return True
        return tuple(_cuda.compute_capability(0)) >= (8, 0)
    except Exception:
        return True


def _owners(d):
    """Header lines and, per accumulator element, the (row, column) expressions of the C element it holds."""
    if d.tensor_cores and d.precision == "float64":
        WTM, WTN, WN = d.warp_tile_m, d.warp_tile_n, d.warp_n
        header = [
            "    tid = cuda.threadIdx.x",
            "    lane = tid % 32",
            "    warp = tid // 32",
            f"    arow = (warp // {WN}) * {WTM} + lane // 4",  # row g of the warp's first fragment
            f"    bcol = (warp % {WN}) * {WTN} + lane // 4",  # column g (B fragments)
            f"    ccol = (warp % {WN}) * {WTN} + 2 * (lane % 4)",  # column 2t (C fragments)
            "    tk = lane % 4",
        ]
        owners = [(f"arow + {fm * 8}", f"ccol + {fn * 8 + q}")
                  for fm in range(WTM // 8) for fn in range(WTN // 8) for q in range(2)]
        return header, owners
    if d.tensor_cores:
        WTM, WTN, WN = d.warp_tile_m, d.warp_tile_n, d.warp_n
        header = [
            "    tid = cuda.threadIdx.x",
            "    lane = tid % 32",
            "    warp = tid // 32",
            f"    arow = (warp // {WN}) * {WTM} + lane // 4",  # row g of the warp's first fragment
            f"    bcol = (warp % {WN}) * {WTN} + lane // 4",  # column g (B fragments)
            f"    ccol = (warp % {WN}) * {WTN} + 2 * (lane % 4)",  # column 2t (C fragments)
            "    tk = 2 * (lane % 4)",
        ]
        owners = []
        for fm in range(WTM // 16):
            for fn in range(WTN // 8):
                for q in range(4):
                    owners.append((f"arow + {fm * 16 + (8 if q >= 2 else 0)}", f"ccol + {fn * 8 + (q & 1)}"))
        return header, owners
    NTM, NTN, TM, TN = d.nt_m, d.nt_n, d.tile_m, d.tile_n
    header = ["    tid = cuda.threadIdx.x", f"    tx = tid % {NTN}", f"    ty = tid // {NTN}"]
    if d.vector_tiles:
        rows = [f"ty * 4 + {gi * NTM * 4 + r}" for gi in range(TM // 4) for r in range(4)]
        cols = [f"tx * 4 + {gj * NTN * 4 + c}" for gj in range(TN // 4) for c in range(4)]
        return header, [(r, c) for r in rows for c in cols]
    owners = [(f"ty + {ii * NTM}", f"tx + {jj * NTN}") for ii in range(TM) for jj in range(TN)]
    return header, owners


def _generate(d):
    M, N, K = d.m, d.n, d.k
    ct = np.float32 if d.compute_dtype == np.float32 else np.float64
    consts = ConstantPool(ct)
    ns = {"COMPUTE": ct, "ZERO": ct(0), "EPILOG": d.epilog}
    sim = simulator_enabled()
    if d.precision == "bfloat16":
        if sim:
            def _bf16_load(x):
                return np.array([(int(x) & 0xFFFF) << 16], np.uint32).view(np.float32)[0]

            def _bf16_store(v):
                u = int(np.array([v], np.float32).view(np.uint32)[0])
                return np.uint16(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        else:
            from numba import cuda
            from numba.cuda import libdevice

            ns["libdevice"] = libdevice

            def _bf16_load(x):
                return libdevice.int_as_float((np.int32(x) & np.int32(0xFFFF)) << np.int32(16))

            def _bf16_store(v):
                u = libdevice.float_as_int(v)
                return (u + np.int32(0x7FFF) + ((u >> np.int32(16)) & np.int32(1))) >> np.int32(16)

            _bf16_load = cuda.jit(device=True, forceinline=True)(_bf16_load)
            _bf16_store = cuda.jit(device=True, forceinline=True)(_bf16_store)
        ns["TOC"], ns["FROMC"] = _bf16_load, _bf16_store
        to_c, from_c = "TOC({})", "FROMC({})"
    elif d.precision == "float16":
        to_c, from_c = "COMPUTE({})", "{}"
    else:
        to_c, from_c = "{}", "{}"

    BS, LDA, LDB = d.block_size, d.lda, d.ldb
    a_row_major = d.a_arrangement == "row_major"
    header, owners = _owners(d)
    n_acc = len(owners)
    assert n_acc == d.accumulator_size

    def a_elem(row, p):
        return f"({row}) * {LDA} + {p}" if a_row_major else f"({p}) * {LDA} + {row}"

    def scalar_kloop(lines):
        """CUDA cores (and the simulator's stand-in for the tensor cores): acc += a[row, p] * b[p, col]."""
        rows = list(dict.fromkeys(r for r, _ in owners))
        cols = list(dict.fromkeys(c for _, c in owners))
        lines.append(f"    for p in range({K}):")
        for i, r in enumerate(rows):
            a_ref = "a[" + a_elem(r, "p") + "]"
            lines.append(f"        a{i} = {to_c.format(a_ref)}")
        for j, c in enumerate(cols):
            lines.append(f"        b{j} = {to_c.format(f'b[p * {LDB} + {c}]')}")
        for e, (r, c) in enumerate(owners):
            lines.append(f"        c{e} = c{e} + a{rows.index(r)} * b{cols.index(c)}")

    def mma_products(lines, pad):
        FM, FN = d.warp_tile_m // 16, d.warp_tile_n // 8
        for fm in range(FM):
            for fn in range(FN):
                e = (fm * FN + fn) * 4
                cs = ", ".join(f"c{e + q}" for q in range(4))
                fa = ", ".join(f"fa{fm}_{r}" for r in range(4))
                lines.append(f"{pad}{cs} = MMA({fa}, fb{fn}_0, fb{fn}_1, {cs})")

    def mma_kloop(lines, pad="    "):
        """Tensor cores: per k-step of 16, load the warp's A and B fragments from shared memory with scalar loads
        (a 16-bit pair per register; B two 16-bit loads) and run mma.sync.m16n8k16 on every (A, B) fragment pair.
        The path for operands whose shared arrays are not 16-byte aligned (ldmatrix needs it)."""
        FM, FN = d.warp_tile_m // 16, d.warp_tile_n // 8
        lines.append(f"{pad}for kk in range({K // 16}):")
        lines.append(f"{pad}    k0 = kk * 16 + tk")
        for fm in range(FM):
            # registers: (row g, k 2t..2t+1), (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..)
            for reg, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
                row, p = f"arow + {fm * 16 + dr}", f"k0 + {dk}"
                if a_row_major:
                    lines.append(f"{pad}    fa{fm}_{reg} = PAIR(a, {a_elem(row, p)})")
                else:
                    lines.append(f"{pad}    fa{fm}_{reg} = PACK(a, {a_elem(row, p)}, {a_elem(row, p + ' + 1')})")
        for fn in range(FN):
            for reg, dk in enumerate((0, 8)):
                idx = f"(k0 + {dk}) * {LDB} + bcol + {fn * 8}"
                lines.append(f"{pad}    fb{fn}_{reg} = PACK(b, {idx}, {idx} + {LDB})")
        mma_products(lines, pad + "    ")

    def ldsm_kloop(lines):
        """Tensor cores with ldmatrix: per k-step of 16, one ``ldmatrix.x4`` per 16 x 16 A fragment (``.trans`` for
        the col-major arrangement) and one ``ldmatrix.x4.trans`` per two 16 x 8 B fragments, instead of 4 and 8
        scalar shared loads; the padded leading dimensions (multiples of 8 values, 16 bytes more than a row) keep
        every 8-row matrix in distinct banks. Needs 16-byte aligned shared arrays (checked per call; else the scalar
        path)."""
        FM, FN = d.warp_tile_m // 16, d.warp_tile_n // 8
        WTM, WTN, WN = d.warp_tile_m, d.warp_tile_n, d.warp_n
        lines += [f"    lrow = (warp // {WN}) * {WTM} + lane % 16",   # A row-major: the row this lane addresses
                  "    lk8 = (lane // 16) * 8",
                  "    tka = lane % 8 + (lane // 16) * 8",            # A col-major: the k row this lane addresses
                  f"    mrow = (warp // {WN}) * {WTM} + ((lane // 8) % 2) * 8",
                  "    tkb = lane % 8 + ((lane // 8) % 2) * 8",       # B: the k row and column this lane addresses
                  f"    ncol = (warp % {WN}) * {WTN} + (lane // 16) * 8",
                  "    if ALIGNED16(a) and ALIGNED16(b):"]
        lines.append(f"        for kk in range({K // 16}):")
        lines.append("            k0 = kk * 16")
        for fm in range(FM):
            regs = ", ".join(f"fa{fm}_{r}" for r in range(4))
            if a_row_major:  # lanes 0-15: rows 0-15 at k0, lanes 16-31: the same rows at k0 + 8
                lines.append(f"            {regs} = LDSM4(a, (lrow + {fm * 16}) * {LDA} + k0 + lk8)")
            else:  # stored k-major: lanes give k rows; matrices (m 0-7 | 8-15) x (k 0-7 | 8-15)
                lines.append(f"            {regs} = LDSM4T(a, (k0 + tka) * {LDA} + mrow + {fm * 16})")
        for fn in range(0, FN, 2):  # matrices (k 0-7 | 8-15) of columns fn * 8.. and (fn + 1) * 8..
            idx = f"(k0 + tkb) * {LDB} + ncol + {fn * 8}"
            if fn + 1 < FN:
                lines.append(f"            fb{fn}_0, fb{fn}_1, fb{fn + 1}_0, fb{fn + 1}_1 = LDSM4T(b, {idx})")
            else:
                lines.append(f"            fb{fn}_0, fb{fn}_1 = LDSM2T(b, {idx})")
        mma_products(lines, "            ")
        lines.append("    else:")
        mma_kloop(lines, "        ")

    def dmma_kloop(lines):
        """fp64 tensor cores: per k-step of 4, one double of A per 8-row fragment (row g, k t), one of B per 8-column
        fragment (k t, column g), and mma.sync.m8n8k4.f64 on every pair."""
        FM, FN = d.warp_tile_m // 8, d.warp_tile_n // 8
        lines.append(f"    for kk in range({K // 4}):")
        lines.append("        k0 = kk * 4 + tk")
        for fm in range(FM):
            lines.append(f"        fa{fm} = a[{a_elem(f'arow + {fm * 8}', 'k0')}]")
        for fn in range(FN):
            lines.append(f"        fb{fn} = b[k0 * {LDB} + bcol + {fn * 8}]")
        for fm in range(FM):
            for fn in range(FN):
                e = (fm * FN + fn) * 2
                lines.append(f"        c{e}, c{e + 1} = DMMA(fa{fm}, fb{fn}, c{e}, c{e + 1})")

    def vector_kloop(lines):
        """fp32 vector tiles: per 4 k and group of 4 owned rows, one 16-byte read of each row (its 4 k), then per k
        one 16-byte read of each owned group of 4 B columns (6 shared loads per k for an 8 x 8 tile, instead of 16;
        a group at a time keeps the registers under the two-blocks-per-SM budget)."""
        rows = list(dict.fromkeys(r for r, _ in owners))
        cols = list(dict.fromkeys(c for _, c in owners))
        lines.append(f"    for p4 in range({K // 4}):")
        lines.append("        p = p4 * 4")
        for g0 in range(0, len(rows), 4):
            for i in range(g0, g0 + 4):
                lines.append(f"        a{i} = V4(a, ({rows[i]}) * {LDA} + p)")
            for q in range(4):
                for j in range(0, len(cols), 4):
                    lines.append(f"        b{j // 4} = V4(b, (p + {q}) * {LDB} + {cols[j]})")
                for e, (r, c) in enumerate(owners):
                    i = rows.index(r)
                    if g0 <= i < g0 + 4:
                        j = cols.index(c)
                        lines.append(f"        c{e} = c{e} + a{i}[{q}] * b{j // 4}[{j % 4}]")

    if d.tensor_cores and not sim and d.precision == "float64":
        from . import _intrinsics

        ns["DMMA"] = _intrinsics.mma_f64
        kloop = dmma_kloop
    elif d.vector_tiles and not sim:
        from . import _intrinsics

        ns["V4"] = _intrinsics.load4_f32_shared
        kloop = vector_kloop
    elif d.tensor_cores and not sim:
        from . import _intrinsics

        ns["PAIR"], ns["PACK"] = _intrinsics.pair_u32, _intrinsics.pack2_u32
        ns["MMA"] = _intrinsics.mma_f16_f32 if d.precision == "float16" else _intrinsics.mma_bf16_f32
        ns.update(LDSM4=_intrinsics.ldmatrix(4, False), LDSM4T=_intrinsics.ldmatrix(4, True),
                  LDSM2T=_intrinsics.ldmatrix(2, True), ALIGNED16=_intrinsics.aligned16)
        kloop = ldsm_kloop
    else:
        kloop = scalar_kloop

    def finish(v):
        return f"EPILOG({v})" if d.epilog is not None else v

    src = []
    # execute
    lines = ["def execute(alpha, a, b, beta, c):", *header, "    al = COMPUTE(alpha)", "    be = COMPUTE(beta)"]
    lines += [f"    c{e} = ZERO" for e in range(n_acc)]
    kloop(lines)
    lines.append("    if be == ZERO:")
    for e, (r, col) in enumerate(owners):
        lines.append(f"        c[({r}) * {N} + {col}] = {from_c.format(f'al * c{e}')}")
    lines.append("    else:")
    for e, (r, col) in enumerate(owners):
        idx = f"({r}) * {N} + {col}"
        cval = to_c.format(f"c[{idx}]")
        lines.append(f"        c[{idx}] = {from_c.format(f'al * c{e} + be * {cval}')}")
    src.append("\n".join(lines))

    # clear / mma
    src.append("def clear(acc):\n" + "\n".join(f"    acc[{e}] = ZERO" for e in range(n_acc)))
    lines = ["def mma(a, b, acc):", *header]
    lines += [f"    c{e} = acc[{e}]" for e in range(n_acc)]
    kloop(lines)
    lines += [f"    acc[{e}] = c{e}" for e in range(n_acc)]
    src.append("\n".join(lines))

    # store_accumulator (flat) and batched
    for name, target, guard in (
        ("store_accumulator", "c[({r}) * " + str(N) + " + {col}]", None),
        ("store_accumulator_batched", "c[batch, {r}, {col}]", "batch < c.shape[0]"),
    ):
        args = "alpha, acc, beta, c" + (", batch" if guard else "")
        lines = [f"def {name}({args}):", *header, "    al = COMPUTE(alpha)", "    be = COMPUTE(beta)"]
        ind = "    "
        if guard:
            lines.append(f"    if not ({guard}):")
            lines.append("        return")
        if guard and d.tensor_cores and not sim and N % 4 == 0 and d.precision != "float64":
            # accumulators 2q and 2q + 1 are neighbours in a row: one 32-bit store per pair when C's rows are
            # 8-byte aligned (half the store instructions of element-wise stores)
            lines.append("    if ALIGNED8(c):")
            for branch, with_c in (("if be == ZERO:", False), ("else:", True)):
                lines.append(f"        {branch}")
                for e in range(0, n_acc, 2):
                    (r, col), (_, col1) = owners[e], owners[e + 1]
                    vals = []
                    for q, cc in ((e, col), (e + 1, col1)):
                        v = f"al * acc[{q}]"
                        if with_c:
                            v += f" + be * {to_c.format(target.format(r=r, col=cc))}"
                        vals.append(finish(v))
                    lines.append(f"            STORE2(c, batch, {r}, {col}, PACK2({vals[0]}, {vals[1]}))")
            lines.append("        return")
        lines.append("    if be == ZERO:")
        for e, (r, col) in enumerate(owners):
            t = target.format(r=r, col=col)
            lines.append(f"{ind}    {t} = {from_c.format(finish(f'al * acc[{e}]'))}")
        lines.append("    else:")
        for e, (r, col) in enumerate(owners):
            t = target.format(r=r, col=col)
            v = f"al * acc[{e}] + be * {to_c.format(t)}"
            lines.append(f"{ind}    {t} = {from_c.format(finish(v))}")
        src.append("\n".join(lines))

    # copies: unsigned index arithmetic (no sign fix-ups for // and %, no negative-index wraparound)
    ns["UINT"] = np.uint64
    for name, value in (("UM", M), ("UN", N), ("UK", K), ("UBS", BS), ("UMK", M * K), ("UKN", K * N), ("UMN", M * N)):
        ns[name] = np.uint64(value)
    ns["ULDA"] = np.uint64(d.lda)
    ns["ULDB"] = np.uint64(d.ldb)
    a_dst = "i * ULDA + kk" if a_row_major else "kk * ULDA + i"
    src.append(
        "def load_a(a3, batch, k0, smem_a):\n"
        "    if batch < a3.shape[0]:\n"
        "        ub = UINT(batch)\n"
        "        uk0 = UINT(k0)\n"
        "        for idx in range(UINT(cuda.threadIdx.x), UMK, UBS):\n"
        "            i = idx // UK\n"
        "            kk = idx - i * UK\n"
        f"            smem_a[{a_dst}] = a3[ub, i, uk0 + kk]"
    )
    b_dst = "idx" if d.ldb == N else "kk * ULDB + (idx - kk * UN)"
    src.append(
        "def load_b(b3, batch, k0, smem_b):\n"
        "    if batch < b3.shape[0]:\n"
        "        ub = UINT(batch)\n"
        "        uk0 = UINT(k0)\n"
        "        for idx in range(UINT(cuda.threadIdx.x), UKN, UBS):\n"
        "            kk = idx // UN\n"
        f"            smem_b[{b_dst}] = b3[ub, uk0 + kk, idx - kk * UN]"
    )
    src.append(
        "def load_ab(a3, b3, batch, k0, smem_a, smem_b):\n"
        "    load_a(a3, batch, k0, smem_a)\n"
        "    load_b(b3, batch, k0, smem_b)"
    )
    src.append(
        "def load_ab_async(a3, b3, batch, k0, smem_a, smem_b):\n"
        "    load_a(a3, batch, k0, smem_a)\n"
        "    load_b(b3, batch, k0, smem_b)"
    )
    src.append("def wait_loads():\n    return")
    src.append(
        "def load_c(c3, batch, smem_c):\n"
        "    if batch < c3.shape[0]:\n"
        "        ub = UINT(batch)\n"
        "        for idx in range(UINT(cuda.threadIdx.x), UMN, UBS):\n"
        "            i = idx // UN\n"
        "            smem_c[idx] = c3[ub, i, idx - i * UN]"
    )
    src.append(
        "def store_c(smem_c, c3, batch):\n"
        "    if batch < c3.shape[0]:\n"
        "        ub = UINT(batch)\n"
        "        for idx in range(UINT(cuda.threadIdx.x), UMN, UBS):\n"
        "            i = idx // UN\n"
        "            c3[ub, i, idx - i * UN] = smem_c[idx]"
    )
    if not sim and ((d.tensor_cores and d.precision == "float64") or d.vector_tiles):
        # fp64 / fp32: 16-byte cp.async copies (2 doubles, 4 floats) when aligned; A row-major only (the col-major
        # arrangement transposes while copying)
        from . import _intrinsics

        per = 16 // d.storage_dtype.itemsize
        ns.update(ALIGNED16=_intrinsics.aligned16, CP16=_intrinsics.cp_async16, CP_WAIT=_intrinsics.cp_async_wait_all,
                  UK2=np.uint64(K // per), UN2=np.uint64(N // per), UMK2=np.uint64(M * K // per),
                  UKN2=np.uint64(K * N // per), U2=np.uint64(per))
        a_copy = (
            "        if ALIGNED16(a3) and ALIGNED16(smem_a) and uk0 % U2 == 0:\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UMK2, UBS):\n"
            "                i = idx // UK2\n"
            "                kk = (idx - i * UK2) * U2\n"
            "                CP16(smem_a, i * ULDA + kk, a3, ub, i, uk0 + kk)\n"
            "        else:\n") if a_row_major else "        if True:\n"
        b_copy = (
            "        if ALIGNED16(b3) and ALIGNED16(smem_b):\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UKN2, UBS):\n"
            "                kk = idx // UN2\n"
            "                j = (idx - kk * UN2) * U2\n"
            "                CP16(smem_b, kk * ULDB + j, b3, ub, uk0 + kk, j)\n"
            "        else:\n")
        body_a = ("    if batch < a3.shape[0]:\n        ub = UINT(batch)\n        uk0 = UINT(k0)\n" + a_copy +
                  "            for idx in range(UINT(cuda.threadIdx.x), UMK, UBS):\n"
                  "                i = idx // UK\n                kk = idx - i * UK\n"
                  f"                smem_a[{a_dst}] = a3[ub, i, uk0 + kk]")
        body_b = ("    if batch < b3.shape[0]:\n        ub = UINT(batch)\n        uk0 = UINT(k0)\n" + b_copy +
                  "            for idx in range(UINT(cuda.threadIdx.x), UKN, UBS):\n"
                  "                kk = idx // UN\n"
                  f"                smem_b[{b_dst}] = b3[ub, uk0 + kk, idx - kk * UN]")
        src[-7] = "def load_a(a3, batch, k0, smem_a):\n" + body_a + "\n    CP_WAIT()"
        src[-6] = "def load_b(b3, batch, k0, smem_b):\n" + body_b + "\n    CP_WAIT()"
        src[-5] = "def load_ab(a3, b3, batch, k0, smem_a, smem_b):\n" + body_a + "\n" + body_b + "\n    CP_WAIT()"
        src[-4] = "def load_ab_async(a3, b3, batch, k0, smem_a, smem_b):\n" + body_a + "\n" + body_b
        src[-3] = "def wait_loads():\n    CP_WAIT()"
    elif d.tensor_cores and not sim:
        # 16-bit operands with k % 16 == 0, n % 8 == 0 and leading dimensions multiple of 8: move 4 elements per
        # 8-byte access when the global array allows it (checked at run time), else element by element.
        from . import _intrinsics

        ns.update(ALIGNED8=_intrinsics.aligned8, LOAD4=_intrinsics.load4_u16, STORE4=_intrinsics.store4_u16,
                  STORE4T=_intrinsics.store4_u16_strided, UK4=np.uint64(K // 4), UN4=np.uint64(N // 4),
                  UMK4=np.uint64(M * K // 4), UKN4=np.uint64(K * N // 4), U4=np.uint64(4),
                  ALIGNED16=_intrinsics.aligned16, CP16=_intrinsics.cp_async16, CP_WAIT=_intrinsics.cp_async_wait_all,
                  UK8=np.uint64(K // 8), UN8=np.uint64(N // 8), UMK8=np.uint64(M * K // 8),
                  UKN8=np.uint64(K * N // 8), U8=np.uint64(8))
        # 16-byte cp.async copies (sm_80+: global to shared without registers) when the operand and the shared
        # buffer are 16-byte aligned; A only in its row-major arrangement (the col-major one transposes).
        a_async = (
            "        if ALIGNED16(a3) and ALIGNED16(smem_a) and uk0 % U8 == 0:\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UMK8, UBS):\n"
            "                i = idx // UK8\n"
            "                kk = (idx - i * UK8) * U8\n"
            "                CP16(smem_a, i * ULDA + kk, a3, ub, i, uk0 + kk)\n"
            "        el") if a_row_major else "        "
        b_async = (
            "        if ALIGNED16(b3) and ALIGNED16(smem_b):\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UKN8, UBS):\n"
            "                kk = idx // UN8\n"
            "                j = (idx - kk * UN8) * U8\n"
            "                CP16(smem_b, kk * ULDB + j, b3, ub, uk0 + kk, j)\n"
            "        el")
        a_store = "STORE4(smem_a, i * ULDA + kk, v)" if a_row_major else "STORE4T(smem_a, kk * ULDA + i, ULDA, v)"
        src[-7] = (
            "def load_a(a3, batch, k0, smem_a):\n"
            "    if batch < a3.shape[0]:\n"
            "        ub = UINT(batch)\n"
            "        uk0 = UINT(k0)\n"
            f"{a_async}if ALIGNED8(a3) and uk0 % U4 == 0:\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UMK4, UBS):\n"
            "                i = idx // UK4\n"
            "                kk = (idx - i * UK4) * U4\n"
            "                v = LOAD4(a3, ub, i, uk0 + kk)\n"
            f"                {a_store}\n"
            "        else:\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UMK, UBS):\n"
            "                i = idx // UK\n"
            "                kk = idx - i * UK\n"
            f"                smem_a[{a_dst}] = a3[ub, i, uk0 + kk]\n"
            "    CP_WAIT()"
        )
        src[-6] = (
            "def load_b(b3, batch, k0, smem_b):\n"
            "    if batch < b3.shape[0]:\n"
            "        ub = UINT(batch)\n"
            "        uk0 = UINT(k0)\n"
            f"{b_async}if ALIGNED8(b3):\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UKN4, UBS):\n"
            "                kk = idx // UN4\n"
            "                j = (idx - kk * UN4) * U4\n"
            "                STORE4(smem_b, kk * ULDB + j, LOAD4(b3, ub, uk0 + kk, j))\n"
            "        else:\n"
            "            for idx in range(UINT(cuda.threadIdx.x), UKN, UBS):\n"
            "                kk = idx // UN\n"
            f"                smem_b[{b_dst}] = b3[ub, uk0 + kk, idx - kk * UN]\n"
            "    CP_WAIT()"
        )
        # load_ab: both copies in flight before one wait (the bodies of load_a / load_b without their waits)
        body_a = src[-7].split("\n", 1)[1].rsplit("\n", 1)[0]
        body_b = src[-6].split("\n", 1)[1].rsplit("\n", 1)[0]
        src[-5] = "def load_ab(a3, b3, batch, k0, smem_a, smem_b):\n" + body_a + "\n" + body_b + "\n    CP_WAIT()"
        src[-4] = "def load_ab_async(a3, b3, batch, k0, smem_a, smem_b):\n" + body_a + "\n" + body_b
        src[-3] = "def wait_loads():\n    CP_WAIT()"
        ns.update(PACK2=_intrinsics.pack2_f16 if d.precision == "float16" else _intrinsics.pack2_bf16,
                  STORE2=_intrinsics.store2_u16)
    # cp.async groups, for kernels with more than two buffers: commit_loads() closes the group of copies issued since
    # the last one, wait_pending_loads(n) waits until at most n groups are still in flight (synchronous copies: no-ops)
    if "CP_WAIT" in ns:
        from . import _intrinsics

        ns.update(CP_COMMIT=_intrinsics.cp_async_commit, CP_WAIT_GROUP=_intrinsics.cp_async_wait_group)
        src += ["def commit_loads():\n    CP_COMMIT()", "def wait_pending_loads(n):\n    CP_WAIT_GROUP(n)"]
    else:
        src += ["def commit_loads():\n    return", "def wait_pending_loads(n):\n    return"]
    ns.update(consts.values)
    source = "\n\n".join(src) + "\n"
    d.source = source
    return compile_device_functions(source, list(d._function_names), ns, d.__name__)


def matmul(m, n, k, precision=np.float32, block_size=None, a_arrangement="row_major", epilog=None,
           tensor_cores=None, *, epilogue=None):
    """Describe a block-level GEMM ``C (m x n) = alpha * A (m x k) @ B (k x n) + beta * C`` and get its device
    functions.

    Parameters
    ----------
    m, n, k : int
        The tile sizes, 1 to 512; A and B together must fit in 48 KiB of shared memory (for a larger K, describe a
        k-slice and loop with ``mma``).
    precision
        ``np.float16``, ``"bfloat16"`` (bf16 bit patterns in uint16/int16 arrays), ``np.float32`` or ``np.float64``.
        fp16 and bf16 accumulate in fp32.
    block_size : int, optional
        Threads per block; default near ``m * n / 16`` (at most 256; fp64 on the tensor cores: ``m * n / 32``). Must
        split the m x n tile evenly.
    a_arrangement : {"row_major", "col_major"}
        Layout of A in shared memory (col-major reads are free of bank conflicts; ``load_a`` transposes while
        copying; row-major fp32 takes the vector tiles and 16-byte copies).
    epilog : numba device function, optional
        ``f(x) -> x`` (compute precision) applied by ``store_accumulator*`` to each ``alpha * acc + beta * c`` value
        before it is stored (e.g. an activation). (``epilogue=`` is its deprecated spelling: mathpy says epilog
        everywhere.)
    tensor_cores : bool, optional
        fp16, bf16 and fp64. None (default): use the tensor cores (fp16/bf16: ``mma.sync.m16n8k16`` with fp32
        accumulation when m is a multiple of 16, n of 8, k of 16; fp64: ``mma.sync.m8n8k4.f64`` when m and n are
        multiples of 8 and k of 4; whole warps; sm_80 or newer), else the CUDA cores; True: require them
        (ValueError when impossible); False: CUDA cores. Under numba's CUDA simulator the tensor-core configuration
        runs its k loop on scalars (same thread ownership of C, same shared-memory layout).

    Examples
    --------
    >>> import numpy as np, mathpy.device
    >>> GEMM = mathpy.device.matmul(64, 64, 32, np.float32)
    >>> GEMM.block_dim, GEMM.accumulator_size, GEMM.shared_memory_size_ab
    ((256, 1, 1), 16, 17408)
    """
    if epilogue is not None:
        if epilog is not None:
            raise ValueError("pass epilog= only (epilogue= is its deprecated spelling)")
        warnings.warn("mathpy.device.matmul(epilogue=...) is deprecated; use epilog=", DeprecationWarning,
                      stacklevel=2)
        epilog = epilogue
    dims = {}
    for name, v in (("m", m), ("n", n), ("k", k)):
        v = _int_arg(name, v)
        if not 1 <= v <= MAX_DIM:
            raise ValueError(f"{name}={v} is not supported by the block GEMM; allowed: 1 to {MAX_DIM}")
        dims[name] = v
    m, n, k = dims["m"], dims["n"], dims["k"]
    precision = _normalize_precision(precision)
    if a_arrangement not in ALLOWED_ARRANGEMENTS:
        raise ValueError(f"a_arrangement={a_arrangement!r} is not supported; allowed: {ALLOWED_ARRANGEMENTS}")
    if tensor_cores not in (None, True, False):
        raise ValueError(f"tensor_cores={tensor_cores!r} is not supported; allowed: None (automatic), True, False")
    capable = precision in ("float16", "bfloat16", "float64")
    if tensor_cores and not capable:
        raise ValueError(f"tensor_cores=True needs precision float16, bfloat16 or float64, not {precision}")
    want_tc = capable and tensor_cores is not False and (tensor_cores or _device_supports_mma())
    fm, fn, fk = _fragment(precision)
    if want_tc and (m % fm or n % fn or k % fk):
        if tensor_cores:
            raise ValueError(f"tensor_cores=True needs m a multiple of {fm}, n of {fn} and k of {fk} for {precision}; "
                             f"got m={m}, n={n}, k={k}")
        want_tc = False
    if block_size is None:
        block_size = _default_tensor_core_block_size(m, n, k, precision) if want_tc else None
        if block_size is None:
            block_size = _default_block_size(m, n)
    block_size = _int_arg("block_size", block_size)
    warp_grid = _warp_grid(m, n, k, block_size, precision) if want_tc else None
    if tensor_cores and warp_grid is None:
        shown = [b for b in range(32, MAX_THREADS_PER_BLOCK + 1, 32) if _warp_grid(m, n, k, b, precision)]
        raise ValueError(f"tensor_cores=True: block_size={block_size} cannot split the {m} x {n} tile into whole "
                         f"fragments per warp; allowed: {shown[:24]}")
    if not (1 <= block_size <= MAX_THREADS_PER_BLOCK) or (warp_grid is None and _thread_grid(m, n, block_size) is None):
        valid = _valid_block_sizes(m, n)
        shown = [b for b in valid if b % 32 == 0] or valid
        raise ValueError(
            f"block_size={block_size} cannot split the {m} x {n} tile evenly (at most {MAX_THREADS_PER_BLOCK} "
            f"threads); allowed: {shown[:24]}"
        )
    if epilog is not None and not callable(epilog):
        raise ValueError(f"epilog={epilog!r} must be a numba device function or None")
    return _cached_matmul(m, n, k, precision, block_size, a_arrangement, epilog, warp_grid)


@functools.lru_cache(maxsize=256)
def _cached_matmul(m, n, k, precision, block_size, a_arrangement, epilog, warp_grid):
    return MatmulDescription(m, n, k, precision, block_size, a_arrangement, epilog, warp_grid)
