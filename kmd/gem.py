"""GEM buffer objects and the GEM ioctls (GEM_CREATE, GEM_MMAP, GEM_CLOSE,
GEM_WAIT_IDLE, GEM_OP), after amdgpu_gem.c.

A BufferObject lives while any DRM file holds a handle to it (or a job still uses
it). Its bytes are one file of the device's ShmemStore, mapped into the VRAM or GTT
aperture at the BO's physical address (kmd.memory); `storage` views them there.
Each BO has an unguessable fake mmap offset naming MOUNT/bo/<offset-hex>, a
symlink to that file, so CPU mappings and the engines share the same pages.
"""
import errno
import secrets
import threading

import numpy as np

from vgpu import uapi

from .errors import KmdError, check
from .fence import abs_timeout_to_relative
from .ioctl import PendingReply
from .memory import Placement
from .vram import PAGE_SIZE, VramAllocation

DOMAIN_NAMES = {uapi.AMDGPU_GEM_DOMAIN_VRAM: "VRAM", uapi.AMDGPU_GEM_DOMAIN_GTT: "GTT"}
SUPPORTED_DOMAINS = uapi.AMDGPU_GEM_DOMAIN_VRAM | uapi.AMDGPU_GEM_DOMAIN_GTT
# Creation flags vgpu accepts; they are recorded and reported back, placement
# hints have no further effect on an emulated device.
SUPPORTED_CREATE_FLAGS = (
    uapi.AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
    | uapi.AMDGPU_GEM_CREATE_NO_CPU_ACCESS
    | uapi.AMDGPU_GEM_CREATE_CPU_GTT_USWC
    | uapi.AMDGPU_GEM_CREATE_VRAM_CLEARED
    | uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID
    | uapi.AMDGPU_GEM_CREATE_EXPLICIT_SYNC
    | uapi.AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS
)
MAX_ALIGNMENT = 1 << 30


class BufferObject:
    """One GEM object. `storage` is the uint8 array the hardware maps; `path` the
    shared-memory file behind it (and behind every CPU mapping)."""

    def __init__(self, size: int, alignment: int, preferred: int, flags: int,
                 placement: Placement, storage: np.ndarray, uid: int, owner_pid: int):
        self.size = size
        self.alignment = alignment
        self.domain = placement.domain  # where it was placed
        self.preferred_domains = preferred
        self.flags = flags
        self.placement = placement
        self.storage = storage
        self.uid = uid
        self.owner_pid = owner_pid
        self.mmap_offset = secrets.randbits(40) << 12  # unguessable, page aligned
        self.handle_count = 0
        self.busy_jobs = 0             # jobs in flight that reference it
        self.awaiting: set[int] = set()  # once closed: ids of jobs its memory waits for
        self.freed = False
        self.lock = threading.Lock()

    @property
    def vram(self) -> VramAllocation | None:
        """The VRAM block, or None for a GTT BO."""
        return self.placement.block if self.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM else None

    @property
    def path(self) -> str:
        return self.placement.path

    @property
    def gpu_offset(self) -> int:
        """The physical address: the offset in its domain's aperture."""
        return self.placement.offset

    def read(self, offset: int, size: int) -> bytes:
        """The BO's bytes as every CPU mapping sees them (ENOENT once freed)."""
        if self.freed:
            raise KmdError(errno.ENOENT, "BO freed")
        offset = min(max(offset, 0), self.size)
        return self.storage[offset: offset + max(size, 0)].tobytes()

    def write(self, offset: int, data: bytes) -> int:
        """Store into the BO's pages (seen at once by mappings and engines); bytes
        past the end are dropped. Returns the count stored."""
        if self.freed:
            raise KmdError(errno.ENOENT, "BO freed")
        offset = min(max(offset, 0), self.size)
        n = min(len(data), self.size - offset)
        self.storage[offset: offset + n] = np.frombuffer(data, np.uint8, n)
        return n


def lookup_bo(file, handle: int) -> BufferObject:
    bo = file.bos.get(handle)
    if bo is None:
        raise KmdError(errno.ENOENT, f"no GEM handle {handle}")
    return bo


def gem_create(dev, file, args, extra):
    """Create a BO in VRAM or GTT (VRAM is tried first when both are allowed).

    EINVAL: zero or oversized size, alignment not a power of two, unknown or no
    domain, unknown flags. ENOMEM: the domain is full (logged to kmsg)."""
    a = args.in_
    size = -(-a.bo_size // PAGE_SIZE) * PAGE_SIZE
    align = a.alignment or PAGE_SIZE
    check(a.bo_size > 0, errno.EINVAL, "bo_size is 0")
    check(align & (align - 1) == 0 and align <= MAX_ALIGNMENT, errno.EINVAL,
          f"alignment {a.alignment:#x} is not a power of two <= 1 GiB")
    check(a.domains & SUPPORTED_DOMAINS and not a.domains & ~SUPPORTED_DOMAINS, errno.EINVAL,
          f"unsupported domains {a.domains:#x} (VRAM and GTT only)")
    check(not a.domain_flags & ~SUPPORTED_CREATE_FLAGS, errno.EINVAL,
          f"unknown flags {a.domain_flags & ~SUPPORTED_CREATE_FLAGS:#x}")
    bo = dev.create_bo(file, size, max(align, PAGE_SIZE), a.domains, a.domain_flags)
    handle = file.add_bo(bo)
    args.out.handle = handle
    args.out._pad = 0


def gem_mmap(dev, file, args, extra):
    """Return the fake offset naming MOUNT/bo/<offset-hex>.

    EINVAL: nonzero padding. ENOENT: bad handle. EPERM: BO created NO_CPU_ACCESS."""
    check(args.in_._pad == 0, errno.EINVAL, "nonzero padding")
    bo = lookup_bo(file, args.in_.handle)
    check(not bo.flags & uapi.AMDGPU_GEM_CREATE_NO_CPU_ACCESS, errno.EPERM,
          "BO was created with NO_CPU_ACCESS")
    args.out.addr_ptr = bo.mmap_offset


def gem_close(dev, file, args, extra):
    """Drop a handle; the BO goes when its last handle (and job) goes.

    EINVAL: nonzero padding. ENOENT: bad handle."""
    check(args.pad == 0, errno.EINVAL, "nonzero padding")
    lookup_bo(file, args.handle)
    dev.close_handle(file, args.handle)


def gem_wait_idle(dev, file, args, extra):
    """Report whether the BO is idle (status 0) or still used by a job (status 1),
    waiting up to the absolute CLOCK_MONOTONIC timeout (in read(), as a
    PendingReply). ENOENT: bad handle. EINVAL: unknown flags."""
    check(args.in_.flags == 0, errno.EINVAL, "unknown flags")
    bo = lookup_bo(file, args.in_.handle)
    timeout = abs_timeout_to_relative(args.in_.timeout)

    def complete():
        idle = dev.wait_bo_idle(bo, timeout)
        args.out.status = 0 if idle else 1
        args.out.domain = bo.domain

    if bo.busy_jobs == 0 or timeout == 0:
        return complete()
    return PendingReply(complete)


def gem_op(dev, file, args, extra):
    """GET_GEM_CREATE_INFO returns the creation parameters as out-data (the struct
    the `value` pointer names); SET_PLACEMENT changes the preferred domains.

    ENOENT: bad handle. EINVAL: unknown op, or a placement outside VRAM|GTT."""
    bo = lookup_bo(file, args.handle)
    if args.op == uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO:
        info = uapi.drm_amdgpu_gem_create_in()
        info.bo_size = bo.size
        info.alignment = bo.alignment
        info.domains = bo.preferred_domains
        info.domain_flags = bo.flags
        return bytes(info)
    if args.op == uapi.AMDGPU_GEM_OP_SET_PLACEMENT:
        check(args.value & SUPPORTED_DOMAINS and not args.value & ~SUPPORTED_DOMAINS,
              errno.EINVAL, f"bad placement {args.value:#x}")
        bo.preferred_domains = args.value
        return None
    raise KmdError(errno.EINVAL, f"unknown GEM_OP {args.op}")
