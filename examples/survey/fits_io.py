"""FITS images moved as raw bytes: astropy reads and writes the headers, the pixels go between the file and a
(pinned) buffer in one ``readinto`` / ``write`` (the kernel's copy, which releases the GIL), still big-endian as FITS
stores them; the byte order is turned on the device (:func:`to_native`, :func:`to_big_endian`), where it costs one
pass at the GPU's bandwidth instead of one on the host."""

import dataclasses

import numpy as np
from astropy.io import fits

__all__ = ["FitsImage", "image_header", "probe", "read_into", "to_big_endian", "to_native", "write", "write_image"]

_DTYPES = {-32: np.dtype(">f4"), -64: np.dtype(">f8")}


@dataclasses.dataclass(frozen=True)
class FitsImage:
    """Where a FITS file's primary image lies: ``offset`` bytes into the file, ``shape`` (rows, columns), big-endian
    ``dtype``; ``header`` the primary header."""

    path: str
    offset: int
    shape: tuple
    dtype: np.dtype
    header: fits.Header

    @property
    def nbytes(self):
        return int(np.prod(self.shape)) * self.dtype.itemsize


def probe(path):
    """The :class:`FitsImage` of ``path``'s primary HDU (reads the header only). ValueError for anything but a 2-D
    float32 or float64 image."""
    with fits.open(path, memmap=False, lazy_load_hdus=True) as hdul:
        header = hdul[0].header.copy()
        offset = hdul.fileinfo(0)["datLoc"]
    bitpix, naxis = header.get("BITPIX"), header.get("NAXIS")
    if naxis != 2 or bitpix not in _DTYPES:
        raise ValueError(f"{path}: expected a 2-D float32 or float64 image (BITPIX -32 or -64) in the primary HDU, got "
                         f"NAXIS {naxis}, BITPIX {bitpix}")
    return FitsImage(path, offset, (header["NAXIS2"], header["NAXIS1"]), _DTYPES[bitpix], header)


def read_into(image, buffer):
    """Read ``image``'s pixels (big-endian bytes) into the start of ``buffer`` (a writable uint8 NumPy array)."""
    view = memoryview(buffer).cast("B")[:image.nbytes]
    with open(image.path, "rb", buffering=0) as f:
        f.seek(image.offset)
        if f.readinto(view) != image.nbytes:
            raise ValueError(f"{image.path}: the file ends before its {image.shape} {image.dtype} image")


def write(path, raw, header):
    """Write a FITS file whose primary image is the big-endian bytes ``raw`` (uint8) that ``header`` describes
    (:func:`image_header`)."""
    with open(path, "wb") as f:
        f.write(header.tostring().encode("ascii"))
        f.write(memoryview(raw).cast("B"))
        f.write(b"\0" * (-raw.size % 2880))


def write_image(path, image, cards=()):
    """Write a float32 or float64 NumPy image as a FITS file, with extra header ``cards`` (key, value, comment)."""
    write(path, to_big_endian(np, np.ascontiguousarray(image)), image_header(image.shape, image.dtype, cards))


def image_header(shape, dtype, cards=()):
    """A primary header for a 2-D image of ``shape`` and float ``dtype`` (float32 or float64), with extra cards."""
    header = fits.Header()
    header["SIMPLE"] = True
    header["BITPIX"] = -32 if np.dtype(dtype).itemsize == 4 else -64
    header["NAXIS"] = 2
    header["NAXIS1"], header["NAXIS2"] = shape[1], shape[0]
    for key, value, comment in cards:
        header[key] = (value, comment)
    return header


def to_native(xp, raw, dtype, shape):
    """The native-order float array of ``shape`` from the big-endian bytes ``raw`` (uint8, on xp's device)."""
    dtype = np.dtype(dtype)
    if xp is np:
        return raw[:dtype.itemsize * int(np.prod(shape))].view(dtype).reshape(shape).astype(dtype.newbyteorder("="))
    words = raw[:dtype.itemsize * int(np.prod(shape))].view(np.uint32 if dtype.itemsize == 4 else np.uint64)
    return _swap(xp, words).view(dtype.newbyteorder("=")).reshape(shape)


def to_big_endian(xp, image, out=None):
    """The big-endian bytes (uint8) of a native float array, on its device (into ``out`` when given)."""
    if xp is np:
        swapped = image.astype(image.dtype.newbyteorder(">")).view(np.uint8).reshape(-1)
        if out is None:
            return swapped
        out[:swapped.size] = swapped
        return out
    words = image.reshape(-1).view(np.uint32 if image.dtype.itemsize == 4 else np.uint64)
    swapped = _swap(xp, words, None if out is None else out.view(words.dtype)[:words.size])
    return swapped.view(np.uint8)


_SWAPS = {}


def _swap(xp, words, out=None):
    """Byte-reversed copy of uint32 / uint64 ``words`` (CuPy)."""
    kernel = _SWAPS.get(words.dtype.itemsize)
    if kernel is None:
        if words.dtype.itemsize == 4:
            body = "y = __byte_perm(x, 0, 0x0123)"
        else:
            body = ("y = ((unsigned long long)__byte_perm((unsigned int)x, 0, 0x0123) << 32) | "
                    "__byte_perm((unsigned int)(x >> 32), 0, 0x0123)")
        kernel = _SWAPS[words.dtype.itemsize] = xp.ElementwiseKernel(f"{words.dtype.name} x", f"{words.dtype.name} y",
                                                                    body, f"swap_bytes_{words.dtype.itemsize}")
    return kernel(words, out) if out is not None else kernel(words)
