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


def test_the_public_clear_empties_every_memo_the_jit_ones_too():
    """mathpy.plan_cache_clear() reaches the callback compiler's memos as well (a CPU epilog fills several)."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)

    def shifted(value, row, col):
        return value + row

    expected = a @ a.T + np.arange(3, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(mathpy.matmul(a, a.T, epilog=shifted, execution="cpu"), expected)
    entries = _entries()
    for name in ("jit/function-keys", "jit/matmul-epilog-checks", "jit/cpu-dispatchers", "jit/cpu-pass-kernels"):
        assert entries.get(name, 0) > 0, (name, entries)
    mathpy.plan_cache_clear()
    assert all(n == 0 for n in _entries().values()), _entries()
    assert set(mathpy.plan_cache_info()) == set(_memo.info())
    np.testing.assert_array_equal(mathpy.matmul(a, a.T, epilog=shifted, execution="cpu"), expected)


#: The caches still cleared whole when full, each on a per-call path where a Memo's bookkeeping would cost more than
#: the lookup (their keys are streams or types, so they rarely fill): (module, the cache's expression).
CLEARED_WHOLE = {
    ("mathpy/_packages/__init__.py", "_by_type"): "the package of an operand's type, asked at every stateless call",
    ("mathpy/_packages/_torch.py", "self._wrappers"): "torch's stream objects for raw streams, per call",
    ("mathpy/_packages/_cupy.py", "self._wrappers"): "CuPy's stream objects for raw streams, per call",
    ("mathpy/_packages/_base.py", "self._streams"): "a package's PackageStream per stream, per call",
    ("mathpy/host/fft/_call.py", "self._makers"): "a prepared call's output allocator per stream",
    ("mathpy/host/matmul/_call.py", "self._makers"): "a prepared call's output allocator per stream",
}


def test_every_other_cache_is_a_memo():
    """A new ``if len(cache) > N: cache.clear()`` outside CLEARED_WHOLE fails: use a :class:`mathpy._memo.Memo`,
    which evicts the least recently used entries and is reached by plan_cache_clear() and plan_cache_info()."""
    import ast
    import pathlib

    root = pathlib.Path(mathpy.__file__).resolve().parent
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and isinstance(node.test.left, ast.Call) and getattr(node.test.left.func, "id", "") == "len"):
                continue
            cleared = [n.func.value for n in ast.walk(node) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Attribute) and n.func.attr == "clear"]
            if cleared:
                found.add((path.relative_to(root.parent).as_posix(), ast.unparse(cleared[0])))
    assert found == set(CLEARED_WHOLE), (sorted(found - set(CLEARED_WHOLE)), sorted(set(CLEARED_WHOLE) - found))
