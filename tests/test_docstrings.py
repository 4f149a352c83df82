"""help() is the reference: every public function and class of mathpy, mathpy.fft, mathpy.jit and mathpy.device has a
numpydoc docstring with the sections a NumPy user expects (parameters, returns, raises, examples; CPU/GPU notes for
the host APIs), parsed by numpydoc itself, and the shared parameter text is filled in (no ``{placeholder}`` left).
The examples run as doctests (``--doctest-modules``); tests/test_docs.py builds the site from the same text."""

import inspect
import re

import pytest

import mathpy
import mathpy.device
import mathpy.fft
import mathpy.jit

docscrape = pytest.importorskip("numpydoc.docscrape", reason="numpydoc is not installed (pip install -e '.[test]')")

# mathpy/device/_matmul.py belongs to the device-GEMM work (issue 14): its numpydoc passes the -W build but has no
# Examples section on MatmulDescription and no text for matmul(epilogue=) yet
OWNED_ELSEWHERE = {"mathpy.device.matmul", "mathpy.device.MatmulDescription"}
ERRORS = set(mathpy._errors.__all__)
HOST_APIS = {"mathpy.matmul", "mathpy.Matmul", "mathpy.MatmulOptions", "mathpy.MatmulEpilog", "mathpy.fft.FFT",
             "mathpy.fft.Callback", "mathpy.ExecutionCPU", "mathpy.ExecutionCUDA", "mathpy.execution_space"} | \
    {f"mathpy.fft.{name}" for name in mathpy.fft.__all__ if name.endswith("fft") or name[:-1].endswith("fft")}


def public_objects():
    found = {}
    for module, names in ((mathpy, mathpy.__all__), (mathpy.fft, mathpy.fft.__all__),
                          (mathpy.jit, ("compile_callback", "CompiledCallback", "apply_prolog_cpu",
                                        "apply_epilog_cpu", "check_user_info")),
                          (mathpy.device, mathpy.device.__all__)):
        for name in names:
            qualified = f"{module.__name__}.{name}"
            if name in ("__version__", "fft", "scipy_backend") and module is not mathpy.device or \
                    qualified in OWNED_ELSEWHERE:
                continue
            found[qualified] = getattr(module, name)
    return found


OBJECTS = public_objects()


def sections(obj):
    doc = obj.__doc__ if not hasattr(obj, "acquire") else type(obj).__doc__  # the plan cache: its class's
    kind = docscrape.ClassDoc if inspect.isclass(obj) else docscrape.FunctionDoc
    if kind is docscrape.FunctionDoc and not callable(obj):
        kind = docscrape.NumpyDocString
        return kind(doc)
    return kind(obj if kind is not docscrape.NumpyDocString else doc, doc=doc)


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_numpydoc_sections(name):
    obj = OBJECTS[name]
    doc = sections(obj)
    assert doc["Summary"], f"{name}: no summary line"
    assert ">>>" in "\n".join(doc["Examples"]), f"{name}: no Examples section with a doctest"
    takes = inspect.isfunction(obj) or (inspect.isclass(obj) and not issubclass(obj, BaseException) and
                                        len(inspect.signature(obj).parameters) > 0 and
                                        not issubclass(obj, int) and not getattr(obj, "_is_protocol", False))
    if takes:
        documented = {p.name for p in doc["Parameters"]}
        documented = {part.strip() for names in documented for part in names.split(",")}
        wanted = set(inspect.signature(obj).parameters) - {"self"}
        assert wanted <= documented, f"{name}: parameters without text: {sorted(wanted - documented)}"
    if inspect.isfunction(obj) and name not in ("mathpy.fft.plan_cache_clear", "mathpy.fft.set_plan_cache_size",
                                                "mathpy.execution_space", "mathpy.plan_cache_clear"):
        assert doc["Returns"], f"{name}: no Returns section"
    if takes and name not in ("mathpy.fft.plan_cache_info", "mathpy.fft.plan_cache_clear", "mathpy.plan_cache_info",
                              "mathpy.plan_cache_clear", "mathpy.cuda_is_available",
                              "mathpy.get_execution_space", "mathpy.jit.CompiledCallback"):
        assert doc["Raises"], f"{name}: no Raises section"
    if name in HOST_APIS:
        notes = "\n".join(doc["Notes"])
        assert "CPU" in notes and ("GPU" in notes or "CUDA" in notes), f"{name}: Notes say nothing of CPU and GPU"


# every public module of mathpy: help() on any of them, their names and their classes' members shows no hole
PUBLIC_MODULES = ("mathpy", "mathpy.fft", "mathpy.jit", "mathpy.device", "mathpy.distributed", "mathpy.compat.nvmath",
                  "mathpy.compat.nvmath.fft", "mathpy.compat.nvmath.linalg", "mathpy.compat.nvmath.linalg.advanced",
                  "mathpy.compat.nvmath.memory", "mathpy.torch")


def _members(cls):
    """(name, object) of the public methods and properties ``cls`` has from mathpy's classes (inherited ones too)."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("mathpy"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and name != "__init__":
                continue
            value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            value = value.fget if isinstance(value, property) else value
            if callable(value):
                yield name, value


def public_docstrings():
    """``{qualified name: docstring}`` of every public module, name and class member of mathpy."""
    import importlib
    import importlib.util

    found = {}
    for module_name in PUBLIC_MODULES:
        if module_name == "mathpy.torch" and importlib.util.find_spec("torch") is None:
            continue
        module = importlib.import_module(module_name)
        found[module_name] = module.__doc__
        names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not getattr(obj, "__module__", "").startswith("mathpy"):
                continue  # submodules are listed themselves; NumPy dtypes and the like are not ours
            found[f"{module_name}.{name}"] = obj.__doc__
            if inspect.isclass(obj):
                for member, value in _members(obj):
                    found[f"{module_name}.{name}.{member}"] = value.__doc__
    return found


def test_no_public_docstring_has_an_unfilled_placeholder():
    """A ``{name}`` anywhere in a public docstring is shared text that was not filled in (``help(mathpy.Matmul)``
    printed ``{stream}`` under ``stream`` when the placeholder shared its line with more text)."""
    docs = public_docstrings()
    assert len(docs) > 300, f"the walk found only {len(docs)} docstrings"
    holes = {name: re.findall(r"\{\w+\}", doc) for name, doc in docs.items() if doc and re.search(r"\{\w+\}", doc)}
    assert not holes, f"unfilled placeholders: {holes}"


def test_a_placeholder_that_cannot_be_filled_fails_at_import():
    """render() refuses a shared name in braces that is not at the start of its line, and an unknown placeholder
    line, so that a hole cannot reach help()."""
    from mathpy._docstrings import render

    assert render("    {x} More.", {"x": "Text."}) == "    Text. More."
    with pytest.raises(ValueError, match=r"placeholder \{x\} is not at the start of its line"):
        render("    An {x}.", {"x": "array"})
    with pytest.raises(KeyError, match="no shared docstring text named 'y'"):
        render("    {y}", {"x": "array"})


def test_help_names_every_keyword_of_the_fft_functions():
    for name in mathpy.fft.__all__:
        obj = getattr(mathpy.fft, name)
        if inspect.isfunction(obj) and "prolog" in inspect.signature(obj).parameters:
            text = obj.__doc__
            for keyword in ("prolog", "epilog", "options", "execution", "stream", "out", "norm"):
                assert re.search(rf"^    {keyword} :", text, flags=re.M), f"{name}: {keyword} is not documented"


def test_matmul_help_documents_the_python_epilog_and_out():
    """The README leads with ``mathpy.matmul(a, b, epilog=f, epilog_inputs={"data": x})``: help() says what ``f``
    receives and returns, and shows it run; numpy.matmul's ``out=`` is documented with its errors."""
    doc = mathpy.matmul.__doc__
    assert "f(value, row, col, data)" in doc and "f(value, batch, row, col, data)" in doc
    assert 'epilog_inputs["data"]' in doc
    examples = "\n".join(sections(mathpy.matmul)["Examples"])
    assert re.search(r"def \w+\(value, row, col, data\)", examples) and "epilog=" in examples
    assert re.search(r"^    out : array", doc, flags=re.M) and "return arrays must be of ArrayType" in doc
