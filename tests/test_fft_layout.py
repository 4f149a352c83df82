"""cuFFT layout derivation (mathpy.host.fft._layout), checked element by element against a model of how cuFFT's
advanced data layout addresses memory. CPU only."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mathpy._errors import UnsupportedLayoutError
from mathpy.host.fft._cufft import _split
from mathpy.host.fft._layout import (MAX_LOOPED_EXECUTES, Transform, c_strides, cufft_expressible, cufft_params,
                                     dense_permutation, engine_layout)


# --- the model ---------------------------------------------------------------------------------------------------

def cufft_address(embed, stride, x):
    """cuFFT's offset of transform index ``x`` (rank 1-3): ((x0 * embed[1] + x1) * embed[2] + x2) * stride."""
    offset = 0
    for k, xk in enumerate(x):
        offset = offset * (embed[k] if k else 1) + xk
    return offset * stride


def cufft_transforms(params, in_extents, out_extents):
    """[(input offsets, output offsets)] of every transform one call executes, each tuple in index order."""
    result = []
    loops = params.loops
    for loop_index in itertools.product(*(range(count) for count, _, _ in loops)):
        in_base = sum(i * step for i, (_, step, _) in zip(loop_index, loops))
        out_base = sum(i * step for i, (_, _, step) in zip(loop_index, loops))
        for b in range(params.batch):
            ins = tuple(in_base + b * params.idist + cufft_address(params.inembed, params.istride, x)
                        for x in itertools.product(*map(range, in_extents)))
            outs = tuple(out_base + b * params.odist + cufft_address(params.onembed, params.ostride, x)
                         for x in itertools.product(*map(range, out_extents)))
            result.append((ins, outs))
    return sorted(result)


def logical_transforms(t):
    """The same list computed from the arrays' own strides: one entry per batch index."""
    batch_axes = [a for a in range(len(t.input_shape)) if a not in t.axes]
    result = []
    for beta in itertools.product(*(range(t.input_shape[a]) for a in batch_axes)):
        def offsets(shape, strides):
            base = sum(i * strides[a] for i, a in zip(beta, batch_axes))
            return tuple(base + sum(i * strides[a] for i, a in zip(xi, t.axes))
                         for xi in itertools.product(*(range(shape[a]) for a in t.axes)))
        result.append((offsets(t.input_shape, t.input_strides), offsets(t.output_shape, t.output_strides)))
    return sorted(result)


def check_params(t, params):
    """cuFFT, driven by ``params``, touches exactly the elements of ``t``'s arrays, transform by transform, in order."""
    kept = [a for a in t.axes[:-1] if t.input_shape[a] > 1] + [t.axes[-1]]
    if t.fft_type == "C2C" and len(kept) > 1 and t.input_shape[t.axes[-1]] == 1:
        kept.pop()
    assert params.rank == len(kept) == len(params.n) == len(params.inembed) == len(params.onembed)
    assert params.n == tuple((t.output_shape if t.fft_type == "C2R" else t.input_shape)[a] for a in kept)
    assert params.istride > 0 and params.ostride > 0 and params.batch >= 1
    assert all(e >= x for e, x in zip(params.inembed[1:], [t.input_shape[a] for a in kept[1:]]))
    assert all(e >= x for e, x in zip(params.onembed[1:], [t.output_shape[a] for a in kept[1:]]))
    in_extents = [t.input_shape[a] for a in kept]
    out_extents = [t.output_shape[a] for a in kept]
    assert cufft_transforms(params, in_extents, out_extents) == logical_transforms(t)


# --- layouts to try ------------------------------------------------------------------------------------------------

@st.composite
def layouts(draw, shape):
    """Strides of a view of a padded, permuted, possibly reversed or stepped allocation of ``shape``."""
    ndim = len(shape)
    order = draw(st.permutations(range(ndim)))  # outermost first
    strides, step = [0] * ndim, 1
    for axis in reversed(order):
        stride_step = draw(st.sampled_from([1, 1, 1, 2, 3]))
        strides[axis] = step * stride_step * draw(st.sampled_from([1, 1, 1, 1, -1]))
        step *= shape[axis] * stride_step + draw(st.sampled_from([0, 0, 1, 2]))
    return tuple(strides)


@st.composite
def transforms(draw):
    ndim = draw(st.integers(1, 4))
    shape = list(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    axes = tuple(draw(st.permutations(range(ndim)))[:draw(st.integers(1, min(3, ndim)))])
    fft_type = draw(st.sampled_from(["C2C", "R2C", "C2R"]))
    in_shape, out_shape = list(shape), list(shape)
    if fft_type == "R2C":
        out_shape[axes[-1]] = in_shape[axes[-1]] // 2 + 1
    elif fft_type == "C2R":
        in_shape[axes[-1]] = out_shape[axes[-1]] // 2 + 1
    in_strides = draw(layouts(in_shape))
    out_strides = in_strides if fft_type == "C2C" and draw(st.booleans()) else draw(layouts(out_shape))
    return Transform(fft_type, np.float32, in_shape, in_strides, out_shape, out_strides, axes)


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(transforms())
def test_params_address_exactly_the_arrays(t):
    strict_in = cufft_expressible(t.input_shape, t.input_strides, t.axes)
    strict_out = cufft_expressible(t.output_shape, t.output_strides, t.axes)
    try:
        strict = cufft_params(t, allow_loops=False)
    except UnsupportedLayoutError:
        strict = None
    if strict_in and strict_out:
        assert strict is not None and strict.loops == ()
    if strict is not None:
        check_params(t, strict)
    try:
        looped = cufft_params(t, allow_loops=True)
    except UnsupportedLayoutError:
        assert strict is None
        return
    assert looped.executes <= MAX_LOOPED_EXECUTES
    check_params(t, looped)


@SETTINGS
@given(transforms(), st.booleans())
def test_engine_layout_is_always_one_plan(t, allow_loops):
    ins = engine_layout(t.input_shape, t.input_strides, t.axes, allow_loops=allow_loops)
    outs = engine_layout(t.output_shape, t.output_strides, t.axes, allow_loops=allow_loops)
    for shape, strides, new in ((t.input_shape, t.input_strides, ins), (t.output_shape, t.output_strides, outs)):
        assert cufft_expressible(shape, new, t.axes, allow_loops=allow_loops)
        if cufft_expressible(shape, strides, t.axes, allow_loops=allow_loops):
            assert new == tuple(strides)
        else:  # dense: every element of an allocation of prod(shape) exactly once
            offsets = sorted(sum(i * s for i, s in zip(index, new)) for index in np.ndindex(*shape))
            assert offsets == list(range(math.prod(shape)))
            perm = dense_permutation(new)
            array = np.empty([shape[p] for p in perm], np.complex64).transpose(np.argsort(perm))
            assert all(e == 1 or a // 8 == s for a, s, e in zip(array.strides, new, shape))
    moved = Transform(t.fft_type, t.precision, t.input_shape, ins, t.output_shape, outs, t.axes)
    params = cufft_params(moved, allow_loops=allow_loops)
    check_params(moved, params)
    if not allow_loops:
        assert params.loops == ()


@pytest.mark.parametrize("shape", [(7,), (4, 6), (2, 3, 5), (2, 3, 4, 5)])
def test_c_contiguous_trailing_axes_need_no_copy(shape):
    for rank in range(1, min(3, len(shape)) + 1):
        axes = tuple(range(len(shape) - rank, len(shape)))
        assert engine_layout(shape, c_strides(shape), axes) == c_strides(shape)
        t = Transform("C2C", np.float64, shape, c_strides(shape), shape, c_strides(shape), axes)
        p = cufft_params(t, allow_loops=False)
        assert p.n == shape[-rank:] and p.istride == 1 and p.idist == math.prod(shape[-rank:])
        assert p.batch == math.prod(shape[:-rank])


def test_known_layouts():
    # Fortran-ordered batch of 1-D transforms along axis 0: stride 1, distance 8.
    t = Transform("C2C", np.float32, (8, 5), (1, 8), (8, 5), (5, 1), (0,))
    p = cufft_params(t)
    assert p.as_tuple() == (1, (8,), (8,), 1, 8, (8,), 5, 1, 5)
    # R2C over the last two axes of a C array with padded rows (in-place style: 2 * (n//2 + 1) reals per row)
    t = Transform("R2C", np.float32, (3, 4, 6), (32, 8, 1), (3, 4, 4), (16, 4, 1), (1, 2))
    p = cufft_params(t)
    assert p.as_tuple() == (2, (4, 6), (4, 8), 1, 32, (4, 4), 1, 16, 3)
    # C2R: n comes from the output
    t = Transform("C2R", np.float64, (2, 5), (5, 1), (2, 8), (8, 1), (1,))
    assert cufft_params(t).n == (8,)
    # a batch axis between two transform axes: embed 12 >= 4 leaves room for it, distance 4
    t = Transform("C2C", np.float32, (4, 3, 4), (12, 4, 1), (4, 3, 4), (12, 4, 1), (0, 2))
    assert cufft_params(t, allow_loops=False).as_tuple() == (2, (4, 4), (4, 12), 1, 4, (4, 12), 1, 4, 3)
    # batch axes on both sides of a transform axis do not fold: looped only when allowed
    t = Transform("C2C", np.float32, (4, 3, 5), (15, 5, 1), (4, 3, 5), (15, 5, 1), (1,))
    with pytest.raises(UnsupportedLayoutError, match="callbacks"):
        cufft_params(t, allow_loops=False)
    assert cufft_params(t).batch == 5 and cufft_params(t).loops == ((4, 15, 15),)
    # two batch groups: the larger is the plan's batch, the other is looped
    t = Transform("C2C", np.float32, (2, 8, 16, 3), (384, 48, 3, 1), (2, 8, 16, 3), (384, 48, 3, 1), (1,))
    p = cufft_params(t)
    assert (p.batch, p.idist, p.istride, p.loops) == (48, 1, 48, ((2, 384, 384),))  # axes 2 and 3 fold
    # extent-1 transform axes are dropped (C2C: the last one too)
    t = Transform("C2C", np.float32, (1, 8), (99, 1), (1, 8), (8, 1), (0, 1))
    assert cufft_params(t).rank == 1
    t = Transform("C2C", np.float32, (8, 1), (1, 8), (8, 1), (1, 8), (0, 1))
    assert cufft_params(t).as_tuple() == (1, (8,), (8,), 1, 8, (8,), 1, 8, 1)
    t = Transform("R2C", np.float32, (8, 1), (1, 1), (8, 1), (1, 1), (0, 1))
    assert cufft_params(t).n == (8, 1)


def test_transform_validation():
    with pytest.raises(ValueError, match="fft_type"):
        Transform("Z2Z", np.float32, (4,), (1,), (4,), (1,), (0,))
    with pytest.raises(ValueError, match="precision"):
        Transform("C2C", np.int32, (4,), (1,), (4,), (1,), (0,))
    with pytest.raises(ValueError, match="axes"):
        Transform("C2C", np.float32, (4,), (1,), (4,), (1,), (1,))
    with pytest.raises(ValueError, match="do not match"):
        Transform("R2C", np.float32, (8,), (1,), (8,), (1,), (0,))
    t = Transform("R2C", "float32", [8], [1], [5], [1], [0])
    assert t.precision == np.float32 and t.axes == (0,) and t.n == (8,) and hash(t) == hash(
        Transform("R2C", np.float32, (8,), (1,), (5,), (1,), (0,)))
    assert t.input_dtype == np.float32 and t.output_dtype == np.complex64


def test_real_side_loops_stay_on_complex_elements():
    """R2C/C2R executes looped at real offsets of an odd number of elements are refused by cuFFT (CUFFT_INVALID_VALUE):
    the plan takes the odd-step batch group and loops over the even one."""
    t = Transform("R2C", np.float32, (1, 2, 1, 2), (1, 1, 4, 2), (1, 2, 1, 2), (1, 1, 4, 2), (0,))
    p = cufft_params(t)
    assert (p.batch, p.idist, p.loops) == (2, 1, ((2, 2, 2),))
    c2r = Transform("C2R", np.float32, (1, 2, 1, 2), (1, 1, 4, 2), (1, 2, 1, 2), (1, 1, 4, 2), (0,))
    assert all(step % 2 == 0 for _, _, step in cufft_params(c2r).loops)
    c2c = Transform("C2C", np.float32, (1, 2, 1, 2), (1, 1, 4, 2), (1, 2, 1, 2), (1, 1, 4, 2), (0,))
    assert cufft_params(c2c).loops == ((2, 1, 1),)   # complex offsets are always aligned: the largest-group rule


def test_batch_axes_a_view_permuted_fold_in_stride_order():
    """A (3, 5, 5, 1, 5) float32 rfftn over axes (4, 1, 3) on the H200 (the thorough hypothesis profile): the halved
    axis has length 1, so the engine splits it (_cufft._split) into a length-1 R2C and a C2C over the others. In axis
    order the R2C's batch axes form four groups (75 looped executes); in stride order one plan of 375. The C2C takes
    its axes outermost first."""
    shape, strides = (3, 5, 5, 1, 5), (125, 5, 25, 1, 1)
    whole = Transform("R2C", np.dtype(np.float32), shape, strides, shape, strides, (4, 1, 3))
    first, second = _split(whole)
    params = cufft_params(first, allow_loops=False)
    assert (params.batch, params.loops) == (375, ())
    check_params(first, params)
    assert second.axes == (1, 4)
    check_params(second, cufft_params(second, allow_loops=False))
