"""``VGPU_TRACE=FILE.json``: the UMD's own spans, as Chrome trace events
(docs/tracing.md, "The UMD's spans").

Kernel launches (by kernel name), memory copies and fills, and stream and event
synchronization become complete ("X") events of the calling thread, timed with
CLOCK_MONOTONIC (time.monotonic_ns), the clock of the KMD's tracepoints and
recordings, so ``vgpu timeline`` merges them into one timeline. A launch is
asynchronous: its span is the time the call took to queue the work; the work itself
is on the ring's track of the timeline. The file is written when the process exits.

Off (VGPU_TRACE unset) the decorated functions are the undecorated ones: no cost.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time
from typing import Callable

#: where the spans go, read once at import
PATH = os.environ.get("VGPU_TRACE") or None

_events: list[dict] = []
_lock = threading.Lock()


def traced(cat: str, name: "str | Callable[..., str]", args: Callable[..., dict] | None = None):
    """Decorate a UMD call so that each call is one span of category `cat` named
    `name` (or `name(*call args)`), with `args(*call args)` as its arguments."""
    def wrap(fn):
        if PATH is None:
            return fn

        @functools.wraps(fn)
        def call(*a, **kw):
            t0 = time.monotonic_ns()
            try:
                return fn(*a, **kw)
            finally:
                t1 = time.monotonic_ns()
                span = {"ph": "X", "cat": cat, "name": name(*a, **kw) if callable(name) else name,
                        "ts": t0 / 1000, "dur": (t1 - t0) / 1000, "pid": os.getpid(),
                        "tid": threading.get_native_id()}
                if args is not None:
                    try:
                        span["args"] = args(*a, **kw)
                    except Exception as e:  # a span must never break the call it describes
                        span["args"] = {"error": repr(e)}
                with _lock:
                    _events.append(span)
        return call
    return wrap


def write(path: str | None = None) -> None:
    """Write the spans so far to `path` (default VGPU_TRACE) as a trace-event JSON
    object, with the process's and its threads' names."""
    path = path or PATH
    if path is None:
        return
    with _lock:
        events = list(_events)
    pid = os.getpid()
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": _comm()}}]
    meta += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
              "args": {"name": f"UMD {names.get(tid, tid)}"}} for tid in sorted({e["tid"] for e in events})]
    with open(path, "w") as f:
        json.dump({"traceEvents": meta + events, "displayTimeUnit": "ms",
                   "otherData": {"clock": "CLOCK_MONOTONIC", "source": "umd"}}, f)


def _comm() -> str:
    try:
        with open("/proc/self/comm") as f:
            return f.read().strip()
    except OSError:
        return "umd"


if PATH is not None:
    atexit.register(write)
