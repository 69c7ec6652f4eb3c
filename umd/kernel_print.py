"""The print buffers of kernels that call print() (docs/umd.md, "print in kernels").

A launch of a kernel with print() sites (CompiledKernel.prints) takes a buffer from its
device's PrintBuffers: a GTT BO with a CPU map holding PRINT_BUFFER_BYTES of records
(1 MiB, CUDA's default printf FIFO size) after the header of umd/compiler/prints.py.
The kernel gets its address as the hidden argument `__print_buf`; the stream gets a
hook that runs when the host sees the dispatch's fence signalled, at a
synchronisation point as CUDA prints at them (Stream.synchronize / umd.synchronize,
a blocking copy, Event.synchronize, a query that finds the kernel done, a launch with
numpy arrays, which copies them back). The hook writes the lines to sys.stdout in
the order the lanes reserved their records (unspecified between threads, as in
CUDA), reports dropped records on stderr, zeroes what was written and returns the
buffer to the pool.
"""
from __future__ import annotations

import struct
import sys

import numpy as np

from vgpu import uapi

from .compiler import prints
from .memory import GpuBuffer

# Record bytes per buffer (CUDA's cudaLimitPrintfFifoSize); read when a device makes
# its first print buffer.
PRINT_BUFFER_BYTES = 1 << 20


class PrintBuffers:
    """One device's print buffers: made on demand, reused once their kernel retired,
    freed with the device."""

    def __init__(self, lv) -> None:
        self.lv = lv
        self.nbytes = PRINT_BUFFER_BYTES
        self._all: list[GpuBuffer] = []
        self._free: list[GpuBuffer] = []

    def acquire(self) -> GpuBuffer:
        """A zeroed buffer whose header says `nbytes` of room."""
        if not self._free:
            buf = GpuBuffer(self.lv, prints.HEADER_BYTES + self.nbytes,
                            uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
            self._all.append(buf)
            buf.host_array()[:] = 0
            self._free.append(buf)
        buf = self._free.pop()
        struct.pack_into("<4I", buf.host_array(), 0, 0, 0, self.nbytes, 0)
        return buf

    def report(self, buf: GpuBuffer, compiled, out=None, err=None) -> None:
        """Print what `compiled`'s launch left in `buf` (its fence has signalled), then
        give the buffer back."""
        try:
            lines, dropped = prints.decode(compiled.prints, buf.host_array())
            out = out or sys.stdout
            if lines:
                out.write("".join(line + "\n" for line in lines))
                out.flush()
            if dropped:
                (err or sys.stderr).write(
                    f"umd: {compiled.name}: {dropped} print() line(s) dropped: the launch's print "
                    f"buffer ({self.nbytes} bytes) was full\n")
        finally:
            self.release(buf)

    def release(self, buf: GpuBuffer) -> None:
        """Zero what a launch wrote and put the buffer back."""
        raw = buf.host_array()
        reserved = int(np.frombuffer(raw[:4], np.uint32)[0])
        raw[:prints.HEADER_BYTES + min(reserved, self.nbytes)] = 0
        self._free.append(buf)

    def free(self) -> None:
        for buf in self._all:
            buf.free()
        self._all.clear()
        self._free.clear()
