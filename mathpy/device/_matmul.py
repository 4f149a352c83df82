"""Block-level GEMM for numba-cuda kernels: description object, validation and code generation.

The block computes ``C = alpha * A @ B + beta * C`` for an ``m x k`` A and a ``k x n`` B held in shared memory
(row-major, or A column-major to make its reads conflict-free), either into a C in shared memory (``execute``) or
into per-thread register accumulators (``mma`` + ``store_accumulator*``; the way to do a GEMM with a K loop). Thread
``tid`` owns the ``TM x TN`` elements at rows ``tid // NT_N + ii * NT_M`` and columns ``tid % NT_N + jj * NT_N``:
a warp reads consecutive B columns (no bank conflicts) and shares A elements (broadcasts). The k loop is a real loop;
the ``TM x TN`` multiply-adds inside it are unrolled straight-line code on scalar variables (registers).

Precisions: fp16 (``np.float16`` storage, fp32 accumulation), bf16 (NumPy has no bfloat16, so storage is ``uint16``/
``int16`` arrays holding the bf16 bit patterns -- e.g. ``torch_bf16_tensor.view(torch.int16)`` -- converted exactly to
fp32 on load and rounded to nearest-even on store; fp32 accumulation), fp32 and fp64. numba-cuda exposes no tensor-core
(``mma``/``wgmma``) instructions, so all precisions run on the CUDA cores.
"""

import functools
import math

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
    dimensions: A ``m x k`` with ``lda`` padded by one against bank conflicts (row-major: ``a[i * lda + p]``,
    ``lda = k + 1``; col-major: ``a[p * lda + i]``, ``lda = m + 1``; ``a_size`` elements), B ``k x n`` row-major
    (``b[p * n + j]``), C ``m x n`` row-major (``c[i * n + j]``), in ``storage_dtype``.

    Device functions:

    - ``execute(alpha, a, b, beta, c)``: ``c = alpha * a @ b + beta * c`` (c not read when beta == 0).
    - ``clear(acc)``; ``mma(a, b, acc)``: ``acc += a @ b`` on the thread's register accumulators, a local array of
      ``accumulator_size`` elements of ``compute_dtype``.
    - ``store_accumulator(alpha, acc, beta, c)`` into a flat C; ``store_accumulator_batched(alpha, acc, beta, c3,
      batch)`` into ``c3[batch]`` of a 3-D global array. Both apply the description's ``epilogue`` if it has one.
    - ``load_a(a3, batch, k0, smem_a)``, ``load_b(b3, batch, k0, smem_b)``: copy the k-slice starting at ``k0`` of
      ``a3[batch]`` (``(m, K)``) / ``b3[batch]`` (``(K, n)``) into the shared operands (coalesced, all threads);
      ``load_c(c3, batch, smem_c)`` / ``store_c(smem_c, c3, batch)``.

    Synchronize the block (``cuda.syncthreads()``) between filling the operands and calling ``execute``/``mma``, and
    before overwriting operands the previous call was reading.
    """

    def __init__(self, m, n, k, precision, block_size, a_arrangement, epilogue):
        super().__init__(f"mathpy_device_matmul_{m}x{n}x{k}_{precision}")
        self.m, self.n, self.k = m, n, k
        self.precision = precision
        self.a_arrangement = a_arrangement
        self.epilogue = epilogue
        self.storage_dtype = np.dtype(np.uint16 if precision == "bfloat16" else precision)
        self.compute_dtype = np.dtype(np.float64 if precision == "float64" else np.float32)
        self.block_size = block_size
        self.block_dim = (block_size, 1, 1)
        self.nt_n, self.nt_m = _thread_grid(m, n, block_size)
        self.tile_m, self.tile_n = m // self.nt_m, n // self.nt_n
        self.accumulator_size = self.tile_m * self.tile_n
        # A's leading dimension is padded by one element: rows (row-major) or columns (col-major) then start in
        # different banks, so neither the copy into shared memory nor the reads of the k loop conflict.
        self.lda = k + 1 if a_arrangement == "row_major" else m + 1
        self.a_size = self.lda * (m if a_arrangement == "row_major" else k)
        self.b_size, self.c_size = k * n, m * n
        itemsize = self.storage_dtype.itemsize
        self.shared_memory_size_ab = (self.a_size + self.b_size) * itemsize
        self.shared_memory_size = (self.a_size + self.b_size + self.c_size) * itemsize
        if self.shared_memory_size_ab > MAX_SHARED_MEMORY:
            raise ValueError(
                f"the block GEMM m={m}, n={n}, k={k} in {precision} needs {self.shared_memory_size_ab} bytes of shared "
                f"memory for A and B, more than the {MAX_SHARED_MEMORY} allowed; use a smaller k (a k-slice) and "
                "loop over K with mma()"
            )
        self._functions = None

    def _describe(self):
        return (
            f"m={self.m} n={self.n} k={self.k} precision={self.precision} block_dim={self.block_dim} "
            f"thread tile={self.tile_m}x{self.tile_n} shared_memory_size={self.shared_memory_size}"
        )

    def __getattr__(self, name):
        if name in _FUNCTIONS:
            if name in ("execute", "load_c", "store_c") and self.shared_memory_size > MAX_SHARED_MEMORY:
                raise ValueError(
                    f"{name}() keeps C in shared memory: A, B and C need {self.shared_memory_size} bytes, more than "
                    f"the {MAX_SHARED_MEMORY} allowed; use mma() with register accumulators and "
                    "store_accumulator_batched() instead"
                )
            functions = self.__dict__.get("_functions")
            if functions is None:
                functions = _generate(self)
                self.__dict__["_functions"] = functions
                for key, v in functions.items():
                    setattr(self, key, v)
            return functions[name]
        raise AttributeError(name)


_FUNCTIONS = (
    "execute",
    "clear",
    "mma",
    "store_accumulator",
    "store_accumulator_batched",
    "load_a",
    "load_b",
    "load_c",
    "store_c",
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


def _generate(d):
    M, N, K = d.m, d.n, d.k
    ct = np.float32 if d.compute_dtype == np.float32 else np.float64
    consts = ConstantPool(ct)
    ns = {"COMPUTE": ct, "ZERO": ct(0), "EPILOGUE": d.epilogue}
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

    TM, TN, NTM, NTN, BS = d.tile_m, d.tile_n, d.nt_m, d.nt_n, d.block_size
    LDA = d.lda
    a_row_major = d.a_arrangement == "row_major"

    def a_index(ii):
        return f"(ty + {ii * NTM}) * {LDA} + p" if a_row_major else f"p * {LDA} + ty + {ii * NTM}"

    def header():
        return ["    tid = cuda.threadIdx.x", f"    tx = tid % {NTN}", f"    ty = tid // {NTN}"]

    def kloop(lines):
        lines.append(f"    for p in range({K}):")
        for ii in range(TM):
            lines.append(f"        a{ii} = {to_c.format(f'a[{a_index(ii)}]')}")
        for jj in range(TN):
            lines.append(f"        b{jj} = {to_c.format(f'b[p * {N} + tx + {jj * NTN}]')}")
        for ii in range(TM):
            for jj in range(TN):
                lines.append(f"        c{ii}_{jj} = c{ii}_{jj} + a{ii} * b{jj}")

    def finish(v):
        return f"EPILOGUE({v})" if d.epilogue is not None else v

    src = []
    # execute
    lines = ["def execute(alpha, a, b, beta, c):", *header(), "    al = COMPUTE(alpha)", "    be = COMPUTE(beta)"]
    lines += [f"    c{ii}_{jj} = ZERO" for ii in range(TM) for jj in range(TN)]
    kloop(lines)
    lines.append("    if be == ZERO:")
    for ii in range(TM):
        for jj in range(TN):
            lines.append(f"        c[(ty + {ii * NTM}) * {N} + tx + {jj * NTN}] = {from_c.format(f'al * c{ii}_{jj}')}")
    lines.append("    else:")
    for ii in range(TM):
        for jj in range(TN):
            idx = f"(ty + {ii * NTM}) * {N} + tx + {jj * NTN}"
            cval = to_c.format(f"c[{idx}]")
            lines.append(f"        c[{idx}] = {from_c.format(f'al * c{ii}_{jj} + be * {cval}')}")
    src.append("\n".join(lines))

    # clear / mma
    src.append("def clear(acc):\n" + "\n".join(f"    acc[{e}] = ZERO" for e in range(TM * TN)))
    lines = ["def mma(a, b, acc):", *header()]
    lines += [f"    c{ii}_{jj} = acc[{ii * TN + jj}]" for ii in range(TM) for jj in range(TN)]
    kloop(lines)
    lines += [f"    acc[{ii * TN + jj}] = c{ii}_{jj}" for ii in range(TM) for jj in range(TN)]
    src.append("\n".join(lines))

    # store_accumulator (flat) and batched
    for name, target, guard in (
        ("store_accumulator", "c[{r} * " + str(N) + " + {col}]", None),
        ("store_accumulator_batched", "c[batch, {r}, {col}]", "batch < c.shape[0]"),
    ):
        args = "alpha, acc, beta, c" + (", batch" if guard else "")
        lines = [f"def {name}({args}):", *header(), "    al = COMPUTE(alpha)", "    be = COMPUTE(beta)"]
        ind = "    "
        if guard:
            lines.append(f"    if not ({guard}):")
            lines.append("        return")
        lines.append("    if be == ZERO:")
        for ii in range(TM):
            for jj in range(TN):
                t = target.format(r=f"(ty + {ii * NTM})", col=f"tx + {jj * NTN}")
                lines.append(f"{ind}    {t} = {from_c.format(finish(f'al * acc[{ii * TN + jj}]'))}")
        lines.append("    else:")
        for ii in range(TM):
            for jj in range(TN):
                t = target.format(r=f"(ty + {ii * NTM})", col=f"tx + {jj * NTN}")
                v = f"al * acc[{ii * TN + jj}] + be * {to_c.format(t)}"
                lines.append(f"{ind}    {t} = {from_c.format(finish(v))}")
        src.append("\n".join(lines))

    # copies: unsigned index arithmetic (no sign fix-ups for // and %, no negative-index wraparound)
    ns["UINT"] = np.uint64
    for name, value in (("UM", M), ("UN", N), ("UK", K), ("UBS", BS), ("UMK", M * K), ("UKN", K * N), ("UMN", M * N)):
        ns[name] = np.uint64(value)
    ns["ULDA"] = np.uint64(d.lda)
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
    src.append(
        "def load_b(b3, batch, k0, smem_b):\n"
        "    if batch < b3.shape[0]:\n"
        "        ub = UINT(batch)\n"
        "        uk0 = UINT(k0)\n"
        "        for idx in range(UINT(cuda.threadIdx.x), UKN, UBS):\n"
        "            kk = idx // UN\n"
        "            smem_b[idx] = b3[ub, uk0 + kk, idx - kk * UN]"
    )
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
    ns.update(consts.values)
    source = "\n\n".join(src) + "\n"
    d.source = source
    return compile_device_functions(source, list(_FUNCTIONS), ns, d.__name__)


def matmul(m, n, k, precision=np.float32, block_size=None, a_arrangement="row_major", epilogue=None):
    """Describe a block-level GEMM ``C (m x n) = alpha * A (m x k) @ B (k x n) + beta * C`` and get its device
    functions.

    Args:
        m, n, k: the tile sizes, 1 to 512; A and B together must fit in 48 KiB of shared memory (for a larger K,
            describe a k-slice and loop with ``mma``).
        precision: ``np.float16``, ``"bfloat16"`` (bf16 bit patterns in uint16/int16 arrays), ``np.float32`` or
            ``np.float64``. fp16 and bf16 accumulate in fp32.
        block_size: threads per block; default near ``m * n / 16`` (at most 256). Must split the m x n tile evenly.
        a_arrangement: ``"row_major"`` (default) or ``"col_major"`` layout of A in shared memory (col-major reads are
            free of bank conflicts; ``load_a`` transposes while copying).
        epilogue: optional numba device function ``f(x) -> x`` (compute precision) applied by ``store_accumulator*``
            to each ``alpha * acc + beta * c`` value before it is stored (e.g. an activation).

    Example:
        >>> import numpy as np, mathpy.device
        >>> GEMM = mathpy.device.matmul(64, 64, 32, np.float32)
        >>> GEMM.block_dim, GEMM.accumulator_size, GEMM.shared_memory_size_ab
        ((256, 1, 1), 16, 16640)
    """
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
    if block_size is None:
        block_size = _default_block_size(m, n)
    block_size = _int_arg("block_size", block_size)
    if not (1 <= block_size <= MAX_THREADS_PER_BLOCK) or _thread_grid(m, n, block_size) is None:
        valid = _valid_block_sizes(m, n)
        shown = [b for b in valid if b % 32 == 0] or valid
        raise ValueError(
            f"block_size={block_size} cannot split the {m} x {n} tile evenly (at most {MAX_THREADS_PER_BLOCK} "
            f"threads); allowed: {shown[:24]}"
        )
    if epilogue is not None and not callable(epilogue):
        raise ValueError(f"epilogue={epilogue!r} must be a numba device function or None")
    return _cached_matmul(m, n, k, precision, block_size, a_arrangement, epilogue)


@functools.lru_cache(maxsize=256)
def _cached_matmul(m, n, k, precision, block_size, a_arrangement, epilogue):
    return MatmulDescription(m, n, k, precision, block_size, a_arrangement, epilogue)
