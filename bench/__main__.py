"""``python3 -m bench`` (``make bench``): every section against one vgpu mount, one table.

    BENCH_QUICK=1 python3 -m bench     # a few rounds per section (the smoke test)
    python3 -m bench a b               # only sections (a) and (b), on one mount
    python3 -m bench sdma_bandwidth    # a section by its module's name (also c or "(c)")
"""
from __future__ import annotations

import platform
import sys
import time

from . import (compute, cs_latency, null_ioctl, numba_host, oversubscription, preemption, reset_time,
               sdma_bandwidth, sync_latency, tracing, umd, userq, util)

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
    ("(j) VRAM oversubscription: 2x VRAM against VRAM to spare", oversubscription),
    ("(k) umd Numba helpers: reduce, vectorize, fixed launch cost", numba_host),
    ("(l) user-mode queues: NOP latency, throughput, SDMA bandwidth, against CS", userq),
)


def selected(argv: list[str]) -> tuple:
    """The sections named in ``argv`` (all when none), each by its letter (``c``,
    ``(c)``) or its module's name (``sdma_bandwidth``, ``bench.sdma_bandwidth``), in
    the order given; SystemExit naming the known ones for a name no section has."""
    if not argv:
        return SECTIONS
    names = {}
    for title, section in SECTIONS:
        names[title[1]] = names[section.__name__.rsplit(".", 1)[-1]] = (title, section)
    keys = [a.strip("()").removeprefix("bench.") for a in argv]
    unknown = [a for a, k in zip(argv, keys) if k not in names]
    if unknown:
        known = ", ".join(f"{t[1]} ({s.__name__.rsplit('.', 1)[-1]})" for t, s in SECTIONS)
        raise SystemExit(f"python3 -m bench: no section {', '.join(unknown)} (sections: {known})")
    return tuple(names[k] for k in keys)


def main(argv: list[str] | None = None) -> None:
    sections = selected(sys.argv[1:] if argv is None else argv)
    t0 = time.monotonic()
    mode = "quick (BENCH_QUICK=1)" if util.quick() else "full"
    print(f"vgpu bench, {mode} mode; {platform.node()}, Python {platform.python_version()}; "
          "ratios are within this run")
    util.build_c_echo()
    with util.vgpu_mount() as mount:
        for title, section in sections:
            rows = section.report(section.run(mount))
            width = max(len(r[0]) for r in rows)
            print(f"\n{title}")
            for name, value, note in rows:
                print(f"  {name:<{width}}  {value:>12}  {note}".rstrip())
    print(f"\ndone in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
