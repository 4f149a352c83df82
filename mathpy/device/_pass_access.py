"""Element access of the elementwise epilog pass (:mod:`._epilog_pass`) at raw global addresses: one element, or a
16-byte vector of them, converted to and from the compute precision (float32 for 16-bit and float32 results, float64,
complex64). 16-bit values are rounded to nearest even with ``cvt.rn.{bf16,f16}.f32`` (sm_80+ for bf16)."""

from llvmlite import ir

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

from numba import types  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

__all__ = ["aligned16", "load_one", "store_one", "load_vector", "store_vector"]

_I16, _I32, _I64, _F32, _F64 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.DoubleType()
# kind -> (LLVM type of one stored scalar, scalars per element, numba compute type)
_KINDS = {"bfloat16": (_I16, 1, types.float32), "float16": (_I16, 1, types.float32),
          "float32": (_F32, 1, types.float32), "float64": (_F64, 1, types.float64),
          "complex64": (_F32, 2, types.complex64)}
_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "complex64": 8}
_cache = {}


def _pointer(context, builder, base, basety, col, colty, kind):
    """A global-address-space pointer to the first scalar of element ``col`` of the row at ``base``."""
    scalar, _, _ = _KINDS[kind]
    size = _BYTES[kind]
    address = builder.add(context.cast(builder, base, basety, types.uint64),
                          builder.mul(context.cast(builder, col, colty, types.uint64), ir.Constant(_I64, size)))
    return builder.inttoptr(address, scalar.as_pointer(1))


def _widen(builder, raw, kind):
    if kind == "bfloat16":
        return builder.bitcast(builder.shl(builder.zext(raw, _I32), ir.Constant(_I32, 16)), _F32)
    if kind == "float16":
        return builder.fpext(builder.bitcast(raw, ir.HalfType()), _F32)
    return raw


def _narrow(builder, value, kind):
    if kind in ("bfloat16", "float16"):
        text = "bf16" if kind == "bfloat16" else "f16"
        return builder.call(ir.InlineAsm(ir.FunctionType(_I16, [_F32]), f"cvt.rn.{text}.f32 $0, $1;", "=h,f"),
                            [value])
    return value


def _compose(context, builder, kind, scalars):
    """The compute value of one element from its stored scalars."""
    if kind == "complex64":
        z = context.make_complex(builder, types.complex64)
        z.real, z.imag = scalars
        return z._getvalue()
    return _widen(builder, scalars[0], kind)


def _decompose(context, builder, kind, value):
    if kind == "complex64":
        z = context.make_complex(builder, types.complex64, value=value)
        return [z.real, z.imag]
    return [_narrow(builder, value, kind)]


@intrinsic
def aligned16(typingctx, address):
    """Whether an integer address is a multiple of 16."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[0], signature.args[0], types.uint64)
        return builder.icmp_unsigned("==", builder.and_(value, ir.Constant(_I64, 15)), ir.Constant(_I64, 0))

    return types.boolean(address), codegen


def _load_intrinsic(result, kind, emit):
    """An intrinsic ``f(row_address, col) -> result`` whose value is ``emit(context, builder, pointer)``."""

    @intrinsic
    def load(typingctx, base, col):
        if not (isinstance(base, types.Integer) and isinstance(col, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            ptr = _pointer(context, builder, args[0], signature.args[0], args[1], signature.args[1], kind)
            return emit(context, builder, ptr)

        return result(base, col), codegen

    return load


def load_one(kind):
    """``f(row_address, col) -> compute value`` of element ``col``."""
    key = ("one", kind)
    if key not in _cache:
        _, per, compute = _KINDS[kind]

        def emit(context, builder, ptr):
            scalars = [builder.load(builder.gep(ptr, [ir.Constant(_I32, i)]), align=_BYTES[kind] // per)
                       for i in range(per)]
            return _compose(context, builder, kind, scalars)

        _cache[key] = _load_intrinsic(compute, kind, emit)
    return _cache[key]


def store_one(kind):
    """``f(row_address, col, value)``: element ``col`` set to ``value`` (the compute type), rounded to ``kind``."""
    key = ("store", kind)
    if key not in _cache:
        scalar, per, compute = _KINDS[kind]

        @intrinsic
        def store(typingctx, base, col, value):
            if not (isinstance(base, types.Integer) and isinstance(col, types.Integer) and value == compute):
                return None

            def codegen(context, builder, signature, args):
                ptr = _pointer(context, builder, args[0], signature.args[0], args[1], signature.args[1], kind)
                align = _BYTES[kind] // per
                for i, part in enumerate(_decompose(context, builder, kind, args[2])):
                    builder.store(part, builder.gep(ptr, [ir.Constant(_I32, i)]), align=align)
                return context.get_dummy_value()

            return types.void(base, col, value), codegen

        _cache[key] = store
    return _cache[key]


def _vector_type(kind, count):
    scalar, per, _ = _KINDS[kind]
    return ir.VectorType(_I32 if scalar is _I16 else scalar, count * per // (2 if scalar is _I16 else 1))


def load_vector(kind, count):
    """``f(row_address, col) -> UniTuple(compute, count)``: elements ``col .. col + count - 1`` read as one 16-byte
    access (the address must be 16-byte aligned)."""
    key = ("loadv", kind, count)
    if key not in _cache:
        scalar, per, compute = _KINDS[kind]
        vec = _vector_type(kind, count)
        result = types.UniTuple(compute, count)

        def emit(context, builder, ptr):
            raw = builder.load(builder.bitcast(ptr, vec.as_pointer(1)), align=16)
            lanes = [builder.extract_element(raw, ir.Constant(_I32, i)) for i in range(vec.count)]
            if scalar is _I16:  # two 16-bit values per 32-bit lane, the first in the low half
                lanes = [builder.trunc(x if h == 0 else builder.lshr(x, ir.Constant(_I32, 16)), _I16)
                         for x in lanes for h in range(2)]
            values = [_compose(context, builder, kind, lanes[i * per:(i + 1) * per]) for i in range(count)]
            return context.make_tuple(builder, result, values)

        _cache[key] = _load_intrinsic(result, kind, emit)
    return _cache[key]


def store_vector(kind, count):
    """``f(row_address, col, v0, ..., v{count-1})``: elements ``col ..`` set as one 16-byte access."""
    key = ("storev", kind, count)
    if key not in _cache:
        scalar, per, compute = _KINDS[kind]
        vec = _vector_type(kind, count)

        def typing(typingctx, args):
            if not (isinstance(args[0], types.Integer) and isinstance(args[1], types.Integer)
                    and all(v == compute for v in args[2:])):
                return None

            def codegen(context, builder, signature, values):
                ptr = _pointer(context, builder, values[0], signature.args[0], values[1], signature.args[1], kind)
                parts = [p for v in values[2:] for p in _decompose(context, builder, kind, v)]
                if scalar is _I16:
                    parts = [builder.or_(builder.zext(parts[2 * i], _I32),
                                         builder.shl(builder.zext(parts[2 * i + 1], _I32), ir.Constant(_I32, 16)))
                             for i in range(len(parts) // 2)]
                raw = ir.Constant(vec, ir.Undefined)
                for i, part in enumerate(parts):
                    raw = builder.insert_element(raw, part, ir.Constant(_I32, i))
                builder.store(raw, builder.bitcast(ptr, vec.as_pointer(1)), align=16)
                return context.get_dummy_value()

            return types.void(*args), codegen

        names = ", ".join(f"v{i}" for i in range(count))
        scope = {"typing": typing}
        exec(f"def typer(typingctx, base, col, {names}):\n    return typing(typingctx, (base, col, {names}))", scope)
        _cache[key] = intrinsic(scope["typer"])
    return _cache[key]
