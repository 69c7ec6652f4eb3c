"""(i) Preemption: HIGH arrival -> HIGH start while a long LOW kernel runs, and what
preemption support costs when nothing preempts.

Mounts two vgpus of its own, one as `vgpu mount` makes it by default (preemption,
5 ms time slices, heartbeat) and one with `--no-preempt`, both with a 10 s ring
timeout; one client process (root: a HIGH context needs it) uses both, with the
kernels of samples/preemption.py (spin_hash, each IB bracketed by RELEASE_MEM GPU
timestamps on CLOCK_MONOTONIC):

- *HIGH arrival -> start*: a LOW context starts a spin_hash of about a second
  (4096 threads x 450,000 rounds); 0.3 s after its start timestamp a HIGH context
  submits a short spin_hash. Arrival is the client's clock just before the CS, start
  the HIGH IB's first timestamp. Median of the rounds, per mount.
- *Cost when nothing preempts*: one NORMAL context runs a spin_hash job of about
  25 ms (4096 x 3,000 rounds) 8 times, submit -> fence each, on one mount then the
  other, alternating; the median batch time of each and their ratio.

    sudo python3 -m bench.preemption
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import util

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
LOW_ROUNDS, HIGH_ROUNDS, ARRIVE_AFTER = 450_000, 50, 0.3
COST_ROUNDS, COST_JOBS = 3_000, 8


def _latency(s, kernel, low_rounds: int) -> tuple[float, float]:
    """One round on session `s`: (s HIGH arrival -> HIGH start, s LOW start -> LOW end)."""
    import libvgpu
    from preemption import N_HIGH, N_LOW, Kernel
    from vgpu import uapi
    with libvgpu.cs_ctx_create(s.dev, uapi.AMDGPU_CTX_PRIORITY_LOW) as low_ctx, \
            libvgpu.cs_ctx_create(s.dev, uapi.AMDGPU_CTX_PRIORITY_HIGH) as high_ctx:
        low = Kernel(s, kernel, low_ctx, "LOW", N_LOW, low_rounds)
        high = Kernel(s, kernel, high_ctx, "HIGH", N_HIGH, HIGH_ROUNDS)
        low.submit()
        while not low.started():
            time.sleep(0.0005)
        time.sleep(ARRIVE_AFTER if not util.quick() else ARRIVE_AFTER / 6)
        high.submit()
        high.wait()
        low.wait()
        if not (low.check() and high.check()):
            raise RuntimeError("a preempted kernel's result is wrong")
        (l0, l1), (h0, _) = low.times(), high.times()
        return (h0 - high.submitted_ns) / 1e9, (l1 - l0) / 1e9


def client(mounts: list[str], rounds: int) -> None:
    """Client process: prints JSON {mount: {"arrival": [s...], "low": [s...], "batch": [s...]}}."""
    sys.path.insert(0, str(SAMPLES))
    import contextlib
    import io
    from compute_common import ComputeSession
    from preemption import Kernel
    out = {m: {"arrival": [], "low": [], "batch": []} for m in mounts}
    with contextlib.ExitStack() as stack, contextlib.redirect_stdout(io.StringIO()):
        sessions = {m: stack.enter_context(ComputeSession(m)) for m in mounts}
        kernels = {m: s.load_kernel("spin_hash") for m, s in sessions.items()}
        low_rounds = LOW_ROUNDS if not util.quick() else LOW_ROUNDS // 4
        for _ in range(rounds):
            for m, s in sessions.items():
                arrival, low = _latency(s, kernels[m], low_rounds)
                out[m]["arrival"].append(arrival)
                out[m]["low"].append(low)
        jobs = {m: Kernel(s, kernels[m], s.ctx, "cost", 4096, COST_ROUNDS) for m, s in sessions.items()}

        def batch(job):
            for _ in range(COST_JOBS):
                job.submit()
                job.wait()
        for m, job in jobs.items():
            batch(job)  # warm-up
        for _ in range(rounds + 2):
            for m, job in jobs.items():
                t0 = time.perf_counter()
                batch(job)
                out[m]["batch"].append(time.perf_counter() - t0)
    print(json.dumps(out), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    """Ignores the shared mount: it needs one mount with preemption and one without."""
    if os.getuid() != 0:
        return {"skipped": "needs root (a HIGH-priority context)"}
    rounds = 1 if util.quick() else 3
    base = [sys.executable, "-m", "vdev.daemon", "--vram", "64M", "--gtt", "64M", "--timeout", "10"]
    with util.daemon_mount(base, "vgpu-preempt") as on, \
            util.daemon_mount([*base, "--no-preempt"], "vgpu-no-preempt") as off:
        r = util.client_json("bench.preemption", on, off, rounds)
    med = {k: {q: util.median(v) for q, v in r[m].items()} for k, m in (("on", on), ("off", off))}
    return {"rounds": rounds, **med}


def report(r: dict) -> list[tuple[str, str, str]]:
    if "skipped" in r:
        return [("preemption", "-", r["skipped"])]
    note = f"median of {r['rounds']}; LOW kernel ran {r['on']['low']:.2f} s"
    return [
        ("HIGH arrival -> start, preemption", f"{r['on']['arrival'] * 1e3:.2f} ms", f"{note}; target <= 5 ms"),
        ("HIGH arrival -> start, --no-preempt", f"{r['off']['arrival'] * 1e3:.0f} ms",
         "waits for the LOW kernel's end"),
        (f"{COST_JOBS} x 25 ms compute jobs, preemption", f"{r['on']['batch'] * 1e3:.1f} ms",
         f"{r['on']['batch'] / r['off']['batch'] - 1:+.1%} vs --no-preempt (target <= +3 %)"),
        (f"{COST_JOBS} x 25 ms compute jobs, --no-preempt", f"{r['off']['batch'] * 1e3:.1f} ms",
         f"median of {r['rounds'] + 2}, alternating"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2:-1], int(sys.argv[-1]))
    else:
        for row in report(run()):
            print("  ".join(row))
