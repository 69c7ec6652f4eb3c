"""Debug switches of the runtime: one flag enum, one table of names (Mesa/radv style).

``VGPU_DEBUG`` is a comma list of the names in :data:`DEBUG_OPTIONS` (``all`` turns
every one on); ``VGPU_LAUNCH_BLOCKING=1`` makes every kernel launch wait for the GPU.
Both are read once at import; :func:`configure` re-reads them (tests use it).
docs/umd.md has the table users read.
"""
from __future__ import annotations

import enum
import os
import sys


class DebugFlag(enum.IntFlag):
    SHADERS = 1 << 0   # dump the IR and disassembly of each compiled kernel
    API = 1 << 1       # trace runtime calls
    CMD = 1 << 2       # dump the IBs submitted
    MEM = 1 << 3       # pool events
    SYNC = 1 << 4      # fences and events
    CACHE = 1 << 5     # kernel caches (compiler disk cache, loaded code objects)


#: name -> (flag, what it prints): the one table (docs/umd.md copies it).
DEBUG_OPTIONS: dict[str, tuple[DebugFlag, str]] = {
    "shaders": (DebugFlag.SHADERS, "IR and disassembly of each compiled kernel"),
    "api": (DebugFlag.API, "each runtime call with its arguments"),
    "cmd": (DebugFlag.CMD, "each IB submitted: ring, dependencies, packets"),
    "mem": (DebugFlag.MEM, "pool events: alloc (hit/miss), free, new BO, empty_cache"),
    "sync": (DebugFlag.SYNC, "submissions' fences, waits, event record/sync"),
    "cache": (DebugFlag.CACHE, "kernel cache hits and misses, code-object uploads"),
}

ALL = DebugFlag(0)
for _flag, _ in DEBUG_OPTIONS.values():
    ALL |= _flag


def parse_debug(value: str) -> DebugFlag:
    """Flags of a comma list such as ``"api,mem"`` or ``"all"``. Unknown names are
    reported on stderr and ignored (as Mesa's parse_debug_string does)."""
    flags = DebugFlag(0)
    for name in filter(None, (part.strip().lower() for part in value.split(","))):
        if name == "all":
            flags |= ALL
        elif name in ("1", "traceback"):
            pass    # tracebacks for every error (vgpu/errors.py), no umd output
        elif name in DEBUG_OPTIONS:
            flags |= DEBUG_OPTIONS[name][0]
        else:
            print(f"vgpu: VGPU_DEBUG: unknown option {name!r} (known: "
                  f"{', '.join([*DEBUG_OPTIONS, 'all'])})", file=sys.stderr)
    return flags


FLAGS = DebugFlag(0)
LAUNCH_BLOCKING = False


def configure(debug: str | None = None, launch_blocking: str | None = None) -> None:
    """(Re)read the switches from the arguments or the environment."""
    global FLAGS, LAUNCH_BLOCKING
    FLAGS = parse_debug(os.environ.get("VGPU_DEBUG", "") if debug is None else debug)
    blocking = os.environ.get("VGPU_LAUNCH_BLOCKING", "") if launch_blocking is None else launch_blocking
    LAUNCH_BLOCKING = blocking.strip() not in ("", "0")


def enabled(flag: DebugFlag) -> bool:
    return bool(FLAGS & flag)


def log(flag: DebugFlag, msg: str) -> None:
    """Print ``vgpu[<name>] msg`` to stderr when ``flag`` is on."""
    if FLAGS & flag:
        print(f"vgpu[{flag.name.lower()}] {msg}", file=sys.stderr, flush=True)


configure()
