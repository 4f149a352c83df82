"""Compiling the kernels of :mod:`._gemm_hopper`, :mod:`._gemm_kernel` and :mod:`._epilog_pass` to LTO-IR (no GPU
needed: the compute capability is given), without the user's epilog: each calls the external epilog function
(:data:`~._gemm_kernel.EPILOG_SYMBOL`) that the host links in with nvJitLink (:mod:`mathpy.jit._link`).

numba-cuda compiles a kernel for ``compute_XY``; ``wgmma`` and ``setmaxnreg`` need the architecture-specific
``sm_90a``, which the link asks for (``-arch=sm_90a``), and ``setmaxnreg`` needs a register cap at kernel entry:
``launch_bounds=(384, 1)`` (``.maxntid 384, 1, 1`` and ``.minnctapersm 1``).

Compiling calls of numba device functions asks numba-cuda for the current device's compute capability; on a machine
without a GPU :func:`compiling_for` answers with the target's, so every kernel here can be built on a CPU-only
machine (the tests do).
"""

import contextlib
import itertools
import linecache
import re
import threading
import types as pytypes

import numpy as np

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda
from . import _gemm_hopper as HK
from . import _gemm_kernel as K

__all__ = ["exec_source", "hopper_ltoir", "generic_ltoir", "pass_ltoir", "generic_simulator_kernel", "kernel_signature",
           "compiling_for", "hopper_constants"]

_counter = itertools.count()
_target_lock = threading.RLock()


def exec_source(source, namespace, tag):
    filename = f"<mathpy.device gemm kernel {tag} #{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    glb = dict(namespace)
    exec(compile(source, filename, "exec"), glb)
    return glb["kernel"]


@contextlib.contextmanager
def compiling_for(cc):
    """Compile for compute capability ``cc``: on a machine without a GPU, numba-cuda's question "which device is
    current" (asked when a kernel calls a device function) is answered with ``cc`` for the duration."""
    from .. import _cuda

    with _target_lock:
        if _cuda.is_available():
            yield
            return
        import numba.cuda.dispatcher as dispatcher

        saved = dispatcher.get_current_device
        dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=tuple(cc))
        try:
            yield
        finally:
            dispatcher.get_current_device = saved


def kernel_signature(params, compute):
    """numba argument types for the kernel parameters named ``params`` (pointers uint64, scalars alpha/beta in the
    compute precision, everything else int64)."""
    from numba import types

    out = []
    for name in params:
        if name.endswith("_ptr") or name.startswith("tmap_"):
            out.append(types.uint64)
        elif name in ("alpha", "beta"):
            out.append(types.float64 if compute == "float64" else types.float32)
        else:
            out.append(types.int64)
    return tuple(out)


def _ltoir(kernel, params, compute, cc, launch_bounds=None):
    from numba import cuda

    with compiling_for(cc):
        ltoir, _ = cuda.compile(kernel, kernel_signature(params, compute), device=False, abi="numba",
                                output="ltoir", cc=tuple(cc), opt=True, launch_bounds=launch_bounds)
    return ltoir


def hopper_namespace(config):
    patch_numpy_for_numba_cuda()
    from numba import cuda

    from . import _hopper as H

    n_acc = config.bn // 2
    assert n_acc in (64, 128)
    ab = "bf16" if config.ab == "bfloat16" else "f16"
    ns = hopper_constants(config)
    ns.update({
        "np": np, "cuda": cuda,
        "SMEM_ADDRESS": H.smem_address, "MBAR_INIT": H.mbar_init, "FENCE_BARRIER_INIT": H.fence_barrier_init,
        "SETMAXNREG_DEC": H.setmaxnreg_dec(config.registers[0]),
        "SETMAXNREG_INC": H.setmaxnreg_inc(config.registers[1]),
        "MBAR_TRY_WAIT": H.mbar_try_wait, "MBAR_EXPECT_TX": H.mbar_arrive_expect_tx, "MBAR_ARRIVE": H.mbar_arrive,
        "TMA2": H.tma_load_2d, "TMA3": H.tma_load_3d, "WGMMA_FENCE": H.wgmma_fence,
        "WGMMA_COMMIT": H.wgmma_commit, "WGMMA_WAIT0": H.wgmma_wait0, "WGMMA_WAIT1": H.wgmma_wait1,
        "WGMMA": H.wgmma(config.bn, ab, config.a_mn_major, config.b_mn_major),
        "AXPBY": H.axpby_element(config.out), "STORE_ONE": H.store_element(config.out),
        "STORE_PAIR": H.store_pair(config.out), "STORE_EDGE": H.store_pair_edge(config.out), "ZEROS": H.zeros(n_acc),
        "SCALE": H.scale_tuple(n_acc),
        "TMA_STORE2": H.tma_store_2d, "TMA_STORE3": H.tma_store_3d, "BULK_COMMIT": H.bulk_commit,
        "BULK_WAIT_READ": H.bulk_wait_read, "BULK_WAIT": H.bulk_wait, "CONSUMERS_SYNC": H.named_barrier(1, 256),
        "SYNCWARP": H.syncwarp, "ST_SHARED": H.st_shared_u32, "OPAQUE": H.opaque_u32,
        "FENCE_PROXY_ASYNC": H.fence_proxy_async,
    })
    if config.store_tile:
        ns["PACK"] = H.pack_pair(config.out)
    if config.epilog:
        ns["EPI"] = K.epilog_declaration("float32", config.operands, config.stage_data, config.checked)
    return ns


def hopper_constants(config):
    """The plain values the Hopper kernel's source names (shared by the GPU build and the simulator)."""
    from . import _hopper as H

    from numba import types

    a_desc = H.wgmma_descriptor(0, 512 if config.a_mn_major else 1, 64)
    b_desc = H.wgmma_descriptor(0, 512 if config.b_mn_major else 1, 64)
    return {"BYTE": types.uint8, "U32": np.uint32, "U64": np.uint64, "INT64": np.int64, "ZERO": np.float32(0),
            "COMPUTE": np.float32,
            "DSIZE": np.dtype(config.out).itemsize, "DESC_A": np.uint64(a_desc), "DESC_B": np.uint64(b_desc),
            "GROUP_M": config.group_m, "BM": config.bm, "BN": config.bn}


def hopper_params(config):
    return list(HK.HOPPER_PARAMS) + (K.operand_params(config.operands, config.checked) if config.epilog else [])


def hopper_ltoir(config, cc=(9, 0)):
    """(LTO-IR, parameter names, source) of the Hopper kernel for ``config``; link it for ``sm_90a``."""
    if tuple(cc) != (9, 0):
        raise ValueError(f"the wgmma kernel needs compute capability 9.0 (sm_90a), not {cc}")
    source = HK.hopper_source(config)
    kernel = exec_source(source, hopper_namespace(config), "hopper")
    params = hopper_params(config)
    return _ltoir(kernel, params, "float32", cc, launch_bounds=(config.threads, 1)), params, source


def _generic_namespace(config, description, simulator=False):
    from numba import cuda, from_dtype

    compute = np.float64 if config.out == "float64" or config.precision == "float64" else np.float32
    storage = description.storage_dtype
    a_row_major = description.a_arrangement == "row_major"
    lda = description.lda

    def a_index(i, p):
        return i * lda + p if a_row_major else p * lda + i

    jit = cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)
    return {"np": np, "cuda": cuda, "U32": np.uint32, "U64": np.uint64, "INT64": np.int64, "GEMM": description,
            "STORAGE": from_dtype(storage), "COMPUTE": from_dtype(np.dtype(compute)), "ZERO": compute(0),
            "ZERO_S": storage.type(0), "A_SIZE": description.a_size, "B_SIZE": description.b_size,
            "ACC_SIZE": description.accumulator_size, "LDB": description.ldb, "A_INDEX": jit(a_index),
            "ASIZE": storage.itemsize, "DSIZE": np.dtype(config.out).itemsize}


def generic_ltoir(config, description, cc):
    """(LTO-IR, parameter names, source) of the generic kernel for ``config`` built on the block GEMM
    ``description`` (a :class:`~._matmul.MatmulDescription` of ``bm x bn x bk``)."""
    patch_numpy_for_numba_cuda()
    from . import _hopper as H
    from ._matmul import accumulator_owners

    header, owners = accumulator_owners(description)
    compute = "float64" if config.out == "float64" or config.precision == "float64" else "float32"
    with compiling_for(cc):
        ns = _generic_namespace(config, description)
        ns.update(LOAD_S=_raw_load(description.storage_dtype), LOAD_C=H.load_element(config.out),
                  STORE_ONE=H.store_element(config.out))
        if config.epilog:
            ns["EPI"] = K.epilog_declaration(compute, config.operands, checked=config.checked)
        source = K.generic_source(config, owners, header, description.accumulator_size)
        kernel = exec_source(source, ns, "generic")
        params = list(K.GENERIC_PARAMS) + (K.operand_params(config.operands, config.checked) if config.epilog else [])
        return _ltoir(kernel, params, compute, cc), params, source


def pass_ltoir(config, cc):
    """(LTO-IR, parameter names, source) of the elementwise pass (:mod:`._epilog_pass`) for ``config``."""
    from . import _epilog_pass as P

    patch_numpy_for_numba_cuda()
    source = P.pass_source(config)
    kernel = exec_source(source, P.pass_namespace(config), "pass")
    params = list(P.PASS_PARAMS) + K.operand_params(config.operands, config.checked)
    bounds = (config.threads, P.MIN_BLOCKS)
    return _ltoir(kernel, params, K.COMPUTE_OF[config.out], cc, launch_bounds=bounds), params, source


def generic_simulator_kernel(config, description, epilog_fn, extra=None):
    """The generic kernel for ``config`` as a simulator kernel (numba's CUDA simulator must be on): the same source,
    with the address intrinsics implemented on host memory (``tests/_gemm_sim.py``) and ``epilog_fn`` the epilog function
    of the calling convention (:func:`mathpy.jit._epilog_wrapper.simulator_function`)."""
    from numba import cuda

    from ._codegen import simulator_enabled
    from ._matmul import accumulator_owners

    if not simulator_enabled():
        raise RuntimeError("generic_simulator_kernel needs numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    header, owners = accumulator_owners(description)
    ns = _generic_namespace(config, description, simulator=True)
    ns["EPI"] = epilog_fn
    ns.update(extra or {})
    source = K.generic_source(config, owners, header, description.accumulator_size)
    return cuda.jit(exec_source(source, ns, "generic-sim"))


def _raw_load(storage):
    """``f(address) -> storage value``: one element of the operand's storage type at a generic address."""
    from numba import from_dtype, types
    from numba.cuda.extending import intrinsic

    nb = from_dtype(storage)

    @intrinsic
    def load(typingctx, address):
        if not isinstance(address, types.Integer):
            return None
        sig = nb(address)

        def codegen(context, builder, signature, args):
            addr = context.cast(builder, args[0], signature.args[0], types.uint64)
            ptr = builder.inttoptr(addr, context.get_value_type(nb).as_pointer())
            return builder.load(ptr, align=storage.itemsize)

        return sig, codegen

    return load


def ptxas_report(ptx, arch="sm_90a"):  # pragma: no cover - development helper (needs ptxas on PATH)
    """Run ``ptxas -v`` on ``ptx``; returns its stderr (registers, spills, warnings)."""
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:  # the toolkit's ptxas may be older than the NVVM that wrote the PTX
            f.write(re.sub(r"^\.version \d+\.\d+", ".version 9.0", ptx, count=1, flags=re.M))
        out = subprocess.run(["ptxas", f"-arch={arch}", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True)
        return out.stdout + out.stderr
