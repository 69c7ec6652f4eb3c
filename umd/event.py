"""Events: GPU timestamps recorded in stream order.

``Event.record(stream)`` appends a timestamp write to the stream, on the ring of its
last command: PM4 RELEASE_MEM with DATA_SEL 3 (the device clock, after every
earlier dispatch has finished) on the compute ring, SDMA TIMESTAMP on the DMA
ring (docs/pm4.md, docs/hw.md). Both write the 64-bit ns of the device clock. The
slots are 8-byte cells of one GTT page per device that the CPU reads once the
submission that wrote them has signalled.
"""
from __future__ import annotations

import struct

from vgpu import uapi

from . import debug
from .debug import DebugFlag
from .errors import UMDError
from .memory import GpuBuffer
from .stream import current_stream

SLOT_BYTES = 8
SLOTS_PAGE = 4096


class EventSlots:
    """8-byte timestamp cells in GTT pages (grown a page at a time). A cell whose
    timestamp write may still be queued is reused only once its stream passed it."""

    def __init__(self, device):
        self.device = device
        self._pages: list[GpuBuffer] = []
        self._free: list[tuple[GpuBuffer, int]] = []
        self._deferred: list[tuple[tuple[GpuBuffer, int], object, int]] = []   # (slot, stream, mark)

    def acquire(self) -> tuple[GpuBuffer, int]:
        if not self._free and self._deferred:
            still = []
            for slot, stream, mark in self._deferred:
                if stream.completed_mark >= mark:
                    self._free.append(slot)
                else:
                    still.append((slot, stream, mark))
            self._deferred = still
        if not self._free:
            page = GpuBuffer(self.device.lv, SLOTS_PAGE, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
            self._pages.append(page)
            self._free = [(page, off) for off in range(SLOTS_PAGE - SLOT_BYTES, -1, -SLOT_BYTES)]
        return self._free.pop()

    def release(self, slot, stream=None, mark: int = 0) -> None:
        """Give a cell back; with (stream, mark), once the stream is past mark.
        Never waits: it runs from Event.__del__, i.e. at any allocation."""
        if stream is not None and stream.completed_mark < mark:
            self._deferred.append((slot, stream, mark))
        else:
            self._free.append(slot)

    def free(self) -> None:
        for page in self._pages:
            page.free()
        self._pages.clear()
        self._free.clear()


class Event:
    """A point in a stream (cudaEvent_t). Timing is always on: every record takes a
    GPU timestamp."""

    def __init__(self, device=None):
        from .device import get_device
        self.device = device or get_device()
        self._slot = self.device.event_slots().acquire()
        self.stream = None
        self.mark = 0

    @property
    def _va(self) -> int:
        page, off = self._slot
        return page.address + off

    def record(self, stream=None) -> "Event":
        """Record the event at the current end of ``stream`` (default stream)."""
        s = current_stream(stream)
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

    def synchronize(self) -> None:
        """Wait until the GPU has passed the event."""
        self._check_recorded("synchronize")
        debug.log(DebugFlag.SYNC, f"event {id(self):x} synchronize (mark {self.mark} of {self.stream.name})")
        self.stream.wait_mark(self.mark)

    def fence(self):
        """The CS fence of the submission holding the event (None if already done)."""
        self._check_recorded("fence")
        sub = self.stream.submission_of(self.mark)
        return sub.fence if sub is not None else None

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
    t0, t1 = start.timestamp(), end.timestamp()
    if not t0 or not t1:
        raise UMDError("elapsed_time: an event has no timestamp (was it recorded?)")
    return (t1 - t0) / 1e6
