"""MIG-style partitions: a hang in one partition while the other carries on.

`vgpu mount --partitions 2` splits the GPU into two devices, card0/renderD128 and
card1/renderD129, each with its own compute unit, SDMA engine, half of VRAM and GTT,
and its own reset domain (docs/kmd.md, "Partitions"). This sample:

  1. lists the mount's devices (libvgpu.get_devices, as drmGetDevices2 does) and
     what each one reports (DEV_INFO compute units, SDMA rings, VRAM);
  2. hangs partition A (a POLL_REGMEM nobody satisfies) next to a bystander
     context on the same partition; meanwhile a worker on partition B copies a
     checksummed buffer out of its VRAM again and again, each copy checked;
  3. after A's ring timeout and reset: the hung job failed with ETIME and its
     context is guilty; the bystander on A shares A's reset domain, so its context
     reports INNOCENT_RESET (what a whole-GPU reset does to everyone); the worker
     on B kept running through it, its context reports NO_RESET and its VRAM kept
     its bytes.

    python samples/partitions.py --device /tmp/vgpu        (mounted with --partitions 2)
"""
import argparse
import errno
import zlib

import libvgpu
from session import Session, add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

SIZE = 64 * 1024
RESET_NAMES = {uapi.AMDGPU_CTX_NO_RESET: "NO_RESET", uapi.AMDGPU_CTX_GUILTY_RESET: "GUILTY_RESET",
               uapi.AMDGPU_CTX_INNOCENT_RESET: "INNOCENT_RESET", uapi.AMDGPU_CTX_UNKNOWN_RESET: "UNKNOWN_RESET"}


class Partition(Session):
    """A device (one partition) with a context, an IB and the buffers the sample uses."""

    def __init__(self, node: str, name: str):
        print(f"partition {name}:")
        super().__init__(node)
        self.name = name
        self.flag = self.alloc(4096, "flag")
        self.ib = self.alloc(4096, "IB")
        self.src = self.alloc(SIZE, "source", uapi.AMDGPU_GEM_DOMAIN_VRAM)
        self.dst = self.alloc(SIZE, "destination")
        self.flag.cpu[:] = bytes(4096)
        self.bos = [m.bo for m in (self.flag, self.ib, self.src, self.dst)]
        self.slot = 0

    def submit(self, ctx, packets: libvgpu.SdmaIb):
        """Queue `packets` on the partition's SDMA ring from the next 256-byte IB slot."""
        data = packets.tobytes()
        off = (self.slot % 16) * 256
        self.slot += 1
        self.ib.cpu[off: off + len(data)] = data
        with libvgpu.bo_list_create(self.dev, self.bos) as bo_list:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(self.ib.va + off, len(packets))],
                                    resources=bo_list)
            libvgpu.cs_submit(ctx, req)
        return libvgpu.fence_of(ctx, req)


def describe(d: libvgpu.DrmDevice) -> None:
    with libvgpu.device_initialize(d.render) as dev:
        i = dev.info
        dma = libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA)
        vram = libvgpu.query_heap_info(dev, uapi.AMDGPU_GEM_DOMAIN_VRAM)
        print(f"  {d.pci_slot}: {d.primary.name} + {d.render.name}: {i.cu_active_number} compute unit(s), "
              f"{bin(dma.available_rings).count('1')} SDMA ring(s), VRAM {vram.total_heap_size >> 20} MiB")


def signaled(fence) -> int | None:
    """None while the job runs; else 0 or the errno its fence carries."""
    try:
        return 0 if libvgpu.cs_query_fence_status(fence, 0) else None
    except OSError as e:
        return e.errno


def reset_state(what: str, ctx) -> int:
    """The reset `ctx` saw, from QUERY_STATE2 as Mesa reads it (RESET, and GUILTY for
    the culprit); the old QUERY_STATE only says UNKNOWN_RESET, as amdgpu's does."""
    flags = ctx.query_state()
    status = (uapi.AMDGPU_CTX_NO_RESET if not flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET
              else uapi.AMDGPU_CTX_GUILTY_RESET if flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
              else uapi.AMDGPU_CTX_INNOCENT_RESET)
    print(f"  {what} context {ctx.id}: {RESET_NAMES.get(status, status)}")
    return status


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(p)
    args = p.parse_args()
    with libvgpu.device_initialize(args.device) as dev:
        mount, node = dev.mount, dev.node
    devices = libvgpu.get_devices(mount)
    print(f"1. the devices of {mount}:")
    for d in devices:
        describe(d)
    if len(devices) < 2:
        print(f"one device only: mount with partitions (vgpu mount {mount} --partitions 2)")
        print("FAIL")
        return 1
    mine = next(d for d in devices if node in (d.primary, d.render))
    other = next(d for d in devices if d is not mine)
    with Partition(str(node), "A") as a, Partition(str(other.render), "B") as b:
        hung_ctx = a.ctx
        bystander_ctx = a.stack.enter_context(libvgpu.cs_ctx_create(a.dev))
        b.src.cpu[:] = bytes((i * 7 + 3) & 0xFF for i in range(SIZE))
        crc = zlib.crc32(b.src.cpu)

        print("2. A hangs; B copies its VRAM buffer out again and again meanwhile")
        hang = a.submit(hung_ctx, libvgpu.SdmaIb().poll_regmem(a.flag.va, 0xC0FFEE))
        bystander = a.submit(bystander_ctx, libvgpu.SdmaIb().fence(a.flag.va + 8, 0x1234))
        copies, bad = 0, 0
        while signaled(hang) is None:
            b.dst.cpu[:] = bytes(SIZE)
            done = b.submit(b.ctx, libvgpu.SdmaIb().copy_linear(b.dst.va, b.src.va, SIZE))
            libvgpu.cs_query_fence_status(done, libvgpu.AMDGPU_TIMEOUT_INFINITE)
            copies += 1
            bad += zlib.crc32(b.dst.cpu) != crc
        hang_err = signaled(hang)
        print(f"  A's hung job ended with {errno.errorcode.get(hang_err, hang_err)}; B ran {copies} copies "
              f"during the hang, {bad} of them wrong")
        bystander_err = signaled(bystander)
        while bystander_err is None:
            libvgpu.cs_query_fence_status(bystander, libvgpu.AMDGPU_TIMEOUT_INFINITE)
            bystander_err = signaled(bystander)

        print("3. the contexts after A's reset")
        hung = reset_state("A's hung", hung_ctx)
        near = reset_state("A's bystander", bystander_ctx)
        far = reset_state("B's worker", b.ctx)
        intact = zlib.crc32(b.src.cpu) == crc
        print(f"  B's VRAM buffer {'kept its bytes' if intact else 'CHANGED'} (crc32 {crc:#010x})")
        with open(mount / "dev" / "kmsg") as f:
            for line in f.read().splitlines():
                if "timeout" in line or "GPU reset" in line:
                    print("  " + line)
    ok = (hang_err == errno.ETIME and bystander_err == 0 and copies > 0 and bad == 0 and intact
          and hung == uapi.AMDGPU_CTX_GUILTY_RESET and near == uapi.AMDGPU_CTX_INNOCENT_RESET
          and far == uapi.AMDGPU_CTX_NO_RESET)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
