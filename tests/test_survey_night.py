"""examples/survey_night.py on the CPU: generated FITS pairs subtracted with reading and writing overlapped; the
written difference images are mathpy's SFFT subtraction of each pair (to float32 rounding), the catalogue finds the
injected transients. Runs only where astropy is installed (the ``astro`` extra); the GPU path (streams, pinned
buffers) runs on the GPU machine (``test_survey_night_on_the_gpu``)."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))


def _example():
    spec = importlib.util.spec_from_file_location("survey_night", ROOT / "examples" / "survey_night.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _night(tmp_path, extra=()):
    pytest.importorskip("astropy")
    example = _example()
    truth = example.generate(str(tmp_path), 3, 256, scenes=2)
    args = ["--folder", str(tmp_path), "--kernel-half-width", "3", "--kernel-order", "1", "--depth", "2", *extra]
    assert example.main(args) == 0
    return example, truth


def _check(tmp_path, truth, exact=True):
    import csv

    from astropy.io import fits

    import diffim
    import sfft_mathpy
    from diffim import sfft as detection

    out = tmp_path / "out"
    rows = list(csv.DictReader(open(out / "detections.csv")))
    params = sfft_mathpy.Params(256, 256, 3, 3, 1, 0, True)
    for name, transients in truth.items():
        sci, ref = (fits.getdata(tmp_path / f"{name}_{s}.fits").astype(np.float32) for s in ("sci", "ref"))
        sky = [fits.getheader(tmp_path / f"{name}_{s}.fits") for s in ("sci", "ref")]
        sci, ref = sci - sky[0]["SKY"], ref - sky[1]["SKY"]          # float32, as the night computes them
        from scipy import ndimage
        fitted = (ndimage.maximum_filter(sci > 3 * sky[0]["SKYSIG"], size=5)
                  & ndimage.maximum_filter(ref > 3 * sky[1]["SKYSIG"], size=5))
        _, expected, _ = sfft_mathpy.GSS(ref, sci, np.where(fitted, ref, 0.0), np.where(fitted, sci, 0.0), params)
        written = fits.getdata(out / f"{name}_diff.fits")
        assert written.dtype == np.dtype(">f4") and written.shape == (256, 256)
        if exact:  # the same code on the CPU
            np.testing.assert_array_equal(written, expected.astype(np.float32))
        else:      # the GPU's float64 FFTs differ from the CPU's by rounding, far below the float32 output's
            bound = np.finfo(np.float32).eps * np.abs(expected) + 1e-9 * np.abs(sci).max()
            assert (np.abs(written - expected) <= bound).all()
        found = np.array([(int(r["row"]), int(r["column"])) for r in rows if r["pair"] == name])
        recovered, _ = detection.match(found, transients)
        assert len(recovered) >= len(transients) - 1, (name, len(recovered), len(transients))
    assert diffim is not None


def test_survey_night_on_the_cpu(tmp_path, capsys):
    _, truth = _night(tmp_path, ["--cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert any("compute only:" in line for line in lines)
    assert lines[-1].startswith("night: 3 pairs") and "night / compute only = " in lines[-1]
    _check(tmp_path, truth)


@pytest.mark.gpu
def test_survey_night_on_the_gpu(tmp_path):
    pytest.importorskip("cupy")
    _, truth = _night(tmp_path)
    _check(tmp_path, truth, exact=False)
