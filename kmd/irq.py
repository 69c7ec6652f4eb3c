"""The KMD's interrupt handler (amdgpu_irq.c): drains the IH ring.

Trap interrupts mean "a ring wrote its fence slot": the handler signals the jobs'
fences, in order. Fault interrupts are logged in amdgpu's words.

Who runs the handler: a ring's worker thread services the IH ring itself right
after it raises the end-of-job trap, as the CPU that takes an MSI runs the handler
at once in interrupt context. Handing the trap to another thread would cost one
more wake-up and GIL hand-off on the path from "job done" to "waiter woken" (about
a third of a NOP submission's round trip). The handler thread serves what is raised
elsewhere (compute faults pushed from inside the engine) and anything pushed with
a wake-up. ``service`` is serialised, so entries are handled once and in order.
"""
import threading

from vgpu import uapi

from . import hw


class InterruptHandler:
    def __init__(self, dev):
        self.dev = dev
        self.count = 0
        self._stop = False
        self._serve = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="vgpu-ih", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        ih = self.dev.ih
        while not self._stop:
            if ih.wait(0.5):
                self.service()

    def service(self) -> None:
        """Handle every pending IH entry, oldest first (any thread; serialised)."""
        with self._serve:
            for entry in self.dev.ih.drain():
                self.count += 1
                try:
                    self._handle(entry)
                except Exception as e:  # never let one bad entry stop interrupts
                    self.dev.kmsg.log(f"IH: error handling {entry}: {e!r}")

    def _handle(self, e) -> None:
        ring = self.dev.rings_by_id.get(e.ring_id) or self.dev.userqs.by_ring_id(e.ring_id)
        if e.src_id in (hw.ih.IH_SRC_PAGE_FAULT, hw.ih.IH_SRC_PROT_FAULT):
            kind = "page fault" if e.src_id == hw.ih.IH_SRC_PAGE_FAULT else "protection fault"
            self.dev.kmsg.log(f"[gfxhub] {kind} (src_id:{e.src_id} ring:{e.ring_id} vmid:{e.ctx_id} "
                              f"pasid:{e.ctx_id}) at VA {e.data:#014x} on {ring.name if ring else '?'}")
        elif e.src_id == hw.ih.IH_SRC_ILLEGAL_INST:
            # SDMA reports the bad packet's dword offset; compute units the wave's PC.
            where = (f"illegal instruction or wave trap at PC {e.data:#x}"
                     if ring is not None and ring.ip_type == uapi.AMDGPU_HW_IP_COMPUTE
                     else f"illegal packet at dword {e.data}")
            self.dev.kmsg.log(f"[{ring.name if ring else '?'}] {where} (src_id:{e.src_id} ctx:{e.ctx_id})")
        if ring is not None and e.ring_id in self.dev.rings_by_id:
            self.dev.process_fences(ring)

    def stop(self) -> None:
        self._stop = True
        self.dev.ih.push(0, -1, 0, 0)  # src 0 on no ring: just wakes the loop
        self._thread.join(timeout=2)
