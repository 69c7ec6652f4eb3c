"""(a) Null ioctl round trip: GET_CAP on vgpu as a real ioctl() against FUSE's floor.

Since vgpu answers FUSE_IOCTL (vdev/ioctl/path.py), one DRM request is one
``ioctl(fd, DRM_IOCTL_GET_CAP, &drm_get_cap)`` on ``MOUNT/dev/dri/renderD128``: one
FUSE request, restricted mode (the kernel copies the 16-byte struct in and back).
GET_CAP has no pointers and almost no KMD work. The targets, all in one client
process and one run:

- ``vgpu ioctl``: ``fcntl.ioctl`` of GET_CAP (DRM_CAP_TIMESTAMP_MONOTONIC) on a vgpu
  mount's render node (vdev.daemon: pyfuse3's ioctl reader thread, the real stack);
- ``C ioctl``: the same ioctl on ``bench/c_echo/echo_fuse``'s ``ioctl`` file
  (libfuse3 low-level API, single-threaded; the handler copies the struct back);
- ``pyfuse3 ioctl thread`` / ``pyfuse3 ioctl trio``: the same on
  ``bench.echo_pyfuse3``'s ``ioctl`` file, answered by ``main(ioctl_thread=True)``'s
  reader thread (as vdev.daemon runs) and by the stock trio loop (``main()``);
- the frame protocol of before, beside it: ``write()`` of a GET_CAP request frame +
  ``read()`` of the reply (16 + 16 bytes each way) on the same vgpu file, and the
  frame echoes (``ctl``) of the pyfuse3 echo (trio loop, and the reader-thread echo,
  which hands WRITE and READ to its loop as vdev.daemon now does) and the C echo.

The client holds every file open and runs the rounds alternately (one target after
the other, then again) so machine drift hits all alike, the same plain Python loop
for every ioctl target and for every frame target. Figure: median over rounds of
the mean µs per round trip in a round.

    python3 -m bench.null_ioctl            # mounts all four daemons itself
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time

from . import util

#: (name, daemon, file under its mount, kind): kind "ioctl" is one ioctl() per round
#: trip, "frame" one write() + one read().
TARGETS = (
    ("vgpu ioctl", "vgpu", "dev/dri/renderD128", "ioctl"),
    ("C ioctl", "C", "ioctl", "ioctl"),
    ("pyfuse3 ioctl thread", "pyfuse3-thread", "ioctl", "ioctl"),
    ("pyfuse3 ioctl trio", "pyfuse3", "ioctl", "ioctl"),
    ("vgpu frame", "vgpu", "dev/dri/renderD128", "frame"),
    ("pyfuse3 frame", "pyfuse3", "ctl", "frame"),
    ("pyfuse3 frame thread", "pyfuse3-thread", "ctl", "frame"),
    ("C frame", "C", "ctl", "frame"),
)
READ_SIZE = 4096  # read() buffer: the same for all frame targets, larger than any reply here


def _cap():
    from vgpu import uapi
    return uapi.drm_get_cap(capability=uapi.DRM_CAP_TIMESTAMP_MONOTONIC)


def get_cap_frame() -> bytes:
    from vgpu.frame import encode_request
    from vgpu import uapi
    return encode_request(uapi.DRM_IOCTL_GET_CAP, bytes(_cap()))


def client(specs: list[str]) -> None:
    """Client process: ``KIND:PATH`` arguments; ``run I N`` on stdin -> N round trips
    on target I, prints ns."""
    from vgpu import uapi
    frame, request, cap = get_cap_frame(), uapi.DRM_IOCTL_GET_CAP, _cap()
    kinds = [spec.split(":", 1)[0] for spec in specs]
    fds = [os.open(spec.split(":", 1)[1], os.O_RDWR) for spec in specs]
    for kind, fd in zip(kinds, fds):
        if kind == "ioctl":   # vgpu answers the cap, an echo the struct as sent
            fcntl.ioctl(fd, request, cap, True)
            assert cap.capability == uapi.DRM_CAP_TIMESTAMP_MONOTONIC and cap.value in (0, 1), (cap.capability, cap.value)
        else:                 # every frame target answers a frame as long as vgpu's, result 0
            os.write(fd, frame)
            reply = os.read(fd, READ_SIZE)
            assert len(reply) == len(frame) and reply[:4] == b"\0\0\0\0", (len(reply), reply[:16])
    print("ready", flush=True)
    write, read, ioctl = os.write, os.read, fcntl.ioctl
    for line in sys.stdin:
        _, i, n = line.split()
        fd, n = fds[int(i)], int(n)
        if kinds[int(i)] == "ioctl":
            t0 = time.perf_counter_ns()
            for _ in range(n):
                ioctl(fd, request, cap, True)
        else:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                write(fd, frame)
                read(fd, READ_SIZE)
        print(time.perf_counter_ns() - t0, flush=True)


def measure(specs: list[str], rounds: int, per_round: int) -> dict[str, float]:
    """Median seconds per round trip for each target, rounds alternated."""
    proc = util.start_client("bench.null_ioctl", "--client", *specs)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"null-ioctl client failed ({proc.wait()})")
        for i in range(len(specs)):  # warm-up, not counted
            util.ask(proc, f"run {i} {per_round // 4 or 1}")
        samples: list[list[float]] = [[] for _ in specs]
        for _ in range(rounds):
            for i in range(len(specs)):
                ns = int(util.ask(proc, f"run {i} {per_round}"))
                samples[i].append(ns / per_round / 1e9)
    finally:
        proc.stdin.close()
        proc.wait()
    return {name: util.median(s) for (name, *_), s in zip(TARGETS, samples)}


def run(vgpu_mount: str | None = None) -> dict[str, float]:
    rounds, per_round = (5, 400) if util.quick() else (10, 2000)
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        mounts = {"vgpu": vgpu_mount,
                  "pyfuse3": stack.enter_context(util.pyfuse3_echo_mount()),
                  "pyfuse3-thread": stack.enter_context(util.pyfuse3_echo_mount(ioctl_thread=True)),
                  "C": stack.enter_context(util.c_echo_mount())}
        specs = [f"{kind}:{os.path.join(mounts[daemon], path)}" for _, daemon, path, kind in TARGETS]
        t = measure(specs, rounds, per_round)
    t.update(rounds=rounds, per_round=per_round)
    return t


def report(t: dict) -> list[tuple[str, str, str]]:
    us = {name: t[name] * 1e6 for name, *_ in TARGETS}
    return [
        ("null ioctl (GET_CAP ioctl()) vgpu", f"{us['vgpu ioctl']:.1f} µs", "one FUSE_IOCTL"),
        ("null ioctl C libfuse3 ioctl echo", f"{us['C ioctl']:.1f} µs", ""),
        ("  vgpu ioctl / C ioctl echo", f"{us['vgpu ioctl'] / us['C ioctl']:.2f}x", "target <= 3x"),
        ("null ioctl pyfuse3 ioctl echo, reader thread", f"{us['pyfuse3 ioctl thread']:.1f} µs",
         "main(ioctl_thread=True), as vdev.daemon"),
        ("null ioctl pyfuse3 ioctl echo, trio loop", f"{us['pyfuse3 ioctl trio']:.1f} µs", "stock main()"),
        ("  vgpu ioctl / pyfuse3 ioctl echo (thread)",
         f"{us['vgpu ioctl'] / us['pyfuse3 ioctl thread']:.2f}x", ""),
        ("  pyfuse3 ioctl echo, trio loop / reader thread",
         f"{us['pyfuse3 ioctl trio'] / us['pyfuse3 ioctl thread']:.2f}x", ""),
        ("frame (GET_CAP write + read) vgpu", f"{us['vgpu frame']:.1f} µs", "the protocol of before"),
        ("frame pyfuse3 echo", f"{us['pyfuse3 frame']:.1f} µs", "trio loop"),
        ("frame pyfuse3 echo, reader thread", f"{us['pyfuse3 frame thread']:.1f} µs",
         "WRITE/READ handed to the loop"),
        ("frame C libfuse3 echo", f"{us['C frame']:.1f} µs", ""),
        ("  vgpu / pyfuse3 echo (frame)", f"{us['vgpu frame'] / us['pyfuse3 frame']:.2f}x", ""),
        ("  vgpu / C echo (frame)", f"{us['vgpu frame'] / us['C frame']:.2f}x", ""),
        ("  pyfuse3 echo / C echo (frame)", f"{us['pyfuse3 frame'] / us['C frame']:.2f}x", ""),
        ("  vgpu frame / vgpu ioctl", f"{us['vgpu frame'] / us['vgpu ioctl']:.2f}x", "before / after"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2:])
    else:
        r = run()
        print(f"null ioctl: median of {r['rounds']} alternating rounds of {r['per_round']}")
        for row in report(r):
            print("  ".join(row))
