"""Difference imaging in Fourier space (SFFT, Hu et al. 2022) on synthetic sky images, three times: NumPy/SciPy,
CuPy and mathpy. The one home of the pipeline code that ``examples/difference_imaging.py``,
``benchmarks/bench_difference_imaging.py``, ``notebooks/difference_imaging.ipynb`` and the tests import (put
``examples/`` on ``sys.path``).

- :mod:`.sky`: synthetic science/reference exposures with a spatially varying PSF and injected transients;
- :mod:`.sfft`: the algorithm shared by all implementations (layout, normal equations, solve, score, detection);
- :mod:`.array_pipeline`: NumPy / CuPy with array expressions;
- :mod:`.mathpy_pipeline`: mathpy with stateful FFT plans and fused prolog/epilog callbacks;
- :mod:`.gathered_solve`, :mod:`.solve_kernel`: mathpy's solve of the normal equations, one numba-cuda kernel;
- :mod:`.workflow`: running and judging them.
"""

from .array_pipeline import ArrayPipeline, NullTimer
from .mathpy_pipeline import MathpyPipeline
from .sfft import Config
from .sky import make_scene
from .workflow import (IMPLEMENTATIONS, Inputs, Result, gpu_available, inputs, make_pipeline, relative_error,
                       subtract, to_numpy, tolerance)

__all__ = ["ArrayPipeline", "MathpyPipeline", "NullTimer", "Config", "make_scene", "IMPLEMENTATIONS", "Inputs",
           "Result", "gpu_available", "inputs", "make_pipeline", "relative_error", "subtract", "to_numpy",
           "tolerance"]
