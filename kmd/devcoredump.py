"""GPU crash dumps (Linux drivers/base/devcoredump.c, amdgpu_dev_coredump.c).

When a job faults or hangs, the KMD keeps one text dump of everything needed to see
why, and `CoredumpStore` keeps the last few for MOUNT/sys/class/devcoredump/
devcd<N>/data. The sections, in order (docs/crash-dumps.md explains how to read
them):

    === header ===      what happened, when, on which ring
    === process ===     pid, comm, uid, client of the submitting file
    === context ===     id, priority, guilty, hangs
    === ring ===        the ring's state (debugfs vgpu_ring_<name>) and the job
    === fault ===       status, reason, faulting VA and access, packet
    === ib ===          every IB of the job disassembled, the failing packet marked >>>
    === waves ===       compute: the faulting wave's PC, EXEC, VCC, SCC, SGPRs, VGPRs
    === kernel ===      compute: the program disassembled around the PC
    === vm ===          the file's VM mappings (debugfs vgpu_vm_mappings style)
    === bo list ===     the job's BOs: handle, size, domain, where they are mapped

A dump is made in two steps so that it never stalls other clients' ioctls:
`capture()` runs under the device lock (in the ring thread, before the job's fence
signals, while the job's pin keeps its memory) and copies what the dump needs: the
IB and kernel words, the VM and BO list entries, the ring's state text, the job's
result. `format_dump()` turns that `Snapshot` into the text with no lock held: the
disassembly of IBs and kernels is the costly part. Any read or section that fails
is reported in place: a dump never raises.
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
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
MAX_ENTRIES = 512               # VM mappings and BOs a dump lists (around the fault): a
                                # dump's size and its capture under the lock stay bounded
MAX_IB_LINES = 400              # per IB, around the failing packet
KERNEL_CONTEXT = 12             # instructions shown before and after the PC
VGPR_LANES_PER_LINE = 8


class _Dump:
    """One devcd entry: `make()` gives its text, formatted once, by whoever asks
    first (the ring thread right after the device lock is released, or a reader)."""

    def __init__(self, make):
        self._make = make
        self._text: str | None = None
        self._lock = threading.Lock()

    def text(self) -> str:
        with self._lock:
            if self._text is None:
                try:
                    self._text = self._make()
                except Exception as e:  # a dump must never take the ring or a reader down
                    self._text = f"**** vgpu device coredump ****\n<error while formatting the dump: {e!r}>\n"
                self._make = None  # drop the snapshot (IB copies) once the text exists
            return self._text


class CoredumpStore:
    """The devcd<N> entries of one device: {N: text}, at most `limit` of them.

    `add()` only registers an entry (cheap, called under the device lock), so
    devcd<N> exists as soon as kmsg names it; its text is made outside the lock,
    by `render(N)` or by the first `snapshot()` that needs it."""

    def __init__(self, limit: int = MAX_DUMPS):
        self._dumps: collections.OrderedDict[int, _Dump] = collections.OrderedDict()
        self._next = 0
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, make) -> int:
        """Register devcd<n>, whose text is `make(n)`; returns n. The oldest entry
        goes when there are more than `limit`."""
        with self._lock:
            n = self._next
            self._next += 1
            self._dumps[n] = _Dump(lambda: make(n))
            while len(self._dumps) > self._limit:
                self._dumps.popitem(last=False)
            return n

    def render(self, n: int) -> None:
        """Format devcd<n> now if it is still kept (no device lock may be held)."""
        with self._lock:
            dump = self._dumps.get(n)
        if dump is not None:
            dump.text()

    def snapshot(self) -> dict[int, str]:
        """{N: text} of the entries kept; formats any not formatted yet."""
        with self._lock:
            dumps = list(self._dumps.items())
        return {n: d.text() for n, d in dumps}


@dataclasses.dataclass
class Snapshot:
    """What a dump needs, copied under the device lock by `capture()`.

    `result` is the engine's result of the failed IB: the engine made it for this
    job and nothing changes it afterwards, so it is kept by reference. A section
    whose capture raised holds the exception instead, and the dump shows it there.
    """

    ring_name: str
    ip_type: int
    ring_text: str                 # Ring.describe() at the time of the failure
    time_text: str
    device_clock: float            # seconds
    result: object
    pid: int
    comm: str
    uid: int
    client: int
    node: str
    ctx_id: int
    priority: int
    guilty: bool
    hangs: int
    job_id: int
    seq: object                    # the job's fence seq, or '?'
    hw_seq: int
    ib_count: int
    elapsed: float
    ibs: "list | Exception"        # [(va, size_dw, bytes | GpuFault | None: the failing chained IB)]
    kernel: "dict | Exception | None"  # {offset from the program: bytes | GpuFault}
    vm: "tuple | Exception"        # (mapped pages, [(va, end, flags, handle, bo offset, size)])
    bos: "list | Exception"        # [(handle, size, domain name, where, [mapped VAs])]


def _section(out: list[str], name: str) -> None:
    out.append("")
    out.append(f"=== {name} ===")


def _read(pt, va: int, size: int):
    """The bytes at `va`, or the GpuFault that stopped the read."""
    try:
        return pt.read(va, size)
    except GpuFault as e:
        return e


def _guard(fn):
    """fn()'s value, or the exception it raised (shown in its section, not raised)."""
    try:
        return fn()
    except Exception as e:  # a dump must never take the ring down
        return e


def _capture_ibs(job, r) -> list:
    pt = job.file.vm.page_table
    chain = getattr(r, "ib_chain", None)
    failing = chain[0].va if chain else None
    # The failing IB of a PM4 chain is in the result already (the CP copied it).
    return [(va, size, None if chain and va == failing else _read(pt, va, 4 * size)) for va, size in job.ibs]


def _kernel_window(pc: int) -> range:
    step = isa.INST_BYTES
    return range(max(0, pc - KERNEL_CONTEXT * step), pc + (KERNEL_CONTEXT + 1) * step, step)


def _capture_kernel(job, r) -> dict | None:
    d = getattr(r, "dispatch", None)
    pc = getattr(d, "pc", None) if d is not None else None
    code_va = _code_va(r)
    if code_va is None or pc is None:
        return None
    pt = job.file.vm.page_table
    return {at: _read(pt, code_va + at, isa.INST_BYTES) for at in _kernel_window(pc)}


def _capture_vm(f, va: int | None = None) -> tuple:
    """(pages mapped, the mappings, how many more were left out): at most MAX_ENTRIES
    mappings, those around `va` (the fault's) or the first ones."""
    maps = f.vm.mappings()
    start = 0
    if va is not None and len(maps) > MAX_ENTRIES:
        i = bisect.bisect_right([m.va for m in maps], va)
        start = max(0, min(i - MAX_ENTRIES // 2, len(maps) - MAX_ENTRIES))
    window = maps[start:start + MAX_ENTRIES]
    handles = _handles(f, {id(m.bo) for m in window})
    return (f.vm.page_table.mapped_pages(),
            [(m.va, m.end, m.flags, handles.get(id(m.bo), 0), m.offset, m.size) for m in window],
            len(maps) - len(window))


def _handles(f, ids: set) -> dict:
    """{id(bo): a handle of it in file f} for the BOs in `ids`."""
    return {id(bo): h for h, bo in f.bos.items() if id(bo) in ids}


def _capture_bos(job) -> tuple:
    """(the job's BOs, how many more were left out): at most MAX_ENTRIES."""
    f = job.file
    bos = job.bos[:MAX_ENTRIES]
    ids = {id(bo) for bo in bos}
    handles = _handles(f, ids)
    maps: dict[int, list[str]] = {}
    for m in f.vm.mappings():
        if id(m.bo) in ids:
            maps.setdefault(id(m.bo), []).append(f"{m.va:#x}")
    return ([(handles.get(id(bo), 0), bo.size, DOMAIN_NAMES.get(bo.domain, "?"),
              bo.where, maps.get(id(bo), [])) for bo in bos], len(job.bos) - len(bos))


def capture(dev, ring, job) -> Snapshot:
    """Copy what the dump of failed `job` needs (device lock held, job still pinned).
    Cheap: memory copies of the IBs and a few dozen kernel words, the VM's and the
    BO list's entries, the ring's state lines; no disassembly. Never raises."""
    r = job.result
    f, ctx = job.file, job.ctx
    compute = ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE
    return Snapshot(
        ring_name=ring.name, ip_type=ring.ip_type, ring_text=ring.describe(),
        time_text=time.strftime("%Y-%m-%d %H:%M:%S"), device_clock=dev.gpu_timestamp() / 1e9, result=r,
        pid=f.pid, comm=f.comm, uid=f.uid, client=f.id, node=f.node,
        ctx_id=ctx.id, priority=ctx.priority, guilty=ctx.guilty, hangs=ctx.hangs,
        job_id=job.id, seq=job.fence.seq if job.fence else "?", hw_seq=job.hw_seq, ib_count=len(job.ibs),
        elapsed=time.monotonic() - job.started_at if job.started_at else 0.0,
        ibs=_guard(lambda: _capture_ibs(job, r)),
        kernel=_guard(lambda: _capture_kernel(job, r)) if compute else None,
        vm=_guard(lambda: _capture_vm(f, getattr(getattr(r, "fault", None), "va", None))),
        bos=_guard(lambda: _capture_bos(job)))


def _checked(value):
    """A captured section's data; a capture that failed raises here, inside the
    section's guard, so the dump shows it in place."""
    if isinstance(value, Exception):
        raise value
    return value


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


def _ib_section(out: list[str], s: Snapshot) -> None:
    r = s.result
    chain = getattr(r, "ib_chain", None)
    compute = s.ip_type == uapi.AMDGPU_HW_IP_COMPUTE
    failing = chain[0].va if chain else None
    ibs = _checked(s.ibs)
    for i, (va, size, data) in enumerate(ibs):
        out.append(f"IB {i}: VA {va:#x}, {size} dwords" + ("  <- failed here" if va == failing else ""))
        if data is None:
            dws = chain[0].dwords
        elif isinstance(data, GpuFault):
            out.append(f"    <cannot read the IB: {data}>")
            continue
        else:
            dws = struct.unpack(f"<{size}I", data)
        if compute:
            mark = chain[0].offset if chain and va == failing else None
            lines = P.disasm_pm4(dws, mark)
        else:
            mark = r.packet_offset if r is not None and r.status != "ok" and len(ibs) == 1 else None
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


def _kernel_section(out: list[str], s: Snapshot, code_va: int | None) -> None:
    words = _checked(s.kernel)
    if words is None:
        out.append("no program")
        return
    pc = s.result.dispatch.pc
    for at in _kernel_window(pc):
        word = words[at]
        text = (f"<cannot fetch: {word.reason}>" if isinstance(word, GpuFault)
                else _disasm_word(struct.unpack("<Q", word)[0], at))
        out.append(f"{'>>>' if at == pc else '   '} {code_va + at:#014x} +{at:#06x}: {text}")
        if at >= pc and text.startswith("s_endpgm"):
            break  # what follows is padding, not the program


def _vm_section(out: list[str], s: Snapshot) -> None:
    pages, mappings, omitted = _checked(s.vm)
    out.append(f"{pages} pages mapped" + (f"; {len(mappings)} of {len(mappings) + omitted} mappings "
                                          f"shown, around the fault" if omitted else ""))
    for va, end, flags, handle, offset, size in mappings:
        perms = "".join(c if flags & b else "-" for c, b in (
            ("r", uapi.AMDGPU_VM_PAGE_READABLE), ("w", uapi.AMDGPU_VM_PAGE_WRITEABLE),
            ("x", uapi.AMDGPU_VM_PAGE_EXECUTABLE)))
        out.append(f"  {va:#014x}-{end:#014x} {perms} handle {handle} bo_offset {offset:#x} size {size:#x}")


def _bo_section(out: list[str], s: Snapshot) -> None:
    bos, omitted = _checked(s.bos)
    for handle, size, domain, where, maps in bos:
        out.append(f"  handle {handle:<4} {size:>10} bytes {domain:>4} "
                   f"{where} mapped at {', '.join(maps) or '-'}")
    if omitted:
        out.append(f"  ... and {omitted} more BOs, not listed")
    if not bos:
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


def format_dump(s: Snapshot, n: int) -> str:
    """The text of devcd<n> from a capture (no lock needed; never raises)."""
    r = s.result
    out = ["**** vgpu device coredump ****", "=== header ==="]
    out.append(f"devcd: {n}")
    out.append(f"time: {s.time_text} (device clock {s.device_clock:.6f} s)")
    out.append(f"ring: {s.ring_name}")
    out.append(f"what: {fault_summary(r)}")
    _section(out, "process")
    out.append(f"pid: {s.pid}\ncomm: {s.comm}\nuid: {s.uid}\nclient: {s.client} ({s.node})")
    _section(out, "context")
    out.append(f"id: {s.ctx_id}\npriority: {PRIORITIES.get(s.priority, s.priority)}\n"
               f"guilty: {'yes' if s.guilty else 'no'}\nhangs: {s.hangs}")
    _section(out, "ring")
    out.extend(s.ring_text.rstrip("\n").splitlines())
    out.append(f"job: {s.job_id} seq {s.seq} hw seq {s.hw_seq}, {s.ib_count} IB(s), ran {s.elapsed:.3f} s")
    _section(out, "fault")
    if r is None:
        out.append("status: error (the engine raised; see kmsg)")
    else:
        out.append(f"status: {r.status}")
        out.append(f"reason: {r.reason if r.status == 'fault' else ('timeout' if r.status == 'aborted' else '-')}")
        if r.fault is not None:
            out.append(f"address: {r.fault.va:#x} ({r.fault.access}, {r.fault.reason})")
        name = P.PKT3_NAMES.get(r.opcode, str(r.opcode)) if s.ip_type == uapi.AMDGPU_HW_IP_COMPUTE \
            else str(r.opcode)
        out.append(f"packet: dword {r.packet_offset} (opcode {name}), {r.packets} packets done before it")
    sections = [("ib", lambda: _ib_section(out, s))]
    if s.ip_type == uapi.AMDGPU_HW_IP_COMPUTE:
        code_va = _code_va(r)
        sections += [("waves", lambda: _waves_section(out, r, code_va)),
                     ("kernel", lambda: _kernel_section(out, s, code_va))]
    sections += [("vm", lambda: _vm_section(out, s)), ("bo list", lambda: _bo_section(out, s))]
    for name, fill in sections:
        _section(out, name)
        try:
            fill()
        except Exception as e:  # a dump must never take the ring down
            out.append(f"<error while dumping {name}: {e!r}>")
    return "\n".join(out) + "\n"
