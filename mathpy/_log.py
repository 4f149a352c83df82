"""mathpy's logger. Plans, algorithm choices and compile times are recorded at DEBUG level:
``logging.getLogger("mathpy").setLevel(logging.DEBUG)`` (with a handler) shows them."""

import logging

__all__ = ["logger"]

logger = logging.getLogger("mathpy")
logger.addHandler(logging.NullHandler())
