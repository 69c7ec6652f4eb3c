"""A HIGH-priority kernel arriving while a long LOW-priority kernel runs: preemption.

A LOW context runs spin_hash (samples/kernels/spin_hash.s) long enough to take about
a second; once it has started, a HIGH context submits a short spin_hash on the same
compute ring. Each IB brackets its dispatch with two RELEASE_MEMs that write the GPU
timestamp (CLOCK_MONOTONIC), so the sample prints when each kernel started and ended
on the GPU. On a default mount the KMD preempts the LOW kernel mid-dispatch (its
waves' state goes to the context's save area), runs the HIGH kernel, and resumes the
LOW one: HIGH starts within milliseconds of its arrival and ends before LOW. On a
`vgpu mount --no-preempt` mount HIGH waits for LOW to end. Both results are checked
against numpy either way. HIGH needs root (CAP_SYS_NICE for priorities above NORMAL).

    sudo python3 samples/preemption.py --device /tmp/vgpu [--low-rounds N]
"""
import argparse
import errno
import struct
import time

import numpy as np

import libvgpu
from compute_common import COMPUTE, ComputeSession
from libvgpu import pm4
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

N_LOW, N_HIGH = 4096, 256
MUL, ADD = 1664525, 1013904223


def spin_hash_host(n: int, rounds: int) -> np.ndarray:
    """What spin_hash computes: h^rounds(i) for i < n, h(x) = x * MUL + ADD mod 2^32.
    h^k is affine too, x * a + b: composed by squaring, in O(log rounds) steps."""
    a, b = 1, 0                      # h^0
    pa, pb = MUL, ADD                # h^(2^j)
    k = rounds
    while k:
        if k & 1:                    # h^(2^j) after what we have
            a, b = a * pa % 2**32, (b * pa + pb) % 2**32
        pa, pb = pa * pa % 2**32, (pb * pa + pb) % 2**32
        k >>= 1
    return np.arange(n, dtype=np.uint32) * np.uint32(a) + np.uint32(b)


class Kernel:
    """One spin_hash launch on a context: its output, its two timestamps, its job."""

    def __init__(self, s: ComputeSession, kernel, ctx, name: str, n: int, rounds: int):
        self.name, self.n, self.rounds, self.ctx = name, n, rounds, ctx
        self.out = s.alloc(4 * n, f"{name} output", uapi.AMDGPU_GEM_DOMAIN_VRAM)
        self.stamps = s.alloc(16, f"{name} timestamps")
        kernarg = s.alloc(kernel.obj.kernarg_size, f"{name} kernargs")
        kernarg.cpu[:kernel.obj.kernarg_size] = kernel.pack_args(out=self.out.va, n=n, rounds=rounds)
        ib = libvgpu.Pm4Ib().release_mem(self.stamps.va, 0, pm4.DATA_SEL_TIMESTAMP)
        libvgpu.emit_dispatch(ib, kernel, grid=(-(-n // 64), 1, 1), user_data=libvgpu.kernarg_user_data(kernarg.va))
        ib.release_mem(self.stamps.va + 8, 0, pm4.DATA_SEL_TIMESTAMP)
        data = ib.tobytes()
        self.ib = s.alloc(len(data), f"{name} IB", flags=uapi.AMDGPU_VM_PAGE_READABLE)
        self.ib.cpu[:len(data)] = data
        self.dwords = len(ib)
        self.req = None
        self.submitted_ns = 0

    def submit(self) -> None:
        self.req = libvgpu.CsRequest(COMPUTE, [libvgpu.IbInfo(self.ib.va, self.dwords)])
        self.submitted_ns = time.monotonic_ns()
        libvgpu.cs_submit(self.ctx, self.req)

    def started(self) -> int:
        return struct.unpack("<Q", self.stamps.cpu[:8])[0]

    def times(self) -> tuple[int, int]:
        return struct.unpack("<QQ", self.stamps.cpu[:16])

    def wait(self) -> None:
        libvgpu.cs_query_fence_status(libvgpu.fence_of(self.ctx, self.req), libvgpu.AMDGPU_TIMEOUT_INFINITE)

    def check(self) -> bool:
        got = np.frombuffer(bytes(self.out.cpu[:4 * self.n]), np.uint32)
        bad = np.flatnonzero(got != spin_hash_host(self.n, self.rounds))
        print(f"  check {self.name}: " + (f"all {self.n} elements right" if not bad.size else
                                          f"{bad.size} of {self.n} wrong, first [{bad[0]}]"))
        return not bad.size


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    p.add_argument("--low-rounds", type=int, default=500_000,
                   help="rounds of the LOW kernel over 4096 elements (default 500000: about a second)")
    p.add_argument("--high-rounds", type=int, default=50, help="rounds of the HIGH kernel (default 50)")
    p.add_argument("--arrive-after", type=float, default=0.3,
                   help="seconds after LOW starts that HIGH is submitted (default 0.3)")
    args = p.parse_args()
    with ComputeSession(args.device) as s:
        kernel = s.load_kernel("spin_hash")
        low_ctx = s.stack.enter_context(libvgpu.cs_ctx_create(s.dev, uapi.AMDGPU_CTX_PRIORITY_LOW))
        try:
            high_ctx = s.stack.enter_context(libvgpu.cs_ctx_create(s.dev, uapi.AMDGPU_CTX_PRIORITY_HIGH))
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                print("a HIGH-priority context needs root (CAP_SYS_NICE); run it with sudo")
                return 1
            raise
        low = Kernel(s, kernel, low_ctx, "LOW", N_LOW, args.low_rounds)
        high = Kernel(s, kernel, high_ctx, "HIGH", N_HIGH, args.high_rounds)
        low.submit()
        print(f"LOW kernel submitted on context {low_ctx.id} (LOW): {N_LOW} threads x {args.low_rounds} rounds")
        while not low.started():
            time.sleep(0.0005)
        time.sleep(args.arrive_after)
        high.submit()
        print(f"HIGH kernel submitted on context {high_ctx.id} (HIGH): {N_HIGH} threads x {args.high_rounds} rounds")
        high.wait()
        high_done_ns = time.monotonic_ns()
        low.wait()
        (l0, l1), (h0, h1) = low.times(), high.times()
        ms = (lambda t: f"{(t - l0) / 1e6:9.3f} ms")
        print("on the GPU (ms from the LOW kernel's start):")
        for label, t in sorted([("LOW  starts", l0), ("HIGH arrives (CS)", high.submitted_ns),
                                ("HIGH starts", h0), ("HIGH ends", h1), ("LOW  ends", l1)], key=lambda e: e[1]):
            print(f"  {ms(t)}  {label}")
        print(f"HIGH arrival to HIGH start: {(h0 - high.submitted_ns) / 1e6:.3f} ms; "
              f"its fence signaled {(high_done_ns - high.submitted_ns) / 1e6:.3f} ms after its CS")
        if high.submitted_ns >= l1:
            print("LOW had ended before HIGH arrived: give LOW more --low-rounds")
        elif h1 <= l1:
            print("HIGH ran while LOW was in flight: LOW was preempted and resumed")
        else:
            print("HIGH waited for LOW to end (no preemption: vgpu mount --no-preempt)")
        ok = low.check() & high.check()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
