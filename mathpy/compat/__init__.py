"""Other libraries' APIs on mathpy's objects, so their users switch with one import line.

- :mod:`mathpy.compat.nvmath`: nvmath-python's host APIs (``nvmath.fft``, ``nvmath.linalg.advanced``,
  ``nvmath.memory``, ``nvmath.CudaDataType``): ``import mathpy.compat.nvmath as nvmath``.

A compatibility namespace is a set of thin adapters: names, signatures, defaults, error types and semantics of the
other library, each call translated into mathpy's own API. It holds no engine of its own; what it cannot express in
mathpy's API it refuses with an error naming the feature.
"""
