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

A user queue's failure (umd/userq_stream.py) carries the same errno and names its
crash dump in VGPU_INFO_USERQ_STATE; :func:`error_from_dump` turns either into the
exception.
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
    dump_path = dump_path_of(device, last.devcd if last is not None else None)
    return error_from_dump(device, err, dump_path, seg.programs, seg.notes, seg.ring == "comp_1.0.0",
                           f"{seg.ring} job", f"stream {stream.name}, seq {sub.fence.fence}",
                           vm_fault=last is not None)


def dump_path_of(device, devcd: int | None) -> str | None:
    """MOUNT/sys/class/devcoredump/devcd<N>/data, or None for no dump."""
    if devcd is None:
        return None
    return os.path.join(device.mount, "sys", "class", "devcoredump", f"devcd{devcd}", "data")


def error_from_dump(device, err: int, dump_path: str | None, programs, notes, compute: bool,
                    job: str, context: str, vm_fault: bool = True) -> GPUError:
    """GPUFault / GPUHang for work that failed with ``err`` and left the crash dump at
    ``dump_path`` (None: none was made, or it aged out). ``programs`` are the
    (code VA, compiled kernel) pairs of the work that may have failed (the one kernel
    when the dump names none), ``notes`` its commands (an SDMA failure names them);
    ``job`` names it when no kernel does, ``context`` says where it ran (the hang
    message); ``vm_fault`` allows the VM's last fault (AMDGPU_INFO_GPUVM_FAULT) as the
    address when the dump has none. CS jobs and user queues share it."""
    dump = None
    if dump_path is not None:
        try:
            with open(dump_path) as f:
                dump = f.read()
        except OSError:    # aged out: the device keeps its last 16 dumps
            dump, dump_path = None, None
    pc = _hex(_dump_field(dump, "PC")) if dump else None
    reason = _dump_field(dump, "reason") if dump else None
    address = _hex(_dump_field(dump, "address")) if dump else None
    if address is None and vm_fault and err == E.EFAULT:
        fault = libvgpu.query_gpuvm_fault(device.lv)
        address = fault.addr if fault.status else None
    program = _hex(_dump_field(dump, "program address")) if dump else None

    # Which kernel: the program address, else the one dispatch of the work.
    compiled = name = None
    if program is not None:
        compiled = device.programs.get(program)
    elif len(programs) == 1:
        compiled = programs[0][1]
    if compiled is not None:
        name = getattr(compiled, "name", None)
    elif not compute:
        name = f"SDMA ({'; '.join(notes[:3])}{'...' if len(notes) > 3 else ''})"
    line = None
    table = getattr(compiled, "line_table", None) or {}
    if pc is not None and table:
        line = table.get(pc)
        if line is None:   # the nearest instruction at or before the PC with a line
            earlier = [p for p in table if p <= pc]
            line = table[max(earlier)] if earlier else None
    source = getattr(compiled, "source_file", None)

    where = f"kernel '{name}'" if name else job
    if pc is not None:
        where += f" at PC {pc:#x}"
    if line is not None:
        where += f" ({source or '<source>'}:{line})"
    dump_note = f"; crash dump: {dump_path}" if dump_path else ""
    if err in (E.ETIME, E.ETIMEDOUT):
        return GPUHang(f"GPU hang: {where} ran past the ring timeout and was aborted "
                       f"({context}){dump_note}", err, kernel=name, pc=pc, dump=dump_path)
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
