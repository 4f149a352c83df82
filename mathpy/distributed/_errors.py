"""The errors of mathpy.distributed.

Every rank raises the same :class:`DistributionMismatchError` when the ranks disagree about a call (global shape,
dtype, distribution) or when one rank's part is wrong: the ranks agree on a small summary first and then all raise,
so that nobody is left waiting in a collective. A collective that does not complete within the transport's timeout
raises :class:`DistributedTimeoutError` instead of hanging.
"""

from .._errors import MathpyError

__all__ = ["DistributedError", "DistributedTimeoutError", "DistributionMismatchError", "NotInitializedError"]


class DistributedError(MathpyError, RuntimeError):
    """A collective failed (a peer process died, the connection broke, the library returned an error)."""


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A collective did not complete within the transport's timeout: a rank failed, or did not make the same call."""


class DistributionMismatchError(MathpyError, ValueError):
    """The ranks' parts do not make one consistent global problem; raised with the same message on every rank."""


class NotInitializedError(MathpyError, RuntimeError):
    """A distributed call was made before :func:`mathpy.distributed.initialize`."""
