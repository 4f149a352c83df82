"""Asking for CUDA execution on a machine without a GPU is a NoDeviceError that says what to do, whatever array
packages are installed: the device is required before a GPU array package is looked for (run in a fresh process with
CuPy and torch hidden and CUDA disabled, as on a bare CPU machine)."""

import os
import subprocess
import sys

import mathpy

_SCRIPT = r"""
import sys
sys.modules["cupy"] = None   # neither GPU array package is importable
sys.modules["torch"] = None
import numpy as np
import mathpy
import mathpy.fft

x = np.ones((4, 8), np.float32)


def in_scope():
    with mathpy.execution_space("cuda"):
        mathpy.fft.fft(x)


calls = {
    "matmul": lambda: mathpy.matmul(x, x.T, execution="cuda"),
    "Matmul": lambda: mathpy.Matmul(x, x.T, execution="cuda"),
    "matmul_epilog": lambda: mathpy.matmul(x, x.T, epilog="relu", execution={"name": "cuda", "device_id": 0}),
    "fft": lambda: mathpy.fft.fft(x, execution="cuda"),
    "rfftn_4_axes": lambda: mathpy.fft.rfftn(np.ones((2, 2, 2, 2)), execution="cuda"),
    "irfft": lambda: mathpy.fft.irfft(x.astype(np.complex64), execution="cuda"),
    "FFT": lambda: mathpy.fft.FFT(x, execution="cuda"),
    "execution_space": in_scope,
}
for name, call in calls.items():
    try:
        call()
        print(name, "no error")
    except mathpy.NoDeviceError as e:
        print(name, "NoDeviceError", "GPU" in str(e) and "execution='cpu'" in str(e))
    except Exception as e:
        print(name, type(e).__name__, e)
"""


def test_cuda_execution_without_a_gpu_is_a_no_device_error():
    root = os.path.dirname(os.path.dirname(mathpy.__file__))
    env = dict(os.environ, MATHPY_DISABLE_CUDA="1", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True,
                         cwd=root).stdout
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert len(lines) == 8 and all(result == "NoDeviceError True" for result in lines.values()), out
