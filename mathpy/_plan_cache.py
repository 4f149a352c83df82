"""A thread-safe LRU cache of plans behind the stateless calls, bounded by count and by workspace bytes.

A plan is any object with ``free()``. Plans do not depend on the stream they run on (the engines take the stream and,
when needed, a workspace at each execution), so one cached plan serves every stream and thread.

A caller borrows a plan with :meth:`PlanCache.acquire` (or the ``with`` form :meth:`PlanCache.borrow`) and gives it
back with :meth:`PlanCache.release`: while borrowed it is never freed, even if evicted meanwhile (it is freed when the
last borrower returns it), so one thread's eviction cannot pull a plan from under another thread's execution. When
several threads miss the same key at once, one plans and the others wait for its plan (planning with callbacks can
take a second: cuFFT JIT-links them).

>>> class Plan:
...     def __init__(self, n): self.n, self.freed = n, False
...     def free(self): self.freed = True
>>> cache = PlanCache("demo", max_plans=2, max_bytes=100)
>>> with cache.borrow("a", lambda: (Plan(1), 60)) as plan:
...     plan.n
1
>>> with cache.borrow("b", lambda: (Plan(2), 60)) as plan:  # 120 bytes > 100: "a" is evicted and freed
...     pass
>>> cache.info()
CacheInfo(plans=1, bytes=60, hits=0, misses=2, evictions=1, max_plans=2, max_bytes=100)
>>> entry = cache.acquire("b")       # a hit: borrowed until released
>>> entry.plan.n, cache.acquire("a") # a miss without a way to create: None
(2, None)
>>> cache.release(entry)
>>> cache.touch("b").n, cache.touch("a")  # a hit without a borrow (see touch), and a miss
(2, None)
"""

import collections
import contextlib
import threading
from typing import NamedTuple

from . import _memo
from ._log import logger

__all__ = ["PlanCache", "CacheInfo", "PlanKey"]


class CacheInfo(NamedTuple):
    """What :meth:`PlanCache.info` reports."""

    plans: int
    bytes: int
    hits: int
    misses: int
    evictions: int
    max_plans: int
    max_bytes: int


class PlanKey(int):
    """A plan cache key (a tuple of everything that makes plans differ, ``.parts``) hashed once: the int is the
    tuple's hash, so a dict hashes it in C, and a prepared call that looks its plan up with the same key object at
    every call is found by identity. Keys with equal hashes but different parts are different keys.

    >>> PlanKey(("fft", 8)) == PlanKey(("fft", 8)), PlanKey(("fft", 8)) == PlanKey(("fft", 9))
    (True, False)
    """

    def __new__(cls, parts):
        parts = tuple(parts)
        self = super().__new__(cls, hash(parts))
        self.parts = parts
        return self

    __hash__ = int.__hash__

    def __eq__(self, other):
        return self is other or (type(other) is PlanKey and self.parts == other.parts)

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return f"PlanKey{self.parts!r}"


class Entry:
    """A cached plan; ``plan`` is what was created. Returned by :meth:`PlanCache.acquire`."""

    __slots__ = ("plan", "nbytes", "borrowers", "evicted")

    def __init__(self, plan, nbytes):
        self.plan, self.nbytes, self.borrowers, self.evicted = plan, nbytes, 0, False


class PlanCache:
    """A thread-safe LRU of plans keyed by everything that makes plans differ (see the module docstring); public as
    :data:`mathpy.matmul_plan_cache`, the cache behind :func:`mathpy.matmul`.

    Parameters
    ----------
    name : str
        For messages and logs.
    max_plans : int, optional
        At most this many plans (``0`` disables caching). Default 64.
    max_bytes : int, optional
        At most this many bytes of workspace held by the cached plans. Default 1 GiB.

    Raises
    ------
    ValueError
        A negative bound.

    Notes
    -----
    :meth:`info` reports its state, :meth:`resize` changes the bounds and :meth:`clear` frees every idle plan (GPU
    workspaces included). Plans borrowed by running calls are freed when the calls return them.

    Examples
    --------
    >>> import numpy as np
    >>> import mathpy
    >>> _ = mathpy.matmul(np.ones((4, 4)), np.ones((4, 4)))
    >>> mathpy.matmul_plan_cache.info().plans >= 1
    True
    >>> mathpy.matmul_plan_cache.clear()
    >>> mathpy.matmul_plan_cache.info().plans
    0
    """

    def __init__(self, name, max_plans=64, max_bytes=1 << 30):
        self.name = name
        self._lock = threading.Lock()
        self._entries = collections.OrderedDict()
        self._planning = {}  # key -> threading.Event set when the thread planning it is done
        self._hits = self._misses = self._evictions = 0
        self.resize(max_plans, max_bytes)
        # Registered only once whole: a cache refused for its bounds must not stay in mathpy._memo's registry.
        _memo.register(self, name, "plans")

    def resize(self, max_plans=None, max_bytes=None):
        """Change the bounds (evicting as needed). ``max_plans=0`` disables caching."""
        if max_plans is not None and (not isinstance(max_plans, int) or max_plans < 0):
            raise ValueError(f"max_plans must be a non-negative int, not {max_plans!r}")
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 0):
            raise ValueError(f"max_bytes must be a non-negative int, not {max_bytes!r}")
        with self._lock:
            if max_plans is not None:
                self.max_plans = max_plans
            if max_bytes is not None:
                self.max_bytes = max_bytes
            idle = self._evict()
        _free_all(idle)

    def acquire(self, key, create=None):
        """Borrow the plan cached under ``key``: its :class:`Entry`, to be given back with :meth:`release`. On a miss,
        None when ``create`` is None; else ``create() -> (plan, workspace_bytes)`` makes it (outside the lock; one
        thread per key at a time). A plan whose workspace alone exceeds ``max_bytes`` (or any plan, when caching is
        off) is lent once and freed on release."""
        while True:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    self._hits += 1
                    entry.borrowers += 1
                    return entry
                if create is None:
                    return None
                waiting = self._planning.get(key)
                if waiting is None:
                    done = self._planning[key] = threading.Event()
                    break
            waiting.wait()  # another thread is planning this key: take its plan (or plan again if it failed)
        try:
            plan, nbytes = create()
        except BaseException:
            with self._lock:
                del self._planning[key]
            done.set()
            raise
        entry = Entry(plan, nbytes)
        entry.borrowers = 1
        with self._lock:
            del self._planning[key]
            self._misses += 1
            if self.max_plans and nbytes <= self.max_bytes:
                self._entries[key] = entry
                idle = self._evict(keep=key)
            else:
                entry.evicted, idle = True, []
        done.set()
        _free_all(idle)
        return entry

    def touch(self, key):
        """A hit without a borrow, for the stateless calls' prepared calls: the plan cached under ``key`` (None on a
        miss), counted as a hit and made the most recently used, under one lock instead of :meth:`acquire` and
        :meth:`release`'s two. Nothing keeps the plan from being evicted and freed by another thread afterwards, so
        only a caller that runs it under the plan's own lock (which the plan's ``free()`` takes) and plans again
        when it finds it freed there may use this."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return entry.plan

    def release(self, entry):
        """Give back a plan from :meth:`acquire` (freed now if it was evicted meanwhile and nobody else holds it)."""
        with self._lock:
            entry.borrowers -= 1
            free = entry.evicted and entry.borrowers == 0
        if free:
            entry.plan.free()

    @contextlib.contextmanager
    def borrow(self, key, create):
        """``with cache.borrow(key, create) as plan``: :meth:`acquire` and :meth:`release` around a block."""
        entry = self.acquire(key, create)
        try:
            yield entry.plan
        finally:
            self.release(entry)

    def _evict(self, keep=None):
        """Drop least recently used entries until the bounds hold; returns the idle ones to free (outside the lock)."""
        idle = []
        total = sum(e.nbytes for e in self._entries.values())
        for key in list(self._entries):
            if len(self._entries) <= self.max_plans and total <= self.max_bytes:
                break
            if key == keep:
                continue
            entry = self._entries.pop(key)
            total -= entry.nbytes
            self._evictions += 1
            entry.evicted = True
            logger.debug("%s plan cache: evicted %r", self.name, key)
            if entry.borrowers == 0:
                idle.append(entry)
        return idle

    def clear(self):
        """Free every cached plan that is not in use (those in use are freed when returned)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), collections.OrderedDict()
            for entry in entries:
                entry.evicted = True
            idle = [e for e in entries if e.borrowers == 0]
        _free_all(idle)

    def info(self):
        """The cache's state: a :class:`CacheInfo` (plans, workspace bytes, hits, misses, evictions, bounds)."""
        with self._lock:
            return CacheInfo(len(self._entries), sum(e.nbytes for e in self._entries.values()), self._hits,
                             self._misses, self._evictions, self.max_plans, self.max_bytes)

    def keys(self):
        """The keys of the cached plans, least recently used first."""
        with self._lock:
            return list(self._entries)


def _free_all(entries):
    for entry in entries:
        entry.plan.free()
