"""User-mode queues from the client side (libdrm's amdgpu_create_userq /
amdgpu_free_userq / amdgpu_userq_signal / amdgpu_userq_wait, plus the queue itself):
after three ioctls of setup, work goes to the engine with stores and a FUTEX_WAKE,
and completion is waited for with FUTEX_WAIT on the queue's read pointer. No ioctl
per submission (docs/userq.md).

    with UserQueue(dev, uapi.AMDGPU_HW_IP_DMA) as q:
        done = q.submit(SdmaIb().fence(va, 1).dwords)
        q.wait(done)

The queue's memory (ring, read/write pointers, MQD area, doorbell page) is BOs of
its own, mapped in the device's VA space and for the CPU. Pointers count dwords
since the queue was made and never wrap; the ring is a power of two, and a packet
never straddles its end (``write`` pads with NOPs, as the kernel would refuse a
packet cut in two).
"""
from __future__ import annotations

import array
import ctypes
import errno
import os
import struct
import time

from vgpu import futex, uapi
from vgpu.pm4 import PM4_NOP_FILLER
from vgpu.sdma import SDMA_OP_NOP, sdma_header

from .bo import bo_alloc
from .errors import error_for
from .handle import Handle
from .va import bo_va_op, va_range_alloc

COMPUTE, DMA = uapi.AMDGPU_HW_IP_COMPUTE, uapi.AMDGPU_HW_IP_DMA
GTT = uapi.AMDGPU_GEM_DOMAIN_GTT
_MQD = {COMPUTE: uapi.drm_amdgpu_userq_mqd_compute_gfx11, DMA: uapi.drm_amdgpu_userq_mqd_sdma_gfx11}
SPIN_S = 100e-6                  # how long `wait` polls the read pointer before it sleeps
_NOP = {COMPUTE: PM4_NOP_FILLER, DMA: sdma_header(SDMA_OP_NOP)}


def userq_supported(dev, ip_type: int) -> bool:
    """True if the device offers user queues for `ip_type` (DEV_INFO's userq_ip_mask)."""
    from .device import query_info
    size = ctypes.sizeof(uapi.drm_amdgpu_info_device_userq)
    d = uapi.drm_amdgpu_info_device_userq.from_buffer_copy(query_info(dev, uapi.AMDGPU_INFO_DEV_INFO, size))
    return bool(d.userq_ip_mask & 1 << ip_type)


def _fw_area(dev, ip_type: int) -> tuple[int, int]:
    from .device import query_info
    m = uapi.drm_amdgpu_info_uq_metadata.from_buffer_copy(
        query_info(dev, uapi.AMDGPU_INFO_UQ_FW_AREAS, 16, query_hw_ip={"type": ip_type}))
    return (m.compute.eop_size, m.compute.eop_alignment) if ip_type == COMPUTE else \
        (m.sdma.csa_size, m.sdma.csa_alignment)


class UserQueue(Handle):
    """A COMPUTE (PM4) or DMA (SDMA) queue of `size` bytes (a power of two).
    `priority`: AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_* (HIGH: root only)."""

    _repr_fields = ("id", "ip_type", ("size", "#x"), "wptr")

    def __init__(self, dev, ip_type: int, size: int = 65536, priority: int = 0) -> None:
        self.dev, self.ip_type, self.size = dev, ip_type, size
        self.id = 0
        self._owned: list = []
        try:
            self._setup(priority)
        except BaseException:
            self._release()
            raise

    def _bo(self, size: int, domain: int = GTT, align: int = 4096, map_va: bool = True):
        bo = bo_alloc(self.dev, size, align, domain)
        self._owned.append(bo)
        va = None
        if map_va:
            rng = va_range_alloc(self.dev, max(size, 4096), max(align, 4096))
            self._owned.append(rng)
            bo_va_op(bo, 0, max(size, 4096), rng.address)
            va = rng.address
        return bo, va

    def _setup(self, priority: int) -> None:
        self.ring_bo, self.ring_va = self._bo(self.size)
        self.ptr_bo, self.ptr_va = self._bo(4096)
        area_size, area_align = _fw_area(self.dev, self.ip_type)
        _, self.area_va = self._bo(area_size, align=area_align)
        self.doorbell_bo, _ = self._bo(4096, uapi.AMDGPU_GEM_DOMAIN_DOORBELL, map_va=False)
        self._ring = self.ring_bo.cpu_map()
        self._ptrs = self.ptr_bo.cpu_map()
        self._db = self.doorbell_bo.cpu_map()
        self._ring32 = self._ring.cast("I")
        self._rptr_word = ctypes.c_uint64.from_buffer(self.ptr_bo._map, 0)
        self._wptr_word = ctypes.c_uint64.from_buffer(self.ptr_bo._map, 8)
        self._db_word = ctypes.c_uint64.from_buffer(self.doorbell_bo._map, 0)
        self.rptr_addr = ctypes.addressof(self._rptr_word)
        self.db_addr = ctypes.addressof(self._db_word)
        mqd = _MQD[self.ip_type]()
        if self.ip_type == COMPUTE:
            mqd.eop_va = self.area_va
        else:
            mqd.csa_va = self.area_va
        req = uapi.drm_amdgpu_userq()
        i = req.in_
        i.op, i.ip_type, i.doorbell_handle, i.doorbell_offset = (uapi.AMDGPU_USERQ_OP_CREATE, self.ip_type,
                                                                 self.doorbell_bo.handle, 0)
        i.flags = priority & uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_MASK
        i.queue_va, i.queue_size = self.ring_va, self.size
        i.rptr_va, i.wptr_va = self.ptr_va, self.ptr_va + 8
        i.mqd, i.mqd_size = ctypes.addressof(mqd), ctypes.sizeof(mqd)
        self.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_USERQ, req)
        self.id = req.out.queue_id
        self.wptr = 0

    # -- the no-syscall path ---------------------------------------------------------
    @property
    def rptr(self) -> int:
        """How far the engine has read (dwords): every packet before it has run."""
        return self._rptr_word.value

    def write(self, dwords) -> int:
        """Copy packets to the ring at wptr, waiting for room, padding with NOPs to the
        ring's end when they would straddle it; returns the new wptr (not yet
        published: see `commit`)."""
        n, ring_dw = len(dwords), self.size // 4
        if n > ring_dw // 2:
            raise error_for(errno.EINVAL, f"{n} dwords: at most half the {ring_dw}-dword ring at a time")
        pos = self.wptr % ring_dw
        if pos + n > ring_dw:            # pad to the end: no packet straddles the wrap
            self._room(ring_dw - pos)
            self._ring32[pos:ring_dw] = memoryview(struct.pack(f"<{ring_dw - pos}I", *[_NOP[self.ip_type]]
                                                               * (ring_dw - pos))).cast("I")
            self.wptr += ring_dw - pos
            pos = 0
        self._room(n)
        try:
            data = array.array("I", dwords)          # the common case: dwords already in range
        except OverflowError:
            data = array.array("I", [d & 0xFFFFFFFF for d in dwords])
        self._ring32[pos:pos + n] = memoryview(data)
        self.wptr += n
        return self.wptr

    def _room(self, n: int) -> None:
        while self.wptr + n - self.rptr > self.size // 4:
            self.wait(self.wptr + n - self.size // 4)

    def commit(self, wake: bool | None = True) -> int:
        """Publish wptr, ring the doorbell and FUTEX_WAKE the queue's worker; the
        returned wptr is the fence value of everything written so far. ``wake=None``
        skips the FUTEX_WAKE (a system call) when the engine has not yet passed the
        previous commit: a worker with work in hand reads the doorbell again before
        it sleeps, and its FUTEX_WAIT on the doorbell does not sleep once the value
        changed. ``wake=False``: never (the worker notices within its poll interval)."""
        if wake is None:
            wake = self._rptr_word.value >= self._wptr_word.value
        self._wptr_word.value = self.wptr
        self._db_word.value = self.wptr
        if wake:
            futex.wake(self.db_addr, 1)
        return self.wptr

    def submit(self, dwords) -> int:
        """`write` then `commit`: the value to `wait` for."""
        self.write(dwords)
        return self.commit()

    def wait(self, value: int, timeout: float | None = None) -> bool:
        """Wait until the engine has read past `value`: polling the read pointer
        for SPIN_S, then FUTEX_WAIT on it. False on timeout. A wake-up or 100 ms
        without progress asks the queue's state (VGPU_INFO_USERQ_STATE, the one
        ioctl of a wait, and only on the slow path): a queue stopped by a fault or
        a hang raises the VgpuError of its errno, naming its crash dump.
        KeyboardInterrupt ends the wait."""
        word = self._rptr_word
        if word.value >= value:
            return True
        # Poll first, as CUDA's default spin-wait does: a small job ends within
        # microseconds, and a sleeping CPU may be let idle by the hypervisor, whose
        # wake-up costs more than the job (docs/userq.md, "Polling").
        now = time.monotonic()
        end = None if timeout is None else now + timeout
        spin_end = now + SPIN_S if end is None else min(now + SPIN_S, end)
        while now < spin_end:
            if word.value >= value:
                return True
            os.sched_yield()   # the queue's worker may have been woken onto this CPU
            now = time.monotonic()
        while True:
            r = word.value
            if r >= value:
                return True
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            futex.wait(self.rptr_addr, r & 0xFFFFFFFF, 0.1 if left is None else min(left, 0.1))
            if self._rptr_word.value == r:
                self.check()

    def state(self) -> uapi.vgpu_info_userq_state:
        """The queue's state, rptr, error and crash dump (VGPU_INFO_USERQ_STATE)."""
        from .device import query_info
        return uapi.vgpu_info_userq_state.from_buffer_copy(query_info(
            self.dev, uapi.VGPU_INFO_USERQ_STATE, ctypes.sizeof(uapi.vgpu_info_userq_state),
            query_hw_ip={"type": self.id}))

    def check(self) -> None:
        """Raise the VgpuError of a stopped queue's errno (EFAULT, EINVAL, ETIME)."""
        st = self.state()
        if st.state != uapi.VGPU_USERQ_STATE_ACTIVE:
            what = "hung" if st.state == uapi.VGPU_USERQ_STATE_HUNG else "faulted"
            dump = (f"; crash dump {self.dev.mount}/sys/class/devcoredump/devcd{st.devcd}/data"
                    if st.devcd != uapi.VGPU_USERQ_NO_DEVCD else "")
            raise error_for(st.error or errno.EIO, f"user queue {self.id} {what} at rptr {st.rptr}{dump}")

    # -- USERQ_SIGNAL / USERQ_WAIT -----------------------------------------------------
    def signal(self, syncobjs=(), write_bos=(), read_bos=()) -> None:
        """AMDGPU_USERQ_SIGNAL: each syncobj gets a fence of everything committed so
        far (a CS job or another queue can wait for it); the BOs' reservations too."""
        h = (ctypes.c_uint32 * max(1, len(syncobjs)))(*(s.handle for s in syncobjs))
        rd = (ctypes.c_uint32 * max(1, len(read_bos)))(*(b.handle for b in read_bos))
        wr = (ctypes.c_uint32 * max(1, len(write_bos)))(*(b.handle for b in write_bos))
        req = uapi.drm_amdgpu_userq_signal(queue_id=self.id, syncobj_handles=ctypes.addressof(h),
                                           num_syncobj_handles=len(syncobjs), bo_read_handles=ctypes.addressof(rd),
                                           bo_write_handles=ctypes.addressof(wr), num_bo_read_handles=len(read_bos),
                                           num_bo_write_handles=len(write_bos))
        self.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_USERQ_SIGNAL, req)

    def fences_of(self, syncobjs=(), bos=()) -> list[tuple[int, int]]:
        """AMDGPU_USERQ_WAIT: the (va, value) pairs to wait on in memory (with a
        POLL_REGMEM / WAIT_REG_MEM >= value) before work that needs those fences."""
        h = (ctypes.c_uint32 * max(1, len(syncobjs)))(*(s.handle for s in syncobjs))
        b = (ctypes.c_uint32 * max(1, len(bos)))(*(x.handle for x in bos))
        req = uapi.drm_amdgpu_userq_wait(waitq_id=self.id, syncobj_handles=ctypes.addressof(h),
                                         num_syncobj_handles=len(syncobjs), bo_read_handles=ctypes.addressof(b),
                                         num_bo_read_handles=len(bos))
        self.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_USERQ_WAIT, req)
        if req.num_fences == 0:
            return []
        out = (uapi.drm_amdgpu_userq_fence_info * req.num_fences)()
        req.out_fences = ctypes.addressof(out)
        self.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_USERQ_WAIT, req)
        return [(f.va, f.value) for f in out[:req.num_fences]]

    # -- release ---------------------------------------------------------------------
    def free(self) -> None:
        """AMDGPU_USERQ_OP_FREE, then the queue's BOs and VA ranges. Idempotent."""
        if self.id and self.dev.fd >= 0:
            req = uapi.drm_amdgpu_userq()
            req.in_.op, req.in_.queue_id = uapi.AMDGPU_USERQ_OP_FREE, self.id
            self.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_USERQ, req)
        self.id = 0
        self._release()

    def _release(self) -> None:
        for name in ("_rptr_word", "_wptr_word", "_db_word", "_ring32"):
            if hasattr(self, name):
                view = getattr(self, name)
                if isinstance(view, memoryview):
                    view.release()
                delattr(self, name)
        for obj in reversed(self._owned):
            obj.free()
        self._owned = []
