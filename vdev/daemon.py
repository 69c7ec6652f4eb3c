"""The vgpu daemon: a Device (the KMD) served at MOUNT by vdev.fs.VgpuFs.

Run by ``vgpu mount`` as a detached ``python3 -m vdev.daemon MOUNT --vram N ...``
(or in the foreground with ``--foreground``). The life cycle is pyfuse3's:
``init`` mounts, ``trio.run(main)`` serves until the file system is unmounted
(``fusermount3 -u``) or SIGTERM/SIGINT ask it to stop, and ``close(unmount=True)``
in ``finally`` leaves no mount behind.

vdev runs in that one ``trio.run``: the FUSE handlers, the signal watcher, and the
wake-ups of sync-file pollers that the KMD's threads queue on it (vdev.nodes.SyncHandle).
vdev starts no thread of its own; what may wait for the GPU runs in
``trio.to_thread`` workers (docs/vdev.md, "Threads").
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import signal
import sys

import pyfuse3
import trio

from .options import DEFAULT_POLL_US, add_device_options, limits_from, permissions_from, sched_from

log = logging.getLogger("vgpu.daemon")

MiB = 1 << 20
# FUSE requests served at once, each by a pyfuse3 worker task. A read waiting for a
# fence holds its task (a trio task, no thread) until the fence signals, so the limit
# must be well above the number of waits in flight: with pyfuse3's default (99),
# 99 threads blocked in waits would stall every other request of every client.
MAX_TASKS = 4096
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """'512M', '2G', '65536', '1.5G' -> bytes (binary units, optional trailing B/iB)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)] if unit else t
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 512M, 2G)") from None
    if value <= 0 or value != int(value):
        raise ValueError(f"not a positive whole number of bytes: {text!r}")
    return int(value)


def pin_malloc_thresholds() -> None:
    """Fixed glibc malloc thresholds for the daemon. glibc raises its mmap threshold to
    the size of each large block freed (up to 32 MiB), after which such blocks come
    from the heap, whose top is rarely returned: one client pointing an ioctl at 16 MiB
    of data (vgpu.pointers.MAX_POINTED) would leave the daemon's RSS up for good (the
    soak's ioctl fuzzers grew it 36 MiB in 8 rounds). Fixed, every block over 256 KiB
    is a mapping of its own, unmapped when freed. No-op off glibc."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # malloc.h
    mallopt(M_MMAP_THRESHOLD, 256 << 10)
    mallopt(M_TRIM_THRESHOLD, 1 << 20)


def freeze_startup_objects() -> None:
    """Move everything made so far (the device, its tables, the imported modules: about
    50,000 objects) out of the cyclic garbage collector's reach (gc.freeze). They live
    as long as the daemon, yet every full collection walked them all: measured, a
    21 ms pause once per few thousand CS -> WAIT_CS pairs, in which no client is
    answered. Young collections are unchanged."""
    gc.collect()
    gc.freeze()


def mount_options() -> set[str]:
    """fsname=vgpu; allow_other as root so every uid reaches the device (vdev.fs does
    its own permission checks, hence no default_permissions)."""
    opts = {"fsname=vgpu", "subtype=vgpu"}
    if os.getuid() == 0:
        opts.add("allow_other")
    return opts


async def _serve(poll_us: int) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal)
        await pyfuse3.main(max_tasks=MAX_TASKS, ioctl_thread=True, ioctl_poll_us=poll_us)
        nursery.cancel_scope.cancel()


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %d: unmounting", signum)
            pyfuse3.terminate()
            return


def serve(mountpoint: str, vram: int, gtt: int, timeout: float, shm_dir: str | None = None,
          limits=None, perms=None, huge_pages: bool = True, sched=None, partitions: int = 1,
          cache_model: bool = False, poll_us: int = DEFAULT_POLL_US) -> int:
    """Mount the device tree at ``mountpoint`` and serve it until unmounted or signalled.
    ``limits``: kmd.limits.Limits; ``perms``: vdev.options.NodePermissions, the modes
    and group of the device nodes (the defaults when None); ``huge_pages``: BO files
    on a private huge-page tmpfs when root (kmd/shmem.py); ``sched``: kmd.sched.SchedOptions
    (preemption, time slicing, heartbeat; the defaults when None); ``partitions``: how
    many isolated devices the GPU is split into (kmd/gpu.py; 1: the whole GPU, one Device).
    ``cache_model``: the L2 cache model (docs/cache.md). ``poll_us``: how long the
    thread that reads /dev/fuse polls before it sleeps (docs/ioctl.md).
    Returns 1 without mounting when the BO store cannot be set up or the GPU cannot
    take that many partitions (logged)."""
    from kmd.device import Device  # imported here so `vgpu --help` stays light
    from kmd.gpu import PartitionedGpu
    from kmd.partition import split
    from kmd.shmem import StoreError

    from .fs import VgpuFs

    try:
        if partitions != 1:   # one partition is the whole GPU: the Device checks its sizes
            split(partitions, vram, gtt)
    except ValueError as e:
        log.error("cannot start: %s", e)
        return 1
    options = dict(vram_size=vram, gtt_size=gtt, timeout=timeout, shm_dir=shm_dir, limits=limits,
                   huge_pages=huge_pages, sched=sched, cache_model=cache_model)
    try:
        dev = Device(**options) if partitions == 1 else PartitionedGpu(partitions, **options)
    except StoreError as e:
        log.error("cannot start: %s", e.strerror)
        return 1
    pin_malloc_thresholds()
    ops = VgpuFs(dev, perms)
    pyfuse3.init(ops, mountpoint, mount_options())
    pyfuse3.set_ioctl_fast_path(ops.fast.capsule())   # ops keeps ops.fast alive
    freeze_startup_objects()
    store = dev.partitions[0].memory.store   # the partitions share one
    log.info("mounted vgpu at %s (pid %d); BO files in %s%s%s", mountpoint, os.getpid(), store.files,
             " (private tmpfs, huge pages)" if store.huge else "",
             f"; {partitions} partitions" if partitions > 1 else "")
    try:
        trio.run(_serve, poll_us)
    finally:
        pyfuse3.close(unmount=True)
        dev.shutdown()
        log.info("unmounted %s (%d clock reads answered in C, and %d WAIT_CS of finished jobs; "
                 "vdev/ioctl/fast.pyx)", mountpoint, ops.fast.answered, ops.fast.waits)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m vdev.daemon", description="vgpu FUSE daemon")
    p.add_argument("mountpoint")
    p.add_argument("--vram", type=parse_size, default=512 * MiB)
    p.add_argument("--gtt", type=parse_size, default=1024 * MiB)
    p.add_argument("--timeout", type=float, default=2.0)
    p.add_argument("--shm-dir", default=None, help="tmpfs for BO files (default /dev/shm)")
    p.add_argument("--no-huge-pages", action="store_true",
                   help="keep BO files in 4 KiB pages of --shm-dir (by default root mounts a "
                        "private huge-page tmpfs for them)")
    p.add_argument("--debug", action="store_true")
    add_device_options(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        perms = permissions_from(args)
    except ValueError as e:
        p.error(f"--group: {e}")
    try:
        sched = sched_from(args)
    except ValueError as e:
        p.error(f"scheduling options: {e}")
    return serve(os.path.abspath(args.mountpoint), args.vram, args.gtt, args.timeout, args.shm_dir,
                 limits=limits_from(args), perms=perms, huge_pages=not args.no_huge_pages, sched=sched,
                 partitions=args.partitions, cache_model=args.cache_model, poll_us=args.poll_us)


if __name__ == "__main__":
    sys.exit(main())
