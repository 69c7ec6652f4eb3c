"""A GPU page fault and how to read its crash dump.

A kernel (samples/kernels/read_unmapped.s) loads through a pointer to a VA range
that was reserved but never mapped. The wave faults on its first global load: the
job's fence signals with EFAULT, the context is marked guilty, the driver logs one
kmsg line ending in "GPU crash dump triggered (devcd<N>)", and the dump appears at
MOUNT/sys/class/devcoredump/devcd<N>/data. This sample walks through that dump one
section at a time (docs/crash-dumps.md says more).

    python samples/gpu_fault.py --device /tmp/vgpu
"""
import argparse
import errno
import os
import re

import libvgpu
from compute_common import ComputeSession
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import UserError, exit_main

EXPLAIN = {
    "header": "What happened, when, and on which ring.",
    "process": "Who submitted the job: the process that owns the DRM file.",
    "context": "The submitting context. 'guilty: yes' means its later CS calls fail with ECANCELED.",
    "ring": "The ring's counters at the moment of the fault (same as debugfs vgpu_ring_comp_1.0.0), and the job.",
    "fault": "The fault itself: reason, address and access, and the PM4 packet that was running.",
    "ib": "The IB as the command processor saw it; '>>>' marks the packet that was running.",
    "waves": "The wave that faulted: PC (byte offset from the program address), EXEC (its live lanes), "
             "SGPRs, and the VGPRs of the active lanes only.",
    "kernel": "The program around the PC, disassembled; '>>>' is the faulting instruction.",
    "vm": "Every mapping of the client's VM, with r/w/x permissions. The faulting VA is in none of them.",
    "bo list": "The BOs the job could use, and where each is mapped.",
}
SHOW_LINES = 14   # per section; the dump itself has everything


def sections(text: str) -> dict[str, list[str]]:
    out, name = {}, None
    for line in text.splitlines():
        m = re.fullmatch(r"=== (.+) ===", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name is not None and line:
            out[name].append(line)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    args = p.parse_args()
    with ComputeSession(args.device) as s:
        mount = s.dev.mount     # the mount point, whichever path --device gave
        kernel = s.load_kernel("read_unmapped")
        hole = s.stack.enter_context(libvgpu.va_range_alloc(s.dev, 1 << 20, 4096))
        print(f"  src: VA {hole.address:#x}, reserved but never mapped")
        dst = s.alloc(256, "dst")
        kernarg = s.alloc(kernel.obj.kernarg_size, "kernargs")
        kernarg.cpu[:kernel.obj.kernarg_size] = kernel.pack_args(src=hole.address, dst=dst.va)
        ib = libvgpu.emit_dispatch(libvgpu.Pm4Ib(), kernel, grid=(1, 1, 1),
                                   user_data=libvgpu.kernarg_user_data(kernarg.va))
        req = s.submit(ib)

        print("\n1. the wait fails")
        try:
            s.wait(req)
            print("  the job completed: no fault (unexpected)")
            return 1
        except OSError as e:
            print(f"  cs_query_fence_status: {errno.errorcode[e.errno]} ({os.strerror(e.errno)})")
            wait_err = e.errno
        flags = s.ctx.query_state()
        guilty = bool(flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY)
        print(f"  context {s.ctx.id}: QUERY_STATE2 {'GUILTY' if guilty else 'not guilty'}")

        print("\n2. the kernel log")
        with open(os.path.join(mount, "dev/kmsg")) as f:
            log = [line for line in f.read().splitlines() if "fault" in line]
        for line in log:
            print("  " + line)
        m = next((re.search(r"GPU crash dump triggered \(devcd(\d+)\)", line) for line in reversed(log)
                  if "GPU crash dump triggered" in line), None)
        if m is None:
            print("  no crash dump line")
            return 1

        path = os.path.join(mount, f"sys/class/devcoredump/devcd{m.group(1)}/data")
        print(f"\n3. the crash dump: {path}")
        try:
            with open(path) as f:
                dump = f.read()
        except PermissionError:
            # Linux's devcoredump data is root's (0600): a dump may hold any client's memory.
            raise UserError(f"{path} is root's (mode 0600, as Linux's devcoredump is): "
                            "run this sample as root to read the dump") from None
        parts = sections(dump)
        for name, lines in parts.items():
            print(f"\n--- {name}: {EXPLAIN.get(name, '')}")
            shown = lines if len(lines) <= SHOW_LINES else lines[:SHOW_LINES] + [
                f"... ({len(lines) - SHOW_LINES} more lines)"]
            for line in shown:
                print("    " + line)

        fault = "\n".join(parts.get("fault", []))
        kernel_lines = [line for line in parts.get("kernel", []) if line.startswith(">>>")]
        print("\n4. reading it")
        print(f"  the fault section names VA {hole.address:#x}: "
              f"{'yes' if f'{hole.address:#x}' in fault else 'no'}")
        print(f"  the faulting instruction: {kernel_lines[0].split(': ', 1)[1] if kernel_lines else '?'}")
        ok = (wait_err == errno.EFAULT and guilty and set(EXPLAIN) <= set(parts)
              and f"{hole.address:#x}" in fault and kernel_lines and "global_load_dword" in kernel_lines[0])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
