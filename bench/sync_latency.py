"""(d) Fence signal -> waiter wake-up: poll() on a sync file, WAIT_CS, SYNCOBJ_WAIT.

One client process (libvgpu) submits on sdma0 a job that stamps the GPU clock
(SDMA TIMESTAMP, CLOCK_MONOTONIC ns, docs/hw.md), copies 32 MiB VRAM -> VRAM to
keep the engine busy for a few milliseconds, and stamps the clock again as its
last packet; the job's fence also goes to a syncobj (SYNCOBJ_OUT). Right after
``cs_submit`` the client blocks in one of three waits:

- ``poll()``: POLLIN on ``MOUNT/sync/<token>``, the syncobj's exported token file
  (opened before the submission, as a compositor keeps its fd);
- ``WAIT_CS``: ``cs_query_fence_status`` with an infinite timeout;
- ``SYNCOBJ_WAIT``: ``syncobj_wait`` on the syncobj.

It takes ``time.monotonic_ns()`` when the wait returns; the latency is that minus
the job's last TIMESTAMP (same clock): the ring's fence write, the interrupt, the
KMD signalling the fence and waking the waiter, and the reply through FUSE. A
sample counts only if the client entered the wait before that last stamp (the
waiter really slept); the three methods take turns, median of each.

    python3 -m bench.sync_latency          # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import sys
import time

from . import util

DELAY_BYTES = 32 * util.MiB  # eight 4 MiB COPY_LINEARs: a few ms of engine time
METHODS = ("poll", "wait_cs", "syncobj")


def client(mount: str, rounds: int) -> None:
    """Client process: ``rounds`` turns of the three methods; prints JSON
    {method: [[ns wake - last stamp, ns of GPU work, waited before the stamp], ...]}."""
    import os
    import select
    import struct

    import libvgpu
    from vgpu import uapi
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        def alloc(size: int, domain: int):
            bo = stack.enter_context(libvgpu.bo_alloc(dev, size, 4096, domain))
            va = stack.enter_context(libvgpu.va_range_alloc(dev, size, 4096))
            libvgpu.bo_va_op(bo, 0, size, va.address)
            stack.callback(libvgpu.bo_va_op, bo, 0, size, va.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
            return bo, va.address

        (_, src), (_, dst) = (alloc(DELAY_BYTES, uapi.AMDGPU_GEM_DOMAIN_VRAM) for _ in range(2))
        stamps, va_stamps = alloc(4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
        ib = libvgpu.SdmaIb().timestamp(va_stamps)
        for off in range(0, DELAY_BYTES, 4 * util.MiB):
            ib.copy_linear(dst + off, src + off, 4 * util.MiB)
        ib.timestamp(va_stamps + 8)
        gpu = util.Submitter(dev, ib.tobytes(), [stamps])
        stack.callback(gpu.close)
        syncobj = stack.enter_context(libvgpu.syncobj_create(dev))
        gpu.request.syncobj_out = [syncobj]
        path = str(libvgpu.sync_file_path(dev, libvgpu.syncobj_export(syncobj)))
        view = stamps.cpu_map()
        stack.callback(stamps.cpu_unmap)
        clock = time.monotonic_ns

        def once(method: str) -> list:
            fd = os.open(path, os.O_RDONLY) if method == "poll" else -1
            try:
                seq = gpu.submit()
                t_call = clock()
                if method == "poll":
                    p = select.poll()
                    p.register(fd, select.POLLIN)
                    while not p.poll():
                        pass
                elif method == "wait_cs":
                    gpu.wait(seq)
                else:
                    libvgpu.syncobj_wait(dev, [syncobj])
                t_wake = clock()
            finally:
                if fd >= 0:
                    os.close(fd)
            start, end = struct.unpack_from("<2Q", view, 0)
            return [t_wake - end, end - start, t_call < end]

        for m in METHODS:  # warm-up: first job of each path
            once(m)
        out = {m: [] for m in METHODS}
        for _ in range(rounds):
            for m in METHODS:
                out[m].append(once(m))
        del view
        print(json.dumps(out), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    rounds = 20 if util.quick() else 200
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        samples = util.client_json("bench.sync_latency", vgpu_mount, rounds)
    r = {"rounds": rounds}
    for m in METHODS:
        slept = [lat for lat, _, before in samples[m] if before]
        r[m] = {"latency": util.median(slept) / 1e9 if slept else float("nan"), "slept": len(slept),
                "gpu": util.median([g for _, g, _ in samples[m]]) / 1e9}
    return r


def report(r: dict) -> list[tuple[str, str, str]]:
    names = {"poll": "signal -> poll() wake-up (sync file)", "wait_cs": "signal -> WAIT_CS return",
             "syncobj": "signal -> SYNCOBJ_WAIT return"}
    return [(names[m], f"{r[m]['latency'] * 1e6:.0f} µs",
             f"median of {r[m]['slept']}/{r['rounds']} that slept; job {r[m]['gpu'] * 1e3:.1f} ms")
            for m in METHODS]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    else:
        for row in report(run()):
            print("  ".join(row))
