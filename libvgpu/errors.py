"""Errors of libvgpu: ``OSError`` subclasses that keep the errno of the failing call.

Every failure of an ioctl() on a DRM node (or, with the frame transport, of a
control-file write()/read()) reaches the caller as a :class:`VgpuError`
(``isinstance(e, OSError)``, ``e.errno`` unchanged), picked by errno so callers can
catch what they can act on (:class:`VgpuTimeout`, :class:`VgpuOutOfMemory`...) and
the message names the request that failed.
"""

from __future__ import annotations

import errno as _errno
import os


class VgpuError(OSError):
    """A vgpu call failed; ``errno`` is the kernel's (the daemon's) errno."""

    def __init__(self, err: int, context: str = ""):
        message = os.strerror(err)
        super().__init__(err, f"{message} ({context})" if context else message)


class VgpuInvalidArgument(VgpuError):
    """EINVAL: the KMD refused an argument (flags, padding, size, alignment)."""


class VgpuNoSuchObject(VgpuError):
    """ENOENT: unknown GEM handle, context, BO list, syncobj or token."""


class VgpuOutOfMemory(VgpuError):
    """ENOMEM/ENOSPC: the memory domain (VRAM, GTT) or the VA space is full."""


class VgpuTimeout(VgpuError):
    """ETIME/ETIMEDOUT: a wait ran out of time."""


class VgpuCanceled(VgpuError):
    """ECANCELED: the context was reset (guilty or innocent) and refuses work."""


class VgpuPermissionDenied(VgpuError):
    """EACCES/EPERM: e.g. a priority above NORMAL, or a privileged ioctl on renderD128."""


class VgpuNotSupported(VgpuError):
    """ENOTTY/EOPNOTSUPP/ENOSYS: the device does not know the request."""


class VgpuBusy(VgpuError):
    """EBUSY: the object is in use."""


class VgpuProtocolError(VgpuError):
    """EPROTO: the reply frame from the daemon is malformed (frame transport)."""


_BY_ERRNO: dict[int, type[VgpuError]] = {
    _errno.EINVAL: VgpuInvalidArgument,
    _errno.ENOENT: VgpuNoSuchObject,
    _errno.ENOMEM: VgpuOutOfMemory,
    _errno.ENOSPC: VgpuOutOfMemory,
    _errno.ETIME: VgpuTimeout,
    _errno.ETIMEDOUT: VgpuTimeout,
    _errno.ECANCELED: VgpuCanceled,
    _errno.EACCES: VgpuPermissionDenied,
    _errno.EPERM: VgpuPermissionDenied,
    _errno.ENOTTY: VgpuNotSupported,
    _errno.EOPNOTSUPP: VgpuNotSupported,
    _errno.ENOSYS: VgpuNotSupported,
    _errno.EBUSY: VgpuBusy,
    _errno.EPROTO: VgpuProtocolError,
}


#: (errno, request) -> what it means there: the mount's object limits (kmd/limits.py)
#: answer ENOSPC per DRM file (a full handle table, idr_alloc's errno) and ENOMEM per
#: device, where the errno alone cannot say which limit it was.
_PER_FILE_LIMIT = ("this DRM file holds as many {what} as the mount allows (`vgpu mount --max-{opt}-per-file N`; "
                   "`vgpu dmesg` names the limit)")
_MEANING: dict[tuple[int, str], str] = {
    (_errno.ENOSPC, "AMDGPU_GEM_CREATE"): _PER_FILE_LIMIT.format(what="BOs", opt="bos"),
    (_errno.ENOSPC, "AMDGPU_GEM_USERPTR"): _PER_FILE_LIMIT.format(what="BOs", opt="bos"),
    (_errno.ENOSPC, "PRIME_FD_TO_HANDLE"): _PER_FILE_LIMIT.format(what="BOs", opt="bos"),
    (_errno.ENOSPC, "AMDGPU_CTX"): _PER_FILE_LIMIT.format(what="contexts", opt="contexts"),
    (_errno.ENOSPC, "SYNCOBJ_CREATE"): _PER_FILE_LIMIT.format(what="syncobjs", opt="syncobjs"),
    (_errno.ENOSPC, "AMDGPU_BO_LIST"): _PER_FILE_LIMIT.format(what="BO lists", opt="bo-lists"),
    (_errno.ENOMEM, "AMDGPU_GEM_CREATE"): ("the memory domain is full, or the device holds as many BOs as "
                                           "the mount allows (--max-bos); `vgpu dmesg` says which"),
}


def error_for(err: int, context: str = "") -> VgpuError:
    """The :class:`VgpuError` subclass for ``err``, with ``context`` in its message
    (and, for a request whose errno alone would mislead, what it means there)."""
    meaning = _MEANING.get((err, context))
    return _BY_ERRNO.get(err, VgpuError)(err, f"{context}: {meaning}" if meaning else context)


def from_oserror(exc: OSError, context: str = "") -> VgpuError:
    """Map an ``OSError`` from ioctl()/write()/read()/open()/mmap() to a :class:`VgpuError`.

    Use as ``raise from_oserror(e, "AMDGPU_GEM_CREATE") from e``.
    """
    if isinstance(exc, VgpuError):
        return exc
    return error_for(exc.errno if exc.errno is not None else _errno.EIO, context)
