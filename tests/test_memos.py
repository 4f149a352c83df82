"""mathpy's memos are bounded least-recently-used maps registered in one place (:mod:`mathpy._memo`): one call
reports each and one call empties them all, and the library works the same after they are emptied."""

import numpy as np

import mathpy
import mathpy.fft
from mathpy import _memo


def _entries():
    """``{"group/name": entries}`` (a plan cache's plans)."""
    return {name: getattr(info, "entries", getattr(info, "plans", None)) for name, info in _memo.info().items()}


def test_every_memo_of_a_call_is_registered_and_cleared():
    x, a = np.ones((4, 8), np.complex64), np.ones((8, 8), np.float32)
    expected = mathpy.fft.fft(x)
    product = mathpy.matmul(a, a)
    mathpy.fft.fft(x), mathpy.matmul(a, a)  # the remembered calls
    entries = _entries()
    for name in ("fft/plans", "fft/stateless", "fft/problems", "fft/stage-options", "matmul/plans",
                 "matmul/stateless-host"):
        assert entries.get(name, 0) > 0, (name, entries)
    _memo.clear()
    assert all(n == 0 for n in _entries().values()), _entries()
    np.testing.assert_array_equal(mathpy.fft.fft(x), expected)  # made again
    np.testing.assert_array_equal(mathpy.matmul(a, a), product)


def test_fft_plan_cache_clear_empties_the_fft_group_only():
    x, a = np.ones(16, np.complex128), np.ones((4, 4))
    mathpy.fft.fft(x), mathpy.matmul(a, a), mathpy.matmul(a, a)
    mathpy.fft.plan_cache_clear()
    entries = _entries()
    assert all(n == 0 for name, n in entries.items() if name.startswith("fft/")), entries
    assert entries["matmul/stateless-host"] > 0  # another API's memo stays


def test_memos_are_bounded():
    bounds = {name: getattr(info, "max_entries", getattr(info, "max_plans", None))
              for name, info in _memo.info().items()}
    assert bounds and all(bound is not None and bound > 0 for bound in bounds.values()), bounds
    memo = _memo.Memo("bounded", group="test", max_entries=3)
    try:
        for i in range(10):
            memo.put(i, i)
        assert len(memo) == 3 and memo.get(9) == 9 and memo.get(0) is None
    finally:
        _memo.unregister(memo)
