"""mathpy.distributed (work in progress)."""
from ._context import Context, finalize, get_context, initialize, is_initialized
from ._distribution import BlockCyclic, Box, Partition, Pencil, Slab
from ._errors import *  # noqa: F403
from ._fft import FFT, FFTOptions, fftn, ifftn, irfftn, rfftn
from ._matmul import Matmul, matmul
from ._transport import LocalTransport, TorchTransport, Transport
