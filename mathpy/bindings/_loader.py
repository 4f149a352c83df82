"""Loading CUDA libraries with cuda-pathfinder and declaring their functions from tables.

A binding module writes::

    _lib = Library("cufft", status_names={0: "CUFFT_SUCCESS", ...}, extra="cu12 or cu13")
    _lib.declare({
        "cufftCreate": (STATUS, [POINTER(c_int)]),
        "cufftXtSetJITCallback": (STATUS, [...], "__cufftXtSetJITCallback_12_7"),   # alternative symbol names follow
        "cufftGetVersion": (STATUS, [POINTER(c_int)]),
    })
    _lib.cufftCreate(byref(handle))        # raises CUDALibraryError("CUFFT_... (n): cufft cufftCreate failed")

The library is loaded on first use, so importing a binding needs neither a GPU nor the library.
"""

import ctypes
import functools
import threading

from .._errors import CUDALibraryError, LibraryNotFoundError
from .._log import logger
from ._compiled import compiled_entry

__all__ = ["STATUS", "Library", "load_library"]

STATUS = object()  # marks a function whose int result is a library status to check


@functools.cache
def load_library(name, extra):
    """``ctypes.CDLL`` of the CUDA library ``name`` (cuda-pathfinder's name: "cufft", "cublasLt", "nvJitLink", ...)."""
    try:
        import cuda.pathfinder as pathfinder
        loaded = pathfinder.load_nvidia_dynamic_lib(name)
    except Exception as e:
        raise LibraryNotFoundError(f"the CUDA library {name!r} was not found ({e.__class__.__name__}). Install it "
                                   f"with: pip install -e '.[{extra}]' in mathpy's source tree "
                                   f"(or a CUDA toolkit)") from e
    logger.debug("loaded %s from %s", name, loaded.abs_path)
    return ctypes.CDLL(loaded.abs_path, mode=ctypes.RTLD_GLOBAL)


class Library:
    """Declared functions of one CUDA library, resolved on first use."""

    def __init__(self, name, status_names, extra, prerequisites=()):
        self._name, self._status_names, self._extra = name, status_names, extra
        self._prerequisites = prerequisites
        self._table, self._resolved, self._lock = {}, {}, threading.Lock()

    def declare(self, table):
        self._table.update(table)

    @property
    def cdll(self):
        for prerequisite in self._prerequisites:  # e.g. cuFFT dlopens nvJitLink by name when it plans callbacks
            load_library(prerequisite, self._extra)
        return load_library(self._name, self._extra)

    def has(self, function):
        """Whether the loaded library exports ``function`` (under its name or a declared alternative)."""
        try:
            getattr(self, function)
            return True
        except AttributeError:
            return False

    def __getattr__(self, function):
        try:
            return self._resolved[function]
        except KeyError:
            pass
        if function.startswith("_") or function not in self._table:
            raise AttributeError(f"{self._name} has no declared function {function!r}")
        restype, argtypes, *alternatives = self._table[function]
        cdll = self.cdll
        for symbol in (function, *alternatives):
            try:
                c_function = getattr(cdll, symbol)
                break
            except AttributeError:
                continue
        else:
            raise AttributeError(f"{self._name} exports none of {[function, *alternatives]}")
        c_function.argtypes = argtypes
        if restype is STATUS:
            c_function.restype = ctypes.c_int
            c_function.errcheck = functools.partial(_check, self._name, self._status_names, function)
        else:
            c_function.restype = restype
        with self._lock:
            self._resolved[function] = c_function
        return c_function

    def unchecked(self, function):
        """A callable for ``function`` that returns the raw int status without an errcheck: for hot paths, which test
        the status inline and raise with :meth:`check` (an errcheck is one more Python call per C call). It is the
        compiled entry of :mod:`._compiled` where there is one to use, else a separate ctypes function object (same
        symbol and argtypes)."""
        restype, argtypes, *alternatives = self._table[function]
        cdll = self.cdll
        for symbol in (function, *alternatives):  # the same symbol choice as the checked binding
            try:
                c_function = cdll[symbol]  # indexing makes a new function object; the checked one is untouched
                break
            except AttributeError:
                continue
        else:
            raise AttributeError(f"{self._name} exports none of {[function, *alternatives]}")
        c_function.argtypes, c_function.restype = argtypes, ctypes.c_int
        return compiled_entry(self._name, function, c_function) or c_function

    def check(self, function, status):
        """Raise the CUDALibraryError of a non-zero ``status`` returned by ``function`` (see :meth:`unchecked`)."""
        if status:
            raise CUDALibraryError(self._name, function, status, self.status_name(status))

    def status_name(self, status):
        return _status_name(self._name, self._status_names, status)


def _status_name(library, names, status):
    return names.get(status, f"{library.upper()}_STATUS_{status}")


def _check(library, names, function, status, c_function, arguments):
    if status != 0:
        raise CUDALibraryError(library, function, status, _status_name(library, names, status))
    return status
