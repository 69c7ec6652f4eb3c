"""``python3 -m bench`` (``make bench``): every section against one vgpu mount, one table.

    BENCH_QUICK=1 python3 -m bench     # a few rounds per section (the smoke test)
"""
from __future__ import annotations

import platform
import time

from . import compute, cs_latency, null_ioctl, preemption, reset_time, sdma_bandwidth, sync_latency, tracing, umd, util

SECTIONS = (
    ("(a) null ioctl round trip", null_ioctl),
    ("(b) NOP submission", cs_latency),
    ("(c) SDMA bandwidth", sdma_bandwidth),
    ("(d) fence signal -> waiter wake-up", sync_latency),
    ("(e) GPU hang -> reset", reset_time),
    ("(f) compute", compute),
    ("(g) umd: kernels, compiler, copies", umd),
    ("(h) tracing: off, tracepoints on, timeline recording", tracing),
    ("(i) preemption: HIGH arrival -> start, cost when nothing preempts", preemption),
)


def main() -> None:
    t0 = time.monotonic()
    mode = "quick (BENCH_QUICK=1)" if util.quick() else "full"
    print(f"vgpu bench, {mode} mode; {platform.node()}, Python {platform.python_version()}; "
          "ratios are within this run")
    util.build_c_echo()
    with util.vgpu_mount() as mount:
        for title, section in SECTIONS:
            rows = section.report(section.run(mount))
            width = max(len(r[0]) for r in rows)
            print(f"\n{title}")
            for name, value, note in rows:
                print(f"  {name:<{width}}  {value:>12}  {note}".rstrip())
    print(f"\ndone in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
