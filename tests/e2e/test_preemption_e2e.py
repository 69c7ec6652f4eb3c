"""Preemption, time slicing and the heartbeat through a mount: samples/preemption.py
and samples/timeslice.py with and without `vgpu mount --no-preempt`, and the
scheduling options as debugfs and kmsg show them. The checks are orders (which
kernel ended first, whether the chunks of two processes interleave), never times."""
import os
import re

import pytest

from tests.conftest import _mounted
from tests.e2e.test_samples import passed, run_sample
from tests.helpers import make_mount_dir, read_text, vgpu_cli

# LOW about 0.9 s on an idle 2-core machine (the engine got 3x faster since 130000 rounds
# were a second, and a LOW of 0.2 s ended before HIGH came); HIGH arrives 0.05 s after
# LOW started, so LOW runs ~18x longer than that wait.
LOW_ROUNDS = ["--low-rounds", "500000", "--arrive-after", "0.05"]


@pytest.fixture
def no_preempt_mount():
    yield from _mounted("--vram", "64M", "--timeout", "10", "--no-preempt")


def gpu_order(out: str) -> list[str]:
    """The events of samples/preemption.py's table, in the order the GPU timestamps put them."""
    return re.findall(r"^\s+-?[\d.]+ ms  (\w+\s+\w+)", out, re.M)


@pytest.mark.skipif(os.getuid() != 0, reason="a HIGH context needs root")
def test_preemption_sample_high_ends_before_low(long_timeout_mount):
    out = passed(run_sample("preemption", long_timeout_mount, *LOW_ROUNDS))
    assert "LOW was preempted and resumed" in out, out
    order = [" ".join(e.split()) for e in gpu_order(out)]
    assert order.index("HIGH ends") < order.index("LOW ends"), out
    assert "check LOW: all 4096 elements right" in out and "check HIGH: all 256 elements right" in out
    kmsg = read_text(os.path.join(long_timeout_mount, "dev/kmsg"))
    assert re.search(r"\[comp_1\.0\.0\] preempted job \d+ ctx \d+ client \d+ \(LOW\) at IB 1 of 1, by priority", kmsg)
    ring = read_text(os.path.join(long_timeout_mount, "sys/kernel/debug/dri/0/vgpu_ring_comp_1.0.0"))
    assert re.search(r"preemptions:  [1-9]\d* \(.*priority [1-9]", ring), ring


@pytest.mark.skipif(os.getuid() != 0, reason="a HIGH context needs root")
def test_preemption_sample_without_preemption_high_waits(no_preempt_mount):
    out = passed(run_sample("preemption", no_preempt_mount, *LOW_ROUNDS))
    assert "HIGH waited for LOW to end" in out, out
    order = [" ".join(e.split()) for e in gpu_order(out)]
    assert order.index("LOW ends") < order.index("HIGH starts"), out


def test_timeslice_sample_two_processes_progress_together(vgpu_mount):
    out = passed(run_sample("timeslice", vgpu_mount, "--rounds", "20000", "--chunks", "6"))
    assert "the two jobs progressed together" in out, out
    order = re.search(r"order of chunk ends: ([AB]+)", out)[1]
    assert order not in ("A" * 6 + "B" * 6, "B" * 6 + "A" * 6)


def test_timeslice_sample_without_preemption_runs_one_job_then_the_other(no_preempt_mount):
    out = passed(run_sample("timeslice", no_preempt_mount, "--rounds", "20000", "--chunks", "6"))
    assert "one job ran to its end before the other started" in out, out
    assert re.search(r"order of chunk ends: (A{6}B{6}|B{6}A{6})", out), out


def test_scheduling_options_in_debugfs_and_kmsg():
    for mount in _mounted("--vram", "16M", "--timeslice-ms", "3", "--heartbeat-ms", "200",
                          "--heartbeat-misses", "4"):
        ring = read_text(os.path.join(mount, "sys/kernel/debug/dri/0/vgpu_ring_sdma0"))
        assert "scheduling:   preemption on, time slice 3 ms" in ring, ring
        assert "heartbeat:    every 200 ms, hung after 4 missed pulses" in ring, ring
        kmsg = read_text(os.path.join(mount, "dev/kmsg"))
        assert "preemption on, time slice 3 ms, heartbeat every 200 ms (hung after 4 missed pulses)" in kmsg
    for mount in _mounted("--vram", "16M", "--no-preempt", "--heartbeat-ms", "0"):
        ring = read_text(os.path.join(mount, "sys/kernel/debug/dri/0/vgpu_ring_comp_1.0.0"))
        assert "preemption off" in ring and "heartbeat:    off" in ring, ring


def test_bad_scheduling_option_is_refused():
    path = make_mount_dir()
    try:
        r = vgpu_cli("mount", path, "--heartbeat-misses", "0")
        assert r.returncode == 2 and "--heartbeat-misses 0: must be at least 1" in r.stderr, r.stderr
        assert "SchedOptions" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        r = vgpu_cli("mount", path, "--timeslice-ms", "-1")
        assert r.returncode == 2 and "--timeslice-ms" in r.stderr, r.stderr
        assert not os.path.ismount(path)
    finally:
        os.rmdir(path)
