"""(e) Hang -> completed reset, against the configured ring timeout.

Mounts its own vgpu with a short ring timeout (``--timeout 0.5``; the shared bench
mount keeps the default 2 s). A client process, per round, on a fresh context
(the hung one is guilty afterwards): submits on sdma0 a job that POLL_REGMEMs a
word nobody writes, and waits for it with WAIT_CS (infinite timeout) until the
wait fails with ETIME. The KMD signals that fence only after the watchdog has
aborted the job and ``Device.gpu_reset`` has finished (log, devcoredump,
cancellation, reset counter), so submit -> ETIME is hang -> completed reset. Then
a NOP on another fresh context: submit -> its fence is the time until the ring
runs work again. All on CLOCK_MONOTONIC in the client; median of the rounds.

    python3 -m bench.reset_time            # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import sys
import time

from . import util

TIMEOUT = 0.5  # seconds: the mount's --timeout


def client(mount: str, rounds: int) -> None:
    """Client process: prints JSON [[s submit -> ETIME, s submit -> next job done], ...]."""
    import libvgpu
    from vgpu import uapi
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        flag = stack.enter_context(libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT))
        va_flag = stack.enter_context(libvgpu.va_range_alloc(dev, 4096, 4096))
        libvgpu.bo_va_op(flag, 0, 4096, va_flag.address)
        stack.callback(libvgpu.bo_va_op, flag, 0, 4096, va_flag.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
        hang = util.Submitter(dev, libvgpu.SdmaIb().poll_regmem(va_flag.address, 0xC0FFEE).tobytes(), [flag])
        stack.callback(hang.close)
        nop = util.Submitter(dev, libvgpu.SdmaIb().nop().tobytes())
        stack.callback(nop.close)
        nop.wait(nop.submit())  # warm-up
        out = []
        for _ in range(rounds):
            # fresh contexts each round: the hang makes its context guilty
            with libvgpu.cs_ctx_create(dev) as hung, libvgpu.cs_ctx_create(dev) as fresh:
                t0 = time.monotonic()
                libvgpu.cs_submit(hung, hang.request)
                try:
                    libvgpu.cs_query_fence_status(libvgpu.fence_of(hung, hang.request),
                                                  libvgpu.AMDGPU_TIMEOUT_INFINITE)
                    raise RuntimeError("the hung job's fence signalled without an error")
                except libvgpu.VgpuTimeout:
                    t1 = time.monotonic()
                libvgpu.cs_submit(fresh, nop.request)
                libvgpu.cs_query_fence_status(libvgpu.fence_of(fresh, nop.request),
                                              libvgpu.AMDGPU_TIMEOUT_INFINITE)
                out.append([t1 - t0, time.monotonic() - t0])
        print(json.dumps(out), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    """Ignores the shared mount: the reset needs its own short --timeout."""
    rounds = 2 if util.quick() else 7
    with util.daemon_mount([sys.executable, "-m", "vdev.daemon", "--vram", "64M", "--gtt", "64M",
                            "--timeout", str(TIMEOUT)], "vgpu-reset") as mount:
        samples = util.client_json("bench.reset_time", mount, rounds)
    return {"rounds": rounds, "etime": util.median([a for a, _ in samples]),
            "next": util.median([b for _, b in samples])}


def report(r: dict) -> list[tuple[str, str, str]]:
    note = f"median of {r['rounds']}; ring timeout {TIMEOUT * 1e3:.0f} ms"
    return [
        ("hang -> ETIME (reset done)", f"{r['etime'] * 1e3:.0f} ms",
         f"{r['etime'] / TIMEOUT:.2f}x the timeout, +{(r['etime'] - TIMEOUT) * 1e3:.0f} ms; {note}"),
        ("hang -> next job's fence", f"{r['next'] * 1e3:.0f} ms",
         f"{r['next'] / TIMEOUT:.2f}x the timeout; a NOP on a fresh context"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    else:
        for row in report(run()):
            print("  ".join(row))
