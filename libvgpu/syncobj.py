"""Syncobjs and sync files (libdrm drmSyncobj*, amdgpu_cs_syncobj_*, amdgpu_cs_fence_to_handle).

A Syncobj is a handle in one Device. Exported "fds" are tokens (docs/design.md 3): pass the
integer to another process, which imports it with `syncobj_import` into its own
Device. `sync_file_wait` waits on MOUNT/sync/<token-hex> with poll(), without
holding any Device (so it never blocks other calls). The handle and point arrays
of the requests are ctypes buffers the structs' ``handles``/``points`` fields point
to, as in libdrm (SYNCOBJ_QUERY's points are written there by the kernel).
"""
from __future__ import annotations

import ctypes
import errno
import os
import select
import time
from pathlib import Path

from vgpu import uapi
from vgpu.paths import mount_point
from vgpu.timeout import S64_MAX, deadline_ns

from .errors import error_for, from_oserror
from .handle import Handle
from .ioctl import AMDGPU_TIMEOUT_INFINITE, address


class Syncobj(Handle):
    """A syncobj handle of `dev` (libdrm uses a bare uint32_t). Released by
    :meth:`destroy` (libdrm's verb) or :meth:`free`, the same call."""

    _repr_fields = ("handle",)

    def __init__(self, dev, handle: int):
        self.dev, self.handle = dev, handle

    def free(self) -> None:
        syncobj_destroy(self)

    destroy = free


def _handles(syncobjs):
    """The u32 handle array a request's ``handles`` points to (kept alive by the caller)."""
    return (ctypes.c_uint32 * len(syncobjs))(*(s.handle for s in syncobjs))


def _points(points):
    """The u64 point array a request's ``points`` points to."""
    return (ctypes.c_uint64 * len(points))(*points)


def _same_dev(syncobjs, what: str):
    if not syncobjs:
        raise error_for(errno.EINVAL, f"{what}: no syncobjs")
    dev = syncobjs[0].dev
    if any(s.dev is not dev for s in syncobjs):
        raise error_for(errno.EINVAL, f"{what}: syncobjs of different devices")
    return dev


def _abs_s64(timeout_ns: int) -> int:
    """Relative ns -> the absolute CLOCK_MONOTONIC s64 the syncobj waits take
    (INT64_MAX for AMDGPU_TIMEOUT_INFINITE, as Mesa passes it: vgpu.timeout)."""
    return deadline_ns(timeout_ns, forever=S64_MAX)


def syncobj_create(dev, signaled: bool = False) -> Syncobj:
    """DRM_IOCTL_SYNCOBJ_CREATE (drmSyncobjCreate / amdgpu_cs_create_syncobj2)."""
    a = uapi.drm_syncobj_create(flags=uapi.DRM_SYNCOBJ_CREATE_SIGNALED if signaled else 0)
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_CREATE, a)
    return Syncobj(dev, a.handle)


def syncobj_destroy(syncobj: Syncobj) -> None:
    """DRM_IOCTL_SYNCOBJ_DESTROY (drmSyncobjDestroy). Idempotent."""
    if syncobj.handle == 0:
        return
    handle, syncobj.handle = syncobj.handle, 0
    if syncobj.dev.fd >= 0:
        syncobj.dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_DESTROY, uapi.drm_syncobj_destroy(handle=handle))


def syncobj_wait(dev, syncobjs: list[Syncobj], timeout_ns: int = AMDGPU_TIMEOUT_INFINITE,
                 wait_all: bool = True, wait_for_submit: bool = False) -> int:
    """DRM_IOCTL_SYNCOBJ_WAIT (drmSyncobjWait): relative `timeout_ns`; returns
    first_signaled. Raises VgpuTimeout (ETIME) on timeout."""
    flags = (uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL if wait_all else 0) | \
        (uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT if wait_for_submit else 0)
    dev = _same_dev(syncobjs, "syncobj_wait")
    handles = _handles(syncobjs)
    a = uapi.drm_syncobj_wait(handles=address(handles), count_handles=len(syncobjs), flags=flags,
                              timeout_nsec=_abs_s64(timeout_ns))
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_WAIT, a)
    return a.first_signaled


def syncobj_timeline_wait(dev, syncobjs: list[Syncobj], points: list[int],
                          timeout_ns: int = AMDGPU_TIMEOUT_INFINITE, flags: int = 0) -> int:
    """DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT (drmSyncobjTimelineWait); `flags` are
    DRM_SYNCOBJ_WAIT_FLAGS_*. Returns first_signaled; VgpuTimeout on timeout."""
    if len(points) != len(syncobjs):
        raise error_for(errno.EINVAL, "syncobj_timeline_wait: one point per syncobj")
    dev = _same_dev(syncobjs, "syncobj_timeline_wait")
    handles, pts = _handles(syncobjs), _points(points)
    a = uapi.drm_syncobj_timeline_wait(handles=address(handles), points=address(pts),
                                       count_handles=len(syncobjs), flags=flags,
                                       timeout_nsec=_abs_s64(timeout_ns))
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, a)
    return a.first_signaled


def _array(request: int, syncobjs: list[Syncobj], what: str) -> None:
    dev = _same_dev(syncobjs, what)
    handles = _handles(syncobjs)
    a = uapi.drm_syncobj_array(handles=address(handles), count_handles=len(syncobjs))
    dev.ioctl(request, a)


def syncobj_reset(syncobjs: list[Syncobj]) -> None:
    """DRM_IOCTL_SYNCOBJ_RESET (drmSyncobjReset)."""
    _array(uapi.DRM_IOCTL_SYNCOBJ_RESET, syncobjs, "syncobj_reset")


def syncobj_signal(syncobjs: list[Syncobj]) -> None:
    """DRM_IOCTL_SYNCOBJ_SIGNAL (drmSyncobjSignal)."""
    _array(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, syncobjs, "syncobj_signal")


def syncobj_timeline_signal(syncobjs: list[Syncobj], points: list[int]) -> None:
    """DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL (drmSyncobjTimelineSignal); point 0 is a
    binary signal."""
    if len(points) != len(syncobjs):
        raise error_for(errno.EINVAL, "syncobj_timeline_signal: one point per syncobj")
    dev = _same_dev(syncobjs, "syncobj_timeline_signal")
    handles, pts = _handles(syncobjs), _points(points)
    a = uapi.drm_syncobj_timeline_array(handles=address(handles), points=address(pts),
                                        count_handles=len(syncobjs))
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, a)


def syncobj_query(syncobjs: list[Syncobj], last_submitted: bool = False) -> list[int]:
    """DRM_IOCTL_SYNCOBJ_QUERY (drmSyncobjQuery2): each syncobj's signalled (or,
    with `last_submitted`, last submitted) timeline point."""
    dev = _same_dev(syncobjs, "syncobj_query")
    n = len(syncobjs)
    handles, pts = _handles(syncobjs), (ctypes.c_uint64 * n)()   # the kernel writes the points
    a = uapi.drm_syncobj_timeline_array(
        handles=address(handles), points=address(pts), count_handles=n,
        flags=uapi.DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED if last_submitted else 0)
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_QUERY, a)
    return list(pts)


def syncobj_transfer(dst: Syncobj, dst_point: int, src: Syncobj, src_point: int, flags: int = 0) -> None:
    """DRM_IOCTL_SYNCOBJ_TRANSFER (drmSyncobjTransfer)."""
    a = uapi.drm_syncobj_transfer(src_handle=src.handle, dst_handle=dst.handle, src_point=src_point,
                                  dst_point=dst_point, flags=flags)
    _same_dev([dst, src], "syncobj_transfer").ioctl(uapi.DRM_IOCTL_SYNCOBJ_TRANSFER, a)


def syncobj_export(syncobj: Syncobj) -> int:
    """DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD (drmSyncobjHandleToFD): a token another
    process imports with syncobj_import."""
    a = uapi.drm_syncobj_handle(handle=syncobj.handle)
    syncobj.dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, a)
    return a.fd


def syncobj_import(dev, token: int) -> Syncobj:
    """DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE (drmSyncobjFDToHandle)."""
    a = uapi.drm_syncobj_handle(fd=token)
    dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, a)
    return Syncobj(dev, a.handle)


def syncobj_export_sync_file(syncobj: Syncobj) -> int:
    """HANDLE_TO_FD with EXPORT_SYNC_FILE (drmSyncobjExportSyncFile): a sync-file
    token, a snapshot of the current fence (MOUNT/sync/<token-hex>)."""
    a = uapi.drm_syncobj_handle(handle=syncobj.handle, flags=uapi.DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE)
    syncobj.dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, a)
    return a.fd


def syncobj_import_sync_file(syncobj: Syncobj, token: int) -> None:
    """FD_TO_HANDLE with IMPORT_SYNC_FILE (drmSyncobjImportSyncFile): the sync
    file's fence replaces the syncobj's."""
    a = uapi.drm_syncobj_handle(handle=syncobj.handle, fd=token,
                                flags=uapi.DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE)
    syncobj.dev.ioctl(uapi.DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, a)


def sync_file_path(dev_or_mount, token: int) -> Path:
    """MOUNT/sync/<token-hex> for a Device, a mount point or a node path under it."""
    mount = dev_or_mount.mount if hasattr(dev_or_mount, "mount") else mount_point(dev_or_mount)
    return Path(mount) / "sync" / format(token, "x")


def sync_file_wait(dev_or_mount, token: int, timeout_ns: int = AMDGPU_TIMEOUT_INFINITE) -> bool:
    """poll() MOUNT/sync/<token-hex> (sync_wait in libsync): True once signalled,
    False on timeout. Uses no Device, so other threads keep issuing ioctls."""
    path = sync_file_path(dev_or_mount, token)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise from_oserror(e, f"open {path}") from e
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        deadline = None if timeout_ns == AMDGPU_TIMEOUT_INFINITE else time.monotonic() + timeout_ns / 1e9
        while True:
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000 + 0.999))
            if p.poll(left):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
    finally:
        os.close(fd)


def sync_file_status(dev_or_mount, token: int) -> str:
    """The status line of MOUNT/sync/<token-hex>: active, signaled [error=...], unsubmitted."""
    path = sync_file_path(dev_or_mount, token)
    try:
        return path.read_text().strip()
    except OSError as e:
        raise from_oserror(e, f"read {path}") from e


def cs_fence_to_handle(fence, what: int = uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ):
    """AMDGPU_FENCE_TO_HANDLE (amdgpu_cs_fence_to_handle): a CsFence as a new
    Syncobj (GET_SYNCOBJ) or as a token (GET_SYNCOBJ_FD, GET_SYNC_FILE_FD)."""
    a = uapi.drm_amdgpu_fence_to_handle()
    a.in_.fence = fence.as_uapi()
    a.in_.what = what
    dev = fence.context.dev
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_FENCE_TO_HANDLE, a)
    if what == uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ:
        return Syncobj(dev, a.out.handle)
    return a.out.handle
