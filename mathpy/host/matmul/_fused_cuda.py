"""The GPU engine of matmuls with a Python epilog: runs the route the plan chose (:mod:`._fused_route`).

- ``"library"``: cuBLASLt alone (the engine of ``_engines.get("matmul", "cuda")``) on a problem rewritten into
  cuBLASLt's terms: the recognised activation and bias as its epilog (a bias by column on a row-major result is the
  bias by row of the transposed product ``D.T = B.T @ A.T``), a residual as its C, the value's factor in alpha and
  beta.
- ``"elementwise"``: the same cuBLASLt engine computes ``alpha * A @ B + beta * C`` into D, then the epilog pass
  (``_engines.get("matmul-epilog-pass", "cuda")``, :class:`EpilogPass`) applies the epilog to D in place, on the same
  stream.
- ``"fused"``: the persistent TMA + wgmma kernel (:mod:`mathpy.device._gemm_hopper`, 128 x 256 tiles, or 128 x 128
  when N <= 128, one block per SM): A and B through TMA tensor maps; a 16-bit result that a tensor map describes
  leaves through shared memory with bulk tensor stores (``store_tile``); a 16-bit operand 0 of the result's shape is
  staged tile by tile in shared memory during the product (``stage_data``). Pointers that are not 16-byte aligned
  at an execute fall back to a variant without them (built then, once). The tensor maps depend on the operands'
  addresses, so each execute encodes them on the host (``cuTensorMapEncodeTiled``) and copies them (128 bytes each,
  from pageable memory: staged at once, ordered on the stream) into a buffer from the package's stream-ordered
  allocator; the kernel reads them from global memory. In a CUDA graph capture the copy is recorded, so it comes
  from page-locked host memory, and both buffers stay with the plan (``mathpy._streams.keep_for_graph``): every
  replay copies the same maps again.
- ``"generic"``: the block-GEMM kernel (:mod:`mathpy.device._gemm_kernel`), 64 x 64 tiles, any strides.

Kernels come from :mod:`._fused_kernels` (built once per configuration, the epilog linked in, cached on disk). Every
launch takes the stream of its call (resolved by the call: the engine remembers none).

``check_bounds`` (:attr:`~._fused.FusedEpilog.check_bounds`): the routes that run the user's function (elementwise,
fused, generic) run checked builds, whose epilog function gets every operand's shape and records the first index
outside one (:mod:`._fused_bounds`); each execution then waits for the record and raises OutOfBoundsError, so it is
refused in a CUDA graph capture (StreamCaptureError, before anything is queued). The library route runs cuBLASLt's
own epilog, which reads no operand by a user's index: the plan checked every read it makes (its operands have
exactly the shapes cuBLASLt reads), and it runs as without check_bounds.
"""

import ctypes
import dataclasses
import threading

import numpy as np

from ... import _cuda, _engines, _operands, _packages, _runtime
from ..._errors import CUDALibraryError, UnsupportedLayoutError
from ..._log import logger
from ..._streams import keep_for_graph
from ._epilog import MatmulEpilog
from ._fused_bounds import raise_recorded, refuse_checked_capture, runs_checked
from ._fused_kernels import Build, kernel
from ._fused_route import hopper_tile_n
from ._problem import MatrixLayout

__all__ = ["FusedCUDAEngine", "EpilogPass", "operand_values", "hopper_config"]

#: Benchmarks may force wgmma kernel settings here (``bn``, ``stages``, ``stage_data``, ``store_tile``: no more than
#: the operands allow) to compare variants; empty in normal use.
CONFIG_OVERRIDE = {}


def operand_values(operands, addresses, checked=False):
    """The kernels' operand parameters (``o{i}_ptr``, strides ``o{i}_t*``, and ``checked``: shape ``o{i}_s*``) of the
    epilog's ``operands`` ((name, DataLayout or None), ...) at ``addresses`` (name -> device address)."""
    values = {}
    for i, (name, layout) in enumerate(operands):
        if layout is None:
            continue
        strides = tuple(layout.strides) + (0,) * (3 - layout.ndim)
        shape = tuple(layout.shape) + (0,) * (3 - layout.ndim)  # (axes it lacks: any index is outside)
        values[f"o{i}_ptr"] = addresses[name]
        for j in range(3):
            values[f"o{i}_t{j}"] = strides[j]
            if checked:
                values[f"o{i}_s{j}"] = shape[j]
    return values



def _cc(device_id):
    return tuple(_cuda.compute_capability(device_id))


class EpilogPass:
    """The elementwise pass of :mod:`mathpy.device._epilog_pass` for ``problem`` (D row-major): ``execute(d,
    epilog_inputs, stream)`` applies the problem's epilog to D in place on ``stream`` (with check_bounds: then waits
    for the record and raises OutOfBoundsError; its caller refuses a capture). Everything but the addresses is set
    once; an execute writes D's and the operands' addresses into the argument block and launches."""

    def __init__(self, problem, *, execution=None):
        from ...device import _epilog_pass as P

        self.problem, self.device_id = problem, execution.device_id
        fused, d = problem.fused, problem.d
        self._checked = runs_checked(fused)
        config = P.PassConfig(d.dtype.name, len(fused.operands), self._checked)
        self._kernel = kernel(Build("pass", config, _cc(self.device_id)), fused.epilog, fused.kinds, None,
                              self.device_id)
        self._arguments = args = self._kernel.arguments()
        grid, shift = P.launch_shape(problem.m, problem.n, problem.batch, config.vector)
        self._grid = grid
        args.update({"m": problem.m, "n": problem.n, "ldd": d.row_stride, "d_batch": d.batch_stride,
                     "batches": problem.batch, "row_shift": shift})
        args.update(operand_values(fused.operands, {name: 0 for name, _ in fused.operands}, self._checked))
        self._d = args.values["d_ptr"]
        self._pointers = tuple((args.values[f"o{i}_ptr"], name) for i, (name, layout) in enumerate(fused.operands)
                               if layout is not None)

    def execute(self, d, epilog_inputs, stream):
        self._d.value = d
        for slot, name in self._pointers:
            slot.value = epilog_inputs[name]
        with _runtime.device_scope(self.device_id):
            self._kernel.launch(self._grid, stream, self._arguments)
            if self._checked:
                raise_recorded(self._kernel.record, self.problem.fused, stream)


def _product_problem(problem, plan=None):
    """The problem cuBLASLt runs: the product alone, or (``plan``, a LibraryPlan) with the recognised epilog, and
    whether it is the transposed product (a bias by column)."""
    base = dataclasses.replace(problem, fused=None, epilog=None, epilog_inputs=(), epilog_outputs=())
    if plan is None:
        return base, False
    epilog = MatmulEpilog[plan.epilog]
    c = base.c
    if plan.residual is not None:
        layout = dict(problem.fused.operands)[plan.residual]
        batch_stride = layout.strides[0] if layout.ndim == 3 else 0
        c = MatrixLayout(problem.m, problem.n, layout.strides[-2], 1, problem.batch, batch_stride,
                         np.dtype(problem.d.dtype))
    inputs = ()
    transposed = plan.bias_axis == "col"
    if plan.bias is not None:
        length = problem.n if transposed else problem.m
        inputs = (("bias", MatrixLayout(length, 1, 1, length, problem.batch, 0, problem.d.dtype)),)
    sub = dataclasses.replace(base, epilog=epilog, epilog_inputs=inputs, c=c)
    if transposed:
        sub = dataclasses.replace(sub, m=problem.n, n=problem.m, a=problem.b.transposed(),
                                  b=problem.a.transposed(), c=None if c is None else c.transposed(),
                                  d=problem.d.transposed())
    return sub, transposed


class FusedCUDAEngine:
    """Executes a :class:`~._problem.MatmulProblem` with a Python epilog on the GPU along its route; arguments of
    :meth:`execute` as for the cuBLASLt engine (device pointers; ``epilog_inputs``: the operands' pointers by
    name)."""

    def __init__(self, problem, *, execution=None, options=None, preferences=None, allocator=None):
        self.problem, self.execution = problem, execution
        self.device_id = execution.device_id
        self.lock = threading.Lock()
        # the package whose stream-ordered pool holds each execute's tensor maps (as cuBLASLt's workspaces)
        self._package = (allocator.package if allocator is not None else
                         _packages.get(_operands.device_package()))
        route = problem.fused.route
        self.route = route
        self._product = self._pass = self._hopper = self._generic = None
        self._plan = route.library
        self._checked = runs_checked(problem.fused)
        if route.name in ("library", "elementwise"):
            self._plan_cublaslt(options, preferences, allocator)
            self.algorithms = self._product.algorithms
        elif route.name == "fused":
            self._plan_hopper()
            self.algorithms = ["wgmma"]
        else:
            self._plan_generic()
            self.algorithms = ["generic"]

    @property
    def workspace_bytes(self):
        return 0 if self._product is None else self._product.workspace_bytes

    # -- cuBLASLt routes ------------------------------------------------------------------------------------------

    def _plan_cublaslt(self, options, preferences, allocator):
        problem, execution, route = self.problem, self.execution, self.route
        engine = _engines.get("matmul", "cuda")
        sub, self._transposed = _product_problem(problem, self._plan)
        try:
            self._product = engine(sub, execution=execution, options=options, preferences=preferences,
                                   allocator=allocator)
        except (CUDALibraryError, UnsupportedLayoutError) as e:
            if route.name != "library" or route.order != "C":
                raise
            # cuBLASLt has no kernel for its epilog here: the product alone, and the pass
            logger.info("Matmul epilog %s: cuBLASLt refused its %s epilog (%s); route: elementwise instead",
                        problem.fused.name, self._plan.epilog, e)
            self._plan, (sub, self._transposed) = None, _product_problem(problem)
            self._product = engine(sub, execution=execution, options=options, preferences=preferences,
                                   allocator=allocator)
        # the library route runs cuBLASLt's own epilog: nothing of the user's runs, nothing is left to check
        self._checked = self._checked and self._plan is None
        try:
            if self._plan is None:
                self._pass = _engines.get("matmul-epilog-pass", "cuda")(problem, execution=execution)
        except BaseException:
            self._product.free()
            raise

    def _library_arguments(self, a, b, c, d, epilog_inputs, alpha, beta):
        plan = self._plan
        alpha = alpha * plan.value_scale
        if plan.residual is not None:
            c, beta = epilog_inputs[plan.residual], plan.residual_scale
        else:
            beta = beta * plan.value_scale
        inputs = {"bias": epilog_inputs[plan.bias]} if plan.bias is not None else {}
        if self._transposed:
            a, b = b, a
        return {"a": a, "b": b, "c": c, "d": d, "epilog_inputs": inputs, "epilog_outputs": {}, "alpha": alpha,
                "beta": beta}

    # -- mathpy's kernels ---------------------------------------------------------------------------------------

    def _plan_hopper(self):
        p = self.problem
        fused = p.fused
        first = fused.operands[0][1] if fused.operands else None
        self._hopper_config = hopper_config(p, first, _stage_data_ok(first, p), _store_tile_ok(p), self._checked)
        self._hopper = self._kernel("hopper", self._hopper_config)
        self._hopper_args = {}
        self._sms = _cuda.multiprocessor_count(self.device_id)

    def _kernel(self, kind, config, block=()):
        fused = self.problem.fused
        staged = (config.bm, config.bn) if kind == "hopper" and config.stage_data else None
        found = kernel(Build(kind, config, _cc(self.device_id), block), fused.epilog, fused.kinds, staged,
                       self.device_id)
        return found, found.arguments()

    def _plan_generic(self):
        from ...device import _gemm_kernel as K

        p = self.problem
        precision = p.a.dtype.name
        config = K.GenericConfig(precision, p.d.dtype.name, has_c=p.c is not None, epilog=True,
                                 operands=len(p.fused.operands), checked=self._checked)
        self._generic_config = config
        self._generic = self._kernel("generic", config, (config.bm, config.bn, config.bk, precision,
                                                         config.block_size))

    def autotune(self, operands, stream=None, iterations=3):
        """cuBLASLt's routes time the product's candidates; mathpy's kernels have one algorithm: run it, return
        ``[(name, None)]``."""
        if self._product is not None:
            operands = dict(operands)
            args = self._library_arguments(**{k: operands[k] for k in ("a", "b", "c", "d", "epilog_inputs", "alpha",
                                                                        "beta")}) if self._plan else \
                dict(operands, epilog_inputs={}, epilog_outputs={})
            return self._product.autotune(args, stream, iterations)
        self.execute(**dict(operands, stream=stream))
        return [(self.algorithms[0], None)]

    def execute(self, a, b, c, d, epilog_inputs, epilog_outputs, alpha, beta, stream=None):
        if self._plan is not None:
            self._product.execute(**self._library_arguments(a, b, c, d, epilog_inputs, alpha, beta), stream=stream)
            return
        if self._checked:  # before anything is queued: the capture stays valid
            refuse_checked_capture(self._package, self.device_id, stream)
        if self._pass is not None:
            self._product.execute(a, b, c, d, {}, {}, alpha, beta, stream)
            self._pass.execute(d, epilog_inputs, 0 if stream is None else stream)
            return
        p = self.problem
        stream = 0 if stream is None else stream
        values = {"d_ptr": d, "c_ptr": c or 0, "m": p.m, "n": p.n, "k": p.k, "ldd": p.d.ld,
                  "ldc": p.c.ld if p.c is not None else 0, "d_batch": p.d.batch_stride if p.batch > 1 else 0,
                  "c_batch": (p.c.batch_stride if p.c is not None and p.batch > 1 else 0),
                  "alpha": float(np.real(alpha)), "beta": float(np.real(beta))}
        values.update(operand_values(p.fused.operands, epilog_inputs, self._checked))
        with _runtime.device_scope(self.device_id):
            if self._hopper is not None and a % 16 == 0 and b % 16 == 0:
                launched = self._launch_hopper(a, b, d, values, stream)
            else:
                launched = self._launch_generic(a, b, values, stream)
            if self._checked:
                raise_recorded(launched.record, p.fused, stream)

    def _hopper_variant(self, d, data_ptr):
        """The planned kernel, or (an unaligned D or staged operand at this execute) the variant without tile stores
        / staged data."""
        config = self._hopper_config
        stage = config.stage_data and data_ptr % 16 == 0
        store = config.store_tile and d % 16 == 0
        if (stage, store) == (config.stage_data, config.store_tile):
            return config, self._hopper
        from ...device import _gemm_hopper as HK

        config = dataclasses.replace(config, stage_data=stage, batched_data=stage and config.batched_data,
                                     store_tile=store, batched_d=store and config.batched_d,
                                     stages=HK.max_stages(config.bn, stage or store))
        found = self._hopper_args.get(config)
        if found is None:
            found = self._hopper_args[config] = self._kernel("hopper", config)
        return config, found

    def _launch_hopper(self, a, b, d, values, stream):
        p = self.problem
        config, (kern, arguments) = self._hopper_variant(d, values.get("o0_ptr", 0))
        first = p.fused.operands[0][1] if p.fused.operands else None
        staged = None
        if config.stage_data:
            staged = (values["o0_ptr"], first.strides[-2], first.strides[0] if first.ndim == 3 else 0)
        maps = _encode_maps(config, p, a, b, staged, d)
        buffer = self._package.on(self.device_id, stream).empty((128 * len(maps),), np.uint8)
        address = self._package.pointer(buffer)
        if self._package.is_capturing(self.device_id, stream):
            host = _PinnedMaps(maps)
            _runtime.copy_host_to_device(address, host.pointer, 128 * len(maps), stream)
            keep_for_graph(self, self._package, self.device_id, stream, host, pooled=False)
            keep_for_graph(self, self._package, self.device_id, stream, buffer)
        else:
            _upload(address, maps, stream)
        tiles_m, tiles_n = -(-p.m // config.bm), -(-p.n // config.bn)
        extra = iter(range(2, len(maps)))
        values.update(tmap_a=address, tmap_b=address + 128,
                      tmap_data=address + 128 * next(extra) if config.stage_data else 0,
                      tmap_d=address + 128 * next(extra) if config.store_tile else 0,
                      batches=p.batch, tiles_m=tiles_m, tiles_n=tiles_n)
        arguments.update(values)
        # persistent: one block per SM (or per tile when there are fewer)
        kern.launch((min(tiles_m * tiles_n * p.batch, self._sms), 1, 1), stream, arguments)
        self._keep = (buffer, maps)  # alive until the copy is staged and the launch enqueued
        return kern

    def _launch_generic(self, a, b, values, stream):
        if self._generic is None:
            self._plan_generic()
        (kern, arguments), config, p = self._generic, self._generic_config, self.problem
        tiles_m, tiles_n = -(-p.m // config.bm), -(-p.n // config.bn)
        values.update(a_ptr=a, b_ptr=b, ldc=p.c.row_stride if p.c is not None else 0,
                      c_cs=p.c.col_stride if p.c is not None else 0, a_rs=p.a.row_stride, a_cs=p.a.col_stride,
                      a_batch=p.a.batch_stride if p.batch > 1 else 0, b_rs=p.b.row_stride, b_cs=p.b.col_stride,
                      b_batch=p.b.batch_stride if p.batch > 1 else 0, tiles_m=tiles_m, tiles_n=tiles_n)
        arguments.update(values)
        kern.launch((tiles_m * tiles_n, p.batch, 1), stream, arguments)
        return kern

    def release_workspace(self):
        if self._product is not None:
            from ._algorithms import release_workspace

            release_workspace(self._product)

    def free(self):
        """The cuBLASLt engine of a library / elementwise route is freed; kernels are shared by every plan of the
        process (kept until exit)."""
        self._keep = None
        if self._product is not None:
            self._product.free()


def _store_tile_ok(p):
    """D can leave through bulk tensor stores: 16-bit, row-major, rows and batches 16-byte multiples apart."""
    d = p.d
    return (d.dtype.name in ("bfloat16", "float16") and d.col_stride == 1 and (d.row_stride * 2) % 16 == 0
            and (p.batch == 1 or (d.batch_stride * 2) % 16 == 0))


def _stage_data_ok(data, p):
    """Operand 0 can be staged tile by tile: 16 bits, the result's shape (with or without the batch axis), rows
    contiguous and 16-byte multiples apart."""
    if data is None or data.dtype not in ("bfloat16", "float16", "int16"):
        return False
    if data.shape not in ((p.m, p.n), (p.batch, p.m, p.n)):
        return False
    strides = data.strides
    return (strides[-1] == 1 and (strides[-2] * 2) % 16 == 0 and strides[-2] >= p.n
            and (data.ndim == 2 or p.batch == 1 or (strides[0] * 2) % 16 == 0))


def hopper_config(p, data, stage, store, checked=False):
    """The wgmma kernel's configuration for problem ``p`` whose operand 0 is ``data`` (``CONFIG_OVERRIDE``
    applied; ``checked``: the check_bounds build)."""
    from ...device import _gemm_hopper as HK

    bn = CONFIG_OVERRIDE.get("bn", hopper_tile_n(p.n))
    stage = stage and CONFIG_OVERRIDE.get("stage_data", True)
    store = store and CONFIG_OVERRIDE.get("store_tile", True)
    stages = CONFIG_OVERRIDE.get("stages") or HK.max_stages(bn, stage or store)
    return HK.HopperConfig(
        p.a.dtype.name, p.d.dtype.name, bn=bn, stages=stages, a_mn_major=p.a.row_stride == 1 and p.m > 1,
        b_mn_major=p.b.col_stride == 1 and p.n > 1, batched_a=p.a.batch > 1 and p.a.batch_stride != 0,
        batched_b=p.b.batch > 1 and p.b.batch_stride != 0, has_c=p.c is not None, epilog=True,
        operands=len(p.fused.operands), checked=checked, edges=bool(p.m % HK.HopperConfig.bm or p.n % bn),
        stage_data=stage,
        batched_data=stage and data.ndim == 3, store_tile=store, batched_d=store and p.batch > 1)


def _check(result, what):
    status = result[0]
    if int(status) != 0:
        raise CUDALibraryError("cuda", what, int(status), getattr(status, "name", str(status)))
    return result[1]


def _encode_maps(config, p, a, b, data=None, d=None):
    """The CUtensorMap objects of this execute (A, B, then the staged operand and D when the config uses them);
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

