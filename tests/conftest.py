"""Shared test fixtures.

``xp`` runs a test once per array package that is usable here: NumPy always, torch on the CPU when installed, and, on a
machine with a GPU, CuPy and torch on CUDA. Tests use ``xp.asarray`` / ``xp.to_numpy`` and assert the same things on
every package and execution space; GPU-only tests carry ``@pytest.mark.gpu`` and are skipped without a device.
"""

import gc
import importlib.util

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from mathpy import _cuda

from _hypothesis import THOROUGH

# Property-based tests: `default` keeps each test's small count (tests/_hypothesis.py); `thorough` runs THOROUGH
# (10,000) examples per public API per array package: pytest --hypothesis-profile=thorough
settings.register_profile("thorough", max_examples=THOROUGH, deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _has(module):
    return importlib.util.find_spec(module) is not None


class ArrayPackage:
    """How a test makes and reads arrays of one package on one device."""

    def __init__(self, name, device):
        self.name, self.device = name, device

    def __repr__(self):
        return f"{self.name}-{self.device}"

    @property
    def on_gpu(self):
        return self.device == "cuda"

    def asarray(self, array):
        array = np.asarray(array)
        if self.name == "numpy":
            return array
        if self.name == "cupy":
            import cupy
            return cupy.asarray(array)
        from mathpy._operands import asarray
        return asarray(array, "torch", 0 if self.on_gpu else None)

    def to_numpy(self, array):
        from mathpy._operands import to_host, wrap_operand
        op = wrap_operand(array)
        return op.numpy() if op.on_host else to_host(op, 0).tensor

    def is_native(self, array):
        """Whether ``array`` is of this package and on this device."""
        from mathpy._operands import wrap_operand
        op = wrap_operand(array)
        return op.package == self.name and (op.device_id is not None) == self.on_gpu


def _packages():
    packages = [pytest.param(ArrayPackage("numpy", "cpu"), id="numpy")]
    if _has("torch"):
        packages.append(pytest.param(ArrayPackage("torch", "cpu"), id="torch-cpu"))
    gpu = pytest.mark.gpu
    if _has("cupy"):
        packages.append(pytest.param(ArrayPackage("cupy", "cuda"), id="cupy", marks=gpu))
    if _has("torch"):
        packages.append(pytest.param(ArrayPackage("torch", "cuda"), id="torch-cuda", marks=gpu))
    return packages


@pytest.fixture(params=_packages())
def xp(request):
    return request.param


def pytest_addoption(parser):
    parser.addoption("--run-long", action="store_true",
                     help="also run the tests marked `long` (each over a minute on a 2-core machine; every one has a "
                          "faster sibling that always runs)")


def pytest_collection_modifyitems(config, items):
    # `long` tests are skipped unless asked for (or selected by name with -m long), so that the README's `pytest` stays
    # well inside CI's time on a 2-core machine.
    if not (config.getoption("--run-long") or "long" in (config.getoption("-m") or "")):
        skip_long = pytest.mark.skip(reason="over a minute on a 2-core machine: run with --run-long")
        for item in items:
            if "long" in item.keywords:
                item.add_marker(skip_long)
    if _cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap():
    """Each test module starts with the objects earlier ones left alive moved out of the collector's sight
    (``gc.freeze``), after one collection of their garbage. The tests that call ``gc.collect()`` to see a plan or a
    workspace released then scan only their own module's objects: after the simulator and compiler tests the whole
    heap holds millions of objects, and a full collection took seconds (the fault-injection tests, three collections
    each, took most of 8 minutes of CI)."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _isolated_jit_cache(tmp_path_factory, monkeypatch):
    """Compiled callbacks go to a per-session folder, so tests never read a developer's cache."""
    monkeypatch.setenv("MATHPY_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mathpy-cache"))
