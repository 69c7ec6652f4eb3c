"""GPU crash dumps (Linux drivers/base/devcoredump.c, amdgpu_dev_coredump.c).

When a job faults or hangs, `build()` writes one text dump of everything needed to
see why, and `CoredumpStore` keeps the last few for MOUNT/sys/class/devcoredump/
devcd<N>/data. The sections, in order (docs/crash-dumps.md explains how to read
them):

    === header ===      what happened, when, on which ring
    === process ===     pid, comm, uid, client of the submitting file
    === context ===     id, priority, guilty, hangs
    === ring ===        the ring's state (debugfs ring_<name>) and the job
    === fault ===       status, reason, faulting VA and access, packet
    === ib ===          every IB of the job disassembled, the failing packet marked >>>
    === waves ===       compute: the faulting wave's PC, EXEC, VCC, SCC, SGPRs, VGPRs
    === kernel ===      compute: the program disassembled around the PC
    === vm ===          the file's VM mappings (debugfs vm_info style)
    === bo list ===     the job's BOs: handle, size, domain, where they are mapped

Everything is read under the job's pin (the ring calls this before the fence
signals), and any read that fails is reported in place: a dump never raises.
"""
from __future__ import annotations

import collections
import struct
import threading
import time

from vgpu import isa, uapi
from vgpu import pm4 as P

from .ctx import PRIORITIES
from .gem import DOMAIN_NAMES
from .hw.mmu import GpuFault
from .hw.sdma_disasm import disasm_sdma

MAX_DUMPS = 16                  # devcd entries kept; the oldest goes first
MAX_IB_LINES = 400              # per IB, around the failing packet
KERNEL_CONTEXT = 12             # instructions shown before and after the PC
VGPR_LANES_PER_LINE = 8


class CoredumpStore:
    """The devcd<N> entries of one device: {N: text}, at most MAX_DUMPS of them."""

    def __init__(self, limit: int = MAX_DUMPS):
        self._dumps: collections.OrderedDict[int, str] = collections.OrderedDict()
        self._next = 0
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, make) -> int:
        """Store `make(n)` (the dump text) as devcd<n>; returns n."""
        with self._lock:
            n = self._next
            self._next += 1
        text = make(n)
        with self._lock:
            self._dumps[n] = text
            while len(self._dumps) > self._limit:
                self._dumps.popitem(last=False)
            return n

    def snapshot(self) -> dict[int, str]:
        with self._lock:
            return dict(self._dumps)


def _section(out: list[str], name: str) -> None:
    out.append("")
    out.append(f"=== {name} ===")


def _read_dwords(pt, va: int, n: int):
    try:
        return struct.unpack(f"<{n}I", pt.read(va, 4 * n)), None
    except GpuFault as e:
        return None, e


def _window(lines: list[str], mark_prefix: str = ">>>") -> list[str]:
    if len(lines) <= MAX_IB_LINES:
        return lines
    at = next((i for i, line in enumerate(lines) if line.startswith(mark_prefix)), 0)
    lo = max(0, at - MAX_IB_LINES // 2)
    hi = lo + MAX_IB_LINES
    return ([f"    ... {lo} packets before"] if lo else []) + lines[lo:hi] + \
           ([f"    ... {len(lines) - hi} packets after"] if hi < len(lines) else [])


def _mark_sdma(lines: list[str], offset: int | None) -> list[str]:
    """Prefix the SDMA packet at dword `offset` with >>> (the others with spaces)."""
    tag = f"{offset:04x}:" if offset is not None else None
    return [(">>> " if tag and line.startswith(tag) else "    ") + line for line in lines]


def _ib_section(out: list[str], job, ring, r) -> None:
    pt = job.file.vm.page_table
    chain = getattr(r, "ib_chain", None)
    compute = ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE
    failing = chain[0].va if chain else None
    for i, (va, size) in enumerate(job.ibs):
        out.append(f"IB {i}: VA {va:#x}, {size} dwords" + ("  <- failed here" if va == failing else ""))
        if chain and va == failing:
            dws, err = chain[0].dwords, None
        else:
            dws, err = _read_dwords(pt, va, size)
        if err is not None:
            out.append(f"    <cannot read the IB: {err}>")
            continue
        if compute:
            mark = chain[0].offset if chain and va == failing else None
            lines = P.disasm_pm4(dws, mark)
        else:
            mark = r.packet_offset if r is not None and r.status != "ok" and len(job.ibs) == 1 else None
            lines = _mark_sdma(disasm_sdma(dws), mark)
        out.extend(_window(lines))
    for depth, frame in enumerate(chain[1:] if chain else [], 1):
        out.append(f"chained IB (depth {depth}): VA {frame.va:#x}, {len(frame.dwords)} dwords")
        out.extend(_window(P.disasm_pm4(frame.dwords, frame.offset)))


def _code_va(r) -> int | None:
    regs = getattr(r, "sh_regs", None) or {}
    if P.COMPUTE_PGM_LO not in regs:
        return None
    return P.pgm_address(regs[P.COMPUTE_PGM_LO], regs.get(P.COMPUTE_PGM_HI, 0))


def _waves_section(out: list[str], r, code_va: int | None) -> None:
    d = getattr(r, "dispatch", None)
    if d is None:
        out.append("no dispatch was running (the fault is the command processor's)")
        return
    pc = getattr(d, "pc", None)
    exec_mask = getattr(d, "exec", 0) or 0
    out.append(f"dispatch status: {d.status}" + (f", reason {d.reason}" if d.reason else ""))
    if code_va is not None and pc is not None:
        out.append(f"program address: {code_va:#x}")
        out.append(f"PC: {pc:#x} (VA {code_va + pc:#x})")
    else:
        out.append(f"PC: {pc}")
    out.append(f"workgroup: {tuple(getattr(d, 'workgroup', ()))} wave {getattr(d, 'wave', '?')}")
    out.append(f"EXEC: {exec_mask:#010x} ({bin(exec_mask).count('1')} active lanes)")
    out.append(f"VCC: {getattr(d, 'vcc', 0) or 0:#010x}  SCC: {getattr(d, 'scc', 0)}")
    if getattr(d, "trap_code", None) is not None and d.reason == "trap":
        out.append(f"trap code: {d.trap_code:#x}")
    out.append(f"instructions: {getattr(d, 'instructions', 0)} wave, "
               f"{getattr(d, 'lane_instructions', 0)} lane")
    sgprs = list(getattr(d, "sgprs", None) or [])
    out.append(f"SGPRs ({len(sgprs)}):")
    for i in range(0, len(sgprs), 8):
        out.append(f"  s{i:<3}" + " ".join(f"{v & 0xFFFFFFFF:08x}" for v in sgprs[i:i + 8]))
    vgprs = list(getattr(d, "vgprs", None) or [])
    lanes = [lane for lane in range(isa.WAVE_SIZE) if exec_mask >> lane & 1]
    out.append(f"VGPRs ({len(vgprs)}), active lanes {lanes[0] if lanes else '-'}"
               f"..{lanes[-1] if lanes else '-'} only:")
    for reg, values in enumerate(vgprs):
        vals = [f"{lane}:{int(values[lane]) & 0xFFFFFFFF:08x}" for lane in lanes]
        for j in range(0, len(vals), VGPR_LANES_PER_LINE):
            head = f"  v{reg:<3}" if j == 0 else "       "
            out.append(head + " ".join(vals[j:j + VGPR_LANES_PER_LINE]))


def _disasm_word(word: int, pc: int) -> str:
    """vgpu.asm's disassembly of one instruction word, or the raw word."""
    try:
        from vgpu.asm import disasm_word
        return disasm_word(word, pc)
    except Exception as e:  # an undecodable word is shown, not fatal
        return f".dword64 {word:#018x}  ; {e}"


def _kernel_section(out: list[str], pt, r, code_va: int | None) -> None:
    d = getattr(r, "dispatch", None)
    pc = getattr(d, "pc", None) if d is not None else None
    if code_va is None or pc is None:
        out.append("no program")
        return
    step = isa.INST_BYTES
    for at in range(max(0, pc - KERNEL_CONTEXT * step), pc + (KERNEL_CONTEXT + 1) * step, step):
        try:
            text = _disasm_word(struct.unpack("<Q", pt.read(code_va + at, step))[0], at)
        except GpuFault as e:
            text = f"<cannot fetch: {e.reason}>"
        out.append(f"{'>>>' if at == pc else '   '} {code_va + at:#014x} +{at:#06x}: {text}")
        if at >= pc and text.startswith("s_endpgm"):
            break  # what follows is padding, not the program


def _vm_section(out: list[str], f) -> None:
    out.append(f"{f.vm.page_table.mapped_pages()} pages mapped")
    handles = {id(bo): h for h, bo in f.bos.items()}
    for m in f.vm.mappings():
        perms = "".join(c if m.flags & b else "-" for c, b in (
            ("r", uapi.AMDGPU_VM_PAGE_READABLE), ("w", uapi.AMDGPU_VM_PAGE_WRITEABLE),
            ("x", uapi.AMDGPU_VM_PAGE_EXECUTABLE)))
        out.append(f"  {m.va:#014x}-{m.end:#014x} {perms} handle {handles.get(id(m.bo), 0)} "
                   f"bo_offset {m.offset:#x} size {m.size:#x}")


def _bo_section(out: list[str], job) -> None:
    f = job.file
    handles = {id(bo): h for h, bo in f.bos.items()}
    maps: dict[int, list[str]] = {}
    for m in f.vm.mappings():
        maps.setdefault(id(m.bo), []).append(f"{m.va:#x}")
    for bo in job.bos:
        where = f"vram@{bo.vram.offset:#x}" if bo.vram else "gtt"
        out.append(f"  handle {handles.get(id(bo), 0):<4} {bo.size:>10} bytes {DOMAIN_NAMES.get(bo.domain, '?'):>4} "
                   f"{where} mapped at {', '.join(maps.get(id(bo), [])) or '-'}")
    if not job.bos:
        out.append("  (empty)")


def fault_summary(r) -> str:
    """One phrase for kmsg and the dump: what went wrong."""
    if r is None:
        return "engine error"
    if r.status == "aborted":
        return "job timeout (aborted by the watchdog)"
    if r.fault is not None:
        return f"{r.fault.access} of VA {r.fault.va:#x} ({r.fault.reason})"
    return r.reason or "?"


def location(ring, r) -> str:
    """Where in the job it happened, for kmsg: the packet, and the wave's PC."""
    if r is None:
        return ""
    if ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE:
        text = f"at IB packet offset {r.packet_offset} dw ({P.PKT3_NAMES.get(r.opcode, f'opcode {r.opcode}')})"
        d = getattr(r, "dispatch", None)
        if d is not None and d.status != "ok" and getattr(d, "pc", None) is not None:
            text += f", wave PC {d.pc:#x}"
        return text
    return f"at IB packet offset {r.packet_offset} dw (opcode {r.opcode})"


def build(dev, ring, job, n: int) -> str:
    """The text of devcd<n> for a failed `job` on `ring` (never raises)."""
    r = job.result
    f, ctx = job.file, job.ctx
    out = ["**** vgpu device coredump ****", "=== header ==="]
    out.append(f"devcd: {n}")
    out.append(f"time: {time.strftime('%Y-%m-%d %H:%M:%S')} (device clock {dev.gpu_timestamp() / 1e9:.6f} s)")
    out.append(f"ring: {ring.name}")
    out.append(f"what: {fault_summary(r)}")
    _section(out, "process")
    out.append(f"pid: {f.pid}\ncomm: {f.comm}\nuid: {f.uid}\nclient: {f.id} ({f.node})")
    _section(out, "context")
    out.append(f"id: {ctx.id}\npriority: {PRIORITIES.get(ctx.priority, ctx.priority)}\n"
               f"guilty: {'yes' if ctx.guilty else 'no'}\nhangs: {ctx.hangs}")
    _section(out, "ring")
    out.extend(ring.describe().rstrip("\n").splitlines())
    elapsed = time.monotonic() - job.started_at if job.started_at else 0.0
    out.append(f"job: {job.id} seq {job.fence.seq if job.fence else '?'} hw seq {job.hw_seq}, "
               f"{len(job.ibs)} IB(s), ran {elapsed:.3f} s")
    _section(out, "fault")
    if r is None:
        out.append("status: error (the engine raised; see kmsg)")
    else:
        out.append(f"status: {r.status}")
        out.append(f"reason: {r.reason if r.status == 'fault' else ('timeout' if r.status == 'aborted' else '-')}")
        if r.fault is not None:
            out.append(f"address: {r.fault.va:#x} ({r.fault.access}, {r.fault.reason})")
        name = P.PKT3_NAMES.get(r.opcode, str(r.opcode)) if ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE \
            else str(r.opcode)
        out.append(f"packet: dword {r.packet_offset} (opcode {name}), {r.packets} packets done before it")
    sections = [("ib", lambda: _ib_section(out, job, ring, r))]
    if ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE:
        code_va = _code_va(r)
        sections += [("waves", lambda: _waves_section(out, r, code_va)),
                     ("kernel", lambda: _kernel_section(out, f.vm.page_table, r, code_va))]
    sections += [("vm", lambda: _vm_section(out, f)), ("bo list", lambda: _bo_section(out, job))]
    for name, fill in sections:
        _section(out, name)
        try:
            fill()
        except Exception as e:  # a dump must never take the ring down
            out.append(f"<error while dumping {name}: {e!r}>")
    return "\n".join(out) + "\n"
