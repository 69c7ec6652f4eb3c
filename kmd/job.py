"""A job: the IBs of one CS for one ring, with everything it holds while in flight."""
import itertools
from dataclasses import dataclass, field

from .fence import Fence

_ids = itertools.count(1)

#: The IBs one CS may carry, per HW IP (GFX .. VPE), as amdgpu_ring_max_ibs gives them
#: (indexed by HW IP, equal to the ring type up to VCN_JPEG); INFO MAX_IBS reports them.
MAX_IBS = (192, 125, 49, 49, 49, 49, 49, 49, 16, 49)


@dataclass
class Job:
    file: object                     # DrmFile
    ctx: object                      # Context
    ibs: list[tuple[int, int]]       # (va, size in dwords)
    bos: list                        # BOs of the BO list: busy while the job runs
    deps: list[Fence]
    fence: Fence | None = None
    user_fence: tuple | None = None  # (bo, offset): write the seq there when done
    pin: object = None               # hw.PinnedBuffers: memory stays valid while running
    id: int = field(default_factory=lambda: next(_ids))
    result: object = None            # the engine's result of the last IB run
    error: int = 0                   # errno carried by the fence
    started_at: float | None = None
    ended_at: float | None = None
    counters: dict = field(default_factory=dict)  # kmd/perf.py: summed over its IBs when it ends
    timed_out: bool = False
    hw_seq: int = 0                  # position in the ring's execution order
    signals: list = field(default_factory=list)  # (syncobj, point): get the fence once queued
    queued: Fence | None = None      # a CS that waited for room: signals when the job is queued
    # Preemption (kmd/ring.py): where a preempted job resumes, and its own run time.
    ib_index: int = 0                # the IB to run (or resume) next
    resume: object = None            # the engine's resume state of IB ib_index, None: start it
    run_time: float = 0.0            # seconds it has run on the engine, its waits excluded
    segment_start: float | None = None  # when its current run on the engine began
    preemptions: int = 0
    hung_by: str = ""                # 'timeout' or 'heartbeat' when the KMD aborted it
