"""(b) NOP submission: CS -> WAIT_CS latency, and submissions/s with 1, 2 and 4 processes.

Each client process opens the vgpu render node with libvgpu, puts an IB of one
SDMA NOP dword (0x00000000) in a GTT BO mapped at a VA, makes a BO list, and then:

- latency: ``cs_submit`` then ``cs_query_fence_status`` (WAIT_CS, infinite timeout)
  on that sequence number, one pair at a time; the median pair;
- throughput: N ``cs_submit`` back to back, then one WAIT_CS for the last one;
  submissions / (wait done - first submit). With P = 2 or 4 processes (P DRM files,
  P contexts, the same sdma0 ring) all start together on a "go" and the total is
  P*N / (last finish - first start), all on CLOCK_MONOTONIC.

    python3 -m bench.cs_latency            # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import sys
import collections
import time

from . import util

NOP_IB = (0).to_bytes(4, "little")  # SDMA NOP, count 0: one dword
WINDOW = 32                         # submissions in flight per client in the throughput runs


def client(mount: str) -> None:
    """Client process: ``lat N`` -> JSON list of ns per pair; ``tput N`` -> ``t0 t1`` ns."""
    import libvgpu
    with libvgpu.device_initialize(mount) as dev:
        gpu = util.Submitter(dev, NOP_IB)
        try:
            gpu.wait(gpu.submit())  # warm-up: first job, ring worker awake
            print("ready", flush=True)
            clock = time.monotonic_ns
            for line in sys.stdin:
                what, n = line.split()
                n = int(n)
                if what == "lat":
                    pairs = []
                    for _ in range(n):
                        t0 = clock()
                        gpu.wait(gpu.submit())
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


def _start(mount: str):
    proc = util.start_client("bench.cs_latency", "--client", mount)
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
    pairs, n, reps = (50, 200, 1) if util.quick() else (500, 2000, 3)
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        procs = []
        try:
            procs = [_start(vgpu_mount) for _ in range(4)]
            lat = util.median(json.loads(util.ask(procs[0], f"lat {pairs}"))) / 1e9
            one, two, four = [], [], []
            for _ in range(reps):  # alternate, as in (a); median of the reps
                one.append(_throughput(procs[:1], n))
                two.append(_throughput(procs[:2], n))
                four.append(_throughput(procs, n))
        finally:
            for p in procs:
                p.stdin.close()
                p.wait()
    return {"latency": lat, "tput1": util.median(one), "tput2": util.median(two),
            "tput4": util.median(four), "pairs": pairs, "n": n}


def report(r: dict) -> list[tuple[str, str, str]]:
    return [
        ("NOP CS -> WAIT_CS latency", f"{r['latency'] * 1e6:.0f} µs", f"median of {r['pairs']}"),
        ("NOP submissions/s, 1 process", f"{r['tput1']:.0f}/s", f"{r['n']} submissions, {WINDOW} in flight"),
        ("NOP submissions/s, 2 processes", f"{r['tput2']:.0f}/s",
         f"total; {r['tput2'] / r['tput1']:.2f}x of 1"),
        ("NOP submissions/s, 4 processes", f"{r['tput4']:.0f}/s",
         f"total; {r['tput4'] / r['tput1']:.2f}x of 1"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2])
    else:
        for row in report(run()):
            print("  ".join(row))
