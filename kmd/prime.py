"""PRIME: sharing a BO between DRM files through a token (drm_prime.c, dma-buf.c).

Linux's PRIME_HANDLE_TO_FD wraps a GEM object in a dma-buf and returns an fd;
PRIME_FD_TO_HANDLE turns such an fd back into a GEM handle of the calling file,
naming the same object. vgpu cannot hand out fds (docs/design.md section 3): the
export is a positive 31-bit token naming MOUNT/prime/<token-hex>, a file vdev serves
(size = the BO's size; read/write reach the BO's bytes), and import takes the token.

The rules, as close to dma-buf's as a token allows (docs/kmd.md, "PRIME"):

- One export per BO (Linux caches it in obj->dma_buf): exporting a BO again, from
  any file, gives the same token.
- The export holds the BO: the BO lives while any file holds a handle to it **or**
  its export lives. A BO whose last handle is closed while exported keeps its memory,
  its file and its bo/<hex> name until the export goes.
- The export lives while any of these holds it: a DRM file that exported it, until
  that file is closed (the token stands in for the fd HANDLE_TO_FD returned, and a
  process's fds go when it exits; vgpu cannot see a token being "closed"); a DRM
  file that imported it, while that file still holds a handle to the BO (Linux's
  prime handle cache holds the dma-buf the same way); an open of
  MOUNT/prime/<token-hex> (a real fd of the dma-buf, e.g. the preload library's),
  until its release. When the last holder goes, the token is dead (ENOENT) and the
  BO goes too unless a handle still names it.
- Import into a file that already holds a handle to the BO returns that handle
  (drm_gem_prime_fd_to_handle's lookup), otherwise a new one; handle_count counts
  every handle of every file.
- BO files are capabilities (design section 4): an import by another uid gives that
  uid access to the BO's bo/<hex> link and its tmpfs file (a POSIX ACL entry on the
  file, kmd.shmem.ShmemStore.grant), as holding a dma-buf fd gives mmap access.
- Userptr BOs and BOs created VM_ALWAYS_VALID cannot be exported (EPERM, as
  amdgpu_gem_prime_export).
"""
from __future__ import annotations

import errno
import secrets

from vgpu import uapi

from .errors import KmdError, check
from .gem import lookup_bo

HANDLE_TO_FD_FLAGS = uapi.DRM_CLOEXEC | uapi.DRM_RDWR


class PrimeExport:
    """What a token names: one exported BO and whatever holds the export."""

    def __init__(self, dev, token: int, bo, exporter):
        self.dev = dev
        self.token = token
        self.bo = bo
        self.uid = exporter.uid          # the exporter's uid
        self.exporters: set[int] = set()  # ids of open DRM files that exported it
        self.importers: set[int] = set()  # ids of DRM files holding a handle from an import
        self.opens = 0                   # open files of MOUNT/prime/<token-hex>
        self.dead = False

    @property
    def size(self) -> int:
        return self.bo.size

    def holders(self) -> int:
        return len(self.exporters) + len(self.importers) + self.opens

    def may_access(self, uid: int) -> bool:
        """Who may open MOUNT/prime/<token-hex>: root, and the uids that may map the BO
        (its creator, the exporter and every uid that imported it)."""
        return uid == 0 or uid == self.uid or self.bo.may_access(uid)

    def hold(self) -> bool:
        """An open of MOUNT/prime/<token-hex> starts holding the export (vdev calls it
        at open); False if the export is dead already."""
        with self.dev.lock:
            if self.dead:
                return False
            self.opens += 1
            return True

    def unhold(self) -> None:
        """That open's release: it stops holding; the last holder frees the export,
        and the BO if no handle names it. Takes the device lock."""
        with self.dev.lock:
            self.opens -= 1
            _release_if_unheld(self.dev, self)

    def read(self, offset: int, size: int) -> bytes:
        """The BO's bytes (read() of the prime file). ENOENT once the export is dead."""
        if self.dead:
            raise KmdError(errno.ENOENT, f"prime/{self.token:x} is no longer exported")
        with self.dev.lock:   # not while an eviction moves the BO
            return self.bo.read(offset, size)

    def write(self, offset: int, data: bytes) -> int:
        """Store into the BO (write() of the prime file); ENOSPC past its end."""
        if self.dead:
            raise KmdError(errno.ENOENT, f"prime/{self.token:x} is no longer exported")
        with self.dev.lock:   # not while an eviction moves the BO
            n = self.bo.write(offset, data)
        if data and n == 0:
            raise KmdError(errno.ENOSPC, f"write past the end of prime/{self.token:x}")
        return n


class PrimeTokens:
    """The device's table of exports: token -> PrimeExport (device lock held for all)."""

    def __init__(self):
        self.by_token: dict[int, PrimeExport] = {}

    def get(self, token: int) -> PrimeExport | None:
        return self.by_token.get(token)

    def new_token(self) -> int:
        while True:
            token = secrets.randbits(31)
            if token and token not in self.by_token:
                return token

    def __len__(self) -> int:
        return len(self.by_token)


def _grant(dev, bo, uid: int) -> None:
    """Let `uid` map the BO: its bo/<hex> link (BufferObject.uids) and its tmpfs file
    (an ACL entry). A store that cannot take the ACL is logged, not fatal: the
    import still works for the GPU and for root."""
    if bo.may_access(uid):
        return
    bo.uids.add(uid)
    try:
        dev.memory.store.grant(bo.path, uid)
    except OSError as e:
        dev.kmsg.log(f"prime: cannot give uid {uid} access to the BO file of an import ({e.strerror}); "
                     f"bo/{bo.mmap_offset:x} stays unmappable for that uid")


def _release_if_unheld(dev, ex: PrimeExport) -> None:
    """Drop an export nothing holds any more; free its BO if no handle names it."""
    if ex.dead or ex.holders():
        return
    ex.dead = True
    dev.prime.by_token.pop(ex.token, None)
    bo = ex.bo
    if bo.export is ex:
        bo.export = None
    if bo.handle_count == 0 and not bo.freed:
        # A job of any file may still use it (it was mapped in a VM that dropped it
        # earlier): wait for every job in flight, as free_bo does for one file's.
        jobs = set()
        for f in dev.files.values():
            jobs |= f.jobs
        dev.free_bo(bo, jobs)


# -- hooks the Device calls (device lock held) ---------------------------------------

def handle_closed(dev, file, bo) -> None:
    """`file` closed its last handle to `bo`: an import of it by `file` ends there."""
    ex = bo.export
    if ex is not None and file.id in ex.importers:
        ex.importers.discard(file.id)
        _release_if_unheld(dev, ex)


def close_file(dev, file) -> None:
    """The last close of `file` (after its handles are gone): its exports and imports
    stop holding."""
    for ex in list(dev.prime.by_token.values()):
        if file.id in ex.exporters or file.id in ex.importers:
            ex.exporters.discard(file.id)
            ex.importers.discard(file.id)
            _release_if_unheld(dev, ex)


# -- ioctls -------------------------------------------------------------------------

def prime_handle_to_fd(dev, file, args, extra):
    """Export a BO: `fd` is a token naming MOUNT/prime/<token-hex> (the same token for
    every export of one BO). `flags` DRM_CLOEXEC and DRM_RDWR say how the preload
    library opens the file for the program; the KMD records nothing else.

    EINVAL: unknown flags. ENOENT: bad handle. EPERM: a userptr BO, or one created
    VM_ALWAYS_VALID (amdgpu_gem_prime_export)."""
    check(not args.flags & ~HANDLE_TO_FD_FLAGS, errno.EINVAL,
          f"unknown flags {args.flags & ~HANDLE_TO_FD_FLAGS:#x} (DRM_CLOEXEC | DRM_RDWR only)")
    bo = lookup_bo(file, args.handle)
    check(bo.userptr is None, errno.EPERM, "a userptr BO cannot be exported")
    check(not bo.flags & uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID, errno.EPERM,
          "a VM_ALWAYS_VALID BO cannot be exported")
    ex = bo.export
    if ex is None:
        ex = PrimeExport(dev, dev.prime.new_token(), bo, file)
        dev.prime.by_token[ex.token] = ex
        bo.export = ex
    ex.exporters.add(file.id)
    args.fd = ex.token


def prime_fd_to_handle(dev, file, args, extra):
    """Import a token exported by any file of the device (any process, any uid): a
    handle of this file to the same BO, the one it already holds if it has one.
    Another uid gets access to the BO's file (see the module docstring). `flags` is
    not read, as in Linux.

    ENOENT: no live export has this token (never exported, or every holder is gone;
    Linux says EBADF for a closed fd)."""
    ex = dev.prime.get(args.fd)
    check(ex is not None and not ex.dead, errno.ENOENT, f"no exported BO with token {args.fd:#x}")
    bo = ex.bo
    handle = next((h for h, b in sorted(file.bos.items()) if b is bo), 0)
    if not handle:
        handle = file.add_bo(bo)
    ex.importers.add(file.id)
    _grant(dev, bo, file.uid)
    args.handle = handle
