"""The generic fused-epilog GEMM kernel of :mod:`._gemm_kernel` and the elementwise epilog pass of
:mod:`._epilog_pass` under numba's CUDA simulator, against NumPy.

The kernels take raw addresses (uint64) and read / write elements through intrinsics; here those intrinsics are
Python functions on host memory (``ctypes``), and the external epilog function is
:func:`mathpy.jit._epilog_wrapper.simulator_function` (the user's function behind the same calling convention), so the
simulator runs the very same generated kernel sources: tiling, bounds checks, strides, batch indexing, alpha/beta
with C, the epilog's coordinates and operand indexing, the pass's vector and element paths, rounding to the result's
dtype. (The Hopper kernel runs under :mod:`._hopper_sim`.)

Run: ``NUMBA_ENABLE_CUDASIM=1 python tests/_gemm_sim.py`` prints one JSON line per case of
:data:`SIM_FUSED_CASES` and :data:`SIM_PASS_CASES` (tests/test_matmul_fused.py does this in a subprocess).
"""

import ctypes
import math
import json
import sys
import time

import numpy as np

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

__all__ = ["DataView", "widen", "STORAGE_DTYPES", "simulator_namespace", "run_fused_case", "run_pass_case",
           "SIM_FUSED_CASES", "SIM_PASS_CASES", "bf16_round", "data_views"]

STORAGE_DTYPES = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
       "float64": np.dtype(np.float64), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
       "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "uint8": np.dtype(np.uint8), "bool": np.dtype(bool),
       "complex64": np.dtype(np.complex64)}


def _read(address, dtype):
    return np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(int(address)), dtype)[0]


def _write(address, dtype, value):
    np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(int(address)), dtype)[0] = value


def widen(raw, kind):
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


class DataView:
    """The kernel-side ``data`` (``MAKE_DATA``) on host memory: strided element reads, 16-bit floats widened."""

    def __init__(self, kind, ptr, strides):
        self.kind, self.ptr, self.strides, self.dtype = kind, int(ptr), strides, STORAGE_DTYPES[kind]

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        offset = sum(int(i) * int(t) for i, t in zip(index, self.strides))
        return widen(_read(self.ptr + offset * self.dtype.itemsize, self.dtype), self.kind)


def data_views(i, kind, ptr, strides, *staged):
    """The operand views of :func:`mathpy.jit._epilog_wrapper.simulator_function` on host memory."""
    return DataView(kind[0], ptr, strides)


def simulator_namespace(storage_kind, out_kind):
    """Python implementations of the generic kernel's address intrinsics (LOAD_S, LOAD_C, STORE_ONE)."""
    storage, out = STORAGE_DTYPES[storage_kind], STORAGE_DTYPES[out_kind]

    def load_s(address):
        return _read(address, storage)

    def load_c(row_address, col):
        return widen(_read(int(row_address) + int(col) * out.itemsize, out), out_kind)

    def store_one(row_address, col, value):
        address = int(row_address) + int(col) * out.itemsize
        if out_kind == "bfloat16":
            _write(address, out, bf16_round(value))
        else:
            _write(address, out, out.type(value))

    return {"LOAD_S": load_s, "LOAD_C": load_c, "STORE_ONE": store_one}


def _to_storage(x, kind):
    if kind == "bfloat16":
        u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(STORAGE_DTYPES[kind])


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


def _epilog_function(fn, *operands):
    """``fn`` behind the epilog calling convention, its operands (NumPy arrays or None) read from host memory."""
    from mathpy.jit._epilog_wrapper import simulator_function
    from mathpy.jit._matmul_epilog import as_matmul_epilog

    import inspect

    names = list(inspect.signature(fn).parameters)[-len(operands):] if operands else []
    given = [n for n, o in zip(names, operands) if o is not None]
    epilog = as_matmul_epilog(fn, given or None)
    kinds = tuple(None if o is None else (_kind(o), o.ndim) for o in operands)
    return simulator_function(epilog, kinds, data_views)


def _kind(array):
    return "bfloat16" if array.dtype == np.uint16 else array.dtype.name


def _operand_values(*operands):
    values = {}
    for i, x in enumerate(operands):
        if x is None:
            continue
        strides = tuple(t // x.itemsize for t in x.strides) + (0,) * (3 - x.ndim)
        values[f"o{i}_ptr"] = x.ctypes.data
        for j in range(3):
            values[f"o{i}_t{j}"] = strides[j]
    return values


def run_fused_case(m, n, k, precision, out, batch, epilog, layout, with_c, seed=0):
    """One generic-kernel case under the simulator; returns the max error relative to the largest reference value.
    ``layout``: "nn" (row-major A and B), "tn" (A column-major), "nt" (B column-major), "bcast" (one B for every
    batch entry)."""

    from mathpy.device import _gemm_build
    from mathpy.device import _gemm_kernel as K
    from mathpy.device._matmul import matmul as block_matmul

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
    d = np.full((batch, m, n), np.nan if out != "bfloat16" else 0xFFFF, STORAGE_DTYPES[out])
    config = K.GenericConfig(precision, out, bm=32, bn=32, bk=16, block_size=64, has_c=with_c, epilog=True,
                             operands=1)
    description = block_matmul(32, 32, 16, precision, block_size=64, a_arrangement="col_major")
    epi = _epilog_function(fn, data)
    kernel = _gemm_build.generic_simulator_kernel(config, description, epi, simulator_namespace(precision, out))
    item = STORAGE_DTYPES[precision].itemsize
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
    values.update(_operand_values(data))
    params = list(K.GENERIC_PARAMS) + K.operand_params(1)
    kernel[(tiles_m * tiles_n, batch, 1), (64, 1, 1), 0, description.shared_memory_size_ab](
        *[values.get(p, 0) for p in params])
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


def _pass_namespace(out, vector):
    """Python implementations of the pass's access intrinsics on host memory."""
    dtype = STORAGE_DTYPES["float32"] if out == "complex64" else STORAGE_DTYPES[out]
    per = 2 if out == "complex64" else 1
    size = dtype.itemsize * per

    def load1(base, col):
        address = int(base) + int(col) * size
        if out == "complex64":
            return np.complex64(complex(_read(address, dtype), _read(address + 4, dtype)))
        return widen(_read(address, dtype), out)

    def store1(base, col, value):
        address = int(base) + int(col) * size
        if out == "complex64":
            _write(address, dtype, np.float32(value.real))
            _write(address + 4, dtype, np.float32(value.imag))
        elif out == "bfloat16":
            _write(address, dtype, bf16_round(value))
        else:
            _write(address, dtype, dtype.type(value))

    def loadv(base, col):
        assert int(base) % 16 == 0 and (int(col) * size) % 16 == 0
        return tuple(load1(base, int(col) + q) for q in range(vector))

    def storev(base, col, *values):
        assert len(values) == vector
        for q, v in enumerate(values):
            store1(base, int(col) + q, v)

    return {"ALIGNED16": lambda address: int(address) % 16 == 0, "LOADV": loadv, "STOREV": storev,
            "LOAD1": load1, "STORE1": store1, "U64": np.uint64, "INT64": np.int64,
            "DSIZE": size}


def _pass_gated(value, row, col, bias, gate):
    x = value + bias[col]
    return x / (np.float32(1) + math.exp(-x)) * gate[row, col]


def _pass_masked(value, batch, row, col, mask, shift):
    return value if mask[row, col] else value * np.float32(0.5) + np.float32(shift[batch])


def _pass_complex(value, row, col, scale):
    return value * scale[row] if row > 0 else value


_PASS_EPILOGS = {"gated": _pass_gated, "masked": _pass_masked, "complex": _pass_complex}


def _pass_operands(epilog, m, n, batch, rng):
    if epilog == "gated":
        return (rng.standard_normal(n).astype(np.float32), _to_storage(rng.standard_normal((m, n)), "bfloat16"))
    if epilog == "masked":
        return (rng.random((m, n)) > 0.5, rng.integers(-3, 4, batch).astype(np.int32))
    return (rng.standard_normal(m).astype(np.float32),)


def run_pass_case(m, n, batch, out, epilog, aligned, seed=0):
    """One elementwise-pass case under the simulator (D in place, rows 16-byte aligned or not); returns the max
    error relative to the largest reference value."""
    from numba import cuda

    from mathpy.device import _epilog_pass as P
    from mathpy.device._gemm_build import exec_source
    from mathpy.device._gemm_kernel import operand_params

    rng = np.random.default_rng(seed)
    config = P.PassConfig(out, {"gated": 2, "masked": 2, "complex": 1}[epilog])
    fn = _PASS_EPILOGS[epilog]
    operands = _pass_operands(epilog, m, n, batch, rng)
    x = rng.standard_normal((batch, m, n))
    if out == "complex64":
        x = x + 1j * rng.standard_normal((batch, m, n))
    pad = 0 if aligned else 1  # one element before the first row, and rows one element longer: unaligned rows
    ldd = n if aligned and (n * P.PASS_KINDS[out]) % 16 == 0 else n + 1
    storage = np.zeros(batch * m * ldd + pad + 16, STORAGE_DTYPES["float32" if out == "complex64" else out])
    if out == "complex64":
        storage = np.zeros(batch * m * ldd + pad + 16, np.complex64)
    offset = (-storage.ctypes.data % 16) // storage.itemsize + pad
    d = storage[offset:offset + batch * m * ldd].reshape(batch, m, ldd)[:, :, :n]
    d[...] = _to_storage(x, out) if out != "complex64" else x.astype(np.complex64)
    before = _from_storage(d, out) if out != "complex64" else d.astype(np.complex128)
    ns = _pass_namespace(out, config.vector)
    ns["cuda"] = cuda
    ns["EPI"] = _epilog_function(fn, *operands)
    kernel = cuda.jit(exec_source(P.pass_source(config), ns, "pass-sim"))
    grid, shift = P.launch_shape(m, n, batch, config.vector)
    values = {"d_ptr": d.ctypes.data, "m": m, "n": n, "ldd": ldd, "d_batch": m * ldd, "batches": batch,
              "row_shift": shift, **_operand_values(*operands)}
    kernel[grid, (config.threads, 1, 1)](*[values.get(p, 0) for p in (*P.PASS_PARAMS,
                                                                       *operand_params(config.operands))])
    views = [o if o.dtype != np.uint16 else _from_storage(o, "bfloat16").astype(np.float32) for o in operands]
    ref = np.empty_like(before)
    with_batch = epilog == "masked"
    for b, i, j in np.ndindex(*before.shape):
        v = np.complex64(before[b, i, j]) if out == "complex64" else (
            before[b, i, j] if out == "float64" else np.float32(before[b, i, j]))
        ref[b, i, j] = fn(v, b, i, j, *views) if with_batch else fn(v, i, j, *views)
    got = _from_storage(d, out) if out != "complex64" else d.astype(np.complex128)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# (m, n, batch, result dtype, epilog, rows 16-byte aligned)
SIM_PASS_CASES = [
    (3, 20, 2, "bfloat16", "gated", True),     # vector path, the row's tail element by element, two operands
    (4, 9, 1, "float32", "gated", False),      # unaligned rows: coalesced elements
    (3, 6, 3, "float64", "masked", True),      # bool and int32 operands, batch index, narrow rows
    (2, 5, 2, "complex64", "complex", False),  # complex values, a branch on the row
]

# (m, n, k, precision, result dtype, batch, epilog, layout, with C)
SIM_FUSED_CASES = [
    (40, 36, 20, "float32", "float32", 2, "value", "nn", True),   # tails in M, N and K; C with beta
    (32, 64, 16, "float64", "float64", 1, "row", "tn", False),    # fp64 (tensor-core ownership), A column-major
    (33, 32, 24, "bfloat16", "bfloat16", 2, "batch", "nt", False),  # bf16 storage, batch index, B column-major
    (32, 40, 32, "float16", "float32", 3, "none", "bcast", True),  # fp16 in, fp32 out, one B for all batches
]

TOLERANCE = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 2e-2, "complex64": 2e-6}


def _main():
    for run, cases in ((run_fused_case, SIM_FUSED_CASES), (run_pass_case, SIM_PASS_CASES)):
        for case in cases:
            t0 = time.perf_counter()
            err = run(*case)
            print(json.dumps({"kind": run.__name__, "case": list(case), "error": err,
                              "seconds": time.perf_counter() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
