"""A timeline syncobj between two SDMA rings and the CPU, step by step.

A producer on sdma0 fills three blocks, one job per block, each signalling the next
point of one timeline syncobj (SYNCOBJ_TIMELINE_SIGNAL chunk: points 1, 2, 3). Its
first job is held back by a gate (POLL_REGMEM on a word the CPU writes later), so
everything queued behind it is visibly waiting. Consumers on sdma1 wait for one
point each (SYNCOBJ_TIMELINE_WAIT chunk) and copy that block out. The CPU queries
the timeline (SYNCOBJ_QUERY), waits for points (SYNCOBJ_TIMELINE_WAIT), signals a
point itself, and finally checks every byte and the order of the GPU timestamps.

    python samples/syncobj_timeline.py --device /tmp/vgpu
"""
import argparse
import contextlib
import errno
import struct

import libvgpu
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

BLOCK = 4096
POINTS = (1, 2, 3)
IB_SLOT = 256  # bytes per IB in the IB BO
GTT, VRAM = uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_VRAM


def fill_value(point: int) -> int:
    return 0xA0000000 | point * 0x01010101


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    args = p.parse_args()
    with contextlib.ExitStack() as stack:
        dev = stack.enter_context(libvgpu.device_initialize(args.device))
        producer = stack.enter_context(libvgpu.cs_ctx_create(dev))
        consumer = stack.enter_context(libvgpu.cs_ctx_create(dev))

        def alloc(size: int, domain: int):
            bo = stack.enter_context(libvgpu.bo_alloc(dev, size, 4096, domain))
            va = stack.enter_context(libvgpu.va_range_alloc(dev, size, 4096))
            libvgpu.bo_va_op(bo, 0, size, va.address)
            stack.callback(libvgpu.bo_va_op, bo, 0, size, va.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
            return bo, va.address

        gate, va_gate = alloc(4096, GTT)          # word 0: the producer's gate
        stamps, va_stamps = alloc(4096, GTT)      # 2 x u64 per job: start, end
        blocks, va_blocks = alloc(3 * BLOCK, VRAM)  # what the producer makes
        out, va_out = alloc(3 * BLOCK, VRAM)      # what the consumers copy out
        ibs, va_ibs = alloc(4096, GTT)
        ib_cpu = ibs.cpu_map()
        stack.callback(ibs.cpu_unmap)
        gate_cpu = gate.cpu_map()
        stack.callback(gate.cpu_unmap)
        bo_list = stack.enter_context(libvgpu.bo_list_create(dev, [gate, stamps, blocks, out, ibs]))
        timeline = stack.enter_context(libvgpu.syncobj_create(dev))
        slots = iter(range(4096 // IB_SLOT))

        def submit(ctx, ring: int, packets: libvgpu.SdmaIb, **sync) -> libvgpu.CsFence:
            slot = next(slots) * IB_SLOT
            ib_cpu[slot: slot + len(packets) * 4] = packets.tobytes()
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ibs + slot, len(packets))],
                                    resources=bo_list, ring=ring, **sync)
            libvgpu.cs_submit(ctx, req)
            return libvgpu.fence_of(ctx, req)

        def stamp(job: int, which: int) -> int:
            return va_stamps + (job * 2 + which) * 8

        def query() -> str:
            done, = libvgpu.syncobj_query([timeline])
            submitted, = libvgpu.syncobj_query([timeline], last_submitted=True)
            return f"signalled up to point {done}, last submitted point {submitted}"

        print(f"opened {dev.node}; timeline syncobj handle {timeline.handle}; "
              f"producer context {producer.id} on sdma0, consumer context {consumer.id} on sdma1")
        print("1. producer jobs on sdma0, each signalling one timeline point")
        for i, point in enumerate(POINTS):
            ib = libvgpu.SdmaIb()
            if point == 1:
                ib.poll_regmem(va_gate, 1)  # held until the CPU opens the gate (step 4)
            ib.timestamp(stamp(i, 0)).constant_fill(va_blocks + i * BLOCK, fill_value(point), BLOCK) \
                .timestamp(stamp(i, 1))
            fence = submit(producer, 0, ib, timeline_signal=[(timeline, point)])
            print(f"  seq {fence.fence}: fill block {i} with {fill_value(point):#010x}, signal point {point}"
                  + (" (gated)" if point == 1 else ""))
        print(f"  query: {query()}")

        print("2. consumer jobs on sdma1, each waiting for one point")
        consumers = []
        for i, point in enumerate(POINTS):
            ib = libvgpu.SdmaIb().timestamp(stamp(3 + i, 0)) \
                .copy_linear(va_out + i * BLOCK, va_blocks + i * BLOCK, BLOCK).timestamp(stamp(3 + i, 1))
            consumers.append(submit(consumer, 1, ib, timeline_wait=[(timeline, point)]))
            print(f"  seq {consumers[-1].fence}: wait for point {point}, copy block {i} out")
        pending = [not libvgpu.cs_query_fence_status(f, 0) for f in consumers]
        print(f"  consumer fences busy: {pending}")

        print("3. the CPU waits for point 2 for 100 ms while the gate is closed")
        try:
            libvgpu.syncobj_timeline_wait(dev, [timeline], [2], timeout_ns=100_000_000)
            print("  signalled (unexpected: the gate is closed)")
            timed_out = False
        except OSError as e:
            print(f"  {errno.errorcode[e.errno]}; {query()}")
            timed_out = e.errno == errno.ETIME

        print("4. the CPU opens the gate and waits for point 2, then point 3")
        gate_cpu[:4] = struct.pack("<I", 1)  # shared pages: the POLL_REGMEM sees it at once
        libvgpu.syncobj_timeline_wait(dev, [timeline], [2])
        after_2, = libvgpu.syncobj_query([timeline])
        print(f"  point 2 signalled; query: {query()}")
        libvgpu.syncobj_timeline_wait(dev, [timeline], [3])
        after_3, = libvgpu.syncobj_query([timeline])
        print(f"  point 3 signalled; query: {query()}")

        print("5. the CPU signals point 4 itself (no GPU job)")
        libvgpu.syncobj_timeline_signal([timeline], [4])
        after_4, = libvgpu.syncobj_query([timeline])
        print(f"  query: {query()}")

        print("6. the consumers finish; the CPU checks the data and the order")
        signaled, _ = libvgpu.cs_wait_fences(consumers)
        print(f"  consumer fences {[f.fence for f in consumers]}: {'signaled' if signaled else 'BUSY'}")
        got = bytes(out.cpu_map())
        out.cpu_unmap()
        ok = True
        for i, point in enumerate(POINTS):
            want = struct.pack("<I", fill_value(point)) * (BLOCK // 4)
            match = got[i * BLOCK:(i + 1) * BLOCK] == want
            ok &= match
            print(f"  block {i}: {'all ' + str(BLOCK) + ' bytes match' if match else 'MISMATCH'}")
        t = struct.unpack("<12Q", bytes(stamps.cpu_map())[:96])
        stamps.cpu_unmap()
        for i, point in enumerate(POINTS):
            produced_end, consumed_start = t[i * 2 + 1], t[(3 + i) * 2]
            in_order = 0 < produced_end <= consumed_start
            ok &= in_order
            print(f"  point {point}: consumer started {(consumed_start - produced_end) / 1e3:.0f} µs after "
                  f"the producer's block was done{'' if in_order else ' -- OUT OF ORDER'}")
    ok = ok and all(pending) and timed_out and signaled and after_2 >= 2 and after_3 == 3 and after_4 == 4
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
