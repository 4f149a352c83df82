"""Python epilogs fused into matmul, without a GPU: the CPU execution space (numba) against NumPy for every dtype and
batch layout, bad epilogs refused before any work, the generic GPU kernel under numba's CUDA simulator, and its PTX
(compiled with no GPU present). The Hopper kernel: tests/test_matmul_fused_hopper.py; the GPU runs:
tests/test_matmul_fused_gpu.py."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import mathpy
from mathpy import CallbackCompileError
from mathpy.host.matmul import _fused

ROOT = Path(__file__).resolve().parents[1]
BF16 = np.dtype(ml_dtypes.bfloat16)


def gate(value, row, col, data):
    return value * data[row, col] + np.float32(row) - np.float32(0.5) * np.float32(col)


def per_row(value, row, col, data):
    return min(max(value * data[row], np.float32(-2)), np.float32(2))


def with_batch(value, batch, row, col, data):
    return value + np.float32(0.25) * data[batch, row, col] - np.float32(batch)


def no_data(value, row, col, data):
    return math.tanh(value) if data is None else value


# float16/bfloat16 products are computed in float32 and rounded once to the result (8 / 11 mantissa bits)
_TOL = {np.dtype(np.float16): 2e-3, BF16: 1.6e-2, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def _rand(shape, dtype, rng):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _reference(fn, x, data, batched_fn=False):
    """``fn`` applied to every element of ``x`` (float64, shape (batch, M, N)), in float32 as the engine does."""
    out = np.empty_like(x)
    for b, i, j in np.ndindex(*x.shape):
        v = np.float32(x[b, i, j]) if x.dtype != np.float64 else x[b, i, j]
        out[b, i, j] = fn(v, b, i, j, data) if batched_fn else fn(v, i, j, data)
    return out


def _close(got, ref, dtype):
    got = np.asarray(got).astype(np.float64)
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert np.isfinite(got).all() and err < _TOL[np.dtype(dtype)], err


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("layout", ["2d", "batched", "broadcast_b", "transposed", "vector_b", "with_c"])
def test_cpu_matches_numpy(dtype, layout):
    rng = np.random.default_rng(7)
    m, n, k = 9, 7, 5
    a, b, c, alpha, beta = _rand((m, k), dtype, rng), _rand((k, n), dtype, rng), None, 1, None
    if layout == "batched":
        a, b = _rand((3, m, k), dtype, rng), _rand((3, k, n), dtype, rng)
    elif layout == "broadcast_b":
        a = _rand((2, 3, m, k), dtype, rng)
    elif layout == "transposed":
        a, b = _rand((k, m), dtype, rng).T, _rand((n, k), dtype, rng).T
    elif layout == "vector_b":
        b = _rand((k,), dtype, rng)
    elif layout == "with_c":
        c, alpha, beta = _rand((m, n), dtype, rng), 0.5, -1.5
    fn, data = (per_row, (rng.random(m) * 2).astype(np.float32)) if layout == "vector_b" else \
        (gate, rng.standard_normal((m, n)).astype(np.float32))
    out = mathpy.matmul(a, b, c, alpha=alpha, beta=beta, epilog=fn, epilog_inputs={"data": data})
    x = alpha * np.matmul(a.astype(np.float64), b.astype(np.float64))
    if c is not None:
        x = x + beta * c.astype(np.float64)
    assert out.dtype == np.dtype(dtype) and out.shape == x.shape
    x3 = x.reshape(-1, m, x.shape[-1] if layout != "vector_b" else 1)
    ref = _reference(fn, x3, data).reshape(x.shape)
    _close(out, ref, dtype)


def test_batch_index_and_data_forms():
    rng = np.random.default_rng(3)
    a, b = _rand((4, 6, 5), np.float32, rng), _rand((4, 5, 3), np.float32, rng)
    data = rng.standard_normal((4, 6, 3)).astype(np.float32)
    out = mathpy.matmul(a, b, epilog=with_batch, epilog_inputs={"data": data})
    _close(out, _reference(with_batch, (a.astype(np.float64) @ b), data, batched_fn=True), np.float32)
    # no data: the function gets None; 16-bit data reads as float32; integer and strided data index as NumPy does
    _close(mathpy.matmul(a, b, epilog=no_data), np.tanh(a.astype(np.float64) @ b), np.float32)
    g16 = rng.standard_normal((6, 3)).astype(BF16)
    ref = _reference(gate, (a.astype(np.float64) @ b), g16.astype(np.float32))
    _close(mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": g16}), ref, np.float32)
    wide = rng.integers(-3, 3, (3, 12)).astype(np.int32)
    ref = _reference(gate, (a.astype(np.float64) @ b), wide.T[::2].astype(np.float64))
    _close(mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": wide.T[::2]}), ref, np.float32)


def test_stateful_plan_reset_and_stateless_agree():
    rng = np.random.default_rng(5)
    a, b = _rand((8, 4), np.float32, rng), _rand((4, 6), np.float32, rng)
    d1, d2 = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    with mathpy.Matmul(a, b) as mm:
        assert mm.plan(epilog=gate, epilog_inputs={"data": d1}) == ["numpy+numba"]
        first = mm.execute()
        mm.reset_operands(epilog_inputs={"data": d2})
        second = mm.execute()
    np.testing.assert_array_equal(first, mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": d1}))
    np.testing.assert_array_equal(second, mathpy.matmul(a, b, epilog=gate, epilog_inputs={"data": d2}))
    assert not np.array_equal(first, second)


def test_named_epilogs_still_go_to_the_library_engines():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(mathpy.matmul(a - 3, a.T, epilog="relu"), np.maximum((a - 3) @ a.T, 0))


def _two(value, row):
    return value


def _six(value, batch, row, col, data, extra):
    return value


def _star(*args):
    return args[0]


def _nothing(value, row, col, data):
    value * 2


def _sometimes(value, row, col, data):
    if row > 0:
        return value


def _bad_index(value, row, col, data):
    return value * data[row, col, col]


@pytest.mark.parametrize("fn, error, words", [
    (_two, TypeError, ["_two", "test_matmul_fused.py", "f(value, row, col, *operands)", "(value, row)"]),
    (_six, TypeError, ["_six", "f(value, batch, row, col, *operands)", "1 operand(s) ['data']"]),
    (_star, TypeError, ["_star", "positional parameters only"]),
    (_nothing, TypeError, ["_nothing", "returns nothing", "return value"]),
    (_sometimes, TypeError, ["_sometimes", "returns nothing on some path"]),
    (3.5, ValueError, ["epilog 3.5", "allowed"]),
])
def test_bad_epilogs_are_refused_before_any_work(monkeypatch, fn, error, words):
    def no_work(*args, **kwargs):
        raise AssertionError("the engine ran")

    monkeypatch.setattr(_fused.FusedCPUEngine, "execute", no_work)
    monkeypatch.setattr(_fused, "python_epilog_pass", no_work)
    a = np.ones((3, 2), np.float32)
    with pytest.raises(error) as info:
        mathpy.matmul(a, a.T, epilog=fn)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("operands, kwargs, error, words", [
    ("f32", {"epilog_inputs": {"data": np.ones((3, 3), np.complex128)}}, ValueError,
     ["'data'", "complex128", "may be", "bfloat16", "complex64"]),
    ("f32", {"epilog_inputs": {"data": np.ones((1, 1, 3, 3), np.float32)}}, ValueError, ["at most 3 dimensions"]),
    ("f32", {"epilog_inputs": {"bias": np.ones(3, np.float32)}}, TypeError,
     ["['bias']", "not parameters", "(value, row, col, data)"]),
    ("c128", {}, ValueError, ["complex128", "float16, bfloat16, float32, float64 or complex64"]),
    ("f16", {"options": {"compute_type": "16F"}}, ValueError, ["compute type 16F", "allowed: 32F"]),
    ("f32", {"epilog_inputs": {"data": "torch"}}, ValueError, ["package and device", "torch"]),
])
def test_bad_epilog_inputs_and_operands(monkeypatch, operands, kwargs, error, words):
    monkeypatch.setattr(_fused, "python_epilog_pass", lambda *a, **k: pytest.fail("the epilog ran"))
    monkeypatch.setattr(_fused.E, "apply_cpu", lambda *a, **k: pytest.fail("the epilog ran"))
    a = np.ones((3, 2), {"c128": np.complex128, "f16": np.float16}.get(operands, np.float32))
    if isinstance(kwargs.get("epilog_inputs", {}).get("data"), str):  # a torch tensor, made here
        torch = pytest.importorskip("torch")
        kwargs = {"epilog_inputs": {"data": torch.ones(3, 3)}}
    with pytest.raises(error) as info:
        mathpy.matmul(a, a.T, epilog=gate, **kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_errors_inside_the_epilog_name_its_file_and_line():
    a = np.ones((3, 2), np.float32)
    with pytest.raises(CallbackCompileError) as info:
        mathpy.matmul(a, a.T, epilog=_bad_index, epilog_inputs={"data": np.ones((3, 3), np.float32)})
    message = str(info.value)
    line = _bad_index.__code__.co_firstlineno
    assert "_bad_index" in message and f"test_matmul_fused.py:{line}" in message and "the CPU" in message


# ---------------------------------------------------------------- GPU code without a GPU


def test_generic_kernel_and_elementwise_pass_match_numpy_in_the_simulator():
    """The generic GPU kernel (tiling, bounds, strides, batches, C, the epilog's coordinates and data) and the
    elementwise pass (vector and element paths, aligned and unaligned rows, several operands of float, bfloat16, bool
    and int32 dtypes, complex values) run under numba's CUDA simulator in a subprocess (it must be switched on before
    numba is imported)."""
    from _gemm_sim import SIM_FUSED_CASES, SIM_PASS_CASES, TOLERANCE

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "_gemm_sim.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(SIM_FUSED_CASES) + len(SIM_PASS_CASES)
    for r in results:
        dtype = r["case"][4] if r["kind"] == "run_fused_case" else r["case"][3]
        assert r["error"] < TOLERANCE[dtype], r


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "float64", "bfloat16"])
def test_generic_kernel_ptx(precision):
    """The generic kernel compiled without the epilog and linked with it: the epilog's read of its operand is one
    ld.global.nc, nothing goes through local memory, the product runs on the engine of the precision."""
    from mathpy.device import _gemm_build, _gemm_kernel, matmul
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _link
    from mathpy.jit import _matmul_epilog as E

    config = _gemm_kernel.GenericConfig(precision, precision, has_c=True, epilog=True, operands=1)
    description = matmul(64, 64, 32, precision, block_size=256, a_arrangement="col_major")
    skeleton, params, _ = _gemm_build.generic_ltoir(config, description, (9, 0))
    wrapper, _ = W.wrapper_ltoir(E.as_matmul_epilog(gate, ("data",)), (("float32", 2),), precision, None, (9, 0))
    _, ptx = _link.link({"kernel": skeleton, "epilog": wrapper}, "sm_90", inlined=_gemm_kernel.EPILOG_SYMBOL)
    assert not re.search(r"\b(ld|st)\.local", ptx) and "ld.global.nc.f32" in ptx
    kind = {"float32": "fma.rn.f32", "float64": "mma.sync.aligned.m8n8k4", "bfloat16": "mma.sync.aligned.m16n8k16"}
    assert kind[precision] in ptx and params[-4:] == ["o0_ptr", "o0_t0", "o0_t1", "o0_t2"]

# ---------------------------------------------------------------- the epilogs users write (tests/_epilog_cases.py)

from _epilog_cases import CASES, bound, product, random  # noqa: E402
from _tolerance import assert_within  # noqa: E402


def _case_params():
    return [pytest.param(case, dtype, id=f"{case.name}-{dtype}") for case in CASES for dtype in case.dtypes]


@pytest.mark.parametrize("case, dtype", _case_params())
def test_every_epilog_and_dtype_on_the_cpu(case, dtype):
    """Each function (several operands, math functions, branches, int / bool operands, module constants) in each
    dtype it applies to, against the float64 reference within the derived bound."""
    rng = np.random.default_rng(11)
    m, n, k, batch = 6, 10, 7, (3 if case.batched_only else 1)
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    a, b = random((batch, m, k), dt, rng, 1 / math.sqrt(k)), random((batch, k, n), dt, rng)
    operands = case.make(m, n, batch, rng, dt)
    out = mathpy.matmul(a, b, epilog=case.function, epilog_inputs=operands)
    assert out.dtype == dt and out.shape == (batch, m, n)
    x, magnitude = product(a, b)
    ref = case.reference(x, operands)
    assert_within(np.asarray(out).astype(ref.dtype), ref, bound(case, dt, x, magnitude, ref, k), case.name)


def test_operands_are_the_last_parameters_named_as_given():
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    g = np.arange(8, dtype=np.float32).reshape(2, 4)
    bias = np.arange(4, dtype=np.float32)

    def two(value, row, col, gate, bias):
        return value * gate[row, col] + bias[col]

    ref = 3 * g + bias
    np.testing.assert_array_equal(mathpy.matmul(a, b, epilog=two, epilog_inputs={"bias": bias, "gate": g}), ref)
    with pytest.raises(TypeError, match=r"must be its last parameters"):
        mathpy.matmul(a, b, epilog=lambda value, gate, row, col: value, epilog_inputs={"gate": g})
    with pytest.raises(TypeError, match=r"\['scale'\] are not parameters"):
        mathpy.matmul(a, b, epilog=two, epilog_inputs={"gate": g, "scale": bias})

    def none(value, row, col):
        return value + np.float32(1)

    np.testing.assert_array_equal(mathpy.matmul(a, b, epilog=none), np.full((2, 4), 4, np.float32))


def _scaled(value, row, col, data):
    return value * SCALE_OF_TEST


SCALE_OF_TEST = np.float32(2)


def test_a_rebound_global_or_changed_closure_never_runs_stale_code():
    """numba freezes the globals a function reads: a rebound global must compile again, on the stateless path (its
    memo of prepared calls) and the stateful one."""
    global SCALE_OF_TEST
    a, b = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
    try:
        first = mathpy.matmul(a, b, epilog=_scaled)
        SCALE_OF_TEST = np.float32(5)
        second = mathpy.matmul(a, b, epilog=_scaled)
    finally:
        SCALE_OF_TEST = np.float32(2)
    np.testing.assert_array_equal(first, np.full((2, 2), 6, np.float32))
    np.testing.assert_array_equal(second, np.full((2, 2), 15, np.float32))
    offset = [np.float32(1)]

    def make():
        shift = offset[0]

        def shifted(value, row, col, data):
            return value + shift
        return shifted

    f = make()
    np.testing.assert_array_equal(mathpy.matmul(a, b, epilog=f), np.full((2, 2), 4, np.float32))
    f.__closure__[0].cell_contents = np.float32(10)
    np.testing.assert_array_equal(mathpy.matmul(a, b, epilog=f), np.full((2, 2), 13, np.float32))


def test_too_many_operands_are_refused():
    names = [f"x{i}" for i in range(9)]
    namespace = {}
    exec(f"def many(value, row, col, {', '.join(names)}):\n    return value\n", namespace)
    a = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="at most 8 operands"):
        mathpy.matmul(a, a, epilog=namespace["many"], epilog_inputs={n: a for n in names})
