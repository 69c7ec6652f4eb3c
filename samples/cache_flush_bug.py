"""A classic synchronisation bug: a kernel's results read before its L2 was written back.

A GPU's compute units write through a write-back L2 cache; the CPU and the SDMA
engine read memory, not that cache. A kernel's stores reach memory when a release
writes the L2 back: the RELEASE_MEM whose cache actions say so, or the fence the
driver puts after every job (amdgpu's gfx_v9_0_ring_emit_fence writes back and
invalidates). Waiting for the job's fence is therefore always safe; the bug hides
where a program signals "results ready" *inside* a job, with a RELEASE_MEM that has
no cache action, as a persistent kernel or a cross-queue user fence does:

  IB on comp_1.0.0: c = a + b (vector_add), RELEASE_MEM writing ready = 1 (cache
                  actions: none for the bug, EOP_TC_WB for the fix), then WAIT_REG_MEM
                  until the CPU sets go = 1 (the job stays in flight);
  IB on sdma0:    POLL_REGMEM until ready = 1, then COPY c -> d;
  CPU:            waits for ready = 1, reads c; waits for the SDMA copy, reads d;
                  sets go = 1, waits for the compute job's fence, reads c again.

  bug: ready is set while c is still in the L2: the CPU reads and SDMA copies
       stale memory (the zeros c was cleared to); c is right only after the fence.
  fix: RELEASE_MEM with the write-back action (RELEASE_WB: EOP_TC_WB_ACTION_EN |
       EOP_TC_NC_ACTION_EN, what amdgpu's write-back-only fence uses) before ready.

Needs a mount with the L2 model (`vgpu mount --cache-model MOUNT`); on a mount
without it memory is coherent, the bug cannot show, and the sample says so.

    python samples/cache_flush_bug.py --device /tmp/vgpu
"""
import argparse
import os
import struct
import time

import numpy as np

import libvgpu
from compute_common import ComputeSession
from libvgpu import pm4
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

N = 1024                        # elements of a, b, c, d (float32)
READY, GO = 0, 4                # the flags' offsets in their BO
WAIT_S = 10.0


def cache_model(mount: str) -> str | None:
    """The mount's L2 model line from sysfs (`model l2`...), or None without one."""
    with open(os.path.join(mount, "sys/class/drm/card0/device/vgpu_cache")) as f:
        fields = dict(line.split(" ", 1) for line in f.read().splitlines())
    if fields.get("model") != "l2":
        return None
    return f"L2 of {int(fields['size']) >> 10} KiB, {fields['line']}-byte lines"


class Run(ComputeSession):
    def __init__(self, device: str):
        super().__init__(device)
        self.kernel = self.load_kernel("vector_add")
        self.a, self.b, self.c, self.d = (self.alloc(4 * N, name) for name in "abcd")
        self.flags = self.alloc(4096, "flags (ready, go)")
        rng = np.random.default_rng(7)
        self.want = rng.standard_normal(N, dtype=np.float32) + 1
        self.a.cpu[:4 * N] = self.want.tobytes()
        self.b.cpu[:4 * N] = np.ones(N, np.float32).tobytes()
        self.want = self.want + np.float32(1)
        for m in (self.c, self.d, self.flags):
            m.cpu[:] = bytes(len(m.cpu))
        kernarg = self.alloc(self.kernel.obj.kernarg_size, "kernargs")
        kernarg.cpu[:self.kernel.obj.kernarg_size] = self.kernel.pack_args(
            a=self.a.va, b=self.b.va, c=self.c.va, n=N)
        self.kernarg = kernarg

    def flag(self, off: int) -> int:
        return struct.unpack_from("<I", self.flags.cpu, off)[0]

    def correct(self, m) -> int:
        """Elements of `m` equal to a + b."""
        return int(np.count_nonzero(np.frombuffer(bytes(m.cpu[:4 * N]), np.float32) == self.want))

    def play(self, fixed: bool) -> tuple[int, int, int]:
        """Returns the correct elements of (c read at ready, d, c after the fence)."""
        ib = libvgpu.emit_dispatch(libvgpu.Pm4Ib(), self.kernel, grid=(N // 64, 1, 1),
                                   user_data=libvgpu.kernarg_user_data(self.kernarg.va))
        ib.release_mem(self.flags.va + READY, 1, pm4.DATA_SEL_32, event=pm4.EVENT_BOTTOM_OF_PIPE_TS,
                       cache=pm4.RELEASE_WB if fixed else 0)
        ib.wait_reg_mem(self.flags.va + GO, 1)
        for line in pm4.disasm_pm4(ib.dwords):
            print("    " + line.strip())
        compute = self.submit(ib)
        copy = libvgpu.SdmaIb().poll_regmem(self.flags.va + READY, 1).copy_linear(self.d.va, self.c.va, 4 * N)
        buf = self.alloc(len(copy) * 4, "SDMA IB", flags=uapi.AMDGPU_VM_PAGE_READABLE)
        buf.cpu[:len(copy) * 4] = copy.tobytes()
        sdma = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(buf.va, len(copy))])
        libvgpu.cs_submit(self.ctx, sdma)
        print("  submitted the SDMA copy c -> d, waiting for ready on its own (POLL_REGMEM)")
        deadline = time.monotonic() + WAIT_S
        while self.flag(READY) != 1:
            if time.monotonic() > deadline:
                raise SystemExit("ready was never set: the compute job did not run")
            time.sleep(0.001)
        at_ready = self.correct(self.c)
        print(f"  CPU sees ready = 1 and reads c: {at_ready} of {N} elements are a + b")
        libvgpu.cs_query_fence_status(libvgpu.fence_of(self.ctx, sdma), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        copied = self.correct(self.d)
        print(f"  the SDMA copy is done: {copied} of {N} elements of d are a + b")
        struct.pack_into("<I", self.flags.cpu, GO, 1)
        self.wait(compute)
        after = self.correct(self.c)
        print(f"  CPU sets go = 1; after the job's fence (amdgpu's fence writes the L2 back) "
              f"{after} of {N} elements of c are a + b")
        return at_ready, copied, after


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(p)
    args = p.parse_args()
    results = {}
    for fixed in (False, True):
        print("fix: RELEASE_MEM writes the L2 back before ready" if fixed
              else "bug: RELEASE_MEM sets ready with no cache action")
        with Run(args.device) as r:
            model = cache_model(r.dev.mount)
            if not fixed:
                print(f"  the mount's cache model: {model or 'none (vgpu mount --cache-model MOUNT adds one)'}")
            results[fixed] = r.play(fixed)
    full = (N, N, N)
    fix_ok = results[True] == full
    if model is None:
        # Memory is coherent: the missing release cannot be seen, both runs are right.
        shown = results[False] == full
        print("this mount has no L2 model: compute writes reach memory at once, so the missing "
              "release did no harm here; mount with --cache-model to see the bug")
    else:
        bug = results[False]
        shown = bug[0] < N and bug[1] < N and bug[2] == N
        print(f"the bug {'showed' if shown else 'did NOT show'} (stale c and d before the fence), "
              f"the fix {'worked' if fix_ok else 'did NOT work'} (c and d right at ready)")
    ok = shown and fix_ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
