"""The stateless matmul's work (:func:`run`, behind :func:`mathpy.matmul` of :mod:`._functions`): the planning steps
of :mod:`._resolve` with engines from :data:`~._matmul.matmul_plan_cache`, and a memo of prepared calls for repeated
calls.

The first call of a kind plans in full, with no Matmul object (validation, layouts, an engine borrowed from the
cache) and, when its :class:`~._call.MatmulCall` reads every operand where it lies (``direct``: device operands that
need no copy), leaves that call here under a key of cheap facts: each operand's package, shape, strides, dtype and device, and every
other argument. A later call with the same key borrows the engine (a cache hit) and runs the call on the new operands'
addresses, on the current (or given) stream: plans do not depend on streams.

``out=`` is numpy.matmul's (:func:`_into`): the product is computed into a new array, then copied into ``out`` (so
``out`` may overlap the operands, as NumPy allows); such calls are not remembered.
"""

import types
from typing import NamedTuple

import numpy as np

from ... import _execution, _memo, _packages
from ..._operands import wrap_operand
from ..._out import check_writable, copy_into, out_operand
from ..._streams import stream_handle, stream_pointer
from ._matmul import matmul_plan_cache
from ._numpy_rules import check_out_shape
from ._resolve import engine_request, make_call, plan_problem, resolve

__all__ = ["run", "forget", "remembered"]

_calls = _memo.Memo("stateless", group="matmul", max_entries=128)  # key -> MatmulCall
_host_calls = _memo.Memo("stateless-host", group="matmul", max_entries=128)  # key -> (plan key, HostCall): NumPy


def run(a, b, c=None, *, alpha=1, beta=None, epilog=None, epilog_inputs=None, options=None, preferences=None,
        execution=None, stream=None, quantization_scales=None, out=None):
    """:func:`mathpy.matmul` (:mod:`._functions`) once it is not routed to mathpy.torch: the memo's prepared call, or
    one planned now (:func:`_prepared`) on an engine from the cache."""
    if out is not None:
        return _into(out, Arguments(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution,
                                    stream, quantization_scales))
    host_key = None
    if type(a) is np.ndarray and type(b) is np.ndarray and c is None and quantization_scales is None:
        found, host_key = _lookup(_host_calls, _host_key(a, b, alpha, beta, epilog, epilog_inputs, options,
                                                         preferences, execution))
        if found is not None:
            if stream is not None:
                stream_handle(stream)  # checked, as on the full path (the CPU runs on no stream)
            if matmul_plan_cache.touch(found[0]) is found[1].engine and _current(found[1].engine.problem):
                return found[1](a, b, epilog_inputs)  # (CPU engines hold nothing to free)
            _host_calls.pop(host_key, None)  # evicted, planned again, or its epilog changed: plan again
    key, addresses = (None, None) if quantization_scales is not None else \
        _call_key(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution)
    call, key = _lookup(_calls, key)
    if call is not None and not _current(call.problem):
        _calls.pop(key, None)  # the Python epilog reads a global or closure that changed: compile and plan again
        call = None
    if call is not None:
        entry = matmul_plan_cache.acquire(call.cache_key)
        if entry is not None:
            try:
                if entry.plan is not call.engine:  # planned again since: bind to the cached engine
                    call = call.rebind(entry.plan, call.cache_key)
                    _calls.put(key, call)
                return call.execute_pointers(*addresses, stream if stream is None else stream_handle(stream))
            finally:
                matmul_plan_cache.release(entry)
        _calls.pop(key, None)  # evicted: plan again
    call, entry, handle = _prepared(Arguments(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences,
                                              execution, stream, quantization_scales))
    try:
        if key is not None and call.direct:
            _calls.put(key, call.detached())
        elif host_key is not None and not call.on_gpu:
            host = getattr(call.engine, "host_call", None)
            host = host and host(call, a, b, epilog_inputs)
            if host is not None:
                _host_calls.put(host_key, (call.cache_key, host))
        return call.execute(handle)
    finally:
        matmul_plan_cache.release(entry)


class Arguments(NamedTuple):
    """A matmul call's arguments as :func:`run` took them, frozen, for the full path (made only when no remembered
    call serves it)."""

    a: object
    b: object
    c: object
    alpha: object
    beta: object
    epilog: object
    epilog_inputs: object
    options: object
    preferences: object
    execution: object
    stream: object
    quantization_scales: object


def _prepared(args):
    """The first call's planning for :class:`Arguments` ``args``, with no Matmul object: ``(call, entry, handle)``,
    the prepared call on an engine borrowed from the plan cache (give ``entry`` back with
    ``matmul_plan_cache.release``) and the raw stream to run it on (None: the current one)."""
    r = resolve(args.a, args.b, args.c, args.alpha, args.beta, args.options, args.execution, args.quantization_scales)
    stream = args.stream
    handle = stream_pointer(stream, r.holder.name, r.device_id) if r.on_gpu else stream_handle(stream)
    problem, _, inputs, preferences = plan_problem(r, args.epilog, args.epilog_inputs, args.preferences)
    cache_key, create = engine_request(r, problem, preferences, handle, "Matmul.plan")
    entry = matmul_plan_cache.acquire(cache_key, create)
    try:
        call = make_call(r, problem, entry.plan, inputs, cache_key)
    except BaseException:
        matmul_plan_cache.release(entry)
        raise
    return call, entry, handle if (r.on_gpu and stream is not None) else None


def _current(problem):
    """False when the problem's Python epilog reads a global or closure that changed since it was compiled."""
    return problem.fused is None or problem.fused.epilog.current()


def _lookup(memo, key):
    """``(memo[key] or None, key)``; ``(None, None)`` for an unhashable key (an argument Matmul then judges)."""
    if key is None:
        return None, None
    try:
        return memo.get(key), key
    except TypeError:
        return None, None


def _into(out, args):
    """matmul(..., out=out) of :class:`Arguments` ``args``: NumPy's checks of ``out`` (its type, package, shape and
    dtype) before the product runs, then the product into a new array, copied into ``out``."""
    out_op = out_operand(out, wrap_operand(args.a, "a"))
    if out_op is None:  # out=(None,): no out
        return run(args.a, args.b, args.c, **{name: getattr(args, name) for name in Arguments._fields[3:]})
    call, entry, handle = _prepared(args)
    try:
        p, finish = call.problem, call.finish
        core = tuple(extent for extent, vector in ((p.m, finish.vector_a), (p.n, finish.vector_b)) if not vector)
        check_out_shape(tuple(out_op.shape), tuple(p.batch_shape), core)
        check_writable(out_op, p.d.dtype if finish.cast is None else finish.cast, "matmul")
        result = call.execute(handle)
    finally:
        matmul_plan_cache.release(entry)
    d, outputs = result if isinstance(result, tuple) else (result, None)
    handle = None if out_op.on_host or args.stream is None else stream_pointer(args.stream, out_op.package,
                                                                                out_op.device_id)
    copy_into(out_op, d, handle)
    return out_op.tensor if outputs is None else (out_op.tensor, outputs)


def remembered():
    """How many prepared calls are remembered."""
    return len(_calls) + len(_host_calls)


def forget():
    """Drop every remembered call (they hold no GPU memory: engines stay in the plan cache)."""
    _calls.clear()
    _host_calls.clear()


def _host_key(a, b, alpha, beta, epilog, epilog_inputs, options, preferences, execution):
    """The key of a CPU call on NumPy operands (their shapes, strides and dtypes, and every other argument), or None
    when an epilog input is not a NumPy array."""
    inputs = None
    if epilog_inputs:
        if type(epilog_inputs) is not dict:
            return None
        inputs = []
        for name in sorted(epilog_inputs):
            value = epilog_inputs[name]
            if type(value) is not np.ndarray:
                return None
            inputs.append((name, value.shape, value.strides, value.dtype))
        inputs = tuple(inputs)
    if type(options) is dict:
        options = tuple(sorted(options.items()))
    if type(preferences) is dict:
        preferences = tuple(sorted(preferences.items()))
    return (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, inputs, type(alpha), alpha, type(beta), beta,
            epilog, options, preferences, execution, _execution.scoped_execution())


_NO_INPUTS = types.MappingProxyType({})


def _call_key(a, b, c, alpha, beta, epilog, epilog_inputs, options, preferences, execution):
    """``(key, (a, b, c, epilog input) addresses)``, or ``(None, None)`` when the call cannot reuse a prepared call:
    only calls whose operands are all device arrays of one package, read where they lie and holding their values there
    (no lazy torch view), are remembered."""
    package = _packages.interface_of(a)
    if package is None or not package.device_arrays or _packages.interface_of(b) is not package:
        return None, None
    facts_a, address_a = package.facts(a)
    facts_b, address_b = package.facts(b)
    if facts_a is None or facts_b is None:  # a lazy view (a torch conjugate / negative bit): Matmul reads it resolved
        return None, None
    facts_c = address_c = None
    if c is not None:
        if _packages.interface_of(c) is not package:
            return None, None
        facts_c, address_c = package.facts(c)
        if facts_c is None:
            return None, None
    inputs, addresses = None, _NO_INPUTS
    if epilog_inputs:
        if type(epilog_inputs) is not dict:
            return None, None
        inputs, addresses = [], {}
        for name in sorted(epilog_inputs):
            value = epilog_inputs[name]
            if _packages.interface_of(value) is not package:
                return None, None
            facts, addresses[name] = package.facts(value)
            if facts is None:
                return None, None
            inputs.append((name, facts))
        inputs = tuple(inputs)
    if type(options) is dict:
        options = tuple(sorted(options.items()))
    if type(preferences) is dict:
        preferences = tuple(sorted(preferences.items()))
    key = (package, facts_a, facts_b, facts_c, inputs, type(alpha), alpha, type(beta), beta, epilog, options,
           preferences, execution, _execution.scoped_execution())
    return key, (address_a, address_b, address_c, addresses)
