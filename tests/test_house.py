"""The house rules of mathpy's source, checked on the source itself (``ast``, nothing imported):

- no import cycles among mathpy's modules, counting the imports inside functions (a lazy import hides a cycle from
  Python, not from a reader);
- no private name (``_name``) imported from another mathpy module: what a module offers the others is in its
  ``__all__``, and a name imported from a mathpy module must be listed there;
- third-party private names (``torch._C``, numba's internals) only where :data:`THIRD_PARTY_PRIVATE` lists them, each
  with the reason it is needed; a listed use that is gone fails too, so the list stays true;
- no function over :data:`MAX_FUNCTION_LINES` lines of body (docstring excluded) but those in
  :data:`LONG_FUNCTIONS`, which may not grow (the device code generators, and what is still to be split).
"""

import ast
import collections
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "mathpy"

#: (module, dotted name used): why mathpy needs a third-party private name there.
THIRD_PARTY_PRIVATE = {
    ("mathpy._threads", "numba.np.ufunc.parallel._launch_threads"):
        "starts numba's threading layer while the environment holds a short OpenMP spin count (GNU OpenMP reads it "
        "once, as it loads); the public way, a first parallel loop, compiles one and runs it",
    ("mathpy._torch_route", "torch._C"):
        "torch._C.TensorBase, every tensor type's C base: one isinstance per operand on the stateless hot path "
        "(torch.Tensor's own check runs Python code)",
    ("mathpy.torch._common", "torch._C"):
        "the ops' eager fast path: whether a dispatch mode or a functorch transform is active (one C call each), "
        "below-autograd dispatch, and autograd.Function's C apply without its Python wrapper",
    ("mathpy.torch._matmul", "torch._C"):
        "_get_cublas_allow_tf32: the flag torch.backends.cuda.matmul.allow_tf32 reads, in one C call that dynamo folds",
    ("mathpy.torch._matmul", "torch._check"):
        "the shape check of the op's fake function, in the form torch.compile's symbolic shapes can reason about",
}

#: Functions allowed over MAX_FUNCTION_LINES, with their current length: they may shrink, not grow.
MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS = {
    ("mathpy.device._fft", "_generate"): 375,  # a device code generator (see docs/architecture.md)
    ("mathpy.device._matmul", "_generate"): 280,  # a device code generator
}


def _modules():
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_package(name):
    return MODULES[name].name == "__init__.py"


def _absolute(module, node):
    """The absolute module name of an ``ImportFrom`` in ``module``."""
    if node.level == 0:
        return node.module
    parts = module.split(".") if _is_package(module) else module.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(module):
    """``(target module, imported name or None)`` for every import in ``module``, at any depth; a name that is a
    submodule counts as an import of that submodule."""
    found = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, None) if sub in MODULES else (target, alias.name))
    return found


def _all(module):
    """The names of ``module``'s ``__all__`` (literal strings, ``*other_all`` and ``from other import __all__``
    followed), or None when it has none."""
    for node in TREES[module].body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names = set()
            for element in node.value.elts:
                if isinstance(element, ast.Starred):
                    names |= _all_imported_as(module, element.value.id) or set()
                else:
                    names.add(ast.literal_eval(element))
            return names
    return _all_imported_as(module, "__all__")


def _all_imported_as(module, local):
    """The ``__all__`` of the module whose ``__all__`` ``module`` imports as ``local``."""
    for node in TREES[module].body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "__all__" and (alias.asname or alias.name) == local:
                    return _all(_absolute(module, node))
    return None


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def import_graph():
    """mathpy module -> the mathpy modules it imports (an import of a package's name is an edge to its
    ``__init__``; the parent packages Python imports first are not edges: every submodule would cycle with them)."""
    return {m: {t for t, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


def test_no_private_name_imported_from_another_module():
    private = [(m, t, name) for m in MODULES for t, name in _imports(m)
               if t.startswith("mathpy") and name and name.startswith("_") and not name.startswith("__")]
    assert private == []


def test_imported_names_are_in_the_modules_all():
    missing = []
    for m in MODULES:
        for target, name in _imports(m):
            if name is None or not target.startswith("mathpy") or name == "*" or name.startswith("__"):
                continue
            exported = _all(target)
            if exported is None or name not in exported:
                missing.append((m, target, name))
    assert missing == []


#: Names that hold these modules even when bound without an import statement (``torch = sys.modules.get("torch")``).
CONVENTIONAL_NAMES = {"torch": "torch", "numba": "numba", "cupy": "cupy", "cp": "cupy", "np": "numpy",
                      "numpy": "numpy", "scipy": "scipy", "pyfftw": "pyfftw"}


def _third_party_private():
    """``{(module, dotted name)}``: attribute chains and imports that reach a private name of another package."""
    found = set()
    for m in MODULES:
        roots = dict(CONVENTIONAL_NAMES)  # local name -> the third-party module it is bound to
        for node in ast.walk(TREES[m]):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if not alias.name.startswith("mathpy"):
                        local = alias.asname or alias.name.split(".")[0]  # "import a.b" binds a; "as x" binds a.b
                        roots[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and not node.module.startswith("mathpy"):
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    roots[alias.asname or alias.name] = dotted  # ("from a import b": b's attributes are a.b's)
                    if any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")):
                        found.add((m, dotted))
        for node in ast.walk(TREES[m]):
            if not isinstance(node, ast.Attribute):
                continue
            chain, inner = [], node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in roots:
                parts = [roots[inner.id]] + chain[::-1]
                for i, part in enumerate(parts[1:], 1):
                    if part.startswith("_") and not part.startswith("__"):
                        found.add((m, ".".join(parts[:i + 1])))
                        break
    return found


def test_third_party_private_names_are_listed_with_a_reason():
    found = _third_party_private()
    assert sorted(found - set(THIRD_PARTY_PRIVATE)) == [], "unlisted: add them with the reason, or avoid them"
    assert sorted(set(THIRD_PARTY_PRIVATE) - found) == [], "listed but no longer used: drop them from the list"


def _function_lengths():
    lengths = {}
    for m, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = node.lineno
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                        isinstance(first.value.value, str):
                    start = first.end_lineno
                key = (m, node.name)
                lengths[key] = max(lengths.get(key, 0), node.end_lineno - start)
    return lengths


def test_functions_are_short():
    lengths = _function_lengths()
    long = {key: n for key, n in lengths.items() if n > MAX_FUNCTION_LINES}
    grown = {key: (n, LONG_FUNCTIONS.get(key)) for key, n in long.items() if n > LONG_FUNCTIONS.get(key, 0)}
    assert grown == {}, f"over {MAX_FUNCTION_LINES} lines (split them by stage), or longer than listed"
    stale = {key: n for key, n in LONG_FUNCTIONS.items() if lengths.get(key, 0) <= MAX_FUNCTION_LINES}
    assert stale == {}, "short now: drop them from LONG_FUNCTIONS"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _is_package(m) and m != "mathpy.__main__"))
def test_modules_say_what_they_offer(module):
    """Every module names its interface (``__all__``), so that the checks above have something to check against."""
    assert _all(module) is not None


def test_counts():
    """The checks see the whole package (a broken walk would pass every check vacuously)."""
    assert len(MODULES) > 100 and sum(len(v) for v in import_graph().values()) > 300
    assert collections.Counter(_is_package(m) for m in MODULES)[True] >= 10


def test_import_mathpy_leaves_numpy_alone():
    """``import mathpy`` patches nothing (numba-cuda's NumPy 2.5 fix is applied where numba-cuda compiles)."""
    import subprocess
    import sys
    code = ("import numpy as np\n"
            "np.__dict__.pop('row_stack', None)\n"  # as NumPy 2.5, which removed it
            "np.__all__ = [name for name in np.__all__ if name != 'row_stack']\n"
            "import mathpy, mathpy.fft\n"
            "mathpy.matmul(mathpy.fft.fft(np.ones((4, 4))), np.ones((4, 4)))\n"
            "assert not hasattr(np, 'row_stack')\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)
