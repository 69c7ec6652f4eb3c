"""GEM buffer objects and the GEM ioctls (GEM_CREATE, GEM_MMAP, GEM_CLOSE,
GEM_WAIT_IDLE, GEM_OP, GEM_METADATA), after amdgpu_gem.c.

A BufferObject lives while any DRM file holds a handle to it (or a job still uses
it). Its bytes are one file of the device's ShmemStore, mapped into the VRAM or GTT
aperture at the BO's physical address (kmd.memory); `storage` views them there.
Each BO has an unguessable fake mmap offset naming MOUNT/bo/<offset-hex>, a
symlink to that file, so CPU mappings and the engines share the same pages.
"""
import ctypes
import errno
import os
import secrets
import threading

import numpy as np

from vgpu import uapi
from vgpu.timeout import amdgpu_seconds_left

from .errors import KmdError, check
from .fence import deadline, subscribe
from .ioctl import PendingReply
from .memory import SYSTEM, Placement
from .onchip import NAMES as ON_CHIP_NAMES, ON_CHIP_DOMAINS, units as on_chip_units
from .vram import PAGE_SIZE, VramAllocation

DOMAIN_NAMES = {uapi.AMDGPU_GEM_DOMAIN_VRAM: "VRAM", uapi.AMDGPU_GEM_DOMAIN_GTT: "GTT", SYSTEM: "CPU",
                **ON_CHIP_NAMES}
SUPPORTED_DOMAINS = uapi.AMDGPU_GEM_DOMAIN_VRAM | uapi.AMDGPU_GEM_DOMAIN_GTT
# What GEM_CREATE takes: VRAM and GTT, and the on-chip GDS, GWS and OA (kmd/onchip.py).
DOORBELL = uapi.AMDGPU_GEM_DOMAIN_DOORBELL
# What GEM_CREATE takes also: DOORBELL, the doorbell pages of user queues (kmd/userq.py).
CREATE_DOMAINS = SUPPORTED_DOMAINS | ON_CHIP_DOMAINS | DOORBELL
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


def random_mmap_offset() -> int:
    """An unguessable, page-aligned fake mmap offset (40 random bits, as a DRM offset is
    a page number in a large range). Not unique by itself: 100,000 live BOs draw a
    repeat with a probability of about 0.5 %, so the device redraws one in use."""
    return secrets.randbits(40) << 12

class BufferObject:
    """One GEM object. `storage` is the uint8 array the hardware maps; `path` the
    shared-memory file behind it (and behind every CPU mapping)."""

    def __init__(self, size: int, alignment: int, preferred: int, flags: int,
                 placement: Placement, storage: np.ndarray, uid: int, owner_pid: int):
        self.size = size
        self.alignment = alignment
        self.domain = placement.domain  # where it lives now (kmd/residency.py moves it)
        self.preferred_domains = preferred
        self.flags = flags
        # GEM_METADATA (amdgpu_bo_user: tiling_flags, metadata, metadata_flags).
        self.tiling_flags = 0
        self.metadata = b""
        self.metadata_flags = 0
        self.placement = placement
        self.storage = storage
        self.uid = uid
        self.owner_pid = owner_pid
        self.mmap_offset = random_mmap_offset()  # the device makes it unique (Device.create_bo)
        self.handle_count = 0
        self.busy_jobs = 0             # jobs in flight that reference it
        self.awaiting: set[int] = set()  # once closed: ids of jobs its memory waits for
        self.fences: set = set()       # of the submitted jobs in flight that use it (its dma_resv)
        self.freed = False
        self.lock = threading.Lock()
        self.uids = {uid}              # who may map it: the creator, and importers (kmd/prime.py)
        self.export = None             # its kmd.prime.PrimeExport while exported
        self.userptr = None            # kmd.userptr.UserPages for a GEM_USERPTR BO
        self.pin_count = 0             # > 0: never moved (amdgpu_bo_pin); userptr BOs are pinned

    def relocate(self, placement: Placement, storage: np.ndarray | None) -> None:
        """Its file now lives at `placement` (kmd/residency.py): the domain, the
        physical address and the view the MMU maps change; the file does not."""
        self.placement, self.storage, self.domain = placement, storage, placement.domain

    def may_access(self, uid: int) -> bool:
        """True if `uid` may follow bo/<hex> and open the BO's file: root, its creator,
        or a uid that imported it (PRIME)."""
        return uid == 0 or uid in self.uids

    @property
    def vram(self) -> VramAllocation | None:
        """The VRAM block, or None for a GTT BO."""
        return self.placement.block if self.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM else None

    @property
    def on_chip(self) -> bool:
        """A GDS, GWS or OA BO: no bytes, no BO file (kmd/onchip.py)."""
        return self.domain in ON_CHIP_NAMES

    @property
    def where(self) -> str:
        """Its placement now, for debugfs and crash dumps: vram@0x.., gtt@0x..,
        cpu (evicted out of both apertures), gds@0x.."""
        if self.on_chip:
            return f"{ON_CHIP_NAMES[self.domain].lower()}@{self.gpu_offset:#x}"
        if self.domain == SYSTEM:
            return "cpu"
        return f"{DOMAIN_NAMES[self.domain].lower()}@{self.gpu_offset:#x}"

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
        size = min(max(size, 0), self.size - offset)
        if self.storage is None:   # in SYSTEM: the file itself
            with open(self.path, "rb", buffering=0) as f:
                return os.pread(f.fileno(), size, offset).ljust(size, b"\0")
        return self.storage[offset: offset + size].tobytes()

    def write(self, offset: int, data: bytes) -> int:
        """Store into the BO's pages (seen at once by mappings and engines); bytes
        past the end are dropped. Returns the count stored."""
        if self.freed:
            raise KmdError(errno.ENOENT, "BO freed")
        offset = min(max(offset, 0), self.size)
        n = min(len(data), self.size - offset)
        if self.storage is None:   # in SYSTEM: the file itself
            with open(self.path, "r+b", buffering=0) as f:
                return os.pwrite(f.fileno(), memoryview(data)[:n], offset)
        self.storage[offset: offset + n] = np.frombuffer(data, np.uint8, n)
        return n


def lookup_bo(file, handle: int) -> BufferObject:
    bo = file.bos.get(handle)
    if bo is None:
        raise KmdError(errno.ENOENT, f"no GEM handle {handle}")
    return bo


def gem_create(dev, file, args, extra):
    """Create a BO in VRAM or GTT (VRAM is tried first when both are allowed), or in
    an on-chip domain, GDS, GWS or OA (see _create_on_chip).

    EINVAL: zero or oversized size, alignment not a power of two, unknown or no
    domain, unknown flags, an on-chip domain with VM_ALWAYS_VALID. ENOMEM: the
    domain is full (logged to kmsg)."""
    a = args.in_
    size = -(-a.bo_size // PAGE_SIZE) * PAGE_SIZE
    align = a.alignment or PAGE_SIZE
    check(a.bo_size > 0, errno.EINVAL, "bo_size is 0")
    check(align & (align - 1) == 0 and align <= MAX_ALIGNMENT, errno.EINVAL,
          f"alignment {a.alignment:#x} is not a power of two <= 1 GiB")
    check(a.domains & CREATE_DOMAINS and not a.domains & ~CREATE_DOMAINS, errno.EINVAL,
          f"unsupported domains {a.domains:#x} (VRAM, GTT, GDS, GWS, OA)")
    check(not a.domain_flags & ~SUPPORTED_CREATE_FLAGS, errno.EINVAL,
          f"unknown flags {a.domain_flags & ~SUPPORTED_CREATE_FLAGS:#x}")
    if a.domains & ON_CHIP_DOMAINS:
        bo = _create_on_chip(dev, file, a)
    elif a.domains & DOORBELL:
        bo = _create_doorbell(dev, file, size, a)
    else:
        bo = dev.create_bo(file, size, max(align, PAGE_SIZE), a.domains, a.domain_flags)
    handle = file.add_bo(bo)
    args.out.handle = handle
    args.out._pad = 0


def _create_on_chip(dev, file, a) -> BufferObject:
    """amdgpu_gem_create_ioctl's GDS/GWS/OA path: refused with VM_ALWAYS_VALID (such
    a BO must travel in the BO list), made NO_CPU_ACCESS (so GEM_MMAP answers
    EPERM), sized and aligned in the domain's units as amdgpu_bo_create() does
    (GDS: bytes rounded up to 4; GWS, OA: entries), and placed in the first of the
    named on-chip domains with room (GDS, GWS, OA). VRAM or GTT named alongside is
    kept as a preference but not tried (Linux would try them first with one page
    per unit). The BO has no bytes and no BO file (kmd/onchip.py).

    Its size is one page per unit, as amdgpu_bo_create's `size <<= PAGE_SHIFT`
    makes the GEM object: GEM_OPEN, GET_GEM_CREATE_INFO and GEM_VA's bounds see
    that size (a GDS BO of 1024 bytes is 1024 pages; libdrm maps it a page at a
    time), and the alignment reported is page_align << PAGE_SHIFT. The heap
    counts units (Placement.block).

    EINVAL: VM_ALWAYS_VALID. ENOMEM: no named on-chip heap has room (logged)."""
    check(not a.domain_flags & uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID, errno.EINVAL,
          "GDS bo cannot be per-vm-bo (VM_ALWAYS_VALID with a GDS, GWS or OA domain)")
    flags = a.domain_flags | uapi.AMDGPU_GEM_CREATE_NO_CPU_ACCESS
    size, align = on_chip_units(a.domains, a.bo_size, a.alignment)
    try:
        domain, block = dev.memory.onchip.alloc(a.domains, size, align)
    except MemoryError as e:
        dev.kmsg.log(f"out of memory: cannot allocate {size} units in "
                     f"{'|'.join(n for d, n in ON_CHIP_NAMES.items() if d & a.domains)} "
                     f"for client {file.id} (pid {file.pid}): {e}")
        raise KmdError(errno.ENOMEM, f"out of on-chip memory ({size} units)") from None
    # amdgpu_bo_create: GWS/OA page_align = byte_align, GDS ALIGN(byte_align, 4);
    # GEM_OP reports page_alignment << PAGE_SHIFT (0 stays 0).
    page_align = a.alignment if a.domains & (uapi.AMDGPU_GEM_DOMAIN_GWS | uapi.AMDGPU_GEM_DOMAIN_OA) \
        else -(-a.alignment // 4) * 4
    return BufferObject(size * PAGE_SIZE, page_align * PAGE_SIZE, a.domains, flags,
                        Placement(domain, block, ""), np.zeros(0, np.uint8), file.uid, file.pid)


def _create_doorbell(dev, file, size: int, a) -> BufferObject:
    """A DOORBELL BO: on hardware a page of the doorbell BAR, here a shared-memory
    page like any BO's (placed in GTT), pinned so that a queue's worker always finds
    its doorbell words where it reads them. It may be CPU-mapped (the client writes
    its doorbells there); DOORBELL goes with no other domain (EINVAL)."""
    check(a.domains == DOORBELL, errno.EINVAL, f"DOORBELL goes with no other domain ({a.domains:#x})")
    bo = dev.create_bo(file, size, PAGE_SIZE, uapi.AMDGPU_GEM_DOMAIN_GTT, a.domain_flags)
    bo.preferred_domains = DOORBELL
    bo.doorbell = True
    bo.pin_count += 1
    return bo


def gem_mmap(dev, file, args, extra):
    """Return the fake offset naming MOUNT/bo/<offset-hex>.

    EINVAL: nonzero padding. ENOENT: bad handle. EPERM: BO created NO_CPU_ACCESS, or
    a userptr BO (the CPU has its pages already; amdgpu_gem_mmap_ioctl)."""
    check(args.in_._pad == 0, errno.EINVAL, "nonzero padding")
    args.out.addr_ptr = gem_mmap_offset(file, args.in_.handle)


def gem_mmap_offset(file, handle: int) -> int:
    """The fake mmap offset of `file`'s BO `handle` (GEM_MMAP, MODE_MAP_DUMB).
    ENOENT: bad handle. EPERM: NO_CPU_ACCESS or userptr (amdgpu_mode_dumb_mmap)."""
    bo = lookup_bo(file, handle)
    check(not bo.flags & uapi.AMDGPU_GEM_CREATE_NO_CPU_ACCESS, errno.EPERM,
          "BO was created with NO_CPU_ACCESS")
    check(bo.userptr is None, errno.EPERM, "a userptr BO is mapped by its owner's own pointer")
    return bo.mmap_offset


def gem_close(dev, file, args, extra):
    """Drop a handle; the BO goes when its last handle (and job) goes.

    EINVAL: nonzero padding. ENOENT: bad handle."""
    check(args.pad == 0, errno.EINVAL, "nonzero padding")
    lookup_bo(file, args.handle)
    dev.close_handle(file, args.handle)


def gem_wait_idle(dev, file, args, extra):
    """Report whether the BO is idle (status 0) or still used by a job (status 1),
    waiting up to the absolute CLOCK_MONOTONIC timeout (top bit set: forever) for the
    fences of the jobs submitted so far that use it (amdgpu_gem_wait_idle_ioctl on
    the BO's reservation object; fence errors do not matter). In read(), as a
    PendingReply woken by those fences. ENOENT: bad handle. EINVAL: unknown flags."""
    check(args.in_.flags == 0, errno.EINVAL, "unknown flags")
    bo = lookup_bo(file, args.in_.handle)
    fences = list(bo.fences)
    until = deadline(amdgpu_seconds_left(args.in_.timeout))

    def finish():
        args.out.status = int(not all(f.signaled for f in fences))
        args.out.domain = bo.domain

    return PendingReply(ready=lambda: all(f.signaled for f in fences),
                        subscribe=lambda wake: subscribe(fences, wake), finish=finish, deadline=until,
                        fences=fences)


def gem_op(dev, file, args, extra):
    """GET_GEM_CREATE_INFO returns the creation parameters as out-data (the struct
    the `value` pointer names); SET_PLACEMENT changes the preferred domains.

    ENOENT: bad handle. EINVAL: unknown op, or a placement outside VRAM|GTT.
    EPERM: SET_PLACEMENT of a userptr BO (amdgpu_gem_op_ioctl)."""
    bo = lookup_bo(file, args.handle)
    if args.op == uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO:
        info = uapi.drm_amdgpu_gem_create_in()
        info.bo_size = bo.size
        info.alignment = bo.alignment
        info.domains = bo.preferred_domains
        info.domain_flags = bo.flags
        return bytes(info)
    if args.op == uapi.AMDGPU_GEM_OP_SET_PLACEMENT:
        check(bo.userptr is None, errno.EPERM, "a userptr BO stays in GTT")
        check(args.value & SUPPORTED_DOMAINS and not args.value & ~SUPPORTED_DOMAINS,
              errno.EINVAL, f"bad placement {args.value:#x}")
        bo.preferred_domains = args.value
        return None
    raise KmdError(errno.EINVAL, f"unknown GEM_OP {args.op}")


METADATA_MAX_BYTES = uapi._drm_amdgpu_gem_metadata_data.data.size   # 64 dwords, 256 bytes


def gem_metadata(dev, file, args, extra):
    """SET_METADATA keeps the BO's tiling flags (`data.tiling_info`) and up to 64
    dwords of UMD metadata (`data.data_size_bytes` bytes of `data.data`) with their
    `data.flags`; GET_METADATA returns the three (amdgpu_gem_metadata_ioctl with
    amdgpu_bo_set_tiling_flags, amdgpu_bo_set_metadata and amdgpu_bo_get_metadata).
    A SET of 0 bytes drops the metadata and keeps the old flags, as
    amdgpu_bo_set_metadata does; GET leaves `data.data` past the stored bytes as
    sent. The tiling flags are not checked: Linux checks TILE_SPLIT only for
    families up to CZ, and vgpu reports AI. Any other op does nothing and succeeds,
    as in Linux (the ioctl returns the reserve's 0).

    ENOENT: bad handle. EINVAL: SET with data_size_bytes over 256."""
    bo = lookup_bo(file, args.handle)
    d = args.data
    if args.op == uapi.AMDGPU_GEM_METADATA_OP_GET_METADATA:
        d.tiling_info = bo.tiling_flags
        d.data_size_bytes = len(bo.metadata)
        ctypes.memmove(ctypes.addressof(d.data), bo.metadata, len(bo.metadata))
        d.flags = bo.metadata_flags
    elif args.op == uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA:
        check(d.data_size_bytes <= METADATA_MAX_BYTES, errno.EINVAL,
              f"data_size_bytes {d.data_size_bytes} over {METADATA_MAX_BYTES}")
        bo.tiling_flags = d.tiling_info
        if d.data_size_bytes:
            bo.metadata = bytes(d.data)[:d.data_size_bytes]
            bo.metadata_flags = d.flags
        else:
            bo.metadata = b""
