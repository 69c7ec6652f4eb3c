"""Memcheck: what compute-sanitizer's memcheck tool does for CUDA, for umd programs
(docs/umd.md, "Memcheck").

It is on when VGPU_MEMCHECK=1 is set as umd is imported, or after `enable()` (for the
devices opened afterwards, and for an open one that has allocated nothing yet). Then
each device's pool is a :class:`GuardedPool`:

- every allocation is a BO of its own, mapped between two unmapped guard pages, with
  the array's end at the end of its last page: an access past the end of an array
  (or before the page its start is in) is a GPU page fault;
- a freed allocation's BO is unmapped and freed once the work queued before the free
  is done, and its VA range stays reserved (quarantined): a later access through a
  stale address is a page fault too;
- such a fault raises :class:`MemcheckError` (a GPUFault) whose report names the
  kind of access and its size, the kernel, the source line and its text, the block
  and the thread, the address, the array (the kernel argument it was reached
  through, its shape and dtype), the offset and element, and where the array was
  allocated (and freed);
- freeing a DeviceArray twice, or using one after its free, raises MemcheckError
  saying where it was allocated and freed;
- at exit, the allocations still live are listed as leaks.

Reports go to stderr as they happen, every line prefixed "========= " as
compute-sanitizer's are, and the exceptions carry them. Off, nothing of this runs: the
pool is the plain caching MemoryPool, and no launch, copy or free checks anything more.
"""
from __future__ import annotations

import atexit
import bisect
import dataclasses
import linecache
import os
import re
import sys
import traceback
import weakref

import libvgpu
from vgpu import isa, uapi
from vgpu.pm4 import LDS_GRANULE
from vgpu.asm import CodeObject

from .errors import GPUFault, UMDError
from .memory import PAGE, Allocation, Block, GpuBuffer, MemoryPool

# Unmapped bytes on each side of an allocation: VA only (nothing is mapped there), so
# large, to catch strided overflows into what would be a neighbour's memory.
GUARD = 1 << 20
PREFIX = "========= "
_UMD_DIR = os.path.dirname(os.path.abspath(__file__))

_enabled = os.environ.get("VGPU_MEMCHECK", "").strip() not in ("", "0")
_pools: "weakref.WeakSet[GuardedPool]" = weakref.WeakSet()
_devices: weakref.WeakSet = weakref.WeakSet()     # every open Device (enable() looks at them)
reports: list[str] = []          # every report made so far, in order


class MemcheckError(GPUFault):
    """A memory error memcheck found: a bad access by a kernel, a double free, a use
    after free. ``report`` is the text also written to stderr."""

    def __init__(self, report: str, errno: int = 0, **fields):
        super().__init__(report, errno, **fields)
        self.report = report


def enable() -> None:
    """Turn memcheck on for devices opened from now on, and for the open ones that
    have not allocated yet (UMDError for one that has: its arrays have no guards)."""
    global _enabled
    _enabled = True
    for dev in list(_devices):
        if dev.closed or isinstance(dev.pool, GuardedPool):
            continue
        if dev.pool.stats()["reserved"]:
            raise UMDError(f"umd.memcheck.enable(): {dev!r} already has allocations without "
                           "guard pages; enable memcheck before allocating (or set "
                           "VGPU_MEMCHECK=1)")
        dev.pool = GuardedPool(dev)


def enabled() -> bool:
    return _enabled


def pool_for(device) -> MemoryPool:
    """The pool of a Device being opened (the plain one unless memcheck is on)."""
    _devices.add(device)
    return GuardedPool(device) if _enabled else MemoryPool(device)


def _user_site() -> str:
    """file:line of the innermost caller outside umd (where the user's code called in)."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(frame.filename).startswith(_UMD_DIR + os.sep):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


def _report(lines: list[str]) -> str:
    text = "\n".join(PREFIX + line for line in lines)
    reports.append(text)
    print(text, file=sys.stderr, flush=True)
    return text


@dataclasses.dataclass(eq=False)
class Record:
    """One allocation: the user pointer and size, what it is, where it came from."""
    ptr: int
    nbytes: int
    start: int                  # first byte of the BO (the block's address)
    size: int                   # bytes of the BO
    what: str
    itemsize: int
    allocated_at: str
    freed_at: str | None = None
    va: object = None           # a freed record keeps its VA range reserved

    def guard_or_inside(self, addr: int) -> bool:
        return self.start - GUARD <= addr < self.start + self.size + GUARD


def _describe(what) -> tuple[str, int]:
    shape, dtype = getattr(what, "shape", None), getattr(what, "dtype", None)
    if shape is None or dtype is None:
        return "", 1
    article = "an" if dtype.name.startswith("int") else "a"
    return f"{article} {dtype} array of shape {tuple(shape)}", dtype.itemsize


class GuardedPool(MemoryPool):
    """The pool with memcheck on (module docstring): no caching, guard pages, a
    quarantine of freed ranges, allocation and free sites."""

    def __init__(self, device):
        super().__init__(device)
        self.records: dict[int, Record] = {}     # block address -> live record
        self.freed: list[Record] = []
        _pools.add(self)

    def alloc(self, nbytes: int, what=None) -> Allocation:
        if nbytes <= 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        size = -(-nbytes // PAGE) * PAGE
        try:
            buf = GpuBuffer(self.device.lv, size, uapi.AMDGPU_GEM_DOMAIN_VRAM, guard=GUARD)
        except libvgpu.VgpuOutOfMemory:
            raise self._oom(nbytes, size) from None
        block = Block(buf, size)
        self._blocks[block.ptr] = block
        bisect.insort(self._starts, block.ptr)
        self._live[block.ptr] = block
        self.allocs += 1
        self.misses += 1
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        alloc = Allocation(self, block, nbytes)
        alloc.ptr = block.ptr + size - -(-nbytes // 4) * 4     # the end touches the guard
        desc, itemsize = _describe(what)
        self.records[block.ptr] = Record(alloc.ptr, nbytes, block.ptr, size,
                                         desc or f"{nbytes} bytes", itemsize, _user_site())
        return alloc

    def free(self, allocation: Allocation) -> None:
        block = self._detach(allocation)
        if block is None:
            return
        for s in list(self.device.streams):       # the GPU may still use it (as cudaFree)
            mark = s.busy_mark()
            if mark is not None:
                try:
                    s.wait_mark(mark)
                except UMDError:                  # failed work is over too
                    pass
        rec = self.records.pop(block.ptr)
        rec.freed_at = _user_site()
        del self._blocks[block.ptr]
        self._starts.remove(block.ptr)
        rec.va = block.buf.free(keep_va=True)
        self.freed.append(rec)

    def release_all(self) -> None:
        super().release_all()
        for rec in self.freed:
            rec.va.free()
        self.freed.clear()
        self.records.clear()

    # -- errors the Python side sees ------------------------------------------------------
    def _record_of(self, allocation: Allocation) -> Record | None:
        return next((r for r in self.freed if r.ptr == allocation.ptr), None)

    def _lifetime_error(self, allocation: Allocation, owner, what: str, now: str, freed: str):
        rec = self._record_of(allocation)
        return MemcheckError(_report([
            f"{what} of {owner!r}" + (f" ({rec.what})" if rec else ""),
            f"    {now} at {_user_site()}",
            f"    {freed} at {rec.freed_at if rec else '<unknown>'}",
            f"    allocated at {rec.allocated_at if rec else '<unknown>'}"]))

    def freed_again(self, allocation: Allocation, owner) -> None:
        raise self._lifetime_error(allocation, owner, "Double free", "freed again", "first freed")

    def used_after_free(self, allocation: Allocation, owner) -> None:
        raise self._lifetime_error(allocation, owner, "Use after free", "used", "freed")

    def leaks(self) -> list[Record]:
        return list(self.records.values())

    # -- a kernel's page fault ----------------------------------------------------------------
    def explain_fault(self, compiled, dump_text: str | None, pc: int | None, line: int | None,
                      errno: int, **fields) -> MemcheckError | None:
        """The MemcheckError for a kernel's fault in a guard page or a freed range, or
        its shared-memory access out of bounds, from the faulting instruction and the
        wave's registers in the crash dump; None when memcheck cannot explain it."""
        if compiled is None or dump_text is None or pc is None:
            return None
        wave = _parse_waves(dump_text)
        if wave is None:
            return None
        obj = CodeObject.unpack(compiled.code_object)
        at = obj.entry + pc
        if not 0 <= at <= len(obj.code) - isa.INST_BYTES:
            return None
        inst = isa.decode(int.from_bytes(obj.code[at:at + isa.INST_BYTES], "little"))
        info = isa.BY_CODE.get(inst.op)
        if info is None:
            return None
        if info.name.startswith("global_"):
            found = self._global_access(compiled, inst, wave)
            space = "__global__"
        elif info.name.startswith("ds_") and fields.get("reason") == "lds_bounds":
            found = _shared_access(obj.lds_bytes, inst, wave)
            space = "__shared__"
        else:
            return None
        if found is None:
            return None
        lane, addr, detail = found
        access = ("read" if "load" in info.name or "read" in info.name else
                  "write" if "store" in info.name or "write" in info.name else "atomic")
        size = 2 if "short" in info.name else 1 if "byte" in info.name else 4
        tid = tuple(wave["vgprs"][k][lane] for k in range(3))
        src = getattr(compiled, "source_file", "") or "<source>"
        text = linecache.getline(src, line).strip() if line else ""
        lines = [f"Invalid {space} {access} of size {size} bytes",
                 f"    at PC {pc:#x} in kernel '{compiled.name}' ({src}:{line})"]
        if text:
            lines.append(f"        {text}")
        lines.append(f"    by thread ({tid[0]},{tid[1]},{tid[2]}) in block "
                     f"({','.join(map(str, wave['workgroup']))})")
        lines += detail
        fields.update(kernel=compiled.name, pc=pc, line=line, address=addr)
        return MemcheckError(_report(lines), errno, **fields)

    def _global_access(self, compiled, inst, wave):
        """(lane, address, report lines) of the first active lane whose global address
        is in a guard page or a freed range (the lane the executor stopped at)."""
        sg, vg, exec_mask = wave["sgprs"], wave["vgprs"], wave["exec"]
        for lane in range(isa.WAVE_SIZE):
            if not exec_mask >> lane & 1:
                continue
            if inst.base == isa.OPR_OFF:
                r = inst.addr - isa.OPR_VGPR
                base = vg[r][lane] | vg[r + 1][lane] << 32
                addr = base + inst.imm
            else:
                base = sg[inst.base] | sg[inst.base + 1] << 32
                addr = base + vg[inst.addr - isa.OPR_VGPR][lane] + inst.imm
            addr &= (1 << 64) - 1
            rec, freed = self._owner(addr, base)
            if rec is None:
                continue
            arg = _argument_of(compiled, inst.base)
            offset = addr - rec.ptr
            where = (f"{-offset} bytes before its start" if offset < 0 else
                     f"{offset - rec.nbytes} bytes past its end" if offset >= rec.nbytes else
                     "inside it")
            element = f"element {offset // rec.itemsize}, " if rec.itemsize > 1 or offset < 0 else ""
            name = f"array argument '{arg}', " if arg else "the array "
            lines = [f"    Address {addr:#x} is " + ("in freed memory: " if freed else "out of bounds: ")
                     + f"{element}byte offset {offset} of {name}{rec.what} ({rec.nbytes} bytes), "
                     + where,
                     f"    allocated at {rec.allocated_at}"]
            if freed:
                lines.append(f"    freed at {rec.freed_at}")
            return lane, addr, lines
        return None

    def _owner(self, addr: int, base: int) -> tuple[Record | None, bool]:
        """The record whose guard pages (live) or whole range (freed) hold addr: the
        array reached through ``base`` first."""
        live = [r for r in self.records.values() if r.guard_or_inside(addr)
                and not r.start <= addr < r.start + r.size]
        freed = [r for r in self.freed if r.guard_or_inside(addr)]
        for group, is_freed in ((live, False), (freed, True)):
            for r in sorted(group, key=lambda r: r.ptr != base):
                return r, is_freed
        return None, False


def _shared_access(lds_bytes: int, inst, wave):
    """(lane, LDS address, report lines) of the first active lane whose LDS access is
    misaligned or past the workgroup's shared memory (docs/isa.md 4.5): the kernel's
    bytes rounded up to the dispatch's 512-byte granules (docs/pm4.md)."""
    vg, exec_mask = wave["vgprs"], wave["exec"]
    kernel_bytes, lds_bytes = lds_bytes, -(-lds_bytes // LDS_GRANULE) * LDS_GRANULE
    # a ds_read_b128 reads four elements, a ds_read2_b32 two (the compiler's merged
    # loads): the first one out of bounds is the access the kernel's source made
    pair = inst.op == isa.OP_DS_READ2_B32
    elements = 4 if inst.op == isa.OP_DS_READ_B128 else 1
    for lane in range(isa.WAVE_SIZE):
        if not exec_mask >> lane & 1:
            continue
        base = vg[inst.addr - isa.OPR_VGPR][lane]
        addrs = ([base + 4 * o & 0xFFFFFFFF for o in isa.offset2_split(inst.imm)] if pair else
                 [(base + inst.imm & 0xFFFFFFFF) + 4 * k for k in range(elements)])
        bad = [a for a in addrs if a % 4 or a + 4 > lds_bytes]
        if not bad:
            continue
        addr = bad[0]
        if pair:        # through a register the compiler may have moved by a constant
            o0, o1 = isa.offset2_split(inst.imm)
            what = f"a paired read of the dwords {o0} and {o1} past address {base:#x}"
        else:           # the compiler addresses a shared array as index * 4 + its LDS offset
            index = (addr - inst.imm) // 4 if addr >= inst.imm else -((inst.imm - addr) // 4)
            what = f"element {index} of the shared array at LDS offset {inst.imm}"
        return lane, addr, [
            f"    Address {addr:#x} is out of bounds: the workgroup has {lds_bytes} bytes of "
            f"shared memory (the kernel's {kernel_bytes}, in {LDS_GRANULE}-byte granules); "
            + what]
    return None


def _argument_of(compiled, base_reg: int) -> str | None:
    """The kernel argument held in SGPR pair ``base_reg`` (the prologue's s_load_dword*
    of the kernarg segment: one load may fill several adjacent arguments)."""
    if base_reg == isa.OPR_OFF:
        return None
    offsets = {}
    for m in re.finditer(r"s_load_dword(?:x\d)? s(?:\[(\d+):(\d+)\]|(\d+)), s\[0:1\], (\d+)",
                         getattr(compiled, "asm_text", "") or ""):
        first = int(m.group(1) or m.group(3))
        last = int(m.group(2) or m.group(3))
        for reg in range(first, last + 1):
            offsets[reg] = int(m.group(4)) + 4 * (reg - first)
    off = offsets.get(base_reg)
    return next((a.name for a in compiled.args if a.offset == off and a.kind == "ptr"), None)


def _parse_waves(dump: str) -> dict | None:
    """workgroup, EXEC, SGPRs and the active lanes' VGPRs of the dump's waves section."""
    m = re.search(r"^workgroup: \(([\d, ]+)\)", dump, re.M)
    e = re.search(r"^EXEC: (0x[0-9a-f]+)", dump, re.M)
    if not m or not e:
        return None
    sgprs: list[int] = []
    vgprs: dict[int, dict[int, int]] = {}
    section = None
    reg = None
    for text in dump.splitlines():
        if text.startswith("SGPRs ("):
            section = "s"
            continue
        if text.startswith("VGPRs ("):
            section = "v"
            continue
        if not text.startswith("  ") or section is None:
            section = None if not text.startswith("  ") else section
            continue
        if section == "s":
            parts = text.split()
            sgprs.extend(int(x, 16) for x in parts[1:])
        else:
            parts = text.split()
            if parts[0].startswith("v") and ":" not in parts[0]:
                reg = int(parts[0][1:])
                parts = parts[1:]
            for p in parts:
                lane, _, value = p.partition(":")
                vgprs.setdefault(reg, {})[int(lane)] = int(value, 16)
    return {"workgroup": tuple(int(x) for x in m.group(1).split(",") if x.strip()),
            "exec": int(e.group(1), 16), "sgprs": sgprs,
            "vgprs": {r: _Lanes(v) for r, v in vgprs.items()}}


class _Lanes(dict):
    def __missing__(self, lane):
        return 0


def leaks() -> list[Record]:
    """The allocations of every guarded pool that are still live."""
    return [r for p in list(_pools) for r in p.leaks()]


@atexit.register
def _leak_report() -> None:
    found = leaks()
    if not _enabled and not found:
        return
    errors = len(reports)
    lines = [f"LEAK SUMMARY: {len(found)} allocation(s) not freed, "
             f"{sum(r.nbytes for r in found)} bytes"]
    for r in found:
        lines.append(f"    {r.nbytes} bytes ({r.what}) at {r.ptr:#x}, allocated at {r.allocated_at}")
    if found:
        _report(lines)
    if _enabled:
        _report([f"ERROR SUMMARY: {errors} error(s)"])
