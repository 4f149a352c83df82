"""The local side of the distributed matmul algorithms (see ``_matmul``): which :class:`mathpy.Matmul` products each
rank runs on which parts, and the communication between them.

- :class:`GatherProduct`: gather the operand parts the rank's D needs (into buffers the plan owns), one product.
- :class:`OverlappedProduct`: the same with the transfer of one operand overlapping the product of the rank's own
  K block; one product per K block, accumulating, the epilog in the last one.
- :class:`ReduceProduct`: partial products for the other ranks' parts of D, one ``reduce_scatter``, the own product
  with the epilog on top of the sum.

Products that accumulate (overlapped, reduce) run in float32 for half-precision results and are rounded once at the
end (the epilog's floating inputs and outputs are converted with them), so that every element of D is rounded once,
as in a single product.
"""

import dataclasses

import numpy as np

from .. import _operands
from .._dtypes import BFLOAT16
from ..host.matmul import Matmul as LocalMatmul
from ..host.matmul._epilog import epilog_spec

__all__ = ["GatherProduct", "OverlappedProduct", "ReduceProduct", "accumulation_dtype"]

_HALF = (np.dtype(np.float16), BFLOAT16)


def accumulation_dtype(result):
    """float32 for half-precision results (float16, bfloat16), else the result dtype itself."""
    return np.dtype(np.float32) if np.dtype(result) in _HALF else np.dtype(result)


def _selector(index_set):
    if isinstance(index_set, range):
        return slice(index_set.start, index_set.stop)
    return index_set


class _Local:
    """One :class:`mathpy.Matmul` on local arrays, computed with result dtype ``acc`` and rounded to ``result``."""

    def __init__(self, a, b, c, *, alpha, beta, options, epilog, epilog_inputs, acc, result, arrays):
        self.acc, self.result, self.arrays = np.dtype(acc), np.dtype(result), arrays
        widened = self.acc != self.result
        options = dataclasses.replace(options, result_type=self.acc) if widened else options
        self.args = dict(alpha=alpha, beta=beta, options=options)
        self.a, self.b, self.epilog, self.inputs = a, b, epilog, self._inputs(epilog_inputs)
        self.matmul = self._make(c)

    def _make(self, c):
        matmul = LocalMatmul(self.a, self.b, c, **self.args)
        try:
            matmul.plan(epilog=self.epilog, epilog_inputs=self.inputs)
        except BaseException:
            matmul.free()
            raise
        return matmul

    def set_c(self, c):
        """Take ``c`` (the previous K block's sum) as C. The plan was made with a placeholder C in column-major
        order, the order mathpy's products return; a C in another order is planned anew once (then reused)."""
        try:
            self.matmul.reset_operands(c=c)
        except ValueError:
            fresh = self._make(c)
            self.matmul.free()
            self.matmul = fresh

    def _inputs(self, given):
        """The epilog inputs, floating ones of the result dtype converted to the accumulation dtype."""
        if not given or self.acc == self.result:
            return given
        converted = {}
        for name, value in given.items():
            op = _operands.wrap_operand(value, name)
            converted[name] = self.arrays.cast(value, self.acc) if op.dtype == self.result else value
        return converted

    def run(self, rounded=True):
        """The product; in the result dtype when ``rounded``, else in the accumulation dtype."""
        out = self.matmul.execute()
        if self.acc == self.result or not rounded:
            return out
        cast = self.arrays.cast
        if isinstance(out, tuple):
            d, aux = out
            aux = {name: cast(x, self.result) if self.arrays.dtype(x) == self.acc else x for name, x in aux.items()}
            return cast(d, self.result), aux
        return cast(out, self.result)

    def reset(self, a=None, b=None, c=None, epilog_inputs=None):
        inputs = self._inputs(epilog_inputs)
        self.matmul.reset_operands(a=a, b=b, c=c, epilog_inputs=inputs)
        self.a, self.b = self.a if a is None else a, self.b if b is None else b
        if inputs:
            self.inputs = {**self.inputs, **inputs}

    def free(self):
        self.matmul.free()


class _Product:
    """What the algorithms share: the operands, the rank's parts of the index sets, the local arrays' package."""

    def __init__(self, *, ops, alpha, beta, options, epilog, epilog_inputs, arrays, rank, partitions):
        self.ops = {name: (None if op is None else op.tensor) for name, op in ops.items()}
        self.alpha, self.beta, self.options = alpha, beta, options
        self.epilog, self.epilog_inputs = epilog, epilog_inputs
        self.arrays, self.rank, self.partitions = arrays, rank, partitions
        self.result = np.dtype(options.result_type) if options.result_type is not None else ops["a"].dtype
        self.locals = []

    def local(self, a, b, c, *, beta, epilog=None, epilog_inputs=None, acc=None):
        product = _Local(a, b, c, alpha=self.alpha, beta=beta, options=self.options, epilog=epilog,
                         epilog_inputs=epilog_inputs, acc=acc or self.result, result=self.result, arrays=self.arrays)
        self.locals.append(product)
        return product

    def check_inputs(self, epilog_inputs):
        if epilog_inputs is not None and not isinstance(epilog_inputs, dict):
            raise TypeError(f"epilog_inputs must be a dict, not {type(epilog_inputs).__name__}")

    def free(self):
        for product in self.locals:
            product.free()
        self.locals = []


class GatherProduct(_Product):
    """Gather A's rows and B's columns of the rank's D part, then one local product with the epilog."""

    def __init__(self, *, exchanges, **common):
        super().__init__(**common)
        self.exchanges, self.buffers = exchanges, {}
        use = {}
        for name in ("a", "b"):
            exchange = exchanges[name]
            if exchange.identity:
                use[name] = self.ops[name]
            else:
                dtype = self.arrays.dtype(self.ops[name])
                use[name] = self.buffers[name] = self.arrays.empty(exchange.out_shape, dtype)
        self.product = self.local(use["a"], use["b"], self.ops["c"], beta=self.beta, epilog=self.epilog,
                                  epilog_inputs=self.epilog_inputs)

    def run(self, transport, stream):
        arrays = self.arrays
        with arrays.on_stream(stream):
            for name, buffer in self.buffers.items():
                self.exchanges[name].run(self.ops[name], arrays, transport, stream, out=buffer)
            return self.product.run()

    def reset(self, new, epilog_inputs):
        self.ops.update(new)
        direct = {name: value for name, value in new.items() if name == "c" or name not in self.buffers}
        self.product.reset(**direct, epilog_inputs=epilog_inputs)


class OverlappedProduct(_Product):
    """``which`` ("a" or "b") arrives in K blocks (an all-gather) while the rank multiplies its own K block."""

    def __init__(self, *, which, exchange, **common):
        super().__init__(**common)
        self.which, self.exchange = which, exchange
        pa, pb, _ = self.partitions
        size, me, arrays = exchange.size, self.rank, self.arrays
        moving = pb if which == "b" else pa
        k_sets = [moving.sets[s][0 if which == "b" else 1] for s in range(size)]
        self.order = [me] + [s for s in range(size) if s != me]
        dtype = arrays.dtype(self.ops[which])
        self.recv = arrays.empty((max(exchange.block_counts) * size,), dtype)
        acc = accumulation_dtype(self.result)
        self.c_acc = None
        c = self.ops["c"]
        if c is not None and acc != self.result:
            self.c_acc = arrays.empty(tuple(c.shape), acc)
            arrays.cast_into(self.c_acc, c)
        a, b = self.ops["a"], self.ops["b"]
        segments = [arrays.view(self.recv, *at) for at in self._segments_at()]
        self.terms, placeholder = [], None
        for position, s in enumerate(self.order):
            k = (slice(None), _selector(k_sets[s])) if which == "b" else (_selector(k_sets[s]), slice(None))
            fixed = arrays.take(a if which == "b" else b, k)
            arriving = self.ops[which] if s == me else segments[s]
            left, right = (fixed, arriving) if which == "b" else (arriving, fixed)
            last = position == size - 1
            if position == 0:
                term = self.local(left, right, self.c_acc if self.c_acc is not None else c, beta=self.beta, acc=acc)
            else:
                if placeholder is None:  # column-major, as mathpy's products return it
                    placeholder = arrays.empty((b.shape[1], a.shape[0]), acc).T
                term = self.local(left, right, placeholder, beta=1, acc=acc, epilog=self.epilog if last else None,
                                  epilog_inputs=self.epilog_inputs if last else None)
            self.terms.append(term)
        self.k_sets = k_sets

    def _segments_at(self):
        exchange = self.exchange
        longest = max(exchange.block_counts)
        return [(s * longest, exchange.block_counts[s], exchange.source.local_shape(s)) for s in range(exchange.size)]

    def run(self, transport, stream):
        arrays = self.arrays
        with arrays.on_stream(stream):
            pending = self.exchange.start(self.ops[self.which], arrays, transport, stream, async_op=True,
                                          buffer=self.recv)
            if self.c_acc is not None:
                arrays.cast_into(self.c_acc, self.ops["c"])
            acc = self.terms[0].run(rounded=False)  # the own K block, while the others arrive
            pending.wait()
            for position, term in enumerate(self.terms[1:], 2):
                term.set_c(acc)
                acc = term.run(rounded=position == len(self.terms))
            return acc

    def reset(self, new, epilog_inputs):
        self.ops.update(new)
        me = self.rank
        a, b = self.ops["a"], self.ops["b"]
        which = self.which
        for position, s in enumerate(self.order):
            k = (slice(None), _selector(self.k_sets[s])) if which == "b" else (_selector(self.k_sets[s]), slice(None))
            changes = {}
            fixed_name = "a" if which == "b" else "b"
            if fixed_name in new:
                changes[fixed_name] = self.arrays.take(a if which == "b" else b, k)
            if s == me and which in new:
                changes[which] = new[which]
            if position == 0 and "c" in new and self.c_acc is None:
                changes["c"] = new["c"]
            last = position == len(self.order) - 1
            self.terms[position].reset(**changes, epilog_inputs=epilog_inputs if last else None)


class ReduceProduct(_Product):
    """A column-distributed A times a row-distributed B: partial products for the other ranks' parts of D, one
    reduce_scatter, the own part's product with the epilog on top of the sum."""

    def __init__(self, **common):
        super().__init__(**common)
        _, _, pd = self.partitions
        arrays, me = self.arrays, self.rank
        size = pd.nranks
        acc = accumulation_dtype(self.result)
        self.acc = acc
        a, b = self.ops["a"], self.ops["b"]
        self.shapes = [pd.local_shape(j) for j in range(size)]
        self.counts = [int(np.prod(shape)) for shape in self.shapes]
        chunk = max(self.counts)
        self.chunk = chunk
        self.send = arrays.zeros((chunk * size,), acc)  # the own chunk and the padding stay zero
        self.recv = arrays.empty((chunk,), acc)
        self.sum = self._chunk(self.recv, 0, me)
        self.partials = {}
        for j in range(size):
            rows, cols = (_selector(s) for s in pd.sets[j])
            left, right = arrays.take(a, (rows, slice(None))), arrays.take(b, (slice(None), cols))
            if j == me:
                self.own = (rows, cols)
                self.final = self.local(left, right, self.sum, beta=1, acc=acc, epilog=self.epilog,
                                        epilog_inputs=self.epilog_inputs)
            else:
                self.partials[j] = self.local(left, right, None, beta=0, acc=acc)
        if epilog_spec(self.epilog).bgrad in ("a", "b"):
            raise ValueError("BGRADA / BGRADB sum over K, which the reduce algorithm splits: use algorithm='gather'")

    def _chunk(self, flat, start, j):
        """Part ``j``'s chunk of ``flat`` in column-major order: the order of mathpy's results, so the partial
        products are copied in one pass and the sum is a C of the final product's own order (no copy there)."""
        rows, cols = self.shapes[j]
        return self.arrays.view(flat, start, self.counts[j], (cols, rows)).T

    def run(self, transport, stream):
        arrays = self.arrays
        with arrays.on_stream(stream):
            for j, partial in self.partials.items():
                arrays.cast_into(self._chunk(self.send, j * self.chunk, j), partial.run(rounded=False))
            transport.reduce_scatter(self.send, self.recv, stream=stream)
            if self.ops["c"] is not None and self.beta != 0:
                arrays.add_scaled(self.sum, self.ops["c"], self.beta)
            return self.final.run()

    def reset(self, new, epilog_inputs):
        self.ops.update(new)
        a, b = self.ops["a"], self.ops["b"]
        _, _, pd = self.partitions
        for j in range(pd.nranks):
            rows, cols = (_selector(s) for s in pd.sets[j])
            changes = {}
            if "a" in new:
                changes["a"] = self.arrays.take(a, (rows, slice(None)))
            if "b" in new:
                changes["b"] = self.arrays.take(b, (slice(None), cols))
            if j == self.rank:
                self.final.reset(**changes, epilog_inputs=epilog_inputs)
            elif changes:
                self.partials[j].reset(**changes)
