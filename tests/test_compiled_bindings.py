"""The compiled entries of the hot library calls (mathpy.bindings._compiled): used only when nvmath-python's binding
resolved the very function mathpy loaded, and returning the C status as the ctypes function does."""

import ctypes
import types

import numpy as np
import pytest

from mathpy.bindings import _compiled

_LIBC = ctypes.CDLL(None)


def _c_function():
    function = _LIBC["labs"]  # any C function of this process: only its address is compared
    function.argtypes, function.restype = [ctypes.c_long], ctypes.c_long
    return function


class _Error(Exception):
    def __init__(self, status):
        super().__init__(f"status {status}")
        self.status = status


def _importer(pointer, calls, fail_with=None):
    """A stand-in for importlib.import_module serving nvmath.bindings.cublasLt and its _internal module."""
    def xt(*args):
        calls.append(args)
        if fail_with:
            raise _Error(fail_with)

    public = types.SimpleNamespace(matmul=xt, cuBLASLtError=_Error)
    internal = types.SimpleNamespace(_inspect_function_pointer=lambda name: pointer if name == "__cublasLtMatmul"
                                     else 0)
    modules = {"nvmath.bindings.cublasLt": public, "nvmath.bindings._internal.cublasLt": internal}

    def importer(name):
        if name not in modules:
            raise ImportError(name)
        return modules[name]
    return importer


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(_compiled, "_installed", lambda: True)
    monkeypatch.delenv("MATHPY_COMPILED_BINDINGS", raising=False)


def _address(function):
    return ctypes.cast(function, ctypes.c_void_p).value


def test_the_same_function_gets_the_compiled_entry_returning_statuses(installed):
    c_function, calls = _c_function(), []
    entry = _compiled.compiled_entry("cublasLt", "cublasLtMatmul", c_function,
                                     importer=_importer(_address(c_function), calls))
    assert entry is not None
    assert entry(*range(16)) == 0
    assert calls == [tuple(range(16))]
    failing = _compiled.compiled_entry("cublasLt", "cublasLtMatmul", c_function,
                                       importer=_importer(_address(c_function), calls, fail_with=7))
    assert failing(*range(16)) == 7  # the status, for the hot path's inline check


def test_another_copy_of_the_library_keeps_ctypes(installed):
    c_function = _c_function()
    other = _address(c_function) + 64
    assert _compiled.compiled_entry("cublasLt", "cublasLtMatmul", c_function, importer=_importer(other, [])) is None


@pytest.mark.parametrize("why", ["env", "not installed", "no entry", "import fails"])
def test_ctypes_stays_when_a_compiled_entry_cannot_be_used(monkeypatch, why):
    c_function = _c_function()
    importer = _importer(_address(c_function), [])
    monkeypatch.setattr(_compiled, "_installed", lambda: why != "not installed")
    if why == "env":
        monkeypatch.setenv("MATHPY_COMPILED_BINDINGS", "0")
    function = "cublasLtCreate" if why == "no entry" else "cublasLtMatmul"
    if why == "import fails":
        def importer(name):
            raise ImportError("libcuda.so.1: cannot open shared object file")
    assert _compiled.compiled_entry("cublasLt", function, c_function, importer=importer) is None


def test_every_entry_names_a_declared_function():
    from mathpy.bindings import cublaslt, cufft
    declared = {"cublasLt": cublaslt.library, "cufft": cufft.lib}
    for library, function in _compiled.ENTRIES:
        assert function in declared[library]._table, (library, function)


@pytest.mark.gpu
def test_engines_use_the_compiled_entries_when_nvmath_is_installed():
    pytest.importorskip("nvmath.bindings.cublasLt")
    import mathpy
    import mathpy.fft as mfft
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 32)).astype(np.float32)
    x = (rng.standard_normal((4, 256)) + 1j * rng.standard_normal((4, 256))).astype(np.complex64)
    with mathpy.Matmul(a, b, execution="cuda") as mm:
        mm.plan()
        assert getattr(mm.prepared_call.engine._matmul, "compiled", None) is not None
        d = mm.execute()
    # float32 on cuBLASLt (TF32 off by default): an error bound of k * eps * |a| |b|
    bound = 48 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(d - a @ b) <= 4 * bound)
    with mfft.FFT(x, axes=[1], execution="cuda") as f:
        f.plan()
        assert getattr(f.prepared_call.engine._exec, "compiled", None) is not None
        y = f.execute()
    scale = np.sqrt(np.log2(256)) * np.finfo(np.float32).eps * np.abs(x).sum(axis=1, keepdims=True)
    assert np.all(np.abs(y - np.fft.fft(x.astype(np.complex128), axis=1)) <= 8 * scale)
