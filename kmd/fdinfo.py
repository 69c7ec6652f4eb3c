"""MOUNT/proc/<pid>/fdinfo/<client-id>: each DRM file's usage in the key: value form
of Linux's drm-usage-stats (Documentation/gpu/drm-usage-stats.rst), which gputop and
nvtop read from /proc/<pid>/fdinfo/<fd>.

The daemon never sees the client's fd number, so the file is named by the DRM
client id (drm-client-id). As /proc/<pid>/fdinfo is readable only by the process's
owner, each file is mode 0400 and owned by the client's uid: root reads every
client's, anyone else only their own (`vgpu smi`, docs/observability.md).
Memory is in bytes (the spec's default unit); engine time in ns since the open, the
job running now included. `vgpu-node` names the node the file was opened on: the
preload library matches a process's fds to these files by it (docs/libdrm.md,
"fdinfo and /proc"), and answers /proc/<pid>/fdinfo/<fd> with the drm-* lines in
amdgpu's units (KiB). A `vgpu-userq-<name>` line per user queue of the file (its
name as debugfs vgpu_userqs gives it) is what `vgpu smi` lists per queue.
"""
import threading
import time
import weakref
from typing import Callable, NamedTuple

from vgpu import uapi

from .userq import PRIO_NAMES

# drm-engine-<name> keys as amdgpu names its engines (amdgpu_fdinfo.c: "dma", "compute").
ENGINE_KEYS = {"sdma": "dma", "compute": "compute"}


class OwnedText(NamedTuple):
    """A generated file only `uid` (and root) may read: mode 0400, owner `uid`."""

    read: Callable[[], str]
    uid: int


def memory_of(f) -> dict[int, int]:
    """{domain: bytes} of the BOs `f` holds a handle to, each counted once (device
    lock held)."""
    out: dict[int, int] = {}
    seen = set()
    for bo in f.bos.values():
        if id(bo) not in seen:
            seen.add(id(bo))
            out[bo.domain] = out.get(bo.domain, 0) + bo.size
    return out


#: The largest engine time each file (and each user queue) has shown, so that a read
#: never shows less than an earlier one (engine_ns).
_shown: "weakref.WeakKeyDictionary[object, dict[str, int]]" = weakref.WeakKeyDictionary()
_shown_lock = threading.Lock()
#: Per file, the queues engine_ns last counted ({(queue id, id(queue)): (kind, ns)}) and
#: the time of those freed since ({kind: ns}).
_queues_seen: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _at_least_shown(obj, values: dict[str, int]) -> dict[str, int]:
    """`values`, each raised to the largest that `obj` has shown before (and kept)."""
    with _shown_lock:
        shown = _shown.setdefault(obj, {})
        for k, v in values.items():
            values[k] = shown[k] = max(v, shown.get(k, 0))
    return values


def queue_busy_ns(q, now: float) -> int:
    """ns `q`'s engine has run: its finished runs (busy_time) and the run in progress.

    The worker ends a run in three steps (kmd/userq_worker.py _run): busy_time += the
    run, q.perf.ran(start, end), run_started = None. A reader that sees run_started
    still set after the first step would count the run twice; a run the busy window
    already holds is in busy_time, so its time so far is not added again. (Between the
    first two steps the double count cannot be told apart; the figure is then held,
    not lowered, by _at_least_shown.)"""
    w = q.worker
    started = w.run_started if w is not None else None
    busy = q.busy_time
    running = 0.0
    if started is not None and q.perf.busy_seconds(started, now, None) <= 0:
        running = max(0.0, now - started)
    return _at_least_shown(q, {"busy": int((busy + running) * 1e9)})["busy"]


def engine_ns(dev, f, now: float | None = None) -> dict[str, int]:
    """ns each engine kind has spent on `f`'s jobs: the finished ones (kmd/perf.py
    ClientUsage) plus the run so far of a job of `f`'s on an engine now, and the busy
    time of its user queues (their runs in progress included), so that a long
    kernel's time grows while it runs (nvtop turns the growth between two reads into
    the process's GPU share) rather than all at once when it ends. A value never goes
    down from one read to the next (a ring job between two runs, a queue's run
    between the steps of its end): nvtop drops a sample that went down."""
    out = dict(f.usage.engine_ns)
    now = time.monotonic() if now is None else now
    for ring in dev.rings.values():
        job = ring.running
        if job is not None and job.file is f and job.segment_start is not None:
            out[ring.kind] = out.get(ring.kind, 0) + int((job.run_time + now - job.segment_start) * 1e9)
    # Its user queues' engine time counts as its ring jobs' does (kmd/userq.py), a
    # freed queue's too: the last figure it showed is kept for the file.
    queues = {(q.id, id(q)): (queue_kind(q), queue_busy_ns(q, now)) for q in list(f.userqs.values())}
    with _shown_lock:
        seen = _queues_seen.setdefault(f, {"queues": {}, "retired": {}})
        for key, (kind, ns) in seen["queues"].items():
            if key not in queues:
                seen["retired"][kind] = seen["retired"].get(kind, 0) + ns
        seen["queues"] = queues
        retired = dict(seen["retired"])
    for kind, ns in [*queues.values(), *retired.items()]:
        out[kind] = out.get(kind, 0) + ns
    return _at_least_shown(f, out)


def queue_kind(q) -> str:
    """The engine kind of a user queue: 'sdma' for a DMA queue, else 'compute'."""
    return "sdma" if q.ip_type == uapi.AMDGPU_HW_IP_DMA else "compute"


def queue_line(q, now: float) -> str:
    """The value of a queue's `vgpu-userq-<name>` line: `key value` pairs (id, ip as
    drm-engine-* names it, priority, state, busy-percent of the last second, runs
    finished, busy-ns since it was made, its run in progress included)."""
    busy_percent = q.perf.busy_percent(q.running_since(), now)
    return (f"id {q.id} ip {ENGINE_KEYS[queue_kind(q)]} priority {PRIO_NAMES[q.priority]} state {q.state} "
            f"busy-percent {busy_percent} runs {q.segments} busy-ns {queue_busy_ns(q, now)}")


def usage(dev, f) -> dict[str, object]:
    """One client's numbers: what its fdinfo prints and `vgpu smi --json` lists."""
    with dev.lock:
        mem = memory_of(f)
        contexts, inflight = len(f.contexts), len(f.jobs)
    u = f.usage
    now = time.monotonic()
    return {"client_id": f.id, "pid": f.pid, "name": f.comm, "uid": f.uid,
            "vram_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_VRAM, 0),
            "gtt_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_GTT, 0),
            "cpu_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_CPU, 0),   # evicted out of both apertures
            "contexts": contexts, "jobs_submitted": u.jobs_submitted, "jobs_in_flight": inflight,
            "faults": u.faults, "hangs": u.hangs,
            "engine_ns": {ENGINE_KEYS[k]: v for k, v in engine_ns(dev, f, now).items()},
            "userqs": {q.name: queue_line(q, now) for q in sorted(f.userqs.values(), key=lambda q: q.id)}}


def text(dev, f) -> str:
    u = usage(dev, f)
    lines = [("drm-driver", "amdgpu"), ("drm-pdev", dev.partition.pci_slot), ("drm-client-id", u["client_id"]),
             ("drm-memory-vram", u["vram_bytes"]), ("drm-memory-gtt", u["gtt_bytes"]),
             ("drm-memory-cpu", u["cpu_bytes"]),
             *((f"drm-engine-{k}", f"{v} ns") for k, v in u["engine_ns"].items()),
             ("vgpu-pid", u["pid"]), ("vgpu-comm", u["name"]), ("vgpu-uid", u["uid"]),
             ("vgpu-node", f.node),
             ("vgpu-contexts", u["contexts"]), ("vgpu-jobs-submitted", u["jobs_submitted"]),
             ("vgpu-jobs-in-flight", u["jobs_in_flight"]), ("vgpu-faults", u["faults"]),
             ("vgpu-hangs", u["hangs"]),
             *((f"vgpu-userq-{name}", line) for name, line in u["userqs"].items())]
    return "".join(f"{k}:\t{v}\n" for k, v in lines)


def files(dev) -> dict:
    """{pid: {"fdinfo": {client id: OwnedText}}} for every open DRM file."""
    with dev.lock:
        clients = list(dev.files.values())
    out: dict = {}
    for f in clients:
        out.setdefault(str(f.pid), {"fdinfo": {}})["fdinfo"][str(f.id)] = \
            OwnedText(lambda f=f: text(dev, f), f.uid)
    return out
