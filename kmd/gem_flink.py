"""GEM_FLINK and GEM_OPEN: global names for BOs (drm_gem.c, drm_gem_flink_ioctl and
drm_gem_open_ioctl), the pre-PRIME way two DRM files share a BO (DRI2, and IGT's
amdgpu tests on card0).

A name is device-global: any authenticated card0 file may open it. It is given
once per BO, the lowest free id from 1 (idr_alloc on dev->object_name_idr), and
stays valid while any file holds a handle to the BO; the last handle going takes
the name with it (drm_gem_object_handle_free), even if a PRIME export keeps the
BO. Both ioctls are DRM_AUTH without DRM_RENDER_ALLOW, so the render node and an
unauthenticated card0 file get EACCES from dispatch (kmd/drm_auth.py).
"""
from __future__ import annotations

import errno
import heapq

from .errors import check
from .gem import lookup_bo
from .prime import _grant


class FlinkNames:
    """The device's object_name_idr: name -> BO, and each named BO's name."""

    def __init__(self):
        self.names: dict[int, object] = {}    # name -> BufferObject
        self._name_of: dict[int, int] = {}    # id(BufferObject) -> name
        self._free: list[int] = []            # names given back, lowest first
        self._next = 1

    def name(self, bo) -> int:
        """`bo`'s name, given now if it has none."""
        name = self._name_of.get(id(bo))
        if name is None:
            if self._free:
                name = heapq.heappop(self._free)
            else:
                name, self._next = self._next, self._next + 1
            self.names[name] = bo
            self._name_of[id(bo)] = name
        return name

    def handles_gone(self, bo) -> None:
        """No handle names `bo` any more: its name, if it had one, is free again."""
        name = self._name_of.pop(id(bo), None)
        if name is not None:
            del self.names[name]
            heapq.heappush(self._free, name)


def gem_flink(dev, file, args, extra):
    """DRM_IOCTL_GEM_FLINK: `name`, the global name of this file's BO `handle`.

    ENOENT: no such handle. EACCES (by dispatch): render node, unauthenticated file.
    Linux's handler has no EINVAL (there is no padding to check)."""
    bo = lookup_bo(file, args.handle)
    args.name = dev.flink.name(bo)


def gem_open(dev, file, args, extra):
    """DRM_IOCTL_GEM_OPEN: a new handle of this file to the BO named `name` (a new
    one on every call, drm_gem_handle_create_tail), and the BO's `size` in bytes.
    Another uid gets access to the BO's file, as a PRIME import gives it
    (kmd/prime.py): holding the name is holding the BO.

    ENOENT: no BO has this name (0 never names one; Linux reads the name as an int,
    so one past INT_MAX finds nothing either). ENOSPC: the file's handle cap.
    EACCES (by dispatch): render node, unauthenticated file."""
    bo = dev.flink.names.get(args.name)
    check(bo is not None, errno.ENOENT, f"no BO has the name {args.name}")
    args.handle = file.add_bo(bo)
    args.size = bo.size
    _grant(dev, bo, file.uid)
