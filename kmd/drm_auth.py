"""DRM master and authentication, as Linux's drm_auth.c and drm_file.c have them.

A master (struct drm_master) is a group of card0 files with one magic map. The
device has at most one current master (dev.drm_master). The rules:

- A file of the primary node (card0) opened while the device has no master becomes
  master: it gets a new group of its own, is authenticated, and is its owner
  (drm_master_open -> drm_new_set_master). Any other card0 file joins the group
  of the master current at its open, unauthenticated.
- Root (uid 0, vgpu's CAP_SYS_ADMIN) is authenticated at open, on either node
  (drm_file_alloc).
- A render-node file (renderD128) never has a master and never becomes one;
  drm_ioctl_permit does not apply DRM_AUTH to it (kmd/ioctl.py).
- GET_MAGIC gives a card0 file its magic, the lowest free id from 1 in its group's
  map; the master's AUTH_MAGIC of that magic authenticates it and spends the magic.
- The master's file closing, or DROP_MASTER, leaves the device without a master;
  the next card0 open, or a SET_MASTER, makes one.

drm_master_check_perm lets a file that was master take master again without
CAP_SYS_ADMIN only when its opener calls; vgpu does not know the calling process
of a request apart from its thread, so it takes the caller for the opener.
Leases (drm_lease.c) do not exist: there is no display to lease.
"""
from __future__ import annotations

import errno

from .errors import KmdError, check


class DrmMaster:
    """struct drm_master: one group of card0 files and its magic map."""

    def __init__(self, owner):
        self.owner = owner                    # the file that made it (is_master)
        self.magics: dict[int, object] = {}   # magic -> DrmFile, or None once used
        self.current = False                  # it is dev.drm_master

    def new_magic(self, f) -> int:
        """idr_alloc(magic_map, f, 1, 0): the lowest free id from 1."""
        m = 1
        while m in self.magics:
            m += 1
        self.magics[m] = f
        return m


def is_current_master(dev, f) -> bool:
    """drm_is_current_master: `f` owns the device's current master."""
    return f.is_master and f.drm_master is not None and f.drm_master is dev.drm_master


def file_opened(dev, f) -> None:
    """drm_file_alloc and drm_master_open for a new file `f`."""
    f.authenticated = f.uid == 0
    if f.render:
        return
    if dev.drm_master is None:
        _new_set_master(dev, f)
    else:
        f.drm_master = dev.drm_master


def file_closed(dev, f) -> None:
    """drm_master_release: its magic goes; if it was the current master, the device
    has none now."""
    m = f.drm_master
    if m is None:
        return
    if f.magic:
        m.magics.pop(f.magic, None)
    if is_current_master(dev, f):
        _drop_master(dev, f)
    f.drm_master = None


def _new_set_master(dev, f) -> None:
    f.drm_master = DrmMaster(f)
    f.is_master = f.authenticated = True
    _set_master(dev, f)


def _set_master(dev, f) -> None:
    dev.drm_master = f.drm_master
    f.drm_master.current = True
    f.was_master = True
    dev.kmsg.log(f"client {f.id} became the DRM master: {f.describe()}")


def _drop_master(dev, f) -> None:
    dev.drm_master.current = False
    dev.drm_master = None
    dev.kmsg.log(f"client {f.id} dropped the DRM master; the device has none")


def _check_perm(f) -> None:
    """drm_master_check_perm: a file that was master (its opener calling, see the
    module docstring), or root."""
    check(f.was_master or f.uid == 0, errno.EACCES,
          f"only root or a file that was master may set or drop master (uid {f.uid})")


def get_magic(dev, file, args, extra):
    """DRM_IOCTL_GET_MAGIC (drm_getmagic): `magic`, this file's magic in its
    master's map, made on the first call. Flags 0: EACCES on the render node (by
    dispatch); no errno of its own."""
    if not file.magic:
        file.magic = file.drm_master.new_magic(file)
    args.magic = file.magic


def auth_magic(dev, file, args, extra):
    """DRM_IOCTL_AUTH_MAGIC (drm_authmagic), DRM_MASTER: authenticate the file whose
    magic is `magic` in the caller's map; the magic is spent.

    EINVAL: the map has no file for `magic` (unknown, 0, spent, or given out under
    another master). EACCES (by dispatch): the caller is not the current master."""
    target = file.drm_master.magics.get(args.magic)
    check(target is not None, errno.EINVAL, f"no file waits with magic {args.magic}")
    target.authenticated = True
    file.drm_master.magics[args.magic] = None   # idr_replace(..., NULL, magic)
    dev.kmsg.log(f"client {file.id} authenticated client {target.id} (magic {args.magic})")


def set_master(dev, file, args, extra):
    """DRM_IOCTL_SET_MASTER (drm_setmaster_ioctl): make this card0 file the master.
    A no-op for the current master; a file that never owned a master gets a group
    of its own (drm_new_set_master).

    EACCES: neither root nor a file that was master (drm_master_check_perm), or the
    render node (by dispatch). EBUSY: another file is master."""
    _check_perm(file)
    if is_current_master(dev, file):
        return
    check(dev.drm_master is None, errno.EBUSY,
          f"client {dev.drm_master.owner.id if dev.drm_master else 0} is the DRM master")
    if not file.is_master:
        old = file.drm_master
        if file.magic:   # its magic belonged to the old group's map
            old.magics.pop(file.magic, None)
            file.magic = 0
        _new_set_master(dev, file)
        return
    _set_master(dev, file)


def drop_master(dev, file, args, extra):
    """DRM_IOCTL_DROP_MASTER (drm_dropmaster_ioctl): the device has no master after.

    EACCES: neither root nor a file that was master, or the render node (by
    dispatch). EINVAL: this file is not the current master."""
    _check_perm(file)
    if not is_current_master(dev, file):
        raise KmdError(errno.EINVAL, "this file is not the DRM master")
    _drop_master(dev, file)
