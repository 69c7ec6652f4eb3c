"""The KMD log behind MOUNT/dev/kmsg: dmesg-style lines with a monotonic timestamp."""
import collections
import threading
import time

from vgpu.paths import PCI_SLOT

DEVICE_NAME = f"vgpu {PCI_SLOT}"  # the driver and the PCI device, as dev_info() prints them
# The longest line kept: a message past it is cut (with "..."), so the log's memory
# is bounded by max_lines x MAX_LINE whatever a client makes the KMD say.
MAX_LINE = 1024


class _Ring:
    """The lines of one log, shared by its per-device views."""

    def __init__(self, max_lines: int):
        self.lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.dropped = 0


class KernelLog:
    """Append-only, thread-safe, bounded log (a ring of `max_lines` lines, like the
    kernel's). Lines look like dmesg output: ``[   12.345678] vgpu ffff:01:00.0: <message>``."""

    def __init__(self, max_lines: int = 10000, device_name: str = DEVICE_NAME):
        self._ring = _Ring(max_lines)
        self.device_name = device_name

    def for_device(self, device_name: str) -> "KernelLog":
        """A log that writes into this one's lines under another device name (each
        partition of a GPU is its own PCI function, kmd/partition.py)."""
        view = KernelLog(0, device_name)
        view._ring = self._ring
        return view

    @property
    def dropped(self) -> int:
        return self._ring.dropped

    def log(self, message: str) -> str:
        ring = self._ring
        line = f"[{time.monotonic() - ring.t0:12.6f}] {self.device_name}: {message}"
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE - 3] + "..."
        with ring.lock:
            if len(ring.lines) == ring.lines.maxlen:
                ring.dropped += 1
            ring.lines.append(line)
        return line

    def lines(self) -> list[str]:
        with self._ring.lock:
            return list(self._ring.lines)

    def text(self) -> str:
        lines = self.lines()
        return "".join(line + "\n" for line in lines)
