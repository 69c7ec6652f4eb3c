"""RingScheduler: a drm_sched-style scheduler for one ring, and the SCHED ioctl.

Jobs are queued on entities, one per (context, ring). Each entity belongs to a run
queue by priority: HIGH, NORMAL, LOW (amdgpu's VERY_HIGH counts as HIGH and
VERY_LOW as LOW; KERNEL is reserved for the driver's own jobs). The scheduler picks
the next job whose dependencies have all signalled:

- from the highest priority run queue that has a ready entity;
- round-robin among the ready entities of one run queue (the entity served goes to
  the back), so one busy client cannot starve another of the same priority;
- starvation bound: when a ready job of a lower run queue has been passed over
  STARVATION_LIMIT times in a row, it is served next. A ready job therefore waits
  for at most STARVATION_LIMIT jobs of higher priority (plus the one running).

Jobs of one entity run in submission order. A cancelled job is ready at once (it
runs no IBs; its fence signals with its error). A context has at most
MAX_JOBS_PER_CONTEXT jobs on the rings; a CS beyond that waits for room in the
context's backlog (kmd/device.py, queue_job), as amdgpu_ctx_wait_prev_fence makes it.

Mid-job preemption (kmd/ring.py decides when, the engines stop and resume,
docs/preemption.md): a preempted job goes back to the head of its entity
(`requeue`), so it is the next job of its entity to run, and `preempt_reason` says
whether a ready entity should take the ring from the running job now.
"""
import collections
import dataclasses
import errno

from vgpu import uapi

from .ctx import PRIORITIES, check_priority
from .errors import KmdError, check

KERNEL, HIGH, NORMAL, LOW = 0, 1, 2, 3
LEVEL_NAMES = {KERNEL: "KERNEL", HIGH: "HIGH", NORMAL: "NORMAL", LOW: "LOW"}
STARVATION_LIMIT = 8
MAX_JOBS_PER_CONTEXT = 64  # queued + running, per context; beyond it a CS waits for room (Device.queue_job)


@dataclasses.dataclass(frozen=True)
class SchedOptions:
    """How the rings share their engines (mount options, docs/preemption.md).

    preempt: a HIGH job that becomes ready preempts a running NORMAL or LOW job mid-job,
    the heartbeat's pulse preempts any job, and entities of one priority share the ring
    in time slices; False is the scheduling of jobs at job boundaries only
    (`vgpu mount --no-preempt`). timeslice: seconds a job runs before a ready entity of
    its priority (or a higher one) takes the ring; 0 turns time slicing off.
    heartbeat: seconds between two pulses of a busy engine; 0 turns the heartbeat off.
    heartbeat_misses: pulses an engine may miss in a row before it is declared hung and
    reset."""

    preempt: bool = True
    timeslice: float = 0.005
    heartbeat: float = 2.5
    heartbeat_misses: int = 3

    def __post_init__(self):
        if self.timeslice < 0 or self.heartbeat < 0 or self.heartbeat_misses < 1:
            raise ValueError(f"invalid scheduling options {self}")

    def describe(self) -> str:
        if not self.preempt:
            return "preemption off (jobs switch at job boundaries only)"
        return f"preemption on, time slice {self.timeslice * 1e3:g} ms" if self.timeslice else \
            "preemption on, no time slicing"


def level_of(priority: int) -> int:
    """amdgpu context priority -> run queue (amdgpu_ctx_prio_to_sched_prio)."""
    if priority > uapi.AMDGPU_CTX_PRIORITY_NORMAL:
        return HIGH
    if priority < uapi.AMDGPU_CTX_PRIORITY_NORMAL and priority != uapi.AMDGPU_CTX_PRIORITY_UNSET:
        return LOW
    return NORMAL


class Entity:
    """The queue of one context on one ring (drm_sched_entity)."""

    def __init__(self, ctx, file):
        self.ctx, self.file = ctx, file
        self.jobs: collections.deque = collections.deque()
        self.passed_over = 0

    @property
    def level(self) -> int:
        return level_of(self.ctx.priority)

    def ready(self) -> bool:
        if not self.jobs:
            return False
        job = self.jobs[0]
        if job.error or not job.deps:
            return True
        return all(d.signaled for d in job.deps)


class RingScheduler:
    """Chooses the next job of one ring. Not thread-safe: the ring's lock guards it."""

    def __init__(self):
        self.entities: dict[tuple[int, int], Entity] = {}
        self.order: list[Entity] = []  # round-robin order (served entities move back)
        self.starved_pick = False      # the last job picked was served by the starvation bound
        self._queued = 0               # jobs in all entities: len() is asked several times per job

    def _entity(self, job) -> Entity:
        """`job`'s entity, made (at the back of the order) if it has none now."""
        key = (job.file.id, job.ctx.id)
        ent = self.entities.get(key)
        if ent is None:
            ent = self.entities[key] = Entity(job.ctx, job.file)
            self.order.append(ent)
        return ent

    def push(self, job) -> None:
        self._entity(job).jobs.append(job)
        self._queued += 1

    def pick(self):
        """Pop the next job to run, or None if no entity has a ready job."""
        order = self.order
        if len(order) <= 1:  # no entity or one (the common case): the same choice, in fewer steps
            if not order or not order[0].ready():
                return None
            chosen = order[0]
            chosen.passed_over = 0
            self.starved_pick = False
            job = chosen.jobs.popleft()
            self._queued -= 1
            if not chosen.jobs:
                del self.entities[(chosen.file.id, chosen.ctx.id)]
                order.clear()
            return job
        ready = [e for e in order if e.ready()]
        if not ready:
            return None
        best = min(e.level for e in ready)
        starved = [e for e in ready if e.level > best and e.passed_over >= STARVATION_LIMIT]
        chosen = starved[0] if starved else next(e for e in ready if e.level == best)
        for e in ready:
            if e is not chosen and e.level > chosen.level:
                e.passed_over += 1
        chosen.passed_over = 0
        self.starved_pick = bool(starved)
        self.order.remove(chosen)
        self.order.append(chosen)
        job = chosen.jobs.popleft()
        self._queued -= 1
        if not chosen.jobs:  # drop idle entities so the table stays small
            del self.entities[(chosen.file.id, chosen.ctx.id)]
            self.order.remove(chosen)
        return job

    def requeue(self, job) -> None:
        """Put preempted `job` back at the head of its entity: the entity's next job.
        The entity stays where round-robin put it when the job was picked (at the back
        of the order), so a time-sliced peer runs before it again."""
        self._entity(job).jobs.appendleft(job)
        self._queued += 1

    def preempt_reason(self, running, slice_over: bool) -> str | None:
        """Why a ready entity should take the ring from job `running` now, or None:
        'priority' when a HIGH (or KERNEL) entity is ready and `running` is of a lower
        priority (unless the starvation bound picked it); 'timeslice' when
        `slice_over` and another entity of its priority, or a higher one, is ready."""
        mine = (running.file.id, running.ctx.id)
        level = level_of(running.ctx.priority)
        best = min((e.level for e in self.order
                    if (e.file.id, e.ctx.id) != mine and e.ready()), default=None)
        if best is None:
            return None
        if best <= HIGH and best < level and not self.starved_pick:
            return "priority"
        if slice_over and best <= level:
            return "timeslice"
        return None

    def jobs(self):
        for e in self.order:
            yield from e.jobs

    def __len__(self) -> int:
        return self._queued

    def describe(self) -> list[str]:
        return [f"  entity client {e.file.id} ctx {e.ctx.id} {LEVEL_NAMES[e.level]}: "
                f"{len(e.jobs)} queued, ready={e.ready()}, passed over {e.passed_over}"
                for e in self.order]


def sched_ioctl(dev, file, args, extra):
    """Override scheduling priority (amdgpu_sched.c), root only.

    PROCESS_PRIORITY_OVERRIDE sets every context of a client; CONTEXT_PRIORITY_OVERRIDE
    one context. `fd` names the client: 0 is the calling file, otherwise a client id
    as listed in debugfs `clients` (vgpu has no fds to pass). EACCES: not root.
    EINVAL: unknown op or priority, nonzero ctx_id for a process override. ENOENT:
    unknown client or context."""
    args = args.in_
    check(file.uid == 0, errno.EACCES, "SCHED needs root (CAP_SYS_NICE)")
    check(args.priority in PRIORITIES, errno.EINVAL, f"invalid priority {args.priority}")
    check_priority(file, args.priority)
    target = file if args.fd == 0 else dev.files.get(args.fd)
    check(target is not None, errno.ENOENT, f"no client {args.fd}")
    if args.op == uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE:
        check(args.ctx_id == 0, errno.EINVAL, "ctx_id must be 0 for a process override")
        contexts = list(target.contexts.values())
    elif args.op == uapi.AMDGPU_SCHED_OP_CONTEXT_PRIORITY_OVERRIDE:
        ctx = target.contexts.get(args.ctx_id)
        check(ctx is not None, errno.ENOENT, f"no context {args.ctx_id} in client {target.id}")
        contexts = [ctx]
    else:
        raise KmdError(errno.EINVAL, f"unknown SCHED op {args.op}")
    for ctx in contexts:
        ctx.priority = args.priority
    dev.kmsg.log(f"sched: client {target.id} {len(contexts)} context(s) now {PRIORITIES[args.priority]}")
