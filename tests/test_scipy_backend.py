"""mathpy.fft.scipy_backend keeps SciPy's backend contract: SciPy's own ``scipy/fft/tests`` pass with mathpy as the
global backend (SciPy's implementation registered behind it for what mathpy does not serve), including SciPy's
``workers`` rules; and SciPy's meaning of ``s`` without ``axes`` (the last axes).

SciPy's test files that exercise the functions mathpy serves are test_basic.py (fft ... irfftn, hfft, ihfft on every
dtype, argument and error), test_multithreading.py (``workers``) and test_backend.py (dispatch, ``plan=``, falling
back); test_real_transforms.py (dct/dst), test_fftlog.py (fht) and test_helper.py (next_fast_len, fftfreq, shifts)
call nothing mathpy serves. They run in a subprocess (SciPy's own conftest and fixtures) with the plugin
tests/_scipy_global_backend.py, which counts what mathpy served. Measured on a shared 2-core machine: all three files
in about 40 s, 20 s of which are SciPy's six process-pool and exhaustive-size tests (the ``slow`` sibling below).
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import mathpy.fft as mfft

scipy_fft = pytest.importorskip("scipy.fft")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCIPY = pathlib.Path(scipy_fft.__file__).resolve().parents[1]
FILES = ("test_basic.py", "test_multithreading.py", "test_backend.py")
# SciPy's tests that fork process pools or try every size up to 1000: together half of the run's time
SLOW = ("test_multiprocess", "test_mixed_threads_processes", "test_identity_extensive")


def run_scipy_tests(tmp_path, selection):
    """Run SciPy's own tests of FILES (``selection``: a -k expression) with mathpy as the global backend; returns
    (pytest's summary line, {"served": {function: calls}, "declined": {...}})."""
    tests = SCIPY / "fft" / "tests"
    if not all((tests / name).exists() for name in FILES):
        pytest.skip("this SciPy was installed without its tests")
    log = tmp_path / "calls.json"
    env = {**os.environ, "MATHPY_SCIPY_BACKEND_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "_scipy_global_backend", *(str(tests / name) for name in FILES),
         "-k", selection, "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={SCIPY}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    summary = (result.stdout.strip().splitlines() or [""])[-1]
    assert result.returncode == 0, f"SciPy's tests failed with mathpy as the backend:\n{result.stdout[-6000:]}"
    return summary, json.loads(log.read_text())


def test_scipys_own_tests_pass_with_mathpy_as_the_global_backend(tmp_path):
    summary, calls = run_scipy_tests(tmp_path, " and ".join(f"not {name}" for name in SLOW))
    assert "passed" in summary and "failed" not in summary, summary
    served = calls["served"]
    # every function mathpy serves did the work of SciPy's tests through mathpy, not through SciPy's fallback
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn",
                 "ifftn", "rfftn", "irfftn"):
        assert served.get(name, 0) >= 8, (name, calls)
    # what mathpy leaves to SciPy: the transforms it does not have, and plan= (test_backend_plan, one call each)
    assert set(calls["declined"]) <= {"hfft2", "ihfft2", "hfftn", "ihfftn", "dct", "idct", "dctn", "idctn", "dst",
                                      "idst", "dstn", "idstn", "fht", "ifht", *served}, calls["declined"]


@pytest.mark.slow
def test_scipys_process_pool_and_exhaustive_tests_with_mathpy(tmp_path):
    """SciPy's tests that use mathpy's backend after fork() in a process pool, and every length up to 1000."""
    summary, calls = run_scipy_tests(tmp_path, " or ".join(SLOW))
    assert "6 passed" in summary, summary
    assert calls["served"].get("fft", 0) >= 500  # the exhaustive identity test's lengths, through mathpy


# --- SciPy's rules, in this process ------------------------------------------------------------------------------------

@pytest.fixture
def backend():
    with scipy_fft.set_backend(mfft.scipy_backend, only=True):
        yield


def test_workers_zero_and_out_of_range_are_scipys_errors(backend):
    x, cpus = np.ones(8), os.cpu_count()
    with pytest.raises(ValueError, match="^workers must not be zero$"):
        scipy_fft.fft(x, workers=0)
    with pytest.raises(ValueError, match=f"^workers value out of range; got {-cpus - 1}, must not be less than "
                                         f"{-cpus}$"):
        scipy_fft.ifft(x, workers=-cpus - 1)
    np.testing.assert_allclose(scipy_fft.fft(x, workers=-cpus), np.fft.fft(x))  # -cpus: one worker, allowed


def test_workers_counts_reach_mathpy_as_scipy_counts_them(backend, monkeypatch):
    from mathpy.host.fft import _scipy_backend
    seen = []
    original = _scipy_backend._functions.fft

    def spy(*args, **kwargs):
        seen.append(kwargs["execution"].num_threads)
        return original(*args, **kwargs)

    monkeypatch.setattr(_scipy_backend._functions, "fft", spy)
    x, cpus = np.ones(8), os.cpu_count()
    scipy_fft.fft(x)                        # None: SciPy's default, 1
    scipy_fft.fft(x, workers=-1)            # all
    scipy_fft.fft(x, workers=2)
    with scipy_fft.set_workers(3):          # None inside set_workers: its count
        scipy_fft.fft(x)
    assert seen == [1, cpus, 2, 3]


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_s_without_axes_means_the_last_axes(backend, name):
    """SciPy (and NumPy before 2.0): ``s`` without ``axes`` sizes the last ``len(s)`` axes."""
    x = np.random.default_rng(1).standard_normal((4, 6))
    if name.startswith("i") and name != "ifftn":
        x = x + 1j
    got = getattr(scipy_fft, name)(x, s=(8,))
    expected = getattr(np.fft, name)(x, s=(8,), axes=(-1,))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-12)
