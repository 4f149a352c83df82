"""Block-level FFT for numba-cuda kernels: description object, validation and code generation.

Algorithm: a Stockham auto-sort FFT over ``log_R(size)`` radix-R stages. Thread ``t`` of an FFT owns the
``elements_per_thread`` (E) values ``t + i * T`` (``T = size // E`` threads per FFT), in registers. Each stage is one or
more radix-R butterflies per thread (R = E, then smaller divisors of E for the remaining factors), fully unrolled with
constant twiddles inside the butterfly; the inter-stage twiddles are computed with ``sincospi`` (no table, no local
memory). With that layout the first stage reads and the last stage writes the thread's own registers, so an FFT of
``s`` stages needs ``s - 1`` exchanges through shared memory. The exchange buffer is planar (real parts, then imaginary
parts) and padded by one element every 32 to spread the strided stores over the banks.
"""

import functools
import math

import numpy as np

from ._codegen import ConstantPool, DescriptionNamespace, compile_device_functions, simulator_enabled

__all__ = ["int_arg", "fft", "FFTDescription", "MAX_SHARED_MEMORY", "MAX_THREADS_PER_BLOCK"]

MAX_SHARED_MEMORY = 48 * 1024  # bytes of dynamic shared memory a kernel gets without an opt-in attribute
MAX_THREADS_PER_BLOCK = 1024
MIN_SIZE, MAX_SIZE = 2, 8192
MAX_ELEMENTS_PER_THREAD = 16
PRIME_FACTORS = (2, 3, 5, 7)
ALLOWED_DIRECTIONS = ("forward", "inverse")
ALLOWED_FFT_TYPES = ("c2c", "r2c", "c2r")
_PRECISION_NAMES = {"float32": np.float32, "float64": np.float64, "complex64": np.float32, "complex128": np.float64}


def _normalize_precision(precision):
    try:
        name = np.dtype(precision).name
    except TypeError:
        name = str(precision)
    if name not in _PRECISION_NAMES:
        raise ValueError(
            f"precision={precision!r} is not supported by the block FFT; allowed: np.float32 or np.float64 "
            "(complex64 / complex128 are accepted as their real precision)"
        )
    return _PRECISION_NAMES[name]


def _pad(p):
    return p + (p >> 5)


def _plane(n):
    """Length of one padded plane (real or imaginary parts) of the shared-memory exchange of an n-point FFT."""
    return _pad(n - 1) + 1


def _is_pow2(n):
    return n >= 1 and n & (n - 1) == 0


def _is_packed(fft_type, size):
    return fft_type != "c2c" and size % 2 == 0 and size >= 4


def _smooth(n):
    for p in PRIME_FACTORS:
        while n % p == 0:
            n //= p
    return n == 1


def _valid_elements_per_thread(size):
    """Values of elements_per_thread that can run *size*: every stage radix must divide it (see _radices) and the
    FFT needs at most 1024 threads."""
    return [
        e
        for e in range(2, min(size, MAX_ELEMENTS_PER_THREAD) + 1)
        if size % e == 0 and size // e <= MAX_THREADS_PER_BLOCK and _radices(size, e) is not None
    ]


def _default_elements_per_thread(size):
    valid = _valid_elements_per_thread(size)
    if not valid:
        return None
    if size <= 16:
        return size
    if _is_pow2(size):
        # 512 with 16 per thread is 32 threads: one warp per FFT, warp-level barriers
        return 8 if size < 512 else 16
    # mixed radix: fewest stages (shared-memory exchanges) first, then closest to 8-16 values per thread
    target = 8 if size < 1024 else 16
    return min(valid, key=lambda e: (len(_radices(size, e)), abs(math.log2(e / target)), -e))


class _Emitter:
    """Collects lines of generated code and hands out fresh variable names."""

    def __init__(self, consts, indent=1):
        self.lines = []
        self.consts = consts
        self.indent = indent
        self._n = 0

    def fresh(self, prefix="v"):
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, line):
        self.lines.append("    " * self.indent + line)

    def assign(self, expr, prefix="v"):
        name = self.fresh(prefix)
        self.emit(f"{name} = {expr}")
        return name

    # complex helpers on (re, im) name pairs
    def add(self, a, b):
        return self.assign(f"{a[0]} + {b[0]}"), self.assign(f"{a[1]} + {b[1]}")

    def sub(self, a, b):
        return self.assign(f"{a[0]} - {b[0]}"), self.assign(f"{a[1]} - {b[1]}")

    def mul(self, a, w):
        re = self.assign(f"{a[0]} * {w[0]} - {a[1]} * {w[1]}")
        im = self.assign(f"{a[0]} * {w[1]} + {a[1]} * {w[0]}")
        return re, im

    def mul_const_twiddle(self, a, k, n, sign):
        """a * exp(sign * 2 pi i k / n) with the cheap cases (+-1, +-i, 45-degree points) written out."""
        k %= n
        if k == 0:
            return a
        ar, ai = a
        if 2 * k == n:
            return self.assign(f"-{ar}"), self.assign(f"-{ai}")
        if 4 * k == n or 4 * k == 3 * n:
            s = sign if 4 * k == n else -sign  # multiply by s*i
            if s > 0:
                return self.assign(f"-{ai}"), ar
            return ai, self.assign(f"-{ar}")
        if 8 * k in (n, 3 * n, 5 * n, 7 * n):
            c = self.consts.add(math.sqrt(0.5))
            oct_ = (8 * k // n) * (1 if sign > 0 else -1) % 8  # angle = oct_ * 45 degrees
            # (ar + i ai) * (cx + i sy) * sqrt(1/2) with cx, sy in {+1, -1}
            cx = 1 if oct_ in (1, 7) else -1
            sy = 1 if oct_ in (1, 3) else -1
            re_expr = f"{ar} {'-' if sy > 0 else '+'} {ai}" if cx > 0 else f"-{ar} {'-' if sy > 0 else '+'} {ai}"
            im_expr = (f"{ai} {'+' if sy > 0 else '-'} {ar}") if cx > 0 else (f"-{ai} {'+' if sy > 0 else '-'} {ar}")
            return self.assign(f"({re_expr}) * {c}"), self.assign(f"({im_expr}) * {c}")
        ang = sign * 2.0 * math.pi * k / n
        w = (self.consts.add(math.cos(ang)), self.consts.add(math.sin(ang)))
        return self.mul(a, w)

    def dft(self, xs, sign):
        """Straight-line decimation-in-time DFT of the (re, im) name pairs *xs*: radix-2 splits, then the
        smallest odd prime factor p (p sub-DFTs combined with constant twiddles; a prime length is a direct DFT)."""
        n = len(xs)
        if n == 1:
            return list(xs)
        if n % 2:
            p = next(f for f in range(3, n + 1) if n % f == 0)
            m = n // p
            subs = [self.dft(xs[j::p], sign) for j in range(p)] if m > 1 else [[x] for x in xs]
            out = []
            for k in range(n):
                acc = subs[0][k % m]
                for j in range(1, p):
                    acc = self.add(acc, self.mul_const_twiddle(subs[j][k % m], j * k, n, sign))
                out.append(acc)
            return out
        even = self.dft(xs[0::2], sign)
        odd = self.dft(xs[1::2], sign)
        out = [None] * n
        for k in range(n // 2):
            t = self.mul_const_twiddle(odd[k], k, n, sign)
            out[k] = self.add(even[k], t)
            out[k + n // 2] = self.sub(even[k], t)
        return out


class FFTDescription(DescriptionNamespace):
    """A block FFT configuration and its device functions (build it with :func:`fft`, which checks the arguments and
    caches descriptions; its parameters are this constructor's, resolved).

    Parameters
    ----------
    size, precision, direction, fft_type, elements_per_thread, ffts_per_block
        As :func:`fft` takes them, with defaults resolved (precision as ``np.float32`` / ``np.float64``).

    Raises
    ------
    ValueError
        The configuration needs more shared memory than a block has (the message says how many FFTs per block fit).

    Launch with ``block_dim`` threads and ``shared_memory_size`` bytes of dynamic shared memory; a block computes
    ``ffts_per_block`` FFTs, FFT number ``threadIdx.y`` of the block using threads ``threadIdx.x < T``.

    Device functions (call them inside ``@numba.cuda.jit`` kernels). Every thread of the block must call
    ``execute``: it synchronizes the threads of each FFT (``sync_scope``: with ``"warp"`` -- an FFT's threads share a
    warp -- a ``__syncwarp``, otherwise the whole block), so do not rely on it as a block-wide barrier.

    - ``execute(thread_data, shared_mem)``: transform in place. ``thread_data`` is a local complex array of
      ``storage_size`` elements holding elements ``threadIdx.x + i * T``; ``shared_mem`` is the kernel's dynamic shared
      array of the real precision (``cuda.shared.array(0, numba.float32)``).
    - ``load(x, thread_data, batch)`` / ``store(thread_data, y, batch)``: coalesced copies between the thread data and
      row ``batch`` of a 2-D array (``(n_batch, input_length)`` / ``(n_batch, output_length)``); rows past the end
      load zeros and store nothing.
    - ``multiply(thread_data, f)``: multiply element ``k`` of the thread data by ``f[k]`` (a 1-D complex array of
      ``output_length`` elements in global memory, e.g. a convolution filter; complex64 filters are read through the
      read-only cache, so the kernel must not write ``f``); for ``r2c`` only elements ``k <= size//2`` (the others
      are not part of the result).
    - ``batch_index()``: ``blockIdx.x * ffts_per_block + threadIdx.y``.

    Real transforms of even size (``packed``) run a complex FFT of ``size/2`` points (``elements_per_thread`` and
    ``T`` refer to it) plus a pre-/post-processing exchange, and ``storage_size`` is ``elements_per_thread + 1``.
    ``r2c``: before ``execute`` element ``i`` holds the real pair ``(x[2k], x[2k+1])``, ``k = threadIdx.x + i*T``;
    afterwards ``X[k]``, and slot ``elements_per_thread`` of thread 0 holds ``X[size/2]``. ``c2r``: the reverse
    (the imaginary parts of ``X[0]`` and ``X[size/2]`` are ignored). Odd sizes run the full-length complex transform
    with real values in the real parts (``r2c``) / the half spectrum at ``k <= size//2`` (``c2r``). The ``load``,
    ``store`` and ``multiply`` helpers know these layouts.
    The transforms are unnormalized (like cuFFT and ``numpy.fft`` forward); the inverse is ``size *`` numpy's ifft.

    Examples
    --------
    >>> import numpy as np, mathpy.device
    >>> FFT = mathpy.device.fft(size=64, precision=np.float32)
    >>> FFT.block_dim, FFT.storage_size, FFT.grid_dim(100)
    ((8, 32, 1), 8, (4, 1, 1))
    """

    def __init__(self, size, precision, direction, fft_type, elements_per_thread, ffts_per_block):
        super().__init__(f"mathpy_device_fft_{fft_type}_{direction}_{size}")
        self.size = size
        self.precision = precision
        self.direction = direction
        self.fft_type = fft_type
        self.elements_per_thread = elements_per_thread
        self.ffts_per_block = ffts_per_block
        # Real transforms of even size run as a complex FFT of size/2 on packed pairs (x[2j] + i x[2j+1]) plus a
        # post-/pre-processing step; the extra thread-data slot holds the Nyquist element X[size/2] (thread 0).
        self.packed = _is_packed(fft_type, size)
        n_c = size // 2 if self.packed else size
        self._n_complex = n_c
        self.storage_size = elements_per_thread + (1 if self.packed else 0)
        self.threads_per_fft = n_c // elements_per_thread
        self.block_dim = (self.threads_per_fft, ffts_per_block, 1)
        self.block_size = self.threads_per_fft * ffts_per_block
        self.complex_dtype = np.dtype(np.complex64 if precision is np.float32 else np.complex128)
        self.real_dtype = np.dtype(precision)
        self.input_length = size // 2 + 1 if fft_type == "c2r" else size
        self.output_length = size // 2 + 1 if fft_type == "r2c" else size
        self.input_dtype = self.real_dtype if fft_type == "r2c" else self.complex_dtype
        self.output_dtype = self.real_dtype if fft_type == "c2r" else self.complex_dtype
        self.radices = _radices(n_c, elements_per_thread)
        needs_shared = self.threads_per_fft > 1 and (len(self.radices) > 1 or fft_type != "c2c")
        plane = _plane(n_c)
        itemsize = self.real_dtype.itemsize
        if not needs_shared:
            self.shared_layout, per_fft = "none", 0
        elif ffts_per_block * 2 * plane * itemsize <= MAX_SHARED_MEMORY:
            self.shared_layout, per_fft = "planar", 2 * plane
        else:
            self.shared_layout, per_fft = "split", plane  # real and imaginary parts exchanged one after the other
        # The threads of FFT y are the linear ids [y*T, (y+1)*T): inside one warp when T divides 32. Then the
        # exchanges need only __syncwarp, provided the block holds whole warps (every lane reaches the barrier).
        if self.threads_per_fft <= 32 and 32 % self.threads_per_fft == 0 and self.block_size % 32 == 0:
            self.sync_scope = "warp"
        else:
            self.sync_scope = "block"
        self._plane = plane
        self._per_fft = per_fft
        self.shared_memory_size = ffts_per_block * per_fft * itemsize
        if self.shared_memory_size > MAX_SHARED_MEMORY:
            raise ValueError(
                f"the block FFT (size={size}, precision={self.real_dtype.name}, ffts_per_block={ffts_per_block}) "
                f"needs {self.shared_memory_size} bytes of shared memory, more than the {MAX_SHARED_MEMORY} allowed; "
                f"use fewer ffts_per_block (at most {max(1, MAX_SHARED_MEMORY // (plane * itemsize))}) "
                "or a smaller size"
            )

    def _describe(self):
        return (
            f"size={self.size} precision={self.real_dtype.name} {self.fft_type} {self.direction} "
            f"elements_per_thread={self.elements_per_thread} ffts_per_block={self.ffts_per_block} "
            f"block_dim={self.block_dim} shared_memory_size={self.shared_memory_size}"
        )

    def grid_dim(self, batch):
        """Blocks needed for *batch* FFTs."""
        return (max(1, -(-int(batch) // self.ffts_per_block)), 1, 1)

    # Device functions are generated on first access and cached on the (cached) description.
    _function_names = ("execute", "load", "store", "multiply", "batch_index")

    def _generate_functions(self):
        return _generate(self)


def _radices(size, ept):
    """Stage radices for *size* with *ept* elements per thread: each divides ept (so a thread runs ept // R
    butterflies per stage), largest first. None when size has a factor that no divisor of ept covers."""
    radices, rest = [], size
    while rest > 1:
        r = math.gcd(rest, ept)
        if r == 1:
            return None
        radices.append(r)
        rest //= r
    return radices


def _generate(d):
    rt = np.float32 if d.real_dtype == np.float32 else np.float64
    consts = ConstantPool(rt)
    n, ept, T = d._n_complex, d.elements_per_thread, d.threads_per_fft
    packed = d.packed
    sign = -1 if d.direction == "forward" else 1
    half = n // 2
    ns = {
        "ZERO": rt(0),
        "ZEROC": d.complex_dtype.type(0),
        "REAL": rt,
        "PLANE": d._plane,
        "PER_FFT": d._per_fft,
    }
    if simulator_enabled():
        def _sincospi(x):
            return rt(math.sin(math.pi * x)), rt(math.cos(math.pi * x))
    else:
        from numba.cuda import libdevice

        _sincospi = libdevice.sincospif if rt is np.float32 else libdevice.sincospi
    ns["sincospi"] = _sincospi

    em = _Emitter(consts)
    src = []
    pow2 = _is_pow2(n)
    # An FFT whose threads share one warp only needs a warp barrier (the simulator has no syncwarp; there the
    # block barrier, which orders strictly more, stands in for it).
    SYNC = "cuda.syncwarp()" if d.sync_scope == "warp" and not simulator_enabled() else "cuda.syncthreads()"

    def kmod(expr, m):
        return f"({expr}) & {m - 1}" if _is_pow2(m) else f"({expr}) % {m}"
    ns["UINT"] = np.uint64

    def ucon(value):
        name = f"_U{value}"
        ns[name] = np.uint64(value)
        return name

    # ---------------- execute ----------------
    em.emit("t = cuda.threadIdx.x")
    em.emit("base = cuda.threadIdx.y * PER_FFT")
    regs = []
    for i in range(ept):
        v = em.assign(f"thread_data[{i}]", "c")
        re = em.assign(f"{v}.real", "r")
        im = "ZERO" if d.fft_type == "r2c" and not packed else em.assign(f"{v}.imag", "i")
        regs.append((re, im))
    split = d.shared_layout == "split"
    off_im = 0 if split else d._plane

    def mirror_exchange(values, mirror_index, own):
        """Write each thread's values (element k = t + i*T) to shared memory, then read element mirror_index(i)
        (a code string, or None when own(i) supplies the value in registers). Returns the mirrored (re, im)."""
        got = [[None, None] for _ in range(ept)]
        for pi in ([0, 1] if split else [None]):
            for i in range(ept):
                em.emit(f"q = t + {i * T}")
                em.emit("qb = UINT(base + q + (q >> 5))")
                if pi in (None, 0):
                    em.emit(f"shared_mem[qb] = {values[i][0]}")
                if pi in (None, 1):
                    em.emit(f"shared_mem[qb + {ucon(off_im)}] = {values[i][1]}")
            em.emit(SYNC)
            for i in range(ept):
                names = [em.fresh("mr"), em.fresh("mi")]
                special = own(i)
                if special is not None:
                    cond, (sr, si) = special
                    em.emit(f"if {cond}:")
                    em.emit(f"    {names[0]} = {sr}")
                    em.emit(f"    {names[1]} = {si}")
                    em.emit("else:")
                    ind = "    "
                else:
                    ind = ""
                em.emit(f"{ind}m = {mirror_index(i)}")
                em.emit(f"{ind}qb = UINT(base + m + (m >> 5))")
                if pi in (None, 0):
                    em.emit(f"{ind}{names[0]} = shared_mem[qb]")
                if pi in (None, 1):
                    em.emit(f"{ind}{names[1]} = shared_mem[qb + {ucon(off_im)}]")
                if pi == 0:
                    got[i][0] = names[0]
                elif pi == 1:
                    got[i][1] = names[1]
                else:
                    got[i] = names
            em.emit(SYNC)
        return [tuple(g) for g in got]

    def twiddle_wk(sign_k):
        """exp(sign_k * 2 pi i (t + i*T) / size) for each register i: one sincospi per thread, constant steps."""
        em.emit(f"ws0, wc0 = sincospi(REAL(t) * {consts.add(sign_k * 2.0 / d.size)})")
        out = []
        for i in range(ept):
            step = (consts.add(math.cos(sign_k * 2 * math.pi * i * T / d.size)),
                    consts.add(math.sin(sign_k * 2 * math.pi * i * T / d.size)))
            out.append(("wc0", "ws0") if i == 0 else em.mul(("wc0", "ws0"), step))
        return out

    if packed and d.fft_type == "c2r":
        # Z[k] = (X[k] + conj X[M-k]) + i W_N^-k (X[k] - conj X[M-k]), k < M = size/2; X[M] is slot ept (thread 0)
        # The imaginary parts of X[0] and X[M] do not exist in a Hermitian spectrum: ignore them (as numpy and
        # the full-length transform do).
        xm = (em.assign(f"thread_data[{ept}].real", "r"), "ZERO")
        x0i = em.assign(regs[0][1], "i")
        em.emit("if t == 0:")
        em.emit(f"    {x0i} = ZERO")
        regs[0] = (regs[0][0], x0i)
        if T == 1:
            mir = [xm if i == 0 else regs[n - i] for i in range(ept)]
        else:
            mir = mirror_exchange(
                regs, lambda i: f"{n} - t - {i * T}", lambda i: ("t == 0", xm) if i == 0 else None
            )
        ws = twiddle_wk(+1)
        new = []
        for i in range(ept):
            (xr, xi), (mr, mi) = regs[i], mir[i]
            a = (em.assign(f"{xr} + {mr}"), em.assign(f"{xi} - {mi}"))
            b = (em.assign(f"{xr} - {mr}"), em.assign(f"{xi} + {mi}"))
            c = em.mul(b, ws[i])
            new.append((em.assign(f"{a[0]} - {c[1]}"), em.assign(f"{a[1]} + {c[0]}")))
        regs = new

    if d.fft_type == "c2r" and not packed:
        # Hermitian completion: element k > size/2 is conj(element size - k).
        if T == 1:
            for i in range(half + 1, n):
                m_re, m_im = regs[n - i]
                regs[i] = (m_re, em.assign(f"-{m_im}"))
        else:
            planes = [(0, 0), (1, 1)] if split else [(None, None)]
            for pi, _ in planes:
                for i in range(ept):
                    if i * T > half:  # never a source
                        continue
                    em.emit(f"k = t + {i * T}")
                    em.emit(f"if k <= {half}:")
                    em.emit("    q = k + (k >> 5)")
                    if pi in (None, 0):
                        em.emit(f"    shared_mem[base + q] = {regs[i][0]}")
                    if pi in (None, 1):
                        em.emit(f"    shared_mem[base + {0 if split else d._plane} + q] = {regs[i][1]}")
                em.emit(SYNC)
                for i in range(ept // 2, ept):
                    re, im = regs[i]
                    new_re = re if pi == 1 else em.fresh("r")
                    new_im = im if pi == 0 else em.fresh("i")
                    if pi in (None, 0):
                        em.emit(f"{new_re} = {re}")
                    if pi in (None, 1):
                        em.emit(f"{new_im} = {im}")
                    em.emit(f"k = t + {i * T}")
                    em.emit(f"if k > {half}:")
                    em.emit(f"    m = {n} - k")
                    em.emit("    q = m + (m >> 5)")
                    if pi in (None, 0):
                        em.emit(f"    {new_re} = shared_mem[base + q]")
                    if pi in (None, 1):
                        em.emit(f"    {new_im} = -shared_mem[base + {0 if split else d._plane} + q]")
                    regs[i] = (new_re, new_im)
                em.emit(SYNC)

    ns_prod = 1
    nstages = len(d.radices)
    loaded = None
    for si, R in enumerate(d.radices):
        B = ept // R
        outs = []
        for s in range(B):
            if si == 0:
                ins = [regs[s + r * B] for r in range(R)]
            else:
                ins = loaded[s]
            if ns_prod > 1:
                em.emit(f"k = {kmod(f't + {s * T}', ns_prod)}")
                em.emit("kf = REAL(k)")
                # w_r = exp(sign 2 pi i k r / (Ns R)): w_1 and w_4 from sincospi, the others by at most 3 products
                ws = {}
                for direct in (1, 4):
                    if direct < R:
                        sn, cs = em.fresh("ws"), em.fresh("wc")
                        em.emit(f"{sn}, {cs} = sincospi(kf * {consts.add(sign * 2.0 * direct / (ns_prod * R))})")
                        ws[direct] = (cs, sn)
                for r in range(2, R):
                    if r in ws:
                        continue
                    if r == 2 or r == 8:
                        ws[r] = em.mul(ws[r // 2], ws[r // 2])
                    else:
                        hi = 1 << (r.bit_length() - 1)
                        ws[r] = em.mul(ws[hi], ws[r - hi])
                ins = [ins[0]] + [em.mul(ins[r], ws[r]) for r in range(1, R)]
            outs.append(em.dft(ins, sign))
        if si == nstages - 1:
            for s in range(B):
                for r in range(R):
                    regs[s + r * B] = outs[s][r]
            break
        # Exchange through shared memory. Position p of the Stockham output goes to the padded slot p + (p >> 5);
        # the padding is split into a per-thread base and per-element constants (see _write_offsets), and indices
        # are unsigned so numba emits no negative-index wraparound.
        R2 = d.radices[si + 1]
        B2 = ept // R2
        stride2 = n // R2
        loaded = [[[None, None] for _ in range(R2)] for _ in range(B2)]
        passes = [0, 1] if split else [None]
        off_im = 0 if split else d._plane
        for pi in passes:
            for s in range(B):
                if not pow2:
                    # general sizes: pad each position at run time
                    em.emit(f"k = {kmod(f't + {s * T}', ns_prod)}")
                    em.emit(f"a = (t + {s * T} - k) * {R} + k")
                    for r in range(R):
                        em.emit(f"q = a + {r * ns_prod}")
                        em.emit("qb = UINT(base + q + (q >> 5))")
                        if pi in (None, 0):
                            em.emit(f"shared_mem[qb] = {outs[s][r][0]}")
                        if pi in (None, 1):
                            em.emit(f"shared_mem[qb + {ucon(off_im)}] = {outs[s][r][1]}")
                    continue
                if ns_prod == 1:
                    em.emit(f"a = (t + {s * T}) * {R}")
                    em.emit("qb = UINT(base + a + (a >> 5))")
                else:
                    em.emit(f"k = (t + {s * T}) & {ns_prod - 1}")
                    em.emit(f"a = (t + {s * T} - k) * {R}")
                    if ns_prod >= 32:
                        em.emit("qb = UINT(base + a + (a >> 5) + k + (k >> 5))")
                    else:
                        em.emit("qb = UINT(base + a + (a >> 5) + k)")
                for r in range(R):
                    c = r * ns_prod
                    if ns_prod * R > 32:
                        c += (r * ns_prod) >> 5 if ns_prod < 32 else r * (ns_prod >> 5)
                    if pi in (None, 0):
                        em.emit(f"shared_mem[qb + {ucon(c)}] = {outs[s][r][0]}")
                    if pi in (None, 1):
                        em.emit(f"shared_mem[qb + {ucon(c + off_im)}] = {outs[s][r][1]}")
            em.emit(SYNC)
            for s in range(B2):
                if stride2 % 32 == 0:
                    em.emit(f"q = t + {s * T}")
                    em.emit("qb = UINT(base + q + (q >> 5))")
                for r in range(R2):
                    if stride2 % 32 == 0:
                        idx = f"qb + {ucon(r * stride2 + (r * stride2 >> 5))}"
                        idx_im = f"qb + {ucon(r * stride2 + (r * stride2 >> 5) + off_im)}"
                    else:
                        em.emit(f"q = t + {s * T + r * stride2}")
                        em.emit("qb = UINT(base + q + (q >> 5))")
                        idx, idx_im = "qb", f"qb + {ucon(off_im)}"
                    if pi in (None, 0):
                        loaded[s][r][0] = em.assign(f"shared_mem[{idx}]", "r")
                    if pi in (None, 1):
                        loaded[s][r][1] = em.assign(f"shared_mem[{idx_im}]", "i")
            em.emit(SYNC)
        loaded = [[tuple(x) for x in row] for row in loaded]
        ns_prod *= R

    if packed and d.fft_type == "r2c":
        # X[k] = (Z[k] + conj Z[M-k]) / 2 - i/2 W_N^k (Z[k] - conj Z[M-k]); X[M] = Re Z[0] - Im Z[0]
        if T == 1:
            mir = [regs[(n - i) % n] for i in range(ept)]
        else:
            mir = mirror_exchange(regs, lambda i: kmod(f"{n} - t - {i * T}", n), lambda i: None)
        ws = twiddle_wk(-1)
        hf = consts.add(0.5)
        em.emit(f"thread_data[{ept}] = complex({regs[0][0]} - {regs[0][1]}, ZERO)")
        new = []
        for i in range(ept):
            (zr, zi), (mr, mi) = regs[i], mir[i]
            fe = (em.assign(f"({zr} + {mr}) * {hf}"), em.assign(f"({zi} - {mi}) * {hf}"))
            fo = (em.assign(f"({zi} + {mi}) * {hf}"), em.assign(f"({mr} - {zr}) * {hf}"))
            c = em.mul(fo, ws[i])
            new.append(em.add(fe, c))
        regs = new

    for i in range(ept):
        re, im = regs[i]
        if d.fft_type == "c2r" and not packed:
            em.emit(f"thread_data[{i}] = complex({re}, ZERO)")
        else:
            em.emit(f"thread_data[{i}] = complex({re}, {im})")
    src.append("def execute(thread_data, shared_mem):\n" + "\n".join(em.lines) + "\n")

    # ---------------- load / store ----------------
    vector_c64 = d.complex_dtype == np.complex64 and not simulator_enabled()
    if vector_c64:
        from ._intrinsics import load_c64, load_c64_readonly, store_c64

        ns["LOADC"], ns["STOREC"], ns["LOADRO"] = load_c64, store_c64, load_c64_readonly

    def ld(arr, idx):
        return f"LOADC({arr}, ub, {idx})" if vector_c64 else f"{arr}[ub, {idx}]"

    def st(arr, idx, value):
        return f"STOREC({arr}, ub, {idx}, {value})" if vector_c64 else f"{arr}[ub, {idx}] = {value}"

    lines = ["def load(x, thread_data, batch):", "    t = UINT(cuda.threadIdx.x)"]
    lines += ["    if batch < x.shape[0]:", "        ub = UINT(batch)"]
    for i in range(ept):
        idx = f"t + {ucon(i * T)}"
        if packed and d.fft_type == "r2c":  # pairs of reals -> one complex
            j2 = f"(t + {ucon(i * T)}) * {ucon(2)}"
            lines.append(f"        thread_data[{i}] = complex(x[ub, {j2}], x[ub, {j2} + {ucon(1)}])")
        elif d.fft_type == "c2c" or packed:
            lines.append(f"        thread_data[{i}] = {ld('x', idx)}")
        elif d.fft_type == "r2c":
            lines.append(f"        thread_data[{i}] = complex(x[ub, {idx}], ZERO)")
        else:  # c2r: only k <= size/2 exists in the input
            if (i + 1) * T - 1 <= half:
                lines.append(f"        thread_data[{i}] = {ld('x', idx)}")
            elif i * T <= half:
                lines.append(f"        if {idx} <= {ucon(half)}:")
                lines.append(f"            thread_data[{i}] = {ld('x', idx)}")
                lines.append("        else:")
                lines.append(f"            thread_data[{i}] = ZEROC")
            else:
                lines.append(f"        thread_data[{i}] = ZEROC")
    if packed:
        value = ld("x", ucon(n)) if d.fft_type == "c2r" else "ZEROC"
        lines.append(f"        thread_data[{ept}] = {value}")
    lines.append("    else:")
    for i in range(d.storage_size):
        lines.append(f"        thread_data[{i}] = ZEROC")
    src.append("\n".join(lines) + "\n")

    lines = ["def store(thread_data, y, batch):", "    t = UINT(cuda.threadIdx.x)"]
    lines += ["    if batch < y.shape[0]:", "        ub = UINT(batch)"]
    for i in range(ept):
        idx = f"t + {ucon(i * T)}"
        if packed and d.fft_type == "c2r":  # one complex -> pairs of reals
            j2 = f"(t + {ucon(i * T)}) * {ucon(2)}"
            lines.append(f"        y[ub, {j2}] = thread_data[{i}].real")
            lines.append(f"        y[ub, {j2} + {ucon(1)}] = thread_data[{i}].imag")
        elif d.fft_type == "c2c" or packed:
            lines.append(f"        {st('y', idx, f'thread_data[{i}]')}")
        elif d.fft_type == "c2r":
            lines.append(f"        y[ub, {idx}] = thread_data[{i}].real")
        else:
            if (i + 1) * T - 1 <= half:
                lines.append(f"        {st('y', idx, f'thread_data[{i}]')}")
            elif i * T <= half:
                lines.append(f"        if {idx} <= {ucon(half)}:")
                lines.append(f"            {st('y', idx, f'thread_data[{i}]')}")
    if packed and d.fft_type == "r2c":
        lines.append(f"        if t == {ucon(0)}:")
        lines.append(f"            {st('y', ucon(n), f'thread_data[{ept}]')}")
    src.append("\n".join(lines) + "\n")

    lines = ["def multiply(thread_data, f):", "    t = UINT(cuda.threadIdx.x)"]
    for i in range(ept):
        idx = f"t + {ucon(i * T)}"
        fk = f"LOADRO(f, {idx})" if vector_c64 else f"f[{idx}]"
        if d.fft_type != "r2c" or packed or (i + 1) * T - 1 <= half:
            lines.append(f"    thread_data[{i}] = thread_data[{i}] * {fk}")
        elif i * T <= half:
            lines.append(f"    if {idx} <= {ucon(half)}:")
            lines.append(f"        thread_data[{i}] = thread_data[{i}] * {fk}")
    if packed and d.fft_type == "r2c":
        fk = f"LOADRO(f, {ucon(n)})" if vector_c64 else f"f[{ucon(n)}]"
        lines.append(f"    thread_data[{ept}] = thread_data[{ept}] * {fk}")
    src.append("\n".join(lines) + "\n")

    src.append(
        "def batch_index():\n"
        f"    return cuda.blockIdx.x * {d.ffts_per_block} + cuda.threadIdx.y\n"
    )
    ns.update(consts.values)
    source = "\n".join(src)
    d.source = source
    return compile_device_functions(source, list(d._function_names), ns, d.__name__)


def _check_choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed: {', '.join(repr(a) for a in allowed)}")


def fft(
    size,
    precision=np.float32,
    direction=None,
    fft_type="c2c",
    ffts_per_block=None,
    elements_per_thread=None,
):
    """Describe a block-level FFT and get its device functions.

    Parameters
    ----------
    size : int
        Transform length from 2 to 8192 made of the prime factors 2, 3, 5, 7 (powers of two are the fast path;
        limited further by shared memory and 1024 threads).
    precision : dtype, optional
        ``np.float32`` (default) or ``np.float64`` (``np.complex64``/``np.complex128`` mean the same).
    direction : {"forward", "inverse"}, optional
        Defaults to forward for c2c/r2c and inverse for c2r.
    fft_type : {"c2c", "r2c", "c2r"}, optional
        ``"r2c"`` is forward only, ``"c2r"`` inverse only.
    ffts_per_block : int, optional
        FFTs computed by one block (the block's ``threadIdx.y``); the default aims at 256 threads.
    elements_per_thread : int, optional
        Values each thread holds in registers, 2 to 16, dividing ``size`` so that every stage radix divides it;
        default 16 for size >= 512, 8 from 32 to 256 (powers of two), ``size`` up to 16.

    Returns
    -------
    FFTDescription
        Cached: equal arguments return the same object, so kernels reuse compiled code.

    Raises
    ------
    ValueError
        For an unsupported size, precision, direction, type or block shape, naming the allowed values.

    Notes
    -----
    Device functions run inside numba-cuda kernels on a GPU, and on the CPU under numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``), which the test suite uses to check them against NumPy.

    Examples
    --------
    >>> import numpy as np, mathpy.device
    >>> FFT = mathpy.device.fft(size=256, precision=np.float32, direction="forward")
    >>> FFT.block_dim, FFT.elements_per_thread, FFT.ffts_per_block, FFT.shared_memory_size
    ((32, 8, 1), 8, 8, 16832)
    """
    size = int_arg("size", size)
    if not (MIN_SIZE <= size <= MAX_SIZE and _smooth(size) and _valid_elements_per_thread(size)):
        raise ValueError(
            f"size={size} is not supported by the block FFT; allowed: {MIN_SIZE} to {MAX_SIZE} with prime factors "
            f"2, 3, 5, 7 only, e.g. the powers of two {', '.join(str(1 << e) for e in range(1, 14))} "
            "or 3, 5, 6, 7, 10, 12, 48, 80, 96, 100, 384, 1000, ... (sizes above 16 need a factorization into "
            "radices dividing one elements_per_thread <= 16 with at most 1024 threads)"
        )
    precision = _normalize_precision(precision)
    _check_choice("fft_type", fft_type, ALLOWED_FFT_TYPES)
    if direction is None:
        direction = "inverse" if fft_type == "c2r" else "forward"
    _check_choice("direction", direction, ALLOWED_DIRECTIONS)
    if fft_type == "r2c" and direction != "forward":
        raise ValueError(f"direction={direction!r} does not go with fft_type='r2c'; allowed: 'forward'")
    if fft_type == "c2r" and direction != "inverse":
        raise ValueError(f"direction={direction!r} does not go with fft_type='c2r'; allowed: 'inverse'")
    n_c = size // 2 if _is_packed(fft_type, size) else size  # length of the complex FFT that runs
    if elements_per_thread is None:
        elements_per_thread = _default_elements_per_thread(n_c)
    elements_per_thread = int_arg("elements_per_thread", elements_per_thread)
    allowed_ept = _valid_elements_per_thread(n_c)
    if elements_per_thread not in allowed_ept:
        what = f" (an {fft_type} of even size runs a complex FFT of size {n_c})" if n_c != size else ""
        raise ValueError(
            f"elements_per_thread={elements_per_thread} is not supported for size={size}{what}; "
            f"allowed: {allowed_ept}"
        )
    threads = n_c // elements_per_thread
    if ffts_per_block is None:
        ffts_per_block = max(1, 256 // threads)
        itemsize = np.dtype(precision).itemsize
        plane = _plane(n_c)
        while ffts_per_block > 1 and ffts_per_block * 2 * plane * itemsize > MAX_SHARED_MEMORY:
            ffts_per_block //= 2
    ffts_per_block = int_arg("ffts_per_block", ffts_per_block)
    max_fpb = MAX_THREADS_PER_BLOCK // threads
    if not 1 <= ffts_per_block <= max_fpb:
        raise ValueError(
            f"ffts_per_block={ffts_per_block} is not supported for size={size} with elements_per_thread="
            f"{elements_per_thread} ({threads} threads per FFT, at most {MAX_THREADS_PER_BLOCK} threads per block); "
            f"allowed: 1 to {max_fpb}"
        )
    return _cached_fft(size, precision, direction, fft_type, elements_per_thread, ffts_per_block)


@functools.lru_cache(maxsize=256)
def _cached_fft(size, precision, direction, fft_type, elements_per_thread, ffts_per_block):
    return FFTDescription(size, precision, direction, fft_type, elements_per_thread, ffts_per_block)


def int_arg(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)
