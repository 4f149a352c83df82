"""Proof, without a GPU, that cuFFT's LTO link inlines mathpy's callbacks (and would not inline numba's plain ones).

A small CUDA C++ kernel declares cuFFT's callback prototypes exactly as cuFFT's own code does and calls them; NVRTC
compiles it to LTO-IR, nvJitLink links it with the callback's LTO-IR to PTX, exactly as cuFFT links its kernels.
A callback that was inlined leaves no ``call`` in the PTX; the element accesses show as vector loads/stores and the
user data as a non-coherent global load (``ld.global.nc``). Needs NVRTC (nvidia-cuda-nvrtc wheel or a CUDA toolkit)
and nvJitLink (nvidia-nvjitlink); NVVM, NVRTC and nvJitLink must be of one CUDA major, nvJitLink the newest.
"""

import re

import numpy as np
import pytest

from mathpy import jit

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")

CC = (9, 0)
ARCH = f"sm_{CC[0]}{CC[1]}"
CTYPE = {"complex64": "float2", "complex128": "double2", "float32": "float", "float64": "double"}
STEM = {"complex64": "Complex", "complex128": "DoubleComplex", "float32": "Real", "float64": "DoubleReal"}
MAKE = {"complex64": "make_float2(0.5f * i, 2.0f)", "complex128": "make_double2(0.5 * i, 2.0)",
        "float32": "0.5f * i", "float64": "0.5 * i"}


def _caller_source(kind, element):
    """A kernel that calls the callback the way cuFFT does, through cuFFT's documented prototype."""
    t = CTYPE[element]
    if kind == "prolog":
        decl = f"__device__ {t} cufftJITCallbackLoad{STEM[element]}(void*, unsigned long long, void*, void*);"
        body = f"out[i] = cufftJITCallbackLoad{STEM[element]}(data, i, info, nullptr);"
    else:
        decl = (f"__device__ void cufftJITCallbackStore{STEM[element]}(void*, unsigned long long, {t}, void*, "
                f"void*);")
        body = f"cufftJITCallbackStore{STEM[element]}(data, i, {MAKE[element]}, info, nullptr);"
    return f"""
{decl}
extern "C" __global__ void caller({t}* data, {t}* out, void* info, unsigned long long n) {{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) {{ {body} }}
}}
"""


def _check_nvrtc(result, prog=None):
    status = result[0]
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = ""
        if prog is not None:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.decode(errors="replace")
        raise RuntimeError(f"NVRTC: {status}\n{log}")
    return result[1:]


def _caller_ltoir(kind, element):
    try:
        (prog,) = _check_nvrtc(nvrtc.nvrtcCreateProgram(_caller_source(kind, element).encode(), b"caller.cu", 0,
                                                        [], []))
    except Exception as e:  # libnvrtc not found
        pytest.skip(f"NVRTC is not usable here: {e}")
    options = [f"-arch={ARCH}".encode(), b"-dlto", b"-rdc=true"]
    _check_nvrtc(nvrtc.nvrtcCompileProgram(prog, len(options), options), prog)
    (size,) = _check_nvrtc(nvrtc.nvrtcGetLTOIRSize(prog))
    buf = b" " * size
    _check_nvrtc(nvrtc.nvrtcGetLTOIR(prog, buf))
    nvrtc.nvrtcDestroyProgram(prog)
    return buf


def link_to_ptx(kind, element, callback_ltoir):
    """PTX of the caller kernel linked with ``callback_ltoir`` by nvJitLink with link-time optimisation."""
    caller = _caller_ltoir(kind, element)
    try:
        handle = nvjitlink.create(3, [f"-arch={ARCH}", "-lto", "-ptx"])
    except Exception as e:
        pytest.skip(f"nvJitLink is not usable here: {e}")
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, caller, len(caller), "caller")
        nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, callback_ltoir, len(callback_ltoir), "callback")
        try:
            nvjitlink.complete(handle)
        except Exception as e:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise RuntimeError(f"nvJitLink failed: {log.decode(errors='replace')}") from e
        size = nvjitlink.get_linked_ptx_size(handle)
        ptx = bytearray(size)
        nvjitlink.get_linked_ptx(handle, ptx)
    finally:
        nvjitlink.destroy(handle)
    return ptx.rstrip(b"\0").decode()


def calls(ptx):
    return re.findall(r"^\s*(?:@%p\d+\s+)?call(?:\.uni)?\b.*$", ptx, flags=re.M)


def prolog_times_filter(data_in, offset, user_info, unused):
    return data_in[offset] * user_info[offset]


def epilog_times_filter(data_out, offset, value, user_info, unused):
    data_out[offset] = value * user_info[offset]


def epilog_times_two(data_out, offset, value, user_info, unused):
    data_out[offset] = value * np.float32(2)


VECTOR = {"complex64": r"v2\.f32", "complex128": r"v2\.f64", "float32": r"f32", "float64": r"f64"}


@pytest.mark.parametrize("element", ["complex64", "complex128", "float32", "float64"])
@pytest.mark.parametrize("kind", ["prolog", "epilog"])
def test_callback_is_inlined_with_vector_accesses(kind, element):
    fn = prolog_times_filter if kind == "prolog" else epilog_times_filter
    compiled = jit.compile_callback(fn, kind, element, element, CC)
    ptx = link_to_ptx(kind, element, compiled.ltoir)  # links only if the mangled symbol is the one cuFFT calls
    assert calls(ptx) == [], ptx
    vec = VECTOR[element]
    # user data through the read-only cache, as one access per element
    assert re.search(rf"ld\.global\.nc\.{vec}\s", ptx), ptx
    if kind == "prolog":
        assert re.search(rf"ld(\.global)?\.{vec}\s", ptx), ptx
    else:  # one store per element (a complex one is a single vector store, not two scalar ones)
        stores = re.findall(r"^\s*st\.[\w.]+", ptx, flags=re.M)
        assert len(stores) == 1 and re.search(rf"st(\.global)?\.{vec}$", stores[0]), ptx


def test_epilog_without_user_data_is_inlined():
    compiled = jit.compile_callback(epilog_times_two, "epilog", "complex64", None, CC)
    ptx = link_to_ptx("epilog", "complex64", compiled.ltoir)
    assert calls(ptx) == []
    assert re.search(r"st(\.global)?\.v2\.f32", ptx)
    assert "f64" not in ptx  # np.float32 constant: no promotion to double


def test_plain_numba_c_abi_callback_is_not_inlined():
    """The control: numba's own abi="c" compile (nvmath-python's way) leaves a call, so the test above can fail."""
    from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda

    patch_numpy_for_numba_cuda()
    from numba import cuda, types

    c64 = types.complex64
    sig = types.void(types.CPointer(c64), types.uint64, c64, types.CPointer(c64), types.voidptr)
    name = jit.compile_callback(epilog_times_filter, "epilog", "complex64", "complex64", CC).mangled_name
    ltoir, _ = cuda.compile(epilog_times_filter, sig, device=True, abi="c", abi_info={"abi_name": name},
                            output="ltoir", cc=CC, opt=True)
    ptx = link_to_ptx("epilog", "complex64", bytes(ltoir))
    assert calls(ptx), "numba's plain C-ABI callback was inlined: the inlining test no longer discriminates"


def test_prolog_and_epilog_link_together():
    """Both callbacks in one link (one cuFFT plan with a prolog and an epilog): no duplicate symbols, both inlined."""
    source = """
__device__ float2 cufftJITCallbackLoadComplex(void*, unsigned long long, void*, void*);
__device__ void cufftJITCallbackStoreComplex(void*, unsigned long long, float2, void*, void*);
extern "C" __global__ void caller(float2* data, float2* out, void* info, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) cufftJITCallbackStoreComplex(out, i, cufftJITCallbackLoadComplex(data, i, info, nullptr), info, nullptr);
}
"""
    (prog,) = _check_nvrtc(nvrtc.nvrtcCreateProgram(source.encode(), b"both.cu", 0, [], []))
    options = [f"-arch={ARCH}".encode(), b"-dlto", b"-rdc=true"]
    _check_nvrtc(nvrtc.nvrtcCompileProgram(prog, len(options), options), prog)
    (size,) = _check_nvrtc(nvrtc.nvrtcGetLTOIRSize(prog))
    caller = b" " * size
    _check_nvrtc(nvrtc.nvrtcGetLTOIR(prog, caller))
    pro = jit.compile_callback(prolog_times_filter, "prolog", "complex64", "complex64", CC).ltoir
    epi = jit.compile_callback(epilog_times_filter, "epilog", "complex64", "complex64", CC).ltoir
    handle = nvjitlink.create(3, [f"-arch={ARCH}", "-lto", "-ptx"])
    try:
        for name, data in (("caller", caller), ("prolog", pro), ("epilog", epi)):
            nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, data, len(data), name)
        nvjitlink.complete(handle)
        ptx = bytearray(nvjitlink.get_linked_ptx_size(handle))
        nvjitlink.get_linked_ptx(handle, ptx)
    finally:
        nvjitlink.destroy(handle)
    ptx = ptx.rstrip(b"\0").decode()
    assert calls(ptx) == []
    # both read info[i] at the same address: the invariant loads may be merged into one
    assert re.search(r"ld\.global\.nc\.v2\.f32", ptx)
    assert len(re.findall(r"^\s*st\.[\w.]+", ptx, flags=re.M)) == 1


@pytest.mark.parametrize("kind", ["prolog", "epilog"])
def test_checked_callback_is_inlined_too(kind):
    """check_bounds keeps the property: the guarded accesses, the header's loads and the record's compare-and-swap
    are inlined into the caller (no call per element), and user data still goes through the read-only cache."""
    fn = prolog_times_filter if kind == "prolog" else epilog_times_filter
    compiled = jit.compile_callback(fn, kind, "complex64", "complex64", CC, check_bounds=True)
    ptx = link_to_ptx(kind, "complex64", compiled.ltoir)
    assert calls(ptx) == [], ptx
    assert "atom.global.cas.b64" in ptx and re.search(r"ld\.global\.nc\.v2\.f32", ptx), ptx
    # an index is compared with the array's size (from the header) before the access: an unsigned comparison
    assert re.search(r"setp\.[lg][te]\.u64", ptx), ptx
