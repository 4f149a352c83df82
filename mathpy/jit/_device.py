"""numba-cuda side of callback compilation: typed pointer arguments and the cuFFT-typed wrapper.

Imported only on a compile-cache miss (importing numba-cuda costs about a second).

Two things make a compiled Python callback as fast as a CUDA C++ one inside cuFFT:

1. The pointer arguments are :class:`CallbackPointer` types whose ``[]`` we lower ourselves: a complex element is
   read and written as one ``<2 x float>`` (``<2 x double>``) access, and user data is read through
   ``load ... addrspace(1)* !invariant.load`` which NVVM turns into ``ld.global.nc`` (CUDA C++'s ``__ldg``).
2. numba's C-ABI function has another LLVM type than cuFFT's call site (a literal ``{float, float}`` instead of
   ``%struct.float2``, a flattened complex argument, ``i8*`` for ``void``); the LTO link then keeps a call through a
   pointer. :func:`build_ltoir` compiles the user function under an internal name and wraps it in a function whose
   type is exactly cuFFT's prototype, in the same LTO-IR, so the link inlines it.
"""

import operator

from llvmlite import ir
from numba.core import errors as numba_errors
from numba.cuda import types
from numba.cuda.compiler import compile_cuda
from numba.cuda.descriptor import cuda_target
from numba.cuda.cudadecl import registry as typing_registry
from numba.cuda.cudadrv.error import CCSupportError, NvvmError, NvvmSupportError
from numba.cuda.cudaimpl import registry as lowering_registry
from numba.cuda.extending import core_models, register_model
from numba.cuda.typing.templates import AbstractTemplate, signature

from . import _bounds_ir as B
from ..device._gemm_build import compiling_for
from ._bounds import HEADER_WORDS, RECORD_WORDS
from ._helpers import known_to, with_compiled_helpers
from ._spec import CallbackSpec

__all__ = ["CC_ERRORS", "CallbackPointer", "MISSING_NVVM_ERRORS", "NUMBA_ERRORS", "build_llvm_ir", "build_ltoir",
           "numba_type", "nvvm_version"]

NUMBA_ERRORS = (numba_errors.NumbaError, NvvmError)  # the user's function does not compile
CC_ERRORS = (CCSupportError,)                         # the compute capability is not supported by this NVVM
MISSING_NVVM_ERRORS = (NvvmSupportError,)

_NUMBA_SCALARS = {
    "bool": types.boolean, "int8": types.int8, "int16": types.int16, "int32": types.int32, "int64": types.int64,
    "uint8": types.uint8, "uint16": types.uint16, "uint32": types.uint32, "uint64": types.uint64,
    "float16": types.float16, "float32": types.float32, "float64": types.float64,
    "complex64": types.complex64, "complex128": types.complex128,
}


def numba_type(dtype_name):
    return _NUMBA_SCALARS[dtype_name]


class CallbackPointer(types.Type):
    """Pointer argument of a callback. ``role`` is ``"data"`` (the FFT operand: read and written, may alias between
    load and store callbacks, so plain loads) or ``"user_info"`` (read-only for the whole kernel: non-coherent
    global loads). A ``checked`` pointer points to a :data:`~._bounds_ir.DESCRIPTOR` instead of the elements, and
    every access is checked against the element count it holds."""

    def __init__(self, dtype, role, checked=False):
        self.dtype = dtype
        self.role = role
        self.checked = checked
        super().__init__(name=f"mathpy_{role}_ptr[{dtype}{', checked' if checked else ''}]")

    @property
    def readonly(self):
        return self.role == "user_info"


register_model(CallbackPointer)(core_models.PointerModel)


def _vector_pointer(builder, elem_ptr, dtype, global_space):
    """Bitcast a pointer to a complex element into a pointer to ``<2 x T>`` (or keep a scalar pointer), optionally
    in the global address space."""
    if isinstance(dtype, types.Complex):
        scalar = ir.FloatType() if dtype.bitwidth == 64 else ir.DoubleType()
        target = ir.VectorType(scalar, 2)
    else:
        target = elem_ptr.type.pointee
    ptr = builder.bitcast(elem_ptr, target.as_pointer()) if target != elem_ptr.type.pointee else elem_ptr
    if global_space:
        ptr = builder.addrspacecast(ptr, target.as_pointer(1))
    return ptr


def _alignment(context, dtype):
    """Natural alignment of an element: a complex is aligned to its full size (float2 / double2 in CUDA C++)."""
    if isinstance(dtype, types.Complex):
        return dtype.bitwidth // 8
    return context.get_abi_sizeof(context.get_data_type(dtype))


def _element_pointer(context, builder, ptr, idxty, idx):
    idx = context.cast(builder, idx, idxty, types.int64)
    return builder.gep(ptr, [idx])


def _checked_access(context, builder, ptrty, idxty, args, access):
    """``access(element pointer)`` behind the bounds check of a checked pointer (see :mod:`._bounds_ir`)."""
    descriptor = builder.bitcast(args[0], B.DESCRIPTOR.as_pointer())
    base, count, record, array_id, offset = (
        builder.load(builder.gep(descriptor, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), i)]))
        for i in range(5))
    index = context.cast(builder, args[1], idxty, types.int64)
    elements = builder.bitcast(base, args[0].type)
    return B.checked(builder, B.all_below(builder, [index], [count]),
                     lambda: access(builder.gep(elements, [index])),
                     lambda: B.record(builder, record, array_id, [index], offset))


def _lower_load(context, builder, sig, args):
    ptrty, idxty = sig.args
    if ptrty.checked:
        return _checked_access(context, builder, ptrty, idxty, args, lambda elem: _load(context, builder, ptrty, elem))
    return _load(context, builder, ptrty, _element_pointer(context, builder, args[0], idxty, args[1]))


def _load(context, builder, ptrty, elem):
    dtype = ptrty.dtype
    vptr = _vector_pointer(builder, elem, dtype, ptrty.readonly)
    raw = builder.load(vptr, align=_alignment(context, dtype))
    if ptrty.readonly:
        raw.set_metadata("invariant.load", builder.module.add_metadata([]))
    if isinstance(dtype, types.Complex):
        value = ir.Constant(context.get_value_type(dtype), ir.Undefined)
        value = builder.insert_value(value, builder.extract_element(raw, ir.Constant(ir.IntType(32), 0)), 0)
        return builder.insert_value(value, builder.extract_element(raw, ir.Constant(ir.IntType(32), 1)), 1)
    return context.data_model_manager[dtype].from_data(builder, raw)


def _lower_store(context, builder, sig, args):
    ptrty, idxty, valty = sig.args
    val = context.cast(builder, args[2], valty, ptrty.dtype)
    if ptrty.checked:
        _checked_access(context, builder, ptrty, idxty, args, lambda elem: _store(context, builder, ptrty, elem, val))
    else:
        _store(context, builder, ptrty, _element_pointer(context, builder, args[0], idxty, args[1]), val)
    return context.get_dummy_value()


def _store(context, builder, ptrty, elem, val):
    dtype = ptrty.dtype
    vptr = _vector_pointer(builder, elem, dtype, False)
    if isinstance(dtype, types.Complex):
        raw = ir.Constant(vptr.type.pointee, ir.Undefined)
        raw = builder.insert_element(raw, builder.extract_value(val, 0), ir.Constant(ir.IntType(32), 0))
        raw = builder.insert_element(raw, builder.extract_value(val, 1), ir.Constant(ir.IntType(32), 1))
    else:
        raw = context.data_model_manager[dtype].as_data(builder, val)
    builder.store(raw, vptr, align=_alignment(context, dtype))


# Typing and lowering go straight into numba-cuda's registries (an @overload would be compiled as a device function,
# which queries the current GPU: we must compile with none present).
@typing_registry.register_global(operator.getitem)
class _GetItem(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 2 and isinstance(args[0], CallbackPointer) and isinstance(args[1], types.Integer):
            return signature(args[0].dtype, *args)
        return None


@typing_registry.register_global(operator.setitem)
class _SetItem(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 3 and isinstance(args[0], CallbackPointer) and isinstance(args[1], types.Integer):
            if args[0].readonly:
                raise numba_errors.TypingError("user_info is read-only inside a callback: it cannot be assigned to")
            return signature(types.void, args[0], args[1], args[0].dtype)  # numba casts the value to the element
        return None


lowering_registry.lower(operator.getitem, CallbackPointer, types.Integer)(_lower_load)
lowering_registry.lower(operator.setitem, CallbackPointer, types.Integer, types.Any)(_lower_store)


# --- the cuFFT-typed wrapper ---------------------------------------------------------------------------------------

def _llvm_scalar(dtype_name):
    return {"float32": ir.FloatType(), "float64": ir.DoubleType(),
            "complex64": ir.FloatType(), "complex128": ir.DoubleType()}[dtype_name]


def _numba_signature(spec: CallbackSpec):
    elem = numba_type(spec.element_dtype)
    data = CallbackPointer(elem, "data", spec.check_bounds)
    info = types.voidptr if spec.user_info_dtype is None else CallbackPointer(numba_type(spec.user_info_dtype),
                                                                                "user_info", spec.check_bounds)
    if spec.kind == "prolog":
        return elem, (data, types.uint64, info, types.voidptr)
    return types.void, (data, types.uint64, elem, info, types.voidptr)


def _repack(builder, pair, struct_type):
    """A ``struct_type`` value holding the two fields of the aggregate ``pair`` (a complex as another struct type)."""
    value = ir.Constant(struct_type, ir.Undefined)
    value = builder.insert_value(value, builder.extract_value(pair, 0), 0)
    return builder.insert_value(value, builder.extract_value(pair, 1), 1)


def build_ltoir(spec: CallbackSpec, fn, inner_name):
    """Compile ``fn`` for ``spec`` and return LTO-IR bytes exporting ``spec.mangled_name`` with cuFFT's exact type.

    Raises numba's errors unchanged (the caller turns them into a CallbackCompileError)."""
    library = _build_library(spec, fn, inner_name)
    return bytes(library.get_ltoir(cc=tuple(spec.compute_capability)))


def build_llvm_ir(spec: CallbackSpec, fn, inner_name):
    """The NVVM IR (LLVM assembly text, one module per ``; ModuleID``) that :func:`build_ltoir` turns into LTO-IR: the
    wrapper and the user's function. Tests execute it on the host to check the wrapper without a GPU."""
    return _build_library(spec, fn, inner_name).get_llvm_str()


def _device_function(helper):
    from numba import cuda
    return cuda.jit(device=True)(helper)


def _build_library(spec, fn, inner_name):
    return_type, args = _numba_signature(spec)
    cc = tuple(spec.compute_capability)
    # plain Python helpers it calls: CUDA device functions
    fn = with_compiled_helpers(fn, _device_function, known_to(cuda_target.typing_context))
    with compiling_for(cc):  # (typing a call to a device function asks for the current device's cc)
        cres = compile_cuda(fn, return_type, args, cc=cc, nvvm_options={"opt": 3, "gen-lto": None}, abi="c",
                            abi_info={"abi_name": inner_name})
    if spec.kind == "prolog" and cres.signature.return_type != return_type:  # pragma: no cover (numba casts)
        raise TypeError(f"prolog returns {cres.signature.return_type}, expected {return_type}")

    codegen = cres.target_context.codegen()
    module = codegen._create_empty_module(f"mathpy_shim_{inner_name}")
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    scalar = _llvm_scalar(spec.element_dtype)
    if spec.is_complex:
        struct_name = "struct.float2" if spec.element_dtype == "complex64" else "struct.double2"
        element_ty = module.context.get_identified_type(struct_name)
        if element_ty.is_opaque:
            element_ty.set_body(scalar, scalar)
    else:
        element_ty = scalar

    callee_ty = cres.library.get_function(inner_name).function_type
    callee = ir.Function(module, callee_ty, inner_name)
    if spec.kind == "prolog":
        fnty = ir.FunctionType(element_ty, [i8p, i64, i8p, i8p])
    else:
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i64, element_ty, i8p, i8p])
    wrapper = ir.Function(module, fnty, spec.mangled_name)
    wrapper.linkage = "external"
    builder = ir.IRBuilder(wrapper.append_basic_block("entry"))

    # Map the wrapper's arguments onto the callee's C-ABI parameters; a by-value complex may be flattened to two
    # scalars or passed as a literal struct.
    params = list(callee_ty.args)
    call_args = []

    def take(value):
        want = params[len(call_args)]
        if value.type != want:
            value = builder.bitcast(value, want) if isinstance(want, ir.PointerType) else value
        call_args.append(value)

    arguments = _checked_arguments(builder, spec, wrapper.args) if spec.check_bounds else wrapper.args
    for position, arg in enumerate(arguments):
        if spec.kind == "epilog" and position == 2 and spec.is_complex:
            want = params[len(call_args)]
            if isinstance(want, (ir.LiteralStructType, ir.IdentifiedStructType)):
                call_args.append(_repack(builder, arg, want))
            else:
                call_args.append(builder.extract_value(arg, 0))
                call_args.append(builder.extract_value(arg, 1))
        else:
            take(arg)
    if len(call_args) != len(params):  # pragma: no cover (guards a numba ABI change)
        raise RuntimeError(f"unexpected numba C-ABI signature {callee_ty} for {spec.kind} {spec.element_dtype}")
    result = builder.call(callee, call_args)
    if spec.kind == "prolog":
        builder.ret(_repack(builder, result, element_ty) if spec.is_complex else result)
    else:
        builder.ret_void()

    library = codegen.create_library(f"mathpy_shim_{inner_name}", nvvm_options={"opt": 3})
    library.add_ir_module(module)
    library.add_linking_library(cres.library)  # its functions become linkonce_odr: only the wrapper is exported
    library.finalize()
    return library


def _checked_arguments(builder, spec, args):
    """The wrapper's arguments for a checked build: the data and user-data pointers replaced by descriptors (stack
    slots that become registers once inlined) built from the header ``caller_info`` points to (see
    :mod:`._bounds`): ``[user data address, its element count, the FFT data's element count, record...]``."""
    args = list(args)
    info_at = 2 if spec.kind == "prolog" else 3
    i64 = ir.IntType(64)
    header = builder.bitcast(args[info_at], i64.as_pointer())
    invariant = builder.module.add_metadata([])

    def word(position):
        value = builder.load(builder.gep(header, [ir.Constant(i64, position)]))
        value.set_metadata("invariant.load", invariant)  # the record words after them change, these do not
        return value

    record = builder.gep(header, [ir.Constant(i64, HEADER_WORDS - RECORD_WORDS)])

    def descriptor(base, count, array_id):
        slot = builder.alloca(B.DESCRIPTOR)
        for position, value in enumerate((base, count, record, ir.Constant(i64, array_id), args[1])):
            builder.store(value, builder.gep(slot, [ir.Constant(ir.IntType(32), 0),
                                                    ir.Constant(ir.IntType(32), position)]))
        return builder.bitcast(slot, args[0].type)

    args[0] = descriptor(args[0], word(2), 0)
    if spec.user_info_dtype is None:
        args[info_at] = ir.Constant(args[info_at].type, None)
    else:
        args[info_at] = descriptor(builder.inttoptr(word(0), args[0].type), word(1), 1)
    return args


def nvvm_version():
    """((major, minor) of the libNVVM numba-cuda compiles with, its file path or None)."""
    from numba.cuda.cudadrv import nvvm

    version = tuple(int(v) for v in nvvm.NVVM().get_version())
    path = None
    try:  # the mapped file is the one in use, wherever numba-cuda found it
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libnvvm" in line and "/" in line:
                    path = line[line.index("/"):].strip()
                    break
    except OSError:
        pass
    return version, path
