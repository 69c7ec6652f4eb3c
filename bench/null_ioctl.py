"""(a) Null ioctl round trip: VERSION on vgpu against two echo floors, same run.

One ioctl is a write() of the request frame and a read() of the reply on an open
control file (docs/design.md section 3). The request is VERSION with zero string
lengths: 16 + 64 bytes out, 16 + 64 bytes back, no KMD work to speak of. The same
frame goes to:

- ``vgpu``: a vgpu mount's ``dev/dri/renderD128`` (vdev.daemon, the real stack);
- ``pyfuse3``: ``bench.echo_pyfuse3`` (pyfuse3 + trio, one file, echo);
- ``C``: ``bench/c_echo/echo_fuse`` (libfuse3 low-level API, single-threaded, echo).

One client process (plain Python ``os.write``/``os.read`` in a tight loop) holds
all three files open and runs the rounds alternately (vgpu, pyfuse3, C, vgpu, ...)
so machine drift hits all three alike. Figure: median over rounds of the mean µs
per round trip in a round.

    python3 -m bench.null_ioctl            # mounts all three itself
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

from . import util

TARGETS = ("vgpu", "pyfuse3", "C")
READ_SIZE = 4096  # read() buffer: the same for all three, larger than any reply here


def version_frame() -> bytes:
    from vgpu.frame import encode_request
    from vgpu import uapi
    return encode_request(uapi.DRM_IOCTL_VERSION, bytes(uapi.drm_version()))


def client(paths: list[str]) -> None:
    """Client process: ``run I N`` on stdin -> N round trips on file I, prints ns."""
    frame = version_frame()
    fds = [os.open(p, os.O_RDWR) for p in paths]
    for fd in fds:  # every target answers with a frame as long as vgpu's, result 0
        os.write(fd, frame)
        reply = os.read(fd, READ_SIZE)
        assert len(reply) == len(frame) and reply[:4] == b"\0\0\0\0", (len(reply), reply[:16])
    print("ready", flush=True)
    write, read = os.write, os.read
    for line in sys.stdin:
        _, i, n = line.split()
        fd, n = fds[int(i)], int(n)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            write(fd, frame)
            read(fd, READ_SIZE)
        print(time.perf_counter_ns() - t0, flush=True)


def measure(paths: list[str], rounds: int, per_round: int) -> dict[str, float]:
    """Median seconds per round trip for each target, rounds alternated."""
    proc = util.start_client("bench.null_ioctl", "--client", *paths)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"null-ioctl client failed ({proc.wait()})")
        for i in range(len(paths)):  # warm-up, not counted
            util.ask(proc, f"run {i} {per_round // 4 or 1}")
        samples: list[list[float]] = [[] for _ in paths]
        for _ in range(rounds):
            for i in range(len(paths)):
                ns = int(util.ask(proc, f"run {i} {per_round}"))
                samples[i].append(ns / per_round / 1e9)
    finally:
        proc.stdin.close()
        proc.wait()
    return {name: util.median(s) for name, s in zip(TARGETS, samples)}


def run(vgpu_mount: str | None = None) -> dict[str, float]:
    rounds, per_round = (5, 400) if util.quick() else (10, 2000)
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        py = stack.enter_context(util.pyfuse3_echo_mount())
        c = stack.enter_context(util.c_echo_mount())
        paths = [os.path.join(vgpu_mount, "dev/dri/renderD128"), os.path.join(py, "ctl"),
                 os.path.join(c, "ctl")]
        t = measure(paths, rounds, per_round)
    t.update(rounds=rounds, per_round=per_round)
    return t


def report(t: dict) -> list[tuple[str, str, str]]:
    us = {k: t[k] * 1e6 for k in TARGETS}
    return [
        ("null ioctl (VERSION) vgpu", f"{us['vgpu']:.1f} µs", ""),
        ("null ioctl pyfuse3 echo", f"{us['pyfuse3']:.1f} µs", ""),
        ("null ioctl C libfuse3 echo", f"{us['C']:.1f} µs", ""),
        ("  vgpu / pyfuse3 echo", f"{us['vgpu'] / us['pyfuse3']:.2f}x", "target <= 1.3x"),
        ("  vgpu / C echo", f"{us['vgpu'] / us['C']:.2f}x", ""),
        ("  pyfuse3 echo / C echo", f"{us['pyfuse3'] / us['C']:.2f}x", ""),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2:])
    else:
        r = run()
        print(f"null ioctl: median of {r['rounds']} alternating rounds of {r['per_round']}")
        for row in report(r):
            print("  ".join(row))
