"""Bounds of what callbacks and epilogs index: the checks made when a plan is made, the ``check_bounds`` option, and
the errors both raise.

**When planning, always** (free at run time): the subscripts a function runs on every call whose indices can be
known from its source (:mod:`._indexing`) are evaluated over the coordinates it receives: an FFT callback's
``offset`` over the transform's layout, a matmul epilog's ``row`` / ``col`` / ``batch`` over the result. An index
that reaches outside its array raises a ValueError naming the function, the subscript, the array and the size it
needs, before anything is compiled or run.

**With check_bounds** (``FFTOptions(check_bounds=True)``, ``MatmulOptions(check_bounds=True)``, or the environment
variable ``MATHPY_CHECK_BOUNDS=1`` for every plan whose option is left at None): every access is checked when it
runs. On the CPU the function is compiled by numba with ``boundscheck=True``; the first element whose call fails is
run again in Python on guarded arrays to name the array and the index. On the GPU each access compares its index
with the array's extent; the first bad one is recorded in device memory (:mod:`._bounds_ir`) and skipped, and the
host reads the record after the kernel and raises. Either way :class:`~mathpy.OutOfBoundsError` names the function,
the array and the index. Only functions given as Python are checked (LTO-IR given as bytes is not).
"""

import os
import warnings

import numpy as np

from .._errors import OutOfBoundsError
from ._indexing import coordinate, index_ranges, unconditional_accesses

__all__ = ["ENVIRONMENT", "HEADER_WORDS", "RECORD_WORDS", "check_callback_indexing", "check_epilog_indexing",
           "check_option", "error_from_record", "locate_callback", "locate_epilog", "resolve"]

#: int64 words of the record of the first out-of-bounds access (see :mod:`._bounds_ir`):
#: ``[flag, array id, index count, index 0, index 1, index 2, offset, unused]``.
RECORD_WORDS = 8
#: int64 words of a checked FFT callback's header (its ``caller_info``): the user data's address and element count,
#: the FFT data's element count, then the record.
HEADER_WORDS = 3 + RECORD_WORDS
#: The environment variable that turns check_bounds on where an option leaves it at None.
ENVIRONMENT = "MATHPY_CHECK_BOUNDS"
_ON = ("1", "true", "yes", "on")


def resolve(value):
    """``check_bounds`` as an option gives it: True / False, or (None) as ``$MATHPY_CHECK_BOUNDS`` says (on for 1,
    true, yes, on; read when a plan is made)."""
    if value is not None:
        return value
    return os.environ.get(ENVIRONMENT, "").strip().lower() in _ON


def check_option(value, owner):
    """TypeError unless ``value`` is None or a bool (``owner``: e.g. ``"FFTOptions"``)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{owner}.check_bounds must be None (the {ENVIRONMENT} environment variable decides) or a "
                        f"bool, not {value!r}")


def _parameters(fn):
    code = fn.__code__
    return code.co_varnames[:code.co_argcount]


def _outside(r, extent):
    """(value, "low" / "high") of an index range certain to leave ``[0, extent)``, else None."""
    if r is None:
        return None
    if r.hi < 0 or (r.lo < 0 and r.lo_reached):
        return (r.lo if r.lo_reached else r.hi), "low"
    if r.lo >= extent or (r.hi >= extent and r.hi_reached):
        return (r.hi if r.hi_reached else r.lo), "high"
    return None


_NEGATIVE = "a negative index does not count from the end here (on the GPU it reads before the array)"


# --- when planning -------------------------------------------------------------------------------------------------

def check_callback_indexing(fn, kind, where, data_count, dense, info_count):
    """ValueError when FFT callback ``fn`` (``kind``; ``where``: its name for messages) certainly indexes outside
    ``data_in`` / ``data_out`` (``data_count`` elements: the span of the layout its offsets index; ``dense``: the
    offsets are every integer below it) or its user data (``info_count`` elements; None: no user data)."""
    if data_count == 0:
        return
    params = _parameters(fn)
    role = "data_in" if kind == "prolog" else "data_out"
    arrays = {params[0]: (role, data_count)}
    if info_count is not None:
        arrays[params[2 if kind == "prolog" else 3]] = ("user_info", info_count)
    offset = params[1]
    for access in unconditional_accesses(fn, tuple(arrays)) or ():
        if len(access.indices) != 1:
            continue  # numba refuses it when compiling
        name, count = arrays[access.array]
        (r,) = index_ranges(access, fn, {offset: coordinate(0, data_count - 1, dense)})
        problem = _outside(r, count)
        if problem is None:
            continue
        value, side = problem
        verb = "writes" if access.store else "reads"
        head = (f"{kind} {where} {verb} `{access.text}` (line {access.line}): its index reaches {value} for the "
                f"offsets of this transform ({offset} from 0 to {data_count - 1})")
        if side == "low":
            raise ValueError(f"{head}, below the start of {name}; {_NEGATIVE}")
        if name == "user_info":
            raise ValueError(f"{head}, but the user data has {count} element{'s' * (count != 1)}; it needs at least "
                             f"{value + 1}: give larger data, or index inside it (e.g. `{access.array}[{offset} % "
                             f"{count}]` for a window)")
        raise ValueError(f"{head}, but {name} has {count} element{'s' * (count != 1)} (the span of the "
                         f"{'input' if kind == 'prolog' else 'output'} layout); index it inside [0, {count})")


def check_epilog_indexing(fn, with_batch, where, operands, batch, m, n):
    """ValueError when matmul epilog ``fn`` certainly indexes one of its operands outside it for a result of
    ``batch`` x ``m`` x ``n``; ``operands``: (name given in epilog_inputs, shape or None when not an array) of each
    operand parameter, in the function's order (its last parameters)."""
    if batch * m * n == 0 or not operands:
        return
    params = _parameters(fn)
    leading = 4 if with_batch else 3
    coordinates = {params[leading - 2]: coordinate(0, m - 1), params[leading - 1]: coordinate(0, n - 1)}
    if with_batch:
        coordinates[params[1]] = coordinate(0, batch - 1)
    arrays = {param: (name, tuple(int(e) for e in shape))
              for param, (name, shape) in zip(params[leading:], operands) if shape is not None}
    for access in unconditional_accesses(fn, tuple(arrays)) or ():
        name, shape = arrays[access.array]
        if len(access.indices) != len(shape):
            continue  # numba refuses it when compiling
        _check_epilog_access(access, fn, coordinates, name, shape, with_batch, where, (batch, m, n))


def _check_epilog_access(access, fn, coordinates, name, shape, with_batch, where, result):
    ranges = index_ranges(access, fn, coordinates)
    problems = [(axis, _outside(r, extent)) for axis, (r, extent) in enumerate(zip(ranges, shape))]
    problems = [(axis, problem) for axis, problem in problems if problem is not None]
    if not problems:
        return
    axis, (value, side) = problems[0]
    batch, m, n = result
    shown = f"{batch} x {m} x {n}" if with_batch else f"{m} x {n}"
    array = name if name == access.array else f"{access.array} (epilog input {name!r})"
    head = (f"matmul epilog {where} reads `{access.text}` (line {access.line}): its index along axis {axis} "
            f"reaches {value} for a {shown} result")
    if side == "low":
        raise ValueError(f"{head}, below the start of {array}; {_NEGATIVE}")
    needed = tuple(max(extent, r.hi + 1) if r is not None and r.hi_reached else extent
                   for r, extent in zip(ranges, shape))
    raise ValueError(f"{head}, but {array} has shape {shape}; it needs a shape of at least {needed} (or index it "
                     f"inside its shape)")


# --- when running ----------------------------------------------------------------------------------------------------

class _Found(Exception):
    def __init__(self, array, index, extent):
        super().__init__(array)
        self.array, self.index, self.extent = array, index, extent


class _Guarded:
    """An array as the Python re-run of a function sees it: an index outside it (or negative) raises _Found; stores
    are checked, not made."""

    def __init__(self, array, name):
        self.array, self.name = array, name

    def _check(self, index):
        index = tuple(int(i) for i in (index if isinstance(index, tuple) else (index,)))
        shape = self.array.shape
        if len(index) == len(shape) and not all(0 <= i < e for i, e in zip(index, shape)):
            raise _Found(self.name, index, shape)
        return index

    def __getitem__(self, index):
        return self.array[self._check(index)]

    def __setitem__(self, index, value):
        self._check(index)


def _rerun(function, arguments, guarded):
    """Run ``function(*arguments)`` in Python with the arrays at positions ``guarded`` ({position: name}) guarded;
    the _Found it raises, or None."""
    arguments = list(arguments)
    for position, name in guarded.items():
        if arguments[position] is not None:
            arguments[position] = _Guarded(np.asarray(arguments[position]), name)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            function(*arguments)
        except _Found as found:
            return found
        except Exception:  # numba's and Python's semantics differ somewhere: the caller says what it knows
            return None
    return None


def _error(found, where, what, at, fallback):
    if found is None:
        return OutOfBoundsError(f"{what} {where} indexed an array out of bounds at {at} (numba's bounds check; "
                                f"{fallback})", callback=where)
    index = ", ".join(str(i) for i in found.index)
    extent = found.extent[0] if len(found.extent) == 1 else found.extent
    size = f"{extent} elements" if len(found.extent) == 1 else f"shape {extent}"
    return OutOfBoundsError(f"{what} {where} indexed {found.array}[{index}] at {at}, outside {found.array} "
                            f"({size})", callback=where, array=found.array, index=found.index)


def locate_callback(fn, kind, where, buffer_1d, offset, value, user_info):
    """The OutOfBoundsError for the call of FFT callback ``fn`` at ``offset`` that numba's bounds check stopped."""
    role = "data_in" if kind == "prolog" else "data_out"
    if kind == "prolog":
        arguments, guarded = (buffer_1d, np.uint64(offset), user_info, None), {0: role, 2: "user_info"}
    else:
        arguments, guarded = (buffer_1d, np.uint64(offset), value, user_info, None), {0: role, 3: "user_info"}
    found = _rerun(fn, arguments, guarded)
    return _error(found, where, kind, f"offset {offset}", "the Python re-run of that element did not find the "
                                                             "access")


def locate_epilog(fn, with_batch, where, value, coordinates, operands):
    """The OutOfBoundsError for the call of matmul epilog ``fn`` at ``coordinates`` ((batch,) row, col) that numba's
    bounds check stopped; ``operands``: (name, array or None) of each operand, in the function's order."""
    coordinates = tuple(np.int64(c) for c in coordinates)
    leading = (value,) + (coordinates if with_batch else coordinates[1:])
    arguments = leading + tuple(array for _, array in operands)
    found = _rerun(fn, arguments, {len(leading) + i: name for i, (name, _) in enumerate(operands)})
    place = ", ".join(str(int(c)) for c in (coordinates if with_batch else coordinates[1:]))
    return _error(found, where, "matmul epilog", f"result element ({place})",
                  "the Python re-run of that element did not find the access")


def error_from_record(record, what, where, arrays):
    """The OutOfBoundsError a GPU record (``RECORD_WORDS`` int64) describes, or None when it holds none.
    ``arrays``: per array id, (name, extent: a tuple of ints)."""
    record = [int(w) for w in record]
    if not record[0]:
        return None
    name, extent = arrays[record[1]]
    count = max(1, min(3, record[2]))
    index = tuple(np.int64(i).item() for i in record[3:3 + count])
    at = f" at offset {record[6]}" if what in ("prolog", "epilog") else ""
    size = f"{extent[0]} elements" if len(extent) == 1 else f"shape {tuple(extent)}"
    return OutOfBoundsError(f"{what} {where} indexed {name}[{', '.join(map(str, index))}]{at}, outside {name} "
                            f"({size}); check_bounds skipped that access and every later bad one on the GPU, so this "
                            f"result is incomplete", callback=where, array=name, index=index)
