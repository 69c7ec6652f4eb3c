"""The device options of `vgpu mount` and `python3 -m vdev.daemon`, defined once
(docs/vdev.md, "Mounting and the daemon"): how many partitions the GPU is split
into (`--partitions`), who may open the device nodes (`--mode`, `--render-mode`,
`--group`), the object limits (`--max-bos`, `--max-bos-per-file`, ...,
kmd/limits.py) and the scheduling (`--no-preempt`, `--timeslice-ms`, `--heartbeat-ms`,
`--heartbeat-misses`, kmd.sched.SchedOptions) and the hardware models
(`--cache-model`, docs/cache.md). `vgpu mount` passes what it was given
on to the daemon (`device_argv`). Light: no FUSE, no trio.
"""
from __future__ import annotations

import argparse
import grp
from dataclasses import dataclass

from kmd import partition
from kmd.limits import KINDS, Limits
from kmd.sched import SchedOptions

# udev's rules on Linux: card0 is root:video 0660, renderD128 0666 here (Debian makes
# it root:render 0660 plus a uaccess ACL; vgpu has no seat to grant it to).
DEFAULT_CARD_MODE = 0o660
DEFAULT_RENDER_MODE = 0o666
DEFAULT_GROUP = "video"
# The ioctl thread's poll before it sleeps (pyfuse3.main(ioctl_poll_us=...)): long
# enough for a client's next request after a reply, short against a CPU's time
# (docs/ioctl.md, "Polling before the read").
DEFAULT_POLL_US = 50


@dataclass
class NodePermissions:
    """Mode and group of dev/dri/card0 and renderD128 (their owner is the daemon's uid)."""

    card_mode: int = DEFAULT_CARD_MODE
    render_mode: int = DEFAULT_RENDER_MODE
    gid: int = 0


def octal_mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {text!r} (example: 0660)") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"mode {text} is not within 0000..0777")
    return mode


def group_id(text: str) -> int:
    """A group name or number -> gid (ValueError if there is no such group)."""
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise ValueError(f"no group named {text!r} (give a name from /etc/group or a number)") from None


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def partition_count(text: str) -> int:
    """--partitions N: a count the GPU can be split into (kmd/partition.py)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if count not in partition.supported_counts():
        try:
            partition.split(count, 1 << 30, 1 << 30)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return count


def add_device_options(p: argparse.ArgumentParser) -> None:
    gpu = p.add_argument_group("partitions (docs/kmd.md, \"Partitions\")")
    gpu.add_argument("--partitions", type=partition_count, default=1, metavar="N",
                     help="split the GPU into N isolated devices, card0..N-1 and renderD128.., each "
                          "with its share of compute units, SDMA engines, VRAM and GTT (default 1; "
                          f"the GPU takes {', '.join(map(str, partition.supported_counts()))})")
    nodes = p.add_argument_group("device nodes (docs/vdev.md)")
    nodes.add_argument("--mode", type=octal_mode, default=DEFAULT_CARD_MODE, metavar="MODE",
                       help="mode of dev/dri/card0 (default 0660)")
    nodes.add_argument("--render-mode", type=octal_mode, default=DEFAULT_RENDER_MODE, metavar="MODE",
                       help="mode of dev/dri/renderD128 (default 0666)")
    nodes.add_argument("--group", default=DEFAULT_GROUP, metavar="GROUP",
                       help="group of both nodes, a name or a number (default video; "
                            "root if there is no group video)")
    hardware = p.add_argument_group("hardware models")
    hardware.add_argument("--cache-model", action="store_true",
                          help="give the compute engines a write-back L2 cache that RELEASE_MEM / "
                               "ACQUIRE_MEM must write back and invalidate (docs/cache.md; off by default)")
    limits = p.add_argument_group("object limits (docs/kmd.md, \"Limits\")")
    defaults = Limits()
    for name in Limits.names():
        kind = KINDS[name.removesuffix("_per_file")]
        scope = "per DRM file" if name.endswith("_per_file") else "per device"
        limits.add_argument(Limits.option(name), dest=name, type=_count, default=None, metavar="N",
                            help=f"{kind.what} {scope} (default {getattr(defaults, name)})")


    transport = p.add_argument_group("ioctl transport (docs/ioctl.md)")
    transport.add_argument("--poll-us", type=_poll_us, default=DEFAULT_POLL_US, metavar="US",
                           help="how long the ioctl thread polls /dev/fuse before it sleeps, 0: "
                                f"never (default {DEFAULT_POLL_US})")

    sched = p.add_argument_group("scheduling (docs/preemption.md)")
    d = SchedOptions()
    sched.add_argument("--no-preempt", action="store_true",
                       help="no mid-job preemption and no time slicing: jobs switch at job boundaries only")
    sched.add_argument("--timeslice-ms", type=_milliseconds, default=None, metavar="MS",
                       help=f"time slice of entities of one priority on a ring, 0: none "
                            f"(default {d.timeslice * 1e3:g})")
    sched.add_argument("--heartbeat-ms", type=_milliseconds, default=None, metavar="MS",
                       help=f"interval of the engine heartbeat's pulses, 0: off (default {d.heartbeat * 1e3:g})")
    sched.add_argument("--heartbeat-misses", type=_count, default=None, metavar="N",
                       help=f"missed pulses after which an engine is declared hung and reset "
                            f"(default {d.heartbeat_misses})")


def _poll_us(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of microseconds: {text!r}") from None
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"{text} µs is out of range (0 to 100000)")
    return value


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if not 0 <= value < 1e9:
        raise argparse.ArgumentTypeError(f"{text} ms is out of range")
    return value


def sched_from(args) -> SchedOptions:
    """The scheduling options given (ValueError: --heartbeat-misses 0)."""
    given = {}
    if getattr(args, "no_preempt", False):
        given["preempt"] = False
    if getattr(args, "timeslice_ms", None) is not None:
        given["timeslice"] = args.timeslice_ms / 1e3
    if getattr(args, "heartbeat_ms", None) is not None:
        given["heartbeat"] = args.heartbeat_ms / 1e3
    if getattr(args, "heartbeat_misses", None) is not None:
        given["heartbeat_misses"] = args.heartbeat_misses
    return SchedOptions(**given)


def limits_from(args) -> Limits:
    given = {n: getattr(args, n) for n in Limits.names() if getattr(args, n, None) is not None}
    return Limits(**given)


def permissions_from(args) -> NodePermissions:
    """Raises ValueError for a group that does not exist (the default, video, falls
    back to gid 0 where there is none)."""
    try:
        gid = group_id(args.group)
    except ValueError:
        if args.group != DEFAULT_GROUP:
            raise
        gid = 0
    return NodePermissions(args.mode, args.render_mode, gid)


def device_argv(args) -> list[str]:
    """The options of `args` to pass on to the daemon, the ones that differ from
    their defaults."""
    argv = []
    if args.partitions != 1:
        argv += ["--partitions", str(args.partitions)]
    if args.mode != DEFAULT_CARD_MODE:
        argv += ["--mode", f"{args.mode:04o}"]
    if args.render_mode != DEFAULT_RENDER_MODE:
        argv += ["--render-mode", f"{args.render_mode:04o}"]
    if args.group != DEFAULT_GROUP:
        argv += ["--group", args.group]
    if getattr(args, "cache_model", False):
        argv.append("--cache-model")
    if getattr(args, "poll_us", DEFAULT_POLL_US) != DEFAULT_POLL_US:
        argv += ["--poll-us", str(args.poll_us)]
    for name in Limits.names():
        value = getattr(args, name, None)
        if value is not None:
            argv += [Limits.option(name), str(value)]
    if getattr(args, "no_preempt", False):
        argv.append("--no-preempt")
    for opt in ("timeslice_ms", "heartbeat_ms", "heartbeat_misses"):
        if getattr(args, opt, None) is not None:
            argv += ["--" + opt.replace("_", "-"), f"{getattr(args, opt):g}"]
    return argv
