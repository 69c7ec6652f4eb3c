"""Timeouts of the wait ioctls, with Linux's semantics (one place for both sides).

Every DRM/amdgpu wait takes an *absolute* CLOCK_MONOTONIC deadline in ns. Linux
reads that deadline in two ways, and vgpu keeps both because clients rely on them:

- amdgpu ioctls (WAIT_CS, WAIT_FENCES, GEM_WAIT_IDLE; the field is u64):
  ``amdgpu_gem_timeout()`` in amdgpu_gem.c: a value with the top bit set (libdrm's
  AMDGPU_TIMEOUT_INFINITE among them) waits forever, anything else is a deadline.
- DRM syncobj ioctls (SYNCOBJ_WAIT, SYNCOBJ_TIMELINE_WAIT; the field is s64):
  ``drm_timeout_abs_to_jiffies()`` in drm_syncobj.c: 0 polls, a deadline in the past
  (a negative value included) polls, a future one waits until then. libdrm's users
  pass INT64_MAX to mean "forever".

Clients turn a relative timeout into a deadline with :func:`deadline_ns` (libdrm's
amdgpu_cs_calculate_timeout); the KMD turns a deadline into seconds left with
:func:`amdgpu_seconds_left` or :func:`syncobj_seconds_left`.
"""
from __future__ import annotations

import time

#: Wait forever: libdrm's AMDGPU_TIMEOUT_INFINITE (amdgpu.h), all 64 bits set.
INFINITE = (1 << 64) - 1
#: The largest s64 deadline: "forever" for the syncobj ioctls (INT64_MAX).
S64_MAX = (1 << 63) - 1


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns: the clock of every deadline (and of the GPU timestamps)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def deadline_ns(relative_ns: int, forever: int = INFINITE) -> int:
    """libdrm's amdgpu_cs_calculate_timeout: now + ``relative_ns``, saturating;
    INFINITE (or anything that overflows) becomes ``forever`` (pass S64_MAX for the
    syncobj ioctls, whose field is signed)."""
    if relative_ns >= INFINITE:
        return forever
    return min(now_ns() + relative_ns, forever)


def amdgpu_seconds_left(deadline: int) -> float | None:
    """amdgpu_gem_timeout(): seconds until the u64 ``deadline``; None (forever) when
    its top bit is set; 0.0 when it has passed."""
    if deadline >= 1 << 63:
        return None
    return max(0.0, (deadline - now_ns()) / 1e9)


#: Seconds beyond which a syncobj deadline reads as forever (Linux clamps the wait
#: to MAX_SCHEDULE_TIMEOUT; Python's waits cannot take 2**63 ns).
_SYNCOBJ_FOREVER = 1e9


def syncobj_seconds_left(deadline: int) -> float | None:
    """drm_timeout_abs_to_jiffies(): seconds until the s64 ``deadline``; 0.0 for 0, a
    negative value or a time that has passed (then the wait only polls); None
    (forever) for a deadline decades away, INT64_MAX included. A value read from an
    unsigned field is taken as s64 first, as the kernel does."""
    if deadline >= 1 << 63:
        deadline -= 1 << 64
    if deadline <= 0:
        return 0.0
    left = max(0.0, (deadline - now_ns()) / 1e9)
    return None if left > _SYNCOBJ_FOREVER else left
