"""One rank of the multi-process tests of mathpy.distributed (tests/test_distributed.py starts N of them with the
environment torchrun would set). ``python tests/_distributed_worker.py GROUP [cuda]`` runs the checks of GROUP and
prints one JSON line per check: ``{"check": name, "ok": bool, "detail": text}``; it exits 0 when the run completed,
whatever the checks found (the test reads the lines of every rank).

Every rank builds the same global operands from one seed, passes its part, and compares its part of the result with
the single-process reference (numpy.fft / a float64 matmul) computed from the global operands.
"""

import importlib.util
import itertools
import json
import math
import os
import sys
import traceback

import numpy as np

import mathpy
import mathpy.distributed as md
from mathpy.distributed import BlockCyclic, Box, Pencil, Slab

RESULTS = []


def report(name, ok, detail=""):
    RESULTS.append(name)
    print(json.dumps({"check": name, "ok": bool(ok), "detail": str(detail)[:2000]}), flush=True)


def part_of(array, partition, rank):
    """This rank's part of a global NumPy array under ``partition``."""
    index = [np.arange(s.start, s.stop) if isinstance(s, range) else s for s in partition.sets[rank]]
    return array[np.ix_(*index)]


def to_numpy(x):
    from mathpy._operands import to_host, wrap_operand
    op = wrap_operand(x)
    return op.numpy().copy() if op.on_host else to_host(op, None).tensor


class Package:
    def __init__(self, name, device):
        self.name, self.device = name, device

    def __call__(self, array):
        array = np.ascontiguousarray(array)
        if self.name == "numpy":
            return array
        if self.name == "cupy":
            import cupy
            with cupy.cuda.Device(self.device):
                return cupy.asarray(array)
        import torch
        if array.dtype == mathpy._dtypes.BFLOAT16:
            tensor = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array.copy())
        return tensor if self.device is None else tensor.to(f"cuda:{self.device}")

    def native(self, x):
        from mathpy._operands import wrap_operand
        op = wrap_operand(x)
        return op.package == self.name and op.device_id == self.device

    def __repr__(self):
        return self.name if self.device is None else f"{self.name}-cuda"


def fft_tolerance(dtype, n):
    """A normwise bound for an FFT of n points in ``dtype``'s precision (a few ulps times log2 n)."""
    eps = np.finfo(np.dtype(dtype)).eps
    return 8 * eps * max(1.0, math.log2(n))


def relative_error(got, want):
    got, want = np.asarray(got), np.asarray(want)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def check_close(name, got, want, tolerance, package=None):
    try:
        if package is not None and not package.native(got):
            report(name, False, f"result is not a {package} array: {type(got)}")
            return
        got = to_numpy(got)
        if got.shape != want.shape:
            report(name, False, f"shape {got.shape} != {want.shape}")
            return
        error = relative_error(got, want)
        report(name, error <= tolerance, f"relative error {error:.3g} (tolerance {tolerance:.3g})")
    except Exception:
        report(name, False, traceback.format_exc())


def run(name, function):
    try:
        function()
    except Exception:
        report(name, False, traceback.format_exc())


# --- FFT -------------------------------------------------------------------------------------------------------------

def fft_distributions(ndim, size, rank):
    """(name, input distribution, out distribution) cases for this job size."""
    cases = [("slabX", Slab.X, None), ("slabY", Slab.Y, None), ("slabX->X", Slab.X, Slab.X)]
    if ndim == 3:
        cases.append(("slabX->Z", Slab.X, Slab.Z))
        if size % 2 == 0:
            cases.append(("pencil", Pencil((2, size // 2)), None))
            cases.append(("pencil->pencil01", Pencil((2, size // 2)), Pencil((2, size // 2))))
    cases.append(("box", "box", None))
    return cases


def box_of(shape, size, rank):
    """An uneven split along the last axis: rank r gets r + 1 shares (not a canonical slab)."""
    n = shape[-1]
    weights = np.arange(1, size + 1)
    edges = np.concatenate([[0], np.floor(np.cumsum(weights) / weights.sum() * n).astype(int)])
    lower, upper = [0] * len(shape), list(shape)
    lower[-1], upper[-1] = int(edges[rank]), int(edges[rank + 1])
    return Box(tuple(lower), tuple(upper))


def fft_checks(package, size, rank):
    rng = np.random.default_rng(1234)
    # every shape on NumPy; on the other packages (whose array code differs) one 2-D and one 3-D shape
    shapes = [(6, 10), (5, 7, 3), (8, 6, 4)] if package.name == "numpy" else [(6, 10), (8, 6, 4)]
    functions = [("fftn", md.fftn, np.fft.fftn, "complex"), ("ifftn", md.ifftn, np.fft.ifftn, "complex"),
                 ("rfftn", md.rfftn, np.fft.rfftn, "real")]
    for shape, (fname, fn, ref_fn, kind), dtype_index in itertools.product(shapes, functions, range(2)):
        dtype = ([np.complex64, np.complex128] if kind == "complex" else [np.float32, np.float64])[dtype_index]
        g = rng.standard_normal(shape)
        if kind == "complex":
            g = g + 1j * rng.standard_normal(shape)
        g = g.astype(dtype)
        want = ref_fn(g.astype(np.complex128 if kind == "complex" else np.float64))
        for case, dist, out in fft_distributions(len(shape), size, rank):
            if dist == "box":
                dist = box_of(shape, size, rank)
            name = f"fft {fname} {shape} {np.dtype(dtype).name} {case} {package}"

            def one(dist=dist, out=out, name=name, g=g, want=want, fn=fn, shape=shape, dtype=dtype, kind=kind):
                peers = _peers(dist, shape, size)
                part = part_of(g, dist.partition(shape, size, peers), rank)
                y = fn(package(part), dist, out_distribution=out)
                result = result_partition("R2C" if kind == "real" else "C2C", shape, dist, peers, out, size)
                check_close(name, y, part_of(want, result, rank), fft_tolerance(dtype, g.size), package)
            run(name, one)
    # irfftn, both parities, from the Hermitian half of real data
    for shape, parity in [((6, 10), "even"), ((5, 7, 3), "odd"), ((4, 6, 8), "even")]:
        real = rng.standard_normal(shape)
        half = np.fft.rfftn(real).astype(np.complex128)
        want = np.fft.irfftn(half, s=shape)
        for case, dist, out in fft_distributions(len(shape), size, rank):
            if dist == "box":
                dist = box_of(half.shape, size, rank)
            name = f"fft irfftn {shape} {parity} {case} {package}"

            def one(dist=dist, out=out, name=name, half=half, want=want, parity=parity):
                peers = _peers(dist, half.shape, size)
                part = part_of(half, dist.partition(half.shape, size, peers), rank)
                y = md.irfftn(package(part), dist, out_distribution=out, last_axis_parity=parity)
                result = result_partition("C2R", half.shape, dist, peers, out, size, parity)
                check_close(name, y, part_of(want, result, rank), fft_tolerance(np.float64, want.size), package)
            run(name, one)
    run(f"fft layouts {package}", lambda: fft_layouts(package, size, rank))
    run(f"fft stateful {package}", lambda: fft_stateful(package, size, rank))
    run(f"fft norms {package}", lambda: fft_norms(package, size, rank))


def result_partition(fft_type, shape, dist, peers, out, size, parity="even"):
    """Where the planner puts the result (computed without a collective: the steps are a pure function)."""
    from mathpy.distributed._fft_plan import output_shape, plan_steps
    final = output_shape(fft_type, shape, parity)
    out_partition = None if out is None else out.partition(final, size)
    steps = plan_steps(fft_type, shape, dist, dist.partition(shape, size, peers), out, out_partition, size, parity)
    return steps[-1].after


def _peers(dist, shape, size):
    """Every rank's Box, made the way each rank makes its own (for building reference partitions)."""
    if not isinstance(dist, Box):
        return None
    return [box_of(shape, size, r) if len(dist.lower) == len(shape) else None for r in range(size)]


def fft_layouts(package, size, rank):
    """Transforms after an exchange with their axes innermost (the exchange transposes while unpacking), chosen
    explicitly and by "auto" for a long outer axis; results are strided views, values as numpy's."""
    rng = np.random.default_rng(17)
    cases = [((6, 10), Slab.X, None, "transform_last"), ((6, 10), Slab.Y, Slab.Y, "transform_last"),
             ((5, 7, 3), Slab.X, Slab.X, "transform_last"), ((8192, 4), Slab.X, None, "auto"),
             ((8192, 4), Slab.X, Slab.X, "auto")]
    for shape, dist, out, layout in cases:
        g = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex128)
        with md.FFT(package(part_of(g, dist.partition(shape, size), rank)), dist, out_distribution=out,
                    options={"local_layout": layout}) as plan:
            plan.plan()
            for direction, ref in (("forward", np.fft.fftn(g)), ("inverse", np.fft.ifftn(g) * g.size)):
                y = plan.execute(direction=direction)
                check_close(f"fft layout {layout} {shape} {dist} -> {out} {direction} {package}", y,
                            part_of(ref, plan.result_partition, rank), fft_tolerance(np.float64, g.size), package)


def fft_stateful(package, size, rank):
    """A plan executed twice with reset_operand, both directions, with a prolog and a filter epilog."""
    rng = np.random.default_rng(7)
    shape = (8, 6, 5)
    a, b = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape) for _ in range(2))
    a, b = a.astype(np.complex128), b.astype(np.complex128)
    partition = Slab.X.partition(shape, size)
    plan = md.FFT(package(part_of(a, partition, rank)), Slab.X)
    lower, upper = plan.epilog_box
    filt = (np.arange(math.prod(shape)).reshape(shape) % 7 + 1.0).astype(np.complex128)
    local_filter = filt[tuple(slice(lo, hi) for lo, hi in zip(lower, upper))]
    layout_shape, layout_strides = plan.epilog_layout
    assert tuple(layout_shape) == local_filter.shape, (layout_shape, local_filter.shape)

    def triple(data_in, offset, user_info, unused):
        return data_in[offset] * 3

    def apply_filter(data_out, offset, value, user_info, unused):
        data_out[offset] = value * user_info[offset]

    plan.plan(prolog=triple, epilog=mathpy.fft.Callback(apply_filter, data=package(local_filter)))
    tolerance = fft_tolerance(np.float64, a.size)
    result = plan.result_partition
    y = plan.execute()
    check_close(f"fft stateful callbacks {package}", y, part_of(np.fft.fftn(a * 3) * filt, result, rank), tolerance,
                package)
    plan.reset_operand(package(part_of(b, partition, rank)))
    y = plan.execute(direction="inverse")
    check_close(f"fft stateful reset+inverse {package}", y,
                part_of(np.fft.ifftn(b * 3) * b.size * filt, result, rank), tolerance, package)
    plan.free()
    plan.free()
    try:
        plan.execute()
        report(f"fft freed plan refuses {package}", False, "no error")
    except mathpy.InvalidPlanStateError:
        report(f"fft freed plan refuses {package}", True)


def fft_norms(package, size, rank):
    rng = np.random.default_rng(3)
    shape = (6, 4, 4)
    g = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    for norm in ("backward", "ortho", "forward"):
        for fn, ref in ((md.fftn, np.fft.fftn), (md.ifftn, np.fft.ifftn)):
            y = fn(package(part_of(g, Slab.X.partition(shape, size), rank)), Slab.X, out_distribution=Slab.X,
                   norm=norm)
            check_close(f"fft {fn.__name__} norm={norm} {package}", y,
                        part_of(ref(g, norm=norm), Slab.X.partition(shape, size), rank), fft_tolerance(np.float64, 96),
                        package)


# --- matmul ----------------------------------------------------------------------------------------------------------

def matmul_cases(size):
    cases = [("row", ("row", "row", "row"), "gather+overlap"),
             ("column", ("column", "column", "column"), "gather+overlap"),
             ("reduce->row", (Slab(1), Slab(0), Slab(0)), "reduce"),
             ("reduce->column", (Slab(1), Slab(0), Slab(1)), "reduce"),
             ("mixed", (Slab(0), Slab(1), Slab(0)), "gather")]
    if size % 2 == 0:
        grid = BlockCyclic((2, size // 2), (2, 3))
        cases.append(("block-cyclic", (grid, grid, grid), "gather"))
        cases.append(("block-cyclic-mixed", (Slab(0), grid, grid), "gather"))
    return cases


def integers(rng, shape, dtype):
    """Small integers: products and sums of a few of them are exact in every dtype, so results compare exactly."""
    return rng.integers(-3, 4, size=shape).astype(np.float64).astype(dtype)


def local_parts(dists, shapes, size, rank, *globals_):
    parts = []
    for dist, shape, g in zip(dists, shapes, globals_):
        dist = md._distribution.as_distribution(dist)
        parts.append(part_of(g, dist.partition(shape, size), rank))
    return parts


def matmul_checks(package, size, rank):
    from mathpy.host.matmul._epilog import pack_bits, relu_aux_rows
    rng = np.random.default_rng(11)
    m, k, n = 12, 10, 8
    bf16 = mathpy._dtypes.BFLOAT16
    for (case, dists, algorithm), dtype in itertools.product(matmul_cases(size), (np.float32, np.float64, bf16)):
        if dtype == bf16 and package.name == "cupy":
            continue
        a, b, c = integers(rng, (m, k), dtype), integers(rng, (k, n), dtype), integers(rng, (m, n), dtype)
        bias = integers(rng, (m,), dtype)
        mask = rng.random((m, n)) > 0.5
        pd = md._distribution.as_distribution(dists[2]).partition((m, n), size)
        rows, cols = (np.arange(s.start, s.stop) if isinstance(s, range) else s for s in pd.sets[rank])
        a_part, b_part, c_part = local_parts(dists, [(m, k), (k, n), (m, n)], size, rank, a, b, c)
        local_bias = bias[rows]
        local_mask = pack_bits(mask[np.ix_(rows, cols)], relu_aux_rows(len(rows)))
        for epilog, inputs in ((None, None), ("relu_bias", {"bias": local_bias}),
                               ("gelu_aux_bias", {"bias": local_bias}), ("drelu_bgrad", {"relu_aux": local_mask})):
            if dtype == bf16 and epilog == "drelu_bgrad":
                continue
            name = f"matmul {case} {np.dtype(dtype).name} {epilog} {package}"

            def one(dists=dists, epilog=epilog, inputs=inputs, name=name, a_part=a_part, b_part=b_part,
                    c_part=c_part, algorithm=algorithm, rows=rows, cols=cols, a=a, b=b, c=c, dtype=dtype):
                given = None if inputs is None else {key: package(v) for key, v in inputs.items()}
                forced = "reduce" if algorithm == "reduce" else None
                with md.Matmul(package(a_part), package(b_part), package(c_part), distributions=dists, alpha=2,
                               beta=0.5, algorithm=forced) as mm:
                    mm.plan(epilog=epilog, epilog_inputs=given)
                    if mm.algorithm != algorithm:
                        report(name + " algorithm", False, f"{mm.algorithm} != {algorithm}")
                    got = mm.execute()
                # the single-process reference: the same product of the rank's rows of A, columns of B, part of C
                want = mathpy.matmul(a[rows, :].astype(np.float64), b[:, cols].astype(np.float64),
                                     c[np.ix_(rows, cols)].astype(np.float64), alpha=2, beta=0.5, epilog=epilog,
                                     epilog_inputs=None if inputs is None else
                                     {key: (v.astype(np.float64) if v.dtype != np.uint8 else v)
                                      for key, v in inputs.items()})
                tolerance = epilog_tolerance(epilog, dtype)
                if isinstance(want, tuple):
                    check_close(name, got[0], want[0].astype(np.float64), tolerance, package)
                    for key, value in want[1].items():
                        expected = value if value.dtype == np.uint8 else value.astype(np.float64)
                        found = got[1][key]
                        if key == "gelu_aux":  # rows past M are padding, unspecified (mathpy.host.matmul._epilog)
                            expected, found = expected[:len(rows)], found[:len(rows)]
                        check_close(f"{name} aux {key}", found, expected, tolerance, package)
                else:
                    check_close(name, got, want, tolerance, package)
            run(name, one)
    run(f"matmul stateful {package}", lambda: matmul_stateful(package, size, rank))
    run(f"matmul random {package}", lambda: matmul_random(package, size, rank))


def epilog_tolerance(epilog, dtype):
    """Integer operands make products, sums, biases and ReLUs exact; GELU is as accurate as the engine's: cuBLASLt
    evaluates it to about 5e-9 (float64) and 1e-5 (float32) relative, then rounds to the result dtype."""
    if not epilog or "gelu" not in epilog:
        return 0.0
    return {np.dtype(np.float64): 1e-8, np.dtype(np.float32): 2e-5}.get(np.dtype(dtype), 2.0 ** -8)


def matmul_random(package, size, rank):
    """Gaussian operands: the error stays within a bound derived from K and the dtype, for each algorithm."""
    rng = np.random.default_rng(5)
    m, k, n = 16, 40, 12
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    want = a @ b
    for dtype in (np.float32, np.float64):
        for dists in (("row",) * 3, ("column",) * 3, (Slab(1), Slab(0), Slab(0))):
            for overlap in (True, False):
                a_part, b_part = local_parts(dists, [(m, k), (k, n)], size, rank, a.astype(dtype), b.astype(dtype))
                got = md.matmul(package(a_part), package(b_part), distributions=dists, overlap=overlap)
                pd = md._distribution.as_distribution(dists[2]).partition((m, n), size)
                bound = 2 * k * np.finfo(dtype).eps * float(np.abs(a).max() * np.abs(b).max()) / np.abs(want).max()
                check_close(f"matmul random {dtype.__name__} {dists} overlap={overlap} {package}", got,
                            part_of(want, pd, rank), bound, package)


def matmul_stateful(package, size, rank):
    """reset_operands under each local algorithm: B arriving in K blocks (row), A arriving (column), reduce."""
    rng = np.random.default_rng(9)
    m, k, n = 8, 6, 10
    a1, b1, a2, b2 = (integers(rng, s, np.float32) for s in ((m, k), (k, n), (m, k), (k, n)))
    cases = [(("row", "row", "row"), None, "gather+overlap"), (("column",) * 3, None, "gather+overlap")]
    if size > 1:
        cases.append(((Slab(1), Slab(0), Slab(0)), "reduce", "reduce"))
    for dists, algorithm, expected in cases:
        pa, pb = local_parts(dists, [(m, k), (k, n)], size, rank, a1, b1)
        pd = md._distribution.as_distribution(dists[2]).partition((m, n), size)
        with md.Matmul(package(pa), package(pb), distributions=dists, algorithm=algorithm) as mm:
            mm.plan(epilog="relu")
            name = f"matmul stateful {dists[0]} {algorithm} {package}"
            if size > 1:
                report(f"{name} runs {expected}", mm.algorithm == expected, mm.algorithm)
            check_close(f"{name} first", mm.execute(), part_of(np.maximum(a1 @ b1, 0), pd, rank), 0, package)
            pa, pb = local_parts(dists, [(m, k), (k, n)], size, rank, a2, b2)
            mm.reset_operands(a=package(pa), b=package(pb))
            check_close(f"{name} reset", mm.execute(), part_of(np.maximum(a2 @ b2, 0), pd, rank), 0, package)
            check_close(f"{name} again", mm.execute(), part_of(np.maximum(a2 @ b2, 0), pd, rank), 0, package)
            pa, = local_parts(dists, [(m, k)], size, rank, a1)
            mm.reset_operands(a=package(pa))  # one operand: the other's parts stay
            check_close(f"{name} reset a", mm.execute(), part_of(np.maximum(a1 @ b2, 0), pd, rank), 0, package)


def matmul_error_checks(package, size, rank):
    m, k, n = 8, 6, 4
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    pa, pb = local_parts(("row", "row"), [(m, k), (k, n)], size, rank, a, b)
    expect_everywhere("matmul error dtype mismatch", lambda: md.matmul(
        package(pa.astype(np.float64) if rank == 0 else pa), package(pb.astype(np.float64) if rank == 0 else pb),
        distributions="row"), needle="dtypes")
    expect_everywhere("matmul error k mismatch", lambda: md.matmul(
        package(pa), package(np.ones((pb.shape[0] + (rank == 0), n), np.float32)), distributions="row"))
    expect_everywhere("matmul error bad bias on one rank", lambda: md.matmul(
        package(pa), package(pb), distributions="row", epilog="bias",
        epilog_inputs={"bias": package(np.ones(pa.shape[0] + (rank == 0), np.float32))}), needle="rank 0")
    expect_everywhere("matmul error reduce impossible", lambda: md.matmul(
        package(pa), package(pb), distributions="row", algorithm="reduce"), needle="reduce")
    expect_everywhere("matmul error distributions disagree", lambda: md.matmul(
        package(pa), package(pb), distributions="row" if rank else ("row", "row", "column")),
        needle="distributions")


# --- errors ----------------------------------------------------------------------------------------------------------

def expect_everywhere(name, function, error=md.DistributionMismatchError, needle=""):
    try:
        function()
    except error as e:
        report(name, needle in str(e), f"{type(e).__name__}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        report(name, False, f"wrong error {type(e).__name__}: {e}")
        return
    report(name, False, "no error")


def error_checks(package, size, rank):
    shape = (8, 6)
    g = np.ones(shape, np.complex64)
    part = part_of(g, Slab.X.partition(shape, size), rank)
    expect_everywhere("error dtype mismatch", lambda: md.fftn(
        package(part.astype(np.complex128 if rank == size - 1 else np.complex64)), Slab.X), needle="dtype")
    expect_everywhere("error distribution mismatch", lambda: md.fftn(
        package(part_of(g, (Slab.Y if rank == 0 else Slab.X).partition(shape, size), rank)),
        Slab.Y if rank == 0 else Slab.X), needle="distribution")
    uneven = np.ones((3 if rank == 0 else 1, 6), np.complex64) if size > 1 else np.ones((8, 6), np.complex64)
    if size > 1:
        expect_everywhere("error non-canonical slab", lambda: md.fftn(package(uneven), Slab.X), needle="Box")
    expect_everywhere("error bad norm on one rank", lambda: md.fftn(
        package(part), Slab.X, norm="bogus" if rank == 0 else None), needle="rank 0")
    expect_everywhere("error 1-D part on one rank", lambda: md.fftn(
        package(part.reshape(-1) if rank == size - 1 else part), Slab.X), needle=f"rank {size - 1}")
    expect_everywhere("error global shape mismatch", lambda: md.fftn(
        package(np.ones((part.shape[0], 6 + (rank == 0)), np.complex64)), Slab.X), needle="axis 1")
    boxes = [Box((0, 0), (8, 6))] * size
    if size > 1:
        expect_everywhere("error overlapping boxes", lambda: md.fftn(package(g), boxes[rank]), needle="")
    expect_everywhere("error unsupported dtype", lambda: md.fftn(package(part.real.astype(np.int32)), Slab.X),
                      needle="dtype")
    # the plan still works after all these errors: nothing is left half-done in the transport
    y = md.fftn(package(part), Slab.X)
    check_close("fft after errors", y, part_of(np.fft.fftn(g), Slab.Y.partition(shape, size), rank), 1e-5, package)


def timeout_check(package, size, rank):
    """Rank 0 skips the call: the others must get DistributedTimeoutError, not hang."""
    shape = (4, 4)
    part = part_of(np.ones(shape, np.complex64), Slab.X.partition(shape, size), rank)
    if rank == 0:
        import time
        time.sleep(float(os.environ.get("MATHPY_TEST_TIMEOUT", "60")) + 3)  # alive, but not in the call
        report("timeout (rank 0 does not call)", True)
        return
    expect_everywhere("timeout", lambda: md.fftn(package(part), Slab.X), error=md.DistributedTimeoutError)


def all_errors(package, size, rank):
    error_checks(package, size, rank)
    matmul_error_checks(package, size, rank)


GROUPS = {"fft": fft_checks, "matmul": matmul_checks, "errors": all_errors, "timeout": timeout_check}


def main():
    groups = sys.argv[1].split(",")
    device = None
    packages = ["numpy", "torch"]
    if len(sys.argv) > 2 and sys.argv[2] == "cuda":
        device = int(os.environ.get("LOCAL_RANK", "0"))
        packages = ["torch", "cupy"]
    timeout = float(os.environ.get("MATHPY_TEST_TIMEOUT", "60"))
    context = md.initialize(timeout=timeout)
    size, rank = context.size, context.rank
    for group in groups:
        for name in packages:
            if name == "cupy" and importlib.util.find_spec("cupy") is None:
                continue
            GROUPS[group](Package(name, device), size, rank)
            if group == "timeout":
                break
    if groups != ["timeout"]:
        md.finalize()
    print(json.dumps({"done": True, "checks": len(RESULTS)}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a rank left waiting by the timeout check must not wait again in process-group teardown


if __name__ == "__main__":
    main()
