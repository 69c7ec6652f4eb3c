"""The compiler's two debug switches, `cache` and `shaders` (VGPU_DEBUG, a comma list).

Goes through umd.debug (the runtime's one table of switches) when it exists; reads
VGPU_DEBUG directly otherwise, so the compiler works on its own (tests, tools).
"""
from __future__ import annotations

import os
import sys


def _runtime():
    try:
        from umd import debug
    except ImportError:
        return None
    return debug if hasattr(debug, "enabled") and hasattr(debug, "log") else None


def _flag(rt, name: str):
    """umd.debug's flag for a switch name (its table maps names to DebugFlag values)."""
    options = getattr(rt, "DEBUG_OPTIONS", None)
    return options[name][0] if options and name in options else name


def debug_enabled(flag: str) -> bool:
    rt = _runtime()
    if rt is not None:
        return rt.enabled(_flag(rt, flag))
    names = {n.strip() for n in os.environ.get("VGPU_DEBUG", "").split(",")}
    return flag in names or "all" in names


def debug_log(flag: str, msg: str) -> None:
    rt = _runtime()
    if rt is not None:
        rt.log(_flag(rt, flag), msg)
    elif debug_enabled(flag):
        print(f"vgpu[{flag}]: {msg}", file=sys.stderr, flush=True)
