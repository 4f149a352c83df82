"""The GPU engine of matmuls with a fused Python epilog: picks a kernel (:mod:`mathpy.device._gemm_hopper` or
:mod:`mathpy.device._gemm_kernel`), compiles it once per process (numba-cuda to PTX, the driver to SASS), and launches
it on the plan's stream.

Kernel choice (``algorithms[0]``):

- ``"wgmma"`` on compute capability 9.0 for float16/bfloat16 A and B whose layouts a TMA tensor map can describe
  (one unit stride; leading dimension and batch stride multiples of 16 bytes; data 16-byte aligned, checked at each
  execute) and a row-major C: the persistent, warp-specialised TMA + wgmma kernel of
  :mod:`mathpy.device._gemm_hopper`, 128 x 256 tiles (128 x 128 when N <= 128), one block per SM. A 16-bit result
  that a tensor map can describe leaves through shared memory with bulk tensor stores (``store_tile``); a 16-bit
  ``data`` of the result's shape (``data[row, col]``, ``data[batch, row, col]``) is staged tile by tile in shared
  memory while the product is computed (``stage_data``). Pointers that are not 16-byte aligned at an execute fall
  back to a variant without them (compiled then, once).
- ``"generic"`` otherwise: the block GEMM of :mod:`mathpy.device` (tensor cores for 16-bit types on sm_80+) on
  64 x 64 tiles, any strides.

The tensor maps depend on the operands' addresses, so each execute encodes them on the host
(``cuTensorMapEncodeTiled``) and copies them (128 bytes each, from pageable memory: staged at once, ordered on the
stream) into a buffer from the package's stream-ordered allocator; the kernel reads them from global memory. In a CUDA
graph capture the copy is recorded, so it comes from page-locked host memory, and both buffers stay with the plan
(``mathpy._streams.keep_for_graph``): every replay copies the same maps again.
"""

import ctypes
import dataclasses
import math
import threading

import numpy as np

from ... import _cuda, _operands, _packages, _runtime
from ..._errors import CUDALibraryError
from ..._streams import keep_for_graph
from ...jit import _matmul_epilog as E
from ._fused_bounds import raise_recorded, record_address, refuse_checked_capture

__all__ = ["FusedCUDAEngine"]

_lock = threading.Lock()
#: Benchmarks may force wgmma kernel settings here (``bn``, ``stages``, ``stage_data``, ``store_tile``: no more than
#: the operands allow) to compare variants; empty in normal use.
CONFIG_OVERRIDE = {}
_kernels = {}  # (kind, config, epilog function, data dtype/ndim, device) -> _Kernel


def _check(result, what):
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise CUDALibraryError("cuda", what, int(status), getattr(status, "name", str(status)))
    return result[1:] if isinstance(result, tuple) and len(result) > 2 else (result[1] if isinstance(result, tuple)
                                                                                and len(result) == 2 else None)


class _Kernel:
    """A loaded kernel: CUfunction, parameter names and ctypes, dynamic shared memory, block size."""

    def __init__(self, ptx, name, params, shared_bytes, threads, compute):
        from cuda.bindings import driver

        self.module = _check(driver.cuModuleLoadData(ptx.encode() + b"\0"), "cuModuleLoadData")
        self.function = _check(driver.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
        if shared_bytes > 48 * 1024:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver.cuFuncSetAttribute(self.function, attr, shared_bytes), "cuFuncSetAttribute")
        self.params, self.shared_bytes, self.threads = params, shared_bytes, threads
        real = ctypes.c_double if compute == "float64" else ctypes.c_float
        self.ctypes = tuple(ctypes.c_uint64 if (p.endswith("_ptr") or p.startswith("tmap_")) else
                            real if p in ("alpha", "beta") else ctypes.c_int64 for p in params)

    def launch(self, grid, stream, values):
        from cuda.bindings import driver

        args = tuple(values[p] for p in self.params)
        _check(driver.cuLaunchKernel(self.function, grid[0], grid[1], grid[2], self.threads, 1, 1,
                                     self.shared_bytes, stream, (args, self.ctypes), 0), "cuLaunchKernel")


def _compile(kind, config, epilog, data, cc, description=None, checked=False):
    """Build (once per process) the kernel ``kind`` for ``config`` with the epilog (None: no epilog); ``checked``:
    its ``data`` reads are bounds-checked."""
    from ...device import _gemm_build

    epi = E.device_function(epilog) if epilog is not None else None
    maker = None
    if data is not None:
        staged = kind == "wgmma" and config.stage_data
        maker = E.data_view_maker(data.dtype, data.ndim, (config.bm, config.bn) if staged else None, checked)
    try:
        if kind == "wgmma":
            ptx, name, params, _ = _gemm_build.hopper_ptx(config, cc, epi, maker)
            return ptx, name, params, config.shared_memory_size, config.threads, "float32"
        ptx, name, params, _ = _gemm_build.generic_ptx(config, description, cc, epi, maker)
        compute = "float64" if config.precision == "float64" else "float32"
        return ptx, name, params, description.shared_memory_size_ab, config.block_size, compute
    except Exception as e:
        from numba.core import errors

        if epilog is not None and isinstance(e, errors.NumbaError):
            raise E.wrap_compile_error(epilog, f"the GPU ({kind} kernel)", e) from e
        raise


def _kernel(kind, config, epilog, data, device_id, description=None, checked=False):
    key = (kind, config, None if epilog is None else epilog.function, None if data is None else
           (data.dtype, data.ndim), device_id, checked)
    with _lock:
        found = _kernels.get(key)
        if found is None:
            cc = _cuda.compute_capability(device_id)
            built = _cached_build(kind, config, epilog, data, cc, description, checked)
            with _runtime.device_scope(device_id):
                found = _Kernel(*built)
                found.record = record_address(found.module) if checked and data is not None else None
                _kernels[key] = found
        return found


_SOURCES = ("device/_gemm_kernel.py", "device/_gemm_hopper.py", "device/_gemm_build.py", "device/_hopper.py",
            "device/_matmul.py",
            "device/_intrinsics.py", "device/_codegen.py", "jit/_epilog_data.py", "jit/_matmul_epilog.py",
            "jit/_bounds_ir.py", "host/matmul/_fused_cuda.py")
_sources_digest = []


def _digest():
    """A hash of the generators' sources: a kernel cached on disk is rebuilt when any of them changes."""
    if not _sources_digest:
        import hashlib
        import os

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        h = hashlib.sha256()
        for name in _SOURCES:
            with open(os.path.join(root, name), "rb") as f:
                h.update(f.read())
        _sources_digest.append(h.hexdigest()[:16])
    return _sources_digest[0]


def _cached_build(kind, config, epilog, data, cc, description, checked=False):
    """:func:`_compile`'s result through mathpy.jit's disk cache (PTX keyed by the epilog's content, the kernel
    configuration, the generators' sources and the toolchain): a plan in a new process skips numba-cuda (seconds)."""
    import types

    from ...jit import _cache

    spec = types.SimpleNamespace(kind=f"gemm-{kind}:{config!r}:{description!r}:{_digest()}"
                                 + (":check_bounds" if checked else ""),
                                 element_dtype=None if data is None else f"{data.dtype}/{data.ndim}",
                                 user_info_dtype=None, compute_capability=tuple(cc))
    try:
        key = _cache.callback_key(epilog.function, spec) if epilog is not None else None
    except _cache.Uncacheable:
        key = None
    if key is not None:
        entry = _cache.load_entry(key)
        if entry is not None:
            h = entry[0]
            return entry[1].decode(), h["name"], h["params"], h["shared"], h["threads"], h["compute"]
    built = _compile(kind, config, epilog, data, cc, description, checked)
    if key is not None:
        from ...jit import _device

        ptx, name, params, shared, threads, compute = built
        _cache.store_entry(key, {"name": name, "params": list(params), "shared": shared, "threads": threads,
                                 "compute": compute, "function": epilog.where,
                                 "nvvm_file": _cache.nvvm_file_id(_device.nvvm_version()[1])}, ptx.encode())
    return built


def grid_tiles(m, n, bm, bn):
    """How many ``bm x bn`` tiles cover an ``m x n`` result, per axis."""
    return math.ceil(m / bm), math.ceil(n / bn)


def _tma_ok(layout, itemsize):
    """A layout a 2-D / 3-D tensor map can describe: unit stride along one axis, the other strides multiples of
    16 bytes (batch stride 0 = broadcast: a 2-D map)."""
    if layout.row_stride != 1 and layout.col_stride != 1:
        return False
    ld = layout.ld
    if (ld * itemsize) % 16 or ld < 1:
        return False
    return layout.batch_stride == 0 or layout.batch == 1 or (layout.batch_stride * itemsize) % 16 == 0


def _store_tile_ok(p):
    """D can leave through bulk tensor stores: 16-bit, row-major, rows and batches 16-byte multiples apart."""
    d = p.d
    return (d.dtype.name in ("bfloat16", "float16") and d.col_stride == 1 and (d.row_stride * 2) % 16 == 0
            and (p.batch == 1 or (d.batch_stride * 2) % 16 == 0))


def _stage_data_ok(data, p):
    """``data`` can be staged tile by tile: 16 bits, the result's shape (with or without the batch axis), rows
    contiguous and 16-byte multiples apart."""
    if data is None or data.dtype not in ("bfloat16", "float16", "int16"):
        return False
    if data.shape not in ((p.m, p.n), (p.batch, p.m, p.n)):
        return False
    strides = data.strides
    return (strides[-1] == 1 and (strides[-2] * 2) % 16 == 0 and strides[-2] >= p.n
            and (data.ndim == 2 or p.batch == 1 or (strides[0] * 2) % 16 == 0))


def hopper_config(p, data, ab, out, epilog_kind, stage, store):
    """The wgmma kernel's configuration for problem ``p`` (``CONFIG_OVERRIDE`` applied)."""
    from ...device import _gemm_hopper as HK

    bn = CONFIG_OVERRIDE.get("bn", 128 if p.n <= 128 else 256)
    stage = stage and CONFIG_OVERRIDE.get("stage_data", True)
    store = store and CONFIG_OVERRIDE.get("store_tile", True)
    stages = CONFIG_OVERRIDE.get("stages") or HK.max_stages(bn, stage or store)
    return HK.HopperConfig(
        ab, out, bn=bn, stages=stages, a_mn_major=p.a.row_stride == 1 and p.m > 1,
        b_mn_major=p.b.col_stride == 1 and p.n > 1, batched_a=p.a.batch > 1 and p.a.batch_stride != 0,
        batched_b=p.b.batch > 1 and p.b.batch_stride != 0, has_c=p.c is not None, epilog=epilog_kind,
        has_data=data is not None, stage_data=stage, batched_data=stage and data.ndim == 3, store_tile=store,
        batched_d=store and p.batch > 1)


class FusedCUDAEngine:
    """Executes a :class:`~._problem.MatmulProblem` with a fused Python epilog on the GPU; arguments of
    :meth:`execute` as for the cuBLASLt engine (device pointers; ``epilog_inputs["data"]`` the data pointer)."""

    def __init__(self, problem, *, execution=None, options=None, preferences=None, allocator=None):
        self.problem, self.execution = problem, execution
        self.device_id = execution.device_id
        # the package whose stream-ordered pool holds each execute's tensor maps (as cuBLASLt's workspaces)
        self._package = (allocator.package if allocator is not None else
                         _packages.get(_operands.device_package()))
        self.workspace_bytes = 0
        p = problem
        fused = p.fused
        self._epilog, self._data = fused.epilog, fused.data
        self._checked = fused.check_bounds and fused.data is not None  # only data is indexed
        epilog_kind = "batch" if self._epilog.with_batch else "value"
        ab, out = p.a.dtype, p.d.dtype
        itemsize = ab.itemsize
        cc = _cuda.compute_capability(self.device_id)
        hopper = (tuple(cc) == (9, 0) and ab.name in ("float16", "bfloat16") and out.name in
                  ("float16", "bfloat16", "float32") and _tma_ok(p.a, itemsize) and _tma_ok(p.b, itemsize)
                  and (p.c is None or p.c.col_stride == 1) and p.d.col_stride == 1 and p.n % 2 == 0)
        self._hopper_config = None
        if hopper:
            self._hopper_config = hopper_config(p, self._data, ab.name, out.name, epilog_kind,
                                                _stage_data_ok(self._data, p), _store_tile_ok(p))
            self._hopper = _kernel("wgmma", self._hopper_config, self._epilog, self._data, self.device_id,
                                   checked=self._checked)
            self._sms = _cuda.multiprocessor_count(self.device_id)
        self._generic = None
        self.algorithms = ["wgmma" if hopper else "generic"]
        if not hopper:
            self._generic_kernel()

    def _generic_kernel(self):
        if self._generic is None:
            from ...device import _gemm_kernel as K
            from ...device import matmul as block_matmul

            p = self.problem
            precision = p.a.dtype.name
            config = K.GenericConfig(precision, p.d.dtype.name, has_c=p.c is not None,
                                     epilog="batch" if self._epilog.with_batch else "value",
                                     has_data=self._data is not None)
            description = block_matmul(config.bm, config.bn, config.bk, precision, block_size=config.block_size,
                                       a_arrangement="col_major")
            self._generic_config = config
            self._generic = _kernel("generic", config, self._epilog, self._data, self.device_id, description,
                                    self._checked)
        return self._generic

    def autotune(self, operands, stream=None, iterations=3):
        """One algorithm per problem: runs it and returns ``[(name, None)]`` (nothing to choose)."""
        self.execute(**dict(operands, stream=stream))
        return [(self.algorithms[0], None)]

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream=None):
        p = self.problem
        stream = 0 if stream is None else stream
        values = {"d_ptr": d, "c_ptr": c or 0, "m": p.m, "n": p.n, "k": p.k, "ldd": p.d.ld,
                  "ldc": p.c.ld if p.c is not None else 0, "d_batch": p.d.batch_stride if p.batch > 1 else 0,
                  "c_batch": (p.c.batch_stride if p.c is not None and p.batch > 1 else 0),
                  "alpha": float(np.real(alpha)), "beta": float(np.real(beta))}
        data = self._data
        if data is not None:
            shape = tuple(data.shape) + (1,) * (3 - data.ndim)
            strides = tuple(data.strides) + (0,) * (3 - data.ndim)
            values.update(data_ptr=epilog_inputs["data"], data_s0=shape[0], data_s1=shape[1], data_s2=shape[2],
                          data_t0=strides[0], data_t1=strides[1], data_t2=strides[2])
        if self._checked:
            refuse_checked_capture(self._package, self.device_id, stream)
        with _runtime.device_scope(self.device_id):
            if self._hopper_config is not None and a % 16 == 0 and b % 16 == 0:
                kernel = self._launch_hopper(a, b, d, values, stream)
            else:
                kernel = self._launch_generic(a, b, values, stream)
            if self._checked:
                raise_recorded(kernel.record, self._epilog, data, stream)

    def _hopper_variant(self, d, data_ptr):
        """The planned kernel, or (an unaligned D or data at this execute) the variant without tile stores / staged
        data."""
        config = self._hopper_config
        stage = config.stage_data and data_ptr % 16 == 0
        store = config.store_tile and d % 16 == 0
        if (stage, store) == (config.stage_data, config.store_tile):
            return config, self._hopper
        from ...device import _gemm_hopper as HK

        config = dataclasses.replace(config, stage_data=stage, batched_data=stage and config.batched_data,
                                     store_tile=store, batched_d=store and config.batched_d,
                                     stages=HK.max_stages(config.bn, stage or store))
        return config, _kernel("wgmma", config, self._epilog, self._data, self.device_id, checked=self._checked)

    def _launch_hopper(self, a, b, d, values, stream):
        p = self.problem
        config, kernel = self._hopper_variant(d, values.get("data_ptr", 0))
        data = self._data
        data_map = None
        if config.stage_data:
            data_map = (values["data_ptr"], data.strides[-2], data.strides[0] if data.ndim == 3 else 0)
        maps = _encode_maps(config, p, a, b, data_map, d)
        buffer = self._package.on(self.device_id, stream).empty((128 * len(maps),), np.uint8)
        address = self._package.pointer(buffer)
        if self._package.is_capturing(self.device_id, stream):
            host = _PinnedMaps(maps)
            _runtime.copy_host_to_device(address, host.pointer, 128 * len(maps), stream)
            keep_for_graph(self, self._package, self.device_id, stream, host, pooled=False)
            keep_for_graph(self, self._package, self.device_id, stream, buffer)
        else:
            _upload(address, maps, stream)
        tiles_m, tiles_n = grid_tiles(p.m, p.n, config.bm, config.bn)
        extra = iter(range(2, len(maps)))
        values.update(tmap_a=address, tmap_b=address + 128,
                      tmap_data=address + 128 * next(extra) if config.stage_data else 0,
                      tmap_d=address + 128 * next(extra) if config.store_tile else 0,
                      batches=p.batch, tiles_m=tiles_m, tiles_n=tiles_n)
        # persistent: one block per SM (or per tile when there are fewer)
        kernel.launch((min(tiles_m * tiles_n * p.batch, self._sms), 1, 1), stream, values)
        self._keep = (buffer, maps)  # alive until the copy is staged and the launch enqueued
        return kernel

    def _launch_generic(self, a, b, values, stream):
        kernel, config, p = self._generic_kernel(), self._generic_config, self.problem
        tiles_m, tiles_n = grid_tiles(p.m, p.n, config.bm, config.bn)
        values.update(a_ptr=a, b_ptr=b, ldc=p.c.row_stride if p.c is not None else 0,
                      c_cs=p.c.col_stride if p.c is not None else 0, a_rs=p.a.row_stride, a_cs=p.a.col_stride,
                      a_batch=p.a.batch_stride if p.batch > 1 else 0, b_rs=p.b.row_stride, b_cs=p.b.col_stride,
                      b_batch=p.b.batch_stride if p.batch > 1 else 0, tiles_m=tiles_m, tiles_n=tiles_n)
        kernel.launch((tiles_m * tiles_n, p.batch, 1), stream, values)
        return kernel

    def free(self):
        """Kernels are shared by every plan of the process (kept until exit); nothing to release."""
        self._keep = None


def _encode_maps(config, p, a, b, data=None, d=None):
    """The CUtensorMap objects of this execute (A, B, then the staged data and D when the config uses them);
    ``data``: (address, leading dimension, batch stride) in elements."""
    from cuda.bindings import driver

    from ...device import _gemm_hopper as HK

    kinds = driver.CUtensorMapDataType
    dtype = kinds.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if config.ab == "bfloat16" else kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    specs = HK.tensor_map_specs(config, p.m, p.n, p.k, p.batch, (a, p.a.ld, p.a.batch_stride),
                                (b, p.b.ld, p.b.batch_stride), data, (d, p.d.ld, p.d.batch_stride))
    maps = []
    for i, (address, dims, strides, box) in enumerate(specs):
        u64, u32 = driver.cuuint64_t, driver.cuuint32_t
        result = driver.cuTensorMapEncodeTiled(
            dtype if i < 2 else kinds.CU_TENSOR_MAP_DATA_TYPE_UINT16,  # data and D: 16-bit copies, no conversion
            len(dims), address, [u64(max(x, 1)) for x in dims], [u64(x) for x in strides],
            [u32(x) for x in list(box) + [1] * (len(dims) - 2)], [u32(1)] * len(dims),
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        maps.append(_check(result, "cuTensorMapEncodeTiled"))
    return maps


class _PinnedMaps:
    """The bytes of tensor ``maps`` in page-locked host memory (what a captured host-to-device copy may read)."""

    def __init__(self, maps):
        with _runtime.relaxed_capture():  # (made during a capture, maybe freed during another)
            self.pointer = _runtime.call("cudaMallocHost", 128 * len(maps))
        for i, tmap in enumerate(maps):
            ctypes.memmove(self.pointer + 128 * i, tmap.getPtr(), 128)

    def __del__(self):
        with _runtime.relaxed_capture():
            _runtime.call("cudaFreeHost", self.pointer)


def _upload(address, maps, stream):
    for i, tmap in enumerate(maps):
        _runtime.copy_host_to_device(address + 128 * i, tmap.getPtr(), 128, stream)

