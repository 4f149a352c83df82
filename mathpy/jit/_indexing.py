"""What a callback or an epilog indexes, read from its source: the subscripts of its array parameters that every call
runs, and the range each index takes over the values its coordinate parameters take.

This is what lets the FFT and matmul APIs refuse, when they plan, user data too small for the function that reads it
(``user_info[offset + 1]`` on data of the layout's size, ``data[row, col]`` on a 1 x 1 array for a 3 x 2 result).
It is deliberately modest, so that it never refuses a correct function:

- only subscripts that run on every call count: none under an ``if``, a loop, a ``try``, a conditional expression or
  the right-hand side of ``and`` / ``or``, and none after a statement that may leave early (``return``, ``raise``,
  ``assert`` or a block containing one);
- an index is evaluated when it is built from the coordinates (``offset``; ``row``, ``col``, ``batch``), integer
  constants, integer globals and closure values, names assigned once at the top of the function, ``+ - * // %``,
  ``& >> <<`` by constants, ``min`` / ``max`` and integer conversions (``np.uint64(...)``, ``int(...)``); anything
  else (a value read from an array, a parameter assigned to) leaves the subscript unknown: ``check_bounds`` covers it;
- an index is out of bounds only when a bound it certainly reaches is: the ranges carry whether their ends are
  reached (offsets reach 0 and the layout's last element; a sum of independent coordinates reaches the sums of their
  ends; ``offset % n`` reaches ``n - 1`` when the offsets cover n consecutive values).

A function whose source cannot be read (defined in an interactive session without a file, or built by ``exec``)
is not analysed.

>>> def prolog(data_in, offset, user_info, unused):
...     k = offset % 16
...     return data_in[offset] * user_info[k + 1]
>>> [(a.text, a.array) for a in unconditional_accesses(prolog, ("data_in", "user_info"))]
[('data_in[offset]', 'data_in'), ('user_info[k + 1]', 'user_info')]
>>> access = unconditional_accesses(prolog, ("user_info",))[0]
>>> index_ranges(access, prolog, {"offset": coordinate(0, 99)})
(IndexRange(lo=1, hi=16, lo_reached=True, hi_reached=True, dense=True, names=frozenset({'offset'})),)
"""

import ast
import builtins
import dataclasses
import inspect
import textwrap

import numpy as np

from .. import _memo

__all__ = ["Access", "IndexRange", "coordinate", "index_ranges", "unconditional_accesses"]


@dataclasses.dataclass(frozen=True)
class IndexRange:
    """The integers an index takes: within ``[lo, hi]``; ``lo_reached`` / ``hi_reached``: some call takes that end;
    ``dense``: every integer between them is taken; ``names``: the coordinates it depends on."""

    lo: int
    hi: int
    lo_reached: bool
    hi_reached: bool
    dense: bool
    names: frozenset


def coordinate(lo, hi, dense=True):
    """The range of a coordinate parameter that takes ``lo`` and ``hi`` (and every value between when ``dense``)."""
    return IndexRange(lo, hi, True, True, dense, frozenset())


def _constant(value):
    return IndexRange(value, value, True, True, True, frozenset())


@dataclasses.dataclass(frozen=True)
class Access:
    """One subscript of an array parameter: ``indices`` (AST nodes, one per axis), its source ``text`` and ``line``
    (in the function's file), and whether it stores."""

    array: str
    indices: tuple
    text: str
    line: int
    store: bool


# --- finding the subscripts ----------------------------------------------------------------------------------------

_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try) + \
    ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) + ((ast.Match,) if hasattr(ast, "Match") else ())
_EXITS = (ast.Return, ast.Raise, ast.Assert, ast.Break, ast.Continue)
_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


class _Finder:
    """Collects the subscripts of ``arrays`` in a function body, with whether they run on every call."""

    def __init__(self, arrays, first_line):
        self.arrays, self.first_line, self.found = set(arrays), first_line, []

    def statements(self, body, conditional):
        for statement in body:
            if isinstance(statement, _COMPOUND):
                for field in ("test", "iter", "items", "subject"):  # evaluated once, before any branch
                    value = getattr(statement, field, None)
                    for node in value if isinstance(value, list) else [value]:
                        if node is not None:
                            self.expression(node, conditional)
                for field in ("body", "orelse", "finalbody"):
                    self.statements(getattr(statement, field, None) or [], True)
                for inner in (getattr(statement, "handlers", None) or []) + (getattr(statement, "cases", None) or []):
                    self.statements(inner.body, True)
            elif not isinstance(statement, _SCOPES):
                self.expression(statement, conditional)
            if any(isinstance(node, _EXITS) for node in ast.walk(statement)):
                conditional = True  # what follows may not run

    def expression(self, node, conditional):
        if isinstance(node, _SCOPES):
            return
        if isinstance(node, ast.IfExp):
            self.expression(node.test, conditional)
            self.expression(node.body, True)
            self.expression(node.orelse, True)
            return
        if isinstance(node, ast.BoolOp):
            self.expression(node.values[0], conditional)
            for value in node.values[1:]:
                self.expression(value, True)
            return
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in self.arrays:
            index = node.slice
            indices = tuple(index.elts) if isinstance(index, ast.Tuple) else (index,)
            if not conditional and not any(isinstance(i, (ast.Slice, ast.Starred)) for i in indices):
                store = isinstance(node.ctx, ast.Store)
                self.found.append(Access(node.value.id, indices, ast.unparse(node),
                                         node.lineno + self.first_line - 1, store))
        for child in ast.iter_child_nodes(node):
            self.expression(child, conditional)


def _function_node(fn):
    """(the function's AST node, its first line in the file) or None when its source cannot be read unambiguously."""
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    names = list(code.co_varnames[:code.co_argcount])
    kinds = (ast.Lambda,) if code.co_name == "<lambda>" else (ast.FunctionDef,)
    found = [node for node in ast.walk(tree) if isinstance(node, kinds)
             and [a.arg for a in node.args.posonlyargs + node.args.args] == names
             and (isinstance(node, ast.Lambda) or node.name == code.co_name)]
    if not found:
        return None
    outermost = min(found, key=lambda node: node.lineno)  # the function itself, not a nested one of the same name
    if sum(1 for node in found if node.lineno == outermost.lineno) != 1:
        return None  # two lambdas on one line
    if isinstance(outermost, ast.Lambda):  # its body as the one statement of a function
        body = ast.Return(outermost.body, lineno=outermost.lineno)
        outermost = ast.Module(body=[body], type_ignores=[])
    return outermost, first


def _single_assignments(function):
    """Names assigned exactly once, by a plain ``name = expression`` at the top of the body -> that expression; and
    every name assigned anywhere (those others are unknown)."""
    counts, top = {}, {}
    for node in ast.walk(function):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):  # not `a` or `i` of a[i] = v
                    counts[name.id] = counts.get(name.id, 0) + 1
    for statement in function.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                isinstance(statement.targets[0], ast.Name):
            top[statement.targets[0].id] = statement.value
    return {name: value for name, value in top.items() if counts.get(name) == 1}, set(counts)


_cache = _memo.Memo("source-analysis", group="jit", max_entries=1024)  # (code, arrays) -> (accesses, ...) or None


def _analysis(fn, arrays):
    key = (fn.__code__, tuple(arrays))
    found = _cache.get(key, False)
    if found is not False:
        return found
    node = _function_node(fn)
    result = None
    if node is not None:
        function, first = node
        finder = _Finder(arrays, first)
        finder.statements(function.body, False)
        result = (tuple(finder.found),) + _single_assignments(function)
    _cache.put(key, result)
    return result


def unconditional_accesses(fn, arrays):
    """The subscripts of the parameters named in ``arrays`` that every call of ``fn`` runs (see the module
    docstring), as :class:`Access` es in source order; None when the source cannot be read."""
    found = _analysis(fn, tuple(arrays))
    return None if found is None else list(found[0])


def index_ranges(access, fn, coordinates):
    """The :class:`IndexRange` of each index of ``access`` (a subscript of ``fn``) over ``coordinates`` ({parameter
    name: IndexRange}), None where it is unknown."""
    found = _analysis(fn, (access.array,))
    if found is None:
        return tuple(None for _ in access.indices)
    _, single, assigned = found
    coordinates = {name: dataclasses.replace(r, names=frozenset((name,))) for name, r in coordinates.items()
                   if name not in assigned}  # a parameter assigned to is not the coordinate any more
    evaluator = _Evaluator(fn, coordinates, single)
    return tuple(evaluator.evaluate(index) for index in access.indices)


# --- evaluating an index -------------------------------------------------------------------------------------------

_CONVERSIONS = {int} | {getattr(np, name) for name in ("int8", "int16", "int32", "int64", "intp", "uint8", "uint16",
                                                       "uint32", "uint64", "uintp")}
_UNSIGNED = {getattr(np, name) for name in ("uint8", "uint16", "uint32", "uint64", "uintp")}
_MISSING = object()


class _Evaluator:
    def __init__(self, fn, coordinates, single):
        self.fn, self.coordinates, self.single, self.depth = fn, coordinates, single, 0

    def value_of(self, node):
        """The Python object a global, closure or attribute expression names (``np.uint64``, ``N``), or _MISSING."""
        if isinstance(node, ast.Name):
            code = self.fn.__code__
            if node.id in code.co_freevars:
                try:
                    return self.fn.__closure__[code.co_freevars.index(node.id)].cell_contents
                except ValueError:
                    return _MISSING
            if node.id in code.co_varnames:
                return _MISSING
            value = self.fn.__globals__.get(node.id, _MISSING)
            return getattr(builtins, node.id, _MISSING) if value is _MISSING else value
        if isinstance(node, ast.Attribute):
            base = self.value_of(node.value)
            return _MISSING if base is _MISSING else getattr(base, node.attr, _MISSING)
        return _MISSING

    def evaluate(self, node):
        if self.depth > 50:
            return None
        self.depth += 1
        try:
            return self._evaluate(node)
        finally:
            self.depth -= 1

    def _evaluate(self, node):
        if isinstance(node, ast.Constant):
            value = node.value
            return _constant(value) if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(node, ast.Name):
            if node.id in self.coordinates:
                return self.coordinates[node.id]
            if node.id in self.single:
                return self.evaluate(self.single[node.id])
        if isinstance(node, (ast.Name, ast.Attribute)):
            value = self.value_of(node)
            if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
                return _constant(int(value))
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.evaluate(node.operand)
            return inner if inner is None or isinstance(node.op, ast.UAdd) else _negate(inner)
        if isinstance(node, ast.BinOp):
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            return None if left is None or right is None else _binary(node.op, left, right)
        if isinstance(node, ast.Call) and not node.keywords:
            return self._call(node)
        return None

    def _call(self, node):
        function = self.value_of(node.func)
        arguments = [self.evaluate(a) for a in node.args]
        if not arguments or any(a is None for a in arguments) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if function in _CONVERSIONS and len(arguments) == 1:
            inner = arguments[0]
            return None if function in _UNSIGNED and inner.lo < 0 else inner  # a wrap-around is not analysed
        if function in (min, max) and len(arguments) >= 2:
            result = arguments[0]
            for other in arguments[1:]:
                result = _extreme(function, result, other)
            return result
        return None


def _negate(r):
    return IndexRange(-r.hi, -r.lo, r.hi_reached, r.lo_reached, r.dense, r.names)


def _independent(a, b):
    return not (a.names & b.names)


def _binary(op, a, b):
    if isinstance(op, ast.Sub):
        return _binary(ast.Add(), a, _negate(b))
    if isinstance(op, ast.Add):
        both = _independent(a, b)
        return IndexRange(a.lo + b.lo, a.hi + b.hi, both and a.lo_reached and b.lo_reached,
                          both and a.hi_reached and b.hi_reached, both and a.dense and b.dense, a.names | b.names)
    if isinstance(op, ast.LShift) and b.lo == b.hi and b.lo >= 0:
        return _binary(ast.Mult(), a, _constant(1 << b.lo))
    if isinstance(op, ast.Mult):
        return _product(a, b)
    if b.lo != b.hi or b.lo <= 0 or a.lo < 0:
        return None  # by a positive constant only, of a non-negative index: Python's and C's rules then agree
    c = b.lo
    if isinstance(op, ast.RShift):
        op, c = ast.FloorDiv(), 1 << c
    if isinstance(op, ast.FloorDiv):
        return IndexRange(a.lo // c, a.hi // c, a.lo_reached, a.hi_reached, a.dense, a.names)
    if isinstance(op, ast.BitAnd) and c & (c + 1) == 0:  # a mask of low bits: a modulo
        op, c = ast.Mod(), c + 1
    if isinstance(op, ast.Mod):
        return _modulo(a, c)
    return None


def _product(a, b):
    if not _independent(a, b):
        return None
    corners = [(x * y, rx and ry) for x, rx in ((a.lo, a.lo_reached), (a.hi, a.hi_reached))
               for y, ry in ((b.lo, b.lo_reached), (b.hi, b.hi_reached))]
    lo, hi = min(v for v, _ in corners), max(v for v, _ in corners)
    scale = b.lo if b.lo == b.hi else a.lo if a.lo == a.hi else None
    dense = (scale in (1, -1) and (a.dense and b.dense)) or lo == hi
    return IndexRange(lo, hi, any(r for v, r in corners if v == lo), any(r for v, r in corners if v == hi), dense,
                      a.names | b.names)


def _modulo(a, c):
    if a.hi < c:
        return a
    if a.lo // c == a.hi // c:  # no wrap-around
        return IndexRange(a.lo % c, a.hi % c, a.lo_reached, a.hi_reached, a.dense, a.names)
    if a.dense and a.lo_reached and a.hi_reached:
        # consecutive values that wrap: 0 and c - 1 are both taken
        return IndexRange(0, c - 1, True, True, a.hi - a.lo + 1 >= c or a.hi % c + 1 >= a.lo % c, a.names)
    return IndexRange(0, c - 1, False, False, False, a.names)


def _extreme(function, a, b):
    both = _independent(a, b)
    if function is min:
        lo, hi = min(a.lo, b.lo), min(a.hi, b.hi)
        lo_reached = both and ((a.lo == lo and a.lo_reached) or (b.lo == lo and b.lo_reached))
        hi_reached = both and a.hi_reached and b.hi_reached
    else:
        lo, hi = max(a.lo, b.lo), max(a.hi, b.hi)
        lo_reached = both and a.lo_reached and b.lo_reached
        hi_reached = both and ((a.hi == hi and a.hi_reached) or (b.hi == hi and b.hi_reached))
    return IndexRange(lo, hi, lo_reached, hi_reached, False, a.names | b.names)
