"""What the nvmath adapters share: nvmath's way of accepting options, and cheap facts about an operand."""

import logging

from ..._operands import package_of, wrap_operand

__all__ = ["check_or_create_options", "dtype_name", "operand_package", "object_logger"]


def check_or_create_options(cls, value, what, *, keep_none=False):
    """nvmath's rule: None -> ``cls()`` (or None with ``keep_none``), a dict -> ``cls(**value)`` (so an unknown key is
    the constructor's TypeError), an instance as it is, anything else TypeError."""
    if value is None:
        return None if keep_none else cls()
    if isinstance(value, dict):
        value = cls(**value)
    if not isinstance(value, cls):
        raise TypeError(f"The {what} must be provided as an object of type {cls.__name__} or as a dict with valid "
                        f"{what}. The provided object is {value!r}.")
    return value


def dtype_name(operand):
    """The operand's dtype name as nvmath spells it ("complex64", "float16", torch's "complex32"), without wrapping
    NumPy, CuPy and torch arrays (this runs on every stateless call)."""
    dtype = getattr(operand, "dtype", None)
    if dtype is not None:
        name = getattr(dtype, "name", None)  # NumPy / CuPy dtypes
        if isinstance(name, str):
            return name
        text = str(dtype)
        if text.startswith("torch."):
            return text[6:]
    return wrap_operand(operand).dtype.name


def operand_package(operand):
    """"numpy", "cupy", "torch" (or the package mathpy wraps a foreign array into)."""
    return package_of(operand) or wrap_operand(operand).package


def object_logger(logger):
    """nvmath's per-object logger: the one given, else the root logger."""
    return logger if logger is not None else logging.getLogger()
