"""A Python matmul epilog as the small device function the GPU kernels call: the only piece compiled per epilog.

Every kernel that applies an epilog (the Hopper GEMM, the generic GEMM, the elementwise pass after cuBLASLt) calls one
external function of a C signature (:func:`mathpy.device._gemm_kernel.epilog_signature`),
:data:`mathpy.device._gemm_kernel.EPILOG_SYMBOL`: the value, its batch, row and column, each operand's address and
strides, and the staged tile of operand 0 when the kernel stages it. :func:`wrapper_ltoir` compiles a generated
function of that signature which builds the operands' views and calls the user's function::

    def epilog(value, batch, row, col, o0_ptr, o0_t0, o0_t1, o0_t2):
        D0 = MAKE0(o0_ptr, 0, 0, 0, o0_t0, o0_t1, o0_t2)     # one per operand the function takes
        return COMPUTE(USER(value, row, col, D0))            # (batch too, if it takes it)

to LTO-IR with numba-cuda (about 0.1-0.5 s); nvJitLink then links it with a kernel compiled once per configuration
and inlines the call. The result is cached in memory and on disk (:mod:`._cache`) under a key of the function's
content (code, constants, closures and the globals it reads, by value), the operands' dtypes and dimensions, the
compute type, the staged operand, whether it is checked, the compute capability, and the toolchain and mathpy's
version.

A *checked* function (``check_bounds``, :mod:`._bounds`) takes each operand's shape after its strides
(``o0_s0, o0_s1, o0_s2``) and builds checked views (:mod:`._epilog_data`): an index outside an operand is not read,
and the first one is recorded, with the operand's position, in the module's global
:data:`~._epilog_data.RECORD_SYMBOL`, which survives the link as a visible global the host reads after the launch.
Unchecked functions take no shapes: their kernels are what they were without check_bounds.

:func:`simulator_function` is the same function for numba's CUDA simulator, on host memory.
"""

import hashlib
import threading

import numpy as np

from ..device._gemm_kernel import (COMPUTE_OF, EPILOG_SYMBOL, MAX_OPERANDS, OPERAND_FIELDS, epilog_signature,
                                   operand_params)
from .. import _memo
from . import _cache
from ._helpers import known_to, with_compiled_helpers
from ._spec import compile_error

__all__ = ["OperandKind", "wrapper_source", "wrapper_function", "wrapper_ltoir", "wrapper_key", "simulator_function"]

_lock = threading.Lock()
_memory = _memo.Memo("epilog-wrappers", group="jit", max_entries=256)  # wrapper key (or identity tuple) -> LTO-IR


def OperandKind(dtype, ndim):  # noqa: N802 (a tuple, named like the type it stands for)
    """An operand as the compiled function sees it: (dtype name, dimensions)."""
    return (str(dtype), int(ndim))


def wrapper_source(with_batch, kinds, staged=None, checked=False):
    """Source of ``epilog(...)`` for a function taking ``kinds`` operands (None for an operand given as None);
    ``staged``: (bm, bn) when operand 0 is staged in the kernel's tile buffer; ``checked``: the operands' shapes are
    parameters too, and the views check indices against them."""
    if len(kinds) > MAX_OPERANDS:
        raise ValueError(f"a matmul epilog reads at most {MAX_OPERANDS} operands; this one takes {len(kinds)}")
    params = ["value", "batch", "row", "col", *operand_params(len(kinds), checked)] + \
        (["sbase", "m0", "n0"] if staged is not None else [])
    lines = [f"def epilog({', '.join(params)}):"]
    args = []
    for i, kind in enumerate(kinds):
        if kind is None:
            args.append("None")
            continue
        extra = ", sbase, batch, m0, n0" if (staged is not None and i == 0) else ""
        shape = f"o{i}_s0, o{i}_s1, o{i}_s2" if checked else "0, 0, 0"
        lines.append(f"    D{i} = MAKE{i}(o{i}_ptr, {shape}, o{i}_t0, o{i}_t1, o{i}_t2{extra})")
        args.append(f"D{i}")
    coords = "batch, row, col" if with_batch else "row, col"
    operands = "".join(f", {a}" for a in args)
    lines.append(f"    return COMPUTE(USER(value, {coords}{operands}))")
    return "\n".join(lines) + "\n"


def wrapper_key(epilog, kinds, compute, staged, cc, checked=False):
    """The disk key of the compiled function, or None when the epilog cannot be fingerprinted."""
    if epilog.key is None:
        return None
    from .. import __version__

    parts = (epilog.key, epilog.with_batch, tuple(kinds), compute, staged, tuple(cc), __version__, EPILOG_SYMBOL,
             _generators_digest()) + (("check_bounds",) if checked else ())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def wrapper_ltoir(epilog, kinds, result, staged, cc, checked=False):
    """``(LTO-IR, key)`` of the epilog function for a kernel writing a ``result`` dtype on compute capability ``cc``
    (``kinds``: one :func:`OperandKind` or None per operand of ``epilog.operands``; ``staged``: (bm, bn) when operand
    0 is staged in shared memory; ``checked``: the check_bounds build). Raises CallbackCompileError naming the
    function's file and line when numba cannot compile it."""
    compute = COMPUTE_OF[result]
    key = wrapper_key(epilog, kinds, compute, staged, cc, checked)
    memory_key = key or (epilog.function, tuple(kinds), compute, staged, tuple(cc), checked)
    with _lock:
        found = _memory.get(memory_key)
        if found is None and key is not None:
            entry = _cache.load_entry(key)
            found = entry[1] if entry is not None else None
        if found is None:
            found = _compile(epilog, kinds, compute, staged, cc, checked)
            if key is not None:
                _cache.store_entry(key, {"function": epilog.where, "kind": "matmul-epilog", "checked": checked},
                                   found)
        _memory.put(memory_key, found)
    return found, key


def _namespace(epilog, kinds, compute, staged, checked):
    from numba import cuda

    from .._numba_cuda_fixes import patch_numba_cuda_ufuncs
    from . import _epilog_data

    patch_numba_cuda_ufuncs()
    from numba.cuda.descriptor import cuda_target

    device_function = cuda.jit(device=True, forceinline=True)
    user = with_compiled_helpers(epilog.function, device_function, known_to(cuda_target.typing_context))
    ns = {"USER": device_function(user),
          "COMPUTE": {"float32": np.float32, "float64": np.float64, "complex64": np.complex64}[compute]}
    for i, kind in enumerate(kinds):
        if kind is not None:
            tile = staged if i == 0 else None
            ns[f"MAKE{i}"] = (_epilog_data.staged_maker(*kind, *tile, checked=checked, array=i) if tile else
                              _epilog_data.maker(*kind, checked=checked, array=i))
    return ns


def wrapper_function(epilog, kinds, compute, staged=None, checked=False):
    """``(function, numba signature)`` of the epilog function of the calling convention for ``compute`` ("float32",
    "float64", "complex64"), before it is compiled (arguments as for :func:`wrapper_ltoir`)."""
    source = wrapper_source(epilog.with_batch, kinds, staged, checked)
    namespace = _namespace(epilog, kinds, compute, staged, checked)
    exec(compile(source, f"<mathpy matmul epilog wrapper of {epilog.where}>", "exec"), namespace)
    return namespace["epilog"], epilog_signature(compute, len(kinds), staged is not None, checked)


def _compile(epilog, kinds, compute, staged, cc, checked=False):
    from numba import cuda
    from numba.core import errors

    from ..device._gemm_build import compiling_for

    function, signature = wrapper_function(epilog, kinds, compute, staged, checked)
    try:
        with compiling_for(cc):
            ltoir, _ = cuda.compile(function, signature, device=True, abi="c",
                                    abi_info={"abi_name": EPILOG_SYMBOL}, output="ltoir", cc=tuple(cc), opt=True)
    except errors.NumbaError as e:
        raise compile_error(epilog, f"the GPU (compute capability {cc[0]}.{cc[1]})", e) from e
    return ltoir


_digest = []


def _generators_digest():
    """A hash of the sources of the device code this function's calling convention and views come from."""
    if not _digest:
        import os

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256()
        for name in ("device/_gemm_kernel.py", "jit/_epilog_data.py", "jit/_epilog_wrapper.py", "jit/_bounds_ir.py"):
            with open(os.path.join(root, name), "rb") as f:
                h.update(f.read())
        _digest.append(h.hexdigest()[:16])
    return _digest[0]


# ---------------------------------------------------------------------------------------------------------------------
# numba's CUDA simulator


def simulator_function(epilog, kinds, views):
    """The epilog function of the calling convention as plain Python (for kernels run by numba's CUDA simulator):
    ``views(i, kind, ptr, strides, sbase, batch, m0, n0)`` makes operand ``i``'s view on host memory from its slot
    (the last four: the staged tile, as the kernel passes them)."""
    fn, with_batch = epilog.function, epilog.with_batch
    width = len(OPERAND_FIELDS)

    def call(value, batch, row, col, *rest):
        operands = []
        staged = rest[width * len(kinds):] or (0, 0, 0)
        for i, kind in enumerate(kinds):
            slot = rest[i * width:(i + 1) * width]
            operands.append(None if kind is None else
                            views(i, kind, int(slot[0]), tuple(int(t) for t in slot[1:4]), staged[0], batch,
                                  staged[1], staged[2]))
        coords = (batch, row, col) if with_batch else (row, col)
        return fn(value, *coords, *operands)

    return call
