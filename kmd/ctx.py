"""GPU contexts and the CTX ioctl (amdgpu_ctx.c): alloc, free, query state, and
the stable power state (GET/SET_STABLE_PSTATE, DRM 3.45).

A context carries a scheduling priority and its reset state: `guilty` when one of
its jobs faulted or hung, and the device's reset counter at creation, so that a
later reset is reported to every context (innocent or guilty), as amdgpu does.
QUERY_STATE2 tells guilty from innocent; the old QUERY_STATE, as amdgpu_ctx_query
answers it, only says whether the device was reset since the context's last
QUERY_STATE (UNKNOWN_RESET, else NO_RESET), with flags and hangs always zero.

The stable pstate is the device's (amdgpu's forced DPM level): one context at a
time may pin it (SET_STABLE_PSTATE STANDARD, MIN_SCLK, MIN_MCLK or PEAK), others
get EBUSY until it sets NONE again or is freed, which puts back the level the
context found when it was made. vgpu's clocks do not change with it; the level is
recorded and reported, so a profiler's request behaves as on amdgpu.
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
    stable_pstate: int = uapi.AMDGPU_CTX_STABLE_PSTATE_NONE  # device level at creation
    guilty: bool = False
    hangs: int = 0
    inflight: int = 0             # jobs queued or running (capped by kmd.sched)
    errors: list[str] = field(default_factory=list)
    csa: object = None            # its context save area BO, once made (kmd/csa.py)
    freed: bool = False           # CTX_OP_FREE_CTX or its file's close: no new CSA after it
    reset_counter_query: int = -1  # device resets seen at the last QUERY_STATE (creation before one)

    def __post_init__(self):
        if self.reset_counter_query < 0:
            self.reset_counter_query = self.reset_counter


def priority_permitted(file, priority: int) -> bool:
    """amdgpu_ctx_priority_permit: above NORMAL needs CAP_SYS_NICE (root here)."""
    return priority <= uapi.AMDGPU_CTX_PRIORITY_NORMAL or file.uid == 0


def check_priority(file, priority: int) -> None:
    check(priority in PRIORITIES, errno.EINVAL, f"invalid priority {priority}")
    check(priority_permitted(file, priority), errno.EACCES,
          f"priority {PRIORITIES[priority]} needs root")


STABLE_PSTATE_NAMES = {
    uapi.AMDGPU_CTX_STABLE_PSTATE_NONE: "NONE", uapi.AMDGPU_CTX_STABLE_PSTATE_STANDARD: "STANDARD",
    uapi.AMDGPU_CTX_STABLE_PSTATE_MIN_SCLK: "MIN_SCLK", uapi.AMDGPU_CTX_STABLE_PSTATE_MIN_MCLK: "MIN_MCLK",
    uapi.AMDGPU_CTX_STABLE_PSTATE_PEAK: "PEAK",
}


class StablePstate:
    """The device's stable pstate: the level (AMDGPU_CTX_STABLE_PSTATE_*, amdgpu's
    forced DPM level) and the context that pinned it (adev->pm.stable_pstate_ctx)."""

    def __init__(self):
        self.level = uapi.AMDGPU_CTX_STABLE_PSTATE_NONE
        self.owner: Context | None = None


def set_stable_pstate(dev, ctx: Context, level: int) -> None:
    """amdgpu_ctx_set_stable_pstate: EBUSY while another context holds the pstate;
    the same level again is a no-op; NONE lets go of it, any other level pins it."""
    ps = dev.pstate
    if ps.owner is not None and ps.owner is not ctx:
        raise KmdError(errno.EBUSY, f"context {ps.owner.id} holds the stable pstate "
                                    f"({STABLE_PSTATE_NAMES[ps.level]})")
    if level == ps.level:
        return
    ps.level = level
    ps.owner = None if level == uapi.AMDGPU_CTX_STABLE_PSTATE_NONE else ctx


def release_stable_pstate(dev, ctx: Context) -> None:
    """A context being freed that holds the stable pstate puts back the level it
    found when it was made (amdgpu_ctx_fini); vgpu then lets go of it whatever the
    level, where Linux would leave a pinned level owned by the freed context."""
    ps = dev.pstate
    if ps.owner is ctx:
        ps.level, ps.owner = ctx.stable_pstate, None


def _stable_pstate_op(dev, file, a, out) -> None:
    """GET_STABLE_PSTATE / SET_STABLE_PSTATE, checked in amdgpu_ctx_ioctl's order:
    flags (GET: none; SET: the level, at most PEAK), then the context (EINVAL when
    unknown, as amdgpu_ctx_stable_pstate answers)."""
    if a.op == uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE:
        check(a.flags == 0, errno.EINVAL, f"GET_STABLE_PSTATE with flags {a.flags:#x}")
    else:
        check(not a.flags & ~uapi.AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK, errno.EINVAL,
              f"unknown stable pstate flags {a.flags:#x}")
        check(a.flags <= uapi.AMDGPU_CTX_STABLE_PSTATE_PEAK, errno.EINVAL,
              f"stable pstate {a.flags} past PEAK")
    ctx = file.contexts.get(a.ctx_id)
    check(ctx is not None, errno.EINVAL, f"no context {a.ctx_id}")
    if a.op == uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE:
        out.pstate.flags = dev.pstate.level
        out.pstate._pad = 0
    else:
        set_stable_pstate(dev, ctx, a.flags)


def ctx_ioctl(dev, file, args, extra):
    """ALLOC (priority checked), FREE, QUERY_STATE, QUERY_STATE2,
    GET_STABLE_PSTATE and SET_STABLE_PSTATE.

    EINVAL: unknown op, invalid priority, nonzero flags on ALLOC or
    GET_STABLE_PSTATE, a SET_STABLE_PSTATE level other than NONE..PEAK, an unknown
    ctx_id (amdgpu_ctx_free and amdgpu_ctx_query find no context and say EINVAL).
    EACCES: priority above NORMAL for a non-root file.
    EBUSY: SET_STABLE_PSTATE while another context holds the stable pstate."""
    a = args.in_
    if a.op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
        check(a.flags == 0, errno.EINVAL, f"unknown ctx flags {a.flags:#x}")
        check_priority(file, a.priority)
        ctx = file.add_ctx(a.priority, dev.reset_counter)
        ctx.stable_pstate = dev.pstate.level
        args.out.alloc.ctx_id = ctx.id
        args.out.alloc._pad = 0
        return
    if a.op in (uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE, uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE):
        _stable_pstate_op(dev, file, a, args.out)
        return
    ctx = file.contexts.get(a.ctx_id)
    if a.op not in (uapi.AMDGPU_CTX_OP_FREE_CTX, uapi.AMDGPU_CTX_OP_QUERY_STATE,
                    uapi.AMDGPU_CTX_OP_QUERY_STATE2):
        raise KmdError(errno.EINVAL, f"unknown ctx op {a.op}")
    if ctx is None:
        raise KmdError(errno.EINVAL, f"no context {a.ctx_id}")
    if a.op == uapi.AMDGPU_CTX_OP_FREE_CTX:
        dev.free_ctx(file, ctx)
        return
    reset = dev.reset_counter != ctx.reset_counter
    if a.op == uapi.AMDGPU_CTX_OP_QUERY_STATE:
        # amdgpu_ctx_query: "a GPU reset since the last call", never GUILTY or
        # INNOCENT (IGT's amd_dispatch hang tests expect UNKNOWN_RESET); flags and
        # hangs are always zero there.
        args.out.state.flags = 0
        args.out.state.hangs = 0
        args.out.state.reset_status = (uapi.AMDGPU_CTX_NO_RESET if ctx.reset_counter_query == dev.reset_counter
                                       else uapi.AMDGPU_CTX_UNKNOWN_RESET)
        ctx.reset_counter_query = dev.reset_counter
        return
    flags = 0
    if reset or ctx.guilty:
        flags |= uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET
    if ctx.guilty:
        flags |= uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    args.out.state.flags = flags
    args.out.state.hangs = ctx.hangs
    args.out.state.reset_status = 0
