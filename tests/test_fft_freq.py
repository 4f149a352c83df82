"""Sample frequencies and spectrum shifts against their written-out definitions (not against numpy.fft, which mathpy
calls for NumPy arrays), on every array package ``xp``: odd and even lengths (for even ones fftshift and ifftshift
are the same permutation, so only odd lengths tell them apart), every axis, several axes at once.

- ``fftfreq(n, d)[i] = k_i / (d n)`` with ``k = 0, 1, ..., ceil(n / 2) - 1, -floor(n / 2), ..., -1``;
  ``rfftfreq(n, d)[i] = i / (d n)`` for ``i = 0 .. n // 2``;
- ``fftshift(x)[i] = x[(i + ceil(n / 2)) mod n]`` along each shifted axis (the zero frequency moves to the centre);
  ``ifftshift(x)[i] = x[(i + floor(n / 2)) mod n]`` (its inverse).
"""

import numpy as np
import pytest

import mathpy.fft as mfft
from _tolerance import unit_roundoff


def written_fftfreq(n, d):
    k = [i for i in range(-(-n // 2))] + [i for i in range(-(n // 2), 0)]
    return np.array([ki / (d * n) for ki in k])


def written_shift(x, axes, inverse):
    """The shift from its index formula, one axis after the other (Python integers, no np.roll)."""
    x = np.asarray(x)
    axes = range(x.ndim) if axes is None else ([axes] if isinstance(axes, int) else axes)
    for axis in axes:
        n = x.shape[axis]
        offset = n // 2 if inverse else -(-n // 2)
        x = np.take(x, [(i + offset) % n for i in range(n)], axis=axis)
    return x


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 16])
@pytest.mark.parametrize("d", [1.0, 0.1, 3])
def test_fftfreq_and_rfftfreq_are_their_definitions(xp, n, d):
    like = xp.asarray(np.ones(2))
    for got in (mfft.fftfreq(n, d), mfft.fftfreq(n, d, like=like)):
        expected = written_fftfreq(n, d)
        got = xp.to_numpy(got)
        assert got.dtype == np.float64 and got.shape == (n,)
        np.testing.assert_allclose(got, expected, rtol=2 * unit_roundoff(np.float64), atol=0)
    got = xp.to_numpy(mfft.rfftfreq(n, d, like=like))
    np.testing.assert_allclose(got, [i / (d * n) for i in range(n // 2 + 1)], rtol=2 * unit_roundoff(np.float64),
                               atol=0)
    assert xp.is_native(mfft.fftfreq(n, d, like=like))


@pytest.mark.parametrize("shape, axes", [((5,), None), ((7,), 0), ((4, 5), None), ((3, 5, 6), (0, 2)),
                                         ((5, 4), 0), ((5, 4), 1), ((3, 7), (-1,)), ((9, 2, 3), (2, 0))])
@pytest.mark.parametrize("inverse", [False, True], ids=["fftshift", "ifftshift"])
def test_shifts_are_their_index_formulas(xp, shape, axes, inverse):
    x = np.arange(np.prod(shape)).reshape(shape)
    shift = mfft.ifftshift if inverse else mfft.fftshift
    got = shift(xp.asarray(x)) if axes is None else shift(xp.asarray(x), axes=axes)
    assert xp.is_native(got)
    np.testing.assert_array_equal(xp.to_numpy(got), written_shift(x, axes, inverse))


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7])
def test_ifftshift_undoes_fftshift_and_they_differ_for_odd_lengths(xp, n):
    x = np.arange(n * 3).reshape(n, 3)
    shifted = mfft.fftshift(xp.asarray(x), axes=0)
    np.testing.assert_array_equal(xp.to_numpy(mfft.ifftshift(shifted, axes=0)), x)
    same = np.array_equal(xp.to_numpy(mfft.ifftshift(xp.asarray(x), axes=0)), xp.to_numpy(shifted))
    assert same == (n % 2 == 0 or n == 1)


def test_the_centred_spectrum_of_a_frequency_ramp_increases():
    """The use the shifts exist for: fftshift(fftfreq(n)) runs from the most negative frequency up."""
    for n in (6, 7):
        centred = mfft.fftshift(mfft.fftfreq(n))
        assert (np.diff(centred) > 0).all() and centred[n // 2] == 0
        np.testing.assert_array_equal(mfft.ifftshift(centred), mfft.fftfreq(n))
