"""No callback or epilog reads or writes past its data unnoticed (CPU; the GPU runs are tests/test_bounds_gpu.py).

- When planning: an index that every call reaches and that the function's source shows (``data_in[offset + 3]``,
  ``user_info[offset + 1]``, ``data[row, col]`` on a 1 x 1 ``data``, any named operand of a matmul epilog) is
  refused with a ValueError naming the function, the subscript, the array and the size it needs (the crashes and
  garbage reported in issue 22).
- ``check_bounds`` (options, or ``MATHPY_CHECK_BOUNDS=1``): the indices the plan cannot see raise OutOfBoundsError
  naming the array and the index, on the CPU (numba's bounds check) and in the GPU code, run here on the host
  (tests/_host_callback.py: the FFT callbacks' wrappers, the matmul epilog function of the kernels' calling
  convention) and through the FFT API on a stand-in GPU whose engine runs that code; the matmul kernels' checked
  builds are linked by nvJitLink here (their record stays visible). The matmul routes on a stand-in GPU are in
  tests/test_matmul_epilog_routes.py.
- The analysis itself (:mod:`mathpy.jit._indexing`): the ranges it derives, and that it never refuses a function
  whose index it cannot be sure of.
"""

import ctypes
import threading

import numpy as np
import pytest

import mathpy
import mathpy.fft as mfft
from mathpy import OutOfBoundsError
from mathpy import _engines, _packages
from mathpy.jit import _bounds
from mathpy.jit._indexing import coordinate, index_ranges, unconditional_accesses

from _fake_gpu import host_view, pretend_a_gpu
from _host_callback import HostCallback, host_engine
from _tolerance import assert_fft_close, assert_within, matmul_bound, unit_roundoff
from test_fft_fake_gpu import FakeCuPy

WINDOW = 8


# --- callbacks of issue 22 and their neighbours (module level: the analysis reads their source) -----------------------

def prolog_plus_3(data_in, offset, user_info, unused):
    return data_in[offset + 3]


def prolog_plus_million(data_in, offset, user_info, unused):
    return data_in[offset + 1000000]


def epilog_far_store(data_out, offset, value, user_info, unused):
    data_out[offset + 100000000] = value


def epilog_info_plus_1(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset + 1]


def prolog_window(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset % WINDOW]


def prolog_shifted_window(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[(offset + 5) % 16]


def prolog_full(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def epilog_scalar(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[0]


def prolog_negative(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[np.int64(offset) - 1]


def prolog_guarded(data_in, offset, user_info, unused):
    if offset + 1 < 8:  # the plan cannot see that this keeps the index inside: it must not refuse it
        return data_in[offset + 1]
    return data_in[offset]


def prolog_late(data_in, offset, user_info, unused):
    if offset > 1:
        return data_in[offset] * user_info[offset + 2]
    return data_in[offset]


def epilog_late_store(data_out, offset, value, user_info, unused):
    if offset >= 6:
        data_out[offset + 5] = value
    else:
        data_out[offset] = value


def prolog_by_value(data_in, offset, user_info, unused):
    """Reads the user data where the input's real part says: only a run can tell."""
    return data_in[offset] * user_info[np.int64(data_in[offset].real)]


def gate(value, row, col, data):
    return value * data[row, col]


def gate_batch(value, batch, row, col, data):
    return value + data[batch, row, col]


def per_row(value, row, col, data):
    return value * data[row]


def per_col(value, row, col, data):
    return value * data[col]


def stencil(value, row, col, data):
    return value + data[row - 1, col]


def late_gate(value, row, col, data):
    if row > 0:
        return value * data[row, col + 1]
    return value


def late_batch(value, batch, row, col, data):
    if batch > 0:
        return value + data[batch + 1, row, col]
    return value


# --- the analysis ---------------------------------------------------------------------------------------------------

def _range(fn, array, coordinates, which=0):
    access = unconditional_accesses(fn, (array,))[which]
    (r,) = index_ranges(access, fn, coordinates)
    return r


N_GLOBAL = 12


def _patterns(data_in, offset, user_info, unused):
    k = offset // 3
    return (user_info[offset % 5] + user_info[k] + user_info[N_GLOBAL - 1] + user_info[min(offset, 2)]
            + user_info[np.uint64(offset) * 2 + 1] + user_info[offset & 7])


def test_ranges_of_index_patterns():
    c = {"offset": coordinate(0, 9)}
    expected = [(0, 4, True), (0, 3, True), (11, 11, True), (0, 2, True), (1, 19, True), (0, 7, True)]
    got = [_range(_patterns, "user_info", c, k) for k in range(6)]
    assert [(r.lo, r.hi, r.hi_reached) for r in got] == expected
    # offsets with gaps (a strided layout): offset % 5 may never reach 4
    r = _range(_patterns, "user_info", {"offset": coordinate(0, 9, dense=False)}, 0)
    assert (r.lo, r.hi, r.hi_reached) == (0, 4, False)


def test_what_is_not_analysed():
    # under an if, or after a block that may return
    assert unconditional_accesses(prolog_guarded, ("data_in",)) == []
    assert unconditional_accesses(prolog_late, ("user_info",)) == []
    assert _range(prolog_by_value, "user_info", {"offset": coordinate(0, 7)}) is None  # read from an array
    namespace = {}
    exec("def f(data_in, offset, user_info, unused):\n    return data_in[offset + 3]", namespace)
    assert unconditional_accesses(namespace["f"], ("data_in",)) is None  # no source to read

    def closure_and_reassigned(data_in, offset, user_info, unused):
        offset = offset + 1  # a coordinate assigned to is no longer known
        return data_in[offset]

    assert _range(closure_and_reassigned, "data_in", {"offset": coordinate(0, 7)}) is None

    def closure(data_in, offset, user_info, unused):
        return data_in[offset] * user_info[offset % WIDTH]

    WIDTH = 6
    assert _range(closure, "user_info", {"offset": coordinate(0, 99)}).hi == 5

    def lam():
        return lambda d, o, u, x: d[o + 2]

    fn = lam()
    assert (_range(fn, "d", {"o": coordinate(0, 3)}).hi, unconditional_accesses(fn, ("d",))[0].text) == (5, "d[o + 2]")


# --- FFT: refused when planning ---------------------------------------------------------------------------------------

X8 = (np.arange(8) + 1j * np.arange(8)[::-1]).astype(np.complex64)


@pytest.mark.parametrize("kwargs, words", [
    ({"prolog": prolog_plus_3}, ["prolog prolog_plus_3", "`data_in[offset + 3]`", "reaches 10", "data_in has 8"]),
    ({"prolog": prolog_plus_million}, ["reaches 1000007", "data_in has 8"]),
    ({"epilog": epilog_far_store}, ["epilog epilog_far_store", "writes `data_out[offset + 100000000]`",
                                    "data_out has 8"]),
    ({"epilog": mfft.Callback(epilog_info_plus_1, data=np.ones(8, np.float32))},
     ["`user_info[offset + 1]`", "user data has 8 elements", "needs at least 9"]),
    ({"prolog": mfft.Callback(prolog_shifted_window, data=np.ones(8, np.float32))},
     ["`user_info[(offset + 5) % 16]`", "reaches 12", "needs at least 13"]),
    ({"prolog": mfft.Callback(prolog_full, data=np.float32(2))}, ["has 1 element;", "needs at least 8"]),
    ({"prolog": mfft.Callback(prolog_negative, data=np.ones(8, np.float32))}, ["reaches -1", "negative index"]),
])
@pytest.mark.parametrize("check_bounds", [None, True])
def test_fft_callbacks_indexing_outside_their_data_are_refused_when_planning(kwargs, words, check_bounds):
    """The crash (segmentation fault) and garbage cases of issue 22, and their neighbours."""
    with pytest.raises(ValueError) as info:
        mfft.fft(X8, options={"check_bounds": check_bounds}, **kwargs)
    for word in words:
        assert word in str(info.value), str(info.value)
    function = next(iter(kwargs.values()))
    function = getattr(function, "function", function)
    assert f"test_bounds.py:{function.__code__.co_firstlineno}" in str(info.value)


def test_stateful_plan_refuses_before_compiling():
    with mfft.FFT(X8) as f:
        with pytest.raises(ValueError, match="data_in has 8"):
            f.plan(prolog=prolog_plus_3)
        f.plan()  # the FFT is still usable
        assert_fft_close(f.execute(), np.fft.fft(X8.astype(np.complex128)), np.float32, 8)


def _filter_reference(x, info, fn):
    return np.fft.fft(x.astype(np.complex128) * fn(np.arange(x.size), info), axis=-1)


@pytest.mark.parametrize("check_bounds", [False, True])
def test_callbacks_inside_their_data_run(check_bounds):
    """Windows, full filters, scalars and guarded indices are not refused, and compute what they should."""
    options = {"check_bounds": check_bounds}
    x = np.stack([X8, X8[::-1]])  # two rows: the window is broadcast over the batch axis
    window = np.arange(1, 9, dtype=np.float32)
    got = mfft.fft(x, prolog=mfft.Callback(prolog_window, data=window), options=options)
    expected = np.fft.fft(x.astype(np.complex128) * window, axis=-1)
    assert_fft_close(got, expected, np.float32, 8)
    full = np.linspace(0.5, 2, 16, dtype=np.float32).reshape(2, 8)
    assert_fft_close(mfft.fft(x, prolog=mfft.Callback(prolog_full, data=full), options=options),
                     np.fft.fft(x.astype(np.complex128) * full, axis=-1), np.float32, 8)
    got = mfft.fft(X8, epilog=mfft.Callback(epilog_scalar, data=np.float32(0.5)), options=options)
    assert_fft_close(got, 0.5 * np.fft.fft(X8.astype(np.complex128)), np.float32, 8)
    shifted = np.concatenate([X8[1:], X8[-1:]]).astype(np.complex128)
    assert_fft_close(mfft.fft(X8, prolog=prolog_guarded, options=options), np.fft.fft(shifted), np.float32, 8)


def test_strided_layout_with_a_full_filter():
    """An axis-0 transform of a C-ordered array: the offsets are strided and span the whole array."""
    x = (np.arange(12).reshape(4, 3) * (1 + 0.5j)).astype(np.complex64)
    full = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    got = mfft.fft(x, axis=0, prolog=mfft.Callback(prolog_full, data=full))
    assert_fft_close(got, np.fft.fft(x.astype(np.complex128) * full, axis=0), np.float32, 4)


# --- FFT: check_bounds on the CPU -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, kind, callback, array, index", [
    ((8,), "prolog", mfft.Callback(prolog_late, data=np.ones(8, np.float32)), "user_info", (8,)),
    ((8,), "epilog", epilog_late_store, "data_out", (11,)),
    # user data of 4 elements, a window over the last axis; user_info[4] is read first at offset 4
    ((2, 4), "prolog", mfft.Callback(prolog_by_value, data=np.ones(4, np.float32)), "user_info", (4,)),
])
def test_check_bounds_names_the_array_and_the_index_on_the_cpu(shape, kind, callback, array, index):
    with pytest.raises(OutOfBoundsError) as info:
        mfft.fft(X8.reshape(shape), options={"check_bounds": True}, **{kind: callback})
    error = info.value
    function = mfft.Callback(callback).function if callable(callback) else callback.function
    assert (error.array, error.index) == (array, index)
    assert function.__name__ in error.callback and isinstance(error, IndexError)
    assert f"{array}[{index[0]}]" in str(error)


def test_check_bounds_from_the_environment(monkeypatch):
    late = mfft.Callback(prolog_late, data=np.ones(8, np.float32))
    monkeypatch.setenv("MATHPY_CHECK_BOUNDS", "1")
    with pytest.raises(OutOfBoundsError):
        mfft.fft(X8, prolog=late)
    with mfft.FFT(X8) as f:
        f.plan(prolog=late)
        with pytest.raises(OutOfBoundsError, match=r"user_info\[8\]"):
            f.execute()
    mfft.fft(X8, prolog=late, options={"check_bounds": False})  # an explicit False wins (no check: no error)
    monkeypatch.setenv("MATHPY_CHECK_BOUNDS", "0")
    mfft.fft(X8, prolog=late)


def test_check_bounds_option_is_validated():
    with pytest.raises(TypeError, match="FFTOptions.check_bounds"):
        mfft.FFTOptions(check_bounds="yes")
    with pytest.raises(TypeError, match="MatmulOptions.check_bounds"):
        mathpy.MatmulOptions(check_bounds=1)


def test_checked_and_unchecked_builds_are_distinct_code():
    from mathpy import jit
    from mathpy.jit._cache import function_key
    from mathpy.jit._spec import make_spec

    plain = jit.compile_callback(prolog_full, "prolog", "complex64", "float32", (9, 0), cache=False)
    checked = jit.compile_callback(prolog_full, "prolog", "complex64", "float32", (9, 0), cache=False,
                                   check_bounds=True)
    assert plain.key != checked.key and plain.ltoir != checked.ltoir
    spec = make_spec("prolog", "complex64", "float32", (9, 0))
    assert function_key(prolog_full, spec)[0] == plain.key  # the unchecked key is what it was before
    # FFT keys (a cache of one's own keys on them) tell the two apart when a callback is given
    keys = [mfft.FFT.create_key(X8, prolog=prolog_plus_3, options={"check_bounds": check}) for check in (False, True)]
    assert keys[0] != keys[1]
    assert mfft.FFT.create_key(X8) == mfft.FFT.create_key(X8, options={"check_bounds": True})


# --- FFT: the checked GPU code, run on the host -----------------------------------------------------------------------

def _header(info, data_count):
    words = np.zeros(_bounds.HEADER_WORDS, np.int64)
    if info is not None:
        words[0], words[1] = info.ctypes.data, info.size
    words[2] = data_count
    return words


def test_checked_gpu_code_skips_and_records_the_first_bad_access():
    data = np.arange(8, dtype=np.complex64)
    info = (np.arange(8) + 10).astype(np.float32)
    load = HostCallback(prolog_late, "prolog", "complex64", "float32", check_bounds=True)
    header = _header(info, 8)
    loaded = [load(data, k, header) for k in range(8)]
    record = header[3:]
    # offsets 0-5 are inside (2 + 5 = 7); 6 reads user_info[8] first: recorded (flag, array 1, one index, 8, offset 6)
    assert list(record[:4]) == [1, 1, 1, 8] and record[6] == 6
    assert loaded[6] == 0 and loaded[7] == 0  # skipped loads give zero
    np.testing.assert_array_equal(loaded[:6], [data[k] * (info[k + 2] if k > 1 else 1) for k in range(6)])
    store = HostCallback(epilog_late_store, "epilog", "complex128", None, check_bounds=True)
    out, header = np.zeros(8, np.complex128), _header(None, 8)
    for k in (7, 0, 6):
        store(out, k, k + 1j, header)
    assert list(header[3:7]) == [1, 0, 1, 12] and header[9] == 7  # the first bad one (offset 7) wins
    np.testing.assert_array_equal(out, [1j, 0, 0, 0, 0, 0, 0, 0])  # no store outside, the good one made


def test_checked_gpu_code_inside_bounds_equals_the_plain_build():
    data, info = (np.arange(8) * (1 - 2j)).astype(np.complex64), np.linspace(1, 2, 8).astype(np.float32)
    plain = HostCallback(prolog_full, "prolog", "complex64", "float32")
    checked = HostCallback(prolog_full, "prolog", "complex64", "float32", check_bounds=True)
    header = _header(info, 8)
    assert [checked(data, k, header) for k in range(8)] == [plain(data, k, info) for k in range(8)]
    assert not header[3:].any()


# --- FFT: check_bounds through the API on a stand-in GPU whose cuFFT runs the callbacks' GPU code ---------------------

class HostCodeCUFFT:
    """A C2C cuFFT stand-in: the prolog's and epilog's compiled GPU code (tests/_host_callback.py) is called for every
    element with the caller_info cuFFT would get (``data_ptr``: the user data or the check_bounds header)."""

    def __init__(self, transform, *, execution, prolog=None, epilog=None, allocator=None):
        assert transform.fft_type == "C2C"
        self.transform, self.callbacks, self.lock, self.workspace_bytes = transform, (prolog, epilog), \
            threading.RLock(), 0
        self.overwrites_input = False
        self.host = {cb.kind: (HostCallback(cb.function, cb.kind, cb.element_dtype, cb.user_info_dtype,
                                            cb.check_bounds), cb.data_ptr) for cb in (prolog, epilog) if cb}

    def _caller_info(self, kind):
        pointer = self.host[kind][1]
        words = _bounds.HEADER_WORDS if self.callbacks[kind == "epilog"].check_bounds else 1
        return np.frombuffer((ctypes.c_int64 * words).from_address(pointer), np.int64) if pointer else None

    def execute(self, input_ptr, output_ptr, direction, stream):
        t = self.transform
        offsets = np.arange(int(np.prod(t.input_shape))).reshape(t.input_shape)  # C-contiguous here
        x = host_view(input_ptr, t.input_dtype, (offsets.size,), (1,))
        y = host_view(output_ptr, t.output_dtype, (offsets.size,), (1,))
        values = x.reshape(t.input_shape).copy()
        if "prolog" in self.host:
            load = self.host["prolog"][0]
            values = np.array([load(x, k, self._caller_info("prolog")) for k in offsets.flat]).reshape(offsets.shape)
        result = np.fft.fftn(values, axes=t.axes).astype(t.output_dtype)
        if "epilog" in self.host:
            store = self.host["epilog"][0]
            for k, v in zip(offsets.flat, result.flat):
                store(y, k, v, self._caller_info("epilog"))
        else:
            y[:] = result.reshape(-1)

    def free(self):
        pass


@pytest.fixture
def host_code_gpu(monkeypatch):
    pretend_a_gpu(monkeypatch)
    cupy = FakeCuPy()
    mfft.plan_cache_clear()
    with _packages.use(cupy, device_package_name="cupy"), _engines.use("fft", "cuda", HostCodeCUFFT):
        yield cupy
    mfft.plan_cache_clear()


def test_check_bounds_on_the_gpu_path(host_code_gpu):
    """User data indexed by the input's values: the first execution reads past it (recorded by the GPU code, raised
    by the API after the transform), the next, on data that stays inside, runs clean (the record was cleared)."""
    info = host_code_gpu.array(np.array([1, 2, 3, 4], np.float32))
    bad = host_code_gpu.array(np.array([[0, 1, 2, 3], [4, 0, 1, 2]], np.complex64))
    good = host_code_gpu.array(np.array([[3, 2, 1, 0], [3, 2, 1, 0]], np.complex64))
    with mfft.FFT(bad, execution="cuda", options={"check_bounds": True}) as f:
        f.plan(prolog=mfft.Callback(prolog_by_value, data=info))
        with pytest.raises(OutOfBoundsError) as error:
            f.execute()
        assert (error.value.array, error.value.index) == ("user_info", (4,)) and "offset 4" in str(error.value)
        f.reset_operand(good)
        result = np.asarray(f.execute())
    values = np.array([[3, 2, 1, 0], [3, 2, 1, 0]])
    assert_fft_close(result, np.fft.fft2(values * np.array([1, 2, 3, 4])[values]), np.float32, 8)  # every axis
    # the stateless call (its prepared call is remembered) raises too, every time
    for _ in range(2):
        with pytest.raises(OutOfBoundsError, match=r"user_info\[4\]"):
            mfft.fft(bad, prolog=mfft.Callback(prolog_by_value, data=info), options={"check_bounds": True})


def test_check_bounds_is_refused_in_a_cuda_graph_capture(host_code_gpu):
    """A checked execution waits on the host for its record, and planning a checked callback uploads its header:
    neither can be recorded in a CUDA graph, so both raise StreamCaptureError before any work; the same FFT without
    check_bounds is captured."""
    x = host_code_gpu.array(X8)
    info = host_code_gpu.array(np.ones(8, np.float32))
    with mfft.FFT(x, execution="cuda", options={"check_bounds": True}) as checked, \
            mfft.FFT(x, execution="cuda") as plain:
        checked.plan(prolog=mfft.Callback(prolog_full, data=info))
        plain.plan(prolog=mfft.Callback(prolog_full, data=info))
        host_code_gpu.capturing.add(40)
        with host_code_gpu.stream_scope(0, 40):
            host_code_gpu.events.clear()
            with pytest.raises(mathpy.StreamCaptureError, match="check_bounds"):
                checked.execute()
            with mfft.FFT(x, execution="cuda", options={"check_bounds": True}) as again:
                with pytest.raises(mathpy.StreamCaptureError, match="FFT.plan with check_bounds"):
                    again.plan(prolog=mfft.Callback(prolog_full, data=info))
            assert host_code_gpu.events == []
            captured = plain.execute()
    assert_fft_close(np.asarray(captured), np.fft.fft(X8.astype(np.complex128)), np.float32, 8)


def test_unchecked_gpu_path_passes_the_user_data(host_code_gpu):
    info = host_code_gpu.array(np.linspace(1, 2, 8).astype(np.float32))
    x = host_code_gpu.array(X8)
    got = np.asarray(mfft.fft(x, prolog=mfft.Callback(prolog_full, data=info)))
    assert_fft_close(got, np.fft.fft(X8.astype(np.complex128) * np.linspace(1, 2, 8)), np.float32, 8)


# --- matmul ----------------------------------------------------------------------------------------------------------

A32 = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
B32 = np.arange(8, dtype=np.float32).reshape(4, 2) - 3


@pytest.mark.parametrize("fn, data, words", [
    (gate, np.ones((1, 1), np.float32), ["`data[row, col]`", "axis 0 reaches 2", "3 x 2 result",
                                         "shape (1, 1)", "at least (3, 2)"]),
    (gate, np.ones((3, 1), np.float32), ["axis 1 reaches 1", "at least (3, 2)"]),
    (per_row, np.ones(2, np.float32), ["`data[row]`", "at least (3,)"]),
    (per_col, np.ones(1, np.float32), ["`data[col]`", "at least (2,)"]),
    (stencil, np.ones((3, 2), np.float32), ["reaches -1", "negative index"]),
])
@pytest.mark.parametrize("check_bounds", [None, True])
def test_matmul_epilog_data_too_small_is_refused_when_planning(fn, data, words, check_bounds):
    with pytest.raises(ValueError) as info:
        mathpy.matmul(A32, B32, epilog=fn, epilog_inputs={"data": data}, options={"check_bounds": check_bounds})
    for word in words:
        assert word in str(info.value), str(info.value)
    assert f"test_bounds.py:{fn.__code__.co_firstlineno}" in str(info.value)


def test_batched_epilog_data_is_checked_against_the_batch():
    a = np.stack([A32, 2 * A32])
    with pytest.raises(ValueError, match=r"axis 0 reaches 1 for a 2 x 3 x 2 result.*at least \(2, 3, 2\)"):
        mathpy.matmul(a, B32, epilog=gate_batch, epilog_inputs={"data": np.ones((1, 3, 2), np.float32)})
    data = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    got = mathpy.matmul(a, B32, epilog=gate_batch, epilog_inputs={"data": data})
    exact = a.astype(np.float64) @ B32
    assert_within(got, exact + data, matmul_bound(a, B32, np.float32, exact=exact + data))


@pytest.mark.parametrize("check_bounds", [False, True])
def test_matmul_epilogs_inside_their_data_run(check_bounds):
    data = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    got = mathpy.matmul(A32, B32, epilog=gate, epilog_inputs={"data": data}, options={"check_bounds": check_bounds})
    exact = A32.astype(np.float64) @ B32
    # one rounding of the product to float32, then one more for the product with data
    assert_within(got, exact * data, matmul_bound(A32, B32, np.float32, roundings=2, exact=exact) * np.abs(data))


def test_matmul_check_bounds_names_the_index_on_the_cpu(monkeypatch):
    data = np.ones((3, 2), np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        mathpy.matmul(A32, B32, epilog=late_gate, epilog_inputs={"data": data}, options={"check_bounds": True})
    assert (info.value.array, info.value.index) == ("data", (1, 2)) and "result element (1, 1)" in str(info.value)
    assert "late_gate" in info.value.callback
    with pytest.raises(OutOfBoundsError) as info:  # the epilog that takes the batch index
        mathpy.matmul(np.stack([A32, A32]), B32, epilog=late_batch,
                      epilog_inputs={"data": np.ones((2, 3, 2), np.float32)}, options={"check_bounds": True})
    assert info.value.index == (2, 0, 0) and "result element (1, 0, 0)" in str(info.value)
    monkeypatch.setenv("MATHPY_CHECK_BOUNDS", "true")
    with mathpy.Matmul(A32, B32) as mm:
        mm.plan(epilog=late_gate, epilog_inputs={"data": data})
        with pytest.raises(OutOfBoundsError, match=r"data\[1, 2\]"):
            mm.execute()


def bias_and_gate(value, row, col, bias, gate):
    return value * gate[row, col] + bias[col]


def late_bias(value, row, col, bias, gate):
    if row > 1:
        return value * gate[row, col] + bias[col + row]
    return value * gate[row, col]


@pytest.mark.parametrize("check_bounds", [None, True])
def test_every_named_operand_is_checked_when_planning(check_bounds):
    gate, bias = np.ones((3, 2), np.float32), np.ones(2, np.float32)
    for inputs, words in [({"bias": bias[:1], "gate": gate}, ["`bias[col]`", "bias has shape (1,)", "(2,)"]),
                          ({"bias": bias, "gate": gate[:2]}, ["`gate[row, col]`", "gate has shape (2, 2)",
                                                              "at least (3, 2)"])]:
        with pytest.raises(ValueError) as info:
            mathpy.matmul(A32, B32, epilog=bias_and_gate, epilog_inputs=inputs,
                          options={"check_bounds": check_bounds})
        for word in words:
            assert word in str(info.value), str(info.value)
    # one operand given as "data": named by its parameter and the key it was given under
    with pytest.raises(ValueError, match=r"`scale\[col\]`.*but scale \(epilog input 'data'\) has shape \(1,\)"):
        mathpy.matmul(A32, B32, epilog=lambda value, row, col, scale: value * scale[col],
                      epilog_inputs={"data": bias[:1]})


def test_matmul_check_bounds_names_the_operand_on_the_cpu():
    gate = np.linspace(1, 2, 6, dtype=np.float32).reshape(3, 2)
    bias = np.arange(4, dtype=np.float32)
    got = mathpy.matmul(A32, B32, epilog=late_bias, epilog_inputs={"bias": bias, "gate": gate},
                        options={"check_bounds": True})  # rows 0-2: bias[col + 2] at most bias[3]
    exact = A32.astype(np.float64) @ B32
    ref = exact * gate + np.where(np.arange(3)[:, None] > 1, bias[np.arange(2) + 2], 0)
    # the product's error and its rounding scaled by gate, the product with gate rounded, then the sum with bias
    bound = (matmul_bound(A32, B32, np.float32, roundings=2, exact=exact) * gate
             + unit_roundoff(np.float32) * np.abs(ref))
    assert_within(got, ref, bound)
    with pytest.raises(OutOfBoundsError) as info:
        mathpy.matmul(A32, B32, epilog=late_bias, epilog_inputs={"bias": bias[:3], "gate": gate},
                      options={"check_bounds": True})
    assert (info.value.array, info.value.index) == ("bias", (3,)) and "result element (2, 1)" in str(info.value)


def test_checked_and_unchecked_matmul_builds_never_share_a_cache_entry():
    """The CPU's compiled function, and on the GPU the epilog function's and the linked kernel's keys (memory and
    disk) tell a check_bounds build from the plain one."""
    from mathpy.device import _epilog_pass as P
    from mathpy.host.matmul._fused_kernels import Build, cubin_key
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _matmul_epilog as E

    wide = np.ones((3, 3), np.float32)
    mathpy.matmul(A32, B32, epilog=late_gate, epilog_inputs={"data": wide})  # compiled unchecked first
    with pytest.raises(OutOfBoundsError):
        mathpy.matmul(A32, B32, epilog=late_gate, epilog_inputs={"data": wide[:, :2]}, options={"check_bounds": True})
    epilog, kinds = E.as_matmul_epilog(gate, ("data",)), (("float32", 2),)
    wrappers = {W.wrapper_key(epilog, kinds, "float32", None, (9, 0), checked) for checked in (False, True)}
    builds = {Build("pass", P.PassConfig("float32", 1, checked), (9, 0)) for checked in (False, True)}
    assert len(wrappers) == 2 and len({build.key for build in builds}) == 2
    assert len({cubin_key(build, epilog, kinds, None) for build in builds}) == 2


def _probe(maker):
    def probe(ptr, s0, s1, s2, t0, t1, t2, i, j):
        return maker(ptr, s0, s1, s2, t0, t1, t2)[i, j]
    return probe


def test_checked_epilog_data_view_on_the_host():
    """The GPU kernel's checked ``data[i, j]`` (the view the GEMM kernels build), compiled for the GPU and run here."""
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    from numba.cuda import types
    from numba.cuda.compiler import compile_cuda

    from mathpy.jit import _epilog_data

    signature = (types.uint64,) + (types.int64,) * 8
    cres = compile_cuda(_probe(_epilog_data.maker("float32", 2, checked=True)), types.float32, signature, cc=(9, 0),
                        abi="c", abi_info={"abi_name": "probe"}, nvvm_options={"opt": 3})
    engine = host_engine(cres.library.get_llvm_str())
    probe = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_uint64, *[ctypes.c_int64] * 8)(
        engine.get_function_address("probe"))
    record = np.frombuffer((ctypes.c_int64 * _bounds.RECORD_WORDS).from_address(
        engine.get_global_value_address(_epilog_data.RECORD_SYMBOL)), np.int64)
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    view = (data.ctypes.data, 3, 2, 1, 2, 1, 0)  # pointer, shape, strides in elements
    assert [probe(*view, i, j) for i, j in np.ndindex(3, 2)] == list(data.ravel())
    assert not record.any()
    assert probe(*view, 3, 0) == 0 and list(record[:5]) == [1, 0, 2, 3, 0]
    assert probe(*view, 1, -1) == 0 and list(record[:5]) == [1, 0, 2, 3, 0]  # negative: refused, not recorded again
    error = _bounds.error_from_record(record, "matmul epilog", "gate (x.py:1)", (("data", (3, 2)),))
    assert (error.array, error.index) == ("data", (3, 0)) and "shape (3, 2)" in str(error)


def _wrapper_on_the_host(fn, names, kinds, checked):
    """The epilog function of the kernels' calling convention (mathpy.jit._epilog_wrapper), compiled for the GPU
    as the kernels link it, run here: ``(engine, call)`` with ``call(value, batch, row, col, *slots)`` -> float (valid
    while ``engine`` lives), and the record."""
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    from numba.cuda.compiler import compile_cuda

    from mathpy.device._gemm_build import compiling_for
    from mathpy.jit import _epilog_data
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _matmul_epilog as E

    function, signature = W.wrapper_function(E.as_matmul_epilog(fn, names), kinds, "float32", None, checked)
    with compiling_for((9, 0)):
        cres = compile_cuda(function, signature.return_type, signature.args, cc=(9, 0), abi="c",
                            abi_info={"abi_name": "epilog"}, nvvm_options={"opt": 3})
    engine = host_engine(cres.library.get_llvm_str())
    slots = [ctypes.c_uint64 if t.name == "uint64" else ctypes.c_int64 for t in signature.args[1:]]
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, *slots)(engine.get_function_address("epilog"))
    record = None
    if checked:
        record = np.frombuffer((ctypes.c_int64 * _bounds.RECORD_WORDS).from_address(
            engine.get_global_value_address(_epilog_data.RECORD_SYMBOL)), np.int64)
    return (engine, call), record


def two_operands(value, row, col, bias, gate):
    return value * gate[row, col] + bias[row + col]


def test_checked_epilog_function_gets_each_operand_s_shape():
    """The calling convention of a checked build: each operand's address, strides, then shape; an index outside an
    operand is skipped (zero) and recorded with the operand's position, which names it."""
    bias = np.arange(4, dtype=np.float32)
    gate = np.arange(6, dtype=np.float32).reshape(2, 3) + 1

    def slots(b_shape=(), g_shape=()):  # address, strides in elements (, shape)
        return (bias.ctypes.data, 1, 0, 0, *b_shape, gate.ctypes.data, 3, 1, 0, *g_shape)

    kinds = (("float32", 1), ("float32", 2))
    (plain_engine, plain), _ = _wrapper_on_the_host(two_operands, ("bias", "gate"), kinds, False)
    (checked_engine, checked), record = _wrapper_on_the_host(two_operands, ("bias", "gate"), kinds, True)
    inside = [(i, j) for i in range(2) for j in range(3)]
    expected = [2 * gate[i, j] + bias[i + j] for i, j in inside]
    assert [plain(2, 0, i, j, *slots()) for i, j in inside] == expected
    assert [checked(2, 0, i, j, *slots((4, 0, 0), (2, 3, 0))) for i, j in inside] == expected
    assert not record.any()
    # bias of 3 elements: row 1, col 2 reads bias[3], outside; skipped (0) and recorded as operand 0
    assert checked(2, 0, 1, 2, *slots((3, 0, 0), (2, 3, 0))) == 2 * gate[1, 2]
    assert list(record[:4]) == [1, 0, 1, 3]
    error = _bounds.error_from_record(record, "matmul epilog", "two_operands (x.py:1)",
                                      (("bias", (3,)), ("gate", (2, 3))))
    assert (error.array, error.index) == ("bias", (3,)) and "bias (3 elements)" in str(error)
    record[:] = 0
    assert checked(2, 0, 2, 0, *slots((4, 0, 0), (2, 3, 0))) == bias[2]  # gate[2, 0]: operand 1
    assert list(record[:5]) == [1, 1, 2, 2, 0]
    del plain_engine, checked_engine  # (the functions live as long as their engines)


def _kernel_build(kind, checked):
    """(skeleton LTO-IR, parameter names, staged tile, arch, result, link options) of a small kernel of ``kind``."""
    from mathpy.device import _epilog_pass as P
    from mathpy.device import _gemm_build, _gemm_hopper, _gemm_kernel, matmul

    if kind == "pass":
        skeleton, params, _ = _gemm_build.pass_ltoir(P.PassConfig("float32", 2, checked), (9, 0))
        return skeleton, params, None, "sm_90", "float32", ()
    if kind == "generic":
        description = matmul(32, 32, 16, "float32", block_size=64, a_arrangement="col_major")
        config = _gemm_kernel.GenericConfig("float32", "float32", bm=32, bn=32, bk=16, block_size=64, epilog=True,
                                            operands=2, checked=checked)
        skeleton, params, _ = _gemm_build.generic_ltoir(config, description, (9, 0))
        return skeleton, params, None, "sm_90", "float32", ()
    # the fused Hopper kernel as the route rule runs it: whole tiles, gate staged in shared memory, bulk stores
    config = _gemm_hopper.HopperConfig("bfloat16", "bfloat16", bn=256, stages=_gemm_hopper.max_stages(256, True),
                                       b_mn_major=True, epilog=True, operands=2, checked=checked, edges=False,
                                       stage_data=True, store_tile=True)
    skeleton, params, _ = _gemm_build.hopper_ltoir(config, (9, 0))
    return skeleton, params, (128, 256), "sm_90a", "bfloat16", ("-Xnvvm=-prec-div=0",)


def gate_and_bias(value, row, col, gate, bias):
    return value * gate[row, col] + bias[row + col]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pass", "generic", "hopper"])
def test_checked_kernels_link_with_a_visible_record(kind):
    """Each kernel that runs the user's function (the elementwise pass, the generic GEMM, the fused Hopper kernel)
    linked with a checked epilog function by nvJitLink, without a GPU: the record stays a visible global of the linked
    module (what the engine finds with cuModuleGetGlobal: link-time optimisation internalises globals nothing declares
    used), one out-of-line function records into it and is the only call, nothing goes through local memory; the
    unchecked build of the same epilog takes no shapes and calls nothing (the staged gate read from shared memory in
    both)."""
    import re

    from mathpy.device._gemm_kernel import EPILOG_SYMBOL
    from mathpy.jit import _epilog_data
    from mathpy.jit import _epilog_wrapper as W
    from mathpy.jit import _link
    from mathpy.jit import _matmul_epilog as E

    epilog = E.as_matmul_epilog(gate_and_bias, ("gate", "bias"))
    for checked in (True, False):
        skeleton, params, staged, arch, result, options = _kernel_build(kind, checked)
        kinds = (("bfloat16" if staged else "float32", 2), ("float32", 1))
        wrapper, _ = W.wrapper_ltoir(epilog, kinds, result, staged, (9, 0), checked)
        _, ptx = _link.link({"kernel": skeleton, "epilog": wrapper}, arch, options, inlined=EPILOG_SYMBOL)
        assert not re.search(r"\b(ld|st)\.local", ptx)
        assert ("o1_s2" in params) == checked
        calls = set(re.findall(r"\bcall(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$]+)", ptx))
        if checked:
            assert re.search(rf"^\.visible \.global \.align 8 \.b8 {_epilog_data.RECORD_SYMBOL}\[64\];", ptx, re.M)
            assert re.search(r"atom(\.global)?\.cas\.b64", ptx) and calls == {"mathpy_bounds_record"}
        else:
            assert _epilog_data.RECORD_SYMBOL not in ptx and not calls
        if staged:
            assert len(re.findall(r"ld\.shared\.u16", ptx)) == 128
