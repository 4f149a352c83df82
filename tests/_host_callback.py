"""Run a callback's GPU code on the host: the NVVM IR that mathpy turns into cuFFT's LTO-IR (the cuFFT-typed wrapper
and the user's function, exactly as compiled for the GPU) is retargeted to this CPU and executed with llvmlite's
MCJIT. This checks what the wrapper does with cuFFT's arguments (the complex element's fields, the offset, the user
data pointer) without a GPU; what only a GPU can check (cuFFT's link, the read-only cache) is in the gpu tests.

Only plain arithmetic runs this way: a callback that calls libdevice math or NVVM intrinsics cannot be linked here.
"""

import ctypes
import re

import numpy as np

from mathpy._numba_cuda_fixes import patch_numpy_for_numba_cuda
from mathpy.jit._spec import make_spec

_LLVM = {"float32": "float", "float64": "double", "complex64": "%struct.float2", "complex128": "%struct.double2"}
_STRUCTS = {"complex64": '%struct.float2 = type { float, float }\n',
            "complex128": '%struct.double2 = type { double, double }\n'}


def _driver(spec):
    """An LLVM module with ``drive``: it takes every argument by pointer (so ctypes needs no by-value struct ABI)
    and calls the wrapper with cuFFT's exact prototype."""
    element = _LLVM[spec.element_dtype].replace("%struct.", "%drv.")
    struct = _STRUCTS.get(spec.element_dtype, "").replace("%struct.", "%drv.")
    name = spec.mangled_name
    if spec.kind == "epilog":
        return (f"{struct}declare void @{name}(ptr, i64, {element}, ptr, ptr)\n"
                f"define void @drive(ptr %data, i64 %offset, ptr %value, ptr %info, ptr %result) {{\n"
                f"  %v = load {element}, ptr %value\n"
                f"  call void @{name}(ptr %data, i64 %offset, {element} %v, ptr %info, ptr null)\n"
                f"  ret void\n}}\n")
    return (f"{struct}declare {element} @{name}(ptr, i64, ptr, ptr)\n"
            f"define void @drive(ptr %data, i64 %offset, ptr %value, ptr %info, ptr %result) {{\n"
            f"  %v = call {element} @{name}(ptr %data, i64 %offset, ptr %info, ptr null)\n"
            f"  store {element} %v, ptr %result\n"
            f"  ret void\n}}\n")


def host_engine(text, *extra):
    """An MCJIT engine of this CPU running NVVM IR ``text`` (one or more ``; ModuleID`` modules) and the LLVM
    modules ``extra``, linked together."""
    import llvmlite.binding as llvm

    text = re.sub(r"target (triple|datalayout) = .*\n", "", text)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    modules = [llvm.parse_assembly("; ModuleID" + part) for part in text.split("; ModuleID")[1:]]
    modules += [llvm.parse_assembly(source) for source in extra]
    module = modules[0]
    for other in modules[1:]:
        module.link_in(other)
    machine = llvm.Target.from_default_triple().create_target_machine()
    module.triple, module.data_layout = llvm.get_process_triple(), str(machine.target_data)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine


class HostCallback:
    """``fn`` compiled by mathpy for the GPU (``kind``, ``element_dtype``, ``user_info_dtype``, ``check_bounds``),
    callable here:

    - epilog: ``cb(data, offset, value, user_info)`` stores into the NumPy array ``data``;
    - prolog: ``cb(data, offset, user_info)`` returns the loaded element.

    ``user_info`` is what cuFFT's ``caller_info`` points to: the user data, or for a checked build the int64 header
    of :mod:`mathpy.jit._bounds`.
    """

    def __init__(self, fn, kind, element_dtype, user_info_dtype=None, check_bounds=False):
        patch_numpy_for_numba_cuda()
        from mathpy.jit import _device

        self.spec = make_spec(kind, element_dtype, user_info_dtype, (9, 0), check_bounds)
        text = _device.build_llvm_ir(self.spec, fn, f"__mathpy_host_{kind}_{element_dtype}")
        self._engine = host_engine(text, _driver(self.spec))
        address = self._engine.get_function_address("drive")
        self._drive = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p)(address)
        self.element = np.dtype(element_dtype)

    def _pointer(self, array):
        return None if array is None else array.ctypes.data

    def __call__(self, data, offset, *rest):
        assert data.dtype == self.element and data.flags.c_contiguous and data.ndim == 1
        if self.spec.kind == "epilog":
            value, user_info = rest
            value = np.array(value, self.element)
            self._drive(data.ctypes.data, int(offset), value.ctypes.data, self._pointer(user_info), None)
            return None
        (user_info,) = rest
        result = np.zeros((), self.element)
        self._drive(data.ctypes.data, int(offset), None, self._pointer(user_info), result.ctypes.data)
        return result[()]
