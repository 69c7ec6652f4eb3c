"""The KMD log behind MOUNT/dev/kmsg: dmesg-style lines with a monotonic timestamp."""
import threading
import time

DEVICE_NAME = "vgpu 0000:00:00.0"


class KernelLog:
    """Append-only, thread-safe, bounded log. Lines look like dmesg output:
    ``[   12.345678] vgpu 0000:00:00.0: <message>``."""

    def __init__(self, max_lines: int = 10000):
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._max = max_lines
        self.dropped = 0

    def log(self, message: str) -> str:
        line = f"[{time.monotonic() - self._t0:12.6f}] {DEVICE_NAME}: {message}"
        with self._lock:
            self._lines.append(line)
            if len(self._lines) > self._max:  # a ring buffer like the kernel's
                drop = len(self._lines) - self._max
                del self._lines[:drop]
                self.dropped += drop
        return line

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def text(self) -> str:
        lines = self.lines()
        return "".join(line + "\n" for line in lines)
