"""Linking LTO-IR modules into one kernel with nvJitLink (cuda-bindings), on the host and without a GPU.

A kernel compiled once per configuration and a user's epilog compiled on its own (:mod:`._epilog_wrapper`) are
linked with link-time optimisation: the call of the epilog is inlined (the link checks that no call to it is left).
:func:`link` returns the linked PTX (kept for inspection) and the cubin, which the driver loads in milliseconds.

Two steps: LTO-IR -> PTX (NVVM's optimisation and code generation), then PTX -> cubin (ptxas). Options: the target
(``sm_90a`` for wgmma kernels), and ``-Xnvvm=-prec-div=0`` where float32 divisions may be ``div.full.f32``.
"""

import re

from .._errors import CUDALibraryError

__all__ = ["link", "entry_name", "linker_version", "LinkError"]


class LinkError(CUDALibraryError):
    """nvJitLink refused the modules (its error log is in the message)."""


def _check_log(nvjitlink, handle, what, error):
    size = nvjitlink.get_error_log_size(handle)
    log = bytearray(size)
    if size:
        nvjitlink.get_error_log(handle, log)
    return LinkError("nvJitLink", what, -1, "NVJITLINK_ERROR", f"{error}: {bytes(log).decode(errors='replace')}")


def _run(inputs, options, output):
    """Link ``inputs`` ((kind, bytes, name) with kind "ltoir" or "ptx"); returns the PTX text or the cubin bytes."""
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(len(options), list(options))
    try:
        try:
            for kind, data, name in inputs:
                input_type = nvjitlink.InputType.LTOIR if kind == "ltoir" else nvjitlink.InputType.PTX
                nvjitlink.add_data(handle, input_type, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            raise _check_log(nvjitlink, handle, "nvJitLinkComplete", e) from None
        if output == "ptx":
            buffer = bytearray(nvjitlink.get_linked_ptx_size(handle))
            nvjitlink.get_linked_ptx(handle, buffer)
            return bytes(buffer).rstrip(b"\0").decode()
        buffer = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, buffer)
        return bytes(buffer)
    finally:
        nvjitlink.destroy(handle)


def link(modules, arch, options=(), inlined=None):
    """``(cubin, ptx)`` of the LTO-IR ``modules`` (name -> bytes) linked for ``arch`` ("sm_90a", "sm_80", ...).
    ``inlined``: a function symbol whose calls the link must have inlined (LinkError if one is left)."""
    ptx = _run([("ltoir", data, name) for name, data in modules.items()], [f"-arch={arch}", "-lto", "-ptx",
                                                                          *options], "ptx")
    if inlined is not None and re.search(rf"\bcall\S*\s.*\b{re.escape(inlined)}\b", ptx):
        raise LinkError("nvJitLink", "link", -1, "NOT_INLINED", f"the call of {inlined} was not inlined")
    cubin = _run([("ptx", ptx.encode() + b"\0", "linked.ptx")], [f"-arch={arch}"], "cubin")
    return cubin, ptx


def entry_name(ptx):
    """The name of the (only) kernel of ``ptx``."""
    found = re.search(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if not found:
        raise LinkError("nvJitLink", "link", -1, "NO_ENTRY", "the linked PTX has no kernel entry")
    return found.group(1)


def linker_version():
    """(major, minor) of the nvJitLink that links (part of the keys of linked kernels on disk)."""
    from cuda.bindings import nvjitlink

    return tuple(nvjitlink.version())
