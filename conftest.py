"""Collection rules for the whole tree (tests/conftest.py has the fixtures).

Without torch, the README's test command must still pass: ``mathpy.torch`` (collected for its doctests) and the test
modules that import torch at module level are not collected, instead of failing to import.
"""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["mathpy/torch", "tests/test_torch_layers.py",
                       "mathpy/compat/nvmath/linalg/advanced/helpers/matmul.py"]  # (its doctest: torch tensors)
