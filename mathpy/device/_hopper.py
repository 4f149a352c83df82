"""Hopper (sm_90a) instructions for numba-cuda kernels, as inline PTX: the tensor-memory accelerator (TMA), mbarriers,
warpgroup MMA (``wgmma``) and register reallocation (``setmaxnreg``).

numba-cuda has no API for any of them and libNVVM rejects the ``llvm.nvvm.wgmma``-style intrinsics numba would need,
so each is an ``@intrinsic`` that emits one ``asm`` statement. Shared memory is addressed by 32-bit shared-window
addresses (what ``cvta.to.shared`` gives), the way the PTX of these instructions takes it; ``smem_address`` turns a
numba shared array into one. The kernels that use ``wgmma`` / ``setmaxnreg`` must be compiled for ``sm_90a``
(:func:`mathpy.device._kernels.load_kernel` patches numba's ``.target sm_90`` PTX accordingly).

Shared-memory operand layout (``wgmma_descriptor``): the 128-byte swizzle of CUTLASS's canonical GMMA layouts, which
is also what a TMA copy with ``CU_TENSOR_MAP_SWIZZLE_128B`` writes. Units of 16 bytes:

- K-major operand (rows of 64 16-bit elements along K, 128 bytes each, 8-row groups of 1024 bytes): leading byte
  offset 1 (unused), stride byte offset 64 (1024 bytes between 8-row groups); the k-th 16-element slice of a 64-wide
  tile starts 32 bytes further.
- MN-major operand (rows of 64 elements along M or N, one row per k): LBO = bytes between 64-wide MN blocks,
  SBO = 1024 bytes between groups of 8 k rows; the k-th 16-element slice starts 2048 bytes further.
"""

from llvmlite import ir

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

from numba import types  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

__all__ = ["smem_address", "mbar_init", "mbar_arrive", "mbar_arrive_expect_tx", "mbar_try_wait", "fence_barrier_init",
           "fence_proxy_async", "tma_load_2d", "tma_load_3d", "wgmma_fence", "wgmma_commit", "wgmma_wait0",
           "wgmma_wait1", "wgmma", "setmaxnreg_inc", "setmaxnreg_dec", "wgmma_descriptor", "SWIZZLE_128B_DESCRIPTOR",
           "load_element", "store_element", "store_pair", "zeros", "tma_store_2d", "tma_store_3d", "bulk_commit",
           "bulk_wait_read", "bulk_wait", "named_barrier", "syncwarp", "st_shared_u32", "pack_pair", "opaque_u32"]

_I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()

#: Bits 62-63 of a wgmma shared-memory descriptor: layout type 1 = 128-byte swizzle.
SWIZZLE_128B_DESCRIPTOR = 1 << 62


def wgmma_descriptor(address, leading, stride):
    """A wgmma shared-memory matrix descriptor (host-side helper for the constant part; the kernels add the start
    address, in units of 16 bytes, to it)."""
    return SWIZZLE_128B_DESCRIPTOR | ((stride & 0x3FFF) << 32) | ((leading & 0x3FFF) << 16) | ((address >> 4) & 0x3FFF)


def _ints(*tys):
    return all(isinstance(t, types.Integer) for t in tys)


def _as(context, builder, value, fromty, toty):
    return context.cast(builder, value, fromty, toty)


def _void_asm(text, constraints, arg_types, values, builder):
    fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
    builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), values)


@intrinsic
def smem_address(typingctx, arr):
    """The 32-bit shared-window address of a shared-memory array's first element."""
    if not isinstance(arr, types.Array):
        return None
    sig = types.uint32(arr)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, value=args[0])
        generic = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
        shared = builder.addrspacecast(generic, ir.IntType(8).as_pointer(3))
        return builder.ptrtoint(shared, _I32)

    return sig, codegen


def _simple(text, constraints, nargs, casts):
    """An intrinsic taking ``nargs`` integers, cast to ``casts`` (numba types), emitting one side-effect asm.
    (numba's ``@intrinsic`` needs named parameters, so the typing function is built with its exact arity.)"""

    def typing(typingctx, args):
        if not _ints(*args):
            return None
        sig = types.void(*args)

        def codegen(context, builder, signature, values):
            vals = [_as(context, builder, v, t, c) for v, t, c in zip(values, signature.args, casts)]
            _void_asm(text, constraints, signature.args, vals, builder)
            return context.get_dummy_value()

        return sig, codegen

    names = ", ".join(f"x{i}" for i in range(nargs))
    scope = {"typing": typing}
    sep, comma = (", ", ",") if nargs else ("", "")
    exec(f"def typer(typingctx{sep}{names}):\n    return typing(typingctx, ({names}{comma}))", scope)
    return intrinsic(scope["typer"])


mbar_init = _simple("mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", 2, (types.uint32, types.uint32))
mbar_init.__doc__ = "mbar_init(address, count): initialise the mbarrier at a shared address for ``count`` arrivals."
mbar_arrive = _simple("mbarrier.arrive.release.cta.shared::cta.b64 _, [$0];", "r,~{memory}", 1, (types.uint32,))
mbar_arrive_expect_tx = _simple("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [$0], $1;",
                                "r,r,~{memory}", 2, (types.uint32, types.uint32))
fence_barrier_init = _simple("fence.mbarrier_init.release.cluster;", "~{memory}", 0, ())
fence_proxy_async = _simple("fence.proxy.async.shared::cta;", "~{memory}", 0, ())
wgmma_fence = _simple("wgmma.fence.sync.aligned;", "~{memory}", 0, ())
wgmma_commit = _simple("wgmma.commit_group.sync.aligned;", "~{memory}", 0, ())
wgmma_wait0 = _simple("wgmma.wait_group.sync.aligned 0;", "~{memory}", 0, ())
wgmma_wait1 = _simple("wgmma.wait_group.sync.aligned 1;", "~{memory}", 0, ())
bulk_commit = _simple("cp.async.bulk.commit_group;", "~{memory}", 0, ())
bulk_commit.__doc__ = "Close this thread's group of bulk (TMA) stores."
bulk_wait_read = _simple("cp.async.bulk.wait_group.read 0;", "~{memory}", 0, ())
bulk_wait_read.__doc__ = "Wait until this thread's bulk stores have read their shared memory (it may be rewritten)."
bulk_wait = _simple("cp.async.bulk.wait_group 0;", "~{memory}", 0, ())
bulk_wait.__doc__ = "Wait until this thread's bulk stores are complete."
syncwarp = _simple("bar.warp.sync -1;", "~{memory}", 0, ())
syncwarp.__doc__ = "Synchronise (and order the memory accesses of) the 32 lanes of this warp."

_barrier_cache = {}


def named_barrier(barrier, count):
    """An intrinsic (no arguments): ``bar.sync barrier, count`` -- a barrier among ``count`` threads (whole warps)
    that leaves the rest of the block running (barrier 0 is ``syncthreads``)."""
    key = (barrier, count)
    if key not in _barrier_cache:
        _barrier_cache[key] = _simple(f"bar.sync {barrier}, {count};", "~{memory}", 0, ())
    return _barrier_cache[key]


def _setmaxnreg(op, count):
    return _simple(f"setmaxnreg.{op}.sync.aligned.u32 {count};", "", 0, ())


_setmaxnreg_cache = {}


def setmaxnreg_inc(count):
    """An intrinsic (no arguments) raising this warpgroup's register limit to ``count`` (24..256, multiple of 8)."""
    return _setmaxnreg_cache.setdefault(("inc", count), _setmaxnreg("inc", count))


def setmaxnreg_dec(count):
    """An intrinsic (no arguments) lowering this warpgroup's register limit to ``count``."""
    return _setmaxnreg_cache.setdefault(("dec", count), _setmaxnreg("dec", count))


@intrinsic
def mbar_try_wait(typingctx, address, parity):
    """True once the mbarrier at ``address`` has completed the phase of the given parity (0/1); the hardware may
    suspend the thread for a while before answering False, so a spin loop around it is cheap."""
    if not _ints(address, parity):
        return None
    sig = types.boolean(address, parity)

    def codegen(context, builder, signature, args):
        vals = [_as(context, builder, v, t, types.uint32) for v, t in zip(args, signature.args)]
        text = ("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }")
        fnty = ir.FunctionType(_I32, [_I32, _I32])
        got = builder.call(ir.InlineAsm(fnty, text, "=r,r,r,~{memory}", side_effect=True), vals)
        return builder.icmp_unsigned("!=", got, ir.Constant(_I32, 0))

    return sig, codegen


@intrinsic
def tma_load_2d(typingctx, dst, tensor_map, c0, c1, mbar):
    """Bulk tensor copy of one box at coordinates (c0 innermost, c1) of the tensor map (generic address of a
    128-byte CUtensorMap in global memory) into shared memory at ``dst``, completing on mbarrier ``mbar``."""
    if not _ints(dst, tensor_map, c0, c1, mbar):
        return None
    sig = types.void(dst, tensor_map, c0, c1, mbar)

    def codegen(context, builder, signature, args):
        t = signature.args
        vals = [_as(context, builder, args[0], t[0], types.uint32), _as(context, builder, args[1], t[1], types.uint64),
                _as(context, builder, args[2], t[2], types.int32), _as(context, builder, args[3], t[3], types.int32),
                _as(context, builder, args[4], t[4], types.uint32)]
        text = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                "[$0], [$1, {$2, $3}], [$4];")
        _void_asm(text, "r,l,r,r,r,~{memory}", t, vals, builder)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tma_load_3d(typingctx, dst, tensor_map, c0, c1, c2, mbar):
    """As :func:`tma_load_2d` with a third (batch) coordinate."""
    if not _ints(dst, tensor_map, c0, c1, c2, mbar):
        return None
    sig = types.void(dst, tensor_map, c0, c1, c2, mbar)

    def codegen(context, builder, signature, args):
        t = signature.args
        casts = (types.uint32, types.uint64, types.int32, types.int32, types.int32, types.uint32)
        vals = [_as(context, builder, v, ty, c) for v, ty, c in zip(args, t, casts)]
        text = ("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                "[$0], [$1, {$2, $3, $4}], [$5];")
        _void_asm(text, "r,l,r,r,r,r,~{memory}", t, vals, builder)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tma_store_2d(typingctx, tensor_map, c0, c1, src):
    """Bulk tensor store of one box of shared memory at ``src`` to coordinates (c0 innermost, c1) of the tensor map;
    elements outside the tensor are not written. Part of this thread's current bulk group (:data:`bulk_commit`)."""
    if not _ints(tensor_map, c0, c1, src):
        return None
    sig = types.void(tensor_map, c0, c1, src)

    def codegen(context, builder, signature, args):
        casts = (types.uint64, types.int32, types.int32, types.uint32)
        vals = [_as(context, builder, v, ty, c) for v, ty, c in zip(args, signature.args, casts)]
        text = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$0, {$1, $2}], [$3];"
        _void_asm(text, "l,r,r,r,~{memory}", signature.args, vals, builder)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def tma_store_3d(typingctx, tensor_map, c0, c1, c2, src):
    """As :func:`tma_store_2d` with a third (batch) coordinate."""
    if not _ints(tensor_map, c0, c1, c2, src):
        return None
    sig = types.void(tensor_map, c0, c1, c2, src)

    def codegen(context, builder, signature, args):
        casts = (types.uint64, types.int32, types.int32, types.int32, types.uint32)
        vals = [_as(context, builder, v, ty, c) for v, ty, c in zip(args, signature.args, casts)]
        text = "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [$0, {$1, $2, $3}], [$4];"
        _void_asm(text, "l,r,r,r,r,~{memory}", signature.args, vals, builder)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def opaque_u32(typingctx, value):
    """``value`` unchanged, through an asm the compiler may not move: addresses derived from it are computed where
    they are used instead of being hoisted out of a loop into registers (64 hoisted addresses spill)."""
    if not _ints(value):
        return None
    sig = types.uint32(value)

    def codegen(context, builder, signature, args):
        val = _as(context, builder, args[0], signature.args[0], types.uint32)
        fnty = ir.FunctionType(_I32, [_I32])
        return builder.call(ir.InlineAsm(fnty, "mov.b32 $0, $1;", "=r,r", side_effect=True), [val])

    return sig, codegen


@intrinsic
def st_shared_u32(typingctx, address, value):
    """Store a 32-bit value at a shared-window address (a plain store the compiler can schedule)."""
    if not _ints(address, value):
        return None
    sig = types.void(address, value)

    def codegen(context, builder, signature, args):
        addr = _as(context, builder, args[0], signature.args[0], types.uint32)
        val = _as(context, builder, args[1], signature.args[1], types.uint32)
        builder.store(val, builder.inttoptr(addr, _I32.as_pointer(3)), align=4)
        return context.get_dummy_value()

    return sig, codegen


_wgmma_cache = {}


def wgmma(n, ab_type, transpose_a, transpose_b):
    """An intrinsic ``acc = f(desc_a, desc_b, acc)`` issuing ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}``
    with both operands in shared memory (64-bit descriptors) and the fp32 accumulators (a UniTuple of n / 2 float32,
    this thread's part of the 64 x n tile) updated in place. ``transpose_a/b``: the operand is MN-major (M- or
    N-contiguous) instead of K-major."""
    key = (n, ab_type, transpose_a, transpose_b)
    if key in _wgmma_cache:
        return _wgmma_cache[key]
    count = n // 2
    outs = ",".join(f"${i}" for i in range(count))
    text = (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab_type}.{ab_type} {{{outs}}}, ${count}, ${count + 1}, "
            f"1, 1, 1, {int(transpose_a)}, {int(transpose_b)};")
    constraints = ",".join(["=f"] * count + ["l", "l"] + [str(i) for i in range(count)]) + ",~{memory}"

    @intrinsic
    def mma(typingctx, desc_a, desc_b, acc):
        if not (_ints(desc_a, desc_b) and isinstance(acc, types.UniTuple) and acc.count == count
                and acc.dtype == types.float32):
            return None
        sig = acc(desc_a, desc_b, acc)

        def codegen(context, builder, signature, args):
            da = _as(context, builder, args[0], signature.args[0], types.uint64)
            db = _as(context, builder, args[1], signature.args[1], types.uint64)
            accs = [builder.extract_value(args[2], i) for i in range(count)]
            fnty = ir.FunctionType(ir.LiteralStructType([_F32] * count), [_I64, _I64] + [_F32] * count)
            res = builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), [da, db] + accs)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(res, i) for i in range(count)])

        return sig, codegen

    _wgmma_cache[key] = mma
    return mma


# ---------------------------------------------------------------- global-memory element access by address
_KINDS = {"bfloat16": (ir.IntType(16), 2), "float16": (ir.HalfType(), 2), "float32": (ir.FloatType(), 4),
          "float64": (ir.DoubleType(), 8)}
_access_cache = {}


def _address(context, builder, base, basety, col, colty, size, elem_ptr_type):
    """A pointer in the global address space (``ld.global`` / ``st.global``) to element ``col`` of a row."""
    base = _as(context, builder, base, basety, types.uint64)
    off = builder.mul(_as(context, builder, col, colty, types.uint64), ir.Constant(_I64, size))
    return builder.inttoptr(builder.add(base, off), elem_ptr_type.pointee.as_pointer(1))


def _to_compute(builder, raw, kind):
    if kind == "bfloat16":
        wide = builder.shl(builder.zext(raw, _I32), ir.Constant(_I32, 16))
        return builder.bitcast(wide, _F32)
    if kind == "float16":
        return builder.fpext(raw, _F32)
    return raw


def load_element(kind):
    """``f(row_address, col) -> value``: element ``col`` of a row of ``kind`` ("bfloat16", "float16", "float32",
    "float64") at a generic address, converted to the compute type (float32; float64 for float64)."""
    key = ("load", kind)
    if key in _access_cache:
        return _access_cache[key]
    elem, size = _KINDS[kind]
    result = types.float64 if kind == "float64" else types.float32

    @intrinsic
    def load(typingctx, row_address, col):
        if not _ints(row_address, col):
            return None
        sig = result(row_address, col)

        def codegen(context, builder, signature, args):
            ptr = _address(context, builder, args[0], signature.args[0], args[1], signature.args[1], size,
                           elem.as_pointer())
            return _to_compute(builder, builder.load(ptr, align=size), kind)

        return sig, codegen

    _access_cache[key] = load
    return load


def _cvt_text(kind):
    return {"bfloat16": "bf16", "float16": "f16"}[kind]


def _emit_store(context, builder, t, args, kind):
    """Store ``args[2]`` (a compute value) rounded to ``kind`` at element ``args[1]`` of the row at ``args[0]``."""
    elem, size = _KINDS[kind]
    ptr = _address(context, builder, args[0], t[0], args[1], t[1], size, ir.IntType(8).as_pointer())
    if kind in ("bfloat16", "float16"):
        # a pure asm for the rounding and a plain store: an asm store with a memory clobber is a barrier the compiler
        # cannot move the next elements' data loads across
        v = _as(context, builder, args[2], t[2], types.float32)
        fnty = ir.FunctionType(ir.IntType(16), [_F32])
        bits = builder.call(ir.InlineAsm(fnty, f"cvt.rn.{_cvt_text(kind)}.f32 $0, $1;", "=h,f"), [v])
        builder.store(bits, builder.bitcast(ptr, ir.IntType(16).as_pointer(1)), align=2)
    else:
        target = types.float64 if kind == "float64" else types.float32
        v = _as(context, builder, args[2], t[2], target)
        builder.store(v, builder.bitcast(ptr, elem.as_pointer(1)), align=size)


def _store_intrinsic(name, kind, values, emit):
    """An intrinsic ``f(row_address, col, v0, ..)`` (``values`` compute values) whose code is ``emit(context, builder,
    argument types, arguments, kind)``, made once per (name, kind)."""
    key = (name, kind)
    if key in _access_cache:
        return _access_cache[key]

    def typing(typingctx, args):
        if not (_ints(*args[:2]) and all(isinstance(v, (types.Float, types.Integer)) for v in args[2:])):
            return None

        def codegen(context, builder, signature, arguments):
            emit(context, builder, signature.args, arguments, kind)
            return context.get_dummy_value()

        return types.void(*args), codegen

    names = ", ".join(f"v{i}" for i in range(values))
    scope = {"typing": typing}
    exec(f"def typer(typingctx, row_address, col, {names}):\n"
         f"    return typing(typingctx, (row_address, col, {names}))", scope)
    found = _access_cache[key] = intrinsic(scope["typer"])
    return found


def store_element(kind):
    """``f(row_address, col, value)``: store a compute-precision value, rounded (to nearest even) to ``kind``."""
    return _store_intrinsic("store", kind, 1, _emit_store)


def _emit_pair(context, builder, t, args, kind):
    """Store ``args[2]``, ``args[3]`` at elements ``args[1]``, ``args[1] + 1`` of the row at ``args[0]`` (one
    access)."""
    elem, size = _KINDS[kind]
    ptr = _address(context, builder, args[0], t[0], args[1], t[1], size, ir.IntType(8).as_pointer())
    if kind in ("bfloat16", "float16"):
        lo = _as(context, builder, args[2], t[2], types.float32)
        hi = _as(context, builder, args[3], t[3], types.float32)
        fnty = ir.FunctionType(_I32, [_F32, _F32])
        bits = builder.call(ir.InlineAsm(fnty, f"cvt.rn.{_cvt_text(kind)}x2.f32 $0, $2, $1;", "=r,f,f"), [lo, hi])
        builder.store(bits, builder.bitcast(ptr, _I32.as_pointer(1)), align=4)
    else:
        target = types.float64 if kind == "float64" else types.float32
        vec = ir.VectorType(elem, 2)
        value = ir.Constant(vec, ir.Undefined)
        for q in range(2):
            v = _as(context, builder, args[2 + q], t[2 + q], target)
            value = builder.insert_element(value, v, ir.Constant(_I32, q))
        builder.store(value, builder.bitcast(ptr, vec.as_pointer(1)), align=2 * size)


def store_pair(kind):
    """``f(row_address, col, v0, v1)``: store two consecutive elements (``col`` even, the row aligned to two
    elements) as one access: 16-bit kinds through one ``cvt.rn.{bf16,f16}x2.f32`` and a 32-bit store."""
    return _store_intrinsic("pair", kind, 2, _emit_pair)


def axpby_element(kind):
    """``f(x, alpha, beta, row_address, col) -> alpha * x + beta * C[row, col]``, C (``kind``) read only when
    ``beta != 0`` (cuBLAS's rule: C is not read when beta is 0, so a NaN there does not show). The test is a branch
    inside the intrinsic, so one kernel source serves both cases without numba analysing a block per element."""
    key = ("axpby", kind)
    if key in _access_cache:
        return _access_cache[key]
    elem, size = _KINDS[kind]
    compute = types.float64 if kind == "float64" else types.float32

    @intrinsic
    def axpby(typingctx, x, alpha, beta, row_address, col):
        if not (_ints(row_address, col) and all(isinstance(v, types.Float) for v in (x, alpha, beta))):
            return None
        sig = compute(x, alpha, beta, row_address, col)

        def codegen(context, builder, signature, args):
            t = signature.args
            x_, al, be = (_as(context, builder, args[i], t[i], compute) for i in range(3))
            scaled = builder.fmul(al, x_)
            entry = builder.block
            with builder.if_then(builder.fcmp_unordered("!=", be, ir.Constant(scaled.type, 0.0)), likely=False):
                ptr = _address(context, builder, args[3], t[3], args[4], t[4], size, elem.as_pointer())
                c = _to_compute(builder, builder.load(ptr, align=size), kind)
                with_c = builder.fadd(scaled, builder.fmul(be, c))
                then_end = builder.block
            result = builder.phi(scaled.type)
            result.add_incoming(with_c, then_end)
            result.add_incoming(scaled, entry)
            return result

        return sig, codegen

    _access_cache[key] = axpby
    return axpby


def store_pair_edge(kind):
    """``f(row_address, col, v0, v1, n, row_ok)``: store elements ``col`` and ``col + 1`` of a row where they lie
    inside the result (``col < n``, ``col + 1 < n``) and ``row_ok`` is true; one paired store when both do (``col``
    even, the row aligned to two elements). The edge tiles' store: the bounds are branches inside the intrinsic, not
    blocks numba has to analyse."""
    key = ("pair_edge", kind)
    if key in _access_cache:
        return _access_cache[key]

    @intrinsic
    def store(typingctx, row_address, col, v0, v1, n, row_ok):
        if not (_ints(row_address, col, n) and isinstance(row_ok, types.Boolean)
                and all(isinstance(v, (types.Float, types.Integer)) for v in (v0, v1))):
            return None
        sig = types.void(row_address, col, v0, v1, n, row_ok)

        def codegen(context, builder, signature, args):
            t = signature.args
            col_, n_ = (_as(context, builder, args[i], t[i], types.int64) for i in (1, 4))
            second = builder.icmp_signed("<", builder.add(col_, ir.Constant(_I64, 1)), n_)
            with builder.if_then(builder.and_(args[5], builder.icmp_signed("<", col_, n_)), likely=True):
                with builder.if_else(second, likely=True) as (both, only_first):
                    with both:
                        _emit_pair(context, builder, t[:4], args[:4], kind)
                    with only_first:
                        _emit_store(context, builder, t[:3], args[:3], kind)
            return context.get_dummy_value()

        return sig, codegen

    _access_cache[key] = store
    return store


def pack_pair(kind):
    """``f(v0, v1) -> uint32``: two compute-precision values rounded (to nearest even) to 16-bit ``kind`` and packed,
    ``v0`` in the low half (the lower address in memory)."""
    key = ("pack", kind)
    if key in _access_cache:
        return _access_cache[key]

    @intrinsic
    def pack(typingctx, v0, v1):
        if not all(isinstance(v, (types.Float, types.Integer)) for v in (v0, v1)):
            return None
        sig = types.uint32(v0, v1)

        def codegen(context, builder, signature, args):
            lo = _as(context, builder, args[0], signature.args[0], types.float32)
            hi = _as(context, builder, args[1], signature.args[1], types.float32)
            fnty = ir.FunctionType(_I32, [_F32, _F32])
            return builder.call(ir.InlineAsm(fnty, f"cvt.rn.{_cvt_text(kind)}x2.f32 $0, $2, $1;", "=r,f,f"),
                                [lo, hi])

        return sig, codegen

    _access_cache[key] = pack
    return pack


_zeros_cache = {}


def scale_tuple(count):
    """``f(acc, alpha) -> acc * alpha``: every float32 of a UniTuple of ``count`` scaled (one call where the kernel
    would otherwise multiply at each of its ``count`` uses)."""
    key = ("scale", count)
    if key in _zeros_cache:
        return _zeros_cache[key]

    @intrinsic
    def scale(typingctx, acc, alpha):
        tup = types.UniTuple(types.float32, count)
        if acc != tup or not isinstance(alpha, types.Float):
            return None

        def codegen(context, builder, signature, args):
            al = _as(context, builder, args[1], signature.args[1], types.float32)
            values = [builder.fmul(builder.extract_value(args[0], i), al) for i in range(count)]
            return context.make_tuple(builder, tup, values)

        return tup(acc, alpha), codegen

    _zeros_cache[key] = scale
    return scale


def zeros(count):
    """An intrinsic (no arguments) returning a UniTuple of ``count`` float32 zeros (a tuple display that long defeats
    numba's bytecode peephole)."""
    if count in _zeros_cache:
        return _zeros_cache[count]

    @intrinsic
    def make(typingctx):
        tup = types.UniTuple(types.float32, count)

        def codegen(context, builder, signature, args):
            zero = ir.Constant(_F32, 0.0)
            return context.make_tuple(builder, tup, [zero] * count)

        return tup(), codegen

    _zeros_cache[count] = make
    return make
