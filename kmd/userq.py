"""User-mode queues: DRM_IOCTL_AMDGPU_USERQ create and free (amdgpu_userq.c), the
queue objects, and their teardown (../shared/DESIGN.md section 5.7, docs/userq.md).

A queue is a ring buffer in the client's VM that the client writes packets into
(PM4 for COMPUTE, SDMA packets for DMA), a read and a write pointer (u64 words at
GPU VAs, counting dwords since the queue was made, never wrapped), and a doorbell:
a u64 slot of a DOORBELL-domain BO. The client bumps the write pointer, writes its
value to the doorbell and (libvgpu does) FUTEX_WAKEs the doorbell word; the queue's
worker (kmd/userq_worker.py) runs the new packets on an engine of the queue's own,
as an MI100's MEC runs each hardware queue descriptor, with no ioctl in the path.

The KMD's rules still hold: the engine reaches only what is mapped in the file's
VM; a fault or a hang stops the queue and is reported as for a job (kmsg, crash
dump, the fences of USERQ_SIGNAL fail); the BOs of a queue's VM are moved only
while its worker is between packets (`evicting`, the eviction fence); the queues
of a closed file are torn down with it.
"""
from __future__ import annotations

import struct
import threading

from vgpu import uapi

from . import perf


COMPUTE, DMA = uapi.AMDGPU_HW_IP_COMPUTE, uapi.AMDGPU_HW_IP_DMA
IP_NAMES = {COMPUTE: "comp", DMA: "sdma"}
#: The MQD struct each IP's CREATE takes (its size must match, as amdgpu checks).
MQD = {COMPUTE: uapi.drm_amdgpu_userq_mqd_compute_gfx11, DMA: uapi.drm_amdgpu_userq_mqd_sdma_gfx11}
#: AMDGPU_INFO_UQ_FW_AREAS: the area each MQD names (size, alignment in bytes). vgpu's
#: engines keep no state there; the area must still be mapped, as on Linux.
FW_AREA = {COMPUTE: (2048, 256), DMA: (4096, 4096)}
#: Hardware queue slots per IP, HW_IP_INFO's userq_num_slots (an MI100 MEC has 4 pipes
#: of 8 queues; vgpu gives each IP 8). More queues than slots still run: each has
#: its own worker, so slots are a sizing hint, as MES oversubscription is on Linux.
SLOTS = 8
MAX_QUEUES_PER_FILE = 32
MAX_QUEUES = 64                 # per device: each queue is a thread and an engine
MIN_QUEUE_SIZE, MAX_QUEUE_SIZE = 256, 64 << 20
PRIO_MASK = uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_MASK
PRIO_HIGH = uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH
KNOWN_FLAGS = PRIO_MASK | uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_SECURE
PRIO_NAMES = ("normal-low", "low", "normal-high", "high")
#: VGPU_INFO_USERQ_STATE's codes of UserQueue.state.
STATE_CODES = {"active": uapi.VGPU_USERQ_STATE_ACTIVE, "hung": uapi.VGPU_USERQ_STATE_HUNG,
               "faulted": uapi.VGPU_USERQ_STATE_FAULTED, "freed": uapi.VGPU_USERQ_STATE_FAULTED}
#: Interrupt ring ids of queue engines start here, past every kernel ring's.
RING_ID_BASE = 64


class UserQueue:
    """One queue. `rptr` is the worker's read pointer (dwords); `state` is 'active',
    'hung' (stopped by the watchdog), 'faulted' (a GPU fault or a bad packet) or
    'freed'. `fences` are USERQ_SIGNAL's: (wptr value, Fence), signalled once rptr
    reaches the value (kmd/userq_sync.py)."""

    def __init__(self, dev, file, qid: int, slot: int, a, doorbell_bo, mqd) -> None:
        self.dev, self.file, self.id, self.slot = dev, file, qid, slot
        self.ip_type = a.ip_type
        self.priority = a.flags & PRIO_MASK
        self.queue_va, self.queue_size = a.queue_va, a.queue_size
        self.rptr_va, self.wptr_va = a.rptr_va, a.wptr_va
        self.doorbell_bo, self.doorbell_offset = doorbell_bo, a.doorbell_offset
        self.mqd = mqd
        self.name = f"{IP_NAMES[self.ip_type]}_userq{slot}"
        self.ring_id = RING_ID_BASE + slot
        self.state = "active"
        self.reason = ""
        self.error = 0                # the errno its fences failed with, once stopped
        self.devcd = uapi.VGPU_USERQ_NO_DEVCD   # N of its crash dump, once stopped with one
        self.rptr = 0
        self.segments = 0             # runs of new packets (doorbell rings served)
        self.dwords_done = 0
        self.busy_time = 0.0
        self.preemptions = 0          # runs stopped for a higher-priority queue or a move
        self.fences: list = []
        self.lock = threading.Lock()  # fences, state
        self.worker = None            # kmd.userq_worker.QueueWorker
        # Its runs, for the busy window of gpu_busy_percent, GRBM status and the SMU
        # model (kmd/sysfs.py BusyMeter): queue work keeps the engines busy as jobs do.
        self.perf = perf.RingPerf("sdma" if self.ip_type == DMA else "compute")

    def running_since(self) -> float | None:
        """When the run on its engine now began, None when idle (Ring.running_since)."""
        w = self.worker
        return w.run_started if w is not None else None

    @property
    def ring_dwords(self) -> int:
        return self.queue_size // 4

    def describe(self) -> str:
        """One line for debugfs, smi and crash dumps."""
        return (f"{self.name}: client {self.file.id} queue {self.id} {PRIO_NAMES[self.priority]} "
                f"{self.state}{' (' + self.reason + ')' if self.reason else ''}, ring {self.queue_va:#x} "
                f"size {self.queue_size}, rptr {self.rptr}, {self.segments} doorbells served, "
                f"{self.dwords_done} dwords, busy {self.busy_time * 1e3:.3f} ms")


#: Queue priorities in arbitration order (the flag values are not: LOW is 1, NORMAL_LOW 0).
RANK = {uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW: 0,
        uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW: 1,
        uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH: 2,
        uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH: 3}


class Arbiter:
    """Queue priorities, as the MEC's and SDMA's queue arbitration applies them: a
    queue does not start packets while a queue of a higher priority on the same IP
    has work, and a queue that gets work preempts the running queues of a lower
    priority on its IP (their engines stop at the next packet, chunk or wave
    boundary; the preempted run resumes where it stopped once the higher ones are
    idle). Queues of one priority run side by side, each on its engine."""

    def __init__(self, by_slot: dict) -> None:
        self._by_slot = by_slot       # the device's queues: a running one may not be in _wanting
        self._cv = threading.Condition()
        self._wanting: dict[int, dict[UserQueue, int]] = {}
        #: queues per IP: a queue alone on its IP skips arbitration (the common case)
        self.queues: dict[int, int] = {}

    def contended(self, q: UserQueue) -> bool:
        return self.queues.get(q.ip_type, 0) > 1

    # The checks outside the lock read dicts whole under the GIL: the fast path of a
    # queue alone on its IP takes no lock.
    def want(self, q: UserQueue) -> None:
        rank = RANK[q.priority]
        if q in self._wanting.get(q.ip_type, ()):
            return
        with self._cv:
            wanting = self._wanting.setdefault(q.ip_type, {})
            if q in wanting:
                return
            wanting[q] = rank
        lower = [o for o in list(self._by_slot.values()) if o.ip_type == q.ip_type and RANK[o.priority] < rank]
        for o in lower:
            w = o.worker
            if w is not None and w.running:
                w.engine.preempt()

    def outranked(self, q: UserQueue) -> bool:
        rank = RANK[q.priority]
        return any(r > rank for r in list(self._wanting.get(q.ip_type, {}).values()))

    def idle(self, q: UserQueue) -> None:
        if q not in self._wanting.get(q.ip_type, ()):
            return
        with self._cv:
            if self._wanting.get(q.ip_type, {}).pop(q, None) is not None:
                self._cv.notify_all()

    def wait_turn(self, timeout: float) -> None:
        with self._cv:
            self._cv.wait(timeout)


class UserQueues:
    """The device's queues: slots, ids, the arbiter, the watchdog (kmd/userq_worker.py)."""

    def __init__(self, dev) -> None:
        self.dev = dev
        self.by_slot: dict[int, UserQueue] = {}
        self.arbiter = Arbiter(self.by_slot)
        self.watchdog = None

    def by_ring_id(self, ring_id: int) -> UserQueue | None:
        return self.by_slot.get(ring_id - RING_ID_BASE)

    def free_slot(self) -> int:
        return next(i for i in range(MAX_QUEUES + 1) if i not in self.by_slot)


def queues_mapping(dev, bo) -> list[UserQueue]:
    """The active queues whose VM maps `bo`: those a move of `bo` must suspend."""
    return [q for q in dev.userqs.by_slot.values() if q.state == "active" and q.file.vm.maps_bo(bo)]


def read_u64(pt, va: int) -> int:
    """The u64 at `va` through the queue's page table (hw.GpuFault if unmapped)."""
    return struct.unpack("<Q", pt.read(va, 8))[0]
