"""mathpy's GPU code paths on a machine without a GPU, for measuring their host cost (``bench_overhead.py --dry-run``).

What runs is mathpy's real code down to the ctypes calls: the stateless memos, the plan caches, the prepared calls,
the real cuFFT and cuBLASLt engines. Only three things are stand-ins:

- the CUDA libraries: a small C library compiled here (``cc``) exports every cuFFT and cuBLASLt function mathpy
  declares, with the same C signatures; each returns success at once (the heuristic answers one algorithm without
  workspace). A ctypes call into it costs what a call into the real library costs to convert its arguments;
- the device: torch CPU tensors pose as tensors on cuda:0 (a :class:`~mathpy._packages.ArrayPackage` through the
  package seam), allocated with ``torch.empty_strided`` as on a GPU; the current stream is read through a C builtin,
  as torch's ``_cuda_getCurrentRawStream``;
- the driver queries of :mod:`mathpy._cuda` (one device of compute capability 9.0) and the runtime's device scope
  and stream synchronisation (:mod:`mathpy._runtime`: nothing to switch, nothing to wait for).

So a figure here is mathpy's own host cost plus a CPU allocation, without the kernel launch (about 2-4 us on an H200
for these small problems) and without CUDA's allocator: a ranking of code paths, not a GPU prediction. Use it in a
process of its own: library functions resolved inside the block stay bound to the stub library.
"""

import contextlib
import ctypes
import os
import subprocess
import tempfile

STUB_SOURCE = r"""
#include <stddef.h>
#include <string.h>
typedef struct { unsigned long long data[8]; } algo_t;
typedef struct { algo_t algo; size_t workspaceSize; int status; float wavesCount; int reserved[4]; } heuristic_t;
static long long next_handle = 16;
/* cuFFT */
int cufftCreate(int *h) { *h = (int)next_handle++; return 0; }
int cufftDestroy(int h) { return 0; }
int cufftSetAutoAllocation(int h, int a) { return 0; }
int cufftSetWorkArea(int h, void *w) { return 0; }
int cufftSetStream(int h, void *s) { return 0; }
int cufftGetSize(int h, size_t *w) { *w = 0; return 0; }
int cufftGetVersion(int *v) { *v = 12000; return 0; }
int cufftGetProperty(int t, int *v) { *v = 12; return 0; }
int cufftXtMakePlanMany(int h, int rank, long long *n, long long *inembed, long long istride, long long idist,
                        int itype, long long *onembed, long long ostride, long long odist, int otype,
                        long long batch, size_t *work, int etype) { *work = 0; return 0; }
int cufftXtExec(int h, void *i, void *o, int d) { return 0; }
int cufftXtSetJITCallback(int h, const char *s, const void *l, size_t n, int t, void **c) { return 0; }
/* cuBLASLt */
int cublasLtCreate(void **h) { *h = (void *)next_handle++; return 0; }
int cublasLtDestroy(void *h) { return 0; }
size_t cublasLtGetVersion(void) { return 130100; }
size_t cublasLtGetCudartVersion(void) { return 13000; }
int cublasLtMatmulDescCreate(void **d, int c, int s) { *d = (void *)next_handle++; return 0; }
int cublasLtMatmulDescDestroy(void *d) { return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int a, const void *b, size_t n) { return 0; }
int cublasLtMatmulDescGetAttribute(void *d, int a, void *b, size_t n, size_t *w) { memset(b, 0, n); *w = n; return 0; }
int cublasLtMatrixLayoutCreate(void **l, int t, unsigned long long r, unsigned long long c, long long ld)
    { *l = (void *)next_handle++; return 0; }
int cublasLtMatrixLayoutDestroy(void *l) { return 0; }
int cublasLtMatrixLayoutSetAttribute(void *l, int a, const void *b, size_t n) { return 0; }
int cublasLtMatrixLayoutGetAttribute(void *l, int a, void *b, size_t n, size_t *w)
    { memset(b, 0, n); *w = n; return 0; }
int cublasLtMatmulPreferenceCreate(void **p) { *p = (void *)next_handle++; return 0; }
int cublasLtMatmulPreferenceDestroy(void *p) { return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int a, const void *b, size_t n) { return 0; }
int cublasLtMatmulPreferenceGetAttribute(void *p, int a, void *b, size_t n, size_t *w)
    { memset(b, 0, n); *w = n; return 0; }
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *a, void *b, void *c, void *dd, void *p, int count,
                                   heuristic_t *results, int *returned)
    { memset(results, 0, sizeof(heuristic_t) * count); results[0].algo.data[0] = 1; results[0].wavesCount = 1.0f;
      *returned = 1; return 0; }
int cublasLtMatmulAlgoConfigGetAttribute(const algo_t *a, int attr, void *b, size_t n, size_t *w)
    { memset(b, 0, n); *w = n; return 0; }
int cublasLtMatmul(void *h, void *d, const void *alpha, const void *A, void *Ad, const void *B, void *Bd,
                   const void *beta, const void *C, void *Cd, void *D, void *Dd, const void *algo, void *ws,
                   size_t wss, void *stream) { return 0; }
"""


def stub_library(directory=None):
    """The stand-in CUDA library (compiled once per directory with ``cc``)."""
    directory = directory or os.path.join(tempfile.gettempdir(), f"mathpy-dry-run-{os.getuid()}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "libmathpy_stub.so")
    source = os.path.join(directory, "stub.c")
    if not (os.path.exists(path) and os.path.exists(source) and open(source).read() == STUB_SOURCE):
        with open(source, "w") as f:
            f.write(STUB_SOURCE)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", path, source], check=True)
    return ctypes.CDLL(path)


def posing_torch_package():
    """torch, with CPU tensors posing as tensors on cuda:0 and stream 0 always current."""
    import torch
    from mathpy._packages._torch import TorchPackage

    class PosingTorch(TorchPackage):
        def __init__(self):
            super().__init__()
            # a C builtin in place of torch._C._cuda_getCurrentRawStream: abs(0) is stream 0
            self.current_stream = self.raw_current_stream = abs

        def describe(self, tensor):
            shape, strides, dtype, _, pointer = super().describe(tensor)
            return shape, strides, dtype, 0, pointer

        def device(self, device_id):
            return torch.device("cpu")

        def stream_scope(self, device_id, stream):
            return contextlib.nullcontext()

        def _to_numpy(self, tensor, stream):
            return self.as_numpy(tensor).copy()

        def _from_numpy(self, host, device_id):
            import numpy as np
            return self.from_host(np.array(host))

        def _synchronize(self, stream):
            pass

    return PosingTorch()


@contextlib.contextmanager
def fake_device():
    """Within the block, mathpy sees one GPU (cc 9.0), torch CPU tensors as its arrays and the stub libraries."""
    from mathpy import _cuda, _packages, _runtime
    from mathpy.bindings import _loader

    library = stub_library()
    saved = {name: getattr(_cuda, name) for name in ("device_count", "is_available", "require_device",
                                                      "compute_capability")}
    saved_loader, saved_scope, saved_sync = _loader.load_library, _runtime.device_scope, _runtime.synchronize
    _runtime.device_scope = lambda device_id: contextlib.nullcontext()
    _runtime.synchronize = lambda stream: None
    _cuda.device_count = lambda: 1
    _cuda.is_available = lambda: True
    _cuda.require_device = lambda device_id=0: None
    _cuda.compute_capability = lambda device_id=0: (9, 0)
    _loader.load_library = lambda name, extra: library
    try:
        with _packages.use(posing_torch_package(), device_package_name="torch"):
            yield
    finally:
        _clear_caches()
        for name, value in saved.items():
            setattr(_cuda, name, value)
        _loader.load_library = saved_loader
        _runtime.device_scope, _runtime.synchronize = saved_scope, saved_sync


def _clear_caches():
    import mathpy.fft as mfft
    from mathpy.host.matmul import _stateless, matmul_plan_cache
    mfft.plan_cache_clear()
    matmul_plan_cache.clear()
    _stateless.forget()
