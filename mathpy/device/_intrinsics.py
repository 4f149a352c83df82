"""Vector (``ld.v2.f32`` / ``st.v2.f32``) access to complex64 array elements for the generated device code.

numba loads and stores a complex64 element as two scalar f32 accesses; one 8-byte vector access halves the memory
instructions and L2 transactions of the FFT's global loads and stores. Complex64 arrays from any CUDA allocator
(numba, CuPy, torch) are 8-byte aligned, which the vector access needs. Not used under the simulator.
"""

from llvmlite import ir

from .._compat import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

from numba import types  # noqa: E402
from numba.cuda import cgutils  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

__all__ = ["load_c64", "store_c64"]


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
