"""A survey night: image pairs read from FITS files, subtracted with mathpy's SFFT backend, the difference images and a
catalogue of detections written back, with reading, transfers and compute overlapped.

Each pair in flight owns a :class:`Slot` (host and device buffers, CUDA events) from the moment its files are read
until its results are written; ``depth`` slots rotate. Reader threads copy the files' raw big-endian pixels into the
slot's host buffer (pinned memory on a GPU, so that the copy to the device is asynchronous); the main thread enqueues,
for each pair in order, the upload on a copy stream, the subtraction and detection on a compute stream (after the
upload's event), and the download of the difference (float32, made big-endian on the device) and of the detections
on the copy stream (after the compute's event); writer threads wait for the download's event and write the FITS file
and the catalogue rows, then free the slot. So while the GPU subtracts pair i, pair i + 1 is uploaded, pair i - 1
downloaded and written, and pairs i + 2... read. Without a GPU the same threads overlap reading and writing with the
CPU subtraction.

The subtraction is SFFT's (``PCCP`` with ``ForceConv="REF"``: SCI - K (x) REF) of the sky-subtracted images (the
header's SKY level removed, as the Roman pipeline subtracts the sky first); the fit sees the sources both images show
(pixels above 3 sigma of the sky, grown by 2 pixels) and zero elsewhere, as the pipeline zeroes its background mask:
the background says nothing about the kernel, and a transient, in one image only, stays out of the fit. Detections are the local
maxima of the difference above ``threshold`` times its noise, ``sqrt(sigma_sci^2 + sigma_ref^2 |K|^2)`` with K the
matching kernel at the image centre (the header's sky noise of each image, SKYSIG).
"""

import concurrent.futures
import dataclasses
import queue
import threading
import time

import numpy as np

import sfft_mathpy
from diffim import sfft as detection

from . import fits_io

__all__ = ["Pair", "Night", "Slot"]


@dataclasses.dataclass(frozen=True)
class Pair:
    """One pair: its name and the two FITS images (:class:`.fits_io.FitsImage`)."""

    name: str
    science: fits_io.FitsImage
    reference: fits_io.FitsImage


def _sources(xp, image, sigma):
    """Pixels of ``image`` (sky-subtracted) above 3 sigma, grown by 2 pixels."""
    if xp is np:
        from scipy import ndimage
    else:
        from cupyx.scipy import ndimage
    return ndimage.maximum_filter(image > 3 * sigma, size=5)


class Slot:
    """The buffers and events of one pair in flight."""

    def __init__(self, xp, in_bytes, out_bytes, capacity):
        gpu = xp is not np
        if gpu:
            import cupyx
            host = cupyx.empty_pinned
        else:
            host = np.empty
        self.host_in, self.host_out = host(in_bytes, np.uint8), host(out_bytes, np.uint8)
        self.host_peaks = (host(1, np.int32), host(capacity, np.int64), host(capacity, np.float32), host(1, np.float64))
        self.device_in = xp.empty(in_bytes, np.uint8) if gpu else self.host_in
        self.device_out = xp.empty(out_bytes, np.uint8) if gpu else self.host_out
        self.device_peaks = tuple(xp.zeros(a.shape, a.dtype) for a in self.host_peaks) if gpu else self.host_peaks
        self.events = {name: xp.cuda.Event() for name in ("uploaded", "computed", "downloaded")} if gpu else None
        self.pair = None


class Night:
    """``Night(shape, dtype, params, xp)`` subtracts pairs of ``shape`` images (FITS ``dtype``, float32 or float64)
    with the SFFT configuration ``params`` (:class:`sfft_mathpy.Params`) on xp's device; :meth:`run` does a night."""

    def __init__(self, shape, dtype, params, xp=np, depth=4, readers=4, writers=2, threshold=5.0, capacity=65536):
        self.xp, self.gpu, self.params = xp, xp is not np, params
        self.shape, self.dtype, self.threshold, self.capacity = tuple(shape), np.dtype(dtype), threshold, capacity
        self.image_bytes = int(np.prod(shape)) * self.dtype.itemsize
        self.streams = (xp.cuda.Stream(non_blocking=True), xp.cuda.Stream(non_blocking=True)) if self.gpu else None
        with self._on(0):
            self.backend = sfft_mathpy.SFFTBackend(params, xp)
        self.slots = [Slot(xp, 2 * self.image_bytes, 4 * int(np.prod(shape)), capacity) for _ in range(depth)]
        self.readers, self.writers = readers, writers
        cx, cy = (np.asarray(c, np.float64).reshape(-1)[len(c.reshape(-1)) // 2] for c in params.coordinates())
        self._centre = xp.asarray([cx ** i * cy ** j for i, j in params.ij])   # the kernel polynomials at the centre

    def _on(self, which):
        """The compute (0) or copy (1) stream as a context (nothing on the CPU)."""
        import contextlib
        return self.streams[which] if self.gpu else contextlib.nullcontext()

    # --- one pair ------------------------------------------------------------------------------------------------
    def read(self, pair, slot):
        fits_io.read_into(pair.science, slot.host_in[:self.image_bytes])
        fits_io.read_into(pair.reference, slot.host_in[self.image_bytes:])
        slot.pair = pair
        return slot

    def compute(self, slot):
        """Enqueue the subtraction and detection of the pair in ``slot.device_in`` (on the compute stream)."""
        xp, b, p = self.xp, self.image_bytes, self.params
        sci = fits_io.to_native(xp, slot.device_in[:b], self.dtype, self.shape)
        ref = fits_io.to_native(xp, slot.device_in[b:], self.dtype, self.shape)
        noise = [float(image.header["SKYSIG"]) for image in (slot.pair.science, slot.pair.reference)]
        sky = [float(image.header["SKY"]) for image in (slot.pair.science, slot.pair.reference)]
        sci, ref = sci - sky[0], ref - sky[1]   # SFFT subtracts sky-subtracted images, as the Roman pipeline's
        fitted = _sources(xp, sci, noise[0]) & _sources(xp, ref, noise[1])
        solution, residual = self.backend.solve(xp.where(fitted, ref, 0.0), xp.where(fitted, sci, 0.0))
        difference = self.backend.difference_of(ref, sci, solution)
        kernel = xp.tensordot(self._centre, self.backend.equations.kernels(solution), axes=1)
        sigma = xp.sqrt(noise[0] ** 2 + noise[1] ** 2 * xp.sum(kernel * kernel))
        score = (difference / sigma).astype(np.float32)
        fits_io.to_big_endian(xp, difference.astype(np.float32), out=slot.device_out)
        count, flat, values, check = slot.device_peaks
        if self.gpu:
            from diffim.peak_kernel import launch_peaks
            count[...] = 0
            launch_peaks(score, self.threshold, 2, count, flat, values)
            check[...] = residual
        else:
            found, peak_values = detection._peaks_among_candidates(score, self.threshold, 2)
            count[0] = found.size
            flat[:min(found.size, flat.size)] = found[:flat.size]
            values[:min(found.size, flat.size)] = peak_values[:flat.size]
            check[0] = residual
        return score

    def enqueue(self, slot):
        """Upload, compute and download one slot's pair (GPU: asynchronously, on two streams)."""
        if not self.gpu:
            self.compute(slot)
            return
        compute, copy = self.streams
        slot.device_in.set(slot.host_in, stream=copy)
        slot.events["uploaded"].record(copy)
        compute.wait_event(slot.events["uploaded"])
        with compute:
            self.compute(slot)
            slot.events["computed"].record(compute)
        copy.wait_event(slot.events["computed"])
        slot.device_out.get(out=slot.host_out, stream=copy, blocking=False)
        for device, host in zip(slot.device_peaks, slot.host_peaks):
            device.get(out=host, stream=copy, blocking=False)
        slot.events["downloaded"].record(copy)

    def results(self, slot):
        """(difference raw bytes, [(row, col, snr)], solved well) of a slot whose pair finished (waits for it)."""
        if self.gpu:
            slot.events["downloaded"].synchronize()
        count, flat, values, check = slot.host_peaks
        n = min(int(count[0]), self.capacity)
        rows, cols = np.divmod(flat[:n], self.shape[1])
        order = np.lexsort((flat[:n], -values[:n]))
        peaks = [(int(rows[k]), int(cols[k]), float(values[k])) for k in order]
        solved = float(check[0]) <= sfft_mathpy.backend.RESIDUAL_LIMIT and int(count[0]) <= self.capacity
        return slot.host_out, peaks, solved

    # --- the night -----------------------------------------------------------------------------------------------
    def compute_rate(self, pair, repeats=5):
        """Pairs per second of the subtraction and detection alone, the pair already on the device."""
        slot = self.slots[0]
        self.read(pair, slot)
        if self.gpu:
            slot.device_in.set(slot.host_in)
        self._sync()
        with self._on(0):
            self.compute(slot)
        self._sync()
        start = time.perf_counter()
        with self._on(0):
            for _ in range(repeats):
                self.compute(slot)
        self._sync()
        return repeats / (time.perf_counter() - start)

    def _sync(self):
        if self.gpu:
            self.xp.cuda.Device().synchronize()

    def run(self, pairs, write, progress=None):
        """Subtract ``pairs`` in order; ``write(pair, difference_bytes, peaks, solved)`` runs in a writer thread for
        each, ``progress(done)`` after each. Returns the wall time in seconds."""
        free = queue.Queue()
        for slot in self.slots:
            free.put(slot)
        done, lock = [0], threading.Lock()

        def finish(slot):
            try:
                write(slot.pair, *self.results(slot))
            finally:
                free.put(slot)
            with lock:
                done[0] += 1
                if progress is not None:
                    progress(done[0])

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(self.readers) as readers, \
                concurrent.futures.ThreadPoolExecutor(self.writers) as writers:
            reading, written, remaining = [], [], list(pairs)
            for _ in pairs:
                while len(reading) < len(self.slots) and remaining:  # read ahead into the free slots
                    try:  # wait for one only when nothing is read yet: the device must not wait for a writer
                        slot = free.get(block=not reading)
                    except queue.Empty:
                        break
                    reading.append(readers.submit(self.read, remaining.pop(0), slot))
                slot = reading.pop(0).result()
                self.enqueue(slot)
                written.append(writers.submit(finish, slot))
            for future in written:
                future.result()
        return time.perf_counter() - start
