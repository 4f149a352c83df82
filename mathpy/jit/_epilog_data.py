"""The kernel-side ``data`` of a matmul epilog: a read-only strided view whose ``[]`` is lowered to one
``ld.global.nc`` load (CUDA C++'s ``__ldg``) per element, 16-bit floats widened to float32.

Imported only when a GEMM kernel with a data-reading epilog is compiled (it imports numba-cuda). The view is built in
the kernel from scalar kernel parameters (pointer, shape, strides in elements), so the launcher passes no numba array.
"""

import operator

from llvmlite import ir
from numba.core import errors as numba_errors
from numba.cuda import types
from numba.cuda.cudadecl import registry as typing_registry
from numba.cuda.cudaimpl import registry as lowering_registry
from numba.cuda.extending import intrinsic, models, register_model
from numba.cuda.typing.templates import AbstractTemplate, signature

__all__ = ["EpilogDataType", "maker"]

_STORAGE = {  # dtype name -> (LLVM storage type, bytes, numba type of the value read)
    "float16": (ir.HalfType(), 2, types.float32), "bfloat16": (ir.IntType(16), 2, types.float32),
    "float32": (ir.FloatType(), 4, types.float32), "float64": (ir.DoubleType(), 8, types.float64),
    "int8": (ir.IntType(8), 1, types.int8), "int16": (ir.IntType(16), 2, types.int16),
    "int32": (ir.IntType(32), 4, types.int32), "int64": (ir.IntType(64), 8, types.int64),
    "uint8": (ir.IntType(8), 1, types.uint8), "bool": (ir.IntType(8), 1, types.boolean),
}


class EpilogDataType(types.Type):
    def __init__(self, dtype_name, ndim):
        self.dtype_name, self.ndim = dtype_name, ndim
        self.value_type = _STORAGE[dtype_name][2]
        super().__init__(name=f"mathpy_epilog_data[{dtype_name}, {ndim}d]")


@register_model(EpilogDataType)
class _Model(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("ptr", types.uint64)] + [(f"t{i}", types.int64) for i in range(3)]
        super().__init__(dmm, fe_type, members)


@typing_registry.register_global(operator.getitem)
class _GetItem(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) != 2 or not isinstance(args[0], EpilogDataType):
            return None
        data, index = args
        if isinstance(index, types.Integer):
            count = 1
        elif isinstance(index, types.BaseTuple) and all(isinstance(t, types.Integer) for t in index.types):
            count = len(index.types)
        else:
            raise numba_errors.TypingError(f"epilog data is indexed with integers, not {index}")
        if count != data.ndim:
            raise numba_errors.TypingError(f"epilog data has {data.ndim} dimension(s) but is indexed with {count} "
                                           f"index(es)")
        return signature(data.value_type, *args)


@typing_registry.register_global(operator.setitem)
class _SetItem(AbstractTemplate):
    def generic(self, args, kws):
        if args and isinstance(args[0], EpilogDataType):
            raise numba_errors.TypingError("epilog data is read-only: it cannot be assigned to")
        return None


def _load(context, builder, sig, args):
    data_ty, index_ty = sig.args
    storage, size, value_ty = _STORAGE[data_ty.dtype_name]
    view = context.make_helper(builder, data_ty, value=args[0])
    if isinstance(index_ty, types.Integer):
        indices = [(args[1], index_ty)]
    else:
        indices = [(builder.extract_value(args[1], i), t) for i, t in enumerate(index_ty.types)]
    i64 = ir.IntType(64)
    offset = ir.Constant(i64, 0)
    for position, (value, ty) in enumerate(indices):
        value = context.cast(builder, value, ty, types.int64)
        offset = builder.add(offset, builder.mul(value, getattr(view, f"t{position}")))
    address = builder.add(view.ptr, builder.mul(offset, ir.Constant(i64, size)))
    pointer = builder.inttoptr(address, storage.as_pointer(1))  # global address space: ld.global.nc
    raw = builder.load(pointer, align=size)
    raw.set_metadata("invariant.load", builder.module.add_metadata([]))
    if data_ty.dtype_name == "bfloat16":
        wide = builder.shl(builder.zext(raw, ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())
    if data_ty.dtype_name == "float16":
        return builder.fpext(raw, ir.FloatType())
    if data_ty.dtype_name == "bool":
        return builder.icmp_unsigned("!=", raw, ir.Constant(raw.type, 0))
    return raw


lowering_registry.lower(operator.getitem, EpilogDataType, types.Integer)(_load)
lowering_registry.lower(operator.getitem, EpilogDataType, types.BaseTuple)(_load)

_makers = {}


def maker(dtype_name, ndim):
    """``MAKE_DATA(ptr, s0, s1, s2, t0, t1, t2)`` -> the view of ``ndim`` dimensions (shape unused: no bounds
    checks, as in numba kernels)."""
    key = (dtype_name, ndim)
    if key in _makers:
        return _makers[key]
    data_ty = EpilogDataType(dtype_name, ndim)

    @intrinsic
    def make(typingctx, ptr, s0, s1, s2, t0, t1, t2):
        sig = data_ty(ptr, s0, s1, s2, t0, t1, t2)

        def codegen(context, builder, signature, args):
            view = context.make_helper(builder, data_ty)
            view.ptr = context.cast(builder, args[0], signature.args[0], types.uint64)
            for i in range(3):
                setattr(view, f"t{i}", context.cast(builder, args[4 + i], signature.args[4 + i], types.int64))
            return view._getvalue()

        return sig, codegen

    _makers[key] = make
    return make
