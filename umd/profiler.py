"""Per-launch performance counters: ``umd.profile()`` (docs/umd.md, "Profiling").

    with umd.profile() as prof:
        saxpy[grid, block](x, y, 0.5, n)
    for launch in prof.launches:
        print(launch.name, launch.counters["lane_instructions"])

Inside the block every kernel launch is submitted as its own job, so the job's
counters are the launch's (as Nsight Compute serializes the kernels it profiles);
a launch's ``counters`` waits for it, then asks the driver with
VGPU_INFO_JOB_COUNTERS (libvgpu.query_job_counters; docs/observability.md).
"""
from __future__ import annotations

import threading

import libvgpu
from vgpu import uapi

_state = threading.local()   # the profile of this thread's launches, if any


class LaunchProfile:
    """One profiled launch: ``name``, ``grid``, ``block``, the ``fence`` of its job;
    ``counters`` (a dict, read once the launch completed)."""

    def __init__(self, name: str, grid, block, stream, mark: int, fence) -> None:
        self.name, self.grid, self.block = name, tuple(grid), tuple(block)
        self.stream, self.mark, self.fence = stream, mark, fence
        self._counters: dict[str, int] | None = None

    @property
    def counters(self) -> dict[str, int]:
        """The job's counters (vgpu_info_job_counters as a dict): waits for the launch;
        raises GPUFault/GPUHang if it failed, as a synchronize would."""
        if self._counters is None:
            self.stream.wait_mark(self.mark)
            f = self.fence
            answer = libvgpu.query_job_counters(self.stream.device.lv, f.ip_type, f.ring, f.fence)
            self._counters = {name: getattr(answer, name)
                              for name, _ in uapi.vgpu_info_job_counters._fields_ if name != "_pad"}
        return self._counters

    def __repr__(self) -> str:
        return f"<launch {self.name} grid={self.grid} block={self.block} seq={self.fence.fence}>"


class Profile:
    """The launches made on this thread inside ``with umd.profile()``, in order."""

    def __init__(self) -> None:
        self.launches: list[LaunchProfile] = []

    def __enter__(self) -> Profile:
        if getattr(_state, "profile", None) is not None:
            raise RuntimeError("umd.profile() blocks do not nest")
        _state.profile = self
        return self

    def __exit__(self, *exc) -> None:
        _state.profile = None


def profile() -> Profile:
    """A context manager that records the counters of every launch made inside it."""
    return Profile()


def active() -> Profile | None:
    return getattr(_state, "profile", None)


def launch_alone(stream, name: str, grid, block, dispatch) -> int:
    """Run ``dispatch(s)`` (which queues one dispatch on stream ``s`` and returns its
    mark) on ``stream``; when a profile is active, as a job of its own on the stream's
    ``profiling_stream()`` (itself, or a user queue stream's CS twin: counters are a
    CS job's), and record it. Returns the mark."""
    prof = active()
    if prof is None:
        return dispatch(stream)
    stream = stream.profiling_stream()
    stream.flush()
    mark = dispatch(stream)
    stream.flush()
    sub = stream.submission_of(mark)
    if sub is not None:
        prof.launches.append(LaunchProfile(name, grid, block, stream, mark, sub.fence))
    return mark
