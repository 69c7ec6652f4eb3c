"""Submission contexts (amdgpu_cs.c: amdgpu_cs_ctx_create2 and friends)."""

from __future__ import annotations

import errno

from vgpu import uapi

from .errors import error_for
from .handle import Handle


class Context(Handle):
    """A GPU context of one Device (libdrm's amdgpu_context_handle): jobs are
    scheduled per (context, ring) entity, and a reset is reported per context."""

    _repr_fields = ("id", "priority")

    def __init__(self, dev, ctx_id: int, priority: int):
        self.dev = dev
        self.id = ctx_id
        self.priority = priority

    def query_state(self) -> int:
        """AMDGPU_CTX_OP_QUERY_STATE2 (amdgpu_cs_query_reset_state2): the
        AMDGPU_CTX_QUERY2_FLAGS_* bits (RESET, VRAMLOST, GUILTY...)."""
        return _ctx_op(self, uapi.AMDGPU_CTX_OP_QUERY_STATE2).out.state.flags

    def query_reset_state(self) -> tuple[int, int]:
        """AMDGPU_CTX_OP_QUERY_STATE (amdgpu_cs_query_reset_state):
        (reset_status AMDGPU_CTX_*_RESET, hangs)."""
        state = _ctx_op(self, uapi.AMDGPU_CTX_OP_QUERY_STATE).out.state
        return state.reset_status, state.hangs

    def free(self) -> None:
        cs_ctx_free(self)


def _ctx_op(ctx: Context, op: int) -> uapi.drm_amdgpu_ctx:
    if ctx.id == 0:
        raise error_for(errno.EINVAL, "context was freed")
    req = uapi.drm_amdgpu_ctx()
    req.in_.op = op
    req.in_.ctx_id = ctx.id
    ctx.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, req)
    return req


def cs_ctx_create(dev, priority: int = uapi.AMDGPU_CTX_PRIORITY_NORMAL) -> Context:
    """AMDGPU_CTX_OP_ALLOC_CTX (amdgpu_cs_ctx_create2). A priority above NORMAL
    may be refused with VgpuPermissionDenied."""
    req = uapi.drm_amdgpu_ctx()
    req.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    req.in_.priority = priority
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, req)
    return Context(dev, req.out.alloc.ctx_id, priority)


def cs_ctx_free(ctx: Context) -> None:
    """AMDGPU_CTX_OP_FREE_CTX (amdgpu_cs_ctx_free). Idempotent."""
    if ctx.id == 0:
        return
    ctx_id, ctx.id = ctx.id, 0
    if ctx.dev.fd < 0:  # a closed device already freed its contexts
        return
    req = uapi.drm_amdgpu_ctx()
    req.in_.op = uapi.AMDGPU_CTX_OP_FREE_CTX
    req.in_.ctx_id = ctx_id
    ctx.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, req)


def cs_ctx_override_priority(ctx: Context, priority: int, client_id: int = 0) -> None:
    """AMDGPU_SCHED CONTEXT_PRIORITY_OVERRIDE (amdgpu_cs_ctx_override_priority).
    Root only. libdrm passes a master fd; vgpu names the target DRM file by its
    client id from debugfs `clients` (0: this file), so `ctx` must then be the id of
    a context of that client (`ctx.id`)."""
    req = uapi.drm_amdgpu_sched()
    req.in_.op = uapi.AMDGPU_SCHED_OP_CONTEXT_PRIORITY_OVERRIDE
    req.in_.fd = client_id
    req.in_.priority = priority
    req.in_.ctx_id = ctx.id
    ctx.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_SCHED, req)
    if client_id == 0:
        ctx.priority = priority
