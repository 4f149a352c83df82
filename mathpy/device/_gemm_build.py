"""Compiling the whole-GEMM kernels of :mod:`._gemm_hopper` and :mod:`._gemm_kernel` to PTX (no GPU needed: the
compute capability is given).

numba-cuda compiles a kernel for ``compute_XY`` and its PTX says ``.target sm_XY``; ``wgmma`` and ``setmaxnreg`` need
the architecture-specific ``sm_90a``, and ``setmaxnreg`` needs a register cap at kernel entry. Both are added to the
PTX text here (``.target sm_90a``, ``.maxntid 384, 1, 1``, ``.minnctapersm 1``); the driver then compiles the PTX
for the GPU at load time.
"""

import linecache
import itertools
import re

import numpy as np

from .._compat import patch_numpy_for_numba_cuda
from . import _gemm_hopper as HK
from . import _gemm_kernel as K

__all__ = ["hopper_ptx", "generic_ptx", "generic_simulator_kernel", "kernel_signature", "patch_ptx"]

_counter = itertools.count()


def _exec(source, namespace, tag):
    filename = f"<mathpy.device gemm kernel {tag} #{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    glb = dict(namespace)
    exec(compile(source, filename, "exec"), glb)
    return glb["kernel"]


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


def patch_ptx(ptx, arch_specific=False, max_threads=None, blocks_per_sm=1):
    """The PTX with ``.target sm_XYa`` (``arch_specific``) and ``.maxntid`` / ``.minnctapersm`` on its kernels."""
    if arch_specific:
        ptx, count = re.subn(r"^\.target sm_(\d+)\b(?!a)", r".target sm_\1a", ptx, count=1, flags=re.M)
        if count != 1:
            raise RuntimeError("no .target line found in the PTX numba-cuda produced")
    if max_threads:
        directives = rf"\1\n.maxntid {max_threads}, 1, 1\n.minnctapersm {blocks_per_sm}"
        ptx, count = re.subn(r"(\.entry\s+[\w$]+\s*\([^)]*\))", directives, ptx, flags=re.S)
        if count < 1:
            raise RuntimeError("no .entry found in the PTX numba-cuda produced")
    return ptx


def full_range_division(ptx):
    """The PTX with its IEEE float32 divisions (``div.rn.f32``) made ``div.full.f32`` (full range, at most 2 ulp).
    ptxas expands each ``div.rn.f32`` into a fast path and a branch to a slow path for rare operands; those branches
    split the epilog into one scheduling region per division, so the elements' dependent chains (exp, reciprocal,
    fix-ups) run one after another. Applied to kernels with a 16-bit result, where 2 float32 ulp (2^-22) are far
    below the result's rounding (2^-9 for bf16, 2^-11 for fp16)."""
    return re.sub(r"\bdiv\.rn\.f32\b", "div.full.f32", ptx)


def entry_name(ptx):
    found = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if not found:
        raise RuntimeError("no .entry found in the PTX numba-cuda produced")
    return found.group(1)


def _epilog_namespace(ns, epilog_fn, make_data):
    if epilog_fn is not None:
        ns["EPI"] = epilog_fn
    if make_data is not None:
        ns["MAKE_DATA"] = make_data


def hopper_namespace(config, epilog_fn=None, make_data=None):
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
        "LOAD_C": H.load_element(config.out), "STORE_ONE": H.store_element(config.out),
        "STORE_PAIR": H.store_pair(config.out), "ZEROS": H.zeros(n_acc),
        "TMA_STORE2": H.tma_store_2d, "TMA_STORE3": H.tma_store_3d, "BULK_COMMIT": H.bulk_commit,
        "BULK_WAIT_READ": H.bulk_wait_read, "BULK_WAIT": H.bulk_wait, "CONSUMERS_SYNC": H.named_barrier(1, 256),
        "SYNCWARP": H.syncwarp, "ST_SHARED": H.st_shared_u32, "OPAQUE": H.opaque_u32,
        "FENCE_PROXY_ASYNC": H.fence_proxy_async,
    })
    if config.store_tile:
        ns["PACK"] = H.pack_pair(config.out)
    _epilog_namespace(ns, epilog_fn, make_data)
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


def hopper_ptx(config, cc=(9, 0), epilog_fn=None, make_data=None):
    """(PTX for sm_90a, entry name, parameter names) of the Hopper kernel for ``config``."""
    if tuple(cc) != (9, 0):
        raise ValueError(f"the wgmma kernel needs compute capability 9.0 (sm_90a), not {cc}")
    from numba import cuda

    source = HK.hopper_source(config)
    kernel = _exec(source, hopper_namespace(config, epilog_fn, make_data), "hopper")
    params = list(HK.HOPPER_PARAMS) + (list(K.DATA_PARAMS) if config.has_data else [])
    ptx, _ = cuda.compile_ptx(kernel, kernel_signature(params, "float32"), cc=tuple(cc))
    ptx = patch_ptx(ptx, arch_specific=True, max_threads=config.threads, blocks_per_sm=1)
    if config.out in ("bfloat16", "float16"):
        ptx = full_range_division(ptx)
    return ptx, entry_name(ptx), params, source


def generic_ptx(config, description, cc, epilog_fn=None, make_data=None):
    """(PTX, entry name, parameter names) of the generic kernel for ``config`` built on the block GEMM
    ``description`` (a :class:`~._matmul.MatmulDescription` of ``bm x bn x bk``)."""
    patch_numpy_for_numba_cuda()
    from numba import cuda, from_dtype

    from . import _hopper as H
    from ._matmul import _owners

    header, owners = _owners(description)
    compute = "float64" if config.out == "float64" or config.precision == "float64" else "float32"
    ct = np.float64 if compute == "float64" else np.float32
    storage = description.storage_dtype
    a_row_major = description.a_arrangement == "row_major"
    lda = description.lda

    def a_index(i, p):
        return i * lda + p if a_row_major else p * lda + i

    a_index = cuda.jit(device=True, forceinline=True)(a_index)
    ns = {"np": np, "cuda": cuda, "U32": np.uint32, "U64": np.uint64, "INT64": np.int64, "GEMM": description,
          "STORAGE": from_dtype(storage), "COMPUTE": from_dtype(np.dtype(ct)), "ZERO": ct(0),
          "ZERO_S": storage.type(0), "A_SIZE": description.a_size, "B_SIZE": description.b_size,
          "ACC_SIZE": description.accumulator_size, "LDB": description.ldb, "A_INDEX": a_index,
          "ASIZE": storage.itemsize, "DSIZE": np.dtype(config.out).itemsize,
          "LOAD_S": _raw_load(storage), "LOAD_C": H.load_element(config.out), "STORE_ONE": H.store_element(config.out)}
    _epilog_namespace(ns, epilog_fn, make_data)
    source = K.generic_source(config, owners, header, description.accumulator_size)
    kernel = _exec(source, ns, "generic")
    params = list(K.GENERIC_PARAMS) + (list(K.DATA_PARAMS) if config.has_data else [])
    ptx, _ = cuda.compile_ptx(kernel, kernel_signature(params, compute), cc=tuple(cc))
    return ptx, entry_name(ptx), params, source


def generic_simulator_kernel(config, description, epilog_fn, data_kind=None):
    """The generic kernel for ``config`` as a simulator kernel (numba's CUDA simulator must be on): the same source,
    with the address intrinsics implemented on host memory (:mod:`._gemm_sim`)."""
    from numba import cuda, from_dtype

    from ._codegen import simulator_enabled
    from ._gemm_sim import simulator_namespace
    from ._matmul import _owners

    if not simulator_enabled():
        raise RuntimeError("generic_simulator_kernel needs numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    header, owners = _owners(description)
    compute = np.float64 if config.out == "float64" or config.precision == "float64" else np.float32
    storage = description.storage_dtype
    a_row_major = description.a_arrangement == "row_major"
    lda = description.lda

    def a_index(i, p):
        return i * lda + p if a_row_major else p * lda + i

    ns = {"np": np, "cuda": cuda, "U32": np.uint32, "U64": np.uint64, "INT64": np.int64, "GEMM": description,
          "STORAGE": from_dtype(storage), "COMPUTE": from_dtype(np.dtype(compute)), "ZERO": compute(0),
          "ZERO_S": storage.type(0), "A_SIZE": description.a_size, "B_SIZE": description.b_size,
          "ACC_SIZE": description.accumulator_size, "LDB": description.ldb, "A_INDEX": cuda.jit(device=True)(a_index),
          "ASIZE": storage.itemsize, "DSIZE": np.dtype(config.out).itemsize,
          "EPI": cuda.jit(device=True)(epilog_fn)}
    ns.update(simulator_namespace(config.precision, config.out, data_kind))
    source = K.generic_source(config, owners, header, description.accumulator_size)
    return cuda.jit(_exec(source, ns, "generic-sim"))


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
