"""mathpy under torch.compile: the custom ops pass torch.library.opcheck (schema, fake tensors, autograd registration,
AOT dispatch), a model using mathpy.fft, mathpy.matmul (with and without epilogs), Linear and MLP compiles with
fullgraph=True (no graph break) and gives eager's results and gradients, with static and dynamic shapes; on a GPU the
same model compiles with inductor, and a whole training step is captured in a CUDA graph and replayed.

On the CPU the backend is aot_eager (dynamo + fake tensors + AOTAutograd, no code generation: inductor's C++ build
takes ~30 s on CI's two cores); on the GPU it is inductor."""

import pytest

from _torch_helpers import device, randn, torch  # noqa: F401  (device: the fixture)

import mathpy
import mathpy.fft as mfft
import mathpy.torch as mt

F64 = torch.float64


def _opcheck_cases(device):
    ops = torch.ops.mathpy
    c = dict(dtype=torch.complex128, device=device)
    f32 = dict(dtype=torch.float32, device=device)
    return {
        "fft_c2c 1-D": (ops.fft_c2c, (randn(3, 8, **c), [1], "ortho", True)),
        "fft_c2c 2 of 3 axes": (ops.fft_c2c, (randn(2, 3, 4, **c), [0, 2], "backward", False)),
        "fft_r2c": (ops.fft_r2c, (randn(3, 8, device=device), [0, 1], "backward")),
        "fft_c2r odd": (ops.fft_c2r, (randn(3, 5, **c), [0, 1], "forward", 9)),
        "matmul GELU_AUX_BIAS": (ops.matmul, (randn(3, 4, device=device), randn(4, 5, device=device), None, 1.0,
                                                  0.0, "GELU_AUX_BIAS", randn(3, device=device), None, "", "")),
        "matmul batched vector c": (ops.matmul, (randn(2, 3, 4, device=device), randn(4, device=device),
                                                     randn(3, device=device), 0.5, 2.0, "DEFAULT", None, None, "",
                                                     "")),
        "matmul float32 RELU_BIAS": (ops.matmul, (randn(3, 4, **f32), randn(5, 4, **f32).mT, None, 1.0, 0.0,
                                                      "RELU_BIAS", randn(3, **f32), None, "", "")),
        "mm": (ops.mm, (randn(3, 4, device=device), randn(4, 5, device=device))),
        "mm batched by a vector, complex": (ops.mm, (randn(2, 3, 4, **c), randn(4, **c))),
        "mm column-major float32": (ops.mm, (randn(4, 3, **f32).mT, randn(2, 4, 5, **f32))),
        "mlp gelu": (ops.mlp, (randn(2, 3, 5, device=device), randn(9, 5, device=device),
                                      randn(9, device=device), randn(4, 9, device=device), randn(4, device=device),
                                      "gelu", True, "")),
        "mlp relu no bias": (ops.mlp, (randn(6, 5, device=device), randn(9, 5, device=device), None,
                                              randn(4, 9, device=device), None, "relu", True, "")),
    }


@pytest.mark.parametrize("case", list(_opcheck_cases("meta")))
def test_ops_pass_opcheck(device, case):
    op, args = _opcheck_cases(device)[case]
    torch.library.opcheck(op, args)


class Model(torch.nn.Module):
    """FFTs (1-D with padding, 2-D, real and complex), matmul with and without epilogs, Linear, MLP."""

    def __init__(self, dtype=F64, device="cpu"):
        super().__init__()
        kw = dict(dtype=dtype, device=device)
        self.w = torch.nn.Parameter(torch.randn(16, 16, **kw) / 4)
        self.b = torch.nn.Parameter(torch.randn(16, **kw))
        self.lin = mt.Linear(16, 32, activation="gelu", **kw)
        self.mlp = mt.MLP(32, 64, 8, activation="relu", **kw)

    def forward(self, x):
        spectrum = mfft.rfft(x, n=30, norm="ortho")
        y = mfft.irfft(spectrum * spectrum.abs(), n=16)
        z = mathpy.matmul(self.w, y.mT, epilog="gelu_bias", epilog_inputs={"bias": self.b}).mT
        z = mathpy.matmul(z, self.w, alpha=0.5) + mfft.ifft2(mfft.fft2(z.reshape(-1, 4, 4)) * 2).real.reshape(z.shape)
        return self.mlp(self.lin(z))


def run(model, x):
    y = model(x)
    grads = torch.autograd.grad(y.square().sum(), [x] + list(model.parameters()))
    return (y,) + grads


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_model_compiles_without_graph_breaks(device, dynamic):
    torch.manual_seed(0)
    model = Model(device=device)
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)  # a graph break raises
    for rows in (8, 12):  # a second shape: a recompile (static) or the same graph (dynamic)
        x = randn(rows, 16, device=device, seed=rows)
        for got, want in zip(run(compiled, x), run(model, x)):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    with torch.no_grad():  # inference: the ops without their autograd
        x = randn(8, 16, device=device)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-10, atol=1e-10)


def test_compiled_graph_holds_mathpys_ops(device):
    """What dynamo captured: mathpy's custom ops, not a fallback to eager."""
    seen = []

    def backend(graph_module, example_inputs):
        seen.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module

    model = Model(device=device)
    torch.compile(model, fullgraph=True, backend=backend)(randn(8, 16, device=device))
    for op in ("mathpy.fft_r2c", "mathpy.fft_c2r", "mathpy.fft_c2c", "mathpy.matmul", "mathpy.mlp"):
        assert any(op in target for target in seen), (op, seen)


def test_matmul_options_pass_through_compile(device):
    """Options and preferences, as a dict or as an object built inside the compiled function, reach mathpy."""
    a, b = randn(8, 16, dtype=torch.float16, device=device), randn(16, 4, dtype=torch.float16, device=device)

    def f(a, b):
        d = mathpy.matmul(a, b, options={"result_type": "float32"}, preferences={"limit": 2})
        e = mathpy.matmul(a, b, options=mathpy.MatmulOptions(compute_type="16F"))
        return d + e

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(a, b)
    assert got.dtype == torch.float32  # result_type was applied, not dropped
    torch.testing.assert_close(got, f(a, b))
    with pytest.raises(Exception, match="unknown MatmulOptions fields"):
        torch.compile(lambda a, b: mathpy.matmul(a, b, options={"alow_tf32": True}), fullgraph=True,
                      backend="aot_eager")(a, b)


def test_callbacks_are_refused_under_compile(device):
    def double(data_out, offset, value, user_info, unused):
        data_out[offset] = value * 2

    x = torch.randn(4, 8, dtype=torch.complex64, device=device)
    with pytest.raises(Exception, match="epilog= is a callback.*torch.compile is tracing it"):
        torch.compile(lambda t: mfft.fft(t, epilog=double), fullgraph=True, backend="aot_eager")(x)


@pytest.mark.gpu
def test_training_step_replays_in_a_cuda_graph():
    """Forward and backward of a float32 model (FFTs, matmul epilog, Linear, MLP) captured once in a CUDA graph and
    replayed on new data: the outputs and gradients eager gives on that data. Warm-up and capture use one stream, so
    mathpy's plans (cached per stream) exist before the capture starts."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA on this machine")
    torch.manual_seed(0)
    model = Model(dtype=torch.float32, device="cuda")
    static_x = torch.randn(64, 16, device="cuda")
    params = list(model.parameters())

    def step():
        y = model(static_x)
        y.square().sum().backward()
        return y

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(stream)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_y = step()
    static_grads = [p.grad for p in params]  # the replay writes the gradients into these
    for seed in (1, 2):
        static_x.copy_(torch.randn(64, 16, generator=torch.Generator().manual_seed(seed)).cuda())
        graph.replay()
        torch.cuda.synchronize()
        y = model(static_x.clone())
        eager = [y] + list(torch.autograd.grad(y.square().sum(), params))
        for got, want in zip([static_y] + static_grads, eager):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.detach().abs().max()))
