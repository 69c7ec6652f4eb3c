"""A GPU hang and its recovery, step by step.

A job polls memory for a value that never arrives (SDMA POLL_REGMEM), the ring
timeout fires (set at mount: `vgpu mount --timeout SECONDS`, default 2 s), the
driver resets the GPU: the hung job's fence signals with ETIME, the jobs queued
behind it on the same context are cancelled (ECANCELED), an innocent context's job
still runs, and CTX query state reports the reset to both contexts: QUERY_STATE2's
flags say which one was guilty (as Mesa reads them); the old QUERY_STATE says only
that a reset happened (UNKNOWN_RESET), as amdgpu_ctx_query does.

    python samples/gpu_hang.py --device /tmp/vgpu
"""
import argparse
import errno
import os
import struct
import time

import libvgpu
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

RESET_NAMES = {uapi.AMDGPU_CTX_NO_RESET: "NO_RESET", uapi.AMDGPU_CTX_GUILTY_RESET: "GUILTY_RESET",
               uapi.AMDGPU_CTX_INNOCENT_RESET: "INNOCENT_RESET", uapi.AMDGPU_CTX_UNKNOWN_RESET: "UNKNOWN_RESET"}


def wait(label: str, ctx, req) -> None:
    t0 = time.monotonic()
    try:
        libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        print(f"  {label}: seq {req.seq_no} signaled OK after {time.monotonic() - t0:.2f} s")
    except OSError as e:
        print(f"  {label}: seq {req.seq_no} signaled with error {errno.errorcode[e.errno]} "
              f"after {time.monotonic() - t0:.2f} s")


def reset_of(flags: int) -> int:
    """The reset a context saw, from its QUERY_STATE2 flags, as Mesa tells guilty from
    innocent (radeonsi's amdgpu_ctx_query_reset_status)."""
    if not flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET:
        return uapi.AMDGPU_CTX_NO_RESET
    return (uapi.AMDGPU_CTX_GUILTY_RESET if flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
            else uapi.AMDGPU_CTX_INNOCENT_RESET)


def state(label: str, ctx) -> tuple[int, int]:
    status, hangs = ctx.query_reset_state()
    flags = ctx.query_state()
    names = [n for n, b in (("RESET", uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET),
                            ("GUILTY", uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY)) if flags & b]
    print(f"  {label} context {ctx.id}: {RESET_NAMES[reset_of(flags)]} "
          f"(QUERY_STATE2 flags={'|'.join(names) or '0'}; QUERY_STATE reset_status="
          f"{RESET_NAMES.get(status, status)} hangs={hangs})")
    return reset_of(flags), flags


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    args = p.parse_args()
    with libvgpu.device_initialize(args.device) as dev:
        hung_ctx, innocent_ctx = libvgpu.cs_ctx_create(dev), libvgpu.cs_ctx_create(dev)
        flag = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
        ibs = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
        va_flag, va_ib = libvgpu.va_range_alloc(dev, 4096), libvgpu.va_range_alloc(dev, 4096)
        libvgpu.bo_va_op(flag, 0, 4096, va_flag.address)
        libvgpu.bo_va_op(ibs, 0, 4096, va_ib.address)
        cpu = ibs.cpu_map()
        bo_list = libvgpu.bo_list_create(dev, [flag, ibs])

        def submit(ctx, packets, slot):
            data = packets.tobytes()
            cpu[slot * 256: slot * 256 + len(data)] = data
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ib.address + slot * 256,
                                                                           len(packets))], resources=bo_list)
            libvgpu.cs_submit(ctx, req)
            return req

        print("1. the hang: a POLL_REGMEM waits for 0xC0FFEE at a VA nobody writes")
        hang = submit(hung_ctx, libvgpu.SdmaIb().poll_regmem(va_flag.address, 0xC0FFEE), 0)
        queued = submit(hung_ctx, libvgpu.SdmaIb().fence(va_flag.address + 8, 1), 1)
        print(f"  hung job seq {hang.seq_no}, then seq {queued.seq_no} queued behind it on the same context")
        innocent = submit(innocent_ctx, libvgpu.SdmaIb().fence(va_flag.address + 16, 0x1234), 2)
        print(f"  innocent context {innocent_ctx.id} submits seq {innocent.seq_no}")
        print("2. the timeout and the reset")
        wait("hung job", hung_ctx, hang)
        wait("queued job of the hung context", hung_ctx, queued)
        wait("innocent job", innocent_ctx, innocent)
        value = struct.unpack_from("<I", bytes(flag.cpu_map()), 16)[0]
        flag.cpu_unmap()
        print(f"  the innocent job wrote {value:#x}")
        print("3. the contexts after the reset")
        g_status, g_flags = state("hung", hung_ctx)
        i_status, _ = state("innocent", innocent_ctx)
        try:
            submit(hung_ctx, libvgpu.SdmaIb().nop(), 3)
            print("  resubmitting on the hung context: accepted (unexpected)")
            ok_resubmit = False
        except OSError as e:
            print(f"  resubmitting on the hung context: {errno.errorcode[e.errno]} (a new context is needed)")
            ok_resubmit = e.errno == errno.ECANCELED
        print("4. the kernel log")
        with open(os.path.join(dev.mount, "dev/kmsg")) as f:    # dev.mount: whichever path --device was
            for line in f.read().splitlines():
                if any(k in line for k in ("timeout", "reset", "Process information")):
                    print("  " + line)
        bo_list.destroy()
        ibs.cpu_unmap()
    ok = (g_status == uapi.AMDGPU_CTX_GUILTY_RESET and i_status == uapi.AMDGPU_CTX_INNOCENT_RESET
          and value == 0x1234 and ok_resubmit)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
