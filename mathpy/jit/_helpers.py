"""Plain Python helper functions that a callback or an epilog calls, compiled with it.

numba compiles a function's callees only when they are numba functions themselves: a plain Python function that a
callback calls (a global or a closure variable) stops the compile at "Untyped global name". So each target compiles a
copy of the user's function in which every plain function it reads is that function compiled for the same target
(``numba.njit`` on the CPU, a CUDA device function on the GPU), made so itself first: helpers may call helpers. The
user's function objects are left as they are. The compile caches key on them, their helpers' code and values
included (:mod:`._cache`), so an edited helper compiles again.

>>> def double(v):
...     return 2 * v
>>> def epilog(value, row, col):
...     return double(value) + 1
>>> compiled = with_compiled_helpers(epilog, lambda helper: ("compiled", helper.__name__))
>>> compiled.__globals__["double"], epilog.__globals__["double"] is double
(('compiled', 'double'), True)
"""

import types

from ._cache import code_names

__all__ = ["with_compiled_helpers", "known_to"]


def with_compiled_helpers(fn, compile_helper, known=lambda value: False):
    """``fn``, or a copy of it whose globals and closure cells that hold plain Python functions hold
    ``compile_helper(helper)`` instead (each helper given the same treatment first); ``fn`` itself when it calls none.
    Functions that ``known(function)`` says numba types itself (:func:`known_to`) are left as they are. A helper that
    calls itself is left plain (numba's error then names it)."""
    return _rebuild(fn, _Helpers(compile_helper, known), {id(fn): fn})


def known_to(typing_context):
    """Whether numba's ``typing_context`` types a value itself: numba-cuda's libdevice stubs and functions with an
    ``@overload`` are plain Python functions too, and compiling their Python bodies instead would change what they
    compute."""
    typing_context.refresh()  # (overloads registered since the context was last used)

    def known(value):
        try:
            typing_context.resolve_value_type(value)
        except Exception:  # noqa: BLE001 - numba's way of saying it cannot type the value (a ValueError today)
            return False
        return True
    return known


class _Helpers:
    __slots__ = ("compile", "known")

    def __init__(self, compile_helper, known):
        self.compile, self.known = compile_helper, known

    def __contains__(self, value):
        # (not numba's dispatchers, builtins, classes or other callables; not what numba types itself)
        return type(value) is types.FunctionType and not self.known(value)


def _rebuild(fn, helpers, done):
    replaced = {name: _compiled(value, helpers, done) for name in code_names(fn.__code__)
                if (value := fn.__globals__.get(name)) in helpers}
    cells, changed = [], False
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            value = None
        if value in helpers:
            cells.append(types.CellType(_compiled(value, helpers, done)))
            changed = True
        else:
            cells.append(cell)
    if not changed and all(value is fn.__globals__.get(name) for name, value in replaced.items()):
        return fn
    copy = types.FunctionType(fn.__code__, {**fn.__globals__, **replaced}, fn.__name__, fn.__defaults__,
                              tuple(cells) if fn.__closure__ else None)
    copy.__kwdefaults__, copy.__qualname__, copy.__module__ = fn.__kwdefaults__, fn.__qualname__, fn.__module__
    return copy


def _compiled(helper, helpers, done):
    if id(helper) in done:  # compiled already, or being compiled (a recursive helper: left plain)
        return done[id(helper)]
    done[id(helper)] = helper
    done[id(helper)] = helpers.compile(_rebuild(helper, helpers, done))
    return done[id(helper)]
