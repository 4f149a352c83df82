"""notebooks/fft_callbacks.ipynb runs on the CPU: its code cells are executed in order in one namespace (no Jupyter
kernel needed), so the notebook's claims (each callback matches NumPy) are checked on every CI run."""

import json
import pathlib

import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "fft_callbacks.ipynb"


def test_fft_callbacks_notebook_runs(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert len(code) >= 5
    namespace = {"__name__": "__notebook__"}
    for index, cell in enumerate(code):
        source = "".join(cell["source"])
        exec(compile(source, f"{NOTEBOOK.name}[code cell {index}]", "exec"), namespace)
    assert namespace["smoothed"].shape == (64, 1024)
    markdown = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "benchmarks/" in markdown
