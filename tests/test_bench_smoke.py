"""Smoke test of ``python3 -m bench`` in quick mode: it runs and prints every section.

No timing assertions (docs/design.md section 9: benchmarks, not timed tests); the
figures themselves are for docs/bench.md and ``make bench``.
"""
import os
import subprocess
import sys

import pytest

from bench.__main__ import SECTIONS, selected
from tests.helpers import ROOT, _env


def _bench_mounts() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f if "vgpu-bench-" in line.split()[4]}


def test_bench_quick_mode_prints_every_section():
    # Another bench run on the machine (a developer's `make bench`) has its own
    # mounts: only the ones this run made must be gone at the end.
    before = _bench_mounts()
    env = _env()
    env["BENCH_QUICK"] = "1"
    r = subprocess.run([sys.executable, "-m", "bench"], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    for line in ("(a) null ioctl round trip", "vgpu ioctl / C ioctl echo",
                 "pyfuse3 ioctl echo, trio loop / reader thread", "vgpu / pyfuse3 echo (frame)",
                 "vgpu / C echo (frame)", "pyfuse3 echo / C echo (frame)", "vgpu frame / vgpu ioctl",
                 "(b) NOP submission", "NOP CS -> WAIT_CS latency", "NOP CS -> WAIT_CS latency, prebuilt structs",
                 "NOP CS -> WAIT_CS latency, frame", "NOP submissions/s, 1 process, frame",
                 "NOP submissions/s, 2 processes", "(c) SDMA bandwidth",
                 "SDMA COPY_LINEAR 64 MiB, through the mount", "SDMA CONSTANT_FILL 64 MiB, engine",
                 "NOP submissions/s, 4 processes", "(d) fence signal -> waiter wake-up",
                 "signal -> poll() wake-up", "signal -> WAIT_CS return", "signal -> SYNCOBJ_WAIT return",
                 "(e) GPU hang -> reset", "hang -> ETIME (reset done)", "hang -> next job's fence",
                 "(f) compute", "lane-instructions/s, Cython core",
                 "vector add 16M floats, numpy a + b",
                 "(g) umd: kernels, compiler, copies", "saxpy, umd kernel", "saxpy, numpy a * x + y",
                 "matmul, umd kernel (16x16 tiles)", "matmul, numpy @", "compile saxpy + matmul, cold",
                 "compile saxpy + matmul, cached", "memcpy H2D, umd", "memcpy D2H, umd",
                 "memcpy, numpy copyto", "(h) tracing: off, tracepoints on, timeline recording",
                 "NOP submissions/s, tracing off", "NOP submissions/s, all tracepoints on",
                 "SDMA copy 16 MiB, vgpu timeline recording",
                 "(i) preemption: HIGH arrival -> start, cost when nothing preempts",
                 "(j) VRAM oversubscription: 2x VRAM against VRAM to spare",
                 "oversubscription slowdown (2x VRAM / fits)",
                 "(k) umd Numba helpers: reduce, vectorize, fixed launch cost", "reduce, umd.reduce",
                 "reduce, numpy.sum", "vectorize, umd.vectorize", "vectorize, numpy expression",
                 "one-wave launch + synchronize", "NOP submission, same process"):
        assert line in r.stdout, r.stdout
    if os.getuid() == 0:  # a HIGH context needs root
        assert "HIGH arrival -> start, preemption" in r.stdout and "vs --no-preempt" in r.stdout, r.stdout
    assert _bench_mounts() <= before   # every mount of this run is gone again


def test_sections_are_picked_by_letter():
    assert selected([]) == SECTIONS
    assert [title for title, _ in selected(["b", "(a)"])] == ["(b) NOP submission", "(a) null ioctl round trip"]
    assert [title for title, _ in selected(["sdma_bandwidth", "bench.compute"])] == ["(c) SDMA bandwidth", "(f) compute"]
    with pytest.raises(SystemExit, match="no section z"):
        selected(["z"])
