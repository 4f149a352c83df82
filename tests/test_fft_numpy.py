"""mathpy.fft against numpy.fft, function by function, on every array package and execution space (``xp``): values,
dtypes and shapes for every argument NumPy 2 takes, and NumPy's errors and warnings for bad arguments.

NumPy's documented behaviour is the specification (issue 10). Where mathpy deliberately differs the test says so and
docs/guides/differences.md lists it.
"""

import math
import warnings

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft

ONE_D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
N_D = ("fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2")
REAL_INPUT = ("rfft", "ihfft", "rfftn", "rfft2")  # the others take complex input
LONG_DOUBLE = np.finfo(np.longdouble).nmant > 52  # long double wider than double on this platform


def operand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, 9, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def bound(expected, dtype, size):
    """Absolute tolerance for a transform of ``size`` points computed in the precision NumPy computes ``dtype`` in:
    a few units of that precision times log2(size) times the result's magnitude; a float16 result adds its own
    rounding and NumPy's float16 norm factor (a unit of float16 of each value)."""
    computed = np.result_type(np.dtype(dtype).char.lower() if np.dtype(dtype).kind == "c" else dtype, np.float32)
    if np.dtype(dtype).kind in "biu":
        computed = np.dtype(np.float64)
    eps = np.finfo(computed).eps
    magnitude = float(np.max(np.abs(expected))) if np.size(expected) else 1.0
    tolerance = 8 * eps * max(1.0, math.log2(max(size, 2))) * max(magnitude, 1.0)
    if np.dtype(dtype) == np.float16:
        # NumPy rounds a float16 result to float16, and computes the norm factor of its first 1-D transform of
        # float16 input in float16 (result_type(float16, 1.0)); mathpy keeps that factor in float32
        tolerance += float(np.finfo(np.float16).eps) * magnitude
    return tolerance


def compare(xp, name, x, **kwargs):
    """Run ``name`` through NumPy and through mathpy on ``xp``'s copy of ``x``; the same dtype, shape and values."""
    expected = getattr(np.fft, name)(x, **kwargs)
    got = getattr(mfft, name)(xp.asarray(x), **kwargs)
    assert xp.is_native(got), f"{name} returned {type(got)}, not a {xp} array"
    got = xp.to_numpy(got)
    assert got.dtype == expected.dtype, f"{name}{kwargs}: dtype {got.dtype}, NumPy {expected.dtype}"
    assert got.shape == expected.shape, f"{name}{kwargs}: shape {got.shape}, NumPy {expected.shape}"
    size = max(x.size, expected.size)
    np.testing.assert_allclose(got.astype(np.clongdouble), expected.astype(np.clongdouble), rtol=0,
                               atol=bound(expected, x.dtype, size), err_msg=f"{name}{kwargs}")
    return got


def native_dtypes(xp):
    """The dtypes ``xp`` has (torch: no unsigned beyond uint8, no long double)."""
    dtypes = ["float16", "float32", "float64", "complex64", "complex128", "int8", "int32", "int64", "uint8", "bool"]
    if xp.name == "numpy":
        dtypes += ["uint16", "uint64"] + (["longdouble", "clongdouble"] if LONG_DOUBLE else [])
    return dtypes


def inputs_for(name, dtypes):
    return [d for d in dtypes if not (name in REAL_INPUT and np.dtype(d).kind == "c")]


# --- values, dtypes, shapes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ONE_D)
def test_one_d_functions_every_dtype(xp, name):
    for dtype in inputs_for(name, native_dtypes(xp)):
        compare(xp, name, operand((3, 8), dtype))


@pytest.mark.parametrize("name", N_D)
def test_n_d_functions_every_dtype(xp, name):
    for dtype in inputs_for(name, native_dtypes(xp)):
        compare(xp, name, operand((3, 4, 6), dtype))


@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("n, axis", [(None, 0), (5, -1), (16, 1), (1, 0), (7, -2), (2, 1)])
@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
def test_one_d_arguments(xp, name, n, axis, norm):
    dtype = "float64" if name in REAL_INPUT else "complex128"
    if name in ("irfft", "hfft") and n == 1 or (n is None and name in ("irfft", "hfft") and axis == 0):
        n = 3  # irfft's default length from an axis of 4 is 6; n=1 is tested with the errors
    compare(xp, name, operand((4, 6), dtype), n=n, axis=axis, norm=norm)


ND_CASES = [
    dict(),
    dict(axes=(0, 2)),
    dict(axes=(2, 0)),
    dict(s=(3, 8), axes=(1, 2)),
    dict(s=(5, 2, 7), axes=(0, 1, 2)),
    dict(s=(-1, 5), axes=(0, 2)),                    # -1: the input's length (irfftn's last axis too)
    dict(axes=(0, 0)),                               # a repeated axis is transformed again
    dict(s=(3, 6), axes=(1, 1)),                     # ... each time with its own length
    dict(axes=(2, 0, 2), s=(4, 3, 6)),
    dict(axes=(0, 1, 2, 0)),                         # more than three transforms: several plans
    dict(axes=(-1,), norm="ortho"),
    dict(axes=(0, 1), norm="forward"),
]


@pytest.mark.parametrize("name", ("fftn", "ifftn", "rfftn", "irfftn"))
@pytest.mark.parametrize("case", ND_CASES, ids=lambda case: ",".join(f"{k}={v}" for k, v in case.items()) or "default")
def test_n_d_arguments(xp, name, case):
    dtype = "float64" if name in REAL_INPUT else "complex128"
    compare(xp, name, operand((4, 5, 6), dtype), **case)


@pytest.mark.parametrize("name", ("fft2", "ifft2", "rfft2", "irfft2"))
@pytest.mark.parametrize("case", [dict(), dict(axes=(0, 1)), dict(s=(4, 6)), dict(s=(3, 5), axes=(2, 0)),
                                  dict(axes=(1, 1)), dict(norm="ortho")], ids=str)
def test_two_d_arguments(xp, name, case):
    dtype = "float64" if name in REAL_INPUT else "complex128"
    compare(xp, name, operand((4, 5, 6), dtype), **case)


@pytest.mark.parametrize("name, axes", [("fftn", (-1, 2)), ("ifftn", (0, -3)), ("rfftn", (1, -1, 2)),
                                         ("irfftn", (-2, 1)), ("fftn", (-1, 0, 2, -3))])
def test_an_axis_named_negatively_and_positively_is_one_axis(xp, name, axes):
    """NumPy normalises each axis before it groups them: (-1, 2) of a 3-D array is axis 2 twice (two transforms)."""
    x = operand((4, 6, 5), "float64" if name == "rfftn" else "complex128")
    compare(xp, name, x, axes=axes)


def test_five_axes_and_strided_operands(xp):
    x = operand((2, 3, 2, 4, 6), "complex64")
    compare(xp, "fftn", x)
    compare(xp, "irfftn", x, axes=(4, 0, 1, 2, 3))
    compare(xp, "rfftn", operand((3, 8, 5), "float32")[:, ::2, ::-1].copy() if xp.name == "torch" else
            operand((3, 8, 5), "float32")[:, ::2, ::-1])


def test_zero_size_batch_is_an_empty_result(xp):
    """A batch axis of length 0 gives an empty result of NumPy's shape and dtype; a transformed axis of length 0
    (or a length from ``n``/``s`` below 1) is NumPy's ValueError (below)."""
    for name, x in (("fft", np.zeros((0, 4))), ("rfft", np.zeros((3, 0, 4), np.float32)), ("irfft", np.zeros((0, 5)))):
        got = getattr(mfft, name)(xp.asarray(x))
        expected = getattr(np.fft, name)(x)
        assert xp.to_numpy(got).shape == expected.shape and xp.to_numpy(got).dtype == expected.dtype
    compare(xp, "fft", np.zeros(0), n=4)  # an empty axis padded to n points


def test_float16_is_computed_in_single_precision(xp):
    """float16 input is computed in float32 on every execution space: complex64 results, and float16 for the one-axis
    C2R functions (irfft, hfft), as NumPy rounds them back."""
    x = operand((4, 16), np.float16)
    assert compare(xp, "fft", x).dtype == np.complex64
    assert compare(xp, "rfft", x).dtype == np.complex64
    assert compare(xp, "ihfft", x).dtype == np.complex64
    assert compare(xp, "irfft", x).dtype == np.float16
    assert compare(xp, "hfft", x).dtype == np.float16
    assert compare(xp, "irfftn", x).dtype == np.float32  # NumPy's ifft step first makes it complex64
    assert compare(xp, "irfftn", x, axes=(1,)).dtype == np.float16


@pytest.mark.skipif(not LONG_DOUBLE, reason="long double is double on this platform")
def test_long_double_is_kept_on_the_cpu():
    """NumPy computes long double input in long double; so does the CPU execution space (SciPy's pocketfft)."""
    x = operand((3, 16), np.longdouble) / 3
    for name in ONE_D + N_D:
        source = x.astype(np.clongdouble) if name not in REAL_INPUT else x
        got, expected = getattr(mfft, name)(source), getattr(np.fft, name)(source)
        assert got.dtype == expected.dtype and got.dtype in (np.longdouble, np.clongdouble)
        # more accurate than double: equal to NumPy's long double result far below double's rounding
        np.testing.assert_allclose(got, expected, rtol=0, atol=64 * np.finfo(np.longdouble).eps * 16)
    y = mfft.FFT(x.astype(np.clongdouble), axes=(1,))
    y.plan()
    np.testing.assert_allclose(y.execute(), np.fft.fft(x, axis=1), rtol=0, atol=1e-15)
    y.free()


def test_out_is_filled_and_returned(xp):
    x = operand((3, 8), "complex128")
    for name, expected_dtype, kwargs in (("fft", "complex128", {}), ("ifft", "complex64", {}),
                                         ("rfft", "complex128", {}), ("irfft", "float64", {}),
                                         ("hfft", "float64", {}), ("ihfft", "complex128", {}),
                                         ("fftn", "complex128", {}), ("ifft2", "complex128", {}),
                                         ("rfftn", "complex128", dict(axes=(0, 1))),
                                         ("irfft2", "float32", {}), ("fftn", "complex128", dict(axes=(1, 1)))):
        source = x.real.copy() if name in REAL_INPUT else x
        expected = getattr(np.fft, name)(source, **kwargs)
        out = xp.asarray(np.zeros(expected.shape, expected_dtype))
        result = getattr(mfft, name)(xp.asarray(source), out=out, **kwargs)
        assert result is out, name
        np.testing.assert_allclose(xp.to_numpy(out), expected.astype(expected_dtype), rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# --- NumPy's errors and warnings ---------------------------------------------------------------------------------

def _both(call):
    """(NumPy's exception, mathpy's exception) of ``call(module)``."""
    caught = []
    for module in (np.fft, mfft):
        try:
            call(module)
        except Exception as error:  # noqa: BLE001 - compared below
            caught.append(error)
        else:
            caught.append(None)
    return caught


@pytest.mark.parametrize("call", [
    lambda f, x: f.fft(x[:0]),                              # no data points
    lambda f, x: f.rfft(x[:0].real),
    lambda f, x: f.ifft(x, n=0),
    lambda f, x: f.ifft(x, n=-1),
    lambda f, x: f.irfft(x[:1]),                            # irfft's default n is 2 * (1 - 1) = 0
    lambda f, x: f.irfft(x[:0]),                            # ... -2
    lambda f, x: f.hfft(x[:1]),
    lambda f, x: f.fftn(x.reshape(2, 4)[:, :0]),
    lambda f, x: f.fftn(x.reshape(2, 4), s=(0, 4), axes=(0, 1)),
    lambda f, x: f.irfftn(x.reshape(8, 1)),
], ids=lambda call: "")
def test_zero_and_negative_lengths_raise_numpys_value_error(xp, call):
    x = operand((8,), "complex128")
    expected, got = _both(lambda module: call(module, x if module is np.fft else xp.asarray(x)))
    assert type(expected) is ValueError and type(got) is ValueError
    assert str(got) == str(expected)  # "Invalid number of FFT data points (0) specified."


@pytest.mark.parametrize("call, kind", [
    (lambda f, x: f.fft(x, out=[0] * 8), TypeError),                       # return arrays must be of ArrayType
    (lambda f, x: f.fftn(x.reshape(2, 4), out=[[0] * 4] * 2), TypeError),
    (lambda f, x: f.fft(x, out=np.empty(3, complex)), ValueError),         # output array has wrong shape.
    (lambda f, x: f.fft(x, out=np.empty((1, 8), complex)), ValueError),
    (lambda f, x: f.rfft(x.real, out=np.empty(4, complex)), ValueError),
    (lambda f, x: f.fft2(x.reshape(2, 4), out=np.empty((2, 3), complex)), ValueError),
    (lambda f, x: f.fft(x, out=np.empty(8)), TypeError),                   # Cannot cast ufunc ... output
    (lambda f, x: f.rfft(x.real, out=np.empty(5, np.float32)), TypeError),
    (lambda f, x: f.fft(x, out=np.broadcast_to(np.zeros(1, complex), (8,))), ValueError),  # read-only
])
def test_out_errors_have_numpys_types_and_wording(call, kind):
    x = operand((8,), "complex128")
    expected, got = _both(lambda module: call(module, x))
    assert isinstance(expected, kind) and isinstance(got, kind), (expected, got)
    numpy_words = str(expected).split(" with ")[0].replace("'fft'", "").replace("'rfft_n_even'", "")
    mathpy_words = str(got).replace("'fft'", "").replace("'rfft'", "").replace("'fft2'", "")
    assert mathpy_words.startswith(numpy_words.split(" from ")[0]), (str(expected), str(got))


@pytest.mark.parametrize("call, category", [
    (lambda f, x: f.fft(x, axis=2), IndexError),
    (lambda f, x: f.fftn(x, axes=(0, 2)), IndexError),
    (lambda f, x: f.fft(x[0, 0]), IndexError),                              # a 0-d operand has no last axis
    (lambda f, x: f.fftn(x, s=(4, 4, 4)), IndexError),                      # s without axes longer than ndim
    (lambda f, x: f.fftn(x, s=(4,), axes=(0, 1)), ValueError),
    (lambda f, x: f.fft(x, norm="sideways"), ValueError),
    (lambda f, x: f.fft(x, n=2.0), TypeError),
    (lambda f, x: f.fft(x, n=True), TypeError),                             # a bool is not a length
    (lambda f, x: f.ifftn(x, s=(True, 4), axes=(0, 1)), TypeError),
    (lambda f, x: f.rfft(x), TypeError),                                    # complex input to a real transform
    (lambda f, x: f.fft(np.array(["a", "b"])), TypeError),
    (lambda f, x: f.fftfreq(-1), ValueError),
    (lambda f, x: f.fftfreq(2.5), ValueError),
    (lambda f, x: f.fftfreq(0), ZeroDivisionError),
    (lambda f, x: f.fftfreq(4, device="cuda"), ValueError),
])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_bad_arguments_raise_numpys_exception_types(call, category):
    x = operand((4, 4), "complex128")
    expected, got = _both(lambda module: call(module, x))
    assert isinstance(expected, category) and isinstance(got, category), (expected, got)


def test_axis_errors_are_numpys_axis_error():
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds for array of dimension 1"):
        mfft.fft(np.ones(4), axis=2)


@pytest.mark.parametrize("call, message", [
    (lambda f, x: f.fftn(x, s=(None, 4), axes=(0, 1)), "containing `None` values to `s`"),
    (lambda f, x: f.irfftn(x, s=(4, None), axes=(0, 1)), "containing `None` values to `s`"),
    (lambda f, x: f.fftn(x, s=(4, 4)), "`axes` should not be `None` if `s` is not `None`"),
    (lambda f, x: f.rfft2(x.real, s=(4, 6), axes=None), "`axes` should not be `None`"),
])
def test_numpy2_deprecation_warnings_on_every_call(xp, call, message):
    x = operand((4, 4), "complex128")
    with pytest.warns(DeprecationWarning, match=message):
        expected = call(np.fft, x)
    for _ in range(2):  # the second call too: such calls are never served from the remembered ones
        with pytest.warns(DeprecationWarning, match=message) as record:
            got = call(mfft, xp.asarray(x))
        assert record[0].filename == __file__  # points at the caller, as NumPy's does
        np.testing.assert_allclose(xp.to_numpy(got), expected, atol=1e-9)


def test_no_warning_without_deprecated_arguments():
    x = operand((4, 4), "complex128")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mfft.fftn(x, s=(4, 4), axes=(0, 1))
        mfft.irfftn(x, s=(4, -1), axes=(0, 1))


def test_empty_axes_return_the_input_as_numpy_does():
    x = operand((3, 4), "float64")
    assert mfft.fftn(x, axes=()) is x is np.fft.fftn(x, axes=())
    assert mfft.ifftn(np.float64(2.0)).shape == np.fft.ifftn(np.float64(2.0)).shape == ()
    with pytest.raises(IndexError):
        mfft.rfftn(x, axes=())


@pytest.mark.parametrize("value", [None, "abc", {"a": 1}, object()])
@pytest.mark.parametrize("name", ONE_D + N_D)
def test_non_arrays_are_named(name, value):
    """NumPy makes a 0-d object or string array of these and fails later (IndexError, TypeError); mathpy names them."""
    with pytest.raises(TypeError, match=f"a: expected an array, got {type(value).__name__}"):
        getattr(mfft, name)(value)


@pytest.mark.parametrize("name", ONE_D + N_D)
def test_ragged_lists_raise_numpys_value_error(name):
    """NumPy cannot make an array of a ragged list: its ValueError and words, with the operand named."""
    ragged = [[1, 2], [3]]
    with pytest.raises(ValueError) as numpy_error:
        getattr(np.fft, name)(ragged)
    with pytest.raises(ValueError, match="^a: setting an array element with a sequence") as error:
        getattr(mfft, name)(ragged)
    assert str(error.value) == f"a: {numpy_error.value}"


def test_bool_lengths_raise_numpys_type_error():
    with pytest.raises(TypeError, match="an integer is required"):
        np.fft.fft(np.ones(4), n=True)
    with pytest.raises(TypeError, match="an integer is required: n=True is a bool"):
        mfft.fft(np.ones(4), n=True)


def _warnings_and_result(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return [(w.category, str(w.message)) for w in caught], result


# NumPy 2.4's pocketfft gufuncs report the processor's overflow / invalid flags per call, under np.errstate; mathpy
# does with ExecutionCPU(fp_reports=True) (one pass over the result), and reports nothing by default
REPORTING = mathpy.ExecutionCPU(fp_reports=True)
OVERFLOWING = [
    ("fft", np.array([1e308, 1e308, -1e308, 1e308])),                # overflow only
    ("fft", np.full(8, 1e308)),                                      # overflow, then inf - inf: invalid
    ("ifft", np.full(8, 1e308) + 0j),
    ("rfft", np.full(8, 1e308)),                                     # NumPy's rfft_n_even
    ("rfft", np.full(7, 1e308)),                                     # rfft_n_odd
    ("irfft", np.full(5, 1e308) + 0j),
    ("hfft", np.full(5, 1e308) + 0j),
    ("ihfft", np.full(5, 1e308)),
    ("fft", np.array([np.inf, -np.inf, 2.0, 3.0])),                   # invalid only: the infinities were given
    ("fft", np.array([np.inf, 1.0, 2.0, 3.0])),                      # nothing new: no report
    ("fft", np.array([np.nan, 1.0, 2.0, 3.0])),
]
# (single precision: NumPy 2.4 computes it in double and reports the overflow of its cast to complex64;
# docs/guides/differences.md, fft-single-precision-overflow)


@pytest.mark.parametrize("name, x", OVERFLOWING, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OVERFLOWING)])
def test_floating_point_reports_are_numpys(name, x):
    """The same RuntimeWarnings (category and words, in order) and the same infinities and NaNs as NumPy."""
    numpy_reports, expected = _warnings_and_result(lambda: getattr(np.fft, name)(x))
    reports, got = _warnings_and_result(lambda: getattr(mfft, name)(x, execution=REPORTING))
    assert reports == numpy_reports
    np.testing.assert_array_equal(got, expected)  # inf and NaN where NumPy has them (NaN == NaN here)
    unreported, got = _warnings_and_result(lambda: getattr(mfft, name)(x, execution="cpu"))
    assert unreported == []  # the default: no pass, no report (as on the GPU)
    np.testing.assert_array_equal(got, expected)


def test_floating_point_reports_follow_errstate():
    x = np.full(8, 1e308)
    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError, match="overflow encountered in fft"):
            mfft.fft(x, execution=REPORTING)
        mfft.fft(x)  # no reports asked for: nothing raised
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        mfft.fft(x, execution=REPORTING)
    calls = []
    with np.errstate(all="call", call=lambda kind, flag: calls.append((kind, flag))):
        mfft.fft(x, execution=REPORTING)
    assert calls == [("overflow", 2), ("invalid value", 8)]


def test_ignored_reports_cost_no_pass_over_the_result(monkeypatch):
    """No pass over the result by default, nor under errstate(over="ignore", invalid="ignore") (NumPy would report
    nothing); one per call with fp_reports=True."""
    from mathpy.host.fft import _numpy_rules
    passes = []
    monkeypatch.setattr(_numpy_rules, "_finite", lambda result, threads: passes.append(1) or True)
    x = np.full(8, 1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # the stateless call remembered the first: the same holds for it
            mfft.fft(x)
            mfft.fft(x, out=np.empty(8, complex))
    with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        mfft.fft(x, execution=REPORTING)
    assert not passes
    with np.errstate(over="ignore"):  # invalid values are still reported: the pass runs
        mfft.fft(np.ones(8), execution=REPORTING)
        mfft.fft(np.ones(8), execution=REPORTING, out=np.empty(8, complex))
    assert passes == [1, 1]


def test_finite_results_are_not_reported_when_their_sum_overflows():
    """The check's fast path sums the result; a sum that overflows is not the transform's overflow."""
    x = np.zeros(4)
    x[0] = 1e308                                # each output is 1e308: finite, but their sum is not
    reports, got = _warnings_and_result(lambda: mfft.fft(x, execution=REPORTING))
    assert reports == [] and np.isfinite(got).all()


def test_lists_and_scalars_sequences_are_arrays():
    np.testing.assert_allclose(mfft.fft([1, 2, 3]), np.fft.fft([1, 2, 3]))
    np.testing.assert_allclose(mfft.irfftn([[1, 2], [3, 4]]), np.fft.irfftn([[1, 2], [3, 4]]))


# --- GPU execution: long double refused, float16 in single precision -------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not LONG_DOUBLE, reason="long double is double on this platform")
def test_long_double_on_the_gpu_is_a_clear_error():
    x = operand((4, 8), np.clongdouble)
    for call in (lambda: mfft.fft(x, execution="cuda"), lambda: mfft.irfftn(x, execution="cuda"),
                 lambda: mfft.FFT(x, execution="cuda")):
        with pytest.raises(TypeError, match="only on the CPU.*cuFFT has no long double"):
            call()
    with mathpy.execution_space("cuda"):
        with pytest.raises(TypeError, match="execution='cpu'"):
            mfft.rfft(x.real.copy())


@pytest.mark.gpu
def test_numpy_operands_on_the_gpu_follow_numpy():
    """Host operands run with execution='cuda' give NumPy's results (dtype, shape, values) back as NumPy arrays."""
    for name, x, kwargs in (("fft", operand((4, 16), np.float16), {}), ("irfft", operand((4, 9), np.float16), {}),
                            ("fftn", operand((4, 5, 6), np.complex64), dict(axes=(1, 1, 2))),
                            ("irfftn", operand((4, 5, 6), np.complex128), dict(s=(3, None), axes=(0, 2))),
                            ("rfft", operand((4, 16), np.int16), dict(n=7))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            expected = getattr(np.fft, name)(x, **kwargs)
            got = getattr(mfft, name)(x, execution="cuda", **kwargs)
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=bound(expected, x.dtype, x.size))
