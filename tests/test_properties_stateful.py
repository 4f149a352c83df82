"""Property-based tests of the stateful APIs, ``mathpy.fft.FFT`` and ``mathpy.Matmul``, on every array package (``xp``):
plan, execute, reset the operands to new values of the same layout, execute again; both results against NumPy within
the derived bounds (tests/_tolerance.py). Examples per test: tests/_hypothesis.py (``--hypothesis-profile=thorough``:
10,000 per API per package)."""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import mathpy.fft as mfft
from mathpy.host.matmul import Matmul

from _hypothesis import property_settings
from _tolerance import assert_fft_close, assert_within, matmul_bound


def _array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@property_settings(20)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), dtype=st.sampled_from(
    [np.complex64, np.complex128, np.float32, np.float64]), data=st.data())
def test_fft_plan_execute_reset(xp, shape, dtype, data):
    ndim = len(shape)
    axes = tuple(sorted(data.draw(st.permutations(range(ndim)), label="axes")[:data.draw(st.integers(1, min(3, ndim)),
                                                                                          label="naxes")]))
    direction = data.draw(st.sampled_from(["forward", "inverse"]), label="direction")
    complex_input = np.dtype(dtype).kind == "c"
    first, second = _array(shape, dtype, 1), _array(shape, dtype, 2)
    precision = np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64
    n = math.prod(shape[a] for a in axes)
    with mfft.FFT(xp.asarray(first), axes=axes) as f:
        f.plan()
        for x in (first, second):
            if x is second:
                f.reset_operand(xp.asarray(second))
            if complex_input:
                y = f.execute(direction=direction)
                expected = (np.fft.fftn(x.astype(np.complex128), axes=axes) if direction == "forward"
                            else np.fft.ifftn(x.astype(np.complex128), axes=axes) * n)
            else:
                y = f.execute()
                expected = np.fft.rfftn(x.astype(np.float64), axes=axes)
            assert xp.is_native(y)
            assert_fft_close(xp.to_numpy(y), expected, precision, n, f"FFT {shape} axes {axes}")


@property_settings(20)
@given(m=st.integers(1, 8), n=st.integers(1, 8), k=st.integers(1, 8), batch=st.sampled_from([(), (2,), (3, 1)]),
       dtype=st.sampled_from([np.float32, np.float64, np.complex64, np.float16]),
       alpha=st.sampled_from([1.0, -0.5, 2.0]), with_c=st.booleans())
def test_matmul_plan_execute_reset(xp, m, n, k, batch, dtype, alpha, with_c):
    if xp.name == "torch" and np.dtype(dtype) == np.float16 and not xp.on_gpu:
        dtype = np.float32  # torch's CPU half matmul is not what this property is about
    a1, b1, a2, b2 = (_array((*batch, r, c), dtype, s) for (r, c), s in
                      (((m, k), 1), ((k, n), 2), ((m, k), 3), ((k, n), 4)))
    c = _array((*batch, m, n), dtype, 5) if with_c else None
    beta = 0.5 if with_c else None
    kwargs = {"alpha": alpha} | ({"beta": beta} if with_c else {})
    with Matmul(xp.asarray(a1), xp.asarray(b1), None if c is None else xp.asarray(c), **kwargs) as mm:
        mm.plan()
        for a, b in ((a1, b1), (a2, b2)):
            if a is a2:
                mm.reset_operands(a=xp.asarray(a2), b=xp.asarray(b2))
            d = mm.execute()
            assert xp.is_native(d)
            # alpha A @ B + beta C as one product of K + N terms, so one bound covers both
            left, right = a.astype(np.complex128) * alpha, b.astype(np.complex128)
            if c is not None:
                left = np.concatenate([left, c.astype(np.complex128)], axis=-1)
                right = np.concatenate([np.broadcast_to(right, (*batch, k, n)),
                                        np.broadcast_to(np.eye(n) * beta, (*batch, n, n))], axis=-2)
            exact = left @ right
            bound = matmul_bound(left, right, dtype, exact=exact)
            assert_within(xp.to_numpy(d), exact if np.dtype(dtype).kind == "c" else exact.real, bound,
                          f"Matmul {m}x{n}x{k} {np.dtype(dtype).name}")
