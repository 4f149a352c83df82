"""Streams and CUDA graphs on a real GPU (issue 20; ``pytest -m gpu tests/test_streams_gpu.py``).

Every public GPU entry point is run three ways, for CuPy arrays and torch CUDA tensors:

- **on the caller's stream**: the inputs are rewritten on a non-blocking user stream behind a spin kernel of a few
  milliseconds and the call is made inside that stream's scope; a call that ran anywhere else would read the old
  inputs (no implicit synchronisation: the streams are non-blocking);
- **on two streams without synchronisation**: one plan executed on s1, then s2, each behind its own spin, with the
  user never ordering the streams; a workspace or staging buffer shared by the two shows as a wrong result;
- **captured in a CUDA graph** (``torch.cuda.graph``, CuPy's ``Stream.begin_capture``): after a warm-up, the call
  is captured, the inputs are overwritten in place, the graph is replayed and the result compared with the
  reference of the new inputs (an empty graph, or one that captured the wrong buffers, fails: the warm-up's result
  is stale).

Calls a graph cannot record raise StreamCaptureError before queueing anything, and the capture stays valid. A
``mathpy.torch.MLP`` training step is captured whole and replayed for 100 steps against eager training, and a model
using ``mathpy.fft`` and ``mathpy.matmul`` runs under ``torch.compile(mode="reduce-overhead")`` (CUDA graphs).
The CPU-visible rules (which stream each call resolves, and when; what is refused; what is kept for a graph) are
tested on CI with stand-in packages: tests/test_fft_fake_gpu.py, tests/test_matmul_orchestration.py,
tests/test_cufft_emulated.py.
"""

import warnings

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import MatmulEpilog, StreamCaptureError

from _tolerance import assert_fft_close, assert_within, epilog_bounds, matmul_bound, unit_roundoff

pytestmark = pytest.mark.gpu

SPIN_CYCLES = 4_000_000  # about 2 ms at the H200's clock: far longer than any call below takes to be queued
RNG = np.random.default_rng(20)


# --- the two array packages --------------------------------------------------------------------------------------

class Torch:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch

    def asarray(self, x):
        return self.torch.from_numpy(np.ascontiguousarray(x)).cuda()

    def numpy(self, x):
        return x.float().cpu().numpy() if x.dtype == self.torch.bfloat16 else x.cpu().numpy()

    def copy(self, target, source):
        target.copy_(source)  # device to device, queued on the current stream

    def stream(self):
        return self.torch.cuda.Stream()  # torch's streams do not synchronise with the legacy default stream

    def scope(self, stream):
        return self.torch.cuda.stream(stream)

    def spin(self):
        self.torch.cuda._sleep(SPIN_CYCLES)

    def synchronize(self):
        self.torch.cuda.synchronize()

    def capture(self, run):
        """(replay, output) of ``run`` captured in a torch CUDA graph after a warm-up on a side stream (as torch's
        documentation does it)."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # "The CUDA Graph is empty": nothing was recorded
            with torch.cuda.graph(graph):
                out = run()
        return graph.replay, out


class CuPy:
    name = "cupy"

    def __init__(self):
        import cupy
        self.cp = cupy
        self._spin = cupy.RawKernel(r'''
            extern "C" __global__ void spin(long long cycles) {
                long long start = clock64();
                while (clock64() - start < cycles) { }
            }''', "spin")

    def asarray(self, x):
        return self.cp.asarray(x)

    def numpy(self, x):
        return self.cp.asnumpy(x)

    def copy(self, target, source):
        self.cp.copyto(target, source)  # device to device, queued on the current stream

    def stream(self):
        return self.cp.cuda.Stream(non_blocking=True)

    def scope(self, stream):
        return stream

    def spin(self):
        self._spin((1,), (1,), (np.int64(SPIN_CYCLES),))

    def synchronize(self):
        self.cp.cuda.Device().synchronize()

    def capture(self, run):
        stream = self.cp.cuda.Stream(non_blocking=True)
        with stream:
            run()  # the warm-up: plans what the capture records
            stream.synchronize()
            stream.begin_capture()
            out = run()
            graph = stream.end_capture()

        def replay():
            graph.launch(stream=stream)
            stream.synchronize()
        return replay, out


@pytest.fixture(params=["cupy", "torch"])
def pkg(request):
    pytest.importorskip(request.param)
    return CuPy() if request.param == "cupy" else Torch()


# --- the entry points ----------------------------------------------------------------------------------------------

def _scale(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset % 4096]


def _plus_residual(value, row, col, data):
    return value + data[row, col]


def _fft_inputs(pkg, n=4099):
    """16 transforms of a prime length (cuFFT plans it with a workspace), or of ``n``."""
    x = (RNG.standard_normal((16, n)) + 1j * RNG.standard_normal((16, n))).astype(np.complex64)
    filt = (RNG.standard_normal(n) + 1j * RNG.standard_normal(n)).astype(np.complex64)
    return {"x": pkg.asarray(x), "filt": pkg.asarray(filt)}


def _matmul_inputs(pkg):
    a = RNG.standard_normal((256, 384)).astype(np.float16)
    b = RNG.standard_normal((384, 512)).astype(np.float16)
    bias = RNG.standard_normal(256).astype(np.float16)
    data = RNG.standard_normal((256, 512)).astype(np.float16)
    return {"a": pkg.asarray(a), "b": pkg.asarray(b), "bias": pkg.asarray(bias), "data": pkg.asarray(data)}


def _check_fft(got, values, inverse=False, filtered=False):
    x = values["x"].astype(np.complex128)
    expected = np.fft.ifft(x, axis=1) * x.shape[1] if inverse else np.fft.fft(x, axis=1)
    if filtered:
        expected = expected * values["filt"]
    assert_fft_close(got, expected, np.float32, x.shape[1], sources=2 if filtered else 1)


def _check_matmul(got, values, epilog=None):
    a, b = values["a"].astype(np.float64), values["b"].astype(np.float64)
    if epilog == "relu_bias":
        x = a @ b + values["bias"].astype(np.float64)[:, None]
        _, bound = epilog_bounds(MatmulEpilog.RELU_BIAS, values["a"], values["b"], np.float16, 1.0,
                                 values["bias"][:, None], x, np.maximum(x, 0))
        assert_within(got, np.maximum(x, 0), bound, "RELU_BIAS")
        return
    exact = a @ b
    bound = matmul_bound(values["a"], values["b"], np.float16, exact=exact)
    if epilog == "python":
        exact = exact + values["data"].astype(np.float64)
        bound = bound + unit_roundoff(np.float16) * np.abs(exact)  # the sum is rounded to float16 once more
    assert_within(got, exact, bound, "matmul")


def _planned_fft(state):
    f = state["plans"]["fft"] = mfft.FFT(state["x"], axes=[1])
    f.plan()
    return f


def _planned_matmul(state):
    mm = state["plans"]["matmul"] = mathpy.Matmul(state["a"], state["b"])
    mm.plan()
    return mm


def _compat_fft(state):
    import mathpy.compat.nvmath as nvmath
    f = state["plans"]["fft"] = nvmath.fft.FFT(state["x"], axes=[1])
    f.plan()
    return f


def _compat_matmul(state):
    import mathpy.compat.nvmath as nvmath
    mm = state["plans"]["matmul"] = nvmath.linalg.advanced.Matmul(state["a"], state["b"])
    mm.plan()
    return mm


def _nvmath():
    import mathpy.compat.nvmath as nvmath
    return nvmath


#: name -> (inputs, prepare(state) -> run() (the planned object made first), check(got, values))
CASES = {
    "fft": (_fft_inputs, lambda s: lambda: mfft.fft(s["x"], axis=1), _check_fft),
    # (cuFFT has no callback kernels for 4099 points: CUFFT_NOT_SUPPORTED)
    "fft-callback": (lambda pkg: _fft_inputs(pkg, 4096),
                     lambda s: lambda: mfft.fft(s["x"], epilog=mfft.Callback(_scale, data=s["filt"])),
                     lambda got, v: _check_fft(got, v, filtered=True)),
    "FFT.execute": (_fft_inputs, lambda s: _planned_fft(s).execute, _check_fft),
    "FFT.execute-inverse": (_fft_inputs, lambda s: lambda f=_planned_fft(s): f.execute(direction="inverse"),
                            lambda got, v: _check_fft(got, v, inverse=True)),
    "nvmath.fft.fft": (_fft_inputs, lambda s: lambda: _nvmath().fft.fft(s["x"], axes=[1]), _check_fft),
    "nvmath.fft.FFT": (_fft_inputs, lambda s: _compat_fft(s).execute, _check_fft),
    "matmul": (_matmul_inputs, lambda s: lambda: mathpy.matmul(s["a"], s["b"]), _check_matmul),
    "matmul-RELU_BIAS": (_matmul_inputs, lambda s: lambda: mathpy.matmul(
        s["a"], s["b"], epilog=MatmulEpilog.RELU_BIAS, epilog_inputs={"bias": s["bias"]}),
        lambda got, v: _check_matmul(got, v, "relu_bias")),
    "matmul-python-epilog": (_matmul_inputs, lambda s: lambda: mathpy.matmul(
        s["a"], s["b"], epilog=_plus_residual, epilog_inputs={"data": s["data"]}),
        lambda got, v: _check_matmul(got, v, "python")),
    "Matmul.execute": (_matmul_inputs, lambda s: _planned_matmul(s).execute, _check_matmul),
    "nvmath.matmul": (_matmul_inputs, lambda s: lambda: _nvmath().linalg.advanced.matmul(s["a"], s["b"]),
                      _check_matmul),
    "nvmath.Matmul": (_matmul_inputs, lambda s: _compat_matmul(s).execute, _check_matmul),
}


def _state(pkg, case):
    make, prepare, check = CASES[case]
    state = make(pkg)
    state["plans"] = {}
    return state, prepare, check


def _new_values(pkg, state):
    """``(values, write)``: new values for every input array (NumPy), already on the device (the device is
    synchronised), and ``write()``, which copies them into the inputs in place, device to device, queued on the
    current stream (so that it runs behind whatever that stream is doing)."""
    values, staged = {}, {}
    for name, array in state.items():
        if name == "plans":
            continue
        host = pkg.numpy(array)
        fresh = (RNG.standard_normal(host.shape) + (1j * RNG.standard_normal(host.shape) if host.dtype.kind == "c"
                                                    else 0)).astype(host.dtype)
        values[name], staged[name] = fresh, pkg.asarray(fresh)
    pkg.synchronize()

    def write():
        for name, source in staged.items():
            pkg.copy(state[name], source)
    return values, write


def _refill(pkg, state):
    """New values written into the inputs now; their NumPy copies."""
    values, write = _new_values(pkg, state)
    write()
    return values


def _free(state):
    for plan in state["plans"].values():
        plan.free()


@pytest.mark.parametrize("case", list(CASES))
def test_a_call_runs_on_the_callers_stream(pkg, case):
    """The inputs are rewritten on a user stream behind a spin; the call, made in that stream's scope, must see them
    (a launch on the stream the object was built or planned on, or on the default stream, reads the old ones)."""
    state, prepare, check = _state(pkg, case)
    try:
        run = prepare(state)  # planned on the default stream
        run()
        pkg.synchronize()
        user = pkg.stream()
        values, write = _new_values(pkg, state)
        with pkg.scope(user):
            pkg.spin()
            write()
            got = run()
        pkg.synchronize()
        check(pkg.numpy(got), values)
    finally:
        _free(state)


@pytest.mark.parametrize("case", ["FFT.execute", "Matmul.execute", "fft", "matmul"])
def test_one_plan_on_two_streams_without_synchronisation(pkg, case):
    """One plan (the stateful object's, or the stateless cache's) executed on s1 then s2 in 20 rounds, each behind a
    spin on its own stream, the streams never ordered by the user: every result is right (each stream has its own
    workspace; the FFT's 16 x 4099 C2C has one: a prime length)."""
    state, prepare, check = _state(pkg, case)
    inputs = {name: value for name, value in state.items() if name != "plans"}
    second = {name: pkg.asarray(pkg.numpy(value)) for name, value in inputs.items()}
    try:
        run = prepare(state)
        run()
        pkg.synchronize()
        s1, s2 = pkg.stream(), pkg.stream()
        reset = {"FFT.execute": lambda x: state["plans"]["fft"].reset_operand(x["x"]),
                 "Matmul.execute": lambda x: state["plans"]["matmul"].reset_operands(a=x["a"], b=x["b"])}.get(case)
        for _ in range(20):
            results = []
            for stream, arrays in ((s1, inputs), (s2, second)):
                values, write = _new_values(pkg, {**arrays, "plans": None})
                with pkg.scope(stream):
                    pkg.spin()
                    write()
                    if reset is not None:
                        reset(arrays)
                        results.append((run(), values))
                    else:
                        state.update(arrays)
                        results.append((run(), values))
            pkg.synchronize()
            for got, values in results:
                check(pkg.numpy(got), values)
    finally:
        _free(state)


@pytest.mark.parametrize("case", list(CASES))
def test_a_captured_call_replays_on_new_inputs(pkg, case):
    """Captured after a warm-up; the inputs are overwritten in place; the replay's output is the new inputs'
    result (twice, with other values the second time)."""
    state, prepare, check = _state(pkg, case)
    try:
        run = prepare(state)
        replay, out = pkg.capture(run)
        for _ in range(2):
            values = _refill(pkg, state)
            pkg.synchronize()
            replay()
            pkg.synchronize()
            check(pkg.numpy(out), values)
    finally:
        _free(state)


def test_calls_a_graph_cannot_record_are_refused_and_the_capture_survives(pkg):
    """A first plan, a stateless call never made before, autotune, blocking=True and host operands raise
    StreamCaptureError inside the capture, and the capture still records what follows."""
    state = _fft_inputs(pkg)
    mm_inputs = _matmul_inputs(pkg)
    host = np.ones((8, 8), np.float32)
    with mathpy.Matmul(mm_inputs["a"], mm_inputs["b"]) as planned, \
            mfft.FFT(state["x"], axes=[1], options={"blocking": True}) as blocking:
        planned.plan()
        blocking.plan()
        runs = []  # the refusals of each run: the warm-up's (none), then the capture's

        def run():
            refused, n = [], 4095 - len(runs)  # a length not transformed before: a stateless call's first plan
            for call in (lambda: mfft.FFT(state["x"][:4], axes=[1]).plan(), lambda: mfft.fft(state["x"][:, :n]),
                         planned.autotune, blocking.execute, lambda: mathpy.matmul(host, host, execution="cuda")):
                try:
                    call()
                except StreamCaptureError as error:
                    refused.append(str(error))
            runs.append(refused)
            return planned.execute()

        replay, out = pkg.capture(run)
        assert runs[0] == [] and len(runs[1]) == 5, runs
        for text, call in zip(runs[1], ("FFT.plan", "FFT.plan", "Matmul.autotune", "blocking", "host")):
            assert call in text and "cannot be captured in a CUDA graph" in text, text
        values = _refill(pkg, {"a": mm_inputs["a"], "b": mm_inputs["b"], "plans": None})
        pkg.synchronize()
        replay()
        pkg.synchronize()
        _check_matmul(pkg.numpy(out), values)


# --- torch: a training step in a graph, and torch.compile's CUDA graphs ------------------------------------------

def test_an_mlp_training_step_captured_whole_matches_eager_training():
    """mathpy.torch.MLP (bf16, GELU): forward, backward and the optimizer step captured once in torch.cuda.graph and
    replayed for 100 steps on new batches give the losses of the same 100 steps run eagerly."""
    torch = pytest.importorskip("torch")
    import mathpy.torch as mtorch

    torch.manual_seed(0)
    batches = [(torch.randn(512, 256, device="cuda", dtype=torch.bfloat16),
                torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)) for _ in range(100)]

    def make():
        torch.manual_seed(1)
        model = mtorch.MLP(256, 1024, activation="gelu").cuda().to(torch.bfloat16)
        return model, torch.optim.SGD(model.parameters(), lr=1e-2)

    def step(model, optimizer, x, y):
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        loss.backward()
        optimizer.step()
        return loss

    model, optimizer = make()
    eager = [step(model, optimizer, x, y).item() for x, y in batches]

    model, optimizer = make()
    static_x, static_y = batches[0][0].clone(), batches[0][1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up (torch's recipe): plans every product, makes the grads
        warm_model, warm_optimizer = make()
        for _ in range(3):
            step(warm_model, warm_optimizer, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=False)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(model, optimizer, static_x, static_y)
    # the capture did not run the step: start from the same parameters as the eager run
    fresh, _ = make()
    with torch.no_grad():
        for p, q in zip(model.parameters(), fresh.parameters()):
            p.copy_(q)
    graphed = []
    for x, y in batches:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        graphed.append(static_loss.item())
    # the same kernels on the same values: the losses agree up to bf16 rounding of the activations along the way
    np.testing.assert_allclose(graphed, eager, rtol=8 * unit_roundoff("bfloat16"))
    assert graphed[-1] < graphed[0]  # and it trained


def test_torch_compile_reduce_overhead_with_mathpy_fft_and_matmul():
    """A model calling mathpy.fft.rfft and mathpy.matmul, compiled with mode="reduce-overhead" (CUDA graphs), gives
    eager's outputs on several new inputs."""
    torch = pytest.importorskip("torch")
    import mathpy.torch  # noqa: F401  (the custom ops)

    weight = torch.randn(129, 64, device="cuda")

    def model(x):
        spectrum = mfft.rfft(x, axis=-1).abs()
        return mathpy.matmul(spectrum, weight, epilog="relu")

    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for seed in range(4):
        x = torch.randn(32, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        expected = model(x)
        got = compiled(x).clone()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
