"""CuPy launchers of the CUDA kernels in ``cuda/``, one module per ``.cu`` file.

Nothing compiles or imports CuPy at import time: a kernel module is built on first use and
cached per device (and on disk by CuPy).
"""
