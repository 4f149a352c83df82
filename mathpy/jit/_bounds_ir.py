"""The device code of ``check_bounds``: an index compared with its array's extent before the access, and the first bad
access recorded for the host instead of performed.

The record is eight int64 words in device memory (:data:`mathpy.jit._bounds.RECORD_WORDS`, whose layout the host
reads): ``[flag, array id, index count, index 0, index 1, index 2, offset, unused]``. The first thread whose access
is out of bounds sets the flag with a compare-and-swap and writes the rest; other bad accesses are skipped without
being recorded. A skipped load yields zero, a skipped store writes nothing, so the kernel finishes and the host
raises after it (an out-of-bounds address is never formed into a load or a store).

Pure llvmlite: used by the callbacks' lowering (:mod:`._device`) and the matmul epilog's ``data``
(:mod:`._epilog_data`).
"""

from llvmlite import ir

__all__ = ["DESCRIPTOR", "I64", "checked", "record"]

I64 = ir.IntType(64)
_I8P = ir.IntType(8).as_pointer()

#: What a checked callback pointer points to (built by the cuFFT-typed wrapper, in registers once inlined):
#: the array's address, its element count, the record's address, the array's id and the element's offset.
DESCRIPTOR = ir.LiteralStructType([_I8P, I64, I64.as_pointer(), I64, I64])


def _constant(value):
    return ir.Constant(I64, value)


def record(builder, record_ptr, array_id, indices, offset, words=None):
    """Record an out-of-bounds access in the int64 words at ``record_ptr`` unless one is recorded already:
    ``array_id`` and ``offset`` are i64 values, ``indices`` a list of i64 values (at most three)."""
    old = builder.cmpxchg(record_ptr, _constant(0), _constant(1), "monotonic", "monotonic")
    with builder.if_then(builder.extract_value(old, 1), likely=False):
        if words is None:
            words = [array_id, _constant(len(indices))] + list(indices) + [_constant(0)] * (3 - len(indices))
        for position, value in enumerate(words + [offset], start=1):
            builder.store(value, builder.gep(record_ptr, [_constant(position)]))


_RECORDER = "mathpy_bounds_record"


def record_call(builder, record_ptr, array_id, indices, offset):
    """:func:`record` as a call of one out-of-line function per module: a kernel that inlines many checked accesses
    (a GEMM epilog's per-thread tile) then keeps one copy of the cold path instead of one per access."""
    module = builder.module
    words = [array_id, _constant(len(indices))] + list(indices) + [_constant(0)] * (3 - len(indices)) + [offset]
    recorder = module.globals.get(_RECORDER)
    if recorder is None:
        recorder = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64.as_pointer()] + [I64] * len(words)),
                               _RECORDER)
        recorder.linkage = "linkonce_odr"
        recorder.attributes.add("noinline")
        inner = ir.IRBuilder(recorder.append_basic_block("entry"))
        pointer, array, count, *rest = recorder.args
        record(inner, pointer, array, [], rest[-1], words=[array, count] + rest[:-1])
        inner.ret_void()
    builder.call(recorder, [record_ptr] + words)


def checked(builder, inside, access, miss):
    """``access()`` when the i1 ``inside`` holds, else ``miss()`` (which records); returns what ``access()`` gave,
    or zero of its type where the access was skipped (a phi), or None for a store."""
    with builder.if_else(inside, likely=True) as (then, otherwise):
        with then:
            hit = access()
            hit_block = builder.block
        with otherwise:
            miss()
            miss_block = builder.block
    if hit is None:
        return None
    value = builder.phi(hit.type)
    value.add_incoming(hit, hit_block)
    value.add_incoming(ir.Constant(hit.type, None), miss_block)
    return value


def all_below(builder, indices, extents):
    """i1: every i64 index lies in ``[0, extent)`` (an unsigned compare: a negative index is refused too)."""
    inside = ir.Constant(ir.IntType(1), 1)
    for index, extent in zip(indices, extents):
        inside = builder.and_(inside, builder.icmp_unsigned("<", index, extent))
    return inside
