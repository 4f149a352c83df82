"""One way to accept options: ``None``, an options dataclass instance, or a ``dict`` of its fields."""

import dataclasses

__all__ = ["check_or_create_options"]


_DEFAULTS = {}


def check_or_create_options(cls, value, name):
    """Return ``value`` as an instance of the dataclass ``cls``.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Opts:
    ...     blocking: bool = False
    >>> check_or_create_options(Opts, {"blocking": True}, "options")
    Opts(blocking=True)
    >>> check_or_create_options(Opts, {"bad": 1}, "options")
    Traceback (most recent call last):
    ...
    ValueError: options: unknown field 'bad'; allowed fields are ['blocking']
    """
    if value is None:
        found = _DEFAULTS.get(cls)
        if found is None:
            found = cls()
            if cls.__dataclass_params__.frozen:  # immutable: one default instance serves every call
                _DEFAULTS[cls] = found
        return found
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise ValueError(f"{name}: unknown field {unknown[0]!r}; allowed fields are {allowed}")
        return cls(**value)
    raise TypeError(f"{name} must be None, a dict or a {cls.__name__}, not {type(value).__name__}")
