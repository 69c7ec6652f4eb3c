"""Context save areas (amdgpu_allocate_static_csa, and the CWSR area AMD's KFD gives
each compute queue): one kernel BO in VRAM per context, where the compute units save
the waves of a preempted dispatch (layout: docs/preemption.md, kmd/hw/compute.py).

Made the first time one of the context's jobs runs on a compute ring (csa_for), kept
while the context lives, freed with it (free_csa): freeing waits, as for any BO, for
the file's jobs in flight, so a preempted job never resumes from freed memory. The BO
has no handle and is not in the device's mmap table: no client can map or read it.
debugfs amdgpu_vm_info lists it among its file's VM's done BOs, as amdgpu lists its CSA.
"""
from __future__ import annotations

import os

from vgpu import uapi

from .gem import BufferObject
from .hw import compute
from .vram import PAGE_SIZE

# Slots for every worker thread of a compute unit (kmd.hw.ComputeEngine's default
# threads): a dispatch holds at most one workgroup per worker in the CSA.
CSA_SLOTS = 2
CSA_BYTES = compute.csa_bytes(CSA_SLOTS)


def csa_for(dev, ctx):
    """The writable uint8 view of `ctx`'s CSA, made (in VRAM, else GTT) on first use;
    None for a context already freed (a job of a closed file that runs after the
    close: a CSA made then would outlive its context, nothing would free it). Raises
    MemoryError when neither domain has room. Without a CSA (None or MemoryError)
    the engine keeps a preempted job's state in host memory."""
    with dev.lock:
        if ctx.freed:
            return None
        if ctx.csa is None:
            ctx.csa = _create(dev, ctx)
        return ctx.csa.storage


def _create(dev, ctx) -> BufferObject:
    """The BO, counted to the process whose context it serves (as amdgpu counts a
    context's CSA to the process's VM): its pid in trace and timeline records."""
    owner = next((f for f in dev.files.values() if f.contexts.get(ctx.id) is ctx), None)
    why = "no domain"
    for domain in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT):
        try:
            placement = dev.memory.alloc(domain, CSA_BYTES, PAGE_SIZE, os.getuid())
            break
        except (MemoryError, OSError) as e:
            why = str(e)
    else:
        dev.kmsg.log(f"out of memory: cannot allocate a {CSA_BYTES}-byte context save area: {why}")
        raise MemoryError(why)
    bo = BufferObject(CSA_BYTES, PAGE_SIZE, uapi.AMDGPU_GEM_DOMAIN_VRAM, 0, placement,
                      dev.memory.storage(placement), os.getuid(), owner.pid if owner else 0)
    bo.pin_count = 1          # a kernel BO the engines save into: never evicted (amdgpu_bo_create_kernel pins)
    dev.residency.added(bo)
    if dev.trace.on and owner is not None:
        dev.trace.bo_create(owner, bo, dev.memory)
    return bo


def free_csa(dev, f, ctx) -> None:
    """Free `ctx`'s CSA with the context (device lock held); its memory goes once the
    jobs of file `f` in flight are done (Device.free_bo)."""
    bo, ctx.csa = ctx.csa, None
    if bo is not None:
        dev.free_bo(bo, f.jobs)


def kernel_bos(f) -> list[tuple[int, BufferObject]]:
    """[(context id, CSA BO)] of a DRM file's contexts that have one."""
    return [(ctx.id, ctx.csa) for ctx in list(f.contexts.values()) if ctx.csa is not None]
