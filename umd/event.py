"""Events: GPU timestamps recorded in stream order.

``Event.record(stream)`` appends a timestamp write to the stream, on the ring of its
last command: PM4 RELEASE_MEM with DATA_SEL 3 (the device clock, after every
earlier dispatch has finished) on the compute ring, SDMA TIMESTAMP on the DMA
ring (docs/pm4.md, docs/hw.md). Both write the 64-bit ns of the device clock. The
slots are 8-byte cells of one GTT page per device (umd/memory.py EventSlots) that
the CPU reads once the submission that wrote them has signalled.
"""
from __future__ import annotations

import struct

from . import debug
from .debug import DebugFlag
from .device import Device, get_device
from .errors import UMDError
from .stream import Stream, default_stream
from .trace import traced


class Event:
    """A point in a stream of ``device`` (the current device if None), as cudaEvent_t.
    Every record writes a GPU timestamp (it is how the event marks its place);
    ``timing=False`` (Numba's, cudaEventDisableTiming) only makes
    :meth:`elapsed_time` refuse the event, as CUDA does."""

    def __init__(self, device: Device | None = None, timing: bool = True):
        self.device = device if device is not None else get_device()
        self.timing = timing
        self._slot = self.device.event_slots().acquire()
        self.stream = None
        self.mark = 0

    @property
    def _va(self) -> int:
        page, off = self._slot
        return page.address + off

    def record(self, stream: Stream | None = None) -> "Event":
        """Record the event at the current end of ``stream`` (a stream of the event's
        device; default: that device's default stream)."""
        s = stream or default_stream(self.device)      # None, or Numba's 0
        if s.device is not self.device:
            raise UMDError(f"Event.record: the stream is on {s.device.mount}, the event on "
                           f"{self.device.mount}")
        page, off = self._slot
        self.stream = s
        self.mark = s.timestamp(self._va, page.bo, f"TIMESTAMP -> {self._va:#x}")
        debug.log(DebugFlag.SYNC, f"event {id(self):x} recorded on {s.name} at mark {self.mark}")
        return self

    def _check_recorded(self, what: str) -> None:
        if self.stream is None:
            raise UMDError(f"Event.{what}: the event was never recorded")

    def query(self) -> bool:
        """True once the GPU has passed the event (submits it if it was only queued)."""
        self._check_recorded("query")
        return self.stream.query_mark(self.mark)

    @traced("sync", "event.synchronize")
    def synchronize(self) -> None:
        """Wait until the GPU has passed the event."""
        self._check_recorded("synchronize")
        debug.log(DebugFlag.SYNC, f"event {id(self):x} synchronize (mark {self.mark} of {self.stream.name})")
        self.stream.wait_mark(self.mark)

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (default: the device's default stream) wait
        for this event (Numba's Event.wait, cudaStreamWaitEvent)."""
        (stream or default_stream(self.device)).wait_event(self)

    def fence(self):
        """A fence of the event for another stream to wait on (``Stream.wait_fence``):
        the CS fence of the submission holding it, or on a user queue stream the
        memory word and value that say the queue passed it; None if already done."""
        self._check_recorded("fence")
        return self.stream.fence_of(self.mark)

    def timestamp(self) -> int:
        """The device clock (ns) when the GPU passed the event; waits for it."""
        self.synchronize()
        page, off = self._slot
        return struct.unpack_from("<Q", page.cpu, off)[0]

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (cudaEventElapsedTime)."""
        return elapsed_time(self, end)

    def __del__(self):
        try:
            if self._slot is not None and not self.device.closed:
                self.device.event_slots().release(self._slot, self.stream, self.mark)
            self._slot = None
        except Exception:
            pass

    def __repr__(self) -> str:
        where = f"{self.stream.name} mark {self.mark}" if self.stream else "not recorded"
        return f"<Event {where}>"


def elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds between two recorded events, from their GPU timestamps."""
    for ev in (start, end):
        if not ev.timing:
            raise UMDError("elapsed_time: an event was made with timing=False")
    t0, t1 = start.timestamp(), end.timestamp()
    if not t0 or not t1:
        raise UMDError("elapsed_time: an event has no timestamp (was it recorded?)")
    return (t1 - t0) / 1e6


def event(timing: bool = True) -> Event:
    """Numba's cuda.event(timing=True): an Event of the current device."""
    return Event(timing=timing)
