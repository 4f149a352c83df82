"""A thread-safe LRU cache of plans behind the stateless calls, bounded by count and by workspace bytes.

A plan is any object with ``free()``. The stateless call borrows a plan with :meth:`PlanCache.borrow`: while borrowed it
is never freed, even if evicted meanwhile (it is freed when returned), so one thread's eviction cannot pull a plan from
under another thread's execution.

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
"""

import collections
import contextlib
import threading
from typing import NamedTuple

from ._log import logger

__all__ = ["PlanCache", "CacheInfo"]


class CacheInfo(NamedTuple):
    plans: int
    bytes: int
    hits: int
    misses: int
    evictions: int
    max_plans: int
    max_bytes: int


class _Entry:
    __slots__ = ("plan", "nbytes", "borrowers", "evicted")

    def __init__(self, plan, nbytes):
        self.plan, self.nbytes, self.borrowers, self.evicted = plan, nbytes, 0, False


class PlanCache:
    """LRU of plans keyed by everything that makes plans differ. ``max_bytes`` bounds the workspace held by cached plans."""

    def __init__(self, name, max_plans=64, max_bytes=1 << 30):
        self.name = name
        self._lock = threading.RLock()
        self._entries = collections.OrderedDict()
        self._hits = self._misses = self._evictions = 0
        self.resize(max_plans, max_bytes)

    def resize(self, max_plans=None, max_bytes=None):
        """Change the bounds (evicting as needed). ``max_plans=0`` disables caching."""
        with self._lock:
            if max_plans is not None:
                if not isinstance(max_plans, int) or max_plans < 0:
                    raise ValueError(f"max_plans must be a non-negative int, not {max_plans!r}")
                self.max_plans = max_plans
            if max_bytes is not None:
                if not isinstance(max_bytes, int) or max_bytes < 0:
                    raise ValueError(f"max_bytes must be a non-negative int, not {max_bytes!r}")
                self.max_bytes = max_bytes
            self._evict()

    @contextlib.contextmanager
    def borrow(self, key, create):
        """Yield the cached plan for ``key``, building it with ``create() -> (plan, workspace_bytes)`` on a miss.

        A plan whose workspace alone exceeds ``max_bytes`` (or any plan, when caching is off) is used once and freed."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                entry.borrowers += 1
        if entry is None:
            plan, nbytes = create()  # outside the lock: planning can take long (cuFFT JIT-links callbacks)
            entry = _Entry(plan, nbytes)
            entry.borrowers = 1
            with self._lock:
                self._misses += 1
                if self.max_plans and nbytes <= self.max_bytes and key not in self._entries:
                    self._entries[key] = entry
                    self._evict(keep=key)
                else:
                    entry.evicted = True
        try:
            yield entry.plan
        finally:
            with self._lock:
                entry.borrowers -= 1
                release = entry.evicted and entry.borrowers == 0
            if release:
                entry.plan.free()

    def _evict(self, keep=None):
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
                entry.plan.free()

    def clear(self):
        """Free every cached plan that is not in use (those in use are freed when returned)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), collections.OrderedDict()
            for entry in entries:
                entry.evicted = True
            idle = [e for e in entries if e.borrowers == 0]
        for entry in idle:
            entry.plan.free()

    def info(self):
        with self._lock:
            return CacheInfo(len(self._entries), sum(e.nbytes for e in self._entries.values()), self._hits,
                             self._misses, self._evictions, self.max_plans, self.max_bytes)

    def keys(self):
        with self._lock:
            return list(self._entries)
