"""The seams other work plugs into: the array package interface, the engine table and the plan cache (one plan per
key however many threads miss it at once)."""

import threading
import time

import numpy as np
import pytest

import mathpy
from mathpy import _engines, _packages
from mathpy._plan_cache import PlanCache, PlanKey


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_host_package_allocation_and_copies(name):
    if name == "torch":
        pytest.importorskip("torch")
    package = _packages.get(name)
    queue = package.on(None)
    a = queue.empty((2, 3, 4), np.float32, order=(0, 2, 1))  # dense, the last two axes swapped in memory
    shape, strides, dtype, device_id, pointer = package.describe(a)
    assert tuple(shape) == (2, 3, 4) and tuple(strides) == (12, 1, 3) and dtype == np.float32 and device_id is None
    assert pointer == package.pointer(a) == package.facts(a)[1]
    make = queue.maker((5,), np.complex64, zero=True)
    first, second = make(), make()
    assert package.pointer(first) != package.pointer(second)  # a new array at every call
    assert np.all(package.as_numpy(first) == 0) and package.as_numpy(first).dtype == np.complex64
    source = package.from_host(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    queue.copy_into(a, source)
    queue.scale(a, np.float32(2))
    np.testing.assert_array_equal(package.as_numpy(a), 2 * np.arange(24, dtype=np.float32).reshape(2, 3, 4))


def test_use_replaces_a_package_for_a_block():
    class Marked(type(_packages.get("numpy"))):
        pass
    marked = Marked()
    real = _packages.get("numpy")
    with _packages.use(marked):
        assert _packages.get("numpy") is marked and _packages.interface_of(np.zeros(2)) is marked
        assert mathpy._operands.wrap_operand(np.zeros(2)).interface is marked
    assert _packages.get("numpy") is real and _packages.interface_of(np.zeros(2)) is real


def test_engine_table_is_replaceable_for_a_block():
    from mathpy.host.matmul._cpu import CPUEngine
    made = []

    class Counting(CPUEngine):
        def __init__(self, problem, **kwargs):
            made.append(problem)
            super().__init__(problem, **kwargs)

    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    with _engines.use("matmul", "cpu", Counting):
        np.testing.assert_allclose(mathpy.Matmul(a, a.T).plan() and mathpy.matmul(a, a.T, execution="cpu"), a @ a.T)
    assert made and _engines.get("matmul", "cpu") is CPUEngine


class Plan:
    def __init__(self):
        self.freed = False

    def free(self):
        self.freed = True


def test_threads_missing_one_key_plan_it_once():
    cache = PlanCache("test", max_plans=4)
    created, entries = [], []

    def create():
        created.append(1)
        time.sleep(0.05)  # planning takes long: the others arrive meanwhile
        return Plan(), 0

    def borrow():
        entries.append(cache.acquire("k", create))

    threads = [threading.Thread(target=borrow) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(created) == 1 and len({id(e.plan) for e in entries}) == 1
    info = cache.info()
    assert (info.misses, info.hits) == (1, 7)
    for entry in entries:
        cache.release(entry)
    assert not entries[0].plan.freed


def test_a_failed_plan_lets_the_next_thread_plan_again():
    cache = PlanCache("test")
    with pytest.raises(RuntimeError):
        cache.acquire("k", lambda: (_ for _ in ()).throw(RuntimeError("no plan")))
    entry = cache.acquire("k", lambda: (Plan(), 0))
    assert isinstance(entry.plan, Plan)
    cache.release(entry)


def test_evicted_while_borrowed_is_freed_on_release():
    cache = PlanCache("test", max_plans=1)
    first = cache.acquire("a", lambda: (Plan(), 0))
    cache.release(cache.acquire("b", lambda: (Plan(), 0)))  # evicts "a", which is still borrowed
    assert not first.plan.freed
    cache.release(first)
    assert first.plan.freed


def test_plan_keys_are_hashed_once_and_compare_by_parts():
    key = PlanKey(("fft", (8, 1024), None))
    assert key == PlanKey(("fft", (8, 1024), None)) and int(key) == hash(("fft", (8, 1024), None))
    assert key != PlanKey(("fft", (8, 1024), 1)) and key != hash(key)  # not equal to the bare int
    table = {key: 1}
    assert table[PlanKey(("fft", (8, 1024), None))] == 1
