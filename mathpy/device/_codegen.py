"""Turning generated Python source into numba-cuda device functions (or simulator functions).

Every device function of a description is written out as straight-line Python source with all register indices as
literal constants, then compiled by ``numba.cuda.jit(device=True)``. Straight-line code keeps each thread's values in
scalar variables, which NVVM keeps in registers; a loop over a local array indexed at run time would put it in local
memory instead. Constants are passed in as typed NumPy scalars (``np.float32(...)``) so numba does not promote the
arithmetic to float64.
"""

import itertools
import linecache
import types

import numpy as np

from .._numba_cuda_fixes import patch_numpy_for_numba_cuda

__all__ = ["simulator_enabled", "compile_device_functions", "ConstantPool", "DescriptionNamespace"]

_counter = itertools.count()


def simulator_enabled():
    """True when numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1 was set before numba was imported)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


class ConstantPool:
    """Named, typed constants for generated source: ``pool.add(0.7071)`` returns a global name bound to
    ``np.float32(0.7071)`` (or whichever real type the pool was made for)."""

    def __init__(self, real_type):
        self.real_type = real_type
        self.values = {}
        self._names = {}

    def add(self, value):
        value = self.real_type(value)
        key = value.tobytes()
        if key not in self._names:
            name = f"_K{len(self._names)}"
            self._names[key] = name
            self.values[name] = value
        return self._names[key]


def compile_device_functions(source, names, namespace, tag):
    """Execute *source* with *namespace* as globals and wrap each function in *names* as a numba-cuda device function
    (always inlined on the GPU so register arrays passed in stay in registers). Returns {name: device function}."""
    patch_numpy_for_numba_cuda()
    from numba import cuda

    filename = f"<mathpy.device {tag} #{next(_counter)}>"
    # Register the source so tracebacks and numba's error messages can show the generated lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    glb = dict(namespace)
    glb.setdefault("np", np)
    glb.setdefault("cuda", cuda)
    exec(compile(source, filename, "exec"), glb)
    out = {}
    for name in names:
        fn = glb[name]
        if simulator_enabled():
            out[name] = cuda.jit(device=True)(fn)
        else:
            out[name] = cuda.jit(device=True, forceinline=True)(fn)
        glb[name] = out[name]  # later functions in the same source call the device version
    return out


class DescriptionNamespace(types.ModuleType):
    """Base class of the description objects.

    numba types a module object as ``types.Module`` and resolves ``module.attr`` at compile time, so making the
    description a ``ModuleType`` lets a kernel call ``FFT.execute(...)`` on a description held in a global variable.
    Plain integer attributes are read as run-time int64 values inside kernels; array shapes need compile-time
    constants, so copy ``FFT.storage_size`` into a global first (see the examples).

    A subclass names its device functions in ``_function_names`` and writes them in ``_generate_functions()``; they
    are generated together on the first access to any of them. They stay out of the instance ``__dict__`` so that
    every access goes through ``_check_function`` (a description may refuse some of its functions).
    """

    _function_names = ()

    def __repr__(self):
        return f"<{type(self).__name__} {self._describe()}>"

    def _describe(self):  # pragma: no cover - overridden
        return ""

    def _generate_functions(self):  # pragma: no cover - overridden
        """{name: device function} for every name in ``_function_names``."""
        raise NotImplementedError

    def _check_function(self, name):
        """Raise a ValueError when device function ``name`` cannot be used with this description."""

    def __getattr__(self, name):  # called only for names that normal lookup does not find
        if name not in self._function_names:
            raise AttributeError(name)
        self._check_function(name)
        functions = self.__dict__.get("_functions")
        if functions is None:
            functions = self.__dict__["_functions"] = self._generate_functions()
        return functions[name]
