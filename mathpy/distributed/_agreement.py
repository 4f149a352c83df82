"""The checked agreement step: before any data moves, the ranks all-gather a small summary of their call and every
rank raises the same error when one rank's part is wrong or the ranks disagree. A rank that finds a problem in its own
arguments does not raise at once (its peers would wait in the next collective until the timeout): it reports the
problem through the agreement, and all ranks raise together.

>>> class Alone:  # a transport of one rank is enough to show the checks
...     def agree(self, value):
...         return [value, value]
>>> facts = agree(Alone(), "fftn", {"dtype": "complex64"})
>>> require_same("fftn", facts, ["dtype"])
>>> require_same("fftn", [{"dtype": "complex64"}, {"dtype": "float32"}], ["dtype"])
Traceback (most recent call last):
...
mathpy.distributed._errors.DistributionMismatchError: fftn: the ranks disagree on dtype: rank 0: 'complex64', ...
"""

import contextlib

from ._errors import DistributionMismatchError

__all__ = ["agree", "require_same", "Problems", "checked"]


class Problems(contextlib.AbstractContextManager):
    """Collects the first argument error a rank finds, to report it through :func:`agree` instead of raising alone.

    >>> problems = Problems()
    >>> with problems:
    ...     raise ValueError("bad axis")
    >>> problems.message
    'ValueError: bad axis'
    """

    def __init__(self):
        self.message = None

    def __exit__(self, kind, error, traceback):
        if error is not None and isinstance(error, (ValueError, TypeError)):
            if self.message is None:
                self.message = f"{type(error).__name__}: {error}"
            return True
        return False


def agree(transport, what, facts, problem=None):
    """Every rank's ``facts`` (a dict of small picklable values), in rank order; raises the same
    DistributionMismatchError on every rank when any rank reported a ``problem`` (a message)."""
    gathered = transport.agree((facts, problem))
    problems = [(rank, message) for rank, (_, message) in enumerate(gathered) if message]
    if problems:
        raise DistributionMismatchError(f"{what}: " + "; ".join(f"rank {rank}: {message}"
                                                               for rank, message in problems))
    return [found for found, _ in gathered]


def require_same(what, gathered, keys):
    """Raise DistributionMismatchError (on every rank: all hold the same ``gathered``) unless every rank gave the same
    value for each of ``keys``."""
    for key in keys:
        values = [facts[key] for facts in gathered]
        if any(value != values[0] for value in values[1:]):
            listing = ", ".join(f"rank {rank}: {value!r}" for rank, value in enumerate(values))
            raise DistributionMismatchError(f"{what}: the ranks disagree on {key}: {listing}")


def checked(what, function, *args):
    """``function(*args)``, with a ValueError turned into a DistributionMismatchError (for checks that every rank makes
    on the same gathered facts, so that all raise the same error)."""
    try:
        return function(*args)
    except ValueError as error:
        raise DistributionMismatchError(f"{what}: {error}") from None
