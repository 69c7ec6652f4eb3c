"""The compiler's two debug switches, `cache` and `shaders`: names of umd.debug's
table (VGPU_DEBUG, a comma list; docs/umd.md "Debug switches")."""
from __future__ import annotations

from umd import debug


def debug_enabled(name: str) -> bool:
    return debug.enabled(debug.DEBUG_OPTIONS[name][0])


def debug_log(name: str, msg: str) -> None:
    debug.log(debug.DEBUG_OPTIONS[name][0], msg)
