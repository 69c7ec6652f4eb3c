"""Turning a failed fence into GPUFault / GPUHang.

The fence only carries an errno (EFAULT page fault, EINVAL bad packet or
instruction, ETIME hang, docs/kmd.md). The rest comes from queries of the DRM
file, never from the driver's log: VGPU_INFO_LAST_FAULT names the file's last
failed job and the N of its crash dump MOUNT/sys/class/devcoredump/devcd<N>/data
(docs/crash-dumps.md: the program address, the PC, the reason, the faulting
address), and AMDGPU_INFO_GPUVM_FAULT gives the VM's last faulting address. Both
are set before the fence signals. The program address names the kernel (the
runtime knows where it loaded each one), and the kernel's line table maps the PC
to a source line.
"""
from __future__ import annotations

import errno as E
import os
import re

import libvgpu

from .errors import GPUError, GPUFault, GPUHang


def _last_fault_of(device, ctx_id: int, seq: int):
    """The file's last failed job if it is this one (ctx, seq), else None."""
    try:
        last = libvgpu.query_last_fault(device.lv)
    except OSError:
        return None
    return last if last.seq_no == seq and last.ctx_id == ctx_id else None


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
    last = _last_fault_of(device, stream.ctx.id, sub.fence.fence)
    dump_path = dump = None
    if last is not None:
        dump_path = os.path.join(device.mount, "sys", "class", "devcoredump", f"devcd{last.devcd}", "data")
        try:
            with open(dump_path) as f:
                dump = f.read()
        except OSError:    # aged out: the device keeps its last 16 dumps
            dump = None
    pc = _hex(_dump_field(dump, "PC")) if dump else None
    reason = _dump_field(dump, "reason") if dump else None
    address = _hex(_dump_field(dump, "address")) if dump else None
    if address is None and last is not None and err == E.EFAULT:
        fault = libvgpu.query_gpuvm_fault(device.lv)
        address = fault.addr if fault.status else None
    program = _hex(_dump_field(dump, "program address")) if dump else None

    # Which kernel: the program address, else the one dispatch of the segment.
    compiled = name = None
    if program is not None:
        compiled = device.programs.get(program)
    elif len(seg.programs) == 1:
        compiled = seg.programs[0][1]
    if compiled is not None:
        name = getattr(compiled, "name", None)
    elif seg.ring != "comp_1.0.0":
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
    if err == E.EFAULT or reason == "lds_bounds":     # memcheck explains these
        checked = device.pool.explain_fault(compiled, dump, pc, line, err, source_file=source,
                                            reason=reason, dump=dump_path)
        if checked is not None:
            return checked
    detail = re.search(r"\((\w+), (\w+)\)", _dump_field(dump, "address") or "") if dump else None
    trap = _hex(_dump_field(dump, "trap code")) if dump and reason == "trap" else None
    if address is not None and detail:
        what = f"{detail.group(1)} of address {address:#x} ({detail.group(2)})"
    elif address is not None:
        what = f"{reason or 'fault'} at address {address:#x}"
    elif trap is not None:
        meaning = (getattr(compiled, "traps", None) or {}).get(trap)
        what = f"trap {trap}" + (f": {meaning}" if meaning else "")
    else:
        what = reason or os.strerror(err)
    return GPUFault(f"GPU fault in {where}: {what} [{E.errorcode.get(err, err)}]{dump_note}", err, kernel=name, pc=pc, line=line,
                    source_file=source, address=address, reason=reason, dump=dump_path)
