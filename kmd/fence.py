"""Fences: one per job, numbered by a per-ring 64-bit sequence (amdgpu_fence.c), and
the one way the KMD waits on them.

A fence signals once, optionally carrying an error (a negative errno in Linux; a
positive errno here). Everything that reacts to a signal hangs a callback on the
fence, as dma_fence_add_callback does: the scheduler (a job's dependencies), chain
nodes (timeline points), the waits of the ioctls and sync-file polls. A blocked
ioctl is a PendingReply (kmd/ioctl.py) whose callbacks feed one wake-up: an Event
when a thread blocks (`block_until`), a trio event when vdev waits on its loop.
Nothing sleeps and polls.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable


class Fence:
    def __init__(self, ring_name: str, seq: int):
        self.ring_name = ring_name
        self.seq = seq
        self.error = 0
        self.signaled_at: float | None = None
        self._signaled = False
        self._callbacks: list = []
        self._cb_lock = threading.Lock()

    @property
    def signaled(self) -> bool:
        return self._signaled

    def signal(self, error: int = 0) -> None:
        """Signal once (later calls do nothing), with `error` if it has none yet, then
        run the callbacks in this thread, outside the fence's lock."""
        with self._cb_lock:
            if self._signaled:
                return
            self.error = self.error or error
            self.signaled_at = time.monotonic()
            self._signaled = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def add_callback(self, fn: Callable[["Fence"], object]) -> None:
        """Call `fn(fence)` once the fence signals (at once, in this thread, if it
        already has), like dma_fence_add_callback. Callbacks run in the signalling
        thread, possibly under the device lock: they must only hand work off."""
        with self._cb_lock:
            if not self._signaled:
                self._callbacks.append(fn)
                return
        fn(self)

    def remove_callback(self, fn) -> bool:
        """dma_fence_remove_callback: forget `fn` if it has not run. True if removed."""
        with self._cb_lock:
            for i, cb in enumerate(self._callbacks):
                if cb is fn:
                    del self._callbacks[i]
                    return True
        return False

    def wait(self, timeout: float | None) -> bool:
        """Block up to `timeout` seconds (None: forever). True once signaled."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return block_until(lambda: self._signaled, lambda wake: subscribe([self], wake), deadline)


def deadline(seconds_left: float | None) -> float | None:
    """The time.monotonic() deadline `seconds_left` from now (vgpu.timeout's
    amdgpu_seconds_left / syncobj_seconds_left); None stays None (forever)."""
    return None if seconds_left is None else time.monotonic() + seconds_left


def subscribe(fences: Iterable[Fence], wake: Callable[[], object]) -> Callable[[], None]:
    """Call `wake()` when any of `fences` signals (at once for one that has): a
    callback on each. Returns the function that removes them again."""
    hooked = list(fences)

    def on_signal(_fence) -> None:
        wake()

    for f in hooked:
        f.add_callback(on_signal)

    def cancel() -> None:
        for f in hooked:
            f.remove_callback(on_signal)

    return cancel


def block_until(ready: Callable[[], bool], subscribe_fn: Callable[[Callable[[], None]], Callable[[], None]],
                deadline: float | None) -> bool:
    """The blocking wait, for a caller that owns its thread: `subscribe_fn(wake)`
    arranges for `wake()` whenever `ready()` may have become true (fence callbacks)
    and returns its cancel function. Returns True once `ready()`, False when
    `deadline` (time.monotonic() seconds; None: never) passes first."""
    event = threading.Event()
    cancel = subscribe_fn(event.set)
    try:
        while True:
            event.clear()  # a wake-up from here on is seen by the wait below
            if ready():
                return True
            if deadline is None:
                event.wait()
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            event.wait(left)
    finally:
        cancel()
