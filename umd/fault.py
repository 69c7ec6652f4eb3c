"""Turning a failed fence into GPUFault / GPUHang.

The fence only carries an errno (EFAULT page fault, EINVAL bad packet or
instruction, ETIME hang, docs/kmd.md). The rest comes from what the KMD wrote for
the failed job: its kmsg line (``[ring] GPU fault in job J seq S ctx C client F pid
P (comm): <what> at IB packet offset K dw (<packet>), wave PC 0x..; ...
(devcd<N>)``) and the crash dump MOUNT/sys/class/devcoredump/devcd<N>/data
(docs/crash-dumps.md) for the program address, the reason and the faulting address.
The program address names the kernel (the runtime knows where it loaded each one),
and the kernel's line table maps the PC to a source line.
"""
from __future__ import annotations

import errno as E
import os
import re
import time

from .errors import GPUError, GPUFault, GPUHang

_LINE = re.compile(r"\[(?P<ring>[\w.]+)\] GPU fault in job \d+ seq (?P<seq>\d+) ctx (?P<ctx>\d+) "
                   r"client \d+ pid (?P<pid>\d+) \(.*?\): (?P<what>.*?)(?: at IB packet offset (?P<dw>\d+) dw "
                   r"\((?P<packet>[^)]*)\))?(?:, wave PC (?P<pc>0x[0-9a-f]+))?; .*\(devcd(?P<devcd>\d+)\)")


def _find_kmsg_line(mount: str, ring: str, ctx_id: int, seq: int) -> re.Match | None:
    try:
        with open(os.path.join(mount, "dev", "kmsg")) as f:
            text = f.read()
    except OSError:
        return None
    found = None
    for m in _LINE.finditer(text):
        if m["ring"] == ring and int(m["ctx"]) == ctx_id and int(m["pid"]) == os.getpid():
            found = m
            if int(m["seq"]) == seq:
                return m
    return found


def _dump_field(dump: str, name: str) -> str | None:
    m = re.search(rf"^\s*{re.escape(name)}:\s*(.+)$", dump, re.M)
    return m.group(1).strip() if m else None


def _hex(text: str | None) -> int | None:
    m = re.match(r"(0x[0-9a-fA-F]+)", text or "")
    return int(m.group(1), 16) if m else None


def gpu_error(stream, sub, cause: OSError) -> GPUError:
    """The exception for submission ``sub`` of ``stream`` whose fence failed with ``cause``."""
    device, seg = stream.device, sub.seg
    err = cause.errno
    if err == E.ECANCELED:
        return GPUError(f"stream {stream.name}: {seg.ring} job seq {sub.fence.fence} was cancelled "
                        f"(a job it depended on failed, or its context was reset)", err)
    m = None
    for _ in range(50):    # the line is written before the fence signals; be lenient anyway
        m = _find_kmsg_line(device.mount, seg.ring, stream.ctx.id, sub.fence.fence)
        if m is not None:
            break
        time.sleep(0.02)
    dump_path = dump = None
    if m is not None:
        dump_path = os.path.join(device.mount, "sys", "class", "devcoredump", f"devcd{m['devcd']}", "data")
        try:
            with open(dump_path) as f:
                dump = f.read()
        except OSError:
            dump = None
    pc = int(m["pc"], 16) if m is not None and m["pc"] else None
    if dump is not None and pc is None:
        pc = _hex(_dump_field(dump, "PC"))
    reason = _dump_field(dump, "reason") if dump else None
    address = _hex(_dump_field(dump, "address")) if dump else None
    if address is None and m is not None:
        address = _hex((re.search(r"of VA (0x[0-9a-f]+)", m["what"]) or [None, None])[1])
    program = _hex(_dump_field(dump, "program address")) if dump else None

    # Which kernel: the program address, else the one dispatch of the segment.
    compiled = name = None
    if program is not None:
        compiled = device.programs.get(program)
    elif len(seg.programs) == 1:
        compiled = seg.programs[0][1]
    if compiled is not None:
        name = getattr(compiled, "name", None)
    elif seg.ring != "comp_0.0":
        name = f"SDMA ({'; '.join(seg.notes[:3])}{'...' if len(seg.notes) > 3 else ''})"
    line = None
    table = getattr(compiled, "line_table", None) or {}
    if pc is not None and table:
        line = table.get(pc)
        if line is None:   # the nearest instruction at or before the PC with a line
            earlier = [p for p in table if p <= pc]
            line = table[max(earlier)] if earlier else None
    source = getattr(compiled, "source_file", None)

    where = f"kernel '{name}'" if name else f"{seg.ring} job"
    if pc is not None:
        where += f" at PC {pc:#x}"
    if line is not None:
        where += f" ({source or '<source>'}:{line})"
    dump_note = f"; crash dump: {dump_path}" if dump_path else ""
    if err in (E.ETIME, E.ETIMEDOUT):
        return GPUHang(f"GPU hang: {where} ran past the ring timeout and was aborted "
                       f"(stream {stream.name}, seq {sub.fence.fence}){dump_note}", err,
                       kernel=name, pc=pc, dump=dump_path)
    detail = re.search(r"\((\w+), (\w+)\)", _dump_field(dump, "address") or "") if dump else None
    if address is not None and detail:
        what = f"{detail.group(1)} of address {address:#x} ({detail.group(2)})"
    elif address is not None:
        what = f"{reason or 'fault'} at address {address:#x}"
    else:
        what = m["what"] if m is not None else (reason or os.strerror(err))
    return GPUFault(f"GPU fault in {where}: {what} [{E.errorcode.get(err, err)}]{dump_note}", err, kernel=name, pc=pc, line=line,
                    source_file=source, address=address, reason=reason, dump=dump_path)
