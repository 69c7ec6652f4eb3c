"""drm.debug: MOUNT/sys/module/drm/parameters/debug, Linux's switch for the DRM core's
debug messages (drivers/gpu/drm/drm_print.c, ``__drm_debug``; the DRM_UT_* categories of
include/drm/drm_print.h).

Reading the file gives the value in decimal, as ``cat /sys/module/drm/parameters/debug``
does for the module's ``unsigned long`` parameter (param_get_ulong, "%lu"); writing sets
it, parsed as kstrtoul(..., 0) parses it: ``0x1`` hex, ``1`` decimal, ``010`` octal, one
trailing newline allowed; anything else is EINVAL, a value past 2^64 - 1 ERANGE. The
file is 0644 and the daemon's user's (root's for a system mount): another user's write
is EACCES at open (vdev.fs, Linux's 0644 root ``debug`` parameter).

With DRM_UT_CORE (0x1) set, every DRM request on card*/renderD* (the ioctl path and the
legacy frame path alike) is logged to kmsg as Linux 6.6's drm_ioctl() logs it
(drivers/gpu/drm/drm_ioctl.c)::

    drm_dbg_core(dev, "comm=\\"%s\\" pid=%d, dev=0x%lx, auth=%d, %s\\n",
                 current->comm, task_pid_nr(current),
                 (long)old_encode_dev(file_priv->minor->kdev->devt),
                 file_priv->authenticated, ioctl->name);
    ...
    if (!ioctl)
        drm_dbg_core(dev, "invalid ioctl: comm=\\"%s\\", pid=%d, dev=0x%lx, auth=%d, cmd=0x%02x, nr=0x%02x\\n",
                     current->comm, task_pid_nr(current),
                     (long)old_encode_dev(file_priv->minor->kdev->devt),
                     file_priv->authenticated, cmd, nr);
    ...
    if (retcode)
        drm_dbg_core(dev, "comm=\\"%s\\", pid=%d, ret=%d\\n",
                     current->comm, task_pid_nr(current), retcode);

drm_dbg_core prints through __drm_dev_dbg: ``dev_printk(KERN_DEBUG, dev, "[" DRM_NAME ":%ps] %pV", ...)``,
so a line reads ``vgpu ffff:01:00.0: [drm:drm_ioctl] comm="python3" pid=1234, dev=0xe280,
auth=1, AMDGPU_CS`` (the kmsg prefix is the device's, as dev_printk's; ``%ps`` of a
built-in drm_ioctl is ``drm_ioctl``). The values:

- ``comm``/``pid``: the calling thread (task_pid_nr(current) is the thread id: the FUSE
  request's pid), its name from /proc/<pid>/comm. A frame request carries no caller:
  its tag (libvgpu's: the thread id) when that is a thread of the file's opener, else
  the opener (:func:`frame_caller`).
- ``dev``: old_encode_dev(226:minor), ``(226 << 8) | minor``: card0 0xe200, renderD128
  0xe280 (partition N: minor N and 128 + N).
- ``auth``: file_priv->authenticated (kmd/drm_auth.py): 1 for the card0 file that
  became master (drm_master_open authenticates it), a card0 file the master
  authenticated (AUTH_MAGIC), and any file root opened (drm_file_alloc: "for
  compatibility root is always authenticated", capable(CAP_SYS_ADMIN)); 0 otherwise.
- the name: ``ioctl->name``, the DRM_IOCTL_DEF table's stringified name:
  ``DRM_IOCTL_VERSION`` for the core's, ``AMDGPU_CS`` for the driver's (DRM_IOCTL_DEF_DRV).
- ``ret``: the negative errno of a request that fails.

Where vgpu differs: both lines are logged when the request is answered (Linux logs
the first on entry), so a blocking wait's line comes when the wait ends, after the
KMD's own lines for it; a frame request's failure in its read() (a wait that times
out) logs no ret line. vgpu logs no other DRM_UT_* category.

Cost when off: IoctlPath.observe is None, the one attribute the request paths test.
"""
from __future__ import annotations

import errno
import os

from vgpu import uapi

from ..kmd_interface import KmdError

#: include/drm/drm_print.h, enum drm_debug_category
DRM_UT_CORE = 0x01
DRM_MAJOR = 226
_ULONG_MAX = (1 << 64) - 1


def old_encode_dev(major: int, minor: int) -> int:
    """include/linux/kdev_t.h: (major << 8) | minor, for numbers below 256."""
    return (major << 8) | minor


def parse_ulong(data: bytes) -> int:
    """kstrtoul(s, 0): ``0x``/``0X`` hex, a leading ``0`` octal, else decimal; one
    trailing newline. KmdError EINVAL (not a number), ERANGE (over 2^64 - 1)."""
    text = data.decode("ascii", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    if text.startswith("+"):
        text = text[1:]
    base, digits = 10, text
    if text[:2] in ("0x", "0X"):
        base, digits = 16, text[2:]
    elif len(text) > 1 and text.startswith("0"):
        base, digits = 8, text[1:]
    valid = "0123456789abcdefABCDEF"[:base + (6 if base == 16 else 0)]
    if not digits or any(c not in valid for c in digits):
        raise KmdError(errno.EINVAL, f"drm.debug takes a number, not {text[:24]!r}")
    value = int(digits, base)
    if value > _ULONG_MAX:
        raise KmdError(errno.ERANGE, f"drm.debug {text[:24]} is out of range")
    return value


def _comm(pid: int, default: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n") or default
    except OSError:
        return default


def frame_caller(file, tag: int) -> int:
    """The thread a frame request came from: its tag when that is a thread of the
    file's opener (libvgpu and the preload library tag requests with the calling
    thread's id), else the opener. Only called while drm.debug is on."""
    if tag > 0 and os.path.exists(f"/proc/{file.pid}/task/{tag}"):
        return tag
    return file.pid


class DrmDebug:
    """The drm.debug parameter of one mount: the value, and the observer it installs
    on ``path`` (the mount's vdev.ioctl.path.IoctlPath: ``path.observe`` is what the
    ioctl and frame paths call) while DRM_UT_CORE is set."""

    def __init__(self, path):
        self.path = path
        self.value = 0

    # -- the file -------------------------------------------------------------
    def read(self) -> str:
        return f"{self.value}\n"

    def write(self, data: bytes) -> None:
        value = parse_ulong(bytes(data))
        self.value = value
        self.path.observe = self.observe if value & DRM_UT_CORE else None

    # -- the lines ------------------------------------------------------------
    def observe(self, handle, cmd: int, pid: int, err: int) -> None:
        """One DRM request of `handle` (a vdev.nodes.ControlHandle) by thread `pid`
        ended with `err` (0: success): drm_ioctl()'s lines, to the device's kmsg."""
        f = handle.file
        part = getattr(handle.dev, "partition", None)
        index = part.index if part is not None else 0
        minor = index + (128 if f.render else 0)
        dev = old_encode_dev(DRM_MAJOR, minor)
        auth = int(bool(f.authenticated) or f.uid == 0)
        comm = _comm(pid, f.comm)
        nr = uapi._IOC_NR(cmd)
        known = uapi.IOCTLS.get(nr) if uapi._IOC_TYPE(cmd) == uapi.DRM_IOCTL_BASE else None
        log = handle.dev.kmsg.log
        if known is None:
            log(f'[drm:drm_ioctl] invalid ioctl: comm="{comm}", pid={pid}, dev={dev:#x}, auth={auth}, '
                f"cmd={cmd:#04x}, nr={nr:#04x}")
        else:
            name = known.name if nr >= uapi.DRM_COMMAND_BASE else f"DRM_IOCTL_{known.name}"
            log(f'[drm:drm_ioctl] comm="{comm}" pid={pid}, dev={dev:#x}, auth={auth}, {name}')
        if err:
            log(f'[drm:drm_ioctl] comm="{comm}", pid={pid}, ret={-err}')
