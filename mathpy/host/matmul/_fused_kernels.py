"""The GPU kernels of Python matmul epilogs: built from a kernel compiled once per configuration (a *skeleton*) and
the epilog compiled on its own, linked with nvJitLink, cached, loaded and launched.

Where the first call's time goes, and what is cached (measured on a 2-core CI machine; the H200's host is faster):
the old way compiled the user's function inside the whole Hopper kernel with numba-cuda, about 170 s there (numba's
front end on a kernel of 1,100 generated lines with every value's epilog unrolled four times), then the driver
compiled the PTX. Now:

1. **skeleton** (:mod:`mathpy.device._gemm_build`: the kernel, calling the external epilog function): compiled once
   per configuration and compute capability, whatever the epilog, and kept on disk as LTO-IR;
2. **epilog** (:mod:`mathpy.jit._epilog_wrapper`): 0.1-0.5 s of numba-cuda, kept on disk as LTO-IR;
3. **link** (:mod:`mathpy.jit._link`): nvJitLink inlines 2 into 1 and ptxas makes a cubin (about a second for the
   Hopper kernel), kept on disk;
4. **load**: ``cuModuleLoadData`` of the cubin, milliseconds, no numba-cuda import.

Keys (all through :mod:`mathpy.jit._cache`'s store): the skeleton's configuration (``checked`` included: a
check_bounds build is another skeleton and another epilog function, so checked and unchecked kernels never share an
entry), the sources of the device code generators, the compute capability, the toolchain (numba, numba-cuda,
llvmlite installs, CUDA_HOME) and mathpy's version; the cubin's adds the epilog's key (its code and the values of the
globals and closures it reads, the operands' dtypes and dimensions), the link options and nvJitLink's version. A new
process with the same function and dtypes goes straight to 4. A checked kernel's module also holds its bounds record,
whose address is looked up when it is loaded (:mod:`._fused_bounds`).
"""

import ctypes
import dataclasses
import hashlib
import os
import threading

from ... import _runtime
from ..._errors import CUDALibraryError
from ..._log import logger
from ...jit import _cache

__all__ = ["Build", "Kernel", "kernel", "linked", "cubin_key", "skeleton_ltoir"]

_lock = threading.Lock()
_loaded = {}  # (cubin key or identity, device) -> Kernel
_skeletons = {}  # skeleton key -> (LTO-IR, params)
_SOURCES = ("device/_gemm_kernel.py", "device/_gemm_hopper.py", "device/_gemm_build.py", "device/_hopper.py",
            "device/_matmul.py", "device/_intrinsics.py", "device/_codegen.py", "device/_epilog_pass.py",
            "device/_pass_access.py")
_sources_digest = []


def _digest():
    """A hash of the device code generators' sources: a skeleton on disk is rebuilt when any of them changes."""
    if not _sources_digest:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        h = hashlib.sha256()
        for name in _SOURCES:
            with open(os.path.join(root, name), "rb") as f:
                h.update(f.read())
        _sources_digest.append(h.hexdigest()[:16])
    return _sources_digest[0]


@dataclasses.dataclass(frozen=True)
class Build:
    """One skeleton: ``kind`` "hopper" (a :class:`~mathpy.device._gemm_hopper.HopperConfig`), "generic" (a
    :class:`~mathpy.device._gemm_kernel.GenericConfig` with the block GEMM's ``block`` arguments) or "pass" (a
    :class:`~mathpy.device._epilog_pass.PassConfig`), for compute capability ``cc``."""

    kind: str
    config: object
    cc: tuple
    block: tuple = ()

    @property
    def result(self):
        return self.config.out

    @property
    def arch(self):
        return "sm_90a" if self.kind == "hopper" else f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def link_options(self):
        """float32 divisions as ``div.full.f32`` in the Hopper kernel with a 16-bit result (see
        :mod:`mathpy.jit._matmul_epilog`)."""
        if self.kind == "hopper" and self.config.out in ("bfloat16", "float16"):
            return ("-Xnvvm=-prec-div=0",)
        return ()

    @property
    def key(self):
        from ... import __version__

        parts = (self.kind, repr(self.config), self.block, tuple(self.cc), _digest(), __version__,
                 _cache.toolchain_id())
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def description(self):
        from ...device import matmul as block_matmul

        bm, bn, bk, precision, block_size = self.block
        return block_matmul(bm, bn, bk, precision, block_size=block_size, a_arrangement="col_major")

    def compile(self):
        """(LTO-IR, parameter names) of the skeleton (numba-cuda: seconds to a minute)."""
        from ...device import _gemm_build

        if self.kind == "hopper":
            ltoir, params, _ = _gemm_build.hopper_ltoir(self.config, self.cc)
        elif self.kind == "generic":
            ltoir, params, _ = _gemm_build.generic_ltoir(self.config, self.description(), self.cc)
        else:
            ltoir, params, _ = _gemm_build.pass_ltoir(self.config, self.cc)
        return ltoir, params

    def launch_facts(self):
        """(threads per block, dynamic shared memory bytes)."""
        if self.kind == "hopper":
            return self.config.threads, self.config.shared_memory_size
        if self.kind == "generic":
            return self.config.block_size, self.description().shared_memory_size_ab
        return self.config.threads, 0


def skeleton_ltoir(build):
    """(LTO-IR, parameter names) of ``build``'s skeleton: from memory, the disk cache, or compiled."""
    key = build.key
    found = _skeletons.get(key)
    if found is None:
        entry = _cache.load_entry(key)
        if entry is not None:
            found = entry[1], tuple(entry[0]["params"])
        else:
            ltoir, params = build.compile()
            found = ltoir, tuple(params)
            _cache.store_entry(key, {"kind": f"matmul-{build.kind}-skeleton", "params": list(params)}, ltoir)
        _skeletons[key] = found
    return found


def kernel(build, epilog, kinds, staged, device_id):
    """The loaded :class:`Kernel` of ``build`` with ``epilog`` (a MatmulEpilogFunction; ``kinds``: its operands'
    (dtype, ndim) or None; ``staged``: (bm, bn) of a staged operand 0) on ``device_id``. Cached in memory and on disk
    (see the module docstring)."""
    key = cubin_key(build, epilog, kinds, staged)
    memory_key = (key or (build, epilog.function, tuple(kinds), staged), device_id)
    with _lock:
        found = _loaded.get(memory_key)
        if found is None:
            cubin, header, _ = linked(build, epilog, kinds, staged, key)
            found = Kernel(cubin, header, device_id)
            if build.config.checked:
                from ._fused_bounds import record_address

                with _runtime.device_scope(device_id):
                    found.record = record_address(found.module)
            _loaded[memory_key] = found
        return found


def cubin_key(build, epilog, kinds, staged):
    """The disk key of the linked kernel (None: the epilog cannot be fingerprinted: built once per process)."""
    from ...jit import _epilog_wrapper as W
    from ...jit import _link

    wrapper_key = W.wrapper_key(epilog, kinds, _compute(build), staged, build.cc, build.config.checked)
    if wrapper_key is None:
        return None
    parts = (build.key, wrapper_key, build.arch, build.link_options, _link.linker_version())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def linked(build, epilog, kinds, staged, key=None):
    """``(cubin, header, "disk" or "built")`` of the linked kernel: from the disk cache under ``key``, or built (and
    stored there)."""
    entry = _cache.load_entry(key) if key is not None else None
    if entry is not None:
        logger.debug("matmul epilog %s: kernel %s loaded from the disk cache", epilog.where, build.kind)
        return entry[1], entry[0], "disk"
    cubin, header = _link_kernel(build, epilog, kinds, staged)
    if key is not None:
        _cache.store_entry(key, header, cubin)
    return cubin, header, "built"


def _compute(build):
    from ...device._gemm_kernel import COMPUTE_OF

    return COMPUTE_OF[build.result]


def _link_kernel(build, epilog, kinds, staged):
    from ...device._gemm_kernel import EPILOG_SYMBOL
    from ...jit import _epilog_wrapper as W
    from ...jit import _link

    skeleton, params = skeleton_ltoir(build)
    wrapper, _ = W.wrapper_ltoir(epilog, kinds, build.result, staged, build.cc, build.config.checked)
    cubin, ptx = _link.link({"kernel": skeleton, "epilog": wrapper}, build.arch, build.link_options,
                            inlined=EPILOG_SYMBOL)
    threads, shared = build.launch_facts()
    real = "float64" if _compute(build) == "float64" else "float32"
    header = {"name": _link.entry_name(ptx), "params": list(params), "threads": threads, "shared": shared,
              "real": real, "function": epilog.where, "kind": f"matmul-{build.kind}"}
    return cubin, header


def _check(result, what):
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise CUDALibraryError("cuda", what, int(status), getattr(status, "name", str(status)))
    if isinstance(result, tuple) and len(result) == 2:
        return result[1]
    return None


class Kernel:
    """A loaded kernel: its CUfunction, parameter names and ctypes, block size and dynamic shared memory; ``record``:
    the device address of a checked build's bounds record (:mod:`._fused_bounds`), else None."""

    record = None

    def __init__(self, cubin, header, device_id):
        from cuda.bindings import driver

        self.name, self.params = header["name"], tuple(header["params"])
        self.threads, self.shared_bytes = header["threads"], header["shared"]
        real = ctypes.c_double if header["real"] == "float64" else ctypes.c_float
        self.ctypes = tuple(ctypes.c_uint64 if (p.endswith("_ptr") or p.startswith("tmap_")) else
                            real if p in ("alpha", "beta") else ctypes.c_int64 for p in self.params)
        with _runtime.device_scope(device_id):
            _runtime.bind_primary_context(device_id)
            self.module = _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
            self.function = _check(driver.cuModuleGetFunction(self.module, self.name.encode()), "cuModuleGetFunction")
            if self.shared_bytes > 48 * 1024:
                attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(driver.cuFuncSetAttribute(self.function, attr, self.shared_bytes), "cuFuncSetAttribute")

    def arguments(self):
        """A reusable argument block (one per engine: launches set the values that change)."""
        return Arguments(self)

    def launch(self, grid, stream, arguments):
        from cuda.bindings import driver

        _check(driver.cuLaunchKernel(self.function, grid[0], grid[1], grid[2], self.threads, 1, 1,
                                     self.shared_bytes, stream, arguments.address, 0), "cuLaunchKernel")


class Arguments:
    """The kernel's parameters as ctypes values and the ``void**`` array that points at them (built once: a launch
    passes its address, so the driver binding marshals nothing)."""

    def __init__(self, kernel):
        self.values = {name: kind(0) for name, kind in zip(kernel.params, kernel.ctypes)}
        self._pointers = (ctypes.c_void_p * len(kernel.params))(
            *(ctypes.addressof(self.values[name]) for name in kernel.params))
        self.address = ctypes.addressof(self._pointers)

    def update(self, values):
        """Set the parameters named in ``values`` (names the kernel does not take are ignored)."""
        own = self.values
        for name, value in values.items():
            slot = own.get(name)
            if slot is not None:
                slot.value = value
