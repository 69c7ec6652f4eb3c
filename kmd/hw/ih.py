"""The interrupt handler (IH) ring: engines push, the KMD drains.

Modelled on amdgpu's IH ring (amdgpu_ih.c): each entry carries the source id
(what happened), the ring and context it came from, and one data word.
"""
from __future__ import annotations

import collections
import dataclasses
import threading

# Source ids, taken from amdgpu's interrupt source tables so kmsg lines read
# like the real driver's.
IH_SRC_TRAP = 224           # SDMA0_4_0__SRCID__SDMA_TRAP (ivsrcid/sdma0/irqsrcs_sdma0_4_0.h)
IH_SRC_PAGE_FAULT = 146     # VISLANDS30_IV_SRCID_GFX_PAGE_INV_FAULT (ivsrcid/ivsrcid_vislands30.h)
IH_SRC_PROT_FAULT = 147     # VISLANDS30_IV_SRCID_GFX_MEM_PROT_FAULT (same file)
IH_SRC_ILLEGAL_INST = 184   # GFX_9_0__SRCID__CP_PRIV_INSTR_FAULT: SDMA v4 has no
                            # illegal-instruction source, so the CP's is borrowed.
IH_SRC_CP_EOP = 181         # GFX_9_0__SRCID__CP_EOP_INTERRUPT (ivsrcid/gfx/irqsrcs_gfx_9_0.h):
                            # the compute CP's RELEASE_MEM with INT_SEL raises it.


@dataclasses.dataclass(frozen=True)
class IhEntry:
    """One IH ring entry.

    `data` is the TRAP packet's int_context for IH_SRC_TRAP (RELEASE_MEM's
    int_context for IH_SRC_CP_EOP), the faulting VA for
    IH_SRC_PAGE_FAULT / IH_SRC_PROT_FAULT, and the dword offset of the bad
    packet in its IB for IH_SRC_ILLEGAL_INST.
    """

    src_id: int
    ring_id: int
    ctx_id: int
    data: int


class InterruptRing:
    """Thread-safe, unbounded IH ring shared by every engine of a device."""

    def __init__(self) -> None:
        self._entries: collections.deque[IhEntry] = collections.deque()
        self._lock = threading.Lock()   # taken directly where nobody is woken or waited for
        self._cond = threading.Condition(self._lock)

    def push(self, src_id: int, ring_id: int, ctx_id: int, data: int, wake: bool = True) -> None:
        """Append an entry and, unless ``wake`` is false, wake the waiters.  Called
        from engine threads; one that services the ring itself right after pushing
        (kmd/irq.py, InterruptHandler.service) passes ``wake=False``."""
        entry = IhEntry(src_id, ring_id, ctx_id, data)
        with self._lock:
            self._entries.append(entry)
            if wake:
                self._cond.notify_all()

    def drain(self) -> list[IhEntry]:
        """Remove and return every pending entry, oldest first."""
        with self._lock:
            entries = list(self._entries)
            self._entries.clear()
        return entries

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the ring is non-empty or `timeout` seconds pass.

        Returns True when entries are pending; the caller then drains.
        """
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._entries), timeout)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
