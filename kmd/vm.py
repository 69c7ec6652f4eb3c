"""Per-file GPU virtual memory (amdgpu_vm.c), the GEM_VA ioctl and the VM ioctl
(VMID reservation).

Each DRM file owns one VM: a list of mappings (VA range -> BO range + page flags)
kept for overlap checks and debugfs, and a hardware page table (kmd.hw.PageTable)
that the engines translate through.
"""
import bisect
import errno
from dataclasses import dataclass

from vgpu import uapi

from . import hw
from .errors import KmdError, check
from .fence import deadline, subscribe
from .gem import lookup_bo
from .ioctl import PendingReply
from .trace import DISABLED
from .vram import PAGE_SIZE

# amdgpu_vm.h keeps the bottom of the address space reserved; vgpu reserves 2 MiB
# and offers a 47-bit range, reported in DEV_INFO's virtual_address_offset/max.
VA_START = 0x200000
VA_END = 1 << 47
PAGE_FLAGS = uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE | uapi.AMDGPU_VM_PAGE_EXECUTABLE
VALID_VA_FLAGS = PAGE_FLAGS | uapi.AMDGPU_VM_DELAY_UPDATE | uapi.AMDGPU_VM_MTYPE_MASK


# GpuFault.access -> the AMDGPU_VM_PAGE_* permission the access needed.
ACCESS_PAGE_FLAG = {"read": uapi.AMDGPU_VM_PAGE_READABLE, "write": uapi.AMDGPU_VM_PAGE_WRITEABLE,
                    "exec": uapi.AMDGPU_VM_PAGE_EXECUTABLE}
VM_FAULT_REASONS = ("unmapped", "permission")  # what the MMU reports; "misaligned" is the shader's


def fault_status(fault) -> int:
    """VM_L2_PROTECTION_FAULT_STATUS for a hw.GpuFault, in the fields vgpu fills
    (uapi.VGPU_FAULT_STATUS_*): PERMISSION_FAULTS bit 0 when no PTE was valid, plus
    the permission the access needed; RW for a write. Never 0."""
    perms = ACCESS_PAGE_FLAG.get(fault.access, 0) | (1 if fault.reason == "unmapped" else 0)
    status = (perms << uapi.VGPU_FAULT_STATUS_PERMISSION_FAULTS_SHIFT) & uapi.VGPU_FAULT_STATUS_PERMISSION_FAULTS_MASK
    if fault.access == "write":
        status |= uapi.VGPU_FAULT_STATUS_RW
    return status


def pte_flags(flags: int) -> int:
    return ((hw.PTE_READ if flags & uapi.AMDGPU_VM_PAGE_READABLE else 0)
            | (hw.PTE_WRITE if flags & uapi.AMDGPU_VM_PAGE_WRITEABLE else 0)
            | (hw.PTE_EXEC if flags & uapi.AMDGPU_VM_PAGE_EXECUTABLE else 0))


@dataclass
class Mapping:
    va: int
    size: int
    bo: object
    offset: int
    flags: int  # AMDGPU_VM_PAGE_* bits

    @property
    def end(self) -> int:
        return self.va + self.size


class VirtualMemory:
    """A file's address space. Mappings never overlap; all values are page aligned.
    They are kept sorted by VA (for overlap checks and debugfs) and indexed by BO, so
    unmapping one BO costs O(its mappings + log n), not a scan of the VM."""

    #: the device's tracer and the DrmFile whose VM this is (set by Device.open_file)
    trace = DISABLED
    owner = None

    def __init__(self):
        self.page_table = hw.PageTable()
        self._starts: list[int] = []
        self._maps: list[Mapping] = []
        self._by_bo: dict[int, dict[int, Mapping]] = {}  # id(bo) -> {va: mapping}
        # The last page fault in this VM (amdgpu_vm.h's vm->fault_info), the answer
        # to AMDGPU_INFO_GPUVM_FAULT; all zero until the first fault.
        self.fault_info = uapi.drm_amdgpu_info_gpuvm_fault()

    def record_fault(self, fault) -> None:
        """Keep `fault` (a hw.GpuFault the MMU raised) as the VM's last page fault,
        as amdgpu_vm_update_fault_cache does. Faults that are not the MMU's (a
        misaligned access is the shader's) are not VM faults and are ignored."""
        if fault.reason not in VM_FAULT_REASONS:
            return
        self.fault_info = uapi.drm_amdgpu_info_gpuvm_fault(
            addr=fault.va, status=fault_status(fault),
            vmhub=uapi.AMDGPU_VMHUB_TYPE_GFX | 0 << uapi.AMDGPU_VMHUB_IDX_SHIFT)

    def mappings(self) -> list[Mapping]:
        return list(self._maps)

    def bos(self) -> list:
        """Every BO mapped here, once each."""
        return [next(iter(ms.values())).bo for ms in self._by_bo.values()]

    def maps_bo(self, bo) -> bool:
        """True if some range of `bo` is mapped here (O(1))."""
        return id(bo) in self._by_bo

    def overlapping(self, va: int, end: int) -> list[Mapping]:
        i = bisect.bisect_right(self._starts, va) - 1
        out = []
        for m in self._maps[max(i, 0):]:
            if m.va >= end:
                break
            if m.end > va:
                out.append(m)
        return out

    def map(self, bo, offset: int, va: int, size: int, flags: int) -> None:
        conflict = self.overlapping(va, va + size)
        if conflict:
            c = conflict[0]
            raise KmdError(errno.EINVAL, f"va {va:#x}-{va + size:#x} conflicts with {c.va:#x}-{c.end:#x}")
        self._insert(Mapping(va, size, bo, offset, flags))

    def _insert(self, m: Mapping) -> None:
        i = bisect.bisect_left(self._starts, m.va)
        self._starts.insert(i, m.va)
        self._maps.insert(i, m)
        self._by_bo.setdefault(id(m.bo), {})[m.va] = m
        # A BO evicted to SYSTEM has no valid PTEs; nor has a GDS/GWS/OA BO, whose
        # memory only GDS instructions reach (vgpu's engines have none, kmd/onchip.py).
        if m.bo.storage is not None and not m.bo.on_chip:
            self.page_table.map(m.va, m.bo.storage, m.offset, m.size, pte_flags(m.flags))
        if self.trace.on:
            self.trace.vm_mapping(self.owner, m, True)

    def _forget(self, m: Mapping) -> None:
        ms = self._by_bo[id(m.bo)]
        del ms[m.va]
        if not ms:
            del self._by_bo[id(m.bo)]

    def _remove(self, m: Mapping) -> None:
        i = bisect.bisect_left(self._starts, m.va)  # VAs are unique: mappings never overlap
        del self._starts[i], self._maps[i]
        self._forget(m)
        self.page_table.unmap(m.va, m.size)
        if self.trace.on:
            self.trace.vm_mapping(self.owner, m, False)

    def rebind(self, bo) -> None:
        """Point the PTEs of every mapping of `bo` at its current storage, or make them
        invalid when it has none (evicted to SYSTEM): after a move (kmd/residency.py),
        as amdgpu_vm_bo_update does for a moved BO."""
        for m in self._by_bo.get(id(bo), {}).values():
            if bo.storage is None:
                self.page_table.unmap(m.va, m.size)
            else:
                self.page_table.map(m.va, bo.storage, m.offset, m.size, pte_flags(m.flags))

    def unmap(self, bo, va: int) -> None:
        m = self._by_bo.get(id(bo), {}).get(va)
        if m is None:
            raise KmdError(errno.ENOENT, f"no mapping of this BO at va {va:#x}")
        self._remove(m)

    def clear(self, va: int, size: int) -> None:
        """Unmap [va, va+size), keeping the parts of mappings outside it (amdgpu_vm_bo_clear_mappings)."""
        end = va + size
        for m in self.overlapping(va, end):
            self._remove(m)
            if m.va < va:
                self._insert(Mapping(m.va, va - m.va, m.bo, m.offset, m.flags))
            if m.end > end:
                self._insert(Mapping(end, m.end - end, m.bo, m.offset + (end - m.va), m.flags))

    def unmap_bo(self, bo) -> None:
        doomed = list(self._by_bo.get(id(bo), {}).values())
        if len(doomed) <= 64:
            for m in doomed:
                self._remove(m)
        else:
            self._remove_all(doomed)

    def clear_all(self) -> None:
        for _ in self.clear_all_steps():
            pass

    def clear_all_steps(self):
        """Unmap everything, one mapping per step (a generator: the device runs it in
        slices when a file closes, Device.run_sliced)."""
        while self._maps:
            m = self._maps.pop()
            self._starts.pop()
            self._forget(m)
            self.page_table.unmap(m.va, m.size)
            if self.trace.on:
                self.trace.vm_mapping(self.owner, m, False)
            yield

    def _remove_all(self, doomed: list[Mapping]) -> None:
        """Remove many mappings in one pass (O(mappings), not O(n) per mapping)."""
        for m in doomed:
            self._forget(m)
            self.page_table.unmap(m.va, m.size)
            if self.trace.on:
                self.trace.vm_mapping(self.owner, m, False)
        gone = {id(m) for m in doomed}
        self._maps = [m for m in self._maps if id(m) not in gone]
        self._starts = [m.va for m in self._maps]


def gem_va(dev, file, args, extra):
    """MAP, UNMAP, CLEAR or REPLACE a VA range of the file's VM.

    EINVAL: nonzero padding, unknown operation or flags, VA/offset/size not 4 KiB
    aligned or zero size, range outside [virtual_address_offset, virtual_address_max),
    BO range past the end of the BO, MAP over an existing mapping.
    ENOENT: bad handle (MAP/UNMAP/REPLACE), UNMAP of a VA this BO is not mapped at.
    A GDS, GWS or OA BO maps like any other within its size, one page per unit
    (kmd/gem.py), as amdgpu_gem_va_ioctl allows; its pages have no valid PTEs, so
    an engine access through them faults (Linux's PTEs would point nowhere useful:
    shaders reach GDS through GDS instructions, not the VM)."""
    op, va, size, offset = args.operation, args.va_address, args.map_size, args.offset_in_bo
    check(args._pad == 0, errno.EINVAL, "nonzero padding")
    check(op in (uapi.AMDGPU_VA_OP_MAP, uapi.AMDGPU_VA_OP_UNMAP, uapi.AMDGPU_VA_OP_CLEAR,
                 uapi.AMDGPU_VA_OP_REPLACE), errno.EINVAL, f"unknown VA operation {op}")
    check(not args.flags & ~VALID_VA_FLAGS, errno.EINVAL, f"unknown VA flags {args.flags:#x}")
    check(va % PAGE_SIZE == 0 and offset % PAGE_SIZE == 0 and size % PAGE_SIZE == 0,
          errno.EINVAL, f"va {va:#x}, offset {offset:#x} or size {size:#x} not 4 KiB aligned")
    check(op == uapi.AMDGPU_VA_OP_UNMAP or size > 0, errno.EINVAL, "map_size is 0")
    check(VA_START <= va and va + size <= VA_END, errno.EINVAL,
          f"va {va:#x}+{size:#x} outside {VA_START:#x}-{VA_END:#x}")
    vm = file.vm
    if op == uapi.AMDGPU_VA_OP_CLEAR:
        vm.clear(va, size)
        return
    bo = lookup_bo(file, args.handle)
    if op == uapi.AMDGPU_VA_OP_UNMAP:
        vm.unmap(bo, va)
        return
    check(offset + size <= bo.size, errno.EINVAL,
          f"offset {offset:#x} + size {size:#x} past BO end {bo.size:#x}")
    if op == uapi.AMDGPU_VA_OP_REPLACE:
        vm.clear(va, size)
    flags = args.flags & PAGE_FLAGS
    if bo.userptr is not None and bo.userptr.readonly:
        flags &= ~uapi.AMDGPU_VM_PAGE_WRITEABLE  # amdgpu_vm_bo_update: a READONLY userptr
    vm.map(bo, offset, va, size, flags)


# amdgpu_vm_ioctl waits this long for the VM to go idle before it unreserves.
UNRESERVE_IDLE_TIMEOUT = 2.0


def vm_ioctl(dev, file, args, extra):
    """RESERVE_VMID and UNRESERVE_VMID (amdgpu_vm_ioctl, Linux 6.1): a file reserves
    the device's one reservable VMID (AMDGPU_VM_MAX_RESERVED_VMID is 1, see
    amdgpu_vmid_alloc_reserved), for tools such as SPM that must know which VMID its
    jobs run under. Reserving it again is a no-op; UNRESERVE first waits, at most
    2 s, for the fences of the file's jobs on the rings (in read(), as a PendingReply
    woken by them), then gives it
    back (a no-op if the file does not hold it). Closing the file gives it back
    (amdgpu_vm_fini). vgpu's engines do not look at VMIDs: the reservation is kept
    and enforced between files, nothing else changes. The reply is the request,
    unchanged.

    EINVAL: nonzero flags, unknown op, RESERVE_VMID while another file holds it."""
    a = args.in_
    check(a.flags == 0, errno.EINVAL, f"unknown VM flags {a.flags:#x}")
    holder = dev.reserved_vmid
    if holder is not None and holder.closed:
        dev.reserved_vmid = holder = None
    if a.op == uapi.AMDGPU_VM_OP_RESERVE_VMID:
        check(holder in (None, file), errno.EINVAL,
              f"Over limitation of reserved vmid: client {holder.id if holder else 0} holds it")
        dev.reserved_vmid = file
        return None
    if a.op != uapi.AMDGPU_VM_OP_UNRESERVE_VMID:
        raise KmdError(errno.EINVAL, f"unknown VM op {a.op}")

    def release():
        with dev.lock:
            if dev.reserved_vmid is file:
                dev.reserved_vmid = None

    fences = dev.file_fences(file)  # what amdgpu_vm_wait_idle waits for
    return PendingReply(ready=lambda: all(f.signaled for f in fences), subscribe=lambda wake: subscribe(fences, wake),
                        finish=release, deadline=deadline(UNRESERVE_IDLE_TIMEOUT))
