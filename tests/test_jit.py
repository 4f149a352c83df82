"""mathpy.jit: compiling prolog/epilog callbacks to LTO-IR without a GPU (cc given), errors, and the compile cache."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mathpy
from mathpy import jit
from mathpy.jit import _compile

CC = (9, 0)
MANGLED = {
    ("prolog", "complex64"): "_Z27cufftJITCallbackLoadComplexPvyS_S_",
    ("prolog", "complex128"): "_Z33cufftJITCallbackLoadDoubleComplexPvyS_S_",
    ("prolog", "float32"): "_Z24cufftJITCallbackLoadRealPvyS_S_",
    ("prolog", "float64"): "_Z30cufftJITCallbackLoadDoubleRealPvyS_S_",
    ("epilog", "complex64"): "_Z28cufftJITCallbackStoreComplexPvy6float2S_S_",
    ("epilog", "complex128"): "_Z34cufftJITCallbackStoreDoubleComplexPvy7double2S_S_",
    ("epilog", "float32"): "_Z25cufftJITCallbackStoreRealPvyfS_S_",
    ("epilog", "float64"): "_Z31cufftJITCallbackStoreDoubleRealPvydS_S_",
}
TYPES = {("prolog", "complex64"): 0, ("prolog", "complex128"): 1, ("prolog", "float32"): 2, ("prolog", "float64"): 3,
         ("epilog", "complex64"): 4, ("epilog", "complex128"): 5, ("epilog", "float32"): 6, ("epilog", "float64"): 7}


def prolog_scale(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % 4]


def epilog_scale(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % 4]


def prolog_plain(data_in, offset, user_info, unused):
    return data_in[offset]


@pytest.mark.parametrize("element", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("kind", ["prolog", "epilog"])
def test_compile_every_element_type(kind, element):
    fn = prolog_scale if kind == "prolog" else epilog_scale
    result = jit.compile_callback(fn, kind, element, element, CC)
    assert isinstance(result.ltoir, bytes) and len(result.ltoir) > 100
    assert result.symbol is None
    assert result.mangled_name == MANGLED[(kind, element)]
    assert result.cufft_callback_type == TYPES[(kind, element)] == jit.CALLBACK_TYPES[(kind, element)]
    assert (result.kind, result.element_dtype, result.user_info_dtype) == (kind, element, element)
    assert result.compute_capability == CC
    assert "prolog_scale" in result.function_name or "epilog_scale" in result.function_name
    public = jit.compile_prolog if kind == "prolog" else jit.compile_epilog
    assert public(fn, np.dtype(element), element, compute_capability=CC) == result.ltoir


@pytest.mark.parametrize("user", [None, "void", "int32", "uint8", "float16", "float64", "complex64", "bool"])
def test_user_info_dtypes(user):
    """Each user-data dtype compiles for the GPU. That such callbacks compute the right thing is checked by running
    them: tests/test_jit_wrapper_cpu.py (the GPU code on the host) and tests/test_fft_callback_semantics.py (through
    the FFT API on every package, cuFFT with -m gpu)."""
    if user in (None, "void"):
        ltoir = jit.compile_prolog(prolog_plain, "complex64", user, compute_capability=CC)
    else:
        def prolog(data_in, offset, user_info, unused):
            return data_in[offset] * np.float32(user_info[offset % 3])
        if user == "complex64":
            def prolog(data_in, offset, user_info, unused):  # noqa: F811
                return data_in[offset] * user_info[offset % 3]
        ltoir = jit.compile_prolog(prolog, "complex64", user, compute_capability=CC)
    assert len(ltoir) > 100


def test_no_gpu_needs_explicit_cc(monkeypatch):
    monkeypatch.setattr(mathpy._cuda, "is_available", lambda: False)
    with pytest.raises(mathpy._errors.NoDeviceError, match="compute_capability"):
        jit.compile_prolog(prolog_plain, "complex64")


# --- errors -------------------------------------------------------------------------------------------------------

def test_wrong_arity_names_function():
    def bad(data_in, offset, user_info):
        return data_in[offset]
    with pytest.raises(TypeError, match=r"bad .*test_jit.py:\d+.*4 positional"):
        jit.compile_prolog(bad, "complex64", compute_capability=CC)
    with pytest.raises(TypeError, match="5 positional"):
        jit.compile_epilog(prolog_plain, "complex64", compute_capability=CC)


def test_prolog_returning_nothing():
    def forgets(data_in, offset, user_info, unused):
        data_in[offset]
    with pytest.raises(TypeError, match=r"forgets .*returns nothing"):
        jit.compile_prolog(forgets, "complex64", compute_capability=CC)


def test_epilog_returning_value():
    def returns(data_out, offset, value, user_info, unused):
        return value
    with pytest.raises(TypeError, match="returns a value"):
        jit.compile_epilog(returns, "complex64", compute_capability=CC)


@pytest.mark.parametrize("element", ["int32", "float16", "complex256", "not-a-dtype"])
def test_unsupported_element_dtype(element):
    with pytest.raises(ValueError, match="element_dtype"):
        jit.compile_prolog(prolog_plain, element, compute_capability=CC)


@pytest.mark.parametrize("user", ["object", "U3", "datetime64[s]"])
def test_unsupported_user_dtype(user):
    with pytest.raises(ValueError, match="user_info_dtype"):
        jit.compile_prolog(prolog_plain, "complex64", user, compute_capability=CC)


def test_numba_typing_error_is_callback_compile_error():
    def uses_missing_user_data(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset]
    with pytest.raises(mathpy._errors.CallbackCompileError, match=r"uses_missing_user_data .*test_jit.py:\d+") as e:
        jit.compile_prolog(uses_missing_user_data, "complex64", None, compute_capability=CC)
    assert isinstance(e.value, TypeError)


def test_user_info_is_read_only():
    def writes_user_data(data_out, offset, value, user_info, unused):
        user_info[offset] = np.float32(0)
        data_out[offset] = value
    with pytest.raises(mathpy._errors.CallbackCompileError, match="read-only"):
        jit.compile_epilog(writes_user_data, "complex64", "float32", compute_capability=CC)


# --- cache --------------------------------------------------------------------------------------------------------

@pytest.fixture
def count_builds(monkeypatch):
    calls = []
    real = _compile._build

    def counting(*args):
        calls.append(args[0].__name__)
        return real(*args)
    monkeypatch.setattr(_compile, "_build", counting)
    return calls


def _scaled(factor):
    def prolog(data_in, offset, user_info, unused):
        return data_in[offset] * factor
    return prolog


def test_closure_value_is_part_of_the_key(count_builds):
    a = jit.compile_callback(_scaled(np.float32(3)), "prolog", "complex64", None, CC)
    b = jit.compile_callback(_scaled(np.float32(3)), "prolog", "complex64", None, CC)
    c = jit.compile_callback(_scaled(np.float32(4)), "prolog", "complex64", None, CC)
    assert a.key == b.key != c.key
    assert a is b  # in-memory hit
    assert count_builds.count("prolog") <= 2


def _module_with_global(tmp_path, name, value):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f"""
        import numpy as np
        SCALE = np.float32({value})
        def prolog(data_in, offset, user_info, unused):
            return data_in[offset] * SCALE
    """))
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def test_changed_global_misses(tmp_path, count_builds):
    ns = _module_with_global(tmp_path, "globals_mod", 2)
    first = jit.compile_callback(ns["prolog"], "prolog", "complex64", None, CC)
    again = jit.compile_callback(ns["prolog"], "prolog", "complex64", None, CC)
    ns["SCALE"] = np.float32(5)
    changed = jit.compile_callback(ns["prolog"], "prolog", "complex64", None, CC)
    assert first.key == again.key != changed.key
    assert first.ltoir != changed.ltoir
    ns["SCALE"] = np.float32(2)
    assert jit.compile_callback(ns["prolog"], "prolog", "complex64", None, CC).key == first.key


def test_types_and_cc_are_part_of_the_key():
    keys = {jit.compile_callback(prolog_scale, "prolog", e, u, cc).key
            for e, u, cc in [("complex64", "complex64", CC), ("complex64", "float32", CC),
                             ("complex128", "complex64", CC), ("complex64", "complex64", (8, 0))]}
    assert len(keys) == 4


def test_corrupted_entry_is_ignored(count_builds, tmp_path, monkeypatch):
    monkeypatch.setenv("MATHPY_CACHE_DIR", str(tmp_path / "cache"))
    fn = _scaled(np.float32(7.5))
    first = jit.compile_callback(fn, "prolog", "complex64", None, CC)
    path = tmp_path / "cache" / first.key[:2] / (first.key + ".ltoir")
    assert path.exists()
    _compile._memory.clear()
    path.write_bytes(path.read_bytes()[:-10] + b"garbage!!!")
    builds = len(count_builds)
    second = jit.compile_callback(fn, "prolog", "complex64", None, CC)
    assert len(count_builds) == builds + 1 and second.ltoir == first.ltoir
    _compile._memory.clear()
    path.write_bytes(b"")
    assert jit.compile_callback(fn, "prolog", "complex64", None, CC).ltoir == first.ltoir
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


class _Opaque:
    pass


def _uncacheable_prolog():
    """A prolog whose globals hold a value the fingerprint cannot represent (``float32`` is read as an attribute
    name of ``np`` by the code, and is an opaque object in its globals): numba compiles it, the key cannot be made."""
    namespace = {"np": np, "float32": _Opaque()}
    exec("def prolog(data_in, offset, user_info, unused):\n    return data_in[offset] * np.float32(2)", namespace)
    return namespace["prolog"]


def test_uncacheable_function_compiles_once_per_process(count_builds):
    fn = _uncacheable_prolog()
    first = jit.compile_callback(fn, "prolog", "complex64", None, CC)
    second = jit.compile_callback(fn, "prolog", "complex64", None, CC)
    assert first.key is None and first is second and len(count_builds) == 1


def test_key_is_reused_while_what_it_read_is_unchanged(tmp_path):
    """function_key hashes a function once and then only checks its snapshot; a rebound global, a changed closure
    cell or an array changed in place make it hash again (and the key follows the values)."""
    from mathpy.jit._cache import function_key
    spec = jit._spec.make_spec("prolog", "complex64", None, CC)
    ns = _module_with_global(tmp_path, "snapshot_mod", 2)
    key, snapshot = function_key(ns["prolog"], spec)
    again, same_snapshot = function_key(ns["prolog"], spec)
    assert again == key and same_snapshot is snapshot and snapshot.valid()
    ns["SCALE"] = np.float32(3)
    assert not snapshot.valid()
    changed, new_snapshot = function_key(ns["prolog"], spec)
    assert changed != key and new_snapshot is not snapshot
    table = np.arange(4, dtype=np.float32)

    def reads_table(data_in, offset, user_info, unused):
        return data_in[offset] * table[0]
    key, snapshot = function_key(reads_table, spec)
    table[0] = 7  # the same array object, new contents: numba would freeze the new value
    assert not snapshot.valid() and function_key(reads_table, spec)[0] != key
    assert function_key(_uncacheable_prolog(), spec) == (None, None)


def test_fingerprint_rejects_opaque_values():
    class Opaque:
        pass
    opaque = Opaque()

    def fn(data_in, offset, user_info, unused):
        return data_in[offset] if opaque else data_in[offset]
    spec = jit._spec.make_spec("prolog", "complex64", None, CC)
    with pytest.raises(jit._cache.Uncacheable):
        jit._cache.callback_key(fn, spec)


_SCRIPT = """
import sys, time
import numpy as np
sys.path.insert(0, {root!r})
import mathpy.jit as jit
from callback_mod import epilog
start = time.perf_counter()
result = jit.compile_callback(epilog, "epilog", "complex64", "complex64", (9, 0))
elapsed = time.perf_counter() - start
print(result.key, int("numba.cuda.compiler" in sys.modules), elapsed)
"""


def test_disk_cache_hit_in_new_process(tmp_path):
    (tmp_path / "callback_mod.py").write_text(textwrap.dedent("""
        import numpy as np
        def epilog(data_out, offset, value, user_info, unused):
            data_out[offset] = value * user_info[offset] * np.float32(2)
    """))
    script = tmp_path / "run.py"
    root = os.path.dirname(os.path.dirname(mathpy.__file__))
    script.write_text(_SCRIPT.format(root=root))
    env = dict(os.environ, MATHPY_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True,
                           cwd=tmp_path).stdout.split() for _ in range(2)]
    (key1, imported1, _), (key2, imported2, seconds) = runs
    assert key1 == key2
    assert imported1 == "1"  # the cold run compiled with numba-cuda
    assert imported2 == "0"  # the warm run did not even import it
    assert float(seconds) < 0.05  # about 1 ms; generous for a loaded CI machine


@pytest.mark.parametrize("cc", [(4, 0), (9,), "x", "9", 90])
def test_bad_compute_capability(cc):
    with pytest.raises(ValueError, match="compute_capability"):
        jit.compile_prolog(prolog_plain, "complex64", compute_capability=cc)


def test_compute_capability_strings():
    assert jit.compile_callback(prolog_plain, "prolog", "complex64", None, "90").compute_capability == (9, 0)
    assert jit.compile_callback(prolog_plain, "prolog", "complex64", None, "10.0").compute_capability == (10, 0)


def test_compile_time_is_logged(caplog):
    import logging
    with caplog.at_level(logging.DEBUG, logger="mathpy"):
        jit.compile_callback(_scaled(np.float32(11)), "prolog", "complex64", None, CC)
    assert any("compiled prolog" in r.getMessage() and " ms" in r.getMessage() for r in caplog.records)
