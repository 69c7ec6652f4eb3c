"""memcpy (host->device, device->host, device->device) and memset.

Host copies are CPU copies. Every BO is shared memory that the CPU maps and the GPU
reads and writes in place (libvgpu/bo.py): a CPU write through the map is visible to
the GPU at once, a GPU write is visible to the CPU by the time its fence signals.
So ``memcpy_htod`` / ``memcpy_dtoh`` are one ``np.copyto`` between the host buffer
and a numpy view of the device block's map (made on the block's first host copy and
kept with it, umd/memory.py), with the ordering of CUDA's synchronous cudaMemcpy:

- both first wait for every command queued on the stream so far (including waits on
  other streams' events, ``Stream.wait_event``), then copy, then return. So
  ``memcpy_htod`` never overwrites data that earlier work in the stream still reads
  or writes, and ``memcpy_dtoh`` returns data that includes every earlier command.
  Later work queued on the stream sees the copied data (it is in memory before that
  work is submitted). Work on *other* streams is not waited for (order it with
  events), and the copy takes no place on the GPU timeline (events around it time
  nothing).
- the device range must lie inside one block of the device's pool (memory from
  ``umd.empty``, ``umd.to_device``...): another address is a :class:`UMDError` at the
  call, as is a range that runs past the end of its block.
- GPU errors of the earlier work are raised by the copy (the wait sees them).

Device-to-device copies and memset stay on the GPU: COPY_LINEAR / CONSTANT_FILL
packets batched in the stream's IB (no submission, no wait), or written into the
stream's DMA user queue (umd/userq_stream.py), 4 MiB per packet (the packet's count
field).
"""
from __future__ import annotations

import numpy as np

from vgpu import sdma as S

from . import debug
from .debug import DebugFlag
from .errors import UMDError
from .stream import current_stream
from .trace import traced

MAX_PACKET_BYTES = S.SDMA_COPY_COUNT_MASK + 1      # 4 MiB per COPY_LINEAR / CONSTANT_FILL


def _address(x, call: str, what: str) -> int:
    """A device address given as an int (``a.ptr``) or as the device array itself."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    ptr = getattr(x, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    raise UMDError(f"{call}: {what} must be a device address (an int such as a.ptr) or a device "
                   f"array, not {type(x).__name__}")


def _bo_at(device, ptr: int):
    block = device.pool.lookup(ptr)
    return block.buf.bo if block is not None else None


def _device_bytes(device, ptr: int, n: int, what: str) -> np.ndarray:
    """A uint8 view of the ``n`` bytes at device address ``ptr`` through the CPU map
    of the pool block that holds them."""
    block = device.pool.lookup(ptr)
    if block is None:
        raise UMDError(f"{what}: device address {ptr:#x} is not memory this process allocated with umd on "
                       f"{device.mount} (umd.empty, umd.to_device...); host copies go through the CPU map "
                       f"of such memory")
    off = ptr - block.ptr
    if off + n > block.size:
        raise UMDError(f"{what}: {n} bytes at {ptr:#x} run past the end of the allocation that holds it "
                       f"(a block of {block.size} bytes at {block.ptr:#x})")
    return block.buf.host_array()[off:off + n]


def _wait_queued(s) -> None:
    """Wait until every command queued on stream ``s`` so far is done (and the events
    it was told to wait for)."""
    s.wait_queued()


def _host_bytes(host) -> np.ndarray:
    """A flat uint8 view of a host buffer (numpy array, bytes, bytearray, memoryview)."""
    arr = np.asarray(host) if isinstance(host, np.ndarray) else np.frombuffer(host, np.uint8)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr.reshape(-1).view(np.uint8)


def _count(nbytes: int | None, have: int, what: str, side: str) -> int:
    n = have if nbytes is None else nbytes
    if n < 0 or n > have:
        raise ValueError(f"{what}: {n} bytes {side} a host buffer of {have}")
    return n


@traced("memcpy", "memcpy_htod", lambda dst, host, nbytes=None, stream=None: {"dst": hex(dst), "nbytes": nbytes if nbytes is not None else int(getattr(host, "nbytes", 0))})
def memcpy_htod(dst: int, host, nbytes: int | None = None, stream=None) -> None:
    """Copy ``nbytes`` (default: all) of the host buffer ``host`` to device address
    ``dst``, after the stream's earlier work; the data is in place on return."""
    s = current_stream(stream)
    dst = _address(dst, "memcpy_htod", "dst")
    src = _host_bytes(host)
    n = _count(nbytes, src.nbytes, "memcpy_htod", "from")
    debug.log(DebugFlag.API, f"memcpy_htod(dst={dst:#x}, {n} bytes, stream={s.name})")
    if n == 0:
        return
    view = _device_bytes(s.device, dst, n, "memcpy_htod")
    _wait_queued(s)
    np.copyto(view, src[:n])


@traced("memcpy", "memcpy_dtoh", lambda host, src, nbytes=None, stream=None: {"src": hex(src), "nbytes": nbytes if nbytes is not None else int(getattr(host, "nbytes", 0))})
def memcpy_dtoh(host, src: int, nbytes: int | None = None, stream=None):
    """Copy ``nbytes`` from device address ``src`` into the writable host buffer
    ``host`` (default size: all of it), after the stream's earlier work; returns ``host``."""
    s = current_stream(stream)
    src = _address(src, "memcpy_dtoh", "src")
    if isinstance(host, np.ndarray) and not host.flags.c_contiguous:
        raise ValueError("memcpy_dtoh: the host array is not C-contiguous")   # would fill a copy
    out = _host_bytes(host)
    if not out.flags.writeable:
        raise ValueError("memcpy_dtoh: the host buffer is read-only")
    n = _count(nbytes, out.nbytes, "memcpy_dtoh", "into")
    debug.log(DebugFlag.API, f"memcpy_dtoh(src={src:#x}, {n} bytes, stream={s.name})")
    if n == 0:
        return host
    view = _device_bytes(s.device, src, n, "memcpy_dtoh")
    _wait_queued(s)
    np.copyto(out[:n], view)
    return host


@traced("memcpy", "memcpy_dtod", lambda dst, src, nbytes, stream=None: {"dst": hex(getattr(dst, "ptr", dst)), "src": hex(getattr(src, "ptr", src)), "nbytes": nbytes})
def memcpy_dtod(dst: int, src: int, nbytes: int, stream=None) -> None:
    """Device-to-device copy, queued on the stream."""
    s = current_stream(stream)
    dst, src = _address(dst, "memcpy_dtod", "dst"), _address(src, "memcpy_dtod", "src")
    debug.log(DebugFlag.API, f"memcpy_dtod(dst={dst:#x}, src={src:#x}, {nbytes} bytes, stream={s.name})")
    bos = [_bo_at(s.device, dst), _bo_at(s.device, src)]
    for off in range(0, nbytes, MAX_PACKET_BYTES):
        k = min(MAX_PACKET_BYTES, nbytes - off)
        s.sdma(lambda ib, d=dst + off, v=src + off, k=k: ib.copy_linear(d, v, k), 7,
               f"COPY_LINEAR {k} bytes {src + off:#x} -> {dst + off:#x}", bos)


@traced("memcpy", "memset", lambda dst, value, nbytes, stream=None: {"dst": hex(dst), "value": value, "nbytes": nbytes})
def memset(dst: int, value: int, nbytes: int, stream=None) -> None:
    """Set ``nbytes`` bytes at ``dst`` to the byte ``value``, queued on the stream."""
    _fill(dst, value & 0xFF, nbytes, S.SDMA_FILLSIZE_BYTE, stream, "memset")


@traced("memcpy", "memset_d32", lambda dst, value, count, stream=None: {"dst": hex(dst), "value": value, "count": count})
def memset_d32(dst: int, value: int, count: int, stream=None) -> None:
    """Set ``count`` dwords at ``dst`` to the 32-bit ``value`` (e.g. float bits)."""
    _fill(dst, value & 0xFFFFFFFF, 4 * count, S.SDMA_FILLSIZE_DWORD, stream, "memset_d32")


def _fill(dst: int, value: int, nbytes: int, fill_size: int, stream, what: str) -> None:
    s = current_stream(stream)
    dst = _address(dst, what, "dst")
    debug.log(DebugFlag.API, f"{what}(dst={dst:#x}, {value:#x}, {nbytes} bytes, stream={s.name})")
    bos = [_bo_at(s.device, dst)]
    step = MAX_PACKET_BYTES if fill_size == S.SDMA_FILLSIZE_BYTE else MAX_PACKET_BYTES - 4
    for off in range(0, nbytes, step):
        k = min(step, nbytes - off)
        s.sdma(lambda ib, d=dst + off, k=k: ib.constant_fill(d, value, k, fill_size), 5,
               f"CONSTANT_FILL {k} bytes of {value:#x} at {dst + off:#x}", bos)
