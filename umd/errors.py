"""Errors of the umd runtime.

Every failure below the runtime arrives as a libvgpu ``VgpuError`` (an ``OSError``
carrying the errno); the runtime raises its own domain errors ``from`` it, so the
errno stays reachable as ``exc.__cause__.errno`` (errors keep their errno through every layer).

Every umd error is a :class:`vgpu.errors.UserError`: a program that does not catch one
ends with its message alone, no traceback (umd installs the hook on import;
``VGPU_DEBUG=1`` shows the traceback, docs/errors.md).
"""
from __future__ import annotations

from vgpu.errors import UserError


class UMDError(UserError):
    """Base class of every umd error."""


class VersionMismatch(UMDError):
    """The mounted device's KMD is not one this umd can drive; the message says
    what to upgrade."""


class OutOfMemory(UMDError, MemoryError):
    """The device has no room for an allocation, even after the pool's cache was
    released."""


class LaunchError(UMDError, ValueError):
    """A kernel launch was refused before it reached the GPU: bad grid or block,
    wrong arguments."""


class ArgumentTypeError(LaunchError, TypeError):
    """A kernel argument of the wrong type: an array whose dtype or number of
    dimensions is not the one the kernel's annotation names (never reinterpreted)."""


class KernelCompileError(UMDError):
    """Placeholder for the kernel compiler (umd/compiler may define its own)."""

    prefixed = False   # the message begins with the kernel's file:line, then its caret


class GPUError(UMDError):
    """A GPU job failed. ``errno`` is the fence's error (EFAULT, EINVAL, ETIME...)."""

    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno


class GPUFault(GPUError):
    """A job faulted on the GPU (page fault, illegal instruction, trap...).

    ``kernel`` (name, or the SDMA operation), ``pc`` (byte offset from the kernel's
    entry, None for SDMA), ``line`` (source line when the kernel has a line table),
    ``address`` (faulting VA, None when the fault has none), ``reason`` and
    ``dump`` (the devcoredump path) are attributes as well as parts of the message.
    """

    def __init__(self, message: str, errno: int = 0, *, kernel: str | None = None,
                 pc: int | None = None, line: int | None = None, source_file: str | None = None,
                 address: int | None = None, reason: str | None = None, dump: str | None = None):
        super().__init__(message, errno)
        self.kernel, self.pc, self.line, self.source_file = kernel, pc, line, source_file
        self.address, self.reason, self.dump = address, reason, dump


class GPUHang(GPUError):
    """A job ran past the ring timeout and was aborted by the KMD's watchdog."""

    def __init__(self, message: str, errno: int = 0, *, kernel: str | None = None,
                 pc: int | None = None, dump: str | None = None):
        super().__init__(message, errno)
        self.kernel, self.pc, self.dump = kernel, pc, dump
