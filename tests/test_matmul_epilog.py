"""Every matmul epilog against a straightforward NumPy reference written here (float64, elementwise definitions), with
the exact output formats: bitmask bits and padding, GELU aux padding, bias gradients; batched and not; every real dtype;
NumPy and torch-CPU operands."""

import math

import ml_dtypes
import numpy as np
import pytest

from _matmul_reference import bits_ref, pack_ref, strides_in_bytes
from _tolerance import assert_within, epilog_bounds, gamma, unit_roundoff
from mathpy.host.matmul import Matmul, MatmulEpilog, matmul

BF16 = np.dtype(ml_dtypes.bfloat16)
M, N, K = 13, 7, 9  # M not a multiple of 8: the aux formats' padding is exercised
RNG = np.random.default_rng(7)
def gelu_ref(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_grad_ref(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x ** 2)
    return 0.5 * (1 + np.tanh(u)) + 0.5 * x * du / np.cosh(u) ** 2


def reference(name, a, b, bias=None, relu_aux=None, gelu_aux=None, alpha=1.0):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = alpha * (a64 @ b64)
    if bias is not None:
        x = x + bias.astype(np.float64).reshape(*bias.shape[:-2], M, 1) if bias.ndim > 1 else x + bias[:, None]
    outputs = {}
    if name.startswith("RELU"):
        if "AUX" in name:
            outputs["relu_aux"] = x  # the pre-activation; the bitmask holds x > 0
        d = np.maximum(x, 0)
    elif name.startswith("GELU"):
        if "AUX" in name:
            outputs["gelu_aux"] = x
        d = gelu_ref(x)
    elif name.startswith("DRELU"):
        d = x * bits_ref(relu_aux, M)
    elif name.startswith("DGELU"):
        d = x * gelu_grad_ref(gelu_aux[..., :M, :].astype(np.float64))
    else:
        d = x
    if name.endswith("_BGRAD"):
        outputs[name.lower()] = d.sum(axis=-1)
    if name == "BGRADA":
        outputs["bgrada"] = np.broadcast_to(a64, x.shape[:-2] + a64.shape[-2:]).sum(axis=-1)
    if name == "BGRADB":
        outputs["bgradb"] = np.broadcast_to(b64, x.shape[:-2] + b64.shape[-2:]).sum(axis=-2)
    return d, outputs


def make_inputs(name, dtype, batch, xp):
    a = RNG.standard_normal((*batch, M, K)).astype(dtype)
    b = RNG.standard_normal((K, N)).astype(dtype)  # broadcast over the batch
    inputs, raw = {}, {}
    if "BIAS" in name and "BGRAD" not in name:
        raw["bias"] = RNG.standard_normal((*batch, M, 1) if batch else (M,)).astype(dtype)
    if name.startswith("DRELU"):
        raw["relu_aux"] = pack_ref(RNG.random((*batch, M, N)) > 0.5)
    if name.startswith("DGELU"):
        rows = -(-M // 8) * 8
        raw["gelu_aux"] = RNG.standard_normal((*batch, rows, N)).astype(dtype)
    for key, value in raw.items():
        inputs[key] = xp.asarray(value)
    return a, b, inputs, raw


EPILOGS = [e.name for e in MatmulEpilog if e is not MatmulEpilog.DEFAULT]


@pytest.mark.parametrize("batch", [(), (3,)], ids=["single", "batched"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", EPILOGS)
def test_epilog_matches_reference(xp, name, dtype, batch):
    dtype = np.dtype(BF16 if dtype == "bfloat16" else dtype)
    a, b, inputs, raw = make_inputs(name, dtype, batch, xp)
    result = matmul(xp.asarray(a), xp.asarray(b), alpha=0.75, epilog=name, epilog_inputs=inputs or None)
    expected, expected_out = reference(name, a, b, alpha=0.75, **raw)
    x = reference("DEFAULT_BIAS" if "bias" in raw else "DEFAULT", a, b, alpha=0.75, bias=raw.get("bias"))[0]
    bias = raw.get("bias")
    if bias is not None:
        bias = bias.reshape(*bias.shape[:-2], M, 1) if bias.ndim > 1 else bias[:, None]
    x_bound, d_bound = epilog_bounds(name, a, b, dtype, 0.75, bias, x, expected)
    if expected_out:
        assert isinstance(result, tuple)
        result, aux = result
        assert sorted(aux) == sorted(expected_out)
    else:
        aux = {}
    assert xp.is_native(result)
    got = xp.to_numpy(result)
    assert got.dtype == dtype and got.shape == (*batch, M, N)
    assert_within(got, expected, d_bound, f"{name} {dtype.name} result")
    for key, want in expected_out.items():
        assert xp.is_native(aux[key])
        strides = strides_in_bytes(aux[key])  # on the result itself: a device-to-host copy may reorder it
        out = xp.to_numpy(aux[key])
        if key == "relu_aux":
            assert out.dtype == np.uint8 and out.shape == (*batch, 16, N)
            assert strides[-2:] == (1, 16)  # column-major, 128-bit padded columns
            got_mask = bits_ref(out, M)
            clear = np.abs(want) > x_bound  # values within rounding of 0 may go either way
            assert np.array_equal(got_mask[clear], (want > 0)[clear])
            # padding bits are zero on every execution space (cuBLASLt leaves them as they were: the GPU path
            # allocates the bitmask zeroed)
            assert not bits_ref(out, 16 * 8)[..., M:, :].any()
        elif key == "gelu_aux":
            assert out.dtype == dtype and out.shape == (*batch, 16, N)
            assert strides[-2:] == (out.itemsize, 16 * out.itemsize)
            assert_within(out[..., :M, :], want, x_bound, f"{name} {dtype.name} gelu_aux")
        else:
            length = N if key == "bgradb" else M
            assert out.dtype == dtype and out.shape == ((*batch, length, 1) if batch else (length,))
            if key == "bgrada":    # the sum of A's rows (K terms of exact inputs), rounded once
                bound = gamma(K, dtype) * np.abs(np.broadcast_to(a.astype(np.float64), (*batch, M, K))).sum(-1)
            elif key == "bgradb":  # the sum of B's columns (K terms)
                bound = gamma(K, dtype) * np.abs(b.astype(np.float64)).sum(-2)
            else:                  # the sum over N of the result's rows: their errors add up, plus the sum's own
                bound = d_bound.sum(-1) + gamma(N, dtype) * np.abs(expected).sum(-1)
            assert_within(out.reshape(want.shape), want, bound + unit_roundoff(dtype) * np.abs(want),
                          f"{name} {dtype.name} {key}")


def test_forward_aux_feeds_backward_epilog(xp):
    """RELU_AUX's bitmask and GELU_AUX's values, returned by one matmul, are the inputs of DRELU / DGELU (GELU in
    float32, the precision deep-learning code uses it in)."""
    a = RNG.standard_normal((2, M, K))
    b = RNG.standard_normal((K, N))
    g = RNG.standard_normal((2, M, K))
    d, aux = matmul(xp.asarray(a), xp.asarray(b), epilog="relu_aux")
    back = matmul(xp.asarray(g), xp.asarray(b), epilog="drelu", epilog_inputs=aux)
    np.testing.assert_allclose(xp.to_numpy(back), (g @ b) * (a @ b > 0), rtol=1e-12)
    a32, b32, g32 = a.astype(np.float32), b.astype(np.float32), g.astype(np.float32)
    d, aux = matmul(xp.asarray(a32), xp.asarray(b32), epilog="gelu_aux")
    back, grads = matmul(xp.asarray(g32), xp.asarray(b32), epilog="dgelu_bgrad", epilog_inputs=aux)
    x = a32.astype(np.float64) @ b32.astype(np.float64)
    expected = (g32.astype(np.float64) @ b32.astype(np.float64)) * gelu_grad_ref(x)
    # float32 tolerances: the aux holds X rounded to float32 and cuBLASLt evaluates gelu' in float32 (measured on an
    # H200: at most 1e-4 absolute at |value| ~ 7)
    np.testing.assert_allclose(xp.to_numpy(back), expected, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(xp.to_numpy(grads["dgelu_bgrad"])[..., 0], expected.sum(-1), rtol=2e-4, atol=1e-3)


def test_bias_forms_and_broadcast_aux(xp):
    a, b = RNG.standard_normal((3, M, K)), RNG.standard_normal((K, N))
    bias = RNG.standard_normal(M)
    want = a @ b + bias[:, None]
    for form in (bias, bias[:, None], np.broadcast_to(bias[:, None], (3, M, 1)).copy(), bias[::-1].copy()[::-1]):
        got = matmul(xp.asarray(a), xp.asarray(b), epilog="bias", epilog_inputs={"bias": xp.asarray(form)})
        np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-12)
    mask = RNG.random((M, N)) > 0.5  # one bitmask for every batch
    got = matmul(xp.asarray(a), xp.asarray(b), epilog="drelu", epilog_inputs={"relu_aux": xp.asarray(pack_ref(mask))})
    np.testing.assert_allclose(xp.to_numpy(got), (a @ b) * mask, rtol=1e-12)


def test_row_major_aux_input_is_accepted():
    """An aux tensor that is not in the column-major format (e.g. a C-order copy) is re-laid out, not misread."""
    a, b = RNG.standard_normal((M, K)), RNG.standard_normal((K, N))
    mask = RNG.random((M, N)) > 0.5
    packed = np.ascontiguousarray(pack_ref(mask))
    assert packed.strides == (N, 1)
    got = matmul(a, b, epilog="drelu", epilog_inputs={"relu_aux": packed})
    np.testing.assert_allclose(got, (a @ b) * mask, rtol=1e-12)


def test_epilog_with_one_dimensional_operands():
    a, b = RNG.standard_normal(K), RNG.standard_normal((K, N))
    got = matmul(a, b, epilog="relu_bias", epilog_inputs={"bias": np.array([0.5])})
    np.testing.assert_allclose(got, np.maximum(a @ b + 0.5, 0), rtol=1e-12)


def test_stateful_epilog_outputs_are_fresh_each_execute():
    a, b, bias = (RNG.standard_normal(shape).astype(np.float32) for shape in ((M, K), (K, N), (M,)))
    with Matmul(a, b) as mm:
        mm.plan(epilog=MatmulEpilog.GELU_AUX_BIAS, epilog_inputs={"bias": bias})
        d1, aux1 = mm.execute()
        d2, aux2 = mm.execute()
        assert d1 is not d2 and aux1["gelu_aux"] is not aux2["gelu_aux"]
        np.testing.assert_array_equal(d1, d2)
        np.testing.assert_allclose(aux1["gelu_aux"][:M], a @ b + bias[:, None], rtol=1e-5, atol=1e-5)
