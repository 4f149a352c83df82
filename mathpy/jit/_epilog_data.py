"""The kernel-side ``data`` of a matmul epilog: a read-only strided view whose ``[]`` is lowered to one
``ld.global.nc`` load (CUDA C++'s ``__ldg``) per element, 16-bit floats widened to float32.

A *staged* view (:func:`staged_maker`) also knows a copy of the block's tile of ``data`` in shared memory: the
Hopper kernel copies ``data[batch, m0:m0 + bm, n0:n0 + bn]`` there with TMA while the tile's product is computed
(16-bit data of the result's shape). An index inside that tile reads shared memory (about 30 cycles instead of a
trip to device memory per element); any other index reads device memory as above, so every index pattern the
function uses stays correct. The tile's layout is the epilog buffer's (:func:`tile_offset_ir`): boxes of 64 columns,
``bm`` rows of 128 bytes each, the 16-byte chunks of row ``r`` permuted by ``r % 8`` (TMA's 128-byte swizzle).

A *checked* view (``check_bounds``) also holds the shape: an index outside it is not read (the value is zero) and
the first one is recorded, with the view's ``array`` number (the operand's position among the epilog's operands), in
the kernel module's global :data:`RECORD_SYMBOL` (see :mod:`._bounds_ir`), which the host reads after the launch.

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

from . import _bounds_ir as B
from ._bounds import RECORD_WORDS

__all__ = ["EpilogDataType", "RECORD_SYMBOL", "maker", "staged_maker", "tile_offset_ir"]

#: The global of a kernel module with a checked ``data`` view that records its first out-of-bounds index.
RECORD_SYMBOL = "mathpy_epilog_data_bounds"

_STORAGE = {  # dtype name -> (LLVM storage type, bytes, numba type of the value read)
    "float16": (ir.HalfType(), 2, types.float32), "bfloat16": (ir.IntType(16), 2, types.float32),
    "float32": (ir.FloatType(), 4, types.float32), "float64": (ir.DoubleType(), 8, types.float64),
    "complex64": (ir.VectorType(ir.FloatType(), 2), 8, types.complex64),
    "int8": (ir.IntType(8), 1, types.int8), "int16": (ir.IntType(16), 2, types.int16),
    "int32": (ir.IntType(32), 4, types.int32), "int64": (ir.IntType(64), 8, types.int64),
    "uint8": (ir.IntType(8), 1, types.uint8), "bool": (ir.IntType(8), 1, types.boolean),
}


class EpilogDataType(types.Type):
    """``tile``: None, or (bm, bn) of the staged copy in shared memory; ``checked``: indices checked against the
    shape, a bad one recorded as array number ``array``."""

    def __init__(self, dtype_name, ndim, tile=None, checked=False, array=0):
        self.dtype_name, self.ndim, self.tile, self.checked = dtype_name, ndim, tile, checked
        self.array = array if checked else 0
        self.value_type = _STORAGE[dtype_name][2]
        staged = "" if tile is None else f", staged {tile[0]}x{tile[1]}"
        check = f", checked as array {self.array}" if checked else ""
        super().__init__(name=f"mathpy_epilog_data[{dtype_name}, {ndim}d{staged}{check}]")


_STAGED_FIELDS = ("sbase", "b", "m0", "n0")  # shared address of the copy; batch index and origin of the tile


@register_model(EpilogDataType)
class _Model(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("ptr", types.uint64)] + [(f"t{i}", types.int64) for i in range(3)]
        if fe_type.checked:
            members += [(f"s{i}", types.int64) for i in range(3)]
        if fe_type.tile is not None:
            members += [(name, types.int64) for name in _STAGED_FIELDS]
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


_I64 = ir.IntType(64)


def tile_offset_ir(builder, row, col, bm):
    """Byte offset (i64) of element (row, col) of a 16-bit tile in the epilog buffer: box ``col // 64`` of ``bm``
    rows of 128 bytes, 16-byte chunk ``(col % 64) // 8`` of row ``row`` stored at chunk ``that ^ (row % 8)``
    (``_gemm_hopper.tile_offset`` is the same formula in Python)."""
    def c(v):
        return ir.Constant(_I64, v)

    box = builder.mul(builder.lshr(col, c(6)), c(bm * 128))
    chunk = builder.xor(builder.and_(builder.lshr(col, c(3)), c(7)), builder.and_(row, c(7)))
    within = builder.shl(builder.and_(col, c(7)), c(1))
    return builder.add(builder.add(box, builder.mul(row, c(128))), builder.or_(builder.shl(chunk, c(4)), within))


def _widen(context, builder, data_ty, raw):
    if data_ty.dtype_name == "bfloat16":
        wide = builder.shl(builder.zext(raw, ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())
    if data_ty.dtype_name == "float16":
        return builder.fpext(raw, ir.FloatType())
    if data_ty.dtype_name == "bool":
        return builder.icmp_unsigned("!=", raw, ir.Constant(raw.type, 0))
    if data_ty.dtype_name == "complex64":  # one 8-byte load, then numba's complex
        z = context.make_complex(builder, types.complex64)
        z.real, z.imag = (builder.extract_element(raw, ir.Constant(ir.IntType(32), i)) for i in range(2))
        return z._getvalue()
    return raw


def _global_load(context, builder, data_ty, view, indices):
    storage, size, _ = _STORAGE[data_ty.dtype_name]
    offset = ir.Constant(_I64, 0)
    for position, value in enumerate(indices):
        offset = builder.add(offset, builder.mul(value, getattr(view, f"t{position}")))
    address = builder.add(view.ptr, builder.mul(offset, ir.Constant(_I64, size)))
    pointer = builder.inttoptr(address, storage.as_pointer(1))  # global address space: ld.global.nc
    raw = builder.load(pointer, align=size)
    raw.set_metadata("invariant.load", builder.module.add_metadata([]))
    return _widen(context, builder, data_ty, raw)


def _staged_load(context, builder, data_ty, view, indices):
    """Shared memory when the index lies in the staged tile (the last two indices address rows and columns, a third
    before them the batch), device memory otherwise."""
    storage, size, _ = _STORAGE[data_ty.dtype_name]
    bm, bn = data_ty.tile
    row = builder.sub(indices[-2], view.m0)
    col = builder.sub(indices[-1], view.n0)
    # row in [0, bm) and col in [0, bn) (powers of two) as masks: the compiler folds them away from the known bits of
    # the kernel's own coordinates, so data[row, col] costs one shared load and no branch
    outside = builder.or_(builder.and_(row, ir.Constant(_I64, -bm)), builder.and_(col, ir.Constant(_I64, -bn)))
    inside = builder.icmp_unsigned("==", outside, ir.Constant(_I64, 0))
    if data_ty.ndim == 3:
        inside = builder.and_(inside, builder.icmp_signed("==", indices[0], view.b))
    with builder.if_else(inside, likely=True) as (shared, device):
        with shared:
            address = builder.add(view.sbase, tile_offset_ir(builder, row, col, bm))
            raw = builder.load(builder.inttoptr(address, storage.as_pointer(3)), align=size)
            from_shared = _widen(context, builder, data_ty, raw)
            shared_block = builder.block
        with device:
            from_device = _global_load(context, builder, data_ty, view, indices)
            device_block = builder.block
    value = builder.phi(from_shared.type)
    value.add_incoming(from_shared, shared_block)
    value.add_incoming(from_device, device_block)
    return value


def _load(context, builder, sig, args):
    data_ty, index_ty = sig.args
    view = context.make_helper(builder, data_ty, value=args[0])
    if isinstance(index_ty, types.Integer):
        indices = [(args[1], index_ty)]
    else:
        indices = [(builder.extract_value(args[1], i), t) for i, t in enumerate(index_ty.types)]
    indices = [context.cast(builder, value, ty, types.int64) for value, ty in indices]
    load = _staged_load if data_ty.tile is not None else _global_load
    if not data_ty.checked:
        return load(context, builder, data_ty, view, indices)
    inside = B.all_below(builder, indices, [getattr(view, f"s{i}") for i in range(len(indices))])
    return B.checked(builder, inside, lambda: load(context, builder, data_ty, view, indices),
                     lambda: B.record_call(builder, _record(builder), ir.Constant(_I64, data_ty.array), indices,
                                           ir.Constant(_I64, 0)))


def _record(builder):
    """A generic pointer to the module's record (defined once per module, zero at load)."""
    module = builder.module
    record = module.globals.get(RECORD_SYMBOL)
    if record is None:
        record = ir.GlobalVariable(module, ir.ArrayType(_I64, RECORD_WORDS), RECORD_SYMBOL, addrspace=1)
        record.initializer = ir.Constant(record.value_type, None)
        record.align = 8
        _keep_visible(module, record)
    first = builder.gep(record, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 0)])
    return builder.addrspacecast(first, _I64.as_pointer())


def _keep_visible(module, record):
    """List ``record`` in ``llvm.used``: nvJitLink's link-time optimisation internalises every global no module of the
    link declares used (the host's ``cuModuleGetGlobal`` would not find it), and keeps those that are."""
    i8p = ir.IntType(8).as_pointer()
    pointer = ir.FormattedConstant(i8p, f"addrspacecast ({record.type} {record.get_reference()} to {i8p})")
    used = ir.GlobalVariable(module, ir.ArrayType(i8p, 1), "llvm.used")
    used.linkage = "appending"
    used.section = "llvm.metadata"
    used.initializer = ir.Constant(used.value_type, [pointer])


lowering_registry.lower(operator.getitem, EpilogDataType, types.Integer)(_load)
lowering_registry.lower(operator.getitem, EpilogDataType, types.BaseTuple)(_load)

_makers = {}


def _set_shape(context, builder, view, signature, args, checked):
    if checked:
        for i in range(3):
            setattr(view, f"s{i}", context.cast(builder, args[1 + i], signature.args[1 + i], types.int64))


def maker(dtype_name, ndim, checked=False, array=0):
    """``MAKE_DATA(ptr, s0, s1, s2, t0, t1, t2)`` -> the view of ``ndim`` dimensions (the shape is used only when
    ``checked``: no bounds checks otherwise, as in numba kernels; ``array``: its number in the record)."""
    key = (dtype_name, ndim, checked, array)
    if key in _makers:
        return _makers[key]
    data_ty = EpilogDataType(dtype_name, ndim, checked=checked, array=array)

    @intrinsic
    def make(typingctx, ptr, s0, s1, s2, t0, t1, t2):
        sig = data_ty(ptr, s0, s1, s2, t0, t1, t2)

        def codegen(context, builder, signature, args):
            view = context.make_helper(builder, data_ty)
            view.ptr = context.cast(builder, args[0], signature.args[0], types.uint64)
            for i in range(3):
                setattr(view, f"t{i}", context.cast(builder, args[4 + i], signature.args[4 + i], types.int64))
            _set_shape(context, builder, view, signature, args, checked)
            return view._getvalue()

        return sig, codegen

    _makers[key] = make
    return make


def staged_maker(dtype_name, ndim, bm, bn, checked=False, array=0):
    """``MAKE_DATA(ptr, s0, s1, s2, t0, t1, t2, sbase, b, m0, n0)`` -> a view of ``ndim`` (2 or 3) dimensions of a
    16-bit ``data`` of the result's shape whose tile (batch ``b``, rows ``m0:m0 + bm``, columns ``n0:n0 + bn``) is
    staged in shared memory at ``sbase``."""
    if _STORAGE[dtype_name][1] != 2 or ndim not in (2, 3):
        raise ValueError(f"only 2- or 3-dimensional 16-bit data is staged, not {ndim}-d {dtype_name}")
    key = (dtype_name, ndim, bm, bn, checked, array)
    if key in _makers:
        return _makers[key]
    data_ty = EpilogDataType(dtype_name, ndim, (bm, bn), checked, array)

    @intrinsic
    def make(typingctx, ptr, s0, s1, s2, t0, t1, t2, sbase, b, m0, n0):
        sig = data_ty(ptr, s0, s1, s2, t0, t1, t2, sbase, b, m0, n0)

        def codegen(context, builder, signature, args):
            view = context.make_helper(builder, data_ty)
            view.ptr = context.cast(builder, args[0], signature.args[0], types.uint64)
            for i in range(3):
                setattr(view, f"t{i}", context.cast(builder, args[4 + i], signature.args[4 + i], types.int64))
            for i, name in enumerate(_STAGED_FIELDS):
                setattr(view, name, context.cast(builder, args[7 + i], signature.args[7 + i], types.int64))
            _set_shape(context, builder, view, signature, args, checked)
            return view._getvalue()

        return sig, codegen

    _makers[key] = make
    return make
