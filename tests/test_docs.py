"""The documentation site builds from the docstrings with warnings as errors, documents every public name, and every
code example in the guides runs (on the CPU) and says what it claims.

The build is the README's command (``python -m sphinx -W --keep-going -b html docs docs/_build/html``) into a
temporary folder, from scratch (``-E``) so that warnings of unchanged pages are not hidden by a cached build.
"""

import importlib.util
import linecache
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDES = DOCS / "guides"

def _needs_sphinx():
    for module in ("sphinx", "numpydoc", "myst_parser"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """(return code, warning lines, output folder) of one from-scratch -W build of the site."""
    _needs_sphinx()
    out = tmp_path_factory.mktemp("docs")
    warnings = out / "warnings.txt"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", "-d", str(out / "doctrees"),
         "-w", str(warnings), str(DOCS), str(out / "html")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in warnings.read_text().splitlines() if line.strip()] if warnings.exists() else []
    if result.returncode and not lines:  # a crash, not warnings: show it
        pytest.fail(f"sphinx failed without warnings:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.returncode, lines, out / "html"


def test_docs_build_has_no_warnings(build):
    """Every docstring is numpydoc the -W build accepts (no module is exempt any more)."""
    returncode, lines, html = build
    assert returncode == 0 and not lines, "sphinx warnings (fix the docstring or page they name):\n" + "\n".join(lines)
    assert (html / "index.html").exists()


def test_every_public_name_has_a_reference_page(build):
    """A name added to ``__all__`` must be added to docs/api/index.rst too."""
    import mathpy
    import mathpy.device
    import mathpy.fft

    _, _, html = build
    generated = {p.stem for p in (html / "api" / "generated").glob("*.html")}
    expected = {f"mathpy.{name}" for name in mathpy.__all__ if name not in ("__version__", "fft")}
    expected |= {f"mathpy.fft.{name}" for name in mathpy.fft.__all__ if name != "scipy_backend"}
    expected |= {f"mathpy.device.{name}" for name in mathpy.device.__all__}
    missing = sorted(expected - generated)
    assert not missing, f"public names without a page in docs/api/index.rst: {missing}"


def test_fft_reference_page_has_the_docstring(build):
    """The pages are made from the docstrings: help() and the site say the same."""
    import mathpy.fft

    _, _, html = build
    page = (html / "api" / "generated" / "mathpy.fft.FFT.html").read_text()
    first_line = mathpy.fft.FFT.__doc__.strip().splitlines()[0]
    words = re.findall(r"[A-Za-z]{4,}", first_line)[:4]
    assert words and all(word in page for word in words)


# --- the guides' code -------------------------------------------------------------------------------------------

def python_blocks(path):
    """The ```python blocks of a Markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def run_blocks(path, namespace):
    for index, block in enumerate(python_blocks(path)):
        name = f"{path}[python block {index}]"
        linecache.cache[name] = (len(block), None, block.splitlines(True), name)  # tracebacks show the line
        exec(compile(block, name, "exec"), namespace)


def test_every_guide_has_an_example():
    for page in GUIDES.glob("*.md"):
        assert python_blocks(page), f"{page.name} has no python example"


# every page of docs/ with Python code (the guides, distributed.md, ...): the code a reader copies runs as it is
PAGES = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "_build" not in p.parts and python_blocks(p))


@pytest.fixture
def job_of_one():
    """mathpy.distributed's pages call md.initialize(): here it returns a job of one process on a LocalTransport
    (no torch needed); the page's md.finalize() ends it (and this fixture does, should the page fail first)."""
    import mathpy.distributed as md

    md.finalize()
    md.initialize(transport=md.LocalTransport())
    yield
    md.finalize()


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, monkeypatch, tmp_path, request):
    """Each page's Python blocks run in order in one namespace, on the CPU (their asserts are the claims). Pages of
    mathpy.distributed run as a job of one process: their code is written for any number of ranks."""
    monkeypatch.chdir(tmp_path)
    path = DOCS / page
    if "mathpy.distributed" in path.read_text():
        request.getfixturevalue("job_of_one")
    run_blocks(path, {"__name__": f"__doc_{path.stem}__"})


def test_the_pages_with_code_include_every_guide_and_distributed():
    assert {"distributed.md", "guides/callbacks.md", "guides/differences.md"} <= set(PAGES)


# --- the differences page stays true -------------------------------------------------------------------------------

def _differences_checker():
    spec = importlib.util.spec_from_file_location("check_differences", GUIDES / "check_differences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_differences_page_and_checks_name_the_same_differences():
    page_ids = set(re.findall(r"^\| `([a-z0-9-]+)` \|", (GUIDES / "differences.md").read_text(), flags=re.M))
    checked = set(_differences_checker().CHECKS)
    assert page_ids == checked, (f"rows without a check: {sorted(page_ids - checked)}; "
                                 f"checks without a row: {sorted(checked - page_ids)}")


def test_every_documented_difference_still_exists():
    """A fix that removes a difference fails here: delete its row from differences.md and its check."""
    checker = _differences_checker()
    results = checker.run_all()
    assert len(results) == len(checker.CHECKS) >= 10
