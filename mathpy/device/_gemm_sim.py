"""The generic fused-epilog GEMM kernel of :mod:`._gemm_kernel` under numba's CUDA simulator, against NumPy.

The kernel takes raw addresses (uint64) and reads / writes elements through intrinsics; here those intrinsics are
Python functions on host memory (``ctypes``), so the simulator runs the very same generated kernel source: tiling,
bounds checks, strides, batch indexing, alpha/beta with C, the epilog's coordinates and data indexing, rounding to
the result's dtype. (The Hopper kernel's TMA / wgmma / mbarrier instructions have no simulator; its PTX is checked
statically by the tests and its results on the GPU.)

Run: ``NUMBA_ENABLE_CUDASIM=1 python -m mathpy.device._gemm_sim`` prints one JSON line per case of
:data:`SIM_FUSED_CASES` (tests/test_matmul_fused.py does this in a subprocess).
"""

import ctypes
import json
import sys
import time

import numpy as np

from .._compat import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

__all__ = ["simulator_namespace", "run_fused_case", "SIM_FUSED_CASES", "bf16_round"]

_NP = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
       "float64": np.dtype(np.float64), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
       "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "uint8": np.dtype(np.uint8), "bool": np.dtype(bool)}


def _read(address, dtype):
    return np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(int(address)), dtype)[0]


def _write(address, dtype, value):
    np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(int(address)), dtype)[0] = value


def _widen(raw, kind):
    if kind == "bfloat16":
        return np.array([int(raw) << 16], np.uint32).view(np.float32)[0]
    if kind == "float16":
        return np.float32(raw)
    return raw


def bf16_round(value):
    """float32 -> bf16 bits, round to nearest even (NaN kept a NaN)."""
    u = int(np.array([value], np.float32).view(np.uint32)[0])
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return np.uint16((u >> 16) | 0x40)
    return np.uint16(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)


class _DataView:
    """The kernel-side ``data`` (``MAKE_DATA``) on host memory: strided element reads, 16-bit floats widened."""

    def __init__(self, kind, ptr, strides):
        self.kind, self.ptr, self.strides, self.dtype = kind, int(ptr), strides, _NP[kind]

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        offset = sum(int(i) * int(t) for i, t in zip(index, self.strides))
        return _widen(_read(self.ptr + offset * self.dtype.itemsize, self.dtype), self.kind)


def simulator_namespace(storage_kind, out_kind, data_kind=None):
    """Python implementations of the generic kernel's address intrinsics (LOAD_S, LOAD_C, STORE_ONE, MAKE_DATA)."""
    storage, out = _NP[storage_kind], _NP[out_kind]

    def load_s(address):
        return _read(address, storage)

    def load_c(row_address, col):
        return _widen(_read(int(row_address) + int(col) * out.itemsize, out), out_kind)

    def store_one(row_address, col, value):
        address = int(row_address) + int(col) * out.itemsize
        if out_kind == "bfloat16":
            _write(address, out, bf16_round(value))
        else:
            _write(address, out, out.type(value))

    def make_data(ptr, s0, s1, s2, t0, t1, t2):
        return _DataView(data_kind, ptr, (t0, t1, t2))

    return {"LOAD_S": load_s, "LOAD_C": load_c, "STORE_ONE": store_one, "MAKE_DATA": make_data}


def _to_storage(x, kind):
    if kind == "bfloat16":
        u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(_NP[kind])


def _from_storage(x, kind):
    if kind == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _epilog_value(value, row, col, data):
    return value * data[row, col] + np.float32(row) - np.float32(0.5) * np.float32(col)


def _epilog_row(value, row, col, data):
    return min(max(value * data[row], np.float32(-2)), np.float32(2))


def _epilog_batch(value, batch, row, col, data):
    return value + np.float32(0.25) * data[batch, row, col] - np.float32(batch)


def _epilog_none(value, row, col, data):
    return value * np.float32(2) + np.float32(col)


_EPILOGS = {"value": (_epilog_value, 2), "row": (_epilog_row, 1), "batch": (_epilog_batch, 3),
            "none": (_epilog_none, None)}


def run_fused_case(m, n, k, precision, out, batch, epilog, layout, with_c, seed=0):
    """One generic-kernel case under the simulator; returns the max error relative to the largest reference value.
    ``layout``: "nn" (row-major A and B), "tn" (A column-major), "nt" (B column-major), "bcast" (one B for every
    batch entry)."""

    from . import _gemm_build
    from . import _gemm_kernel as K
    from ._matmul import matmul as block_matmul

    fn, data_ndim = _EPILOGS[epilog]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k))
    b = rng.standard_normal((1 if layout == "bcast" else batch, k, n))
    c = rng.standard_normal((batch, m, n)) if with_c else None
    alpha, beta = (0.75, -0.5) if with_c else (1.25, 0.0)
    sa, sb = _to_storage(a, precision), _to_storage(b, precision)
    if layout == "tn":  # A column-major in memory
        sa = np.ascontiguousarray(sa.transpose(0, 2, 1)).transpose(0, 2, 1)
    if layout == "nt":
        sb = np.ascontiguousarray(sb.transpose(0, 2, 1)).transpose(0, 2, 1)
    sc = _to_storage(c, out) if with_c else None
    data = None
    if data_ndim == 2:
        data = rng.standard_normal((m, n)).astype(np.float32)
    elif data_ndim == 1:
        data = (rng.random(m) * 3).astype(np.float32)
    elif data_ndim == 3:
        data = rng.standard_normal((batch, m, n)).astype(np.float32)
    d = np.full((batch, m, n), np.nan if out != "bfloat16" else 0xFFFF, _NP[out])
    config = K.GenericConfig(precision, out, bm=32, bn=32, bk=16, block_size=64, has_c=with_c,
                             epilog="batch" if epilog == "batch" else "value", has_data=data is not None)
    description = block_matmul(32, 32, 16, precision, block_size=64, a_arrangement="col_major")
    kernel = _gemm_build.generic_simulator_kernel(config, description, fn, "float32" if data is not None else None)
    item = _NP[precision].itemsize
    tiles_m, tiles_n = -(-m // 32), -(-n // 32)
    values = {
        "a_ptr": sa.ctypes.data, "b_ptr": sb.ctypes.data, "d_ptr": d.ctypes.data,
        "c_ptr": sc.ctypes.data if with_c else 0, "m": m, "n": n, "k": k,
        "a_rs": sa.strides[1] // item, "a_cs": sa.strides[2] // item, "a_batch": sa.strides[0] // item,
        "b_rs": sb.strides[1] // item, "b_cs": sb.strides[2] // item,
        "b_batch": 0 if layout == "bcast" else sb.strides[0] // item,
        "ldd": n, "ldc": n, "c_cs": 1, "d_batch": m * n, "c_batch": m * n if with_c else 0,
        "alpha": alpha, "beta": beta, "tiles_m": tiles_m, "tiles_n": tiles_n,
    }
    if data is not None:
        strides = tuple(s // 4 for s in data.strides) + (0,) * (3 - data.ndim)
        shape = data.shape + (1,) * (3 - data.ndim)
        values.update(data_ptr=data.ctypes.data, data_s0=shape[0], data_s1=shape[1], data_s2=shape[2],
                      data_t0=strides[0], data_t1=strides[1], data_t2=strides[2])
    params = list(K.GENERIC_PARAMS) + (list(K.DATA_PARAMS) if data is not None else [])
    kernel[(tiles_m * tiles_n, batch, 1), (64, 1, 1), 0, description.shared_memory_size_ab](
        *[values[p] for p in params])
    # reference: the same rounded operands in float64, the epilog on every element
    x = alpha * (_from_storage(sa, precision) @ _from_storage(sb, precision))
    if with_c:
        x = x + beta * _from_storage(sc, out)
    ref = np.empty_like(x)
    for bi in range(batch):
        for i in range(m):
            for j in range(n):
                v = np.float32(x[bi, i, j]) if precision != "float64" else x[bi, i, j]
                ref[bi, i, j] = fn(v, bi, i, j, data) if epilog == "batch" else fn(v, i, j, data)
    got = _from_storage(d, out)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# (m, n, k, precision, result dtype, batch, epilog, layout, with C)
SIM_FUSED_CASES = [
    (40, 36, 20, "float32", "float32", 2, "value", "nn", True),   # tails in M, N and K; C with beta
    (32, 64, 16, "float64", "float64", 1, "row", "tn", False),    # fp64 (tensor-core ownership), A column-major
    (33, 32, 24, "bfloat16", "bfloat16", 2, "batch", "nt", False),  # bf16 storage, batch index, B column-major
    (32, 40, 32, "float16", "float32", 3, "none", "bcast", True),  # fp16 in, fp32 out, one B for all batches
]

TOLERANCE = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 2e-2}


def _main():
    for case in SIM_FUSED_CASES:
        t0 = time.perf_counter()
        err = run_fused_case(*case)
        print(json.dumps({"case": list(case), "error": err, "seconds": time.perf_counter() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
