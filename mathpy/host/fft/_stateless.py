"""The stateless functions' prepared calls: a repeated call with the same argument facts runs the
:class:`~._call.FFTCall` of the first one, with its engine borrowed from the plan cache.

The first call of a kind goes through :func:`mathpy.host.fft._functions` in full (NumPy's argument rules, promotion,
padding, a :class:`~._plan.FFT` planned with an engine from :data:`~._plan.plan_cache`) and, when the call is one
plan on the operand as it is (no promotion, padding or cropping, no ``out=``), leaves its prepared call here under a
key made of cheap facts: the function and its parameters, the operand's package, shape, strides, dtype and device,
the callbacks (function objects, user data by address or scalar value), the options and the execution space. A later
call with the same key borrows the engine (a cache hit), checks that the callbacks' compiled code is still valid
(:class:`mathpy.jit._cache.Snapshot`: a rebound global means a new compile and a new plan) and runs the call on the
new operand's address, on the current (or given) stream: plans do not depend on streams.
"""

import types

import numpy as np

from ... import _execution, _packages, _operands
from ..._streams import stream_handle
from ._callback import Callback
from ._call import FFTCall
from ._plan import plan_cache

__all__ = ["call_key", "run", "remember", "forget", "remembered", "MISSED"]

MISSED = object()
_calls = {}  # key -> _Remembered
_CALLS_MAX = 256


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
    if package is None or not package.device_arrays and package.name != "numpy":
        return MISSED
    return (value.function, package.name) + tuple(package.describe(data))  # the address too: data is read in place


def call_key(name, params, a, out, prolog, epilog, options, execution):
    """The key of a stateless call, or None when the call cannot reuse a prepared call (``out=``, a dict of options,
    arguments that cannot be hashed)."""
    if out is not None or type(options) is dict:
        return None
    package = _packages.interface_of(a)
    if package is None:
        return None
    shape, strides, dtype, device_id, _ = package.describe(a)
    pro, epi = _callback_facts(prolog), _callback_facts(epilog)
    if pro is MISSED or epi is MISSED:
        return None
    key = (name, params, package.name, tuple(shape), tuple(strides), dtype, device_id, pro, epi, options, execution,
           _execution.get_execution_space())
    try:
        hash(key)
    except TypeError:
        return None
    return key


def run(key, a, stream):
    """Run the prepared call remembered under ``key`` on operand ``a``; MISSED when there is none (or its engine was
    evicted, or a callback's code changed): the caller then takes the full path."""
    found = _calls.get(key)
    if found is None:
        return MISSED
    for snapshot in found.snapshots:
        if not snapshot.valid():
            _calls.pop(key, None)
            return MISSED
    call = found.call
    entry = plan_cache.acquire(call.cache_key)
    if entry is None:  # evicted: plan again
        _calls.pop(key, None)
        return MISSED
    try:
        if entry.plan is not call.engine:  # planned again since (by another call): bind to the cached engine
            call = FFTCall(call.problem, entry.plan, call.callbacks, call.cache_key)
            found.call = call
        p = call.problem
        if p.direct:
            handle = stream_handle(stream)
            if handle is None:
                handle = _packages.get(p.holder).current_stream(p.device_id)
            return call.execute_direct(_packages.get(p.holder).pointer(a), found.direction, handle, found.scale)
        op = _operands.wrap_operand(a)
        handle = None
        if p.on_gpu:
            handle = stream_handle(stream)
            if handle is None:
                handle = _packages.get(p.holder).current_stream(p.device_id)
        return call.execute(op, found.direction, handle, found.scale)
    finally:
        plan_cache.release(entry)


def remember(key, call, direction, scale):
    """Leave ``call`` for later calls with ``key`` (when its callbacks can be reused as they are bound)."""
    if key is None or not all(cb is None or cb.reusable for cb in call.callbacks):
        return
    snapshots = tuple(cb.snapshot for cb in call.callbacks if cb is not None and cb.snapshot is not None)
    if len(_calls) >= _CALLS_MAX:
        _calls.clear()
    _calls[key] = _Remembered(call, direction, scale, snapshots)


def remembered():
    """How many prepared calls are remembered."""
    return len(_calls)


def forget():
    """Drop every prepared call (they hold engines' keys and callbacks' user data)."""
    _calls.clear()
