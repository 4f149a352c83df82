"""The Hopper kernel of :mod:`._gemm_hopper` under numba's CUDA simulator, against NumPy.

numba's simulator runs a kernel's Python source with one Python thread per CUDA thread. Here the Hopper instructions
the kernel names are Python functions with the hardware's semantics as the PTX ISA describes them: mbarriers (arrival
counts, transaction bytes, phase parity), TMA tile copies and bulk tensor stores (128-byte swizzle, zero fill and
clipping outside the tensor), ``wgmma`` reading its operands from shared memory through the same descriptors, the
accumulator fragment of each thread, named barriers and warp barriers, packing to bf16/fp16. So the very source the
GPU compiles -- the persistent tile loop, the warp roles and their barrier protocol, the ring's phases across tiles,
the epilog buffer's swizzled addressing, edge tiles, batches -- runs here on the CPU; a missing arrival shows as a
deadlock (reported, not hung), a wrong address as a wrong result. What it cannot check is the hardware itself
(the GPU tests do).

Shared memory is the simulator's dynamic shared array, given the address :data:`SHARED_BASE`; tensor maps are
registered Python objects whose "address" is a key. Blocks run one after another, as the simulator runs them.

Run: ``NUMBA_ENABLE_CUDASIM=1 python tests/_hopper_sim.py [--quick]`` prints one JSON line per case of
:data:`SIM_HOPPER_CASES` (of :data:`SIM_HOPPER_QUICK` with ``--quick``); tests/test_matmul_fused_hopper.py does this
in a subprocess.
"""

import ctypes
import itertools
import json
import math
import sys
import threading
import time

import numpy as np

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

patch_numpy_for_numba_cuda()

from mathpy.device._gemm_hopper import tile_offset  # noqa: E402
from _gemm_sim import DataView, widen, bf16_round, simulator_namespace  # noqa: E402

__all__ = ["hopper_simulator_namespace", "run_hopper_case", "SIM_HOPPER_CASES", "SIM_HOPPER_QUICK", "SHARED_BASE"]

SHARED_BASE = 1024  # the shared "address" of the dynamic shared array (1024-aligned; descriptors hold 18 bits)
_DEADLINE_S = 120.0  # a wait longer than this is a deadlock of the kernel's protocol


def _swizzle(address):
    """TMA's / wgmma's 128-byte swizzle: bits 4-6 of a shared address XOR bits 7-9."""
    return address ^ (((address >> 7) & 7) << 4)


def _thread():
    return threading.current_thread()


class _TensorMap:
    """A tiled tensor map: 16-bit elements at a host address, dims innermost first, byte strides of the outer dims,
    box (inner, outer) with inner * 2 == 128 bytes (the only shape the kernel encodes)."""

    def __init__(self, address, dims, strides, box):
        self.address, self.dims, self.strides, self.box = int(address), list(dims), list(strides), tuple(box)
        assert self.box[0] * 2 == 128, box

    def rows(self, coords):
        """(row index in box, element offset in box row, host address, count) of the in-bounds pieces of a box."""
        coords = [int(x) for x in coords]
        lo, hi = max(coords[0], 0), min(coords[0] + self.box[0], self.dims[0])
        if hi <= lo or (len(coords) > 2 and not 0 <= coords[2] < self.dims[2]):
            return
        outer = self.address + (coords[2] * self.strides[1] if len(coords) > 2 else 0)
        for r in range(self.box[1]):
            row = coords[1] + r
            if 0 <= row < self.dims[1]:
                yield r, lo - coords[0], outer + row * self.strides[0] + 2 * lo, hi - lo


def _where():
    """Where the simulated threads are: kernel source line -> thread ids (a deadlock report)."""
    frames = sys._current_frames()
    lines = {}
    failed = [t for t in threading.enumerate() if getattr(t, "exception", None)]
    if failed:  # a thread that died leaves the others waiting for it: that is the error to report
        return f"{len(failed)} thread(s) failed first, e.g. {failed[0].exception[0]!r}"
    for thread in threading.enumerate():
        frame = frames.get(thread.ident)
        while frame is not None and not frame.f_code.co_filename.startswith("<mathpy.device gemm kernel"):
            frame = frame.f_back
        if frame is not None and hasattr(thread, "threadIdx"):
            lines.setdefault(frame.f_lineno, []).append(thread.threadIdx.x)
    return "threads at kernel source lines: " + ", ".join(
        f"{line}: {len(ids)} ({min(ids)}..{max(ids)})" for line, ids in sorted(lines.items()))


class _MBarrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = int(count), int(count), 0, 0


class _Machine:
    """Everything one launch shares: shared memory, mbarriers, tensor maps, barriers, wgmma products."""

    def __init__(self):
        self.lock = threading.Condition()
        self.smem = None
        self.mbars = {}
        self.maps = {}
        self.keys = itertools.count(1 << 40)
        self.named = {}
        self.warps = {}
        self.products = {}
        self.local = threading.local()

    # shared memory
    def offset(self, address, size):
        off = int(address) - SHARED_BASE
        if not 0 <= off <= len(self.smem) - size:
            raise RuntimeError(f"shared address {int(address):#x} out of the {len(self.smem)}-byte buffer")
        return off

    def read_u16(self, address):
        off = self.offset(address, 2)
        return int(self.smem[off]) | (int(self.smem[off + 1]) << 8)

    def write_bytes(self, address, data):
        off = self.offset(address, len(data))
        self.smem[off:off + len(data)] = np.frombuffer(data, np.uint8)

    # mbarriers
    def _complete(self, bar):
        if bar.pending == 0 and bar.tx == 0:
            bar.phase += 1
            bar.pending = bar.count
            self.lock.notify_all()

    def mbar(self, address):
        found = self.mbars.get(int(address))
        if found is None:
            raise RuntimeError(f"mbarrier at {int(address):#x} used before mbarrier.init")
        return found

    def arrive(self, address, tx=0):
        with self.lock:
            bar = self.mbar(address)
            bar.tx += int(tx)
            bar.pending -= 1
            if bar.pending < 0:
                raise RuntimeError(f"mbarrier at {int(address):#x}: more arrivals than its count {bar.count}")
            self._complete(bar)

    def complete_tx(self, address, nbytes):
        with self.lock:
            bar = self.mbar(address)
            bar.tx -= nbytes
            self._complete(bar)

    def try_wait(self, address, parity):
        deadline = time.monotonic() + _DEADLINE_S
        with self.lock:
            while True:
                bar = self.mbar(address)
                if (bar.phase & 1) != (int(parity) & 1):
                    return True
                if time.monotonic() > deadline:
                    raise RuntimeError(f"deadlock: {_thread()} waited {_DEADLINE_S} s on the "
                                       f"mbarrier at {int(address):#x} (parity {int(parity)}, phase {bar.phase}, "
                                       f"{bar.pending} arrivals and {bar.tx} bytes missing); {_where()}")
                self.lock.wait(0.05)

    def barrier(self, table, key, count):
        with self.lock:
            found = table.get(key)
            if found is None:
                found = table[key] = threading.Barrier(count, timeout=_DEADLINE_S)
        try:
            found.wait()
        except threading.BrokenBarrierError:
            raise RuntimeError(f"deadlock: {_thread()} waited {_DEADLINE_S} s at a barrier of {count} threads; "
                               f"{_where()}") from None


def hopper_simulator_namespace(config, machine):
    """Python implementations of every name the Hopper kernel's source uses but the simulator lacks."""
    from mathpy.device import _gemm_build
    from _gemm_sim import STORAGE_DTYPES

    ns = _gemm_build.hopper_constants(config)
    ns.update(simulator_namespace(config.ab, config.out))
    out = STORAGE_DTYPES[config.out]
    f16 = config.ab == "float16"
    n_acc = config.bn // 2

    def smem_address(arr):
        machine.smem = arr
        return np.uint32(SHARED_BASE)

    def mbar_init(address, count):
        with machine.lock:
            machine.mbars[int(address)] = _MBarrier(count)

    def tma_load(dst, tmap, *rest):
        *coords, mbar = rest
        spec = machine.maps[int(tmap)]
        box = np.zeros((spec.box[1], spec.box[0]), np.uint16)
        for r, first, address, count in spec.rows(coords):
            box[r, first:first + count] = np.frombuffer((ctypes.c_char * (2 * count)).from_address(address),
                                                        np.uint16)
        raw = box.tobytes()
        for chunk in range(len(raw) // 16):  # 16-byte chunks to their swizzled places
            machine.write_bytes(_swizzle(int(dst) + 16 * chunk), raw[16 * chunk:16 * chunk + 16])
        machine.complete_tx(mbar, len(raw))

    def tma_store(tmap, *rest):
        *coords, src = rest
        spec = machine.maps[int(tmap)]
        for r, first, address, count in spec.rows(coords):
            values = [machine.read_u16(_swizzle(int(src) + 128 * r + 2 * (first + e))) for e in range(count)]
            ctypes.memmove(address, np.array(values, np.uint16).tobytes(), 2 * count)

    def _operand(desc, rows, mn_major):
        """(rows x 16) values of a wgmma operand: rows along M (A) or N (B), 16 along K."""
        start = (int(desc) & 0x3FFF) << 4
        lbo = ((int(desc) >> 16) & 0x3FFF) << 4
        sbo = ((int(desc) >> 32) & 0x3FFF) << 4
        i = np.arange(rows)[:, None]
        kk = np.arange(16)[None, :]
        if mn_major:
            address = start + (i // 64) * lbo + (kk // 8) * sbo + (kk % 8) * 128 + 2 * (i % 64)
        else:
            address = start + (i // 8) * sbo + (i % 8) * 128 + 2 * kk
        off = _swizzle(address) - SHARED_BASE
        bits = machine.smem[off].astype(np.uint16) | (machine.smem[off + 1].astype(np.uint16) << 8)
        if f16:
            return bits.view(np.float16).astype(np.float64)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    def wgmma(desc_a, desc_b, acc):
        me = _thread()
        tid = me.threadIdx.x
        count = getattr(machine.local, "calls", 0)
        machine.local.calls = count + 1
        key = (tuple(me.blockIdx), tid // 128, count)
        with machine.lock:
            entry = machine.products.get(key)
            if entry is None:
                a = _operand(desc_a, 64, config.a_mn_major)
                b = _operand(desc_b, config.bn, config.b_mn_major)
                entry = machine.products[key] = [a @ b.T, 0]
            entry[1] += 1
            if entry[1] == 128:
                del machine.products[key]
        product = entry[0]
        w, lane = (tid // 32) % 4, tid % 32
        values = []
        for i in range(n_acc):
            row = 16 * w + lane // 4 + 8 * ((i % 4) // 2)
            col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
            values.append(np.float32(acc[i] + product[row, col]))
        return tuple(values)

    def pack(v0, v1):
        if config.out == "bfloat16":
            lo, hi = int(bf16_round(v0)), int(bf16_round(v1))
        else:
            lo, hi = (int(np.array([v], np.float16).view(np.uint16)[0]) for v in (v0, v1))
        return np.uint32(lo | (hi << 16))

    def st_shared(address, value):
        machine.write_bytes(address, int(value).to_bytes(4, "little"))

    def store_pair(row_address, col, v0, v1):
        ns["STORE_ONE"](row_address, col, v0)
        ns["STORE_ONE"](row_address, int(col) + 1, v1)

    def axpby(x, al, be, crow, col):
        v = al * x
        return v + be * ns["LOAD_C"](crow, col) if be != 0 else v

    def store_edge(row_address, col, v0, v1, n, row_ok):
        if row_ok and col < n:
            ns["STORE_ONE"](row_address, col, v0)
            if int(col) + 1 < n:
                ns["STORE_ONE"](row_address, int(col) + 1, v1)

    def nothing(*args):
        return None

    def warp_sync():
        machine.barrier(machine.warps, _thread().threadIdx.x // 32, 32)

    ns.update({
        "np": np, "SMEM_ADDRESS": smem_address, "MBAR_INIT": mbar_init, "FENCE_BARRIER_INIT": nothing,
        "SETMAXNREG_DEC": nothing, "SETMAXNREG_INC": nothing,
        "MBAR_TRY_WAIT": machine.try_wait, "MBAR_EXPECT_TX": lambda a, tx: machine.arrive(a, tx),
        "MBAR_ARRIVE": machine.arrive, "TMA2": tma_load, "TMA3": tma_load, "TMA_STORE2": tma_store,
        "TMA_STORE3": tma_store, "BULK_COMMIT": nothing, "BULK_WAIT_READ": nothing, "BULK_WAIT": nothing,
        # wgmma.wait_group is .sync.aligned: a warp's lanes reach it together, so none lags a ring cycle behind the
        # lane that releases the stage (Python threads would, and then alias the parity of an mbarrier phase)
        "WGMMA_FENCE": nothing, "WGMMA_COMMIT": nothing, "WGMMA_WAIT0": warp_sync, "WGMMA_WAIT1": warp_sync,
        "WGMMA": wgmma, "ZEROS": lambda: (np.float32(0),) * n_acc,
        "SCALE": lambda acc, al: tuple(np.float32(v * al) for v in acc), "PACK": pack, "ST_SHARED": st_shared,
        "OPAQUE": lambda x: x, "FENCE_PROXY_ASYNC": nothing, "STORE_PAIR": store_pair, "AXPBY": axpby,
        "STORE_EDGE": store_edge,
        "CONSUMERS_SYNC": lambda: machine.barrier(machine.named, 1, 256),
        "SYNCWARP": warp_sync,
    })
    assert out.itemsize in (2, 4, 8)
    return ns


class _StagedView(DataView):
    """The staged ``data`` view: the block's tile from the epilog buffer (:func:`~._gemm_hopper.tile_offset`),
    anything else from host memory."""

    def __init__(self, machine, kind, ptr, strides, sbase, b, m0, n0, bm, bn):
        super().__init__(kind, ptr, strides)
        self.machine, self.sbase, self.b, self.m0, self.n0, self.bm, self.bn = machine, sbase, b, m0, n0, bm, bn

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        row, col = int(index[-2]) - int(self.m0), int(index[-1]) - int(self.n0)
        inside = 0 <= row < self.bm and 0 <= col < self.bn and (len(index) < 3 or int(index[0]) == int(self.b))
        if inside:
            raw = self.machine.read_u16(int(self.sbase) + tile_offset(row, col, self.bm))
            return widen(np.uint16(raw) if self.kind == "bfloat16" else np.uint16(raw).view(np.float16), self.kind)
        return super().__getitem__(index)


# ---------------------------------------------------------------- cases against NumPy

def _store(x, kind):
    if kind == "bfloat16":
        u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.ascontiguousarray(x).astype({"float16": np.float16, "float32": np.float32}[kind])


def _value(x, kind):
    if kind == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _gate(value, row, col, data):
    """Reads its own element (the staged tile) and one 37 columns away (often outside the tile)."""
    return value / (np.float32(1) + math.exp(-value)) * data[row, col] + np.float32(0.25) * data[row, (col + 37) % 300]


def _batch_gate(value, batch, row, col, data):
    return value * data[batch, row, col] - np.float32(batch)


def _row_clamp(value, row, col, data):
    return min(max(value * data[row], np.float32(-1.5)), np.float32(1.5))


def _shift(value, row, col, data):
    return value + np.float32(0.01) * np.float32(col - row)


_EPILOGS = {"gate": _gate, "batch_gate": _batch_gate, "row_clamp": _row_clamp, "shift": _shift}


def run_hopper_case(m, n, k, batch, ab, out, epilog, layout, with_c, bn, grid, seed=0):
    """One Hopper-kernel case under the simulator; returns the max error relative to the largest reference value.
    ``layout``: "nn" (A row-major, B row-major), "tn" (A column-major), "nt" (B column-major); ``grid``: blocks of the
    persistent launch. The engine's own choice of stage_data / store_tile / stages for such operands is used."""
    from numba import cuda

    from mathpy.jit._epilog_wrapper import simulator_function
    from mathpy.jit._matmul_epilog import as_matmul_epilog
    from mathpy.device import _gemm_build, _gemm_hopper as HK
    from mathpy.device._gemm_kernel import operand_params

    rng = np.random.default_rng(seed)
    fn = _EPILOGS[epilog]
    a = _store(rng.standard_normal((batch, m, k)) / math.sqrt(k), ab)
    b = _store(rng.standard_normal((batch, k, n)), ab)
    if layout == "tn":
        a = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)
    if layout == "nt":
        b = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)
    c = _store(rng.standard_normal((batch, m, n)), out) if with_c else None
    alpha, beta = (0.75, -0.5) if with_c else (1.0, 0.0)
    data = None
    if epilog == "gate":
        data = _store(rng.standard_normal((m, n)), ab)
    elif epilog == "batch_gate":
        data = _store(rng.standard_normal((batch, m, n)), ab)
    elif epilog == "row_clamp":
        data = (rng.random(m) * 2).astype(np.float32)
    data_kind = None if data is None else (ab if data.dtype == np.uint16 or data.dtype == np.float16 else "float32")
    d = np.full((batch, m, n), 0xFFFF if out == "bfloat16" else np.nan, {"bfloat16": np.uint16, "float16": np.float16,
                                                                       "float32": np.float32}[out])
    stage = data is not None and data_kind in ("bfloat16", "float16")
    store = out in ("bfloat16", "float16")
    config = HK.HopperConfig(ab, out, bn=bn, stages=HK.max_stages(bn, stage or store), a_mn_major=layout == "tn",
                             b_mn_major=layout != "nt", batched_a=batch > 1, batched_b=batch > 1, has_c=with_c,
                             epilog=True, operands=1, edges=bool(m % 128 or n % bn), stage_data=stage,
                             batched_data=stage and data.ndim == 3, store_tile=store, batched_d=store and batch > 1)
    machine = _Machine()

    def element_layout(x):  # (address, leading dimension, batch stride) in elements
        item = x.itemsize
        rs, cs = x.strides[-2] // item, x.strides[-1] // item
        return x.ctypes.data, (rs if cs == 1 else cs), x.strides[0] // item if x.ndim == 3 else 0

    specs = HK.tensor_map_specs(config, m, n, k, batch, element_layout(a), element_layout(b),
                                element_layout(data) if stage else None, element_layout(d) if store else None)
    keys = []
    for spec in specs:
        keys.append(next(machine.keys))
        machine.maps[keys[-1]] = _TensorMap(*spec)
    # A, B, then the data map and D's map when the config has them (a map the kernel does not use is 0)
    keys = keys[:2] + ([keys.pop(2)] if stage else [0]) + ([keys[2]] if store else [0])
    ns = hopper_simulator_namespace(config, machine)
    ns["cuda"] = cuda

    def views(i, kind, ptr, strides, sbase, b, m0, n0):
        if stage and i == 0:
            return _StagedView(machine, kind[0], ptr, strides, sbase, b, m0, n0, config.bm, config.bn)
        return DataView(kind[0], ptr, strides)

    ns["EPI"] = simulator_function(as_matmul_epilog(fn, ("data",) if data is not None else None),
                                   ((data_kind, data.ndim),) if data is not None else (None,), views)
    kernel = cuda.jit(_gemm_build.exec_source(HK.hopper_source(config), ns, "hopper-sim"))
    tiles_m, tiles_n = -(-m // 128), -(-n // bn)
    values = {"tmap_a": keys[0], "tmap_b": keys[1], "tmap_data": keys[2], "tmap_d": keys[3], "d_ptr": d.ctypes.data,
              "c_ptr": c.ctypes.data if with_c else 0, "m": m, "n": n, "k": k, "batches": batch, "ldd": n,
              "ldc": n, "d_batch": m * n, "c_batch": m * n if with_c else 0, "alpha": alpha, "beta": beta,
              "tiles_m": tiles_m, "tiles_n": tiles_n}
    if data is not None:
        strides = tuple(s // data.itemsize for s in data.strides) + (0,) * (3 - data.ndim)
        values.update(o0_ptr=data.ctypes.data, o0_t0=strides[0], o0_t1=strides[1], o0_t2=strides[2])
    params = list(HK.HOPPER_PARAMS) + operand_params(1)
    blocks = min(grid, tiles_m * tiles_n * batch)
    kernel[(blocks, 1, 1), (config.threads, 1, 1), 0, config.shared_memory_size](*[values.get(p, 0)
                                                                                      for p in params])
    # reference: the rounded operands in float64, the epilog on every element
    x = alpha * (_value(a, ab) @ _value(b, ab))
    if with_c:
        x = x + beta * _value(c, out)
    view = None if data is None else (data if data_kind == "float32" else _value(data, data_kind))
    ref = np.empty_like(x)
    for bi, i, j in np.ndindex(*x.shape):
        v = np.float32(x[bi, i, j])
        ref[bi, i, j] = fn(v, bi, i, j, view) if epilog == "batch_gate" else fn(v, i, j, view)
    got = _value(d, out)
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# (m, n, k, batch, A/B dtype, result dtype, epilog, layout, with C, BN, blocks)
SIM_HOPPER_CASES = [
    (200, 300, 130, 1, "bfloat16", "bfloat16", "gate", "nn", False, 256, 2),        # staged data + tile stores, edges
    (136, 144, 64, 2, "float16", "float16", "batch_gate", "tn", False, 128, 3),     # batched 3-D data, A M-major
    (128, 256, 200, 1, "bfloat16", "float16", "row_clamp", "nt", False, 256, 1),    # whole tiles only (no edge code)
    (140, 100, 72, 2, "bfloat16", "float32", "shift", "nn", True, 128, 2),          # fp32 result: direct stores, C
]

# One block, one tile with edges in M, N and K, C read, a float32 result stored directly: 9 s on one core, against
# 5-6 minutes for all of SIM_HOPPER_CASES (``--quick`` runs this one).
SIM_HOPPER_QUICK = [(100, 120, 40, 1, "bfloat16", "float32", "shift", "nn", True, 128, 1)]

TOLERANCE = {"bfloat16": 2e-2, "float16": 3e-3, "float32": 1e-5}


def _main(argv):
    for case in SIM_HOPPER_QUICK if "--quick" in argv else SIM_HOPPER_CASES:
        t0 = time.perf_counter()
        err = run_hopper_case(*case)
        print(json.dumps({"case": list(case), "error": err, "seconds": time.perf_counter() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
