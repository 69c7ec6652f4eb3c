"""(h) tracing: NOP submissions/s and SDMA bandwidth with tracing off, with every
tracepoint on (trace_pipe read by a reader process), and while `vgpu timeline`
records (its recording file read).

One client process holds a NOP submitter and a 16 MiB VRAM->VRAM copy; the parent
switches the mode between its runs (off, events, recording, off, ...) so a drift of
the machine hits every mode alike; each figure is the median of the runs. "off" is
the cost of the one flag check (docs/tracing.md); compare it with (b) and (c).

    python3 -m bench.tracing            # mounts a vgpu itself
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import sys
import time

from . import util

NOP_IB = (0).to_bytes(4, "little")
COPY = 16 * util.MiB
WINDOW = 32
MODES = ("off", "events", "recording")


def client(mount: str) -> None:
    """``nop N`` -> submissions/s; ``copy N`` -> MiB/s of N waited copies."""
    import libvgpu
    from vgpu import uapi
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        bos = [stack.enter_context(libvgpu.bo_alloc(dev, COPY, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM))
               for _ in range(2)]
        holder = util.Submitter(dev, NOP_IB, bos)
        stack.callback(holder.close)
        src, dst = holder.map(bos[0]), holder.map(bos[1])
        ib = libvgpu.SdmaIb()
        for off in range(0, COPY, 4 * util.MiB):
            ib.copy_linear(dst + off, src + off, 4 * util.MiB)
        copy = util.Submitter(dev, ib.tobytes(), bos)
        stack.callback(copy.close)
        nop = holder
        nop.wait(nop.submit())
        copy.wait(copy.submit())
        print("ready", flush=True)
        for line in sys.stdin:
            what, n = line.split()
            n = int(n)
            t0 = time.monotonic()
            if what == "nop":
                inflight = collections.deque()
                for _ in range(n):
                    inflight.append(nop.submit())
                    if len(inflight) > WINDOW:
                        nop.wait(inflight.popleft())
                nop.wait(inflight[-1])
                print(json.dumps(n / (time.monotonic() - t0)), flush=True)
            else:
                for _ in range(n):
                    copy.wait(copy.submit())
                print(json.dumps(n * COPY / util.MiB / (time.monotonic() - t0)), flush=True)


# A reader that drains a streaming file as fast as it comes, until killed.
DRAIN = "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nwhile os.read(fd, 1 << 20):\n    pass\n"


@contextlib.contextmanager
def mode(mount: str, name: str):
    """Tracing set up as `name` says for the duration, then off again."""
    tracing = os.path.join(mount, "sys/kernel/debug/tracing")
    reader = None
    if name == "events":
        with open(f"{tracing}/events/enable", "w") as f:
            f.write("1\n")
        reader = subprocess.Popen([sys.executable, "-c", DRAIN, f"{tracing}/trace_pipe"])
    elif name == "recording":
        reader = subprocess.Popen([sys.executable, "-c", DRAIN,
                                   f"{tracing}/vgpu_timeline"])
    try:
        time.sleep(0.2)  # the reader has its file open
        yield
    finally:
        if name == "events":
            with open(f"{tracing}/events/enable", "w") as f:
                f.write("0\n")
        if reader is not None:
            reader.kill()
            reader.wait()
        time.sleep(0.2)  # its release has closed the recording


def run(vgpu_mount: str | None = None) -> dict:
    nops, copies, reps = (200, 2, 1) if util.quick() else (2000, 8, 3)
    results = {m: {"nop": [], "copy": []} for m in MODES}
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        proc = util.start_client("bench.tracing", "--client", vgpu_mount)
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"tracing client failed ({proc.wait()})")
            for _ in range(reps):
                for m in MODES:
                    with mode(vgpu_mount, m):
                        results[m]["nop"].append(json.loads(util.ask(proc, f"nop {nops}")))
                        results[m]["copy"].append(json.loads(util.ask(proc, f"copy {copies}")))
        finally:
            proc.stdin.close()
            proc.wait()
    return {"modes": {m: {k: util.median(v) for k, v in r.items()} for m, r in results.items()},
            "nops": nops, "copies": copies, "reps": reps}


def report(r: dict) -> list[tuple[str, str, str]]:
    off = r["modes"]["off"]
    rows = []
    for m, label in (("off", "tracing off"), ("events", "all tracepoints on, trace_pipe read"),
                     ("recording", "vgpu timeline recording")):
        t = r["modes"][m]
        rel = "" if m == "off" else f"{t['nop'] / off['nop']:.2f}x of off"
        rows.append((f"NOP submissions/s, {label}", f"{t['nop']:.0f}/s",
                     rel or f"{r['nops']} submissions, {WINDOW} in flight, median of {r['reps']}"))
        rel = "" if m == "off" else f"{t['copy'] / off['copy']:.2f}x of off"
        rows.append((f"SDMA copy 16 MiB, {label}", f"{t['copy']:.0f} MiB/s",
                     rel or f"{r['copies']} waited copies, median of {r['reps']}"))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2])
    else:
        for row in report(run()):
            print("  ".join(row))
