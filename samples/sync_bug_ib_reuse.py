"""A classic synchronisation bug: a command buffer rewritten before its fence signalled.

cs_submit only queues a job: the engine reads the job's IB when it gets to it, which
may be long after the call returned. A UMD that writes the next job's packets into the
same IB memory without waiting for the first job's fence changes what the first job
runs. Here a blocker job (POLL_REGMEM on a flag the CPU sets last) keeps sdma0 busy so
that the race always goes the bad way:

  bug: submit job 1 (fill A with 0xAAAAAAAA) from IB slot X, rewrite slot X with job 2
       (fill B with 0xBBBBBBBB), submit job 2, release the blocker, wait for job 2.
       Job 1 ran job 2's packets: A is never filled.
  fix: release the blocker, wait for job 1's fence, then rewrite slot X for job 2
       (or give every job in flight its own IB memory, as Mesa's IB pools do).

    python samples/sync_bug_ib_reuse.py --device /tmp/vgpu
"""
import argparse
import sys

import libvgpu
from session import Session, add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

SIZE = 64 * 1024
A, B = 0xAAAAAAAA, 0xBBBBBBBB


class Run(Session):
    def __init__(self, device: str):
        super().__init__(device)
        self.flag = self.alloc(4096, "blocker flag")
        self.blocker_ib = self.alloc(4096, "blocker IB")
        self.ib = self.alloc(4096, "IB slot X (reused)")
        self.a = self.alloc(SIZE, "buffer A")
        self.b = self.alloc(SIZE, "buffer B")
        for m in (self.flag, self.a, self.b):
            m.cpu[:] = bytes(len(m.cpu))
        self.bos = [m.bo for m in (self.flag, self.blocker_ib, self.ib, self.a, self.b)]

    def submit(self, ib_bo, packets: libvgpu.SdmaIb, what: str):
        """Write ``packets`` into ``ib_bo`` and queue them on sdma0 (no wait)."""
        data = packets.tobytes()
        ib_bo.cpu[: len(data)] = data
        with libvgpu.bo_list_create(self.dev, self.bos) as bo_list:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_bo.va, len(packets))],
                                    resources=bo_list)
            seq = libvgpu.cs_submit(self.ctx, req)
        print(f"  submitted {what}: seq {seq}")
        return libvgpu.fence_of(self.ctx, req)

    def wait(self, fence, what: str) -> None:
        if not libvgpu.cs_query_fence_status(fence, libvgpu.AMDGPU_TIMEOUT_INFINITE):
            raise SystemExit(f"{what}: fence did not signal")
        print(f"  waited for {what}")

    def release_blocker(self) -> None:
        self.flag.cpu[:4] = (1).to_bytes(4, "little")
        print("  CPU sets the flag: the blocker ends, sdma0 runs the queued jobs")

    def filled(self, m, value: int) -> bool:
        return bytes(m.cpu) == value.to_bytes(4, "little") * (SIZE // 4)

    def play(self, fixed: bool) -> tuple[bool, bool]:
        """Returns (A filled, B filled)."""
        self.submit(self.blocker_ib, libvgpu.SdmaIb().poll_regmem(self.flag.va, 1), "blocker")
        job1 = self.submit(self.ib, libvgpu.SdmaIb().constant_fill(self.a.va, A, SIZE), "job 1 from slot X")
        if fixed:
            self.release_blocker()
            self.wait(job1, "job 1's fence before reusing slot X")
        job2 = self.submit(self.ib, libvgpu.SdmaIb().constant_fill(self.b.va, B, SIZE),
                           "job 2 from slot X" + ("" if fixed else ", rewritten while job 1 is queued"))
        if not fixed:
            self.release_blocker()
        self.wait(job2, "job 2")
        a_ok, b_ok = self.filled(self.a, A), self.filled(self.b, B)
        print(f"  buffer A {'filled with 0xAAAAAAAA' if a_ok else 'NOT filled: job 1 ran job 2 packets'}, "
              f"buffer B {'filled with 0xBBBBBBBB' if b_ok else 'NOT filled'}")
        return a_ok, b_ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(p)
    args = p.parse_args()
    print("bug: slot X rewritten before job 1's fence signalled")
    with Run(args.device) as r:
        bug = r.play(fixed=False)
    print("fix: wait for job 1's fence, then reuse slot X")
    with Run(args.device) as r:
        fix = r.play(fixed=True)
    shown = bug == (False, True)
    fixed = fix == (True, True)
    print(f"the bug {'showed' if shown else 'did NOT show'} (A lost), "
          f"the fix {'worked' if fixed else 'did NOT work'} (A and B filled)")
    print("PASS" if shown and fixed else "FAIL")
    sys.exit(0 if shown and fixed else 1)


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
