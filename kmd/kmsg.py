"""The KMD log behind MOUNT/dev/kmsg: dmesg-style lines with a monotonic timestamp."""
import collections
import threading
import time

DEVICE_NAME = "vgpu 0000:00:00.0"
# The longest line kept: a message past it is cut (with "..."), so the log's memory
# is bounded by max_lines x MAX_LINE whatever a client makes the KMD say.
MAX_LINE = 1024


class KernelLog:
    """Append-only, thread-safe, bounded log (a ring of `max_lines` lines, like the
    kernel's). Lines look like dmesg output: ``[   12.345678] vgpu 0000:00:00.0: <message>``."""

    def __init__(self, max_lines: int = 10000):
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._max = max_lines
        self.dropped = 0

    def log(self, message: str) -> str:
        line = f"[{time.monotonic() - self._t0:12.6f}] {DEVICE_NAME}: {message}"
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE - 3] + "..."
        with self._lock:
            if len(self._lines) == self._max:
                self.dropped += 1
            self._lines.append(line)
        return line

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def text(self) -> str:
        lines = self.lines()
        return "".join(line + "\n" for line in lines)
