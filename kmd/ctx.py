"""GPU contexts and the CTX ioctl (amdgpu_ctx.c): alloc, free, query state.

A context carries a scheduling priority and its reset state: `guilty` when one of
its jobs faulted or hung, and the device's reset counter at creation, so that a
later reset is reported to every context (innocent or guilty), as amdgpu does.
"""
import errno
from dataclasses import dataclass, field

from vgpu import uapi

from .errors import KmdError, check

PRIORITIES = {
    uapi.AMDGPU_CTX_PRIORITY_UNSET: "NORMAL",
    uapi.AMDGPU_CTX_PRIORITY_VERY_LOW: "VERY_LOW",
    uapi.AMDGPU_CTX_PRIORITY_LOW: "LOW",
    uapi.AMDGPU_CTX_PRIORITY_NORMAL: "NORMAL",
    uapi.AMDGPU_CTX_PRIORITY_HIGH: "HIGH",
    uapi.AMDGPU_CTX_PRIORITY_VERY_HIGH: "VERY_HIGH",
}


@dataclass
class Context:
    id: int
    priority: int
    reset_counter: int            # device resets seen when the context was made
    guilty: bool = False
    hangs: int = 0
    inflight: int = 0             # jobs queued or running (capped by kmd.sched)
    errors: list[str] = field(default_factory=list)


def priority_permitted(file, priority: int) -> bool:
    """amdgpu_ctx_priority_permit: above NORMAL needs CAP_SYS_NICE (root here)."""
    return priority <= uapi.AMDGPU_CTX_PRIORITY_NORMAL or file.uid == 0


def check_priority(file, priority: int) -> None:
    check(priority in PRIORITIES, errno.EINVAL, f"invalid priority {priority}")
    check(priority_permitted(file, priority), errno.EACCES,
          f"priority {PRIORITIES[priority]} needs root")


def ctx_ioctl(dev, file, args, extra):
    """ALLOC (priority checked), FREE, QUERY_STATE and QUERY_STATE2.

    EINVAL: unknown op, invalid priority, nonzero flags on ALLOC. EACCES: priority
    above NORMAL for a non-root file. ENOENT: unknown ctx_id."""
    a = args.in_
    if a.op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
        check(a.flags == 0, errno.EINVAL, f"unknown ctx flags {a.flags:#x}")
        check_priority(file, a.priority)
        ctx = file.add_ctx(a.priority, dev.reset_counter)
        args.out.alloc.ctx_id = ctx.id
        args.out.alloc._pad = 0
        return
    ctx = file.contexts.get(a.ctx_id)
    if a.op not in (uapi.AMDGPU_CTX_OP_FREE_CTX, uapi.AMDGPU_CTX_OP_QUERY_STATE,
                    uapi.AMDGPU_CTX_OP_QUERY_STATE2):
        raise KmdError(errno.EINVAL, f"unknown ctx op {a.op}")
    if ctx is None:
        raise KmdError(errno.ENOENT, f"no context {a.ctx_id}")
    if a.op == uapi.AMDGPU_CTX_OP_FREE_CTX:
        dev.free_ctx(file, ctx)
        return
    reset = dev.reset_counter != ctx.reset_counter
    if a.op == uapi.AMDGPU_CTX_OP_QUERY_STATE:
        args.out.state.flags = 0
        args.out.state.hangs = ctx.hangs
        args.out.state.reset_status = (uapi.AMDGPU_CTX_GUILTY_RESET if ctx.guilty
                                       else uapi.AMDGPU_CTX_INNOCENT_RESET if reset
                                       else uapi.AMDGPU_CTX_NO_RESET)
        return
    flags = 0
    if reset or ctx.guilty:
        flags |= uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET
    if ctx.guilty:
        flags |= uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    args.out.state.flags = flags
    args.out.state.hangs = ctx.hangs
    args.out.state.reset_status = 0
