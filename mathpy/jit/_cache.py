"""Compile cache for callbacks: a content key, an in-memory table and an on-disk store.

Numba-free on purpose: a warm compile in a new process must not pay for importing numba-cuda.

The key hashes everything the compiled code depends on:

* the function: bytecode, constants (recursively through nested code objects), names, argument count, defaults,
  the *values* of its closure cells and of the globals it reads (NumPy scalars and arrays by dtype, shape and
  bytes; modules by name plus the values of the attributes the code names; jitted or plain helper functions
  recursively), so that changing a captured constant recompiles;
* the callback spec (kind, element dtype, user-data dtype, compute capability, and check_bounds when it is on);
* the toolchain: Python's bytecode tag, numba, numba-cuda and llvmlite installs (path, size and mtime of their
  package files, found without importing them), mathpy.jit's own sources, and CUDA_HOME / CUDA_PATH. The NVVM that
  compiled an entry is recorded in it (path, size, mtime, version) and checked with one ``stat`` on load.

A value the fingerprint cannot represent faithfully (an arbitrary object) makes the function uncacheable on disk:
it is then compiled once per process (the in-memory table keys it by identity).

Hashing all that costs about 0.1 ms, too much for a callback passed to every call of a stateless FFT. So
:func:`function_key` remembers, per function object, the key together with a :class:`Snapshot` of what it was computed
from: the function's code, defaults and closure cells, and every global (and module attribute) it reads, by identity,
plus the contents of NumPy arrays among them. While the snapshot holds (a few dict lookups and ``is`` tests), the key
is reused; when a global is rebound, a cell or an array changes, the key is computed again, so a changed global
still means a new key (numba freezes globals at compile time: a new compile and a new plan).

Disk entries live in ``$MATHPY_CACHE_DIR`` or ``~/.cache/mathpy/jit``; they are written to a temporary file and
renamed into place (atomic), and an unreadable or corrupted entry counts as a miss.
"""

import hashlib
import importlib.util
import json
import os
import struct
import sys
import tempfile
import types as pytypes

import numpy as np

from .. import _memo

__all__ = ["Uncacheable", "Snapshot", "callback_key", "function_key", "cache_dir", "load_entry", "store_entry",
           "toolchain_id", "nvvm_file_id", "code_names"]

_FORMAT = b"MPJIT1\n"
_SKIP_GLOBALS = frozenset(("__builtins__",))


class Uncacheable(Exception):
    """The function depends on a value whose content we cannot fingerprint."""


def cache_dir():
    path = os.environ.get("MATHPY_CACHE_DIR")
    if path:
        return path
    return os.path.join(os.path.expanduser("~"), ".cache", "mathpy", "jit")


# --- toolchain identity ---------------------------------------------------------------------------------------------

_toolchain = None


def _stat_id(path):
    try:
        st = os.stat(path)
    except OSError:
        return (path, None)
    return (path, st.st_size, st.st_mtime_ns)


def _package_id(name, files):
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
    if origin is None:
        return (name, None)
    root = os.path.dirname(origin)
    return (name,) + tuple(_stat_id(os.path.join(root, f)) for f in files)


def toolchain_id():
    """A string that changes when numba, numba-cuda, llvmlite, mathpy.jit or Python change (cheap: stats only)."""
    global _toolchain
    if _toolchain is None:
        here = os.path.dirname(os.path.abspath(__file__))
        own = tuple(_stat_id(os.path.join(here, f)) for f in sorted(os.listdir(here)) if f.endswith(".py"))
        parts = (
            _FORMAT.decode().strip(), sys.implementation.cache_tag,
            _package_id("numba", ("__init__.py", "_version.py")),
            _package_id("numba_cuda", ("__init__.py", "VERSION")),
            _package_id("llvmlite", ("__init__.py", "_version.py")),
            own, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
        )
        _toolchain = repr(parts)
    return _toolchain


# --- function fingerprint -------------------------------------------------------------------------------------------

def _update_code(h, code, seen):
    h.update(b"code")
    h.update(code.co_code)
    h.update(repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                   code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _update_code(h, const, seen)
        else:
            _update_value(h, const, seen)


def code_names(code):
    """The global and attribute names ``code`` reads, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= code_names(const)
    return names


_MISSING = object()


class Snapshot:
    """What a function's key was computed from, checked cheaply: ``valid()`` is True while the function's code,
    defaults, closure cells, the globals and module attributes it reads are the same objects as when the key was made,
    and NumPy arrays among them hold the same bytes."""

    __slots__ = ("_checks",)

    def __init__(self):
        self._checks = []

    def add(self, check, *args):
        self._checks.append((check, args))

    def valid(self):
        for check, args in self._checks:
            if not check(*args):
                return False
        return True


def _same_code(fn, code, defaults, kwdefaults):
    return fn.__code__ is code and fn.__defaults__ is defaults and fn.__kwdefaults__ is kwdefaults


def _same_cell(cell, value):
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return value is _MISSING


def _same_global(namespace, name, value):
    return namespace.get(name, _MISSING) is value


def _same_attribute(module, name, value):
    return getattr(module, name, _MISSING) is value


def _same_array(array, copy):
    return array.dtype == copy.dtype and array.shape == copy.shape and np.array_equal(array, copy)


def _watch(snapshot, value):
    """Arrays can change in place under the same identity: compare their contents too."""
    if snapshot is not None and isinstance(value, np.ndarray):
        snapshot.add(_same_array, value, value.copy())


def _update_function(h, fn, seen, snapshot=None):
    if id(fn) in seen:
        h.update(b"recursive")
        return
    seen.add(id(fn))
    code = fn.__code__
    if snapshot is not None:
        snapshot.add(_same_code, fn, code, fn.__defaults__, fn.__kwdefaults__)
    names = code_names(code)
    _update_code(h, code, seen)
    _update_value(h, fn.__defaults__, seen, snapshot=snapshot)
    _update_value(h, fn.__kwdefaults__, seen, snapshot=snapshot)
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # empty cell
            h.update(b"empty-cell")
            if snapshot is not None:
                snapshot.add(_same_cell, cell, _MISSING)
            continue
        if snapshot is not None:
            snapshot.add(_same_cell, cell, value)
        _update_value(h, value, seen, names=names, snapshot=snapshot)
    fglobals = fn.__globals__
    for name in sorted(names):
        if name in _SKIP_GLOBALS:
            continue
        value = fglobals.get(name, _MISSING)
        if snapshot is not None:  # a name read as a builtin or an attribute may become a global later
            snapshot.add(_same_global, fglobals, name, value)
        if value is not _MISSING:
            h.update(b"global:" + name.encode())
            _update_value(h, value, seen, names=names, snapshot=snapshot)


def _update_value(h, value, seen, names=(), snapshot=None):
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.generic):
        h.update(f"np:{value.dtype.str}:".encode())
        h.update(value.tobytes())
    elif isinstance(value, np.ndarray):
        h.update(f"nd:{value.dtype.str}:{value.shape}:".encode())
        h.update(np.ascontiguousarray(value).tobytes())
        _watch(snapshot, value)
    elif isinstance(value, np.dtype):
        h.update(f"dtype:{value.str};".encode())
    elif isinstance(value, (tuple, list, frozenset)):
        h.update(f"{type(value).__name__}[{len(value)}]".encode())
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        for item in items:
            _update_value(h, item, seen, snapshot=snapshot)
        if snapshot is not None and isinstance(value, list):
            snapshot.add(_same_list, value, list(value))
    elif isinstance(value, pytypes.ModuleType):
        h.update(f"module:{value.__name__};".encode())
        # Attributes of the module the code names (e.g. ``config.SCALE``), when they are plain values.
        for name in sorted(names):
            attr = getattr(value, name, None)
            if attr is None or isinstance(attr, (pytypes.ModuleType, type, pytypes.BuiltinFunctionType)):
                continue
            if isinstance(attr, (bool, int, float, complex, str, bytes, np.generic, np.ndarray)):
                h.update(f"attr:{name}".encode())
                _update_value(h, attr, seen, snapshot=snapshot)
                if snapshot is not None:
                    snapshot.add(_same_attribute, value, name, attr)
    elif isinstance(value, pytypes.FunctionType):
        h.update(f"function:{value.__module__}.{value.__qualname__};".encode())
        _update_function(h, value, seen, snapshot)
    elif hasattr(value, "py_func") and isinstance(value.py_func, pytypes.FunctionType):  # numba dispatcher
        h.update(f"dispatcher:{type(value).__module__}.{type(value).__qualname__};".encode())
        _update_function(h, value.py_func, seen, snapshot)
    elif isinstance(value, (type, pytypes.BuiltinFunctionType)):
        h.update(f"named:{getattr(value, '__module__', '')}.{value.__qualname__};".encode())
    elif type(value).__module__.startswith("numba") or type(value).__name__ == "_Intrinsic":
        # numba functions and types (intrinsics, numba.types.float32...) are defined by their import path
        h.update(f"numba:{type(value).__qualname__}:{value!r};".encode())
    else:
        raise Uncacheable(f"cannot fingerprint a {type(value).__module__}.{type(value).__qualname__}")


def _same_list(value, copy):
    return len(value) == len(copy) and all(a is b for a, b in zip(value, copy))


def callback_key(fn, spec, snapshot=None):
    """Hex key for (function content, spec, toolchain); raises Uncacheable. With ``snapshot`` (a :class:`Snapshot`),
    records what the key was computed from."""
    h = hashlib.sha256()
    h.update(toolchain_id().encode())
    h.update(repr((spec.kind, spec.element_dtype, spec.user_info_dtype, tuple(spec.compute_capability))).encode())
    if getattr(spec, "check_bounds", False):  # a checked build is other code (unchecked keys stay as they were)
        h.update(b"check_bounds")
    _update_function(h, fn, set(), snapshot)
    return h.hexdigest()


_keys = _memo.Memo("function-keys", group="jit", max_entries=1024)  # (id(fn), spec) -> (fn, key, Snapshot)


def function_key(fn, spec):
    """``(key, snapshot)``: :func:`callback_key` of ``fn`` for ``spec`` (None when the function cannot be
    fingerprinted) and the :class:`Snapshot` that keeps it valid, remembered per function object and recomputed only
    when the snapshot no longer holds. ``snapshot`` is None for an uncacheable function (its key is its identity)."""
    found = _keys.get((id(fn), spec))
    if found is not None and found[0] is fn and (found[2] is None or found[2].valid()):
        return found[1], found[2]
    snapshot = Snapshot()
    try:
        key = callback_key(fn, spec, snapshot)
    except Uncacheable:
        key, snapshot = None, None
    _keys.put((id(fn), spec), (fn, key, snapshot))
    return key, snapshot


# --- disk store -----------------------------------------------------------------------------------------------------

def _entry_path(key):
    return os.path.join(cache_dir(), key[:2], key + ".ltoir")


def load_entry(key):
    """(header dict, ltoir bytes) or None on a miss, a corrupted entry, or an NVVM that changed since."""
    try:
        with open(_entry_path(key), "rb") as f:
            blob = f.read()
    except OSError:
        return None
    try:
        if not blob.startswith(_FORMAT):
            return None
        start = len(_FORMAT)
        (size,) = struct.unpack_from("<I", blob, start)
        header = json.loads(blob[start + 4:start + 4 + size])
        ltoir = blob[start + 4 + size:]
        if len(ltoir) != header["ltoir_size"] or hashlib.sha256(ltoir).hexdigest() != header["ltoir_sha256"]:
            return None
        nvvm = header.get("nvvm_file")
        if nvvm is not None and list(_stat_id(nvvm[0])) != nvvm:
            return None
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return header, ltoir


def store_entry(key, header, ltoir):
    """Write atomically; failures (read-only home, full disk) are ignored: the cache is an optimisation."""
    header = dict(header, ltoir_size=len(ltoir), ltoir_sha256=hashlib.sha256(ltoir).hexdigest())
    payload = json.dumps(header, sort_keys=True).encode()
    path = _entry_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".ltoir")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_FORMAT + struct.pack("<I", len(payload)) + payload + ltoir)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return False
    return True


def nvvm_file_id(path):
    return list(_stat_id(path)) if path else None
