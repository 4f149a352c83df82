"""The stateless functions' prepared calls: a repeated call with the same argument facts runs the
:class:`~._call.FFTCall` of the first one, with its engine from the plan cache.

The first call of a kind goes through :func:`mathpy.host.fft._functions` in full (NumPy's argument rules, promotion,
padding, a :class:`~._fft.FFT` planned with an engine from :data:`~._fft.plan_cache`) and, when the call is one
plan on the operand as it is (no promotion, padding or cropping, no ``out=``), leaves its prepared call here under a
key made of cheap facts: the function and its parameters, the operand's package, shape, strides, dtype and device,
the callbacks (function objects, user data by address or scalar value), the options and the execution space. A later
call with the same key checks that the callbacks' compiled code is still valid (:class:`mathpy.jit._cache.Snapshot`:
a rebound global means a new compile and a new plan), finds the engine in the plan cache (a cache hit) and runs the
call on the new operand's address, on the current (or given) stream: plans do not depend on streams.

A call that is one engine call on device memory (``problem.direct``, or ``staged``: a dense copy of a device operand
first) runs under the engine's lock, which the engine's ``free()`` takes too: it looks the engine up with
:meth:`~mathpy._plan_cache.PlanCache.touch` (one lock) and plans again if an eviction on another thread freed it in
between. Other calls (host operands, in-place plans, the CPU's staging copies) borrow the engine for the whole call
(:meth:`~mathpy._plan_cache.PlanCache.acquire` / ``release``).
"""

import types

import numpy as np

from ... import _execution, _memo, _operands, _packages
from ..._errors import InvalidPlanStateError
from ..._streams import stream_handle
from ._callback import Callback
from ._call import FFTCall
from ._fft import plan_cache

__all__ = ["reuse", "remember", "forget", "remembered", "MISSED"]

MISSED = object()
_NUMPY = _packages.get("numpy")
_calls = _memo.Memo("stateless", group="fft", max_entries=256)  # key -> _Remembered (plan_cache_clear() empties it)


class _Remembered:
    __slots__ = ("call", "direction", "scale", "snapshots")

    def __init__(self, call, direction, scale, snapshots):
        self.call, self.direction, self.scale, self.snapshots = call, direction, scale, snapshots


def _callback_facts(value):
    """What identifies a prolog/epilog argument cheaply, or MISSED when its user data must be copied per call."""
    if value is None:
        return None
    if type(value) is types.FunctionType or isinstance(value, (bytes, bytearray)):
        return value if type(value) is not bytearray else bytes(value)
    if type(value) is not Callback:
        return MISSED
    data = value.data
    if data is None:
        return value.function
    if isinstance(data, (bool, int, float, complex, np.generic)):
        return value.function, type(data), data
    package = _packages.interface_of(data)
    if package is None:
        return MISSED
    facts, address = package.facts(data)
    if facts is None:  # a lazy view: the plan must read a resolved copy, made per call
        return MISSED
    return value.function, package.name, facts, address  # the address too: the plan reads the data in place


def reuse(name, params, a, out, prolog, epilog, options, execution, stream):
    """``(result, None)`` when the prepared call remembered for this call's facts ran, else ``(None, key)``: the key
    under which the full path may leave its prepared call (None: this call cannot reuse one: ``out=`` other than a
    NumPy array for a NumPy operand, a dict of options, user data copied at every call, an operand or user data whose
    address does not hold its values (a lazy torch view), unhashable arguments)."""
    if type(options) is dict or (out is not None and not (type(out) is np.ndarray and type(a) is np.ndarray)):
        return None, None
    if type(a) is np.ndarray:  # the CPU's calls read the array, not an address: no need to ask for it
        package, facts, pointer = _NUMPY, (a.shape, a.strides, a.dtype, None), None
    else:
        package = _packages.interface_of(a)
        if package is None:
            return None, None
        facts, pointer = package.facts(a)
        if facts is None:  # a lazy view (a torch conjugate / negative bit): its address holds other values
            return None, None
    pro = None if prolog is None else _callback_facts(prolog)
    epi = None if epilog is None else _callback_facts(epilog)
    if pro is MISSED or epi is MISSED:
        return None, None
    key = (name, params, package, facts, pro, epi, options, execution, _execution.scoped_execution())
    try:
        found = _calls.get(key)
    except TypeError:  # an unhashable argument: the full path judges it
        return None, None
    if found is None:
        return None, key
    for snapshot in found.snapshots:
        if not snapshot.valid():  # a callback's code or a global it reads changed: compile and plan again
            _calls.pop(key, None)
            return None, key
    call = found.call
    host = call.host_direct and type(a) is np.ndarray  # the CPU engine: its free() leaves it runnable
    if out is not None and not (host and call.takes_out(out, a)):  # the full path judges and copies
        return None, None
    if host or ((call.problem.direct or call.staged) and call.locked):  # one engine call (GPU: under its lock)
        call = _touched(found, key)
        if call is None:  # evicted: plan again
            return None, key
        if host:
            if stream is not None:
                stream_handle(stream)  # checked, as on the full path
            return call.execute_host(a, found.direction, found.scale, out), None
        handle = stream if stream is None else stream_handle(stream)
        try:
            if call.staged:
                return call.execute_staged(a, found.direction, handle, found.scale), None
            return call.execute_direct(pointer, found.direction, handle, found.scale), None
        except InvalidPlanStateError:  # evicted and freed by another thread since touch(): plan again
            _calls.pop(key, None)
            return None, key
    entry = plan_cache.acquire(call.cache_key)  # staging, copies and the CPU run around the engine call: borrowed
    if entry is None:  # evicted: plan again
        _calls.pop(key, None)
        return None, key
    try:
        if entry.plan is not call.engine:  # planned again since (by another call): bind to the cached engine
            call = found.call = FFTCall(call.problem, entry.plan, call.callbacks, call.cache_key)
        p = call.problem
        if p.direct:  # an engine without a lock (a plug-in)
            return call.execute_direct(pointer, found.direction, stream if stream is None else stream_handle(stream),
                                       found.scale), None
        handle = (call.holder.current_stream(p.device_id) if stream is None else stream_handle(stream)) \
            if p.on_gpu else None
        return call.execute(_operands.wrap_operand(a), found.direction, handle, found.scale), None
    finally:
        plan_cache.release(entry)


def _touched(found, key):
    """``found``'s call, bound to the engine the plan cache holds for it (touched: a hit), or None (and ``key``
    forgotten) when the cache evicted it."""
    call = found.call
    engine = plan_cache.touch(call.cache_key)
    if engine is None:
        _calls.pop(key, None)
        return None
    if engine is not call.engine:  # planned again since (by another call): bind to the cached engine
        call = found.call = FFTCall(call.problem, engine, call.callbacks, call.cache_key)
    return call


def remember(key, call, direction, scale):
    """Leave ``call`` for later calls with ``key`` (when its callbacks can be reused as they are bound)."""
    if key is None or not all(cb is None or cb.reusable for cb in call.callbacks):
        return
    snapshots = tuple(cb.snapshot for cb in call.callbacks if cb is not None and cb.snapshot is not None)
    # without the bound callbacks: the cached engine keeps the user data alive as long as it may run, not this memo
    _calls.put(key, _Remembered(FFTCall(call.problem, call.engine, (), call.cache_key), direction, scale, snapshots))


def remembered():
    """How many prepared calls are remembered."""
    return len(_calls)


def forget():
    """Drop every prepared call (they hold engines' keys and callbacks' user data)."""
    _calls.clear()
