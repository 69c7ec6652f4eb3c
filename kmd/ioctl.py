"""How an ioctl is dispatched: permission flags, the table entry type, drm_ioctl().

The table itself is kmd/ioctl_table.py (Linux: drm_ioctls[] in drm_ioctl.c and
amdgpu_ioctls_kms[] in amdgpu_drv.c); this module is the machinery it is written
with and the dispatch that reads it.

A handler is `fn(dev, file, args, extra) -> bytes | PendingReply | None`: `args` is a
ctypes struct of the KMD's own size that the handler updates in place (it becomes
the reply struct), `extra` the flattened pointer data, the return value the reply's
out-data. Arguments are checked before any work is done; each handler's docstring
lists the errno values it returns.
"""
import ctypes
import errno
from dataclasses import dataclass
from typing import Callable

from vgpu import uapi

from .errors import KmdError

# Permission flags of a table entry, with the values of enum drm_ioctl_flags
# (include/drm/drm_ioctl.h). BIT(3) was DRM_CONTROL_ALLOW, long removed.
DRM_AUTH = 1 << 0          # an authenticated primary-node file, or any render-node file
DRM_MASTER = 1 << 1        # the DRM master only
DRM_ROOT_ONLY = 1 << 2     # CAP_SYS_ADMIN (uid 0 on vgpu)
DRM_UNLOCKED = 1 << 4      # legacy drivers only; vgpu's handlers all run under the device lock
DRM_RENDER_ALLOW = 1 << 5  # allowed on the render node (renderD128)

FLAG_NAMES = {DRM_AUTH: "DRM_AUTH", DRM_MASTER: "DRM_MASTER", DRM_ROOT_ONLY: "DRM_ROOT_ONLY",
              DRM_UNLOCKED: "DRM_UNLOCKED", DRM_RENDER_ALLOW: "DRM_RENDER_ALLOW"}


@dataclass
class Reply:
    """A finished request: result, updated struct (request's arg_size bytes), out-data."""

    result: int
    arg: bytes
    extra: bytes = b""


class PendingReply:
    """A request that completes later; `wait()` blocks (vdev runs it in a thread) and
    returns the Reply or raises KmdError, which fails the read().

    A handler returns `PendingReply(complete)`, where `complete()` blocks, updates the
    handler's `args` in place and returns the out-data; dispatch() wraps it so that
    `wait()` yields the finished Reply."""

    def __init__(self, complete: Callable[[], "bytes | Reply | None"]):
        self._complete = complete

    def wait(self) -> Reply:
        return self._complete()


@dataclass(frozen=True)
class Unimplemented:
    """The handler slot of an ioctl that uapi defines but vgpu does not implement
    yet: dispatch answers ENOTTY and says "not implemented" in kmsg. `why` is
    what is missing."""

    why: str


def not_implemented(why: str) -> Unimplemented:
    """Mark a table entry as intended but not implemented (see Unimplemented)."""
    return Unimplemented(why)


@dataclass(frozen=True)
class IoctlDesc:
    """One table entry, as Linux's struct drm_ioctl_desc: the request code (from
    vgpu/uapi.py), its struct, the handler and the permission flags."""

    name: str                              # without DRM_IOCTL_, as in uapi.IOCTLS
    request: int
    struct: type
    func: "Callable | Unimplemented"
    flags: int

    @property
    def implemented(self) -> bool:
        return not isinstance(self.func, Unimplemented)

    def describe_flags(self) -> str:
        return "|".join(n for b, n in FLAG_NAMES.items() if self.flags & b) or "0"


def _define(name: str, func, flags: int) -> IoctlDesc:
    request = getattr(uapi, "DRM_IOCTL_" + name)
    known = uapi.IOCTLS.get(uapi._IOC_NR(request))
    if known is None or known.request != request:
        raise ValueError(f"{name} is not in uapi.IOCTLS")
    if flags & ~sum(FLAG_NAMES):
        raise ValueError(f"{name}: unknown flags {flags:#x}")
    return IoctlDesc(name, request, known.struct, func, flags)


def DRM_IOCTL_DEF(name: str, func, flags: int) -> IoctlDesc:
    """A core DRM ioctl (drm_ioctl.c's macro of the same name); `name` is the
    uapi name without DRM_IOCTL_, e.g. "GEM_CLOSE"."""
    return _define(name, func, flags)


def DRM_IOCTL_DEF_DRV(name: str, func, flags: int) -> IoctlDesc:
    """A driver ioctl (drm_ioctl.h's macro of the same name): `name` like
    "AMDGPU_CS", in the DRM_COMMAND_BASE..DRM_COMMAND_END range."""
    desc = _define(name, func, flags)
    if not uapi.DRM_COMMAND_BASE <= uapi._IOC_NR(desc.request) < uapi.DRM_COMMAND_END:
        raise ValueError(f"{name} is not a driver ioctl")
    return desc


def index(*tables: list[IoctlDesc]) -> dict[int, IoctlDesc]:
    """`_IOC_NR` -> entry over the given tables; a number listed twice is a bug."""
    out: dict[int, IoctlDesc] = {}
    for table in tables:
        for desc in table:
            nr = uapi._IOC_NR(desc.request)
            if nr in out:
                raise ValueError(f"ioctl number {nr:#x} listed twice ({out[nr].name}, {desc.name})")
            out[nr] = desc
    return out


def drm_ioctl_permit(flags: int, file) -> None:
    """Refuse with EACCES what the file may not call, in drm_ioctl_permit()'s order
    (drm_ioctl.c): ROOT_ONLY needs uid 0 (vgpu's CAP_SYS_ADMIN); AUTH needs a render
    file or an authenticated one; MASTER needs the master; a render file needs
    RENDER_ALLOW. `file` is a DrmFile (`uid`, `render`, `authenticated`, `master`)."""
    if flags & DRM_ROOT_ONLY and file.uid != 0:
        raise KmdError(errno.EACCES, f"needs root (DRM_ROOT_ONLY), caller uid {file.uid}")
    if flags & DRM_AUTH and not file.render and not file.authenticated:
        raise KmdError(errno.EACCES, f"needs an authenticated file (DRM_AUTH) on {file.node}")
    if flags & DRM_MASTER and not file.master:
        raise KmdError(errno.EACCES, f"needs the DRM master (DRM_MASTER); a {file.node} file is not")
    if not flags & DRM_RENDER_ALLOW and file.render:
        raise KmdError(errno.EACCES, f"not allowed on the render node {file.node} (no DRM_RENDER_ALLOW)")


def lookup(table: dict[int, IoctlDesc], request: int) -> IoctlDesc | None:
    if uapi._IOC_TYPE(request) != uapi.DRM_IOCTL_BASE:
        return None
    return table.get(uapi._IOC_NR(request))


def request_name(table: dict[int, IoctlDesc], request: int) -> str:
    """The request's table name for kmsg lines, or its hex code."""
    desc = lookup(table, request)
    return desc.name if desc else f"ioctl {request:#x}"


def dispatch(table: dict[int, IoctlDesc], dev, file, request: int, arg: bytes, extra: bytes):
    """Decode `request`, check it against its entry in `table`, size-adapt `arg` and
    run the handler (drm_ioctl() then drm_ioctl_kernel()).

    Errors: ENOTTY (not a DRM request, not in the table, or listed as not
    implemented), EINVAL (`_IOC_SIZE` differs from the struct passed, or a
    longer-than-known struct has a nonzero tail), EACCES (the entry's flags refuse
    this file, see drm_ioctl_permit), plus whatever the handler raises.
    """
    if uapi._IOC_TYPE(request) != uapi.DRM_IOCTL_BASE:
        raise KmdError(errno.ENOTTY, f"request {request:#x} is not a DRM ioctl")
    desc = table.get(uapi._IOC_NR(request))
    if desc is None:
        raise KmdError(errno.ENOTTY, f"unknown ioctl nr {uapi._IOC_NR(request):#x}")
    if not desc.implemented:
        raise KmdError(errno.ENOTTY, f"not implemented: {desc.func.why}")
    if uapi._IOC_SIZE(request) != len(arg):
        raise KmdError(errno.EINVAL, f"_IOC_SIZE {uapi._IOC_SIZE(request)} != arg_size {len(arg)}")
    size = ctypes.sizeof(desc.struct)
    # drm_ioctl: a shorter struct reads as zero-extended, a longer one must have a zero tail.
    if len(arg) > size and any(arg[size:]):
        raise KmdError(errno.EINVAL, "nonzero bytes past the known struct")
    drm_ioctl_permit(desc.flags, file)
    buf = bytearray(max(size, len(arg)))
    buf[: len(arg)] = arg
    args = desc.struct.from_buffer(buf)
    out = desc.func(dev, file, args, extra)
    if isinstance(out, PendingReply):
        complete = out._complete

        def finish() -> Reply:
            extra_out = complete() or b""  # updates args (a view of buf) first
            return Reply(0, bytes(buf[: len(arg)]), extra_out)

        return PendingReply(finish)
    return Reply(0, bytes(buf[: len(arg)]), out or b"")
