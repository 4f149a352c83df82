"""``python -m mathpy``, the README's first command: it reports the machine and runs both demonstrations."""

import os
import subprocess
import sys


def test_python_m_mathpy_reports_and_demonstrates():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    result = subprocess.run([sys.executable, "-m", "mathpy"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for section in ("== mathpy", "== GPU", "== CUDA libraries", "== packages", "== Demonstration on"):
        assert section in out, out
    assert "FFT 64 x 1024 complex64 with a Python epilog" in out or "FFT 256 x 4096" in out
    assert "RELU_BIAS epilog" in out
    errors = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines() if "max rel. error vs NumPy" in line]
    assert len(errors) == 2 and all(e < 1e-3 for e in errors), out
