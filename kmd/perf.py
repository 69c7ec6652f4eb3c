"""Performance counters as the driver keeps them (docs/observability.md): per job, per
ring and per client, from the results the engines return for each IB.

The engines count in C as they run (kmd/hw: SdmaResult, CpResult with the compute
units' counters); this module only adds up one small dict per IB, so the cost is per
job, never per byte or per instruction. A ring keeps its totals, the busy intervals
of the last BUSY_WINDOW seconds (gpu_busy_percent) and a record of its recent jobs
(JobRecord: what the timeline and `vgpu smi` read).
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time

from vgpu import pm4, sdma

BUSY_WINDOW = 1.0       # seconds: gpu_busy_percent and the per-engine busy files
JOB_RECORDS = 256       # records a ring keeps of its last jobs
JOB_COUNTERS_KEPT = 4096  # jobs whose counters a ring keeps for the profiler query

SDMA_PACKET_NAMES = {v: k.removeprefix("SDMA_OP_") for k, v in vars(sdma).items()
                     if k.startswith("SDMA_OP_") and isinstance(v, int)}


def packet_key(engine_kind: str, op: int) -> str:
    """The counter name of a packet type: pkt_COPY, pkt_DISPATCH_DIRECT..."""
    names = SDMA_PACKET_NAMES if engine_kind == "sdma" else pm4.PKT3_NAMES
    return "pkt_" + names.get(op, f"{op:#x}")


def ib_counters(engine_kind: str, result) -> dict[str, int]:
    """The counters of one IB run, from the engine's result (SdmaResult or CpResult)."""
    c = {"ibs": 1, "packets": result.packets}
    for op, n in result.packet_ops.items():
        c[packet_key(engine_kind, op)] = n
    if engine_kind == "sdma":
        c.update(bytes_read=result.bytes_read, bytes_written=result.bytes_written,
                 pt_walks=result.pt_walks)
    else:
        for name, value in result.counters.items():
            c[name] = value
    if getattr(result, "fault", None) is not None:
        c["page_faults"] = 1
    return c


_PACKET_KEYS: dict[tuple[str, int], str] = {}


def add_ib(into: dict, engine_kind: str, result) -> None:
    """add(into, ib_counters(engine_kind, result)), for SDMA without the dict in
    between (the same keys, added in the same order); once per IB run."""
    if engine_kind != "sdma":
        add(into, ib_counters(engine_kind, result))
        return
    get = into.get
    into["ibs"] = get("ibs", 0) + 1
    into["packets"] = get("packets", 0) + result.packets
    for op, n in result.packet_ops.items():
        key = _PACKET_KEYS.get(("sdma", op))
        if key is None:
            key = _PACKET_KEYS[("sdma", op)] = packet_key("sdma", op)
        into[key] = get(key, 0) + n
    into["bytes_read"] = get("bytes_read", 0) + result.bytes_read
    into["bytes_written"] = get("bytes_written", 0) + result.bytes_written
    into["pt_walks"] = get("pt_walks", 0) + result.pt_walks
    if getattr(result, "fault", None) is not None:
        into["page_faults"] = get("page_faults", 0) + 1


def add(into: dict, counters: dict) -> None:
    for name, value in counters.items():
        into[name] = into.get(name, 0) + value


@dataclasses.dataclass
class JobRecord:
    """What the ring kept of one job: who, when (time.monotonic()), how it ended, and
    its counters (ibs, packets, pkt_*, the engine's counters, busy_ns)."""

    job_id: int
    ctx_id: int
    client_id: int
    pid: int
    seq: int
    ib_dwords: int
    started: float
    ended: float
    status: str             # 'ok', 'fault', 'aborted', or the errno name of a skipped job
    error: int              # the errno its fence carries
    counters: dict


class RingPerf:
    """One ring's counters: totals since the device started, the busy intervals of the
    last BUSY_WINDOW seconds, the records of its last jobs and, by fence seq, the
    counters of its last JOB_COUNTERS_KEPT jobs (VGPU_INFO_JOB_COUNTERS)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind                       # 'sdma' or 'compute'
        self.created = time.monotonic()
        self.totals: dict[str, int] = {"submitted": 0, "jobs": 0, "busy_ns": 0}
        self.records: collections.deque[JobRecord] = collections.deque(maxlen=JOB_RECORDS)
        self.by_seq: collections.OrderedDict[int, JobRecord] = collections.OrderedDict()
        self._intervals: collections.deque[tuple[float, float]] = collections.deque()
        self._lock = threading.Lock()

    def submitted(self) -> None:
        """A CS queued a job on the ring."""
        with self._lock:
            self.totals["submitted"] += 1

    def ran(self, start: float, end: float) -> None:
        """The engine ran a job from `start` to `end`: one run of it (a preempted job
        has several), for the busy window."""
        with self._lock:
            self._intervals.append((start, end))
            self._prune(end)

    def job_done(self, job, started: float | None, ended: float, status: str, run_time: float) -> dict:
        """Account a finished job (the ring's worker, which gave its runs to `ran`):
        its counters, kept on the job (job.counters), added to the ring's totals and to
        its file's. `run_time`: its seconds on the engine, its waits while preempted
        excluded (its busy_ns). Returns the counters."""
        c = job.counters
        busy = max(0, int(run_time * 1e9))
        c["busy_ns"] = busy
        with self._lock:
            add(self.totals, c)
            self.totals["jobs"] += 1
            rec = JobRecord(job.id, job.ctx.id, job.file.id, job.file.pid,
                            job.fence.seq if job.fence else 0, sum(n for _, n in job.ibs),
                            started if started is not None else ended, ended, status, job.error, dict(c))
            self.records.append(rec)
            if job.fence is not None:
                self.by_seq[job.fence.seq] = rec
                while len(self.by_seq) > JOB_COUNTERS_KEPT:
                    self.by_seq.popitem(last=False)
        job.file.usage.job_done(self.kind, busy, status)
        return c

    def _prune(self, now: float) -> None:
        while self._intervals and self._intervals[0][1] < now - BUSY_WINDOW:
            self._intervals.popleft()

    def busy_seconds(self, t0: float, t1: float, running_since: float | None) -> float:
        """Seconds of [t0, t1] this ring was running a job."""
        with self._lock:
            spans = list(self._intervals)
        busy = sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in spans)
        if running_since is not None:
            busy += max(0.0, t1 - max(running_since, t0))
        return min(busy, t1 - t0)

    def busy_percent(self, running_since: float | None, now: float | None = None) -> int:
        """Percent of the last BUSY_WINDOW seconds (or of the time since the device
        started, if shorter) this ring was busy."""
        now = time.monotonic() if now is None else now
        window = min(BUSY_WINDOW, now - self.created)
        if window <= 0:
            return 0
        return round(100 * self.busy_seconds(now - window, now, running_since) / window)

    def snapshot(self, running_since: float | None, now: float) -> dict[str, int]:
        """The totals, with the job in progress counted into busy_ns."""
        with self._lock:
            out = dict(self.totals)
        if running_since is not None:
            out["busy_ns"] += int((now - running_since) * 1e9)
        return out

    def recent(self, n: int) -> list[JobRecord]:
        with self._lock:
            return list(self.records)[-n:]

    def job_record(self, seq: int) -> JobRecord | None:
        """The record of the job of fence `seq`, if it ended recently enough."""
        with self._lock:
            return self.by_seq.get(seq)


class ClientUsage:
    """One DRM file's usage (drm-usage-stats, docs/observability.md): jobs submitted,
    engine time per engine kind, faults and hangs of its jobs."""

    def __init__(self) -> None:
        self.jobs_submitted = 0
        self.engine_ns: dict[str, int] = {"sdma": 0, "compute": 0}
        self.faults = 0
        self.hangs = 0
        self._lock = threading.Lock()   # every ring's worker adds to it

    def submitted(self) -> None:
        with self._lock:
            self.jobs_submitted += 1

    def job_done(self, kind: str, busy_ns: int, status: str) -> None:
        with self._lock:
            self.engine_ns[kind] = self.engine_ns.get(kind, 0) + busy_ns
            if status == "fault":
                self.faults += 1
            elif status == "aborted":
                self.hangs += 1


def describe(ring_perf: RingPerf, running_since: float | None, last_jobs: int = 8) -> list[str]:
    """The counter lines of a ring's debugfs file (vgpu_ring_<name>): busy share of the
    window, every total, and its last jobs."""
    now = time.monotonic()
    lines = [f"busy (last {BUSY_WINDOW:g} s): {ring_perf.busy_percent(running_since, now)} %",
             "counters:"]
    lines += [f"  {name:<20} {value}" for name, value in ring_perf.snapshot(running_since, now).items()]
    recent = ring_perf.recent(last_jobs)
    if recent:
        lines.append(f"last {len(recent)} jobs (id ctx client pid seq status busy_ns):")
        lines += [f"  {r.job_id} {r.ctx_id} {r.client_id} {r.pid} {r.seq} {r.status} "
                  f"{r.counters.get('busy_ns', 0)}" for r in recent]
    return lines
