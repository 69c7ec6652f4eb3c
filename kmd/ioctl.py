"""How an ioctl is dispatched: permission flags, the table entry type, drm_ioctl().

The table itself is kmd/ioctl_table.py (Linux: drm_ioctls[] in drm_ioctl.c and
amdgpu_ioctls_kms[] in amdgpu_drv.c); this module is the machinery it is written
with and the dispatch that reads it.

A handler is `fn(dev, file, args, extra) -> bytes | PendingReply | None`: `args` is a
ctypes struct of the KMD's own size that the handler updates in place (it becomes
the reply struct), `extra` the flattened pointer data, the return value the reply's
out-data, or a PendingReply for a request that must wait (dispatch answers it at
once when it is decided already). Arguments are checked before any work is done; each handler's docstring
lists the errno values it returns.
"""
import ctypes
import errno
import time
from dataclasses import dataclass
from typing import Callable

from vgpu import uapi

from .errors import KmdError
from .fence import block_until

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
    """A request that completes later: a wait (WAIT_CS, WAIT_FENCES, GEM_WAIT_IDLE,
    the syncobj waits, VM UNRESERVE_VMID) or a CS waiting for room on its context.
    It never blocks by itself; whoever holds it drives it through four members:

    - ``ready() -> bool``: the request can complete now. Cheap, any thread, no lock.
    - ``subscribe(wake) -> cancel``: arrange for ``wake()`` whenever ready() may have
      become true (fence callbacks, kmd/fence.py); ``cancel()`` undoes it. ``wake``
      runs in the signalling thread, possibly under the device lock, so it must only
      hand work off (set an Event, queue a call on a loop).
    - ``deadline``: ``time.monotonic()`` seconds after which the request completes
      unsatisfied (a timeout); None: never.
    - ``finish()``: complete it, once ready() or past the deadline, from the state
      as it is then: updates the handler's args and returns the out-data (from
      dispatch: the Reply), or raises KmdError, which fails the read(). A finish
      that raised may be called again and raises the same.

    ``wait()`` drives it in the calling thread (kmd.fence.block_until). vdev drives
    it on its trio loop, woken through ``run_sync_soon`` (vdev/nodes.py), so a
    blocked read costs no thread. There is no other kind: every wait hangs on fences.
    """

    def __init__(self, *, ready: Callable[[], bool],
                 subscribe: Callable[[Callable[[], None]], Callable[[], None]],
                 finish: Callable[[], object], deadline: float | None = None,
                 fences: "Callable[[], list] | list" = ()):
        self._ready = ready
        self._subscribe = subscribe
        self._finish = finish
        self.deadline = deadline
        #: what a wait waits for (or a function giving it at completion): the
        #: timeline draws an arrow from each fence's signal to the wait's end
        self.fences = fences

    def ready(self) -> bool:
        return self._ready()

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        return self._subscribe(wake)

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def finish(self):
        return self._finish()

    def wait(self):
        """Block this thread until the request completes; returns what finish()
        returns (the Reply, from dispatch) or raises its KmdError."""
        block_until(self._ready, self._subscribe, self.deadline)
        return self._finish()

    def then(self, fn: Callable[[object], object]) -> "PendingReply":
        """The same wait, its result passed through ``fn`` (dispatch makes the Reply)."""
        finish = self._finish
        return PendingReply(ready=self._ready, subscribe=self._subscribe, deadline=self.deadline,
                            finish=lambda: fn(finish()), fences=self.fences)


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
    file or an authenticated one; MASTER needs the current master; a render file needs
    RENDER_ALLOW. `file` is a DrmFile (`uid`, `render`, `authenticated`, `master`;
    who is master and authenticated: kmd/drm_auth.py)."""
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


# The core's KMS ioctls (DRM_IOCTL_MODE_GETRESOURCES 0xA0 to DRM_IOCTL_MODE_GETFB2 0xCE)
# and WAIT_VBLANK (0x3A) that the table does not answer (kmd/kms.py answers the
# queries and dumb buffers as amdgpu does on a part without display): EOPNOTSUPP,
# what Linux gives where the feature is missing (drm_wait_vblank_ioctl without
# vblank support, drm_mode_atomic_ioctl without DRIVER_ATOMIC). vgpu has no display,
# as an MI100 has none: modetest finds no connectors, vbltest gets "Operation not
# supported".
NO_DISPLAY_NRS = frozenset(range(uapi.DRM_MODE_NR_FIRST, uapi.DRM_MODE_NR_LAST + 1)) | {uapi.DRM_WAIT_VBLANK_NR}


def request_name(table: dict[int, IoctlDesc], request: int) -> str:
    """The request's table name for kmsg lines, or its hex code."""
    desc = lookup(table, request)
    return desc.name if desc else f"ioctl {request:#x}"


#: (table id, request) -> (entry, struct size, render_ok) of a request that passed the
#: checks that depend on the request code alone (DRM type, known, implemented), so
#: that dispatch's lookup is one dict get; `render_ok`: drm_ioctl_permit cannot refuse
#: the entry to a render-node file. Each entry holds its table, so that the id in the
#: key names that table for as long as the entry lives.
_CHECKED: dict[tuple[int, int], tuple[IoctlDesc, int, bool, dict]] = {}


def _entry(table: dict[int, IoctlDesc], request: int) -> tuple[IoctlDesc, int, bool, dict]:
    """`request`'s _CHECKED entry (made on first use), or the KmdError dispatch raises."""
    if uapi._IOC_TYPE(request) != uapi.DRM_IOCTL_BASE:
        raise KmdError(errno.ENOTTY, f"request {request:#x} is not a DRM ioctl")
    desc = table.get(uapi._IOC_NR(request))
    if desc is None:
        if uapi._IOC_NR(request) in NO_DISPLAY_NRS:
            raise KmdError(errno.EOPNOTSUPP, f"ioctl nr {uapi._IOC_NR(request):#x} needs a display: "
                           "this part has no display (kmd/kms.py answers only the KMS queries)")
        raise KmdError(errno.ENOTTY, f"unknown ioctl nr {uapi._IOC_NR(request):#x}")
    if not desc.implemented:
        raise KmdError(errno.ENOTTY, f"not implemented: {desc.func.why}")
    render_ok = bool(desc.flags & DRM_RENDER_ALLOW) and not desc.flags & (DRM_ROOT_ONLY | DRM_MASTER)
    entry = (desc, ctypes.sizeof(desc.struct), render_ok, table)
    if uapi._IOC_SIZE(request) == entry[1]:  # the request codes clients send: a few per entry
        _CHECKED[(id(table), request)] = entry
    return entry


def permit(table: dict[int, IoctlDesc], file, request: int) -> None:
    """Refuse `request` for `file` as dispatch does before it decodes the struct:
    ENOTTY or EOPNOTSUPP for a request the table does not answer, EACCES from
    drm_ioctl_permit. Returns when dispatch would go on to the handler."""
    entry = _CHECKED.get((id(table), request))
    desc, _, render_ok, _ = entry if entry is not None else _entry(table, request)
    if not (render_ok and file.render):
        drm_ioctl_permit(desc.flags, file)


def dispatch(table: dict[int, IoctlDesc], dev, file, request: int, arg: bytes, extra: bytes):
    """Decode `request`, check it against its entry in `table`, size-adapt `arg` and
    run the handler (drm_ioctl() then drm_ioctl_kernel()).

    Errors: ENOTTY (not a DRM request, not in the table, or listed as not
    implemented), EINVAL (`_IOC_SIZE` differs from the struct passed, or a
    longer-than-known struct has a nonzero tail), EACCES (the entry's flags refuse
    this file, see drm_ioctl_permit), plus whatever the handler raises.
    """
    entry = _CHECKED.get((id(table), request))
    desc, size, render_ok, _ = entry if entry is not None else _entry(table, request)
    n = len(arg)
    if (request >> uapi._IOC_SIZESHIFT) & uapi._IOC_SIZEMASK != n:
        raise KmdError(errno.EINVAL, f"_IOC_SIZE {uapi._IOC_SIZE(request)} != arg_size {n}")
    # drm_ioctl: a shorter struct reads as zero-extended, a longer one must have a zero tail.
    if n > size and any(arg[size:]):
        raise KmdError(errno.EINVAL, "nonzero bytes past the known struct")
    if not (render_ok and file.render):
        drm_ioctl_permit(desc.flags, file)
    # A copy, not a view of a bytearray: from_buffer costs three times from_buffer_copy.
    args = desc.struct.from_buffer_copy(arg if n >= size else bytes(arg) + bytes(size - n))
    out = desc.func(dev, file, args, extra)
    if isinstance(out, PendingReply):
        # finish() updates args first, then the Reply is made
        pending = out.then(lambda extra_out: Reply(0, _sent_size(args, n), extra_out or b""))
        if pending.ready() or pending.expired():
            try:  # decided already: answer in the write()'s reply...
                return pending.finish()
            except KmdError:
                return pending  # ...unless it failed: an error of completion fails the read()
        return pending
    return Reply(0, _sent_size(args, n), out or b"")


def _sent_size(args, n: int) -> bytes:
    """The updated struct as `n` bytes, the size the caller sent: cut, or with the zero
    tail it had past the KMD's struct."""
    b = bytes(args)
    return b if len(b) == n else b[:n] if n < len(b) else b + bytes(n - len(b))
