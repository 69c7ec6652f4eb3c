"""ShmemStore: the tmpfs directory that holds one file per BO (docs/memory.md).

Every BO's bytes live in one file here and nowhere else: the daemon maps the file
into its VRAM/GTT aperture, a client maps the same file through the symlink
MOUNT/bo/<offset-hex>, so CPU and GPU share the pages (as memory behind a PCI BAR).

The directory is ``<base>/vgpu-<random>`` (base /dev/shm unless told otherwise),
mode 0711: others may reach a file whose name they were given, never list names.
A file is 0600, owned by the uid of the DRM file that created the BO, named by 128
random bits, in ``<dir>/bo/``. The daemon holds an exclusive flock on ``<dir>/.lock``
for its whole life, so :func:`clean_stale` can tell a dead daemon's directory from a
live one (pids are reused, locks die with their process).

Huge pages: a root daemon asked for them (``huge=True``; ``vgpu mount`` does) mounts
a private tmpfs on ``<dir>/bo`` with ``huge=within_size``, so every 2 MiB of a BO
that lies inside the file is one huge page, mapped by one PMD in the aperture (the
buddy allocator aligns blocks to their size) and in the clients. /dev/shm gives 4 KiB
pages: an engine streaming through a 64 MiB BO then takes 16,384 TLB misses, each a
two-level walk under virtualisation, and a 64 MiB fill measured ~30 % slower. A BO
smaller than 2 MiB still gets 4 KiB pages (within_size), so small BOs cost no more
memory. The private tmpfs is as large as the base one: unlinked files still mapped
by a client keep their pages, and a full tmpfs would SIGBUS a client's store.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import secrets
import shutil
import struct

DEFAULT_BASE = "/dev/shm"
PREFIX = "vgpu-"
LOCK_NAME = ".lock"
FILES_DIR = "bo"           # the BO files; the private tmpfs's mountpoint when there is one
TMPFS_SOURCE = "vgpu-bo"   # what /proc/self/mountinfo shows as the private tmpfs's source
MNT_DETACH = 2             # umount2(2): lazy, files still mapped keep their pages
MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"
# What the daemon raises vm.max_map_count to when it is root: one mapping per BO in
# the aperture, plus the interpreter's own, with room to spare.
WANTED_MAP_COUNT = 1 << 20
# Mappings kept free for the interpreter, numpy, thread stacks and client-side work.
MAP_HEADROOM = 8192
# The most BOs one device holds at once, whatever vm.max_map_count allows
# (docs/memory.md: GEM_CREATE past it fails with ENOMEM).
MAX_BOS = 262144
# A file's access ACL (acl(5)), in the kernel's xattr encoding (posix_acl_xattr.h):
# version 2, then (tag u16, perm u16, id u32) entries in tag order.
ACL_XATTR = "system.posix_acl_access"
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_ACL_UNDEFINED_ID = 0xFFFFFFFF


class StoreError(OSError):
    """The store cannot be set up (no tmpfs, too small): the message says what to do."""


def _hold_lock(path: str) -> int:
    """An fd holding the exclusive lock of `path`; OSError (and no fd left open) when
    someone else holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)  # a live daemon's store: no fd of ours may stay on its lock
        raise
    return fd


_libc = None


def _libc_call(name: str, *args) -> None:
    """mount(2) / umount2(2) through libc; OSError with the errno on failure."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{name}: {os.strerror(e)}")


def mount_huge_tmpfs(path: str, size: int) -> None:
    """Mount a private tmpfs of ``size`` bytes with huge=within_size on ``path``
    (root; OSError otherwise, or where the kernel has no transparent huge pages)."""
    opts = f"size={size},huge=within_size,mode=0711,nr_inodes=0".encode()
    _libc_call("mount", TMPFS_SOURCE.encode(), path.encode(), b"tmpfs", ctypes.c_ulong(0), opts)


def unmount_tmpfs(path: str) -> None:
    """Detach the private tmpfs on ``path`` if there is one (lazily: a client's
    mapping keeps its pages until it goes)."""
    if os.path.ismount(path):
        try:
            _libc_call("umount2", path.encode(), MNT_DETACH)
        except OSError:
            pass  # not ours to unmount (not root): rmtree then leaves it


def clean_stale(base: str = DEFAULT_BASE) -> list[str]:
    """Remove the directories of daemons that are gone (nobody holds their lock),
    with their private tmpfs. Returns the paths removed. Run by `vgpu mount`,
    `vgpu umount` and every new store."""
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        if not name.startswith(PREFIX) or os.path.islink(path) or not os.path.isdir(path):
            continue
        try:
            fd = _hold_lock(os.path.join(path, LOCK_NAME))
        except OSError:
            continue  # a live daemon holds it, or it is not ours to touch
        try:
            unmount_tmpfs(os.path.join(path, FILES_DIR))
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def posix_acl(uids: list[int]) -> bytes:
    """The ACL of a 0600 BO file that ``uids`` (sorted) may also read and write."""
    entries = [(_ACL_USER_OBJ, 6, _ACL_UNDEFINED_ID)]
    entries += [(_ACL_USER, 6, uid) for uid in uids]
    entries += [(_ACL_GROUP_OBJ, 0, _ACL_UNDEFINED_ID), (_ACL_MASK, 6, _ACL_UNDEFINED_ID),
                (_ACL_OTHER, 0, _ACL_UNDEFINED_ID)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def map_count_limit() -> int:
    """vm.max_map_count, raised to WANTED_MAP_COUNT first when we may (root)."""
    try:
        with open(MAX_MAP_COUNT) as f:
            current = int(f.read())
    except (OSError, ValueError):
        return 65530  # the kernel's default
    if current < WANTED_MAP_COUNT and os.geteuid() == 0:
        try:
            with open(MAX_MAP_COUNT, "w") as f:
                f.write(str(WANTED_MAP_COUNT))
            current = WANTED_MAP_COUNT
        except OSError:
            pass  # a container may forbid it: keep the lower limit
    return current


class ShmemStore:
    """One device's BO files. ``need`` bytes (VRAM + GTT) must fit in the tmpfs.
    ``huge``: put them on a private huge-page tmpfs when root (module docstring);
    ``self.huge`` says whether that happened."""

    def __init__(self, need: int, base: str | None = None, huge: bool = False):
        base = base or os.environ.get("VGPU_SHM_DIR") or DEFAULT_BASE
        clean_stale(base)
        try:
            st = os.statvfs(base)
        except OSError as e:
            raise StoreError(e.errno, f"BO store {base}: {e.strerror}; vgpu keeps BOs in a tmpfs "
                                      "(mount one there or pass --shm-dir)") from e
        free = st.f_bavail * st.f_frsize
        if free < need:
            raise StoreError(errno.ENOSPC,
                             f"BO store {base} has {free >> 20} MiB free but VRAM + GTT need "
                             f"{need >> 20} MiB: choose smaller --vram/--gtt, grow the tmpfs "
                             f"(mount -o remount,size=... {base}) or pass --shm-dir")
        # Made and locked under a name clean_stale() ignores, then renamed: another
        # daemon's clean_stale() must never see an unlocked directory of ours.
        name = secrets.token_hex(8)
        making = os.path.join(base, f".{PREFIX}new-{name}")
        os.mkdir(making, 0o700)
        self._lock_fd = _hold_lock(os.path.join(making, LOCK_NAME))
        os.chmod(making, 0o711)  # searchable, not listable
        self.path = os.path.join(base, PREFIX + name)
        os.rename(making, self.path)
        self.files = os.path.join(self.path, FILES_DIR)
        os.mkdir(self.files, 0o711)
        self.huge = False
        if huge and os.geteuid() == 0:
            try:
                mount_huge_tmpfs(self.files, st.f_blocks * st.f_frsize)
                self.huge = True
            except OSError:
                pass  # no THP, or a container without CAP_SYS_ADMIN: 4 KiB pages in base
        self.max_bos = max(0, min(MAX_BOS, map_count_limit() - MAP_HEADROOM))
        self._granted: dict[str, set[int]] = {}  # BO file -> uids given access by grant()

    def create(self, size: int, uid: int) -> tuple[str, int]:
        """A new zero-filled file of ``size`` bytes owned by ``uid`` (when we are root).
        Returns (path, fd); the caller maps the fd and closes it. Raises OSError."""
        path = os.path.join(self.files, secrets.token_hex(16))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
            if uid != os.geteuid() and os.geteuid() == 0:
                os.fchown(fd, uid, -1)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return path, fd

    def grant(self, path: str, uid: int) -> None:
        """Let ``uid`` read and write a BO's file too (a PRIME import by another uid,
        kmd/prime.py): a POSIX ACL entry ``user:<uid>:rw-`` next to the owner's, with
        mask rw- and nothing for group and others. Only the daemon changes it, so the
        whole ACL is written from the uids the store has granted. Raises OSError
        (EOPNOTSUPP on a tmpfs without ACLs, EPERM for a daemon that is not root and
        does not own the file)."""
        granted = self._granted.setdefault(path, set())
        granted.add(uid)
        os.setxattr(path, ACL_XATTR, posix_acl(sorted(granted)), follow_symlinks=False)

    def remove(self, path: str) -> None:
        """Unlink a BO's file: its name goes now, its pages with the last mapping."""
        self._granted.pop(path, None)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Remove the directory and everything in it (daemon exit)."""
        if self._lock_fd < 0:
            return
        unmount_tmpfs(self.files)
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = -1
