"""A user-mode queue (docs/userq.md): create an SDMA queue, submit NOPs and a FENCE
with stores and a FUTEX_WAKE, wait for them with FUTEX_WAIT, and time it against the
same work through CS + WAIT_CS. After the setup ioctls, `strace -f -e trace=ioctl,futex`
shows only futex calls for the queue's part.

    python samples/userq_nop.py --device /tmp/vgpu [--count 1000]
"""
import argparse
import statistics
import struct
import time

from sdma_common import SdmaTest
from session import add_device_argument

import libvgpu
from libvgpu.userq import UserQueue, userq_supported
from vgpu import uapi
from vgpu.errors import UserError, exit_main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(p)
    p.add_argument("--count", type=int, default=1000, help="NOP submissions timed each way (default 1000)")
    args = p.parse_args()
    if args.count < 1:
        raise UserError("--count must be at least 1")
    with SdmaTest(args.device) as t:
        if not userq_supported(t.dev, uapi.AMDGPU_HW_IP_DMA):
            raise UserError("this device has no SDMA user queues (DEV_INFO userq_ip_mask)")
        fence = t.alloc(4096, "fence")
        with UserQueue(t.dev, uapi.AMDGPU_HW_IP_DMA) as q:
            print(f"created user queue {q.id}: ring {q.size} bytes at {q.ring_va:#x}, "
                  f"rptr/wptr at {q.ptr_va:#x}, doorbell handle {q.doorbell_bo.handle}")
            done = q.submit(libvgpu.SdmaIb().fence(fence.va, 0xC0FFEE).dwords)
            q.wait(done)
            value = struct.unpack("<I", fence.cpu[:4])[0]
            print(f"fence written by the queue: {value:#x} (rptr {q.rptr})")
            if value != 0xC0FFEE:
                raise SystemExit("the queue's FENCE did not land")
            times = []
            nop = libvgpu.SdmaIb().nop().dwords
            for _ in range(args.count):
                t0 = time.perf_counter()
                q.wait(q.submit(nop))
                times.append(time.perf_counter() - t0)
        uq = statistics.median(times) * 1e6
        print(f"user queue: NOP submit -> rptr observed, median {uq:.1f} us over {args.count}")
        cs_times = []
        ib = t.alloc(4096, "IB")
        ib.cpu[:4] = libvgpu.SdmaIb().nop().tobytes()
        with libvgpu.bo_list_create(t.dev, [ib.bo]) as bo_list:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib.va, 1)], resources=bo_list)
            for _ in range(min(args.count, 300)):
                t0 = time.perf_counter()
                libvgpu.cs_submit(t.ctx, req)
                libvgpu.cs_query_fence_status(libvgpu.fence_of(t.ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
                cs_times.append(time.perf_counter() - t0)
        cs = statistics.median(cs_times) * 1e6
        print(f"CS + WAIT_CS: NOP, median {cs:.1f} us over {len(cs_times)}: the queue is {cs / uq:.1f}x faster")


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
