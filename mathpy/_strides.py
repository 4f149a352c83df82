"""Dense layouts in element strides, shared by every API (one definition of "C-contiguous").

>>> c_strides((2, 3, 4))
(12, 4, 1)
>>> dense_strides((2, 3, 4), (0, 2, 1))
(12, 1, 3)
>>> dense_permutation((12, 1, 3))
(0, 2, 1)
>>> is_c_contiguous((4, 1, 3), (3, 7, 1))   # strides of extent-1 axes do not matter
True
"""

__all__ = ["c_strides", "dense_strides", "dense_permutation", "is_c_contiguous"]


def c_strides(shape):
    """C-contiguous strides (elements) of ``shape``; a zero extent counts as 1 so that strides stay positive."""
    return dense_strides(shape, range(len(shape)))


def dense_strides(shape, order):
    """Strides (elements) of the dense layout of ``shape`` whose axes, outermost first, are ``order``."""
    strides, step = [0] * len(shape), 1
    for axis in reversed(tuple(order)):
        strides[axis] = step
        step *= max(int(shape[axis]), 1)
    return tuple(strides)


def dense_permutation(strides):
    """Axis order, outermost first, of a dense layout: allocate ``empty([shape[p] for p in order])`` and view it with
    ``.transpose(numpy.argsort(order))`` to get ``strides``."""
    return tuple(sorted(range(len(strides)), key=lambda a: -strides[a]))


def is_c_contiguous(shape, strides):
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True
