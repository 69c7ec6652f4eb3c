"""The ioctl dispatch table: `_IOC_NR` -> handler, like drm_ioctl() and drm-shim.

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


@dataclass
class Handler:
    name: str
    fn: Callable
    struct: type


HANDLERS: dict[int, Handler] = {}


def ioctl(name: str):
    """Register the decorated function as the handler of uapi.IOCTLS entry `name`."""

    def register(fn):
        nr = next(nr for nr, d in uapi.IOCTLS.items() if d.name == name)
        HANDLERS[nr] = Handler(name, fn, uapi.IOCTLS[nr].struct)
        return fn

    return register


def request_name(request: int) -> str:
    d = uapi.IOCTLS.get(uapi._IOC_NR(request)) if uapi._IOC_TYPE(request) == uapi.DRM_IOCTL_BASE else None
    return d.name if d else f"ioctl {request:#x}"


def dispatch(dev, file, request: int, arg: bytes, extra: bytes):
    """Decode `request`, size-adapt `arg` and run its handler.

    Errors: ENOTTY (not a DRM request or no handler), EINVAL (`_IOC_SIZE` differs from
    the struct passed, or a longer-than-known struct has a nonzero tail), plus whatever
    the handler raises.
    """
    if uapi._IOC_TYPE(request) != uapi.DRM_IOCTL_BASE:
        raise KmdError(errno.ENOTTY, f"request {request:#x} is not a DRM ioctl")
    handler = HANDLERS.get(uapi._IOC_NR(request))
    if handler is None:
        raise KmdError(errno.ENOTTY, f"unhandled ioctl nr {uapi._IOC_NR(request):#x}")
    if uapi._IOC_SIZE(request) != len(arg):
        raise KmdError(errno.EINVAL, f"{handler.name}: _IOC_SIZE {uapi._IOC_SIZE(request)} != arg_size {len(arg)}")
    size = ctypes.sizeof(handler.struct)
    # drm_ioctl: a shorter struct reads as zero-extended, a longer one must have a zero tail.
    if len(arg) > size and any(arg[size:]):
        raise KmdError(errno.EINVAL, f"{handler.name}: nonzero bytes past the known struct")
    buf = bytearray(max(size, len(arg)))
    buf[: len(arg)] = arg
    args = handler.struct.from_buffer(buf)
    out = handler.fn(dev, file, args, extra)
    if isinstance(out, PendingReply):
        complete = out._complete

        def finish() -> Reply:
            extra_out = complete() or b""  # updates args (a view of buf) first
            return Reply(0, bytes(buf[: len(arg)]), extra_out)

        return PendingReply(finish)
    return Reply(0, bytes(buf[: len(arg)]), out or b"")
