"""mathpy.device kernels run under numba's CUDA simulator against NumPy (no GPU needed).

The simulator must be switched on before numba is imported, so every run happens in a subprocess with
NUMBA_ENABLE_CUDASIM=1; nothing of it leaks into the other tests of this session."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _device_checks import SIM_CONV_CASES, SIM_FFT_CASES, SIM_MATMUL_CASES, TOLERANCE

ROOT = Path(__file__).resolve().parents[1]


def _sim_env():
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(args, timeout=300):
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=_sim_env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def sim_results():
    out = _run([str(ROOT / "tests" / "_device_checks.py"), "all"])
    results = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["case"]] = r
    return results


def _fft_id(case):
    size, prec, fft_type, direction, kw = case
    return f"fft-{size}-{prec}-{fft_type}-{direction}-{kw}"


def _matmul_id(case):
    m, n, k, prec, k_total, mode, kw = case
    return f"matmul-{m}x{n}x{k}-{prec}-{k_total}-{mode}-{kw}"


@pytest.mark.parametrize("case", SIM_FFT_CASES, ids=_fft_id)
def test_block_fft_matches_numpy_in_simulator(sim_results, case):
    r = sim_results[_fft_id(case)]
    assert r["error"] < TOLERANCE[r["precision"]], r


@pytest.mark.parametrize("case", SIM_CONV_CASES, ids=lambda c: f"conv-{c[0]}-{c[1]}-{'real' if c[2] else 'complex'}")
def test_fused_convolution_matches_numpy_in_simulator(sim_results, case):
    size, prec, real = case
    r = sim_results[f"conv-{size}-{prec}-{'real' if real else 'complex'}"]
    assert r["error"] < TOLERANCE[prec], r


@pytest.mark.parametrize("case", SIM_MATMUL_CASES, ids=_matmul_id)
def test_block_matmul_matches_numpy_in_simulator(sim_results, case):
    r = sim_results[_matmul_id(case)]
    assert r["error"] < TOLERANCE[r["precision"]], r


@pytest.mark.parametrize("example", ["fused_fft_convolution.py", "gemm_custom_activation.py"])
def test_example_runs_in_simulator(example):
    out = _run([str(ROOT / "examples" / example), "--small"])
    assert "OK" in out, out


def test_simulator_does_not_leak_into_this_process():
    from numba import config

    assert not config.ENABLE_CUDASIM
