"""The notebooks in notebooks/ are stored executed (outputs and plots visible on GitHub, cell ids present: nbformat
4.5) and still run: each is executed here with a real Jupyter kernel (nbclient + ipykernel) on this tree's mathpy,
on the CPU, and must finish without an error and draw its plots inline.

Re-execute and store one after editing it (from notebooks/, so relative paths resolve as in Jupyter):
``cd notebooks && PYTHONPATH=.. jupyter execute --inplace fft_callbacks.ipynb``.
"""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# Checks a notebook's own claims after it ran: code run in its kernel, in its namespace.
AFTERWARDS = {
    "fft_callbacks.ipynb": "assert smoothed.shape == (64, 1024)\n"
                           "assert rows and all(float(row[header.index('mathpy')]) > 0 for row in rows)",
    "difference_imaging.ipynb": "assert error <= diffim.tolerance(config)\n"
                                "assert len(sfft.match(result.detections, scene.transients)[0]) == "
                                "len(scene.transients)",
}


def _images(notebook):
    return sum(any(kind.startswith("image/") for kind in output.get("data", {})) for cell in notebook.cells
               if cell.cell_type == "code" for output in cell.outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_with_ids_and_plots(path):
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    assert (notebook.nbformat, notebook.nbformat_minor) >= (4, 5), "cell ids need nbformat 4.5"
    nbformat.validate(notebook)
    assert all(cell.get("id") for cell in notebook.cells), "every cell needs an id"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code), "store the notebook executed (see module docstring)"
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"executed out of order or partly: {counts}"
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert _images(notebook) >= 1, "the stored notebook shows no plot"
    source = "".join(cell.source for cell in code)
    assert 'matplotlib.use("Agg")' not in source and "matplotlib.use('Agg')" not in source, "plots must be visible"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    # The kernel imports this tree's mathpy (whatever is installed), and finds no display: plots go inline.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(path, as_version=4)
    after = AFTERWARDS.get(path.name)
    if after:
        notebook.cells.append(nbformat.v4.new_code_cell(after))
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    assert _images(notebook) >= 1, "the notebook drew no inline plot"
