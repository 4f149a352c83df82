"""Vector (``ld.v2.f32`` / ``st.v2.f32``) access to complex64 array elements for the generated device code.

numba loads and stores a complex64 element as two scalar f32 accesses; one 8-byte vector access halves the memory
instructions and L2 transactions of the FFT's global loads and stores. Complex64 arrays from any CUDA allocator
(numba, CuPy, torch) are 8-byte aligned, which the vector access needs. Not used under the simulator.
"""

from llvmlite import ir

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

from numba import types  # noqa: E402
from numba.cuda import cgutils  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

__all__ = ["load_c64", "store_c64", "load_c64_readonly", "pack2_u32", "pair_u32", "mma_f16_f32", "mma_bf16_f32",
           "aligned8", "load4_u16", "store4_u16", "store4_u16_strided", "aligned16", "cp_async16", "cp_async_wait_all",
           "cp_async_commit", "cp_async_wait_group", "pack2_f16", "pack2_bf16", "store2_u16", "mma_f64",
           "load4_f32_shared", "ldmatrix"]


def _element_pointer(context, builder, arrty, arr, index_types, indices):
    ary = context.make_array(arrty)(context, builder, value=arr)
    inds = [context.cast(builder, i, t, types.intp) for i, t in zip(index_types, indices)]
    return cgutils.get_item_pointer(context, builder, arrty, ary, inds, wraparound=False)


def _check(arr, row, col):
    return (
        isinstance(arr, types.Array)
        and arr.ndim == 2
        and arr.dtype == types.complex64
        and isinstance(row, types.Integer)
        and isinstance(col, types.Integer)
    )


@intrinsic
def load_c64(typingctx, arr, row, col):
    """``arr[row, col]`` of a 2-D complex64 array as one 8-byte vector load (no negative-index wraparound)."""
    if not _check(arr, row, col):
        return None
    sig = types.complex64(arr, row, col)

    def codegen(context, builder, signature, args):
        arrty, rowty, colty = signature.args
        arr_v, row_v, col_v = args
        ptr = _element_pointer(context, builder, arrty, arr_v, (row_v, col_v), (rowty, colty))
        vec_t = ir.VectorType(ir.FloatType(), 2)
        vptr = builder.bitcast(ptr, vec_t.as_pointer())
        vec = builder.load(vptr, align=8)
        cplx = context.make_complex(builder, types.complex64)
        cplx.real = builder.extract_element(vec, ir.Constant(ir.IntType(32), 0))
        cplx.imag = builder.extract_element(vec, ir.Constant(ir.IntType(32), 1))
        return cplx._getvalue()

    return sig, codegen


@intrinsic
def store_c64(typingctx, arr, row, col, value):
    """``arr[row, col] = value`` for a 2-D complex64 array as one 8-byte vector store."""
    if not _check(arr, row, col) or not isinstance(value, types.Complex):
        return None
    sig = types.void(arr, row, col, value)

    def codegen(context, builder, signature, args):
        arrty, rowty, colty, valty = signature.args
        arr_v, row_v, col_v, val_v = args
        val_v = context.cast(builder, val_v, valty, types.complex64)
        ptr = _element_pointer(context, builder, arrty, arr_v, (row_v, col_v), (rowty, colty))
        cplx = context.make_complex(builder, types.complex64, value=val_v)
        vec_t = ir.VectorType(ir.FloatType(), 2)
        vec = ir.Constant(vec_t, ir.Undefined)
        vec = builder.insert_element(vec, cplx.real, ir.Constant(ir.IntType(32), 0))
        vec = builder.insert_element(vec, cplx.imag, ir.Constant(ir.IntType(32), 1))
        builder.store(vec, builder.bitcast(ptr, vec_t.as_pointer()), align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def load_c64_readonly(typingctx, arr, idx):
    """``arr[idx]`` of a 1-D complex64 array in *global* memory that the kernel never writes (e.g. a filter): one
    8-byte vector load through the global address space marked ``!invariant.load``, i.e. the read-only-cache
    ``ld.global.nc.v2.f32``. Not for shared or local arrays."""
    if not (
        isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.complex64
        and isinstance(idx, types.Integer)
    ):
        return None
    sig = types.complex64(arr, idx)

    def codegen(context, builder, signature, args):
        arrty, idxty = signature.args
        arr_v, idx_v = args
        ptr = _element_pointer(context, builder, arrty, arr_v, (idx_v,), (idxty,))
        vec_t = ir.VectorType(ir.FloatType(), 2)
        # numba's array pointers are generic; the read-only path needs the global address space spelled out
        gptr = builder.addrspacecast(builder.bitcast(ptr, vec_t.as_pointer()), vec_t.as_pointer(1))
        vec = builder.load(gptr, align=8)
        vec.set_metadata("invariant.load", builder.module.add_metadata([]))
        cplx = context.make_complex(builder, types.complex64)
        cplx.real = builder.extract_element(vec, ir.Constant(ir.IntType(32), 0))
        cplx.imag = builder.extract_element(vec, ir.Constant(ir.IntType(32), 1))
        return cplx._getvalue()

    return sig, codegen


# ---------------------------------------------------------------- tensor cores (block GEMM, fp16/bf16)
def _check_half_array(arr):
    return isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype.bitwidth == 16


def _i16_pointer(context, builder, arrty, arr, idxty, idx):
    ptr = _element_pointer(context, builder, arrty, arr, (idx,), (idxty,))
    return builder.bitcast(ptr, ir.IntType(16).as_pointer())


@intrinsic
def pack2_u32(typingctx, arr, i, j):
    """The 16-bit elements ``arr[i]`` (low half) and ``arr[j]`` (high half) of a 1-D fp16/uint16/int16 array packed
    into one uint32, as a tensor-core fragment register holds them (two 16-bit loads)."""
    if not (_check_half_array(arr) and isinstance(i, types.Integer) and isinstance(j, types.Integer)):
        return None
    sig = types.uint32(arr, i, j)

    def codegen(context, builder, signature, args):
        arrty, ity, jty = signature.args
        arr_v, i_v, j_v = args
        i32 = ir.IntType(32)
        lo = builder.zext(builder.load(_i16_pointer(context, builder, arrty, arr_v, ity, i_v), align=2), i32)
        hi = builder.zext(builder.load(_i16_pointer(context, builder, arrty, arr_v, jty, j_v), align=2), i32)
        return builder.or_(lo, builder.shl(hi, ir.Constant(i32, 16)))

    return sig, codegen


@intrinsic
def pair_u32(typingctx, arr, i):
    """``arr[i]`` (low half) and ``arr[i + 1]`` (high half) of a 1-D 16-bit array as one 32-bit load; ``i`` must be
    even and the array 4-byte aligned."""
    if not (_check_half_array(arr) and isinstance(i, types.Integer)):
        return None
    sig = types.uint32(arr, i)

    def codegen(context, builder, signature, args):
        arrty, ity = signature.args
        ptr = _i16_pointer(context, builder, arrty, args[0], ity, args[1])
        return builder.load(builder.bitcast(ptr, ir.IntType(32).as_pointer()), align=4)

    return sig, codegen


def _mma_intrinsic(ptx_type):
    """``mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32`` as inline PTX: a warp multiplies a 16x16
    A fragment (4 packed registers per thread) by a 16x8 B fragment (2) and adds a 16x8 fp32 C fragment (4 floats);
    returns the 4 floats of D. (libNVVM rejects the ``llvm.nvvm.mma.*`` / ``llvm.nvvm.wmma.*`` intrinsic calls numba
    would emit -- ERROR_INVALID_IR -- so the instruction is written out.) sm_80 or newer."""
    asm_text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32 "
                "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        for x in (a0, a1, a2, a3, b0, b1):
            if not isinstance(x, types.Integer):
                return None
        for x in (c0, c1, c2, c3):
            if not isinstance(x, types.Float):
                return None
        sig = types.UniTuple(types.float32, 4)(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)

        def codegen(context, builder, signature, args):
            f32, i32 = ir.FloatType(), ir.IntType(32)
            ins = [context.cast(builder, v, t, types.uint32) for v, t in zip(args[:6], signature.args[:6])]
            ins += [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], signature.args[6:])]
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * 6 + [f32] * 4)
            asm = ir.InlineAsm(fnty, asm_text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
            res = builder.call(asm, ins)
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, q) for q in range(4)])

        return sig, codegen

    return mma


mma_f16_f32 = _mma_intrinsic("f16")
mma_bf16_f32 = _mma_intrinsic("bf16")
_ldmatrix_cache = {}


def ldmatrix(count, trans):
    """``f(arr, i) -> UniTuple(uint32, count)``: ``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16``, the warp
    loading ``count`` 8 x 8 matrices of 16-bit values from shared memory into fragment registers in one instruction:
    lane ``l`` gives the address of one matrix row (``arr[i]``, 16-byte aligned: 8 consecutive values), lanes
    ``8 j .. 8 j + 7`` the rows of matrix ``j``; register ``j`` of lane ``l`` receives row ``l // 4``, values ``2 (l %
    4)`` and ``2 (l % 4) + 1`` of matrix ``j`` (``.trans``: row ``2 (l % 4)`` and ``2 (l % 4) + 1``, value ``l //
    4``: the matrix transposed). One instruction where the fragments took 4 (A) or 8 (B) scalar shared loads."""
    key = (count, trans)
    if key in _ldmatrix_cache:
        return _ldmatrix_cache[key]
    outs = ",".join(f"${q}" for q in range(count))
    text = f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 {{{outs}}}, [${count}];"

    @intrinsic
    def load(typingctx, arr, i):
        if not (_check_half_array(arr) and isinstance(i, types.Integer)):
            return None
        sig = types.UniTuple(types.uint32, count)(arr, i)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            ptr = _i16_pointer(context, builder, signature.args[0], args[0], signature.args[1], args[1])
            shared = builder.ptrtoint(builder.addrspacecast(ptr, ir.IntType(16).as_pointer(3)), i32)
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * count), [i32])
            asm = ir.InlineAsm(fnty, text, ",".join(["=r"] * count + ["r"]), side_effect=True)
            res = builder.call(asm, [shared])
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(res, q) for q in range(count)])

        return sig, codegen

    _ldmatrix_cache[key] = load
    return load


# ---------------------------------------------------------------- 8-byte copies of 16-bit GEMM operands
def _aligned(context, builder, arrty, value, size):
    """i1: data pointer and all strides but the last multiples of ``size`` bytes, the last stride the item size.
    (Before 2026-11-30 the last stride was or-ed in as well, so 16-bit arrays never took the vector paths.)"""
    ary = context.make_array(arrty)(context, builder, value=value)
    i64 = ir.IntType(64)
    bits = builder.ptrtoint(ary.data, i64)
    strides = cgutils.unpack_tuple(builder, ary.strides, arrty.ndim)
    for st in strides[:-1]:
        bits = builder.or_(bits, builder.sext(st, i64) if st.type.width < 64 else st)
    aligned = builder.icmp_unsigned("==", builder.and_(bits, ir.Constant(i64, size - 1)), ir.Constant(i64, 0))
    if not strides:
        return aligned
    last = strides[-1] if strides[-1].type.width == 64 else builder.sext(strides[-1], i64)
    unit = builder.icmp_unsigned("==", last, ir.Constant(i64, arrty.dtype.bitwidth // 8))
    return builder.and_(aligned, unit)


@intrinsic
def aligned8(typingctx, arr):
    """True when ``arr``'s data pointer and every stride but the last are multiples of 8 bytes and the last axis is
    contiguous (so 4 consecutive 16-bit elements along it, starting at an index multiple of 4, can move as one 8-byte
    access)."""
    if not isinstance(arr, types.Array):
        return None
    sig = types.boolean(arr)

    def codegen(context, builder, signature, args):
        (arrty,) = signature.args
        return _aligned(context, builder, arrty, args[0], 8)

    return sig, codegen


@intrinsic
def load4_u16(typingctx, arr, i0, i1, i2):
    """``arr[i0, i1, i2 : i2 + 4]`` of a 3-D 16-bit array as one 8-byte load (uint64); needs :func:`aligned8` and
    ``i2 % 4 == 0``."""
    if not (isinstance(arr, types.Array) and arr.ndim == 3 and arr.dtype.bitwidth == 16
            and all(isinstance(x, types.Integer) for x in (i0, i1, i2))):
        return None
    sig = types.uint64(arr, i0, i1, i2)

    def codegen(context, builder, signature, args):
        arrty = signature.args[0]
        ptr = _element_pointer(context, builder, arrty, args[0], args[1:], signature.args[1:])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=8)

    return sig, codegen


@intrinsic
def store4_u16(typingctx, arr, idx, value):
    """``arr[idx : idx + 4] = value`` (4 packed 16-bit elements, the first in the low bits) for a 1-D 16-bit array,
    one 8-byte store; ``arr`` 8-byte aligned and ``idx % 4 == 0``."""
    if not (_check_half_array(arr) and isinstance(idx, types.Integer) and isinstance(value, types.Integer)):
        return None
    sig = types.void(arr, idx, value)

    def codegen(context, builder, signature, args):
        arrty, idxty, valty = signature.args
        ptr = _i16_pointer(context, builder, arrty, args[0], idxty, args[1])
        v = context.cast(builder, args[2], valty, types.uint64)
        builder.store(v, builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store4_u16_strided(typingctx, arr, idx, stride, value):
    """``arr[idx + q * stride] = q-th 16-bit part of value`` for q = 0..3 (a transposing store), 1-D 16-bit array."""
    if not (_check_half_array(arr) and all(isinstance(x, types.Integer) for x in (idx, stride, value))):
        return None
    sig = types.void(arr, idx, stride, value)

    def codegen(context, builder, signature, args):
        arrty, idxty, stty, valty = signature.args
        i64, i16 = ir.IntType(64), ir.IntType(16)
        v = context.cast(builder, args[3], valty, types.uint64)
        base = context.cast(builder, args[1], idxty, types.int64)
        step = context.cast(builder, args[2], stty, types.int64)
        for q in range(4):
            at = builder.add(base, builder.mul(step, ir.Constant(i64, q)))
            ptr = _i16_pointer(context, builder, arrty, args[0], types.int64, at)
            part = builder.trunc(builder.lshr(v, ir.Constant(i64, 16 * q)), i16)
            builder.store(part, ptr, align=2)
        return context.get_dummy_value()

    return sig, codegen


# ---------------------------------------------------------------- 16-byte asynchronous copies and paired stores
@intrinsic
def aligned16(typingctx, arr):
    """As :func:`aligned8` with 16 bytes."""
    if not isinstance(arr, types.Array):
        return None
    sig = types.boolean(arr)

    def codegen(context, builder, signature, args):
        (arrty,) = signature.args
        return _aligned(context, builder, arrty, args[0], 16)

    return sig, codegen


@intrinsic
def cp_async16(typingctx, smem, sidx, arr, i0, i1, i2):
    """Copy 16 bytes from ``&arr[i0, i1, i2]`` (global, 16-byte aligned) to ``&smem[sidx]`` (shared, 16-byte aligned)
    without going through registers (``cp.async.cg``, sm_80+); complete them with :func:`cp_async_wait_all`."""
    if not (isinstance(smem, types.Array) and smem.ndim == 1 and isinstance(arr, types.Array) and arr.ndim == 3
            and all(isinstance(x, types.Integer) for x in (sidx, i0, i1, i2))):
        return None
    sig = types.void(smem, sidx, arr, i0, i1, i2)

    def codegen(context, builder, signature, args):
        st, sit, at = signature.args[0], signature.args[1], signature.args[2]
        dst = _element_pointer(context, builder, st, args[0], (args[1],), (sit,))
        dst = builder.ptrtoint(builder.addrspacecast(builder.bitcast(dst, ir.IntType(8).as_pointer()),
                                                     ir.IntType(8).as_pointer(3)), ir.IntType(32))
        src = _element_pointer(context, builder, at, args[2], args[3:], signature.args[3:])
        src = builder.addrspacecast(builder.bitcast(src, ir.IntType(8).as_pointer()), ir.IntType(8).as_pointer(1))
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), src.type])
        asm = ir.InlineAsm(fnty, "cp.async.cg.shared.global [$0], [$1], 16;", "r,l,~{memory}", side_effect=True)
        builder.call(asm, [dst, src])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cp_async_wait_all(typingctx):
    """Wait until this thread's ``cp.async`` copies have landed in shared memory (then synchronise the block)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.VoidType(), [])
        builder.call(ir.InlineAsm(fnty, "cp.async.wait_all;", "~{memory}", side_effect=True), [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def cp_async_commit(typingctx):
    """Close this thread's group of ``cp.async`` copies issued since the last commit (``cp.async.commit_group``)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.VoidType(), [])
        builder.call(ir.InlineAsm(fnty, "cp.async.commit_group;", "~{memory}", side_effect=True), [])
        return context.get_dummy_value()

    return sig, codegen


_MAX_PENDING = 7


@intrinsic
def cp_async_wait_group(typingctx, pending):
    """Wait until at most ``pending`` (0..7; more counts as 7) of this thread's committed ``cp.async`` groups are in
    flight. The PTX instruction takes the count as an immediate: one predicated wait per count, of which the
    assembler keeps the one a constant argument selects."""
    if not isinstance(pending, types.Integer):
        return None
    sig = types.void(pending)

    def codegen(context, builder, signature, args):
        n = context.cast(builder, args[0], signature.args[0], types.uint32)
        n = builder.select(builder.icmp_unsigned(">", n, ir.Constant(ir.IntType(32), _MAX_PENDING)),
                           ir.Constant(ir.IntType(32), _MAX_PENDING), n)
        waits = " ".join(f"setp.eq.u32 p, $0, {i}; @p cp.async.wait_group {i};" for i in range(_MAX_PENDING + 1))
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32)])
        builder.call(ir.InlineAsm(fnty, "{ .reg .pred p; " + waits + " }", "r,~{memory}", side_effect=True), [n])
        return context.get_dummy_value()

    return sig, codegen


def _pack2(kind):
    @intrinsic
    def pack(typingctx, lo, hi):
        """Two float32 values rounded (to nearest even) to a packed pair of 16-bit floats (``lo`` in the low half)."""
        if not all(isinstance(x, (types.Float, types.Integer)) for x in (lo, hi)):
            return None
        sig = types.uint32(lo, hi)

        def codegen(context, builder, signature, args):
            vals = [context.cast(builder, v, t, types.float32) for v, t in zip(args, signature.args)]
            fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType(), ir.FloatType()])
            asm = ir.InlineAsm(fnty, f"cvt.rn.{kind}x2.f32 $0, $2, $1;", "=r,f,f")
            return builder.call(asm, vals)

        return sig, codegen

    return pack


pack2_f16 = _pack2("f16")
pack2_bf16 = _pack2("bf16")


@intrinsic
def store2_u16(typingctx, arr, i0, i1, i2, value):
    """``arr[i0, i1, i2 : i2 + 2] = value`` (two packed 16-bit elements, the first in the low half) as one 32-bit
    store; the element address must be 4-byte aligned."""
    if not (isinstance(arr, types.Array) and arr.ndim == 3 and arr.dtype.bitwidth == 16
            and all(isinstance(x, types.Integer) for x in (i0, i1, i2, value))):
        return None
    sig = types.void(arr, i0, i1, i2, value)

    def codegen(context, builder, signature, args):
        ptr = _element_pointer(context, builder, signature.args[0], args[0], args[1:4], signature.args[1:4])
        v = context.cast(builder, args[4], signature.args[4], types.uint32)
        builder.store(v, builder.bitcast(ptr, ir.IntType(32).as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def mma_f64(typingctx, a, b, c0, c1):
    """``mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64`` as inline PTX (sm_80+, the fp64 tensor cores): a warp
    multiplies an 8 x 4 A fragment (one double per thread: row g, k t) by a 4 x 8 B fragment (k t, column g) and adds
    an 8 x 8 C fragment (two doubles: row g, columns 2t, 2t + 1); returns the two doubles of D."""
    if not all(isinstance(x, types.Float) for x in (a, b, c0, c1)):
        return None
    sig = types.UniTuple(types.float64, 2)(a, b, c0, c1)

    def codegen(context, builder, signature, args):
        f64 = ir.DoubleType()
        vals = [context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)]
        fnty = ir.FunctionType(ir.LiteralStructType([f64, f64]), [f64] * 4)
        asm = ir.InlineAsm(fnty, "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {$0,$1}, {$2}, {$3}, {$4,$5};",
                           "=d,=d,d,d,d,d")
        res = builder.call(asm, vals)
        return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, q) for q in range(2)])

    return sig, codegen


@intrinsic
def load4_f32_shared(typingctx, arr, idx):
    """``arr[idx : idx + 4]`` of a 1-D float32 shared-memory array as one 16-byte load (``ld.shared.v4.f32``);
    ``idx`` a multiple of 4 and the array 16-byte aligned. Returns a UniTuple of 4 float32."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32
            and isinstance(idx, types.Integer)):
        return None
    tup = types.UniTuple(types.float32, 4)
    sig = tup(arr, idx)

    def codegen(context, builder, signature, args):
        ptr = _element_pointer(context, builder, signature.args[0], args[0], (args[1],), (signature.args[1],))
        vec_t = ir.VectorType(ir.FloatType(), 4)
        shared = builder.addrspacecast(builder.bitcast(ptr, vec_t.as_pointer()), vec_t.as_pointer(3))
        vec = builder.load(shared, align=16)
        return context.make_tuple(builder, tup, [builder.extract_element(vec, ir.Constant(ir.IntType(32), q))
                                                 for q in range(4)])

    return sig, codegen
