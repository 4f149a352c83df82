"""Docstrings written once: shared parameter text filled into numpydoc docstrings (nvmath-python's habit), so that
``help()`` and the API reference say the same thing for every function that takes ``execution=`` or ``stream=``.

A docstring line that starts with ``{name}`` is replaced by the shared text ``name``, every line of it indented as the
placeholder was, and the rest of the line (if any) follows the text's last line; other braces are left alone. A
placeholder without text, and a shared name in braces anywhere else in a line, are errors when the module is imported:
no ``help()`` shows a hole.

>>> @fill({"x": "An array.\\nAny package's."})
... def f(x):
...     '''Do nothing.
...
...     Parameters
...     ----------
...     x : array
...         {x}
...     '''
>>> print(f.__doc__.splitlines()[5:7])
['        An array.', "        Any package's."]
>>> render("    {x} More.", {"x": "An array."})
'    An array. More.'
>>> render("    An {x}.", {"x": "array"})
Traceback (most recent call last):
...
ValueError: docstring: placeholder {x} is not at the start of its line: 'An {x}.'
"""

import re

__all__ = ["fill", "COMMON", "render"]

_PLACEHOLDER = re.compile(r"^(\s*)\{(\w+)\}(.*?)\s*$")
_ANY = re.compile(r"\{(\w+)\}")

#: Text shared by every host API.
COMMON = {
    "execution": """\
Where the work runs: ``"cpu"``, ``"cuda"``, an :class:`~mathpy.ExecutionCPU` /
:class:`~mathpy.ExecutionCUDA` (or a dict of one's fields with ``"name"``). Default: where the operands
live (host memory on the CPU, device memory on its GPU), unless an :func:`~mathpy.execution_space` block
sets another. Data moves as needed and results come back where the operands live.""",
    "stream": """\
The CUDA stream the GPU work is ordered on: an ``int`` handle, a CuPy or torch stream, or any object
with ``__cuda_stream__``. Default: the operands' package's current stream at the time of the call (as in
torch, CuPy and nvmath-python); a capturing stream records the work in its CUDA graph. Ignored on the CPU.""",
    "no_device": """\
:class:`~mathpy.NoDeviceError`
    GPU execution was asked for on a machine without a usable GPU.""",
}


def fill(shared):
    """A decorator that fills ``{name}`` placeholder lines of the object's docstring from ``shared`` (a dict)."""
    def decorate(obj):
        obj.__doc__ = render(obj.__doc__, shared, getattr(obj, "__qualname__", repr(obj)))
        return obj
    return decorate


def render(doc, shared, where="docstring"):
    """``doc`` with its placeholder lines replaced (see the module docstring)."""
    lines = []
    for line in (doc or "").splitlines():
        match = _PLACEHOLDER.match(line)
        if match is None or match.group(2) not in shared and match.group(3):  # not a placeholder line
            stray = [name for name in _ANY.findall(line) if name in shared]
            if stray:
                raise ValueError(f"{where}: placeholder {{{stray[0]}}} is not at the start of its line: "
                                 f"{line.strip()!r}")
            lines.append(line)
            continue
        indent, name, rest = match.groups()
        if name not in shared:
            raise KeyError(f"{where}: no shared docstring text named {name!r}")
        block = [indent + text if text else "" for text in shared[name].splitlines()]
        if rest:
            block[-1] += rest
        lines.extend(block)
    return "\n".join(lines) + ("\n" if (doc or "").endswith("\n") else "")
