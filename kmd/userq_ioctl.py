"""DRM_IOCTL_AMDGPU_USERQ: create and free user-mode queues (amdgpu_userq.c
amdgpu_userq_ioctl), their teardown with their file, and the eviction fence that
holds them between packets while a BO they reach moves (kmd/userq.py has the queue
objects, kmd/userq_worker.py the engine side; docs/userq.md).
"""
from __future__ import annotations

import ctypes
import errno

from vgpu import uapi

from . import userq_sync, userq_worker
from .errors import KmdError, check
from .gem import lookup_bo
from .userq import (COMPUTE, DMA, FW_AREA, IP_NAMES, KNOWN_FLAGS, MAX_QUEUE_SIZE, MAX_QUEUES,
                    MAX_QUEUES_PER_FILE, MIN_QUEUE_SIZE, MQD, PRIO_HIGH, PRIO_MASK, PRIO_NAMES, UserQueue,
                    queues_mapping)


def _mapped(vm, va: int, size: int, what: str) -> None:
    """EINVAL unless [va, va + size) is mapped in `vm` without a hole
    (amdgpu_userq_input_va_validate)."""
    end = va + size
    at = va
    for m in vm.overlapping(va, end):
        if m.va > at:
            break
        at = max(at, m.end)
    check(size > 0 and at >= end, errno.EINVAL, f"{what} {va:#x}+{size:#x} is not mapped in the VM")


def _create(dev, file, a, extra: bytes) -> int:
    """AMDGPU_USERQ_OP_CREATE (amdgpu_userq_create), checks first, in its order."""
    check(a.ip_type in MQD, errno.EINVAL,
          f"ip_type {a.ip_type}: user queues are COMPUTE ({COMPUTE}) or DMA ({DMA}) on this part")
    check(not a.flags & ~KNOWN_FLAGS, errno.EINVAL, f"unknown flags {a.flags & ~KNOWN_FLAGS:#x}")
    check(not a.flags & uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_SECURE, errno.EINVAL,
          "QUEUE_SECURE: this part has no protected (TMZ) memory")
    check(a.flags & PRIO_MASK != PRIO_HIGH or file.uid == 0 or file.master, errno.EACCES,
          "HIGH queue priority needs CAP_SYS_NICE (root) or DRM master")
    check(a.queue_va and a.queue_size, errno.EINVAL, "queue_va and queue_size must be nonzero")
    check(MIN_QUEUE_SIZE <= a.queue_size <= MAX_QUEUE_SIZE and a.queue_size & (a.queue_size - 1) == 0,
          errno.EINVAL, f"queue_size {a.queue_size:#x}: a power of two, 256 B to 64 MiB")
    check(a.queue_va % 256 == 0, errno.EINVAL, f"queue_va {a.queue_va:#x} is not 256-byte aligned")
    check(a.rptr_va % 8 == 0 and a.wptr_va % 8 == 0 and a.rptr_va and a.wptr_va, errno.EINVAL,
          "rptr_va and wptr_va must be nonzero and 8-byte aligned")
    mqd_type = MQD[a.ip_type]
    check(a.mqd_size == ctypes.sizeof(mqd_type), errno.EINVAL,
          f"mqd_size {a.mqd_size}: the {IP_NAMES[a.ip_type]} MQD is {ctypes.sizeof(mqd_type)} bytes")
    check(len(extra) == a.mqd_size, errno.EINVAL, "MQD data missing")
    mqd = mqd_type.from_buffer_copy(extra)
    vm = file.vm
    _mapped(vm, a.queue_va, a.queue_size, "queue")
    _mapped(vm, a.rptr_va, 8, "rptr")
    _mapped(vm, a.wptr_va, 8, "wptr")
    area_va = mqd.eop_va if a.ip_type == COMPUTE else mqd.csa_va
    size, align = FW_AREA[a.ip_type]
    check(area_va % align == 0, errno.EINVAL, f"MQD area {area_va:#x} is not {align}-byte aligned")
    _mapped(vm, area_va, size, "MQD area")
    db = lookup_bo(file, a.doorbell_handle)
    check(getattr(db, "doorbell", False), errno.EINVAL,
          f"doorbell handle {a.doorbell_handle} is not a DOORBELL-domain BO")
    check((a.doorbell_offset + 1) * 8 <= db.size, errno.EINVAL,
          f"doorbell_offset {a.doorbell_offset} past the doorbell BO's {db.size // 8} slots")
    queues = file.userqs
    check(len(queues) < MAX_QUEUES_PER_FILE, errno.ENOSPC, f"the file has {MAX_QUEUES_PER_FILE} queues")
    uq = dev.userqs
    check(len(uq.by_slot) < MAX_QUEUES, errno.ENOMEM, f"the device runs {MAX_QUEUES} queues")
    qid = next(i for i in range(1, MAX_QUEUES_PER_FILE + 2) if i not in queues)
    q = UserQueue(dev, file, qid, uq.free_slot(), a, db, mqd)
    db.pin_count += 1                 # a doorbell page stays where the queue reads it
    db.queues = getattr(db, "queues", 0) + 1
    queues[qid] = q
    uq.by_slot[q.slot] = q
    uq.arbiter.queues[q.ip_type] = uq.arbiter.queues.get(q.ip_type, 0) + 1
    userq_worker.start(dev, q)
    dev.kmsg.log(f"client {file.id} (pid {file.pid}) created {q.name}: queue {qid}, "
                 f"{PRIO_NAMES[q.priority]} priority, ring {a.queue_va:#x} size {a.queue_size}")
    return qid


def destroy(dev, q: UserQueue, why: str = "freed") -> None:
    """Stop `q`'s worker (it finishes the packet in hand) and forget the queue; its
    pending USERQ_SIGNAL fences fail with ECANCELED (device lock held)."""
    if q.state == "freed":
        return
    userq_worker.stop(q)
    with q.lock:
        q.state = "freed"
    userq_sync.fail_fences(q, errno.ECANCELED)
    q.file.userqs.pop(q.id, None)
    if dev.userqs.by_slot.pop(q.slot, None) is not None:
        dev.userqs.arbiter.queues[q.ip_type] -= 1
    q.doorbell_bo.pin_count -= 1
    q.doorbell_bo.queues -= 1
    dev.kmsg.log(f"client {q.file.id}: {q.name} (queue {q.id}) {why}")


def userq_ioctl(dev, file, args, extra):
    """DRM_IOCTL_AMDGPU_USERQ. CREATE checks, in amdgpu's order: ip_type COMPUTE or
    DMA (EINVAL: GFX and the rest; this part has no GFX rings), flags (EINVAL: unknown
    bits, QUEUE_SECURE), priority HIGH (EACCES unless root or DRM master),
    queue_va/queue_size (EINVAL: zero, not a power of two from 256 B to 64 MiB, VA
    not 256-byte aligned), rptr_va/wptr_va (EINVAL: zero or not 8-byte aligned),
    mqd_size (EINVAL unless the IP's MQD size), the queue, rptr, wptr and MQD area
    mapped in the file's VM (EINVAL), the doorbell (ENOENT: no such handle; EINVAL:
    not a DOORBELL BO, offset past its slots), then the caps (ENOSPC: 32 queues in
    the file; ENOMEM: 64 on the device). `out.queue_id` is the new queue's id (from 1).
    FREE: EINVAL for an unknown queue_id. Unknown op: EINVAL."""
    a = args.in_
    if a.op == uapi.AMDGPU_USERQ_OP_CREATE:
        qid = _create(dev, file, a, extra)
        args.out.queue_id, args.out._pad = qid, 0
        return None
    if a.op == uapi.AMDGPU_USERQ_OP_FREE:
        q = file.userqs.get(a.queue_id)
        check(q is not None, errno.EINVAL, f"no user queue {a.queue_id}")
        destroy(dev, q)
        return None
    raise KmdError(errno.EINVAL, f"unknown USERQ op {a.op}")


def close_file(dev, file) -> None:
    """The file's last close: every queue of it goes (device lock held)."""
    for q in list(file.userqs.values()):
        destroy(dev, q, "torn down with its file")


class evicting:
    """`with evicting(dev, bo):` around a move of `bo` (kmd/residency.py): the queues
    that reach it are suspended between packets first (amdgpu's eviction fence) and
    resumed after, revalidating their VM's BOs before their next packets (its
    restore worker). MemoryError when a queue does not stop within the preemption
    bound: the BO counts as busy and stays."""

    def __init__(self, dev, bo) -> None:
        self.queues = queues_mapping(dev, bo) if dev.userqs.by_slot else []

    def __enter__(self):
        held = []
        try:
            for q in self.queues:
                userq_worker.suspend(q)
                held.append(q)
        except MemoryError:
            for q in held:
                userq_worker.resume(q, revalidate=False)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for q in self.queues:
            userq_worker.resume(q, revalidate=True)
