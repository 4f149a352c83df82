"""When a Python matmul epilog is one of cuBLASLt's own: ``act(c * value + bias[col] + c2 * residual[row, col])`` with
``act`` RELU, GELU (the tanh form cuBLASLt computes) or none, a bias by row or by column, a full-size residual.

The function is run once on symbols instead of numbers (its ``math`` / ``numpy`` / ``min`` / ``max`` seen through
symbolic stand-ins): the operations it performs build an expression. A function that branches on a value (``if``,
``and``, a ternary), loops, indexes an operand with anything but its coordinates, or calls anything else is simply not
recognised (it keeps its own compiled route). From the expression:

1. the *linear part* is the smallest subexpression that is affine in the atoms (``value`` and the operand reads) and
   contains all of them, with its coefficients: ``c * value + sum(c_k * operand_k[index]) + c0``;
2. the rest, with that part replaced by a variable ``y``, must be a function of ``y`` alone equal (to 1e-6, on a grid
   over [-12, 12]) to ``y``, ``max(y, 0)`` or ``0.5 y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3)))``.

The numerical check accepts any spelling of the same function (``np.maximum``, ``x * (x > 0)`` is not traceable and
is not accepted, ``0.5 * x * (1 + math.tanh(...))`` in any order is); what it compares is the function itself, so a
different activation (the erf GELU differs by up to 5e-4) is never taken for cuBLASLt's.

>>> import math, numpy as np
>>> def f(value, row, col, bias):
...     x = value + bias[col]
...     return max(x, np.float32(0))
>>> recognize(f, ("bias",), with_batch=False)
Recognized(activation='relu', value_scale=1.0, terms=(('bias', ('col',), 1.0),))
>>> recognize(lambda value, row, col, data: value * data[row, col], ("data",), False) is None   # not cuBLASLt's
True
"""

import dataclasses
import math
import operator
import types as pytypes

import numpy as np

__all__ = ["Recognized", "recognize"]

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@dataclasses.dataclass(frozen=True)
class Recognized:
    """``act(value_scale * value + sum(coefficient * operand[index]))``; ``terms``: (operand name, index as names of
    coordinates, coefficient); ``activation``: None, "relu" or "gelu"."""

    activation: str | None
    value_scale: float
    terms: tuple


class _Untraceable(Exception):
    pass


class _Node:
    __array_ufunc__ = None  # NumPy scalars defer to the node's reflected operators
    __slots__ = ()

    def __add__(self, other):
        return _Op("add", (self, _wrap(other)))

    def __radd__(self, other):
        return _Op("add", (_wrap(other), self))

    def __sub__(self, other):
        return _Op("sub", (self, _wrap(other)))

    def __rsub__(self, other):
        return _Op("sub", (_wrap(other), self))

    def __mul__(self, other):
        return _Op("mul", (self, _wrap(other)))

    def __rmul__(self, other):
        return _Op("mul", (_wrap(other), self))

    def __truediv__(self, other):
        return _Op("div", (self, _wrap(other)))

    def __rtruediv__(self, other):
        return _Op("div", (_wrap(other), self))

    def __pow__(self, other):
        return _Op("pow", (self, _wrap(other)))

    def __neg__(self):
        return _Op("neg", (self,))

    def __pos__(self):
        return self

    def __bool__(self):  # a branch on a value: not a fixed expression
        raise _Untraceable("branch")

    def _compare(self, other):
        raise _Untraceable("comparison")

    __lt__ = __le__ = __gt__ = __ge__ = _compare

    def __index__(self):
        raise _Untraceable("index")

    __float__ = __int__ = __index__


class _Sym(_Node):
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __hash__(self):
        return hash(self.name)


class _Const(_Node):
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = float(value)


class _Load(_Node):
    __slots__ = ("operand", "index")

    def __init__(self, operand, index):
        self.operand, self.index = operand, index


class _Op(_Node):
    __slots__ = ("op", "args")

    def __init__(self, op, args):
        self.op, self.args = op, args


class _Operand:
    __slots__ = ("name", "coordinates")

    def __init__(self, name, coordinates):
        self.name, self.coordinates = name, coordinates

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        if not all(isinstance(i, _Sym) and i.name in self.coordinates for i in index):
            raise _Untraceable("operand indexed by an expression")
        return _Load(self.name, tuple(i.name for i in index))


def _wrap(x):
    if isinstance(x, _Node):
        return x
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise _Untraceable(f"operand {type(x).__name__}")
    return _Const(x)


def _call(name):
    def f(*args):
        return _Op(name, tuple(_wrap(a) for a in args))
    return f


def _cast(x):  # np.float32(x), float(x): the value itself
    return _wrap(x) if isinstance(x, _Node) else x


_FUNCTIONS = {"tanh": math.tanh, "exp": math.exp, "erf": math.erf, "sqrt": math.sqrt, "log1p": math.log1p,
              "log": math.log, "expm1": math.expm1, "fabs": math.fabs, "abs": abs,
              "max": max, "min": min, "maximum": max, "minimum": min}
_EVAL = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
         "pow": operator.pow, "neg": operator.neg, **_FUNCTIONS}


def _namespace(module):
    """A stand-in for ``math`` or ``numpy``: its functions build nodes, its float types are casts, its constants
    stay."""
    ns = pytypes.SimpleNamespace()
    for name in ("pi", "e"):
        setattr(ns, name, getattr(module, name))
    for name in _FUNCTIONS:
        setattr(ns, name, _call(name))
    for name in ("float16", "float32", "float64"):
        setattr(ns, name, _cast)
    return ns


_MATH, _NUMPY = _namespace(math), _namespace(np)
_BUILTINS = {"max": _call("max"), "min": _call("min"), "abs": _call("abs"), "float": _cast}


def _traced(fn):
    """``fn`` with the modules and built-ins it names replaced by symbolic stand-ins."""
    glb = dict(fn.__globals__)
    for name, value in fn.__globals__.items():
        if value is math:
            glb[name] = _MATH
        elif value is np:
            glb[name] = _NUMPY
    glb.update(_BUILTINS)
    return pytypes.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)


def _affine(node):
    """``{atom key: coefficient}`` with the constant under None, or None when ``node`` is not affine in the atoms."""
    if isinstance(node, _Const):
        return {None: node.value}
    if isinstance(node, _Sym):
        return {("value",): 1.0} if node.name == "value" else None
    if isinstance(node, _Load):
        return {(node.operand, node.index): 1.0}
    parts = [_affine(a) for a in node.args]
    if any(p is None for p in parts):
        return None
    if node.op == "neg":
        return {k: -v for k, v in parts[0].items()}
    if node.op in ("add", "sub"):
        sign = 1.0 if node.op == "add" else -1.0
        out = dict(parts[0])
        for k, v in parts[1].items():
            out[k] = out.get(k, 0.0) + sign * v
        return out
    constant = [p for p in parts if set(p) <= {None}]
    if node.op == "mul" and constant:
        c = constant[0].get(None, 0.0)
        other = parts[1] if constant[0] is parts[0] else parts[0]
        return {k: c * v for k, v in other.items()}
    if node.op == "div" and set(parts[1]) <= {None} and parts[1].get(None, 0.0) != 0:
        return {k: v / parts[1][None] for k, v in parts[0].items()}
    return None


def _nodes(node, seen=None):
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    yield node
    for a in getattr(node, "args", ()):
        yield from _nodes(a, seen)


def _evaluate(node, y, marked):
    """``node`` with the nodes in ``marked`` (ids) replaced by ``y``, evaluated in float64."""
    if id(node) in marked:
        return y
    if isinstance(node, _Const):
        return node.value
    if not isinstance(node, _Op):
        raise _Untraceable("atom outside the linear part")
    return _EVAL[node.op](*(_evaluate(a, y, marked) for a in node.args))


_GRID = np.concatenate([np.linspace(-12, 12, 481), [-100.0, -30.0, 30.0, 100.0]])
_ACTIVATIONS = {"identity": lambda y: y, "relu": lambda y: max(y, 0.0),
                "gelu": lambda y: 0.5 * y * (1 + math.tanh(_SQRT_2_OVER_PI * (y + 0.044715 * y ** 3)))}


def _activation(expression, inner):
    """The activation ``expression`` is of the affine form ``inner``, or None."""
    marked = {id(node) for node in _nodes(expression) if _affine(node) == inner}
    for name, reference in _ACTIVATIONS.items():
        try:
            if all(abs(_evaluate(expression, float(y), marked) - reference(float(y))) <= 1e-6 * (1 + abs(y))
                   for y in _GRID):
                return name
        except (_Untraceable, ArithmeticError, ValueError):
            return None
    return None


def recognize(fn, operands, with_batch):
    """The :class:`Recognized` form of epilog ``fn`` (its operands' names in order, None for one it gets as None;
    ``with_batch``: it takes the batch index), or None when it is not one of cuBLASLt's epilogs. The function is
    called once, with symbols for its arguments."""
    coordinates = ("batch", "row", "col") if with_batch else ("row", "col")
    args = [_Sym("value"), *(_Sym(c) for c in coordinates),
            *(None if name is None else _Operand(name, coordinates) for name in operands)]
    try:
        expression = _wrap(_traced(fn)(*args))
    except Exception:  # noqa: BLE001 (anything the symbols cannot go through: not a recognisable epilog)
        return None
    atoms = {k for node in _nodes(expression) if isinstance(node, (_Sym, _Load))
             for k in (_affine(node) or {}) if k is not None}
    if ("value",) not in atoms:
        return None
    candidates = []
    for node in _nodes(expression):
        form = _affine(node)
        if form is not None and {k for k in form if k is not None} == atoms and not form.get(None):
            candidates.append(form)
    for inner in candidates:
        activation = _activation(expression, inner)
        if activation is not None:
            terms = tuple((key[0], key[1], value) for key, value in sorted(inner.items(), key=repr)
                          if key is not None and key != ("value",))
            return Recognized(None if activation == "identity" else activation, inner[("value",)], terms)
    return None
