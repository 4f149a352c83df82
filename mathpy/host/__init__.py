"""Host APIs: functions and stateful plans called from Python on host-side control flow, executing on the CPU or a GPU.

- :mod:`mathpy.host.fft` (public as :mod:`mathpy.fft`): FFTs on cuFFT and scipy.fft, with fused Python callbacks.
- :mod:`mathpy.host.matmul` (public as :func:`mathpy.matmul` / :class:`mathpy.Matmul`): matrix products on cuBLASLt and NumPy.
"""
