"""mathpy.device kernels on a real GPU against NumPy: every size, precision and transform type
(run on a GPU machine: ``pytest -m gpu tests/test_device_gpu.py``)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _device_checks import TOLERANCE

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
SIZES = [1 << e for e in range(1, 14)]  # 2 .. 8192


def _fft_cases():
    cases = []
    for n in SIZES:
        cases += [(n, "float32", t, d, {}) for t, d in
                  (("c2c", "forward"), ("c2c", "inverse"), ("r2c", None), ("c2r", None))]
        cases.append((n, "float64", "c2c", "forward", {}))
    for n in (8, 256, 4096):
        cases += [(n, "float64", "c2c", "inverse", {}), (n, "float64", "r2c", None, {}),
                  (n, "float64", "c2r", None, {})]
    # mixed-radix sizes
    for n in (3, 5, 6, 7, 12, 15, 48, 80, 96, 100, 343, 384, 1000, 1536, 2000, 3072):
        cases.append((n, "float32", "c2c", "forward", {}))
    for n in (7, 100, 1000):
        cases.append((n, "float64", "c2c", "inverse", {}))
    for n in (6, 15, 96, 1000):
        cases += [(n, "float32", "r2c", None, {}), (n, "float32", "c2r", None, {})]
    # non-default block configurations
    cases += [
        (256, "float32", "c2c", "forward", {"elements_per_thread": 4, "ffts_per_block": 3}),
        (256, "float32", "c2c", "inverse", {"elements_per_thread": 16, "ffts_per_block": 1}),
        (1024, "float32", "c2c", "forward", {"elements_per_thread": 8, "ffts_per_block": 2}),
        (4096, "float32", "c2c", "forward", {"elements_per_thread": 8}),
        (512, "float64", "r2c", None, {"elements_per_thread": 2, "ffts_per_block": 1}),
        (2048, "float32", "c2r", None, {"elements_per_thread": 4, "ffts_per_block": 1}),
        (32, "float32", "c2c", "forward", {"elements_per_thread": 2, "ffts_per_block": 32}),
    ]
    return cases


def _fft_id(c):
    return f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-{'-'.join(f'{k}={v}' for k, v in c[4].items())}"


def _supported(n, prec, kw):
    import mathpy.device as md

    try:
        md.fft(size=n, precision=prec, **kw)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("case", _fft_cases(), ids=_fft_id)
def test_block_fft_on_gpu(case):
    from _device_checks import run_fft_case

    n, prec, fft_type, direction, kw = case
    if not _supported(n, prec, kw):
        pytest.skip("configuration rejected by validation (shared memory)")
    err = run_fft_case(n, prec, fft_type, direction, batch=37, **kw)
    assert err < TOLERANCE[prec], err


CONV_CASES = [(n, prec, real) for n in (64, 256, 1024, 4096, 100) for prec in ("float32", "float64")
              for real in (False, True)]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'real' if c[2] else 'complex'}")
def test_fused_convolution_on_gpu(case):
    from _device_checks import run_convolution_case

    n, prec, real = case
    if not _supported(n, prec, {}):
        pytest.skip("configuration rejected by validation (shared memory)")
    assert run_convolution_case(n, prec, real, batch=37) < TOLERANCE[prec]


MATMUL_CASES = [
    (m, n, k, prec, k_total, mode, kw)
    for (m, n, k, k_total) in [(64, 64, 32, 64), (128, 128, 16, 128), (32, 32, 32, 96), (16, 48, 8, 24)]
    for prec in ("float32", "float16", "bfloat16", "float64")
    for mode, kw in [("registers", {"a_arrangement": "col_major"}), ("registers", {})]
] + [
    (32, 32, 16, prec, 16, "shared", {}) for prec in ("float32", "float16", "bfloat16", "float64")
] + [
    (64, 32, 16, "float32", 16, "shared", {"block_size": 128, "a_arrangement": "col_major"}),
    (24, 8, 4, "float64", 4, "shared", {"block_size": 12}),
] + [
    # fp16/bf16 above take the tensor cores (mma.sync) where the shape allows; the CUDA-core path of the same shapes:
    (m, n, k, prec, k_total, "registers", {"tensor_cores": False, "a_arrangement": arr})
    for (m, n, k, k_total) in [(64, 64, 32, 64), (32, 32, 32, 96)]
    for prec in ("float16", "bfloat16") for arr in ("row_major", "col_major")
] + [
    # tensor-core shapes: 3 warps over 48 x 40, 4 warps over 64 x 64, one warp, shared C, epilog-free alpha/beta
    (48, 40, 16, prec, 32, "registers", {"tensor_cores": True}) for prec in ("float16", "bfloat16")
] + [
    (64, 64, 64, prec, 128, "registers", {"tensor_cores": True, "block_size": 128, "a_arrangement": arr})
    for prec in ("float16", "bfloat16") for arr in ("row_major", "col_major")
] + [
    (16, 16, 16, "float16", 48, "registers", {"tensor_cores": True}),
    # operands whose rows are not 8-byte aligned: the element-wise copy path instead of 8-byte copies
    (32, 32, 16, "float16", 48, "registers", {"tensor_cores": True, "misaligned": True}),
    (32, 32, 16, "bfloat16", 32, "registers", {"tensor_cores": True, "misaligned": True, "a_arrangement": "col_major"}),
    (32, 32, 16, "float32", 32, "registers", {"misaligned": True}),
    (64, 32, 32, "bfloat16", 32, "shared", {"tensor_cores": True, "a_arrangement": "col_major"}),
] + [
    # fp64 tensor cores (mma.sync.m8n8k4.f64) and the double-buffered kernel (cp.async of the next k-slice during
    # the mma) for every engine; misaligned fp64 operands take the element-wise copies
    (m, n, k, prec, k_total, mode, kw)
    for (m, n, k, prec, k_total) in [(64, 64, 16, "float64", 64), (128, 128, 8, "float64", 128),
                                     (40, 24, 8, "float64", 24), (64, 64, 32, "float16", 64),
                                     (128, 128, 32, "bfloat16", 128), (128, 128, 16, "float32", 128)]
    for mode, kw in (("pipelined", {}), ("registers", {"a_arrangement": "col_major"}))
] + [
    (32, 32, 16, "float64", 48, "pipelined", {"misaligned": True}),
    # rings of k-slice buffers, over 48 KiB of shared memory (allow_shared_memory): 76 KiB for fp16, 222 KiB for fp64
    (128, 128, 32, "float16", 128, "multistage", {"stages": 4}),
    (128, 128, 16, "float64", 128, "multistage", {"stages": 6}),
    (64, 64, 16, "bfloat16", 160, "multistage", {"stages": 3}),
    (32, 32, 16, "float16", 80, "multistage", {"misaligned": True, "stages": 4}),
    # the persistent kernel: the ring of k-slices runs on across batch entries (2 blocks over 5 entries)
    (128, 128, 32, "float16", 128, "persistent", {"stages": 4}),
    (64, 64, 32, "bfloat16", 64, "persistent", {"stages": 4}),
    (64, 64, 16, "float64", 64, "persistent", {"stages": 4}),
    (64, 64, 16, "float32", 64, "persistent", {"stages": 4}),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-K{c[4]}-{c[5]}-{c[6]}")
def test_block_matmul_on_gpu(case):
    from _device_checks import run_matmul_case

    import mathpy.device as md

    m, n, k, prec, k_total, mode, kw = case
    if kw.get("tensor_cores"):
        assert md.matmul(m, n, k, prec, **{x: v for x, v in kw.items() if x != "misaligned"}).tensor_cores
    err = run_matmul_case(m, n, k, prec, k_total=k_total, mode=mode, batch=5, **kw)
    assert err < TOLERANCE[prec], err


def test_description_cached_kernels_are_reused_on_gpu():
    from _device_checks import fft_kernel

    import mathpy.device as md

    FFT = md.fft(size=128, precision=np.float32)
    assert FFT.execute is md.fft(size=128, precision=np.float32).execute
    fft_kernel(FFT)  # builds without error


@pytest.mark.parametrize("example", ["fused_fft_convolution.py", "gemm_custom_activation.py"])
def test_examples_on_gpu(example):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / example)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
