"""Which engine each host API runs on each execution space: one table, and the seam to replace an engine for a block
of code (a stand-in GPU engine on a CPU-only machine in the tests, or a plug-in such as a distributed engine).

Engines are named by import path and imported on first use, so the table costs nothing at ``import mathpy``.

>>> get("fft", "cpu").__name__
'CPUEngine'
"""

import contextlib
import importlib

__all__ = ["get", "use"]

_TABLE = {
    ("fft", "cpu"): "mathpy.host.fft._cpu:CPUEngine",
    ("fft", "cuda"): "mathpy.host.fft._cufft:CUFFTEngine",
    ("matmul", "cpu"): "mathpy.host.matmul._cpu:CPUEngine",
    ("matmul", "cuda"): "mathpy.host.matmul._cublaslt:CublasLtEngine",
    # a Python epilog fused into mathpy's own GEMM kernels (issue 14)
    ("matmul-fused", "cpu"): "mathpy.host.matmul._fused:FusedCPUEngine",
    ("matmul-fused", "cuda"): "mathpy.host.matmul._fused_cuda:FusedCUDAEngine",
    # the elementwise pass of a Python epilog over a D that cuBLASLt computed (issue 24)
    ("matmul-epilog-pass", "cuda"): "mathpy.host.matmul._fused_cuda:EpilogPass",
}
_resolved = {}


def get(api, space):
    """The engine class (or factory) of ``api`` ("fft", "matmul") on execution space ``space`` ("cpu", "cuda")."""
    found = _resolved.get((api, space))
    if found is None:
        module, _, name = _TABLE[(api, space)].partition(":")
        found = _resolved[(api, space)] = getattr(importlib.import_module(module), name)
    return found


@contextlib.contextmanager
def use(api, space, engine):
    """Run ``api`` on ``space`` with ``engine`` (a class or factory taking the real engine's arguments) in the
    block; the previous one is restored on exit."""
    key = (api, space)
    saved = _resolved.get(key)
    _resolved[key] = engine
    try:
        yield engine
    finally:
        if saved is None:
            _resolved.pop(key, None)
        else:
            _resolved[key] = saved
