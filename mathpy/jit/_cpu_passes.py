"""Fused CPU passes: an FFT's prolog/epilog callbacks and a matmul's Python epilog as numba loops over a block of rows,
compiled with ``nogil=True``, so that :func:`mathpy._threads.run_chunks` runs blocks on every core at once.

An FFT pass addresses its operand through two small offset tables instead of one offset per element: element
``(r, j)`` of a pass lies at ``row_offsets[r] + inner_offsets[j]`` of the operand's 1-D memory span (the rows are the
batch, or the first transform axis; the inner offsets cover the rest), and that offset is what the callback gets, as
on the GPU.

- :func:`loader`: ``dst[r, j] = prolog(span, offset(r, j), user_info, None)``; without a prolog, a plain gather;
- :func:`storer`: ``epilog(span, offset(r, j), src[r, j], user_info, None)``, then ``span[offset]`` times ``scale``
  part by part when scaled (the epilog sees the unnormalised value, as on the GPU); without an epilog, a plain scatter;
- :func:`matmul_epilog_pass`: ``x[b, i, j] = f(x[b, i, j], (b,) i, j, *operands)`` in place, for rows
  ``start..stop`` of ``x`` seen as ``(batch * M, N)`` (checked or not), or (``parallel``) over all rows in one numba
  ``parallel`` loop of blocks;
- :func:`blocks`: the three in one numba ``parallel`` loop over blocks of rows: each thread loads a block into its
  buffer, transforms it with a C function (FFTW's execute, :mod:`mathpy.host.fft._fftw_c`) and stores it, so that
  the whole call runs outside the GIL on numba's threads, each block in its thread's cache.

>>> import numpy as np
>>> span, dst = np.arange(12.0), np.empty((2, 3))
>>> inner = np.array([0, 2, 4])
>>> loader(None)(span, np.array([0, 6]), inner, inner_step(inner), None, dst)
>>> dst
array([[ 0.,  2.,  4.],
       [ 6.,  8., 10.]])
"""

import dis
import threading
import types

import numpy as np

from .. import _memo
from ._cache import code_names
from ._cpu import jit_callback, prepare_user_info, run_loop
from ._spec import compile_error

__all__ = ["loader", "storer", "blocks", "may_raise", "inner_step", "matmul_epilog_pass", "prepare_user_info"]

_lock = threading.Lock()
_kernels = _memo.Memo("cpu-pass-kernels", group="jit", max_entries=256)  # (pass, user's dispatcher) -> the pass
_helpers = {}  # the few fixed helpers of the passes ("scaled", the plain load and store), made once


def _numba():
    import numba
    return numba


def _plain(kind):
    """The function of a pass without a callback: a plain load or store."""
    key = ("plain", kind)
    found = _helpers.get(key)
    if found is None:
        numba = _numba()
        if kind == "load":
            @numba.njit(cache=False)
            def found(data_in, offset, user_info, unused):
                return data_in[offset]
        else:
            @numba.njit(cache=False)
            def found(data_out, offset, value, user_info, unused):
                data_out[offset] = value
        _helpers[key] = found
    return found


def _scaler():
    """``scaled(value, factor)``: a real factor times each part of a complex value (as NumPy scales an FFT: a complex
    product would make ``inf+0j`` into ``inf+nanj``), or times a real value."""
    found = _helpers.get("scaled")
    if found is None:
        numba = _numba()
        from numba.extending import overload

        def found(value, factor):  # pragma: no cover (numba compiles the overload below)
            return value * factor

        @overload(found, inline="always")
        def _implementation(value, factor):
            if isinstance(value, numba.types.Complex):
                return lambda value, factor: complex(value.real * factor, value.imag * factor)
            return lambda value, factor: value * factor
        _helpers["scaled"] = found
    return found


def _define(name, f):
    """The pass ``name`` with ``f`` called inside. ``f`` is a global of the pass, not an argument: numba types a
    function argument on every call (tens of microseconds), an array in well under one."""
    numba = _numba()
    times = _scaler()
    if name == "load":
        @numba.njit(nogil=True, cache=False)
        def kernel(span, row_offsets, inner_offsets, step, info, dst):
            n = inner_offsets.size
            for r in range(row_offsets.size):
                base = row_offsets[r]
                if step == 1:  # contiguous elements: a loop LLVM vectorises
                    for j in range(n):
                        dst[r, j] = f(span, np.uint64(base + j), info, None)
                elif step:
                    for j in range(n):
                        dst[r, j] = f(span, np.uint64(base + j * step), info, None)
                else:
                    for j in range(n):
                        dst[r, j] = f(span, np.uint64(base + inner_offsets[j]), info, None)
    elif name == "store":
        @numba.njit(nogil=True, cache=False)
        def kernel(span, row_offsets, inner_offsets, step, src, info, scale, scaled):
            n = inner_offsets.size
            for r in range(row_offsets.size):
                base = row_offsets[r]
                if step == 1:  # contiguous elements: a loop LLVM vectorises
                    for j in range(n):
                        f(span, np.uint64(base + j), src[r, j], info, None)
                        if scaled:
                            span[base + j] = times(span[base + j], scale)
                elif step:
                    for j in range(n):
                        f(span, np.uint64(base + j * step), src[r, j], info, None)
                        if scaled:
                            span[base + j * step] = times(span[base + j * step], scale)
                else:
                    for j in range(n):
                        offset = base + inner_offsets[j]
                        f(span, np.uint64(offset), src[r, j], info, None)
                        if scaled:
                            span[offset] = times(span[offset], scale)
    else:  # ("rows", with_batch, operand count, checked, parallel): a matmul epilog
        return _rows(numba, f, *name[1:])
    return kernel


def _rows(numba, f, with_batch, count, checked, parallel):
    """``kernel(x, operands, start, stop)``: ``x[b, i, j] = f(x[b, i, j], (b,) i, j, *operands)`` over rows
    ``start..stop`` of ``x`` seen as ``(batch * M, N)``; it returns -1, or (``checked``) the flat index of the first
    element whose call raised (numba's bounds check), that element left as it was. Generated for the number of
    operands (a tuple's items by constant index) and the coordinates the function takes. ``parallel``:
    ``kernel(x, operands, blocks)``, that kernel (unchecked) over all rows in ``blocks`` blocks of a numba
    ``parallel`` loop."""
    if parallel:
        return _parallel_rows(numba, _rows(numba, f, with_batch, count, False, False))
    coordinates = "b, i, j" if with_batch else "i, j"
    store = f"x[b, i, j] = f(x[b, i, j], {coordinates}{''.join(f', operands[{k}]' for k in range(count))})"
    if checked:  # (the element is named in Python: numba's IndexError says no more than that one was raised)
        store = (f"try:\n                {store}\n            except Exception:\n"
                 f"                return r * x.shape[2] + j")
    source = ("def kernel(x, operands, start, stop):\n"
              "    m = x.shape[1]\n"
              "    for r in range(start, stop):\n"
              "        b = r // m\n"
              "        i = r - b * m\n"
              "        for j in range(x.shape[2]):\n"
              f"            {store}\n"
              "    return -1\n")
    namespace = {"f": f}
    exec(compile(source, f"<mathpy matmul epilog rows {with_batch} {count} {checked}>", "exec"), namespace)
    return numba.njit(nogil=True, cache=False)(namespace["kernel"])


def _parallel_rows(numba, rows):
    """``rows(x, operands, start, stop)`` over all rows of ``x``, in ``blocks`` blocks of one numba parallel loop."""
    @numba.njit(nogil=True, cache=False, parallel=True)
    def kernel(x, operands, blocks):
        count = x.shape[0] * x.shape[1]
        step = (count + blocks - 1) // blocks
        for block in numba.prange(blocks):
            rows(x, operands, block * step, min(count, (block + 1) * step))
        return -1
    return kernel


def _blocks(load, store, execute):
    """The parallel kernel of :func:`blocks` around the ``load`` and ``store`` passes (compiled already, for the
    same argument types: only this loop is new to compile)."""
    numba = _numba()

    @numba.njit(parallel=True, nogil=True, cache=False)
    def kernel(x_span, x_rows, x_inner, x_step, out_span, out_rows, out_inner, out_step, rows, plan, buffers_in,
               buffers_out, prolog_info, epilog_info, scale, scaled):
        count = x_rows.size
        for b in numba.prange((count + rows - 1) // rows):
            thread = numba.get_thread_id()
            start = b * rows
            stop = min(count, start + rows)
            src, dst = buffers_in[thread], buffers_out[thread]
            load(x_span, x_rows[start:stop], x_inner, x_step, prolog_info, src[:stop - start])
            execute(plan, src.ctypes.data, dst.ctypes.data)  # (all rows: a short last block's others are not stored)
            store(out_span, out_rows[start:stop], out_inner, out_step, dst[:stop - start], epilog_info, scale, scaled)
    return kernel


def blocks(prolog, epilog, execute):
    """``run(x_span, x_rows, x_inner, x_step, out_span, out_rows, out_inner, out_step, rows, plan, buffers_in,
    buffers_out, prolog_info, epilog_info, scale, scaled)``, one numba parallel loop over blocks of ``rows`` rows:
    block ``b`` is loaded (``prolog``, or None for a plain gather, as :func:`loader`) into ``buffers_in[t]`` (``t``
    numba's thread id; the buffers ``(threads, rows, elements)``), transformed by ``execute(plan, buffers_in[t]
    address, buffers_out[t] address)`` (a plan of ``rows`` transforms, for a last, shorter block too) and stored from
    ``buffers_out[t]`` (``epilog`` or None, then ``scale`` when ``scaled``, as :func:`storer`). ``execute``: a ctypes
    function of three addresses. The caller sets numba's thread count and runs one call at a time (the buffers are
    shared)."""
    load = _kernel("load", _plain("load") if prolog is None else jit_callback(prolog, "prolog"))
    store = _kernel("store", _plain("store") if epilog is None else jit_callback(epilog, "epilog"))
    with _lock:  # (a ctypes function does not hash: its id, for one that lives as long as the process)
        kernel = _kernels.get_or_make(("blocks", load, store, id(execute)), lambda: _blocks(load, store, execute))

    def run(*args):
        return run_loop("epilog" if epilog is not None else "prolog", epilog or prolog, kernel, args)
    return run


def may_raise(fn, _seen=None):
    """Whether ``fn``, or a plain Python function (or numba dispatcher) it reads as a global or closure variable or as
    an attribute of a module it reads so, has a ``raise`` or ``assert`` statement: the one way a callback compiled
    here raises (no bounds check, NumPy's error model). A parallel loop (:func:`blocks`, a matmul epilog's) would lose
    such an exception."""
    fn = getattr(fn, "py_func", fn)
    seen = set() if _seen is None else _seen
    if not isinstance(fn, types.FunctionType) or fn in seen:
        return False
    seen.add(fn)
    if _raises(fn.__code__):
        return True
    names = code_names(fn.__code__)
    read = [fn.__globals__.get(name) for name in names]
    for cell in fn.__closure__ or ():
        try:
            read.append(cell.cell_contents)
        except ValueError:  # (a cell not yet filled)
            pass
    # ``module.f(...)``: the attribute's name is among the code's names as well
    read += [getattr(value, name, None) for value in read if isinstance(value, types.ModuleType) for name in names]
    return any(may_raise(value, seen) for value in read)


def _raises(code):
    """Whether ``code`` or a function nested in it has a ``raise`` or ``assert`` statement."""
    return any(op.opname in ("RAISE_VARARGS", "RERAISE") for op in dis.get_instructions(code)) or \
        any(_raises(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _kernel(name, f):
    with _lock:  # (one numba compile of a pass at a time)
        return _kernels.get_or_make((name, f), lambda: _define(name, f))


def inner_step(inner_offsets):
    """The constant step of ``inner_offsets`` when they are ``start + step * j`` from 0 (what the passes' fast loops
    need), else 0: the passes read the table."""
    n = len(inner_offsets)
    if n == 0 or inner_offsets[0] != 0:
        return 0
    step = int(inner_offsets[1]) if n > 1 else 1
    return step if step > 0 and np.array_equal(inner_offsets, np.arange(n, dtype=np.int64) * step) else 0


def loader(fn, kind="prolog"):
    """``run(span, row_offsets, inner_offsets, step, user_info, dst)``: ``dst[r, j] = fn(span, row_offsets[r] +
    inner_offsets[j], user_info, None)`` (``fn`` a checked Python prolog, or None for ``span[offset]``), with
    ``user_info`` as :func:`prepare_user_info` gives it; ``step``: :func:`inner_step` of ``inner_offsets``. A typing
    error of ``fn`` is raised at the first run as a :class:`~mathpy.CallbackCompileError`."""
    kernel = _kernel("load", _plain("load") if fn is None else jit_callback(fn, kind))

    def run(span, row_offsets, inner_offsets, step, user_info, dst):
        run_loop(kind, fn, kernel, (span, row_offsets, inner_offsets, step, user_info, dst))
    return run


def storer(fn, kind="epilog"):
    """``run(span, row_offsets, inner_offsets, step, src, user_info, scale)``: ``fn(span, row_offsets[r] +
    inner_offsets[j], src[r, j], user_info, None)`` for every ``(r, j)`` (None: store ``src[r, j]`` there), then that
    element times ``scale`` (a scalar of the element's real precision; None: unscaled)."""
    kernel = _kernel("store", _plain("store") if fn is None else jit_callback(fn, kind))
    one = None

    def run(span, row_offsets, inner_offsets, step, src, user_info, scale=None):
        nonlocal one
        if scale is None:
            if one is None:
                one = np.dtype(span.dtype.char.lower()).type(1)
            run_loop(kind, fn, kernel, (span, row_offsets, inner_offsets, step, src, user_info, one, False))
        else:
            run_loop(kind, fn, kernel, (span, row_offsets, inner_offsets, step, src, user_info, scale, True))
    return run


def matmul_epilog_pass(epilog, count, check_bounds=False, parallel=False):
    """``run(x, operands, start, stop)``: a checked matmul epilog (:class:`~._matmul_epilog.MatmulEpilogFunction`)
    applied in place to rows ``start`` to ``stop`` of ``x`` (``(batch, M, N)``, C-contiguous, the compute dtype) seen
    as ``(batch * M, N)``; ``operands``: a tuple of its ``count`` read-only operand arrays (16-bit floats as float32)
    or None. ``check_bounds``: the function compiled with numba's bounds check; ``run`` returns the flat index of the
    first element whose call indexed outside an operand (the pass stops there), else -1.

    ``parallel``: ``run(x, operands, blocks)``, every row of ``x`` in one numba ``parallel`` loop over ``blocks``
    blocks (on the team :func:`mathpy._threads.numba_team` sets); None when the function can raise (:func:`may_raise`:
    the loop would lose the exception)."""
    numba = _numba()
    if parallel and (check_bounds or may_raise(epilog.function)):
        return None
    kernel = _kernel(("rows", epilog.with_batch, count, check_bounds, parallel),
                     jit_callback(epilog.function, "epilog", check_bounds))

    def run(x, operands, *rows):
        try:
            return kernel(x, operands, *rows)
        except numba.core.errors.TypingError as e:
            raise compile_error(epilog, "the CPU", e) from e
    return run
