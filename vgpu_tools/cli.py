"""The ``vgpu`` console script: mount, umount, dmesg, info, trace, run, asm, smi (docs/design.md
section 8).

``vgpu mount MOUNT`` starts the daemon (``python3 -m vdev.daemon``) detached, with
its log and pid in ``/tmp/vgpu-<hash of MOUNT>.{log,pid}``, and returns once MOUNT
is a mount point. ``vgpu umount MOUNT`` unmounts and waits for that daemon to exit.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from vgpu.errors import DEAD_MOUNT_ERRNOS, UserError, dead_mount_hint, run_main
from vgpu.paths import mount_point

DEFAULT_MOUNT = "/tmp/vgpu"
# The repository root, so the detached daemon imports the same vdev/kmd as we do.
_ROOT = str(Path(__file__).resolve().parent.parent)
MOUNT_WAIT = 30.0      # seconds for a daemon to come up (imports, Cython core)
UMOUNT_WAIT = 5.0      # seconds for a daemon to exit after its unmount
FUSE_DEVICE = "/dev/fuse"
PAGE_SIZE = 4096       # VRAM and GTT are managed in pages (kmd/vram.py)


def default_mount() -> str:
    return os.environ.get("VGPU_MOUNT", DEFAULT_MOUNT)


def state_paths(mount: str) -> tuple[Path, Path]:
    """(log, pid) files of the daemon serving ``mount``."""
    tag = hashlib.sha1(os.path.realpath(mount).encode()).hexdigest()[:12]
    base = Path(os.environ.get("VGPU_STATE_DIR", "/tmp"))
    return base / f"vgpu-{tag}.log", base / f"vgpu-{tag}.pid"


def shm_dir_path(mount: str) -> Path:
    """The file that names the --shm-dir of the daemon serving ``mount`` (absent for
    the default): `vgpu umount` cleans a dead daemon's store there."""
    return state_paths(mount)[1].with_suffix(".shm")


def mount_state(mount: str) -> str:
    """'live', 'dead' (FUSE endpoint gone: ENOTCONN) or 'none'."""
    try:
        # statfs always asks the file system (stat may answer from cached attributes).
        os.statvfs(mount)
    except OSError as e:
        if e.errno in DEAD_MOUNT_ERRNOS:
            return "dead"
        if e.errno == errno.ENOENT:
            return "none"
        raise
    return "live" if _in_mountinfo(mount) or os.path.ismount(mount) else "none"


def _in_mountinfo(mount: str) -> bool:
    target = os.path.realpath(mount)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == target:
                    return True
    except OSError:
        pass
    return False


def _lazy_unmount(mount: str) -> None:
    subprocess.run(["fusermount3", "-u", "-z", mount], stderr=subprocess.DEVNULL)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone: nobody may reap it here)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _is_daemon(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"vdev.daemon" in f.read()
    except OSError:
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def daemon_argv(args) -> list[str]:
    from vdev.options import device_argv
    argv = [sys.executable, "-m", "vdev.daemon", os.path.abspath(args.mount),
            "--vram", args.vram, "--gtt", args.gtt, "--timeout", str(args.timeout)]
    if args.shm_dir:
        argv += ["--shm-dir", args.shm_dir]
    if args.no_huge_pages:
        argv.append("--no-huge-pages")
    return argv + device_argv(args)


def _clean_stale_stores(shm_dir: str | None = None) -> None:
    """Remove the BO files of daemons that died without cleaning up (SIGKILL)."""
    from kmd.shmem import DEFAULT_BASE, clean_stale
    for path in clean_stale(shm_dir or os.environ.get("VGPU_SHM_DIR") or DEFAULT_BASE):
        print(f"vgpu: removed the BO files of a dead daemon ({path})", file=sys.stderr)


def check_mount_options(args) -> None:
    """Every `vgpu mount` option the daemon would refuse, checked before it starts;
    a UserError (status 2) names the option and what it takes."""
    if os.geteuid() != 0 and not os.access(FUSE_DEVICE, os.R_OK | os.W_OK):
        mode = _mode_of(FUSE_DEVICE)
        raise UserError(f"{FUSE_DEVICE}{mode} cannot be opened by uid {os.geteuid()}: a mount "
                        f"as non-root needs it read-write (as root: `chmod 0666 {FUSE_DEVICE}`), "
                        "or mount as root")
    try:
        from vdev.daemon import parse_size
    except ImportError as e:
        raise UserError(f"the daemon cannot start: {e}; install vgpu's Python dependencies "
                        f"(pyfuse3, trio: README.md) for {sys.executable}") from None
    for opt in ("vram", "gtt"):
        try:
            size = parse_size(getattr(args, opt))
        except ValueError as e:
            raise UserError(f"--{opt}: {e}", status=2) from None
        if size % PAGE_SIZE:
            raise UserError(f"--{opt} {getattr(args, opt)}: the {opt.upper()} size must be a whole "
                            f"number of 4 KiB pages (examples: 64M, 1G)", status=2)
    if args.partitions != 1:
        from kmd import partition
        try:
            partition.split(args.partitions, parse_size(args.vram), parse_size(args.gtt))
        except ValueError as e:
            raise UserError(f"{e}: give a larger --vram/--gtt or fewer --partitions", status=2) from None
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        # 0 cannot mean "off": the timeout is the only end of a job that never ends.
        raise UserError(f"--timeout {args.timeout:g}: the ring job timeout must be more than 0 "
                        "seconds (a job that runs long needs a large one, e.g. --timeout 600)", status=2)
    if args.heartbeat_misses is not None and args.heartbeat_misses < 1:
        raise UserError(f"--heartbeat-misses {args.heartbeat_misses}: must be at least 1 (the missed "
                        "pulses before an engine is reset); --heartbeat-ms 0 turns the heartbeat off", status=2)
    from vdev.options import permissions_from, sched_from
    try:
        permissions_from(args)
    except ValueError as e:
        raise UserError(f"--group: {e}", status=2) from None
    try:
        sched_from(args)
    except ValueError as e:
        raise UserError(f"scheduling options: {e}", status=2) from None
    if args.shm_dir and not os.path.isdir(args.shm_dir):
        what = "is not a directory" if os.path.exists(args.shm_dir) else "does not exist"
        raise UserError(f"--shm-dir {args.shm_dir} {what}: create it (a tmpfs, e.g. under /dev/shm) "
                        "or leave --shm-dir out for /dev/shm", status=2)
    mount = os.path.abspath(args.mount)
    if os.path.exists(mount) and not os.path.isdir(mount):
        raise UserError(f"{mount} is not a directory: a mount point must be a directory "
                        "(name a new or an empty directory)", status=2)


def _mode_of(path: str) -> str:
    try:
        return f" (mode {os.stat(path).st_mode & 0o7777:04o})"
    except OSError:
        return " (missing)"


def cmd_mount(args) -> int:
    mount = os.path.abspath(args.mount)
    check_mount_options(args)
    state = mount_state(mount)
    if state == "dead":
        print(f"vgpu mount: {mount}: stale mount (transport endpoint is not connected), "
              "unmounting it first", file=sys.stderr)
        _lazy_unmount(mount)
    elif state == "live":
        print(f"vgpu mount: {mount} is already mounted; run `vgpu umount {mount}` first",
              file=sys.stderr)
        return 1
    os.makedirs(mount, exist_ok=True)
    _clean_stale_stores(args.shm_dir)

    if args.foreground:
        from vdev.daemon import main as daemon_main
        return daemon_main(daemon_argv(args)[3:])

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))

    log_path, pid_path = state_paths(mount)
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(daemon_argv(args), env=env, stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=logf, start_new_session=True, cwd="/")
    pid_path.write_text(f"{proc.pid}\n")
    if args.shm_dir:
        shm_dir_path(mount).write_text(os.path.abspath(args.shm_dir) + "\n")
    else:
        shm_dir_path(mount).unlink(missing_ok=True)
    try:
        deadline = time.monotonic() + MOUNT_WAIT
        while not _in_mountinfo(mount):
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.kill()
                print(f"vgpu mount: the daemon failed to mount {mount} "
                      f"(exit status {proc.poll()}); log {log_path}:\n{_tail(log_path)}", file=sys.stderr)
                pid_path.unlink(missing_ok=True)
                return 1
            time.sleep(0.02)
    except KeyboardInterrupt:
        # The daemon is in a session of its own (Ctrl-C does not reach it): stop it,
        # so that an interrupted mount leaves nothing mounted.
        _stop_daemon(proc, mount)
        pid_path.unlink(missing_ok=True)
        raise UserError(f"interrupted; nothing is mounted at {mount}", status=130) from None
    if not os.path.ismount(mount):  # a real stat through FUSE: the daemon answers
        print(f"vgpu mount: {mount} does not answer; log {log_path}:\n{_tail(log_path)}",
              file=sys.stderr)
        return 1
    print(f"vgpu mounted at {mount} (daemon pid {proc.pid}, log {log_path})")
    return 0


def _stop_daemon(proc: subprocess.Popen, mount: str) -> None:
    """Stop a daemon that is still coming up, and undo its mount if it got that far."""
    for stop in (proc.terminate, proc.kill):
        stop()
        try:
            proc.wait(UMOUNT_WAIT)
            break
        except subprocess.TimeoutExpired:
            pass
    if _in_mountinfo(mount):
        _lazy_unmount(mount)


def _mount_owner(mount: str) -> int | None:
    """The uid that mounted the FUSE file system at ``mount`` (its user_id= option)."""
    target = os.path.realpath(mount)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if fields[4].encode().decode("unicode_escape") == target:
                    for opt in fields[-1].split(","):
                        if opt.startswith("user_id="):
                            return int(opt[len("user_id="):])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cmd_umount(args) -> int:
    mount = os.path.abspath(args.mount)
    log_path, pid_path = state_paths(mount)
    state = mount_state(mount)
    owner = _mount_owner(mount) if state != "none" else None
    if owner is not None and os.geteuid() not in (0, owner):
        who = "root" if owner == 0 else f"uid {owner}"
        raise UserError(f"{mount} was mounted by {who}; only {who} can unmount it "
                        f"(run `vgpu umount {mount}` as {who})")
    status = 0
    if state == "none":
        print(f"vgpu umount: {mount} is not mounted", file=sys.stderr)
        status = 1
    elif subprocess.run(["fusermount3", "-u", mount]).returncode != 0:
        print(f"vgpu umount: {mount} busy or dead, detaching it lazily", file=sys.stderr)
        _lazy_unmount(mount)
    try:
        shm_dir = shm_dir_path(mount).read_text().strip() or None
    except OSError:
        shm_dir = None
    try:
        pid = int(pid_path.read_text())
    except (OSError, ValueError):
        _clean_stale_stores(shm_dir)
        return status
    if _is_daemon(pid):
        deadline = time.monotonic() + UMOUNT_WAIT
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not _alive(pid):
                break
            try:
                os.kill(pid, sig)
            except PermissionError:
                raise UserError(f"the daemon of {mount} (pid {pid}) is not yours to stop; "
                                "run `vgpu umount` as its owner") from None
            deadline = time.monotonic() + UMOUNT_WAIT
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    pid_path.unlink(missing_ok=True)
    if shm_dir is not None:
        _clean_stale_stores(shm_dir)
        shm_dir_path(mount).unlink(missing_ok=True)
    _clean_stale_stores()
    return status


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def require_mount(path: str, want: str) -> str:
    """The mount point of the vgpu named by ``path`` (a mount point or a node under
    it), which must be live and hold ``want`` (a path under it); else a UserError
    saying how to get one."""
    mount = os.path.abspath(mount_point(path))
    state = mount_state(mount)
    if state == "dead":
        raise UserError(dead_mount_hint(mount))
    if state == "none" or not os.path.exists(os.path.join(mount, want)):
        if state == "none":
            why = "nothing is mounted there" if os.path.isdir(mount) else "no such directory"
        else:
            why = f"it is mounted but is not a vgpu device (no {want})"
        raise UserError(f"no vgpu at {mount} ({why}): start one with `vgpu mount {mount}`, "
                        "or name another with --mount MOUNT or $VGPU_MOUNT")
    return mount


MOUNT_HELP = "the vgpu mount point, or a device node under it (default $VGPU_MOUNT, then /tmp/vgpu)"


def cmd_dmesg(args) -> int:
    kmsg = os.path.join(require_mount(args.mount, "dev/kmsg"), "dev", "kmsg")
    text = _read(kmsg)
    sys.stdout.write(text)
    sys.stdout.flush()
    if not args.follow:
        return 0
    last = text.splitlines()[-1] if text else None
    try:
        while True:
            time.sleep(0.25)
            try:
                lines = _read(kmsg).splitlines()
            except OSError:
                return 0  # unmounted
            # Print what follows the last line seen (the log is a bounded ring).
            start = 0
            if last is not None and last in lines:
                start = len(lines) - lines[::-1].index(last)
            if lines[start:]:
                sys.stdout.write("".join(line + "\n" for line in lines[start:]))
                sys.stdout.flush()
                last = lines[-1]
    except KeyboardInterrupt:
        return 0


def cmd_info(args) -> int:
    """The sysfs numbers of each device of the mount: card0's alone, or, on a mount
    with --partitions N, a line saying what each partition holds, then its numbers."""
    drm = os.path.join(require_mount(args.mount, "sys/class/drm"), "sys", "class", "drm")
    cards = sorted((n for n in os.listdir(drm) if n.startswith("card") and n[4:].isdigit()),
                   key=lambda n: int(n[4:]))
    devices = [(card, _device_values(os.path.join(drm, card, "device"))) for card in cards]
    for card, (values, partition) in devices:
        indent = ""
        if len(devices) > 1:
            print(f"{card}: {_partition_line(partition)}")
            indent = "    "
        for name, value in values.items():
            if name.startswith("mem_info_") and value.isdigit():
                value = f"{value} ({int(value) / (1 << 20):.1f} MiB)"
            if "\n" in value:
                value = value.replace("\n", f"\n{indent}    ")
                print(f"{indent}{name}:\n{indent}    {value}")
            else:
                print(f"{indent}{name}: {value}")
    return 0


#: The device directory's binary attributes (kmd/sysfs.py's config, kmd/gpu_metrics.py).
BINARY_ATTRIBUTES = ("config", "gpu_metrics")


def _device_values(sysfs: str) -> tuple[dict[str, str], dict[str, str]]:
    """A device directory's text attributes (not the drm/ directory, the subsystem
    and driver links, or the binary PCI config space and SMU gpu_metrics), and its
    vgpu_partition/ files."""
    names = sorted(n for n in os.listdir(sysfs) if n not in BINARY_ATTRIBUTES
                   and os.path.isfile(os.path.join(sysfs, n)) and not os.path.islink(os.path.join(sysfs, n))
                   and os.stat(os.path.join(sysfs, n)).st_mode & 0o444)   # not write-only ones (remove)
    part = os.path.join(sysfs, "vgpu_partition")
    partition = {n: _read(os.path.join(part, n)).strip() for n in os.listdir(part)} if os.path.isdir(part) else {}
    return {n: _read(os.path.join(sysfs, n)).strip() for n in names}, partition


def _partition_line(p: dict[str, str]) -> str:
    """'partition 1 of 2: compute units 1, SDMA engines sdma1, VRAM 32.0 MiB, GTT 64.0 MiB'."""
    if not p:
        return "(no partition information)"
    mib = {k: f"{int(p.get(k, 0)) / (1 << 20):.1f} MiB" for k in ("vram_size", "gtt_size")}
    return (f"partition {p.get('index')} of {p.get('count')}: compute units {p.get('compute_units')}, "
            f"SDMA engines {p.get('sdma_engines')}, VRAM {mib['vram_size']}, GTT {mib['gtt_size']}")


#: The preload library `make build` compiles from preload/vgpu_preload.c (docs/libdrm.md).
PRELOAD_LIBRARY = Path(_ROOT) / "preload" / "libvgpu_preload.so"


def cmd_run(args) -> int:
    """Run COMMAND with the preload library, so that its /dev/dri/renderD128 (and
    card0, and the sysfs files libdrm reads) lead to MOUNT; the exit status is
    COMMAND's (this process becomes COMMAND)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("vgpu run: no command given: vgpu run [--mount MOUNT] -- COMMAND [ARGS...]",
              file=sys.stderr)
        return 2
    mount = os.path.realpath(args.mount)
    state = mount_state(mount)
    if state == "dead":
        print(f"vgpu run: the vgpu mount at {mount} is dead (its daemon exited); "
              f"run `vgpu umount {mount}`, then `vgpu mount {mount}`", file=sys.stderr)
        return 1
    if state != "live":
        print(f"vgpu run: nothing is mounted at {mount}; start a device with `vgpu mount {mount}`, "
              "or name another with --mount MOUNT or $VGPU_MOUNT", file=sys.stderr)
        return 1
    if not os.path.exists(os.path.join(mount, "dev", "dri", "renderD128")):
        print(f"vgpu run: {mount} is mounted but is not a vgpu device (no dev/dri/renderD128)",
              file=sys.stderr)
        return 1
    if not PRELOAD_LIBRARY.is_file():
        print(f"vgpu run: the preload library {PRELOAD_LIBRARY} is not built; run `make build`",
              file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["VGPU_MOUNT"] = mount
    env["LD_PRELOAD"] = ":".join(filter(None, [str(PRELOAD_LIBRARY), env.get("LD_PRELOAD")]))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"vgpu run: {command[0]}: {e.strerror}", file=sys.stderr)
        return 127 if e.errno == errno.ENOENT else 126


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake in one line (the usage is one --help away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="vgpu", description="A DRM-style virtual GPU through FUSE")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("mount", help="mount the virtual GPU")
    m.add_argument("mount", metavar="MOUNT")
    m.add_argument("--vram", default="512M", help="VRAM size (default 512M)")
    m.add_argument("--gtt", default="1G", help="GTT size (default 1G)")
    m.add_argument("--timeout", type=float, default=2.0,
                   help="ring job timeout in seconds, more than 0 (default 2; docs/errors.md)")
    m.add_argument("--shm-dir", default=None,
                   help="tmpfs that holds the BO files (default /dev/shm, or $VGPU_SHM_DIR)")
    m.add_argument("--no-huge-pages", action="store_true",
                   help="keep BO files in 4 KiB pages (by default root mounts a private "
                        "huge-page tmpfs for them, docs/memory.md)")
    m.add_argument("--foreground", "-f", action="store_true", help="serve in this process")
    from vdev.options import add_device_options   # --mode, --group, --max-bos, ...
    add_device_options(m)
    m.set_defaults(func=cmd_mount)

    u = sub.add_parser("umount", help="unmount and stop the daemon")
    u.add_argument("mount", metavar="MOUNT")
    u.set_defaults(func=cmd_umount)

    d = sub.add_parser("dmesg", help="print the KMD log (MOUNT/dev/kmsg)")
    d.add_argument("-w", "--follow", action="store_true", help="wait for new lines")
    d.add_argument("--mount", default=default_mount(), help=MOUNT_HELP)
    d.set_defaults(func=cmd_dmesg)

    i = sub.add_parser("info", help="print device numbers from sysfs")
    i.add_argument("--mount", default=default_mount(), help=MOUNT_HELP)
    i.set_defaults(func=cmd_info)

    from vgpu_tools.trace import add_parser as add_trace_parser   # trace [-p PID | -- CMD] (docs/trace.md)
    add_trace_parser(sub, DEFAULT_MOUNT)

    r = sub.add_parser("run", help="run a libdrm program on the mount (LD_PRELOAD)",
                       description="Run COMMAND with the preload library, so that an unmodified "
                                   "libdrm program's /dev/dri/renderD128, card0 and DRM sysfs "
                                   "files lead to MOUNT. Exit status: COMMAND's. "
                                   "See docs/libdrm.md.")
    r.add_argument("--mount", default=default_mount(),
                   help="the vgpu mount (default $VGPU_MOUNT, then /tmp/vgpu)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS]")
    r.set_defaults(func=cmd_run)

    from vgpu_tools.timeline import add_parser as add_timeline_parser
    add_timeline_parser(sub, default_mount())

    from vgpu_tools.asm_cli import add_parsers as add_asm_parsers   # asm, disasm
    add_asm_parsers(sub)
    from vgpu_tools.smi import add_parsers as add_smi_parsers       # smi, smi dmon
    add_smi_parsers(sub, default_mount())
    return p


def main(argv: list[str] | None = None) -> int:
    """The `vgpu` command; a user's mistake ends in one line (vgpu.errors, docs/errors.md)."""
    args = build_parser().parse_args(argv)
    return run_main(lambda: args.func(args), f"vgpu {args.command}")


if __name__ == "__main__":
    sys.exit(main())
