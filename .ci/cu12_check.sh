#!/usr/bin/env bash
# The CUDA 12 stack without a GPU: a fresh venv with the `cu12` extra (cuBLAS 12.x, cuFFT 11.x, nvJitLink 12.x,
# numba-cuda[cu12]), then the tests that load those libraries and compile/link callbacks without a device:
# cuBLASLt descriptors and engine planning, cuFFT's symbols (cuFFT 11.x exports the JIT-callback setter as
# __cufftXtSetJITCallback_12_7), LTO-IR from NVVM 12.x linked by nvJitLink 12.x, the callback wrapper on the host.
# Downloads about 1 GB. On a GPU machine whose driver runs CUDA 12, add `-m gpu` runs of the GPU tests to it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(mktemp -d)/cu12"
python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
pip install -q -e ".[cu12]" pytest hypothesis
python - <<'PY'
from mathpy.bindings import cufft, cublaslt
print("cuFFT", cufft.version(), "JIT callback symbol (12.x form):", cufft.lib.has("cufftXtSetJITCallback_12_7"))
print("cuBLASLt", cublaslt.version())
PY
pip list 2>/dev/null | grep -iE "^(nvidia|numba|cuda-bindings)"
pytest -q -o addopts=-ra tests/test_matmul_cuda.py tests/test_fft_cuda_mocked.py tests/test_jit.py \
    tests/test_jit_inlining.py tests/test_jit_wrapper_cpu.py tests/test_cufft_emulated.py tests/test_faults.py \
    tests/test_foundation.py
