"""mathpy.distributed: FFTs and matrix products of arrays split over the processes of a job, one GPU (or CPU) each.

Each process passes its local part of the global operands and gets its local part of the result back, in its own
package (NumPy, CuPy, torch) and on its device. The collectives run through an existing engine, NCCL (GPU memory) and
gloo (host memory) under torch.distributed, behind one seam (:class:`Transport`) so that another engine can be plugged
in. See ``docs/distributed.md`` for the distributions, the engine choice and the measured scaling.

Joining the job (collective: every process calls it):

- :func:`initialize` (from torchrun's environment, mpi4py's communicator under mpirun, or alone as a job of one);
  :func:`finalize`, :func:`get_context`, :func:`is_initialized`; :class:`Context`.

Distributions (how a global array is split; :class:`Partition` says which rank holds which indices):

- :class:`Slab` (``Slab.X``, ``Slab.Y``, ``Slab.Z``; for matrices ``Slab(0)`` = "row", ``Slab(1)`` = "column"),
  :class:`Pencil`, :class:`Box` (each rank names its own box), :class:`BlockCyclic` (ScaLAPACK's 2-D layout).

FFT (2-D and 3-D, over all axes; local transforms are :class:`mathpy.fft.FFT` plans, so prolog/epilog callbacks fuse
into them):

- stateless :func:`fftn`, :func:`ifftn`, :func:`rfftn`, :func:`irfftn` (``norm=`` as numpy.fft);
- stateful :class:`FFT` (``plan(prolog=, epilog=)``, ``execute(direction=)``, ``reset_operand``, ``free``) and
  :class:`FFTOptions`.

Matmul (``D = epilog(alpha * A @ B + beta * C)`` with mathpy's epilogs; local products are :class:`mathpy.Matmul`):

- stateless :func:`matmul`, stateful :class:`Matmul` (``plan(epilog=, epilog_inputs=)``, ``execute``,
  ``reset_operands``, ``free``).

Transports: :class:`Transport` (the seam), :class:`TorchTransport` (torch.distributed: NCCL and gloo),
:class:`LocalTransport` (a job of one process, no torch needed).

Errors: every call first agrees on a summary of its arguments across the ranks, so a bad part on one rank or a
disagreement (global shapes, dtypes, distributions) raises the same :class:`DistributionMismatchError` on every rank;
a collective that does not complete within the timeout raises :class:`DistributedTimeoutError`.

>>> import numpy as np
>>> import mathpy.distributed as md
>>> context = md.initialize(transport=md.LocalTransport())   # under torchrun: md.initialize()
>>> x = np.random.default_rng(0).standard_normal((8, 4, 4)) + 0j
>>> lower, upper = md.Slab.X.partition(x.shape, context.size).box(context.rank)   # this rank's slab
>>> y = md.fftn(x[lower[0]:upper[0]], md.Slab.X)              # this rank's part of the result, in Slab.Y
>>> bool(np.allclose(y, np.fft.fftn(x)))
True
>>> md.finalize()
"""

from ._context import Context, finalize, get_context, initialize, is_initialized
from ._distribution import BlockCyclic, Box, Partition, Pencil, Slab
from ._errors import DistributedError, DistributedTimeoutError, DistributionMismatchError, NotInitializedError
from ._fft import FFT, FFTOptions, fftn, ifftn, irfftn, rfftn
from ._matmul import Matmul, matmul
from ._transport import LocalTransport, TorchTransport, Transport

__all__ = [
    "initialize", "finalize", "get_context", "is_initialized", "Context",
    "Slab", "Pencil", "Box", "BlockCyclic", "Partition",
    "fftn", "ifftn", "rfftn", "irfftn", "FFT", "FFTOptions",
    "matmul", "Matmul",
    "Transport", "TorchTransport", "LocalTransport",
    "DistributedError", "DistributedTimeoutError", "DistributionMismatchError", "NotInitializedError",
]
