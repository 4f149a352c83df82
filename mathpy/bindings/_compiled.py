"""Compiled entry points for the hot calls, from NVIDIA's Cython bindings (``nvmath.bindings`` of nvmath-python) when
they are installed.

A ctypes call converts each argument in Python: ``cublasLtMatmul`` (16 arguments) costs 9.4 us of host time through
ctypes and 7.1 us through nvmath's compiled binding on an H200 (``benchmarks/probe_cublaslt_binding.py``), the rest
being cuBLASLt's own work. mathpy stays pure Python: it uses a compiled entry only when nvmath-python is installed
and its binding resolved the very function that mathpy loaded (the same address: a handle made by one copy of a
library must never reach another copy), and ``MATHPY_COMPILED_BINDINGS`` is not ``0``. Otherwise the ctypes
function stays. Either way the hot path gets a callable that returns the C status (0: success), as ctypes' does.
"""

import ctypes
import functools
import importlib
import importlib.util
import os

from .._log import logger

__all__ = ["compiled_entry", "ENTRIES", "enabled"]

#: (library, C function) -> (nvmath.bindings module, its Python function, the exception it raises with ``.status``):
#: the hot calls that have a compiled entry.
ENTRIES = {
    ("cublasLt", "cublasLtMatmul"): ("cublasLt", "matmul", "cuBLASLtError"),
    ("cufft", "cufftXtExec"): ("cufft", "xt_exec", "cuFFTError"),
    ("cufft", "cufftSetStream"): ("cufft", "set_stream", "cuFFTError"),
    ("cufft", "cufftSetWorkArea"): ("cufft", "set_work_area", "cuFFTError"),
}


def enabled():
    """Whether compiled entries may be used: nvmath-python is installed and ``MATHPY_COMPILED_BINDINGS`` is not 0
    (nothing is imported to find out)."""
    return os.environ.get("MATHPY_COMPILED_BINDINGS", "1").strip() != "0" and _installed()


@functools.cache
def _installed():
    try:
        return importlib.util.find_spec("nvmath") is not None
    except (ImportError, ValueError):
        return False


def compiled_entry(library, function, c_function, importer=importlib.import_module):
    """A compiled callable for ``function`` of ``library`` returning its int status, or None when there is none to
    use (see the module docstring). ``c_function``: the ctypes function mathpy resolved, whose address the compiled
    binding's must equal. ``importer``: the test seam for ``importlib.import_module``."""
    names = ENTRIES.get((library, function))
    if names is None or not enabled():
        return None
    module_name, python_name, error_name = names
    try:
        module = importer(f"nvmath.bindings.{module_name}")
        # nvmath's loader module and its introspection helper are private (a third-party private name, used because
        # no public call tells which address it resolved); a missing one means ctypes, not an error
        internal = importer(f"nvmath.bindings._internal.{module_name}")
        pointer = internal._inspect_function_pointer(f"__{function}")
        entry, error = getattr(module, python_name), getattr(module, error_name)
    except Exception as e:  # not importable here, no driver, an older nvmath: ctypes it is
        logger.debug("no compiled entry for %s (%s: %s); ctypes is used", function, type(e).__name__, e)
        return None
    mine = ctypes.cast(c_function, ctypes.c_void_p).value
    if not pointer or pointer != mine:
        logger.debug("nvmath.bindings resolved %s at %#x, mathpy at %#x (another copy of %s): ctypes is used",
                     function, pointer or 0, mine or 0, library)
        return None
    logger.debug("%s: nvmath.bindings' compiled entry (the same function as mathpy's)", function)
    return _status_returning(entry, error)


def _status_returning(entry, error):
    """``entry`` (which raises ``error``, carrying ``.status``, on failure) as a callable returning the status."""
    def call(*args):
        try:
            entry(*args)
        except error as e:
            return getattr(e, "status", -1) or -1
        return 0

    call.compiled = entry
    return call
