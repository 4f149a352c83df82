"""The routes of a Python matmul epilog on a GPU, without a GPU: the rule (pure Python, any compute capability), the
recognition of cuBLASLt's own epilogs, and each route run end to end on a stand-in GPU (torch CPU tensors posing as
device arrays, cuBLASLt's engine replaced by one that computes on the raw pointers it is given, the elementwise pass
by one that applies the epilog to D's memory with numba), every result against a float64 reference within the bound
of tests/_epilog_cases.py. The kernels themselves run under numba's simulator (tests/test_matmul_fused.py) and on
the GPU (tests/test_matmul_fused_gpu.py)."""

import logging
import math
import re
import types

import ml_dtypes
import numpy as np
import pytest

from _epilog_cases import BY_NAME, bound, product, random
from _fake_gpu import host_view, pretend_a_gpu
from _tolerance import assert_within, gamma
from mathpy.host.matmul import _fused_route as R
from mathpy.host.matmul._fused import DataLayout
from mathpy.host.matmul._problem import row_major
from mathpy.jit._epilog_recognize import recognize

BF16 = np.dtype(ml_dtypes.bfloat16)


def _facts(m, n, k, dtype="bfloat16", batch=1, out=None, c=False, compute="32F"):
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    return types.SimpleNamespace(m=m, n=n, k=k, batch=batch, a=row_major(m, k, batch, dt), b=row_major(k, n, batch, dt),
                                 c=row_major(m, n, batch, dt) if c else None, d_dtype=np.dtype(out or dt),
                                 compute_type=compute)


def _gated(value, row, col, gate):
    return value / (np.float32(1) + math.exp(-value)) * gate[row, col]


GATE = {"gate": DataLayout((4096, 4096), (4096, 1), "bfloat16")}


@pytest.mark.parametrize("facts, cc, route, words", [
    (_facts(4096, 4096, 4096), (9, 0), "fused", ["whole tiles"]),
    (_facts(16384, 16384, 256), (9, 0), "fused", []),
    (_facts(4096, 4096, 4096, out="float32"), (9, 0), "fused", []),
    (_facts(5000, 3000, 2000), (9, 0), "elementwise", ["not whole 128 x 256 tiles"]),
    (_facts(4096, 4096, 4000), (9, 0), "elementwise", ["K a multiple of 64"]),
    (_facts(1024, 1024, 1024), (9, 0), "elementwise", ["32 tiles leave SMs of the 132 idle"]),
    (_facts(2048, 4096, 64), (9, 0), "elementwise", ["GFLOP"]),
    (_facts(4096, 4096, 4096, "float32"), (9, 0), "elementwise", ["float16/bfloat16 only"]),
    (_facts(4096, 4096, 4096, "float64", compute="64F"), (9, 0), "elementwise", ["float16/bfloat16 only"]),
    (_facts(4096, 4096, 4096, "complex64"), (9, 0), "elementwise", []),
    (_facts(4096, 4096, 4096), (8, 0), "elementwise", ["compute capability 8.0 has no wgmma"]),
    (_facts(4096, 4096, 4096), (10, 0), "elementwise", ["compute capability 10.0 has no wgmma"]),
    (_facts(4096, 4096, 4096, compute="32F_FAST_16BF"), (9, 0), "elementwise", ["compute type"]),
])
def test_the_rule(facts, cc, route, words):
    chosen = R.choose_route(facts, None, GATE, cc, 132)
    assert chosen.name == route and chosen.library is None and chosen.order == "C", chosen
    text = str(chosen)
    assert text.startswith(f"route: {route} because ")
    for word in words:
        assert word in text, (word, text)


def _bias_col(value, row, col, bias):
    return max(value + bias[col], np.float32(0))


def _bias_row(value, row, col, bias):  # GELU spelled with np.tanh and a product for the cube
    x = value + bias[row]
    cube = x * x * x
    return x * (np.float32(1) + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * cube))) / np.float32(2)


def _residual(value, batch, row, col, residual):
    return np.float32(2) * value + np.float32(-1) * residual[batch, row, col]


@pytest.mark.parametrize("fn, operand, layout, dtype, plan, order", [
    (_bias_col, "bias", DataLayout((96,), (1,), "float32"), "float32", R.LibraryPlan("RELU_BIAS", "bias", "col"), "C"),
    (_bias_row, "bias", DataLayout((64,), (1,), "bfloat16"), "bfloat16", R.LibraryPlan("GELU_BIAS", "bias", "row"),
     "F"),
    (_residual, "residual", DataLayout((3, 64, 96), (64 * 96, 96, 1), "complex64"), "complex64",
     R.LibraryPlan("DEFAULT", None, None, "residual", 2.0, -1.0), "C"),
])
def test_cublaslt_epilogs_take_the_library_route(fn, operand, layout, dtype, plan, order):
    facts = _facts(64, 96, 32, batch=3, dtype=dtype, compute="64F" if dtype == "float64" else "32F")
    with_batch = fn is _residual
    route = R.choose_route(facts, recognize(fn, [operand], with_batch), {operand: layout}, (8, 0), 108)
    assert (route.name, route.library, route.order) == ("library", plan, order), route


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cublaslt_gelu_is_not_taken_for_wider_results(dtype):
    """cuBLASLt's GELU is 1.5e-5 (float32) and 5e-9 (float64) off the tanh form (H200, cuBLASLt 13.1): a float32 or
    float64 GELU epilog runs the function as written (the pass), never cuBLASLt's approximation."""
    recognized = recognize(_bias_row, ["bias"], False)
    p = _facts(64, 96, 32, dtype, compute="64F" if dtype == "float64" else "32F")
    plan, why = R.library_plan(recognized, {"bias": DataLayout((64,), (1,), dtype)}, p)
    assert plan is None and "GELU is an approximation" in why
    assert R.choose_route(p, recognized, {"bias": DataLayout((64,), (1,), dtype)}, (9, 0), 132).name == "elementwise"


@pytest.mark.parametrize("layout, dtype, c, why", [
    (DataLayout((95,), (1,), "float32"), "float32", False, "vector of length 96"),     # not N long
    (DataLayout((96,), (2,), "float32"), "float32", False, "contiguous"),              # strided
    (DataLayout((96,), (1,), "float16"), "float32", False, "float32 vector"),          # another dtype
    (DataLayout((96,), (1,), "float32"), "complex64", False, "no bias or activation"),
])
def test_operands_cublaslt_cannot_take_keep_the_compiled_route(layout, dtype, c, why):
    facts = _facts(64, 96, 32, dtype=dtype, c=c)
    recognized = recognize(_bias_col, ["bias"], False)
    plan, reason = R.library_plan(recognized, {"bias": layout}, facts)
    assert plan is None and why in reason, reason
    assert R.choose_route(facts, recognized, {"bias": layout}, (9, 0), 132).name == "elementwise"


def test_a_residual_needs_the_c_slot():
    facts = _facts(64, 96, 32, batch=3, c=True)
    layout = DataLayout((3, 64, 96), (64 * 96, 96, 1), "bfloat16")
    plan, reason = R.library_plan(recognize(_residual, ["residual"], True), {"residual": layout}, facts)
    assert plan is None and "its own C" in reason


def test_requested_routes():
    facts = _facts(5000, 3000, 2000)
    assert R.choose_route(facts, None, GATE, (9, 0), 132, "fused").name == "fused"  # edge tiles, on request
    batched = {"gate": DataLayout((2, 5000, 3000), (5000 * 3000, 3000, 1), "bfloat16")}
    assert R.choose_route(facts, None, batched, (9, 0), 132, "fused").name == "fused"  # batched data too
    assert R.choose_route(facts, None, GATE, (9, 0), 132, "generic").name == "generic"
    bias = {"bias": DataLayout((3000,), (1,), "bfloat16")}
    recognized = recognize(_bias_col, ["bias"], False)
    assert R.choose_route(facts, recognized, bias, (9, 0), 132).name == "library"
    assert R.choose_route(facts, recognized, bias, (9, 0), 132, "elementwise").name == "elementwise"
    with pytest.raises(ValueError, match=r"'fused' is not possible: compute capability 8\.0"):
        R.choose_route(facts, None, GATE, (8, 0), 108, "fused")
    with pytest.raises(ValueError, match="'library' is not possible: the function is not one of cuBLASLt's"):
        R.choose_route(facts, None, GATE, (9, 0), 132, "library")
    with pytest.raises(ValueError, match="allowed"):
        R.choose_route(facts, None, GATE, (9, 0), 132, "fastest")
    with pytest.raises(ValueError, match="no complex kernels"):
        R.choose_route(_facts(64, 64, 64, "complex64"), None, {}, (9, 0), 132, "generic")


# ---------------------------------------------------------------- recognition

def _relu_np(value, row, col, data):
    return np.maximum(value, np.float32(0))


def _gelu_erf(value, row, col, data):
    return np.float32(0.5) * value * (np.float32(1) + math.erf(value / np.float32(1.4142135)))


def _offset(value, row, col, data):
    return value + data[col] + np.float32(1)


def _shifted_index(value, row, col, data):
    return value + data[col + 1]


def _branch(value, row, col, data):
    return value if value > 0 else np.float32(0)


def _two_biases(value, row, col, a, b):
    return value + a[col] + b[col]


def _scale_row(value, row, col, data):
    return value * data[row]


@pytest.mark.parametrize("fn, operands, expected", [
    (_relu_np, [None], ("relu", 1.0, ())),
    (_bias_row, ["bias"], ("gelu", 1.0, (("bias", ("row",), 1.0),))),
    (_residual, ["residual"], (None, 2.0, (("residual", ("batch", "row", "col"), -1.0),))),
    (_gelu_erf, [None], None),          # the erf GELU is not cuBLASLt's (tanh) GELU
    (_offset, ["data"], None),          # a constant offset: cuBLASLt has no such epilog
    (_shifted_index, ["data"], None),   # an index that is not a coordinate
    (_branch, ["data"], None),          # a branch on the value: not traceable
    (_scale_row, ["data"], None),       # a product with an operand: not affine
    (_two_biases, ["a", "b"], (None, 1.0, (("a", ("col",), 1.0), ("b", ("col",), 1.0)))),
])
def test_recognition(fn, operands, expected):
    got = recognize(fn, operands, fn is _residual)
    assert (None if got is None else (got.activation, got.value_scale, got.terms)) == expected


def test_two_biases_are_not_cublaslt_s():
    recognized = recognize(_two_biases, ["a", "b"], False)
    layouts = {name: DataLayout((96,), (1,), "float32") for name in "ab"}
    plan, reason = R.library_plan(recognized, layouts, _facts(64, 96, 32, "float32"))
    assert plan is None and "'b'" in reason


# ---------------------------------------------------------------- every route end to end on a stand-in GPU

class HostPass:
    """The elementwise pass on host memory: D's values through the epilog compiled by numba, in place (checked as
    the plan says: an index outside an operand raises OutOfBoundsError, as the GPU pass's record does)."""

    streams = []

    def __init__(self, problem, *, execution=None):
        self.problem = problem

    def execute(self, d, epilog_inputs, stream):
        from mathpy.jit._matmul_epilog import apply_cpu

        p = self.problem
        HostPass.streams.append(stream)
        view = host_view(d, p.d.dtype, (p.batch, p.m, p.n), (p.d.batch_stride, p.d.row_stride, p.d.col_stride))
        compute = np.complex64 if p.d.dtype.kind == "c" else (np.float64 if p.d.dtype == np.float64 else np.float32)
        operands = [None if layout is None else host_view(epilog_inputs[name], np.dtype(layout.dtype), layout.shape,
                                                          layout.strides)
                    for name, layout in p.fused.operands]
        view[...] = apply_cpu(p.fused.epilog, np.ascontiguousarray(view.astype(compute)), operands,
                              p.fused.check_bounds)


@pytest.fixture
def stand_in_gpu(monkeypatch):
    """A GPU of compute capability 9.0 (the test may pass another) made of torch CPU tensors (``start.package``: the
    package posing as torch's CUDA, whose streams may pose as capturing)."""
    torch = pytest.importorskip("torch")
    from test_matmul_orchestration import PointerEngine, PosingTorch

    from mathpy import _cuda, _engines, _packages
    from mathpy.host.matmul import _stateless, matmul_plan_cache

    def start(cc=(9, 0)):
        pretend_a_gpu(monkeypatch, cc)
        monkeypatch.setattr(_cuda, "multiprocessor_count", lambda device_id=0: 132)
        package = start.package = PosingTorch()
        stack.append(_packages.use(package, device_package_name="torch"))
        stack.append(_engines.use("matmul", "cuda", PointerEngine))
        stack.append(_engines.use("matmul-epilog-pass", "cuda", HostPass))
        for context in stack:
            context.__enter__()
        matmul_plan_cache.clear()
        _stateless.forget()
        PointerEngine.instances.clear()
        HostPass.streams.clear()
        return torch

    stack = []
    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)
    matmul_plan_cache.clear()
    _stateless.forget()


def _torch(x, torch):
    x = np.asarray(x)
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _numpy(t, torch):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


@pytest.mark.parametrize("name, dtype, route", [
    ("bias_col", "float32", "library"), ("bias_row", "float64", "library"), ("residual", "complex64", "library"),
    ("relu_bias", "bfloat16", "library"), ("gelu_tanh", "bfloat16", "library"),
    ("gelu_tanh", "float32", "elementwise"),  # cuBLASLt's GELU is 1.5e-5 off: float32 takes the pass
    ("gated_silu", "bfloat16", "elementwise"), ("clamp", "float16", "elementwise"),
    ("batch_scale", "complex64", "elementwise"), ("mixed", "float64", "elementwise"),
    ("bias_col", "float32", "elementwise*"), ("residual", "bfloat16", "elementwise*"),
])
def test_each_route_on_a_stand_in_gpu(stand_in_gpu, caplog, name, dtype, route):
    """The plan picks the route (and logs why); the result matches the float64 reference within the bound (the
    elementwise pass rounds the product to the result dtype first: one more rounding); a forced route (*) agrees."""
    torch = stand_in_gpu()
    import mathpy

    case = BY_NAME[name]
    rng = np.random.default_rng(5)
    m, n, k, batch = 12, 20, 9, (3 if case.batched_only or name == "residual" else 1)
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    a, b = random((batch, m, k), dt, rng, 1 / math.sqrt(k)), random((batch, k, n), dt, rng)
    operands = case.make(m, n, batch, rng, dt)
    if name == "residual" and batch > 1:  # the full batch: cuBLASLt's C
        operands = {"residual": np.stack([operands["residual"]] * batch)}
        case = BY_NAME["residual"]
    forced = route.endswith("*")
    preferences = {"epilog_route": "elementwise"} if forced else None
    with caplog.at_level(logging.INFO, logger="mathpy"):
        out = mathpy.matmul(_torch(a, torch), _torch(b, torch), epilog=_batched(case, operands),
                            epilog_inputs={k_: _torch(v, torch) for k_, v in operands.items()}, preferences=preferences)
    chosen = route.rstrip("*")
    assert f"route: {chosen} because" in caplog.text
    x, magnitude = product(a, b)
    ref = _reference(case, x, operands)
    limit = bound(case, dt, x, magnitude, ref, k, product_rounded=chosen in ("elementwise", "library")
                  and dt.itemsize == 2)
    assert_within(_numpy(out, torch).astype(ref.dtype), ref, limit, f"{name} {dtype} {route}")


def _residual_3d(value, batch, row, col, residual):
    return np.float32(0.5) * value + residual[batch, row, col]


def _batched(case, operands):
    if case.name == "residual" and operands["residual"].ndim == 3:
        return _residual_3d
    return case.function


def _reference(case, x, operands):
    if case.name == "residual" and operands["residual"].ndim == 3:
        return case.__class__("residual3", _residual_3d, case.operands).reference(x, operands)
    return case.reference(x, operands)


def test_the_pass_takes_each_call_s_stream(stand_in_gpu):
    torch = stand_in_gpu()
    import mathpy

    a = torch.ones(4, 8)
    gate = torch.ones(4, 4)
    for stream in (5, 9, 5):
        mathpy.matmul(a, a.T, epilog=_gated, epilog_inputs={"gate": gate}, stream=stream)
    assert HostPass.streams == [5, 9, 5]


@pytest.mark.parametrize("cc", [(8, 0), (10, 0)])
def test_other_architectures_run_the_elementwise_route(stand_in_gpu, caplog, cc):
    torch = stand_in_gpu(cc)
    import mathpy

    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).bfloat16()
    gate = torch.ones(8, 8).bfloat16()
    with caplog.at_level(logging.INFO, logger="mathpy"):
        out = mathpy.matmul(a, a.T, epilog=_gated, epilog_inputs={"gate": gate})
    assert f"compute capability {cc[0]}.{cc[1]} has no wgmma" in caplog.text and "route: elementwise" in caplog.text
    x = (a.double() @ a.double().T).numpy()
    ref = x / (1 + np.exp(-x))
    # the product rounded to bfloat16 (u = 2^-8) carried through silu (slope <= 1.1), then the result rounded
    limit = 2.0 ** -8 * (1.1 * np.abs(x) + np.abs(ref)) + 1e-30
    assert_within(out.double().numpy(), ref, limit, f"sm_{cc[0]}{cc[1]}")
    with pytest.raises(ValueError, match="'fused' is not possible"):
        mathpy.matmul(a, a.T, epilog=_gated, epilog_inputs={"gate": gate}, preferences={"epilog_route": "fused"})


def test_an_epilog_cublaslt_refuses_falls_back_to_the_pass(stand_in_gpu, caplog):
    """Where cuBLASLt has no kernel for the recognised epilog, the plan runs the product alone and the pass."""
    torch = stand_in_gpu()
    import mathpy
    from mathpy import CUDALibraryError, _engines
    from test_matmul_orchestration import PointerEngine

    class Refusing(PointerEngine):
        def __init__(self, problem, **kwargs):
            if problem.epilog is not None:
                raise CUDALibraryError("cublasLt", "cublasLtMatmulAlgoGetHeuristic", 15, "CUBLAS_STATUS_NOT_SUPPORTED")
            super().__init__(problem, **kwargs)

    a = torch.randn(6, 5, generator=torch.Generator().manual_seed(2))
    bias = torch.randn(4, generator=torch.Generator().manual_seed(3))
    with _engines.use("matmul", "cuda", Refusing), caplog.at_level(logging.INFO, logger="mathpy"):
        out = mathpy.matmul(a, a[:4].T, epilog=_bias_col, epilog_inputs={"bias": bias})
    assert "route: library because" in caplog.text and "refused its RELU_BIAS epilog" in caplog.text
    assert HostPass.streams  # the pass ran
    x = a.double().numpy() @ a[:4].double().numpy().T
    ref = np.maximum(x + bias.double().numpy(), 0)
    magnitude = np.abs(a.double().numpy()) @ np.abs(a[:4].double().numpy()).T
    limit = gamma(6, np.float32) * magnitude + 2 * 2.0 ** -24 * (np.abs(ref) + np.abs(x)) + 1e-38
    assert_within(out.double().numpy(), ref, limit, "fallback")


# ---------------------------------------------------------------- bounds of the operands on a stand-in GPU

def _late_gate(value, row, col, gate):
    if row > 0:
        return value * gate[row, col + 1]
    return value


def test_operands_too_small_are_refused_on_every_route(stand_in_gpu):
    """The plan-time check comes before the route: an operand too small for what the function indexes is a
    ValueError naming it, whether the function is cuBLASLt's (library) or not, whatever route is asked for."""
    torch = stand_in_gpu()
    import mathpy
    from test_matmul_orchestration import PointerEngine

    a = torch.ones(4, 8)
    for fn, inputs, word in [(_bias_col, {"bias": torch.ones(3)}, "bias has shape (3,)"),
                             (_gated, {"gate": torch.ones(4, 3)}, "gate has shape (4, 3)")]:
        for route in ("auto", "elementwise", "generic", "fused"):
            with pytest.raises(ValueError, match=re.escape(word)):
                mathpy.matmul(a, a.T, epilog=fn, epilog_inputs=inputs, preferences={"epilog_route": route})
    assert not PointerEngine.instances and not HostPass.streams


def test_check_bounds_on_the_routes_of_a_stand_in_gpu(stand_in_gpu):
    """check_bounds runs the elementwise pass checked (OutOfBoundsError names the operand); the library route runs
    cuBLASLt's own epilog, which reads only what the plan checked; a checked execution inside a CUDA graph capture
    is refused before anything is queued, the library route's is captured."""
    torch = stand_in_gpu()
    import mathpy
    from test_matmul_orchestration import PointerEngine

    package = stand_in_gpu.package
    a, gate, bias = torch.ones(4, 8), torch.ones(4, 4), torch.ones(4)
    checked = {"check_bounds": True}
    with pytest.raises(mathpy.OutOfBoundsError) as info:
        mathpy.matmul(a, a.T, epilog=_late_gate, epilog_inputs={"gate": gate}, options=checked)
    assert info.value.array == "gate" and info.value.index[1] == 4
    with mathpy.Matmul(a, a.T, options=checked) as gated, mathpy.Matmul(a, a.T, options=checked) as library:
        gated.plan(epilog=_gated, epilog_inputs={"gate": gate})
        library.plan(epilog=_bias_col, epilog_inputs={"bias": bias})
        assert gated.execute().shape == library.execute().shape == (4, 4)
        calls, passes = sum(e.calls for e in PointerEngine.instances), len(HostPass.streams)
        package.capturing.add(40)
        with pytest.raises(mathpy.StreamCaptureError, match="check_bounds"):
            gated.execute(stream=40)
        assert sum(e.calls for e in PointerEngine.instances) == calls and len(HostPass.streams) == passes
        out = library.execute(stream=40)
    assert PointerEngine.instances[-1].streams[-1] == 40
    np.testing.assert_allclose(out.numpy(), np.full((4, 4), 9.0))  # relu(8 + 1)
