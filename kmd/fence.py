"""Fences: one per job, numbered by a per-ring 64-bit sequence (amdgpu_fence.c).

A fence signals once, optionally carrying an error (a negative errno in Linux; a
positive errno here). Waiters block on a threading.Event, outside the device lock.
"""
import threading
import time

INFINITE = (1 << 64) - 1  # AMDGPU_TIMEOUT_INFINITE


class Fence:
    def __init__(self, ring_name: str, seq: int):
        self.ring_name = ring_name
        self.seq = seq
        self.error = 0
        self.signaled_at: float | None = None
        self._event = threading.Event()
        self._callbacks: list = []
        self._cb_lock = threading.Lock()

    @property
    def signaled(self) -> bool:
        return self._event.is_set()

    def signal(self, error: int = 0) -> None:
        with self._cb_lock:
            if self._event.is_set():
                return
            self.error = self.error or error
            self.signaled_at = time.monotonic()
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def add_callback(self, fn) -> None:
        """Call `fn(fence)` once the fence signals (at once if it already has), like
        dma_fence_add_callback. Callbacks run in the signalling thread: keep them short."""
        with self._cb_lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def wait(self, timeout: float | None) -> bool:
        """Block up to `timeout` seconds (None: forever). True once signaled."""
        return self._event.wait(timeout)


def abs_timeout_to_relative(timeout_ns: int) -> float | None:
    """amdgpu_gem_timeout(): DRM timeouts are absolute CLOCK_MONOTONIC nanoseconds;
    a value with the top bit set means wait forever. Returns seconds left (>= 0)."""
    if timeout_ns >= 1 << 63:
        return None
    return max(0.0, timeout_ns / 1e9 - time.monotonic())


def wait_any(fences: list, timeout: float | None, wait_all: bool) -> bool:
    """Wait until all (or any) of `fences` signal, or the timeout passes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if wait_all:
        for f in fences:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not f.wait(left):
                return False
        return True
    # Waiting on any of several events: a shared condition would be tighter, but
    # polling in short steps keeps Fence simple and is cheap at these rates.
    step = 0.0005
    while True:
        if any(f.signaled for f in fences):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(step)
        step = min(step * 2, 0.01)
