"""mathpy.torch.Linear and MLP: drop-ins for their torch counterparts (values, gradients, state_dict), gradcheck in
double precision, and proof that the backward runs fused: which mathpy products run (seen through torch's dispatcher,
the op's public seam) and that no elementwise kernel is left in the MLP's backward."""

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

from _torch_helpers import EPS, device, gelu_error, gradcheck_options, randn, torch  # noqa: F401

import mathpy.torch as mt

F64 = torch.float64
gelu_tanh = torch.nn.GELU(approximate="tanh")


class Recorder(TorchDispatchMode):
    """Records every op torch dispatches (name, and the epilog of mathpy::matmul calls)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        self.calls.append((name, args[5]) if name.startswith("mathpy::matmul") else (name, None))
        return func(*args, **(kwargs or {}))

    def epilogs(self):
        return sorted(epilog for name, epilog in self.calls if epilog is not None)

    def names(self):
        return {name.split(".")[0] for name, _ in self.calls}


ACT = {None: lambda t: t, "relu": torch.relu, "gelu": gelu_tanh}


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_a_drop_in(device, activation, bias):
    torch.manual_seed(0)
    reference = torch.nn.Linear(6, 10, bias=bias, dtype=F64, device=device)
    layer = mt.Linear(6, 10, bias=bias, dtype=F64, device=device, activation=activation)
    layer.load_state_dict(reference.state_dict())
    assert isinstance(layer, torch.nn.Linear) and f"activation={activation!r}" in repr(layer)
    tol = max(1e-12, 4 * gelu_error(device, F64, activation == "gelu"))  # cuBLASLt's float64 GELU on a GPU
    for shape in [(6,), (4, 6), (2, 3, 6)]:
        x = randn(*shape, device=device, seed=len(shape))
        y, want = layer(x), ACT[activation](reference(x))
        assert y.shape == want.shape and y.is_contiguous()
        torch.testing.assert_close(y, want, rtol=tol, atol=tol)
        g = torch.randn_like(want)
        params = [x] + list(layer.parameters())
        got = torch.autograd.grad(y, params, g)
        expected = torch.autograd.grad(want, [x] + list(reference.parameters()), g)
        for a, b in zip(got, expected):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    x = randn(5, 6, device=device)
    inputs = (x, layer.weight, layer.bias) if bias else (x, layer.weight)
    assert torch.autograd.gradcheck(lambda *t: mt.linear(*t[:2], t[2] if bias else None, activation), inputs,
                                    **gradcheck_options(device, activation == "gelu"))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("out_features", [4, 1], ids=["fused", "K=1-unfused"])
def test_mlp_is_a_drop_in(device, activation, bias, out_features):
    """out_features = 1 leaves the second layer's input-gradient product with K = 1, which cuBLASLt's DRELU/DGELU
    do not support: that case takes the elementwise path, and must agree all the same."""
    torch.manual_seed(0)
    block = mt.MLP(6, 16, out_features, bias=bias, activation=activation, dtype=F64, device=device)
    reference = torch.nn.Sequential(block.fc1, torch.nn.ReLU() if activation == "relu" else gelu_tanh, block.fc2)
    x = randn(2, 3, 6, device=device)
    y, want = block(x), reference(x)
    # on a GPU, cuBLASLt's float64 GELU and DGELU (~5e-9 relative) through sums of up to 16 terms
    tol = max(1e-10, 20 * gelu_error(device, F64, activation == "gelu"))
    torch.testing.assert_close(y, want, rtol=tol, atol=tol)
    g = torch.randn_like(want)
    params = [x] + list(block.parameters())
    for a, b in zip(torch.autograd.grad(y, params, g), torch.autograd.grad(want, params, g)):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * float(b.abs().max()))
    inputs = (x, block.fc1.weight, block.fc1.bias, block.fc2.weight, block.fc2.bias)
    assert torch.autograd.gradcheck(lambda *t: mt.mlp(*t, activation=activation), inputs,
                                    **gradcheck_options(device, activation == "gelu"))


def test_linear_complex_and_bad_arguments(device):
    layer = torch.nn.Linear(4, 3, dtype=torch.complex128, device=device)
    x = randn(2, 4, dtype=torch.complex128, device=device)
    assert torch.autograd.gradcheck(lambda x, w, b: mt.linear(x, w, b), (x, layer.weight, layer.bias))
    with pytest.raises(ValueError, match="activation 'relu' is not defined for complex"):
        mt.linear(x, layer.weight, activation="relu")
    w = randn(3, 4, device=device)
    with pytest.raises(ValueError, match="activation 'tanh' is not supported"):
        mt.linear(randn(2, 4, device=device), w, activation="tanh")
    with pytest.raises(ValueError, match="the input has 5 features.*takes 4"):
        mt.linear(randn(2, 5, device=device), w)
    with pytest.raises(TypeError, match="must have the same dtype"):
        mt.linear(randn(2, 4, dtype=torch.float32, device=device), w)
    with pytest.raises(ValueError, match="the bias of weight must have shape"):
        mt.linear(randn(2, 4, device=device), w, randn(4, device=device))
    with pytest.raises(ValueError, match="w2 of shape"):
        mt.mlp(randn(2, 4, device=device), w, None, randn(3, 5, device=device), None)


def test_layers_follow_autocast(device):
    """Inside torch.autocast, float32 parameters and input run in the autocast dtype, as torch.nn.Linear does, and
    the parameters' gradients come back in float32."""
    torch.manual_seed(0)
    reference = torch.nn.Linear(8, 16, device=device)
    layer = mt.Linear(8, 16, activation="relu", device=device)
    layer.load_state_dict(reference.state_dict())
    block = mt.MLP(8, 16, device=device)
    x = torch.randn(4, 8, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y, want, z = layer(x), torch.relu(reference(x)), block(x)
    assert y.dtype == want.dtype == z.dtype == torch.bfloat16
    torch.testing.assert_close(y, want, rtol=2 ** -7, atol=2 ** -7 * float(want.detach().abs().max()))
    (y.float().sum() + z.float().sum()).backward()
    assert layer.weight.grad.dtype == block.fc1.weight.grad.dtype == torch.float32


def test_linear_backward_takes_the_bias_gradient_from_the_weight_gradient_kernel(device):
    layer = mt.Linear(8, 12, activation="gelu", dtype=F64, device=device)
    x = randn(5, 8, device=device)
    with Recorder() as forward:
        y = layer(x)
    assert forward.epilogs() == ["GELU_AUX_BIAS"]  # keeps the pre-activation for the backward
    g = torch.randn_like(y)
    with Recorder() as backward:
        y.backward(g)
    assert backward.epilogs() == ["BGRADB", "DEFAULT"]  # dW with db; dx
    # GELU's derivative: one kernel (torch's gelu_backward), no float32 temporaries or separate bias sum
    assert "aten::gelu_backward" in backward.names()
    elementwise = {"aten::mul", "aten::add", "aten::tanh", "aten::pow", "aten::_to_copy", "aten::sum", "aten::where"}
    assert not (backward.names() & elementwise), backward.names()
    with torch.no_grad(), Recorder() as inference:
        layer(x)
    assert inference.epilogs() == ["GELU_BIAS"]  # nothing kept without a gradient to compute


@pytest.mark.parametrize("activation, fused, sums", [("gelu", "DGELU", {"aten::sum"}), ("relu", "DRELU_BGRAD", set())])
def test_mlp_backward_is_four_fused_products_and_nothing_else(device, activation, fused, sums):
    block = mt.MLP(8, 16, activation=activation, dtype=F64, device=device)
    x = randn(5, 8, device=device)
    y = block(x)
    with Recorder() as backward:
        y.backward(torch.randn_like(y))
    # layer 2: dW2 with db2 (BGRADB), dZ1 = act'(aux) * (W2^T g^T), with db1 (DRELU_BGRAD) or db1 as one sum of dZ1
    # (GELU: faster than DGELU_BGRAD, _SEPARATE_BIAS_GRADIENT); layer 1: dW1, dx
    assert backward.epilogs() == sorted(["BGRADB", fused, "DEFAULT", "DEFAULT"])
    elementwise = {"aten::mul", "aten::add", "aten::tanh", "aten::where", "aten::sum", "aten::gt", "aten::pow"}
    assert backward.names() & elementwise == sums, backward.names()
    assert all(p.grad is not None for p in block.parameters()) and x.grad is not None


def test_mlp_without_a_bias_uses_the_plain_backward_epilog(device):
    block = mt.MLP(8, 16, bias=False, dtype=F64, device=device)
    y = block(randn(5, 8, device=device))
    with Recorder() as backward:
        y.sum().backward()
    assert "DGELU" in backward.epilogs() and "BGRADB" not in backward.epilogs()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_mlp_in_training_dtypes_is_as_accurate_as_torch(device, dtype):
    """The fused block in a training dtype against float64 on the same rounded parameters and input, next to torch's
    own unfused block in the same dtype: each gradient's error is at most twice torch's plus sqrt(K) roundings of the
    dtype at the gradient's scale, K = 64 the longest reduction (the fused path rounds in other places, so its error
    is not torch's, but it is of the same size; a wrong formula is off by O(1)); on a GPU plus sqrt(K) times the
    error of cuBLASLt's GELU/DGELU, which in float32 exceeds the dtype's rounding."""
    torch.manual_seed(0)
    block = mt.MLP(32, 64, dtype=dtype, device=device)
    block64 = mt.MLP(32, 64, dtype=F64, device=device)
    block64.load_state_dict({k: v.double() for k, v in block.state_dict().items()})
    peer = torch.nn.Sequential(block.fc1, gelu_tanh, block.fc2)
    x = (torch.randn(48, 32) / 4).to(dtype).to(device).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    g = torch.randn(48, 32).to(dtype).to(device)
    params = [x] + list(block.parameters())
    y, y_peer, y64 = block(x), peer(x), block64(x64)
    ours = (y,) + torch.autograd.grad(y, params, g)
    theirs = (y_peer,) + torch.autograd.grad(y_peer, params, g)
    exact = (y64,) + torch.autograd.grad(y64, [x64] + list(block64.parameters()), g.double())
    for name, a, b, e in zip(["y", "x", "w1", "b1", "w2", "b2"], ours, theirs, exact):
        assert a.dtype == dtype and a.shape == e.shape, name
        error, peer_error = (a.double() - e).abs().max(), (b.double() - e).abs().max()
        allowed = 2 * peer_error + 8 * (EPS[dtype] + gelu_error(device, dtype)) * e.abs().max()
        assert error <= allowed, (name, float(error), float(peer_error))


def saved_bytes(fn, *keep):
    """Bytes of the distinct storages that autograd saves for the backward of ``fn()``, leaving out those of the
    tensors in ``keep`` (inputs and parameters, alive anyway): what the graph alone keeps alive."""
    kept = {t.untyped_storage().data_ptr() for t in keep}
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in kept:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn()
    return sum(storages.values()), y


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_linear_saves_no_more_for_backward_than_torch(device, dtype, activation):
    """The bytes autograd keeps for a Linear's backward: torch.nn.Linear + its activation keeps the pre-activation
    (GELU) or the output (ReLU), in the layer's dtype; mathpy.torch.Linear keeps the GELU aux (the pre-activation,
    in the layer's dtype, not float32) or the output, and nothing twice."""
    torch.manual_seed(0)
    reference = torch.nn.Linear(64, 256, dtype=dtype, device=device)
    layer = mt.Linear(64, 256, dtype=dtype, device=device, activation=activation)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(32, 64, dtype=dtype, device=device, requires_grad=True)
    ours, y = saved_bytes(lambda: layer(x), x, *layer.parameters())
    theirs, want = saved_bytes(lambda: ACT[activation](reference(x)), x, *reference.parameters())
    assert ours <= theirs, (ours, theirs)
    if activation is not None:
        assert ours == 32 * 256 * dtype.itemsize  # one hidden tensor in the layer's dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_saves_no_more_for_backward_than_torch(device, dtype, activation):
    """The fused MLP keeps the hidden activation and layer 1's aux: for GELU the pre-activation, which torch's GELU
    keeps too; for ReLU the 1-bit mask that DRELU reads (torch keeps the ReLU's output only), 1/16 of a bfloat16
    hidden tensor more."""
    torch.manual_seed(0)
    block = mt.MLP(64, 256, dtype=dtype, device=device, activation=activation)
    reference = torch.nn.Sequential(block.fc1, torch.nn.ReLU() if activation == "relu" else gelu_tanh, block.fc2)
    x = torch.randn(32, 64, dtype=dtype, device=device, requires_grad=True)
    ours, _ = saved_bytes(lambda: block(x), x, *block.parameters())
    theirs, _ = saved_bytes(lambda: reference(x), x, *block.parameters())
    mask = 256 // 8 * 32 if activation == "relu" else 0  # one bit per hidden element
    assert ours <= theirs + mask, (ours, theirs)
