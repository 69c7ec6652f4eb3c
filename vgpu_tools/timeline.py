"""``vgpu timeline``: record a command's GPU work as Chrome trace-event JSON, for
ui.perfetto.dev and chrome://tracing (docs/tracing.md, "vgpu timeline").

The daemon hands the records over through MOUNT/sys/kernel/debug/tracing/vgpu_timeline
(root only, as debugfs is): each open of it is a recording of everything the KMD
does from then on, one JSON object per line (kmd/trace.py). This module reads it
while COMMAND runs, keeps what COMMAND's processes did, and builds the tracks:

- one process "GPU" with a thread per ring: a span per job (context, pid, seq, IB
  sizes, the job's counters when the engines give them), and counters "VRAM used",
  "GTT used" and "<ring> busy" (1 while a job runs);
- one process per client: its ioctls on an "ioctls" thread (decoded arguments and
  reply, as `vgpu trace` prints them), and the UMD's own spans (VGPU_TRACE) on its
  threads;
- flow arrows from each CS to the job it queued, and from each fence signal to the
  wait it ended.

Timestamps are CLOCK_MONOTONIC microseconds, the clock of the KMD and of the UMD.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import select
import subprocess
import sys
import tempfile
import time

from vgpu import frame as vframe
from vgpu.errors import DEAD_MOUNT_ERRNOS, UserError, dead_mount_hint

from . import trace_ioctls
from .timeline_render import GPU_PID, render_svg, render_text

IOCTL_LANE = 10_000_000    # ioctl threads: tid = pid + IOCTL_LANE * (lane + 1)
POLL_MS = 100
WAITS = {"AMDGPU_WAIT_CS", "AMDGPU_WAIT_FENCES", "SYNCOBJ_WAIT", "SYNCOBJ_TIMELINE_WAIT", "AMDGPU_GEM_WAIT_IDLE"}


def timeline_path(mount: str) -> str:
    return os.path.join(mount, "sys/kernel/debug/tracing/vgpu_timeline")


# ---------------------------------------------------------------------------
# Reading a recording while a command runs
# ---------------------------------------------------------------------------
class RecordingReader:
    """The records of one open of MOUNT/.../timeline, read without blocking."""

    def __init__(self, mount: str):
        self.fd = os.open(timeline_path(mount), os.O_RDONLY | os.O_NONBLOCK)
        self._partial = b""
        self.records: list[dict] = []

    def drain(self) -> int:
        """Read what is waiting; returns how many records came."""
        n = 0
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return n
            if not data:
                return n
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                self.records.append(json.loads(line))
                n += 1

    def wait(self, timeout_ms: int) -> None:
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        p.poll(timeout_ms)

    def close(self) -> None:
        os.close(self.fd)


class CommandError(Exception):
    """COMMAND could not be started."""


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class ProcessTree:
    """Whether a pid is the command or one of its descendants, decided when the pid
    is first seen (while it runs). A pid already gone is kept: better one extra
    process than a lost one."""

    def __init__(self, root: int):
        self.root = root
        self.known: dict[int, bool] = {root: True}

    def includes(self, pid: int) -> bool:
        if pid not in self.known:
            p, seen = pid, set()
            while p not in self.known and p not in seen and p > 1:
                seen.add(p)
                parent = _ppid(p)
                if parent is None:
                    self.known[p] = True
                    break
                p = parent
            verdict = self.known.get(p, False)
            for q in seen:
                self.known.setdefault(q, verdict)
            self.known.setdefault(pid, verdict)  # pid 0: the KMD's own (a context save area)
        return self.known[pid]


def record(mount: str, command: list[str], umd_trace: str | None) -> tuple[list[dict], ProcessTree, int]:
    """Run `command` with VGPU_TRACE=`umd_trace`; return (records, its process
    tree, its exit status)."""
    reader = RecordingReader(mount)
    try:
        env = dict(os.environ)
        env["VGPU_MOUNT"] = mount   # the command's device is the one recorded (umd, the samples)
        if umd_trace:
            env["VGPU_TRACE"] = umd_trace
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as e:
            raise CommandError(f"{command[0]}: {e.strerror}") from e
        tree = ProcessTree(proc.pid)

        def take() -> None:
            n = reader.drain()
            for r in reader.records[len(reader.records) - n:]:
                if "pid" in r:
                    tree.includes(r["pid"])  # decided while the process still lives, then kept

        while proc.poll() is None:
            reader.wait(POLL_MS)
            take()
        for _ in range(3):  # the last records (closes, fence signals) come just after the exit
            time.sleep(POLL_MS / 1000)
            take()
        return reader.records, tree, proc.returncode
    finally:
        reader.close()


# ---------------------------------------------------------------------------
# Building the trace
# ---------------------------------------------------------------------------
def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _decode(rec: dict) -> dict:
    """`vgpu trace`'s text of an ioctl record: the call and its reply."""
    req = trace_ioctls.decode_request(vframe.encode_request(rec["request"], bytes.fromhex(rec["arg"]),
                                                            bytes.fromhex(rec["extra"])),
                                      truncated=rec["extra_size"] > len(rec["extra"]) // 2)
    out = {"call": req.text}
    if rec.get("error"):
        out["reply"] = f"= -1 {errno.errorcode.get(rec['error'], rec['error'])}"
    elif "reply_arg" in rec:
        out["reply"] = trace_ioctls.decode_reply(req, vframe.encode_reply(0, bytes.fromhex(rec["reply_arg"]),
                                                                          bytes.fromhex(rec["reply_extra"])))
    return out


class _Lanes:
    """Threads for spans that may overlap without nesting (ioctls of several
    threads of one client): a span goes on the first lane free at its start."""

    def __init__(self):
        self.ends: dict[int, list[float]] = {}

    def lane(self, pid: int, start: float, end: float) -> int:
        ends = self.ends.setdefault(pid, [])
        for i, e in enumerate(ends):
            if e <= start:
                ends[i] = end
                return i
        ends.append(end)
        return len(ends) - 1


def _runs(run: dict, switches: list[dict], done: dict) -> list[tuple[float, float, str]]:
    """A job's runs on its ring, in µs: (start, end, why it was preempted at the end,
    or "" for its last run)."""
    runs, start = [], _us(run["ts"])
    for r in sorted(switches, key=lambda r: r["ts"]):
        if r["type"] == "job_preempted" and start is not None:
            runs.append((start, max(_us(r["ts"]), start + 0.001), r.get("reason", "")))
            start = None
        elif r["type"] == "job_resumed":
            start = _us(r["ts"])
    if start is None:
        start = runs[-1][1] if runs else _us(run["ts"])
    runs.append((start, max(_us(done["ts"]), start + 0.001), ""))
    return runs


def build(records: list[dict], keep=lambda pid: True, umd_events=()) -> dict:
    """The trace-event JSON object of a recording (and the UMD's events)."""
    head = next((r for r in records if r.get("type") == "header"), {"rings": []})
    rings = list(head.get("rings", []))
    ring_tid = {name: i + 1 for i, name in enumerate(rings)}
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": GPU_PID, "args": {"name": "GPU (vgpu)"}},
                      {"ph": "M", "name": "process_sort_index", "pid": GPU_PID, "args": {"sort_index": -1}}]
    for name, tid in ring_tid.items():
        ev.append({"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": tid, "args": {"name": name}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": GPU_PID, "tid": tid, "args": {"sort_index": tid}})

    records = sorted(records, key=lambda r: r.get("ts", 0))
    jobs: dict[int, dict] = {}
    for r in records:
        t = r.get("type")
        if t == "job_queued" and keep(r["pid"]):
            jobs[r["job"]] = dict(r)
        elif t in ("job_run", "job_done", "job_signaled") and r["job"] in jobs:
            jobs[r["job"]][t] = r
        elif t in ("job_preempted", "job_resumed") and r["job"] in jobs:
            jobs[r["job"]].setdefault("switches", []).append(r)

    # ioctls, per client, on lanes
    lanes, names, cs_spans, waits = _Lanes(), {}, [], []
    for r in records:
        if r.get("type") != "ioctl" or not keep(r["pid"]):
            continue
        names[r["pid"]] = r["comm"]
        lane = lanes.lane(r["pid"], r["ts"], r["end"])
        tid = r["pid"] + IOCTL_LANE * (lane + 1)
        span = {"ph": "X", "cat": "ioctl", "name": r["name"], "pid": r["pid"], "tid": tid,
                "ts": _us(r["ts"]), "dur": max(_us(r["end"]) - _us(r["ts"]), 0.001),
                "args": {"client": r["client"], **_decode(r)}}
        if r.get("error"):
            span["args"]["errno"] = errno.errorcode.get(r["error"], r["error"])
        ev.append(span)
        if r["name"] == "AMDGPU_CS":
            cs_spans.append((r, tid))
        if r.get("fences") and r["name"] in WAITS:
            waits.append((r, tid))
    for pid, comm in names.items():
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{comm} (pid {pid})"}})
        for lane in range(len(lanes.ends.get(pid, []))):
            tid = pid + IOCTL_LANE * (lane + 1)
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": "ioctls" + (f" #{lane + 1}" if lane else "")}})

    # jobs on their rings (a span per run: a preempted job has several), with the flow from their CS
    by_fence: dict[tuple[str, int], dict] = {}
    for job in jobs.values():
        run, done = job.get("job_run"), job.get("job_done")
        if run is None or done is None or job["ring"] not in ring_tid:
            continue
        tid = ring_tid[job["ring"]]
        runs = _runs(run, job.get("switches", []), done)
        start, end = runs[0][0], runs[-1][1]
        ib_dw = sum(dw for _, dw in job["ibs"])
        args = {"job": job["job"], "pid": job["pid"], "process": job["comm"], "context": job["ctx"],
                "seq": job["seq"], "ibs": len(job["ibs"]), "ib_dwords": ib_dw, "ib_bytes": ib_dw * 4,
                "bos": job["bos"], "status": done["status"]}
        if done.get("error"):
            args["errno"] = errno.errorcode.get(done["error"], done["error"])
        args.update(done.get("counters", {}))
        name = f"{job['comm']} ctx {job['ctx']} seq {job['seq']}"
        for i, (s0, s1, why) in enumerate(runs):
            span_args = args if len(runs) == 1 else {**args, "run": f"{i + 1} of {len(runs)}"}
            if why:
                span_args = {**span_args, "preempted_by": why}
            ev.append({"ph": "X", "cat": "job", "name": name + (" (resumed)" if i else ""),
                       "pid": GPU_PID, "tid": tid, "ts": s0, "dur": s1 - s0, "args": span_args})
            if why:
                ev.append({"ph": "i", "s": "t", "cat": "preempt", "name": f"preempted ({why})",
                           "pid": GPU_PID, "tid": tid, "ts": s1, "args": {"job": job["job"]}})
        job["runs"] = runs
        by_fence[(job["ring"], job["seq"])] = {"tid": tid, "start": start, "end": end}
        cs = next(((c, ctid) for c, ctid in cs_spans
                   if c["client"] == job["client"] and c["ts"] <= job["ts"] <= c["end"]), None)
        if cs is not None:
            c, ctid = cs
            flow = f"cs-{job['job']}"
            ev.append({"ph": "s", "cat": "submit", "name": "CS -> job", "id": flow, "pid": c["pid"], "tid": ctid,
                       "ts": (_us(c["ts"]) + _us(c["end"])) / 2})
            ev.append({"ph": "f", "bp": "e", "cat": "submit", "name": "CS -> job", "id": flow, "pid": GPU_PID,
                       "tid": tid, "ts": start + min(0.0005, (end - start) / 2)})

    # user-queue runs (kmd/userq_worker.py), each queue on a lane of its own after the rings
    queue_tid: dict[str, int] = {}
    queue_busy: list[tuple[str, float, float]] = []
    for r in records:
        if r.get("type") != "userq_run" or not keep(r["pid"]):
            continue
        tid = queue_tid.get(r["queue"])
        if tid is None:
            tid = queue_tid[r["queue"]] = len(ring_tid) + len(queue_tid) + 1
            ev.append({"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": tid,
                       "args": {"name": r["queue"]}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": GPU_PID, "tid": tid,
                       "args": {"sort_index": tid}})
        s0, s1 = _us(r["ts"]), max(_us(r["end"]), _us(r["ts"]) + 0.001)
        ev.append({"ph": "X", "cat": "userq", "name": f"{r['comm']} queue {r['queue_id']}", "pid": GPU_PID,
                   "tid": tid, "ts": s0, "dur": s1 - s0,
                   "args": {"pid": r["pid"], "process": r["comm"], "client": r["client"], "dwords": r["dwords"],
                            "status": r["status"]}})
        queue_busy.append((r["queue"], s0, s1))

    # fence signal -> the wait it ended
    for w, wtid in waits:
        for ring, seq, signaled_at in w["fences"]:
            job = by_fence.get((ring, seq))
            if job is None or signaled_at < w["ts"]:
                continue  # signalled before the wait began: it did not end it
            flow = f"fence-{ring}-{seq}-{w['ts']}"
            ev.append({"ph": "s", "cat": "fence", "name": "signal -> wait", "id": flow, "pid": GPU_PID,
                       "tid": job["tid"], "ts": job["end"] - min(0.0005, (job["end"] - job["start"]) / 2)})
            ev.append({"ph": "f", "bp": "e", "cat": "fence", "name": "signal -> wait", "id": flow, "pid": w["pid"],
                       "tid": wtid, "ts": _us(w["end"]) - min(0.0005, (_us(w["end"]) - _us(w["ts"])) / 2)})

    # counters: memory (all clients: VRAM is shared), ring busy (the jobs kept)
    for r in records:
        if r.get("type") == "memory":
            ev.append({"ph": "C", "name": "VRAM used", "pid": GPU_PID, "ts": _us(r["ts"]),
                       "args": {"bytes": r["vram_used"]}})
            ev.append({"ph": "C", "name": "GTT used", "pid": GPU_PID, "ts": _us(r["ts"]),
                       "args": {"bytes": r["gtt_used"]}})
    if "vram_used" in head:
        for name, key in (("VRAM used", "vram_used"), ("GTT used", "gtt_used")):
            ev.append({"ph": "C", "name": name, "pid": GPU_PID, "ts": _us(head["ts"]), "args": {"bytes": head[key]}})
    for job in jobs.values():
        for s0, s1, _ in job.get("runs", ()):
            ev.append({"ph": "C", "name": f"{job['ring']} busy", "pid": GPU_PID, "ts": s0, "args": {"busy": 1}})
            ev.append({"ph": "C", "name": f"{job['ring']} busy", "pid": GPU_PID, "ts": s1, "args": {"busy": 0}})

    for name, s0, s1 in queue_busy:
        ev.append({"ph": "C", "name": f"{name} busy", "pid": GPU_PID, "ts": s0, "args": {"busy": 1}})
        ev.append({"ph": "C", "name": f"{name} busy", "pid": GPU_PID, "ts": s1, "args": {"busy": 0}})

    ev.extend(e for e in umd_events if "pid" not in e or keep(e["pid"]))
    lost = sum(r.get("count", 0) for r in records if r.get("type") == "lost")
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"clock": "CLOCK_MONOTONIC", "source": "vgpu timeline", "records_lost": lost}}


def load_umd(path: str) -> list[dict]:
    """The events of a VGPU_TRACE file (empty if the command wrote none)."""
    try:
        with open(path) as f:
            return json.load(f).get("traceEvents", [])
    except (OSError, ValueError):
        return []


def run(mount: str, out: str, command: list[str], everything: bool = False) -> int:
    """`vgpu timeline`: record `command`, write the trace to `out`; returns the
    command's exit status (2 when the recording cannot be opened)."""
    own = os.environ.get("VGPU_TRACE")
    tmp = None
    if not own:
        fd, tmp = tempfile.mkstemp(prefix="vgpu-umd-", suffix=".json")
        os.close(fd)
        os.unlink(tmp)  # the UMD writes it only if the command uses the UMD
    try:
        try:
            records, tree, status = record(mount, command, own or tmp)
        except PermissionError:
            print(f"vgpu timeline: {timeline_path(mount)}: permission denied: the recording is in "
                  f"debugfs, which is root's (run as root)", file=sys.stderr)
            return 2
        except FileNotFoundError:
            print(f"vgpu timeline: {timeline_path(mount)} not found: is a vgpu mounted at {mount}? "
                  f"(start one with `vgpu mount {mount}`, or name another with --mount MOUNT)",
                  file=sys.stderr)
            return 2
        except OSError as e:
            if e.errno not in DEAD_MOUNT_ERRNOS:
                raise
            raise UserError(dead_mount_hint(mount)) from None
        except CommandError as e:
            print(f"vgpu timeline: cannot run {e}", file=sys.stderr)
            return 127
        trace = build(records, (lambda pid: True) if everything else tree.includes, load_umd(own or tmp))
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    with open(out, "w") as f:
        json.dump(trace, f)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    jobs = sum(e["cat"] == "job" for e in spans)
    runs = sum(e["cat"] == "userq" for e in spans)
    ioctls = sum(e["cat"] == "ioctl" for e in spans)
    print(f"vgpu timeline: {jobs} jobs, {runs} user-queue runs, {ioctls} ioctls, "
          f"{len(spans) - jobs - runs - ioctls} UMD spans -> {out} "
          f"(open it in ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    if trace["otherData"]["records_lost"]:
        print(f"vgpu timeline: {trace['otherData']['records_lost']} records were lost (the recording "
              f"buffer was full)", file=sys.stderr)
    return status


def load_trace(path: str) -> dict:
    """A trace `vgpu timeline -o` wrote (Chrome trace-event JSON); UserError if the
    file is not one."""
    try:
        with open(path) as f:
            trace = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not a JSON trace ({e}); give a FILE.json that "
                        "`vgpu timeline -o FILE.json -- COMMAND` wrote") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise UserError(f"{path} is JSON but not a trace (no traceEvents list); give a FILE.json "
                        "that `vgpu timeline -o FILE.json -- COMMAND` wrote")
    return trace


def main(args) -> int:
    """`vgpu timeline`: record (`-o`), and/or draw (`--svg`, of the new or a `--from` trace)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if args.source:
        if command or args.output:
            raise UserError("--from draws a trace already recorded: give it --svg FILE.svg and/or "
                            "--text, not -o or a command", status=2)
        if not (args.svg or args.text):
            raise UserError(f"--from {args.source}: say what to draw: --svg FILE.svg and/or --text",
                            status=2)
        trace = load_trace(args.source)
        status = 0
    else:
        if not command or not args.output:
            print("vgpu timeline: vgpu timeline [--mount MOUNT] -o FILE.json -- COMMAND [ARGS...]",
                  file=sys.stderr)
            return 2
        status = run(os.path.realpath(args.mount), args.output, command, args.all)
        if not os.path.exists(args.output):
            return status
        with open(args.output) as f:
            trace = json.load(f)
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(render_svg(trace))
    if args.text:
        print(render_text(trace), end="")
    return status


def add_parser(sub, default_mount: str) -> None:
    t = sub.add_parser("timeline", help="record a command's GPU work for Perfetto / chrome://tracing",
                       description="Run COMMAND and record its ioctls, jobs, fences and memory "
                                   "(and its UMD spans, VGPU_TRACE) as Chrome trace-event JSON "
                                   "that ui.perfetto.dev and chrome://tracing open. Needs root "
                                   "(the recording is in debugfs). See docs/tracing.md.")
    t.add_argument("--mount", default=default_mount, help="the vgpu mount (default $VGPU_MOUNT, then /tmp/vgpu)")
    t.add_argument("-o", "--output", metavar="FILE.json", help="where the trace goes")
    t.add_argument("--all", action="store_true", help="keep every client's work, not only COMMAND's processes")
    t.add_argument("--svg", metavar="FILE.svg", help="also draw the trace as an SVG picture")
    t.add_argument("--text", action="store_true", help="also print the trace as text (a row per track)")
    t.add_argument("--from", dest="source", metavar="FILE.json", help="draw this trace instead of recording")
    t.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS]")
    t.set_defaults(func=main)
