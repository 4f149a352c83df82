"""A survey night: pairs of FITS images from a folder, each subtracted with mathpy's SFFT backend (the Roman supernova
pipeline's configuration: SCI - K (x) REF, a 19 x 19 kernel varying as a polynomial of order 2, a flat background),
the difference images and a catalogue of detections written to another folder, with a progress bar and the night's
pairs per second. Reading, transfers and compute overlap (``examples/survey/night.py``: reader and writer threads,
pinned host buffers, a copy stream and a compute stream), and the script prints the compute-only rate (pairs already
on the device) next to the night's, and their ratio.

A pair is ``NAME_sci.fits`` and ``NAME_ref.fits`` (2-D float32 or float64 primary images with SKY and SKYSIG header
cards: sky level and noise in counts); the results are ``NAME_diff.fits`` (float32) and ``detections.csv`` (pair,
row, column, signal-to-noise, difference).

Run:  python examples/survey_night.py --small        (CPU: 8 generated pairs of 256^2 in a temporary folder, a
                                                      9 x 9 kernel)
      python examples/survey_night.py --generate 100 --size 4096 --folder /tmp/night   (write the pairs, then run)
      python examples/survey_night.py --folder DIR [--out DIR]
Needs astropy (``pip install -e ".[astro]"``). The exit status is 1 when a pair's solve failed its residual check.
"""

import argparse
import csv
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # diffim, sfft_mathpy and survey next to this file
try:
    import mathpy  # noqa: F401
except ImportError:  # running from a source checkout without installing it
    sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import diffim  # noqa: E402
import sfft_mathpy  # noqa: E402
from survey import fits_io  # noqa: E402
from survey.night import Night, Pair  # noqa: E402


def generate(folder, count, size, scenes=4, seed=0):
    """Write ``count`` pairs of ``size``^2 float32 images into ``folder``: ``scenes`` fields from the project's sky
    generator, each written several times rolled by a random offset. Returns {name: transient positions (y, x)}."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    truth = {}
    made = [diffim.make_scene(size, seed=seed + k) for k in range(min(scenes, count))]
    for i in range(count):
        scene = made[i % len(made)]
        shift = tuple(int(s) for s in rng.integers(0, size, 2))
        name = f"pair{i:03d}"
        for suffix, exposure in (("sci", scene.science), ("ref", scene.reference)):
            image = np.roll(exposure.image, shift, axis=(0, 1)).astype(np.float32)
            cards = [("SKY", float(np.median(image)), "sky level (counts)"),
                     ("SKYSIG", float(exposure.sky_sigma), "sky noise, 1 sigma (counts)")]
            fits_io.write_image(os.path.join(folder, f"{name}_{suffix}.fits"), image, cards)
        truth[name] = (scene.transients + shift) % size
    return truth


def find_pairs(folder):
    """The pairs in ``folder``, by name."""
    names = sorted(f[:-len("_sci.fits")] for f in os.listdir(folder) if f.endswith("_sci.fits"))
    pairs = [Pair(n, fits_io.probe(os.path.join(folder, f"{n}_sci.fits")),
                  fits_io.probe(os.path.join(folder, f"{n}_ref.fits"))) for n in names
             if os.path.exists(os.path.join(folder, f"{n}_ref.fits"))]
    if not pairs:
        raise SystemExit(f"no pairs NAME_sci.fits + NAME_ref.fits in {folder}")
    first = pairs[0].science
    for pair in pairs:
        for image in (pair.science, pair.reference):
            if image.shape != first.shape or image.dtype != first.dtype:
                raise SystemExit(f"{image.path}: {image.shape} {image.dtype}, but {first.path} is {first.shape} "
                                 f"{first.dtype}: a night subtracts images of one shape and type")
    return pairs


class Progress:
    """A one-line progress bar on stderr with the pairs per second so far."""

    def __init__(self, total, width=30):
        self.total, self.width, self.start = total, width, time.perf_counter()

    def __call__(self, done):
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        filled = self.width * done // self.total
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} pairs, "
                         f"{rate:.2f} pairs/s")
        if done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", help="where the pairs are (default with --small: a temporary folder)")
    parser.add_argument("--out", help="where the results go (default: FOLDER/out)")
    parser.add_argument("--small", action="store_true", help="generate 8 pairs of 256^2, run on the CPU with a 9 x 9 "
                                                             "kernel")
    parser.add_argument("--generate", type=int, metavar="N", help="first write N generated pairs into --folder")
    parser.add_argument("--size", type=int, default=4096, help="image size of generated pairs")
    parser.add_argument("--scenes", type=int, default=4, help="distinct fields among the generated pairs")
    parser.add_argument("--kernel-half-width", type=int, help="default 9 (the Roman pipeline's), 4 with --small")
    parser.add_argument("--kernel-order", type=int, default=2)
    parser.add_argument("--background-order", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=5.0, help="detection threshold (sigma)")
    parser.add_argument("--depth", type=int, default=6, help="pairs in flight")
    parser.add_argument("--readers", type=int, default=4, help="reader threads")
    parser.add_argument("--writers", type=int, default=4, help="writer threads")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even with a GPU")
    args = parser.parse_args(argv)
    if args.small:  # a 2162-unknown system takes seconds to solve on a small CPU: a 9 x 9 kernel there
        args.generate, args.size, args.cpu = args.generate or 8, 256 if args.size == 4096 else args.size, True
        args.kernel_half_width = args.kernel_half_width or 4
    args.kernel_half_width = args.kernel_half_width or 9
    temporary = None
    if args.folder is None:
        if not args.generate:
            parser.error("give --folder (or --small / --generate N to make pairs)")
        temporary = tempfile.TemporaryDirectory(prefix="survey_night_")
        args.folder = temporary.name
    if args.generate:
        start = time.perf_counter()
        generate(args.folder, args.generate, args.size, args.scenes)
        print(f"{args.generate} pairs of {args.size}^2 written to {args.folder} in {time.perf_counter() - start:.1f} s")
    out = args.out or os.path.join(args.folder, "out")
    os.makedirs(out, exist_ok=True)
    pairs = find_pairs(args.folder)
    shape, dtype = pairs[0].science.shape, pairs[0].science.dtype
    params = sfft_mathpy.Params(shape[0], shape[1], args.kernel_half_width, args.kernel_half_width,
                                args.kernel_order, args.background_order, True)
    gpu = not args.cpu and diffim.gpu_available()
    if gpu:
        import cupy as xp
    else:
        xp = np
    start = time.perf_counter()
    night = Night(shape, dtype, params, xp, depth=args.depth, readers=args.readers, writers=args.writers,
                  threshold=args.threshold)
    compute_rate = night.compute_rate(pairs[0])
    print(f"{len(pairs)} pairs of {shape[0]}x{shape[1]} {dtype.name} on the {'GPU' if gpu else 'CPU'}; planned and "
          f"warmed up in {time.perf_counter() - start:.1f} s; compute only: {compute_rate:.2f} pairs/s", flush=True)

    header = fits_io.image_header(shape, np.float32, [("ORIGIN", "mathpy SFFT backend", "SCI - K (x) REF")])
    rows, failed = [], []
    nbytes = 4 * shape[0] * shape[1]

    def write(pair, raw, peaks, solved):
        fits_io.write(os.path.join(out, f"{pair.name}_diff.fits"), raw[:nbytes], header)
        rows.extend((pair.name, r, c, snr) for r, c, snr in peaks)
        if not solved:
            failed.append(pair.name)

    elapsed = night.run(pairs, write, Progress(len(pairs)))
    with open(os.path.join(out, "detections.csv"), "w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["pair", "row", "column", "snr"])
        table.writerows(sorted(rows, key=lambda r: (r[0], -r[3], r[1], r[2])))
    rate = len(pairs) / elapsed
    print(f"night: {len(pairs)} pairs in {elapsed:.2f} s: {rate:.2f} pairs/s; compute only {compute_rate:.2f} "
          f"pairs/s; night / compute only = {rate / compute_rate:.2f}; {len(rows)} detections -> {out}")
    if failed:
        print(f"solve failed its residual check for {', '.join(sorted(failed))}")
    if temporary is not None:
        temporary.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
