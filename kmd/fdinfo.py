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
amdgpu's units (KiB).
"""
import time
from typing import Callable, NamedTuple

from vgpu import uapi

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


def engine_ns(dev, f) -> dict[str, int]:
    """ns each engine kind has spent on `f`'s jobs: the finished ones (kmd/perf.py
    ClientUsage) plus the run so far of a job of `f`'s on an engine now, and the busy
    time of its user queues, so that a
    long kernel's time grows while it runs (nvtop turns the growth between two reads
    into the process's GPU share) rather than all at once when it ends."""
    out = dict(f.usage.engine_ns)
    now = time.monotonic()
    for ring in dev.rings.values():
        job = ring.running
        if job is not None and job.file is f and job.segment_start is not None:
            out[ring.kind] = out.get(ring.kind, 0) + int((job.run_time + now - job.segment_start) * 1e9)
    # Its user queues' engine time counts as its ring jobs' does (kmd/userq.py).
    for q in list(f.userqs.values()):
        kind = "sdma" if q.ip_type == uapi.AMDGPU_HW_IP_DMA else "compute"
        started = q.worker.run_started if q.worker is not None else None
        running = now - started if started is not None else 0.0
        out[kind] = out.get(kind, 0) + int((q.busy_time + running) * 1e9)
    return out


def usage(dev, f) -> dict[str, object]:
    """One client's numbers: what its fdinfo prints and `vgpu smi --json` lists."""
    with dev.lock:
        mem = memory_of(f)
        contexts, inflight = len(f.contexts), len(f.jobs)
    u = f.usage
    return {"client_id": f.id, "pid": f.pid, "name": f.comm, "uid": f.uid,
            "vram_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_VRAM, 0),
            "gtt_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_GTT, 0),
            "cpu_bytes": mem.get(uapi.AMDGPU_GEM_DOMAIN_CPU, 0),   # evicted out of both apertures
            "contexts": contexts, "jobs_submitted": u.jobs_submitted, "jobs_in_flight": inflight,
            "faults": u.faults, "hangs": u.hangs,
            "engine_ns": {ENGINE_KEYS[k]: v for k, v in engine_ns(dev, f).items()}}


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
             ("vgpu-hangs", u["hangs"])]
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
