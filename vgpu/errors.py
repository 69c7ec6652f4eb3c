"""How a user's mistake ends, the same for every entry point (docs/errors.md): the
`vgpu` command, the samples, a program on umd. One line on stderr says what is
wrong and what to do, and the exit status is non-zero; a traceback is for a bug,
and ``VGPU_DEBUG=1`` shows it for everything (so does ``traceback`` or ``all`` in
VGPU_DEBUG's comma list, beside umd's switches: ``VGPU_DEBUG=api,traceback``).

A mistake is a :class:`UserError` (a layer above raises its own subclass: umd's
``UMDError``), or an ``OSError``: a file named wrongly, a permission, a dead mount,
an errno from the device (libvgpu's ``VgpuError`` is one). Those are what Unix tools
report in one line; anything else is a bug and keeps its traceback. Ctrl-C ends
with status 130 and a closed pipe (``| head -1``) quietly, as Unix tools do.

Here because every layer may import the contract and no other (docs/architecture.md).
"""
from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

#: What a file of a FUSE mount answers once its daemon is gone: ENOTCONN, or
#: ECONNABORTED for the requests in flight when it died (docs/vdev.md).
DEAD_MOUNT_ERRNOS = (errno.ENOTCONN, errno.ECONNABORTED)

#: Exit statuses: the shell's 128 + the signal's number.
INTERRUPTED = 128 + 2      # SIGINT
BROKEN_PIPE = 128 + 13     # SIGPIPE


class UserError(Exception):
    """A mistake the user can fix; the message says what is wrong and what to do.
    ``status`` is the exit status it ends a command with."""

    status = 1
    #: False for a message that begins with its own place (``file:line: ...``).
    prefixed = True

    def __init__(self, *args, status: int | None = None):
        super().__init__(*args)
        if status is not None:
            self.status = status


#: The names in VGPU_DEBUG that turn tracebacks on (umd/debug.py knows them too).
TRACEBACK_NAMES = ("1", "traceback", "all")


def debug_tracebacks() -> bool:
    """True when ``VGPU_DEBUG`` asks for tracebacks (:data:`TRACEBACK_NAMES`)."""
    names = {n.strip().lower() for n in os.environ.get("VGPU_DEBUG", "").split(",")}
    return any(n in names for n in TRACEBACK_NAMES)


def _mount_of(path: str) -> str | None:
    """The mount point above ``path`` (the vgpu mount a file of it names), if any."""
    try:
        with open("/proc/self/mountinfo") as f:
            points = {line.split()[4].encode().decode("unicode_escape") for line in f}
    except OSError:
        return None
    p = Path(os.path.abspath(path))
    for d in (p, *p.parents):
        if str(d) in points and str(d) != "/":
            return str(d)
    return None


def dead_mount_hint(mount: str) -> str:
    return (f"the vgpu mount at {mount} is dead (its daemon exited); "
            f"run `vgpu umount {mount}`, then `vgpu mount {mount}`")


def _hint(exc: OSError, where: str) -> str:
    """What to do about ``exc``, the errno's part of the one line ('' if nothing)."""
    if exc.errno in DEAD_MOUNT_ERRNOS:
        return dead_mount_hint(_mount_of(where) or where) if where else ""
    if exc.errno == errno.ENOENT and "/dev/dri/" in where:
        mount = where.split("/dev/dri/")[0] or "/"
        return f"no vgpu device at {mount}; mount one with `vgpu mount {mount}`"
    if exc.errno in (errno.EACCES, errno.EPERM) and where.endswith("/dev/dri/card0"):
        return ("card0 is 0660 root:video (the primary node is for root and the video group); "
                "use renderD128, or run as root")
    return ""


def describe(exc: BaseException) -> str | None:
    """The one line a user mistake ends with, or None for a bug (no one line will do)."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, OSError):
        # libvgpu's VgpuError has no filename: its strerror names the request, and
        # what to do when it can tell.
        where = os.fsdecode(exc.filename) if exc.filename is not None else ""
        line = f"{where}: {exc.strerror or exc}" if where else str(exc.strerror or exc)
        hint = _hint(exc, where)
        return f"{line}: {hint}" if hint else line
    return None


def report(prog: str, exc: BaseException) -> int | None:
    """Print the one line of a user mistake on stderr and return its exit status;
    None (nothing printed) for a bug, or when VGPU_DEBUG asks for tracebacks."""
    if debug_tracebacks():
        return None
    line = describe(exc)
    if line is None:
        return None
    prefixed = getattr(exc, "prefixed", True) and prog and not line.startswith(prog + ":")
    print(f"{prog}: {line}" if prefixed else line, file=sys.stderr)
    return getattr(exc, "status", 1)


def _quiet_broken_pipe() -> int:
    # stdout's reader is gone: send what is left of it nowhere, so that the flush at
    # exit raises nothing (Python's documented recipe, "Note on SIGPIPE").
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return BROKEN_PIPE


def run_main(main: Callable[[], int | None], prog: str) -> int:
    """Run an entry point's ``main``; its status, or the one error line and a
    non-zero status for a user mistake. A bug's exception goes on (its traceback)."""
    try:
        return main() or 0
    except KeyboardInterrupt:
        if debug_tracebacks():
            raise
        print(file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (UserError, OSError) as e:
        status = report(prog, e)
        if status is None:
            raise
        return status


def _script_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return name if name not in ("", "-c") else "python3"


def exit_main(main: Callable[[], int | None], prog: str | None = None) -> None:
    """``sys.exit(run_main(main, prog))``: the last line of a program's ``__main__``;
    ``prog`` defaults to the script's name."""
    sys.exit(run_main(main, prog or _script_name()))


def _excepthook(kind, exc, tb) -> None:
    if not isinstance(exc, UserError) or report(_script_name(), exc) is None:
        sys.__excepthook__(kind, exc, tb)


def install_excepthook() -> None:
    """For a program that is not run through :func:`run_main` (a user's script on
    umd): an uncaught :class:`UserError` ends with its one line instead of a
    traceback. Other exceptions, and a hook the program set itself, are left alone."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _excepthook
