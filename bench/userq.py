"""(l) user-mode queues against CS, in the same client process (docs/userq.md).

- NOP latency: one SDMA NOP written to an SDMA user queue, wptr published, the
  doorbell rung and FUTEX_WAKEd, then FUTEX_WAIT until the queue's rptr passes it;
  the median of one at a time. Beside it the same NOP through CS + WAIT_CS
  (libvgpu's prebuilt-free path, as (b) measures it) and their ratio.
- Throughput: N NOPs committed back to back on the queue, one wait for the last.
- SDMA CONSTANT_FILL and COPY_LINEAR of 64 MiB through the queue against numpy's
  fill and copy of the same size, as ratios (section (c) does the same through CS).

    python3 -m bench.userq            # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import sys
import time

from . import util

BIG = 64 * util.MiB


def client(mount: str, rounds: int) -> None:
    """Client process: prints JSON {uq, cs: [seconds per pair], uq_rate, fill, copy,
    np_fill, np_copy: seconds}."""
    import json

    import numpy as np

    import libvgpu
    from libvgpu.userq import UserQueue
    from vgpu import uapi
    out = {}
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        def alloc(size: int, domain: int):
            bo = stack.enter_context(libvgpu.bo_alloc(dev, size, 4096, domain))
            va = stack.enter_context(libvgpu.va_range_alloc(dev, size, 1 << 21))
            libvgpu.bo_va_op(bo, 0, size, va.address)
            return bo, va.address

        q = stack.enter_context(UserQueue(dev, uapi.AMDGPU_HW_IP_DMA))
        nop = libvgpu.SdmaIb().nop().dwords
        q.wait(q.submit(nop))
        uq = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            q.wait(q.submit(nop))
            uq.append(time.perf_counter() - t0)
        gpu = util.Submitter(dev, (0).to_bytes(4, "little"), [])
        stack.callback(gpu.close)
        cs = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            gpu.wait(gpu.submit())
            cs.append(time.perf_counter() - t0)
        n = rounds * 5
        t0 = time.perf_counter()
        for _ in range(n):
            q.write(nop)
        q.wait(q.commit())
        out["uq_rate"] = n / (time.perf_counter() - t0)
        (_, src), (_, dst) = alloc(BIG, uapi.AMDGPU_GEM_DOMAIN_VRAM), alloc(BIG, uapi.AMDGPU_GEM_DOMAIN_VRAM)
        fill, copy = libvgpu.SdmaIb(), libvgpu.SdmaIb()
        for off in range(0, BIG, 4 * util.MiB):
            fill.constant_fill(dst + off, 0x5A5A5A5A, 4 * util.MiB)
            copy.copy_linear(dst + off, src + off, 4 * util.MiB)
        reps = 2 if util.quick() else 5
        for name, ib in (("fill", fill), ("copy", copy)):
            q.wait(q.submit(ib.dwords))          # warm
            t = []
            for _ in range(reps):
                t0 = time.perf_counter()
                q.wait(q.submit(ib.dwords))
                t.append(time.perf_counter() - t0)
            out[name] = util.median(t)
        a, b = np.empty(BIG, np.uint8), np.ones(BIG, np.uint8)
        a.fill(1)
        out["np_fill"] = util.median([_timed(lambda: a.fill(0x5A)) for _ in range(reps)])
        out["np_copy"] = util.median([_timed(lambda: np.copyto(a, b)) for _ in range(reps)])
        out["uq"], out["cs"] = uq, cs
    print(json.dumps(out))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(vgpu_mount: str | None = None) -> dict:
    rounds = 50 if util.quick() else 1000
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        r = util.client_json("bench.userq", vgpu_mount, rounds)
    r["uq_median"], r["cs_median"] = util.median(r.pop("uq")), util.median(r.pop("cs"))
    r["rounds"] = rounds
    return r


def report(r: dict) -> list[tuple[str, str, str]]:
    return [
        ("NOP submit -> rptr observed (SDMA user queue)", util.fmt_us(r["uq_median"]),
         f"median of {r['rounds']}; target <= 30 µs"),
        ("NOP CS -> WAIT_CS (same process)", util.fmt_us(r["cs_median"]),
         f"user queue {r['cs_median'] / r['uq_median']:.1f}x faster"),
        ("NOPs back to back through the queue", f"{r['uq_rate']:,.0f}/s", "one wait for the last"),
        ("CONSTANT_FILL 64 MiB via user queue", f"{BIG / r['fill'] / 1e9:.2f} GB/s",
         f"{r['np_fill'] / r['fill']:.2f}x numpy's fill (target >= 0.9x)"),
        ("COPY_LINEAR 64 MiB via user queue", f"{BIG / r['copy'] / 1e9:.2f} GB/s",
         f"{r['np_copy'] / r['copy']:.2f}x numpy's copy (target >= 1.1x)"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    else:
        for row in report(run()):
            print("  ".join(row))
