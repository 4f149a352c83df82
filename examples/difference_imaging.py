"""Difference imaging in Fourier space on synthetic sky images: the same pipeline in NumPy/SciPy, CuPy and mathpy.

The workload is the image-subtraction step of a transient survey such as the Nancy Grace Roman Space Telescope's
supernova pipeline: a science exposure and a deeper reference of the same field, seen through different and spatially
varying PSFs, with different backgrounds and photometric scales. Each image is cut into overlapping stamps; on each
stamp a PSF-matching kernel on delta functions plus a background plane is fitted by least squares with the normal
equations built in Fourier space (SFFT, Hu et al. 2022), the reference is convolved with it and subtracted, the
difference is decorrelated, and a matched-filter score image (in sigma) finds the transients injected into the
science exposure. The algorithm lives in ``examples/diffim/``; the three implementations differ only in how they run
the FFTs and the pointwise work around them (mathpy fuses that work into cuFFT's kernels as prolog/epilog callbacks
and reuses its plans).

Run:  python examples/difference_imaging.py --small   (512 x 512: seconds on a CPU; mathpy on its CPU execution space)
      python examples/difference_imaging.py           (4096 x 4096, a Roman detector; meant for a GPU)
Prints, per implementation, the time per image pair, the transients recovered and the spurious detections, and its
agreement with the NumPy reference. The last line is ``max relative error vs NumPy reference: X``, X relative to
the science image's dynamic range (see ``diffim.relative_error``); the exit status is 1 if X exceeds the
single-precision tolerance ``diffim.tolerance``.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the diffim package next to this file
try:
    import mathpy  # noqa: F401
except ImportError:  # running from a source checkout without installing it
    sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import diffim  # noqa: E402
from diffim import sfft  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="512 x 512 images (runs in seconds on a CPU)")
    parser.add_argument("--size", type=int, help="image size n (n x n pixels, a multiple of the stamp core)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    n = args.size or (512 if args.small else 4096)
    config = diffim.Config(n=n, core=128 if n <= 1024 else 256)
    gpu = diffim.gpu_available()

    start = time.perf_counter()
    scene = diffim.make_scene(n, seed=args.seed)
    data = diffim.inputs(scene, config)
    print(f"{n} x {n} images, {config.batch} stamps of {config.stamp}^2 pixels ({config.core}^2 kept), kernel "
          f"{2 * config.kernel_radius + 1}^2 delta functions + background plane per stamp, "
          f"{len(scene.transients)} transients injected; scene made in {time.perf_counter() - start:.1f} s")
    if not gpu:
        print("cupy: skipped (no GPU); mathpy runs on its CPU execution space")

    results, errors = {}, []
    for name, what in diffim.IMPLEMENTATIONS.items():
        if name == "cupy" and not gpu:
            continue
        start = time.perf_counter()
        pipeline, xp = diffim.make_pipeline(name, config, gpu)
        device_data = data.to(xp)
        diffim.subtract(pipeline, xp, device_data)  # first pair: plans, compiles callbacks, fills FFT plan caches
        first = time.perf_counter() - start
        start = time.perf_counter()
        result = diffim.subtract(pipeline, xp, device_data)  # detection waits for the device
        elapsed = time.perf_counter() - start
        result = results[name] = diffim.to_numpy(result)
        recovered, spurious = sfft.match(result.detections, scene.transients)
        where = "GPU" if xp is not np else "CPU"
        line = (f"{name:6s} ({what}, {where}): {elapsed * 1e3:8.1f} ms per image pair "
                f"(setup + first pair {first:.1f} s); transients recovered {len(recovered)}/{len(scene.transients)}, "
                f"spurious detections {spurious}")
        if name != "numpy":
            errors.append(diffim.relative_error(result, results["numpy"], data))
            line += f"; error vs NumPy {errors[-1]:.1e}"
        print(line)

    error = max(errors)
    print(f"(tolerance {diffim.tolerance(config):.1e}: 4 FFT stages x float32 eps x log2(FFT size))")
    print(f"max relative error vs NumPy reference: {error:.2e}")
    return 0 if error <= diffim.tolerance(config) else 1


if __name__ == "__main__":
    sys.exit(main())
