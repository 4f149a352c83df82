"""Every memo mathpy keeps, in one place: a bounded least-recently-used :class:`Memo` per purpose, registered by name
and group, so that one call clears them all and one call reports each.

A memo maps cheap keys (shapes, dtypes, function objects, options) to things that are costly to make again and can
always be made again: resolved problems, prepared calls, compiled kernels, wrappers of foreign streams. Forgetting
an entry only costs a later call the work again. Plans that own device memory live in a
:class:`~mathpy._plan_cache.PlanCache` (bounded by workspace bytes too, and freeing what it evicts), which registers
itself here as well, so :func:`clear` and :func:`info` cover it.

Lookups are lock-free (a dict read and a move to the recent end, atomic under the GIL); inserts and evictions take the
memo's lock. A memo is bounded by entries and, when given ``size``, by bytes.

>>> m = Memo("demo", group="docs", max_entries=2)
>>> m.put("a", 1); m.put("b", 2); m.get("a")          # "a" is now the most recent
1
>>> m.put("c", 3)                                       # evicts "b", the least recently used
>>> m.get("b") is None, m.get_or_make("d", lambda: 4), len(m)
(True, 4, 2)
>>> info()["docs/demo"].evictions
2
>>> clear("docs"); len(m)
0
>>> unregister(m)
"""

import collections
import threading
from typing import NamedTuple

__all__ = ["Memo", "MemoInfo", "register", "unregister", "clear", "info", "plan_cache_clear", "plan_cache_info"]


class MemoInfo(NamedTuple):
    """What :func:`info` reports for each memo (and plan cache)."""

    entries: int
    bytes: int
    hits: int
    misses: int
    evictions: int
    max_entries: int
    max_bytes: int | None


_registry = {}  # "group/name" -> Memo or PlanCache
_registry_lock = threading.Lock()


def register(cache, group, name):
    """Make ``cache`` (anything with ``clear()`` and ``info()``) known to :func:`clear` and :func:`info` as
    ``group/name``."""
    with _registry_lock:
        _registry[f"{group}/{name}"] = cache


def unregister(cache):
    with _registry_lock:
        for key, value in list(_registry.items()):
            if value is cache:
                del _registry[key]


def clear(group=None):
    """Empty every registered memo and plan cache (of ``group`` only, when given: "fft", "matmul", "jit", ...)."""
    with _registry_lock:
        caches = [c for key, c in _registry.items() if group is None or key.split("/", 1)[0] == group]
    for cache in caches:
        cache.clear()


def info(group=None):
    """``{"group/name": MemoInfo or CacheInfo}`` for every registered memo and plan cache (of ``group``)."""
    with _registry_lock:
        caches = [(key, c) for key, c in _registry.items() if group is None or key.split("/", 1)[0] == group]
    return {key: cache.info() for key, cache in caches}


def plan_cache_clear():
    """Empty every plan cache and memo mathpy keeps.

    FFT and matmul plans (their device memory is freed once no call uses them), prepared calls, resolved problems and
    the compiled callbacks held in memory: later calls plan again (and compile again, or load from the on-disk
    cache). :func:`mathpy.fft.plan_cache_clear` empties the FFT's only.

    Examples
    --------
    >>> import mathpy
    >>> mathpy.plan_cache_clear()
    >>> mathpy.plan_cache_info()["fft/stateless"].entries, mathpy.matmul_plan_cache.info().plans
    (0, 0)
    """
    clear()


def plan_cache_info():
    """Report every plan cache and memo mathpy keeps.

    Returns
    -------
    dict
        ``{"group/name": info}`` ("fft/plans", "matmul/stateless", "jit/callbacks", ...): a :class:`MemoInfo`
        (entries, bytes, hits, misses, evictions and the bounds) or, for the plan caches, their ``CacheInfo``. Each
        is bounded and evicts its least recently used entries.

    Examples
    --------
    >>> import numpy as np, mathpy
    >>> _ = mathpy.fft.fft(np.ones(8, np.complex64))
    >>> info = mathpy.plan_cache_info()
    >>> info["fft/stateless"].entries >= 1, "matmul/plans" in info
    (True, True)
    """
    return info()


class Memo:
    """A bounded least-recently-used mapping, registered as ``group/name``.

    Parameters
    ----------
    name, group : str
        Where :func:`info` lists it and which :func:`clear` empties it.
    max_entries : int
        At most this many entries; the least recently used go first.
    max_bytes : int, optional
        At most this many bytes, as ``size(value)`` counts them (both needed together).
    size : callable, optional
        ``size(value) -> bytes``.
    """

    __slots__ = ("name", "max_entries", "max_bytes", "_size", "_data", "_lock", "_bytes", "hits", "misses",
                 "evictions", "__weakref__")

    def __init__(self, name, group, max_entries=256, max_bytes=None, size=None):
        if (max_bytes is None) != (size is None):
            raise ValueError("Memo: max_bytes and size go together")
        self.name, self.max_entries, self.max_bytes, self._size = name, max_entries, max_bytes, size
        self._data = collections.OrderedDict()
        self._lock = threading.Lock()
        self._bytes = self.hits = self.misses = self.evictions = 0
        register(self, group, name)

    def get(self, key, default=None):
        """The value under ``key`` (now the most recent), or ``default``. Unhashable keys raise TypeError."""
        data = self._data
        value = data.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            return default
        try:
            data.move_to_end(key)
        except KeyError:  # evicted by another thread in between: still a valid value to return
            pass
        self.hits += 1
        return value

    def put(self, key, value):
        """Remember ``value`` under ``key``, evicting the least recently used entries beyond the bounds."""
        size = self._size(value) if self._size is not None else 0
        with self._lock:
            old = self._data.pop(key, _MISSING)
            if old is not _MISSING and self._size is not None:
                self._bytes -= self._size(old)
            self._data[key] = value
            self._bytes += size
            while len(self._data) > self.max_entries or (self.max_bytes is not None and self._bytes > self.max_bytes
                                                         and len(self._data) > 1):
                _, evicted = self._data.popitem(last=False)
                if self._size is not None:
                    self._bytes -= self._size(evicted)
                self.evictions += 1

    def get_or_make(self, key, make):
        """The value under ``key``, made with ``make()`` and remembered on a miss (``make`` runs outside the lock:
        two threads may both make it; the last one is kept)."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = make()
            self.put(key, value)
        return value

    def pop(self, key, default=None):
        with self._lock:
            value = self._data.pop(key, _MISSING)
            if value is _MISSING:
                return default
            if self._size is not None:
                self._bytes -= self._size(value)
            return value

    def clear(self):
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def info(self):
        return MemoInfo(len(self._data), self._bytes, self.hits, self.misses, self.evictions, self.max_entries,
                        self.max_bytes)

    def __repr__(self):
        return f"<Memo {self.name}: {len(self._data)} of {self.max_entries}>"


_MISSING = object()
