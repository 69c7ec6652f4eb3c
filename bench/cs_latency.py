"""(b) NOP submission: CS -> WAIT_CS latency, and submissions/s with 1, 2 and 4 processes.

Each client process opens the vgpu render node with libvgpu, puts an IB of one
SDMA NOP dword (0x00000000) in a GTT BO mapped at a VA, makes a BO list, and then
(every request a real ioctl(), libvgpu's default transport):

- latency: ``cs_submit`` then ``cs_query_fence_status`` (WAIT_CS, infinite timeout)
  on that sequence number, one pair at a time; the median pair;
- throughput: N ``cs_submit`` back to back, then one WAIT_CS for the last one;
  submissions / (wait done - first submit). With P = 2 or 4 processes (P DRM files,
  P contexts, the same sdma0 ring) all start together on a "go" and the total is
  P*N / (last finish - first start), all on CLOCK_MONOTONIC;
- latency with prebuilt structs: the same pair as two ``fcntl.ioctl`` calls on ctypes
  structs built once (``in.chunks`` -> the u64 pointer array -> the IB chunk header
  -> its drm_amdgpu_cs_chunk_ib), what is left when libvgpu's per-call Python (the
  chunk objects, the fence) is taken out.

For the protocol of before, one more client process uses libvgpu's frame transport
(``VGPU_TRANSPORT=frame``: a write() of the request frame, a read() of the reply,
the pointed-to data flattened into the frame by the client): its latency and its
1-process submissions/s, measured in turn with the ioctl client's.

    python3 -m bench.cs_latency            # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import sys
import collections
import time

from . import util

NOP_IB = (0).to_bytes(4, "little")  # SDMA NOP, count 0: one dword
# Issue #23's targets were set on the frame protocol's figures of then (444 µs a
# pair, 2,382 submissions/s): <= 150 µs and >= 2x. This VM's speed drifts by up to 2x
# between sessions (the C ioctl echo of (a): 8-13 µs then, 20 µs on slow days), so
# the report also gives both as ratios to the frame client measured in the same run.
FRAME_LATENCY_RATIO = 444 / 150
WINDOW = 32                         # submissions in flight per client in the throughput runs


class PrebuiltNop:
    """The Submitter's CS and WAIT_CS as ctypes structs built once, issued with
    ``fcntl.ioctl`` (the ioctl transport only). The CS and WAIT_CS structs are unions
    whose ``out`` overwrites ``in``: each call first copies the ``in`` back."""

    def __init__(self, gpu: util.Submitter):
        from vgpu import uapi
        self.fd = gpu.dev.fd
        self.ib = uapi.drm_amdgpu_cs_chunk_ib(va_start=gpu.ib_va, ib_bytes=len(NOP_IB),
                                              ip_type=uapi.AMDGPU_HW_IP_DMA)
        self.chunk = uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB,
                                              length_dw=ctypes.sizeof(self.ib) // 4,
                                              chunk_data=ctypes.addressof(self.ib))
        self.table = (ctypes.c_uint64 * 1)(ctypes.addressof(self.chunk))
        self.cs = uapi.drm_amdgpu_cs()
        self.cs.in_.ctx_id = gpu.ctx.id
        self.cs.in_.bo_list_handle = gpu.bo_list.handle
        self.cs.in_.num_chunks = 1
        self.cs.in_.chunks = ctypes.addressof(self.table)
        self.cs_in = bytes(self.cs)
        self.wait_cs = uapi.drm_amdgpu_wait_cs()
        self.wait_cs.in_.ip_type = uapi.AMDGPU_HW_IP_DMA
        self.wait_cs.in_.ctx_id = gpu.ctx.id
        self.wait_cs.in_.timeout = (1 << 64) - 1   # AMDGPU_TIMEOUT_INFINITE
        self.wait_in = bytes(self.wait_cs)
        self.CS, self.WAIT_CS = uapi.DRM_IOCTL_AMDGPU_CS, uapi.DRM_IOCTL_AMDGPU_WAIT_CS

    def pair(self) -> None:
        """One CS, then WAIT_CS (infinite) on its sequence number."""
        cs, wait = self.cs, self.wait_cs
        ctypes.memmove(ctypes.addressof(cs), self.cs_in, len(self.cs_in))
        fcntl.ioctl(self.fd, self.CS, cs, True)
        seq = cs.out.handle
        ctypes.memmove(ctypes.addressof(wait), self.wait_in, len(self.wait_in))
        wait.in_.handle = seq
        fcntl.ioctl(self.fd, self.WAIT_CS, wait, True)
        if wait.out.status != 0:
            raise RuntimeError(f"fence {seq} not signalled after an infinite wait")


def client(mount: str, transport: str = "ioctl") -> None:
    """Client process: ``lat N`` -> JSON list of ns per pair; ``tput N`` -> ``t0 t1`` ns;
    ``raw N`` (ioctl transport) -> as ``lat``, with prebuilt structs."""
    import libvgpu
    with libvgpu.device_initialize(mount, transport=transport) as dev:
        gpu = util.Submitter(dev, NOP_IB)
        try:
            gpu.wait(gpu.submit())  # warm-up: first job, ring worker awake
            raw = PrebuiltNop(gpu) if transport == "ioctl" else None
            if raw is not None:
                raw.pair()
            print("ready", flush=True)
            clock = time.monotonic_ns
            for line in sys.stdin:
                what, n = line.split()
                n = int(n)
                if what in ("lat", "raw"):
                    pair = raw.pair if what == "raw" else (lambda: gpu.wait(gpu.submit()))
                    pairs = []
                    for _ in range(n):
                        t0 = clock()
                        pair()
                        pairs.append(clock() - t0)
                    print(json.dumps(pairs), flush=True)
                else:
                    # Keep up to WINDOW jobs in flight: the KMD refuses more than 64 per
                    # context with EBUSY (kmd/sched.py), as a real queue depth would.
                    t0, inflight = clock(), collections.deque()
                    for _ in range(n):
                        inflight.append(gpu.submit())
                        if len(inflight) > WINDOW:
                            gpu.wait(inflight.popleft())
                    gpu.wait(inflight[-1])
                    print(t0, clock(), flush=True)
        finally:
            gpu.close()


def _start(mount: str, transport: str = "ioctl"):
    proc = util.start_client("bench.cs_latency", "--client", mount, transport)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"cs client failed ({proc.wait()})")
    return proc


def _throughput(procs: list, n: int) -> float:
    for p in procs:  # all told before any answer is read: they start together
        p.stdin.write(f"tput {n}\n")
        p.stdin.flush()
    spans = [tuple(map(int, p.stdout.readline().split())) for p in procs]
    return len(procs) * n / ((max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)) / 1e9)


def run(vgpu_mount: str | None = None) -> dict[str, float]:
    pairs, n, reps = (50, 200, 1) if util.quick() else (600, 2000, 3)
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        procs = []
        try:
            procs = [_start(vgpu_mount) for _ in range(4)]
            frame = _start(vgpu_mount, "frame")
            procs.append(frame)
            lat, raw, frame_lat = [], [], []
            for _ in range(reps):  # ioctl, prebuilt, frame in turn; pooled pairs
                lat += json.loads(util.ask(procs[0], f"lat {pairs // reps}"))
                raw += json.loads(util.ask(procs[0], f"raw {pairs // reps}"))
                frame_lat += json.loads(util.ask(frame, f"lat {pairs // reps}"))
            one, two, four, frame_one = [], [], [], []
            for _ in range(reps):  # alternate, as in (a); median of the reps
                one.append(_throughput(procs[:1], n))
                two.append(_throughput(procs[:2], n))
                four.append(_throughput(procs[:4], n))
                frame_one.append(_throughput([frame], n))
        finally:
            for p in procs:
                p.stdin.close()
                p.wait()
    return {"latency": util.median(lat) / 1e9, "latency_raw": util.median(raw) / 1e9,
            "latency_frame": util.median(frame_lat) / 1e9, "tput1": util.median(one),
            "tput2": util.median(two), "tput4": util.median(four),
            "tput1_frame": util.median(frame_one), "pairs": pairs // reps * reps, "n": n}


def report(r: dict) -> list[tuple[str, str, str]]:
    return [
        ("NOP CS -> WAIT_CS latency", f"{r['latency'] * 1e6:.0f} µs",
         f"ioctl(), libvgpu; median of {r['pairs']}; target <= 150 µs"),
        ("NOP CS -> WAIT_CS latency, prebuilt structs", f"{r['latency_raw'] * 1e6:.0f} µs",
         "ioctl(), ctypes structs built once"),
        ("NOP CS -> WAIT_CS latency, frame", f"{r['latency_frame'] * 1e6:.0f} µs",
         f"write() + read(), libvgpu; {r['latency_frame'] / r['latency']:.2f}x of ioctl(); "
         f"target >= {FRAME_LATENCY_RATIO:.2f}x"),
        ("NOP submissions/s, 1 process", f"{r['tput1']:.0f}/s",
         f"ioctl(); {r['n']} submissions, {WINDOW} in flight"),
        ("NOP submissions/s, 1 process, frame", f"{r['tput1_frame']:.0f}/s",
         f"write() + read(); ioctl() is {r['tput1'] / r['tput1_frame']:.2f}x; target >= 2x"),
        ("NOP submissions/s, 2 processes", f"{r['tput2']:.0f}/s",
         f"total; {r['tput2'] / r['tput1']:.2f}x of 1"),
        ("NOP submissions/s, 4 processes", f"{r['tput4']:.0f}/s",
         f"total; {r['tput4'] / r['tput1']:.2f}x of 1"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(*sys.argv[2:4])
    else:
        for row in report(run()):
            print("  ".join(row))
