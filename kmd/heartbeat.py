"""The engine heartbeat, as i915's (intel_engine_heartbeat.c): while an engine is busy
the KMD sends it a pulse every interval, a KERNEL-priority request that runs no IB.
The ring serves a pending pulse at its next scheduling point, before any job: when
the running job ends, or at once when preemption is on, since a pulse preempts the
running job (kmd/ring.py). A pulse still pending at the next beat is a miss; an
engine that misses `misses` pulses in a row neither finished nor yielded its job for
that long and is declared hung: its running job is aborted and the GPU reset, through
the same path as a job timeout (Device.job_failed), independently of the job timeout.

i915 starts a pulse at the lowest priority and raises it at each beat it is still
pending (NORMAL, then its heartbeat priority, then a barrier) before resetting; vgpu's
pulse has the KERNEL priority from the start, so a preemptible engine serves it within
one preemption latency, and only an engine that cannot be preempted misses beats:
one running a non-preemptible job (`vgpu mount --no-preempt`) longer than
`misses` intervals, or one stuck where a preemption request is not taken.
An idle engine gets no pulse (i915 parks the heartbeat of an idle engine).
"""
from __future__ import annotations

import threading
import time


class EngineHeartbeat:
    """One engine's heartbeat state (its ring's lock guards it)."""

    def __init__(self) -> None:
        self.pulses = 0                     # pulses sent
        self.served = 0                     # pulses the ring served
        self.pending_since: float | None = None  # when the pulse outstanding was sent
        self.last_sent: float | None = None
        self.last_served: float | None = None
        self.misses = 0                     # beats in a row the pulse outstanding missed
        self.total_misses = 0
        self.hangs = 0                      # times this engine was declared hung

    @property
    def pending(self) -> bool:
        return self.pending_since is not None

    def send(self, now: float) -> None:
        self.pulses += 1
        self.pending_since = self.last_sent = now

    def serve(self, now: float) -> None:
        """The ring reached a scheduling point: the pulse outstanding ran."""
        self.served += 1
        self.pending_since, self.last_served, self.misses = None, now, 0

    def miss(self) -> int:
        self.misses += 1
        self.total_misses += 1
        return self.misses

    def describe(self, interval: float, limit: int, now: float) -> list[str]:
        if not interval:
            return ["heartbeat:    off"]
        ago = (lambda t: "never" if t is None else f"{now - t:.3f} s ago")
        return [f"heartbeat:    every {interval * 1e3:g} ms, hung after {limit} missed pulses",
                f"  pulses sent {self.pulses}, served {self.served}, missed {self.total_misses}, "
                f"hangs {self.hangs}",
                f"  last pulse sent {ago(self.last_sent)}, served {ago(self.last_served)}"
                + (f"; pending since {now - self.pending_since:.3f} s, {self.misses} miss(es) in a row"
                   if self.pending_since is not None else "")]


class Heartbeat:
    """The device's heartbeat thread: every `interval` seconds, one beat per ring
    (Ring.beat). Not started when the interval is 0."""

    def __init__(self, rings, interval: float, misses: int) -> None:
        self.rings, self.interval, self.misses = rings, interval, misses
        self._stop = threading.Event()
        self._thread = None
        if interval > 0:
            self._thread = threading.Thread(target=self._loop, name="vgpu-heartbeat", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        next_beat = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_beat - time.monotonic())):
            next_beat += self.interval
            for ring in list(self.rings):
                ring.beat(self.misses)
            next_beat = max(next_beat, time.monotonic())  # a late beat does not make a burst

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
