"""memcpy (host->device, device->host, device->device) and memset, all on SDMA.

Host data goes through pinned GTT staging buffers of STAGING_CHUNK bytes, a few of
them in turn, so the CPU and the SDMA engine overlap:

- host->device: the CPU fills staging buffer k+1 while the SDMA copies chunk k
  (each chunk is submitted as soon as it is filled; a buffer is refilled once the
  copy that read it is done). The call returns when the source has been read, as
  cudaMemcpy from pageable memory does; the device copy runs in stream order.
- device->host: chunk k+1 is copied into staging while the CPU copies chunk k out;
  the call returns with the data.
- device->device and memset: COPY_LINEAR / CONSTANT_FILL packets batched in the
  stream's IB (no submission), 4 MiB per packet (the packet's count field).
"""
from __future__ import annotations

import numpy as np

from vgpu import sdma as S
from vgpu import uapi

from . import debug
from .debug import DebugFlag
from .memory import GpuBuffer
from .stream import current_stream

STAGING_CHUNK = 4 << 20
SMALL_STAGING = 64 << 10   # transfers up to this use small buffers: the KMD pushes a
                           # whole staging BO to the CPU after a device->host copy
STAGING_BUFFERS = 3
MAX_PACKET_BYTES = S.SDMA_COPY_COUNT_MASK + 1      # 4 MiB per COPY_LINEAR / CONSTANT_FILL


class StagingBuffer:
    def __init__(self, lv, size: int):
        self.buf = GpuBuffer(lv, size, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
        self.array = np.frombuffer(self.buf.cpu, np.uint8)
        self.va, self.bo = self.buf.address, self.buf.bo
        self.user = None            # (stream, mark) of the last command that used it

    def wait_idle(self) -> None:
        if self.user is not None:
            stream, mark = self.user
            stream.wait_mark(mark)
            self.user = None


class StagingPool:
    """The device's staging buffers, used round robin."""

    def __init__(self, device, size: int = STAGING_CHUNK):
        self.device, self.size = device, size
        self._bufs: list[StagingBuffer] = []
        self._next = 0

    def acquire(self) -> StagingBuffer:
        """The next staging buffer, once the work that last used it is done."""
        if len(self._bufs) < STAGING_BUFFERS:
            sb = StagingBuffer(self.device.lv, self.size)
            self._bufs.append(sb)
            debug.log(DebugFlag.MEM, f"staging buffer {len(self._bufs)}: {self.size} bytes GTT "
                                     f"at {sb.va:#x}")
        else:
            sb = self._bufs[self._next]
            self._next = (self._next + 1) % STAGING_BUFFERS
        sb.wait_idle()
        return sb

    def free(self) -> None:
        for sb in self._bufs:
            sb.array = None
            sb.buf.free()
        self._bufs.clear()


def _bo_at(device, ptr: int):
    block = device.pool.lookup(ptr)
    return block.buf.bo if block is not None else None


def _host_bytes(host) -> np.ndarray:
    """A flat uint8 view of a host buffer (numpy array, bytes, bytearray, memoryview)."""
    arr = np.asarray(host) if isinstance(host, np.ndarray) else np.frombuffer(host, np.uint8)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr.reshape(-1).view(np.uint8)


def memcpy_htod(dst: int, host, nbytes: int | None = None, stream=None) -> None:
    """Copy ``nbytes`` (default: all) of the host buffer ``host`` to device address ``dst``."""
    s = current_stream(stream)
    src = _host_bytes(host)
    n = src.nbytes if nbytes is None else nbytes
    if n > src.nbytes:
        raise ValueError(f"memcpy_htod: {n} bytes from a host buffer of {src.nbytes}")
    debug.log(DebugFlag.API, f"memcpy_htod(dst={dst:#x}, {n} bytes, stream={s.name})")
    staging = s.device.staging_for(n)
    dst_bo = _bo_at(s.device, dst)
    for off in range(0, n, staging.size):
        k = min(staging.size, n - off)
        sb = staging.acquire()
        sb.array[:k] = src[off:off + k]        # CPU fills this chunk while the SDMA copies the last
        mark = s.sdma(lambda ib, d=dst + off, v=sb.va, k=k: ib.copy_linear(d, v, k), 7,
                      f"COPY_LINEAR {k} bytes staging {sb.va:#x} -> {dst + off:#x}", [dst_bo])
        sb.user = (s, mark)
        s.flush()


def memcpy_dtoh(host, src: int, nbytes: int | None = None, stream=None):
    """Copy ``nbytes`` from device address ``src`` into the writable host buffer
    ``host`` (default size: all of it); waits for the stream's earlier work."""
    s = current_stream(stream)
    out = _host_bytes(host)
    if not out.flags.writeable:
        raise ValueError("memcpy_dtoh: the host buffer is read-only")
    n = out.nbytes if nbytes is None else nbytes
    if n > out.nbytes:
        raise ValueError(f"memcpy_dtoh: {n} bytes into a host buffer of {out.nbytes}")
    debug.log(DebugFlag.API, f"memcpy_dtoh(src={src:#x}, {n} bytes, stream={s.name})")
    staging = s.device.staging_for(n)
    src_bo = _bo_at(s.device, src)
    previous = None

    def drain(chunk):
        sb, off, k, mark = chunk
        s.wait_mark(mark)
        out[off:off + k] = sb.array[:k]
        sb.user = None

    for off in range(0, n, staging.size):
        k = min(staging.size, n - off)
        sb = staging.acquire()
        mark = s.sdma(lambda ib, d=sb.va, v=src + off, k=k: ib.copy_linear(d, v, k), 7,
                      f"COPY_LINEAR {k} bytes {src + off:#x} -> staging {sb.va:#x}", [src_bo, sb.bo])
        sb.user = (s, mark)
        s.flush()
        if previous is not None:
            drain(previous)                    # the SDMA copies this chunk meanwhile
        previous = (sb, off, k, mark)
    if previous is not None:
        drain(previous)
    return host


def memcpy_dtod(dst: int, src: int, nbytes: int, stream=None) -> None:
    """Device-to-device copy, queued on the stream."""
    s = current_stream(stream)
    debug.log(DebugFlag.API, f"memcpy_dtod(dst={dst:#x}, src={src:#x}, {nbytes} bytes, stream={s.name})")
    bos = [_bo_at(s.device, dst), _bo_at(s.device, src)]
    for off in range(0, nbytes, MAX_PACKET_BYTES):
        k = min(MAX_PACKET_BYTES, nbytes - off)
        s.sdma(lambda ib, d=dst + off, v=src + off, k=k: ib.copy_linear(d, v, k), 7,
               f"COPY_LINEAR {k} bytes {src + off:#x} -> {dst + off:#x}", bos)


def memset(dst: int, value: int, nbytes: int, stream=None) -> None:
    """Set ``nbytes`` bytes at ``dst`` to the byte ``value``, queued on the stream."""
    _fill(dst, value & 0xFF, nbytes, S.SDMA_FILLSIZE_BYTE, stream, "memset")


def memset_d32(dst: int, value: int, count: int, stream=None) -> None:
    """Set ``count`` dwords at ``dst`` to the 32-bit ``value`` (e.g. float bits)."""
    _fill(dst, value & 0xFFFFFFFF, 4 * count, S.SDMA_FILLSIZE_DWORD, stream, "memset_d32")


def _fill(dst: int, value: int, nbytes: int, fill_size: int, stream, what: str) -> None:
    s = current_stream(stream)
    debug.log(DebugFlag.API, f"{what}(dst={dst:#x}, {value:#x}, {nbytes} bytes, stream={s.name})")
    bos = [_bo_at(s.device, dst)]
    step = MAX_PACKET_BYTES if fill_size == S.SDMA_FILLSIZE_BYTE else MAX_PACKET_BYTES - 4
    for off in range(0, nbytes, step):
        k = min(step, nbytes - off)
        s.sdma(lambda ib, d=dst + off, k=k: ib.constant_fill(d, value, k, fill_size), 5,
               f"CONSTANT_FILL {k} bytes of {value:#x} at {dst + off:#x}", bos)
