"""Two processes' long kernels on one compute ring progress together: time slicing.

The sample starts two worker processes of itself. Each opens the device, makes a
NORMAL-priority context and submits one job: CHUNKS dispatches of spin_hash
(samples/kernels/spin_hash.s), each followed by a RELEASE_MEM writing the GPU
timestamp, so the job reports when each chunk ended. Both submit at the same moment.
On a default mount the scheduler gives the two contexts the ring in turns, a time
slice each (`vgpu mount --timeslice-ms`, default 5), preempting the running job
mid-kernel: the chunks of the two jobs end interleaved. On a `vgpu mount
--no-preempt` mount one job runs to its end before the other starts. Each worker
checks its results against numpy.

    python3 samples/timeslice.py --device /tmp/vgpu [--rounds N] [--chunks N]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

import libvgpu
from compute_common import COMPUTE, ComputeSession
from libvgpu import pm4
from preemption import spin_hash_host
from session import add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

N = 1024  # threads of each chunk's dispatch


def worker(args) -> int:
    """One process: its job of `chunks` dispatches, started when stdin says go."""
    with ComputeSession(args.device) as s:
        kernel = s.load_kernel("spin_hash")
        out = s.alloc(4 * N * args.chunks, "output", uapi.AMDGPU_GEM_DOMAIN_VRAM)
        stamps = s.alloc(8 * args.chunks, "timestamps")
        ib = libvgpu.Pm4Ib()
        for k in range(args.chunks):
            kernarg = s.alloc(kernel.obj.kernarg_size, f"kernargs {k}")
            # chunk k: N elements at out[k * N], spin_hash rounds + k (each chunk its own result)
            kernarg.cpu[:kernel.obj.kernarg_size] = kernel.pack_args(out=out.va + 4 * N * k, n=N,
                                                                      rounds=args.rounds + k)
            libvgpu.emit_dispatch(ib, kernel, grid=(N // 64, 1, 1), user_data=libvgpu.kernarg_user_data(kernarg.va))
            ib.release_mem(stamps.va + 8 * k, 0, pm4.DATA_SEL_TIMESTAMP)
        data = ib.tobytes()
        buf = s.alloc(len(data), "IB", flags=uapi.AMDGPU_VM_PAGE_READABLE)
        buf.cpu[:len(data)] = data
        req = libvgpu.CsRequest(COMPUTE, [libvgpu.IbInfo(buf.va, len(ib))])
        print("ready", flush=True)
        sys.stdin.readline()
        submitted = time.monotonic_ns()
        libvgpu.cs_submit(s.ctx, req)
        libvgpu.cs_query_fence_status(libvgpu.fence_of(s.ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        ends = list(struct.unpack(f"<{args.chunks}Q", stamps.cpu[:8 * args.chunks]))
        got = np.frombuffer(bytes(out.cpu[:4 * N * args.chunks]), np.uint32).reshape(args.chunks, N)
        ok = all(np.array_equal(got[k], spin_hash_host(N, args.rounds + k)) for k in range(args.chunks))
    print(json.dumps({"pid": os.getpid(), "submitted": submitted, "ends": ends, "ok": ok}), flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    p.add_argument("--rounds", type=int, default=30_000,
                   help="spin_hash rounds of each chunk (default 30000: a job takes about half a second)")
    p.add_argument("--chunks", type=int, default=8, help="dispatches per job (default 8)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    libvgpu.device_initialize(args.device).close()   # a wrong --device: one line here, not one per worker
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", args.device,
           "--rounds", str(args.rounds), "--chunks", str(args.chunks)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for proc in procs:  # both set up (what they print on the way is skipped), then both go
            line = ""
            while line.strip() != "ready":
                line = proc.stdout.readline()
                if not line:
                    print(f"a worker failed to start (exit {proc.wait()})")
                    return 1
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(f"a worker failed (exit {proc.returncode}): {out}")
                return 1
            reports.append(json.loads(lines[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    t0 = min(r["submitted"] for r in reports)
    names = {r["pid"]: name for r, name in zip(reports, "AB")}
    events = sorted((t, names[r["pid"]], k) for r in reports for k, t in enumerate(r["ends"]))
    print(f"processes A (pid {reports[0]['pid']}) and B (pid {reports[1]['pid']}), "
          f"{args.chunks} chunks each; chunk ends on the GPU (ms from the first submission):")
    print("  " + "  ".join(f"{name}{k}@{(t - t0) / 1e6:.1f}" for t, name, k in events))
    order = "".join(name for _, name, _ in events)
    print(f"  order of chunk ends: {order}")
    a_first, a_last = min(reports[0]["ends"]), max(reports[0]["ends"])
    b_first, b_last = min(reports[1]["ends"]), max(reports[1]["ends"])
    together = a_first < b_last and b_first < a_last
    print("the two jobs progressed together (time slicing)" if together else
          "one job ran to its end before the other started (no time slicing: vgpu mount --no-preempt)")
    ok = all(r["ok"] for r in reports)
    print(f"  check: both processes' results {'right' if ok else 'WRONG'}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
