"""What each DRM request's pointers point to, and where its out-data goes back.

The KMD's handlers take a request as its struct plus ``extra``: the data the struct's
pointers point to, laid out in field order ("flattening", docs/design.md section 3).
Over the frame protocol the client sends that layout itself; over a real ioctl the
daemon builds it from the caller's memory, as Linux's handlers do with
``copy_from_user``, and writes the reply's out-data back behind the output pointers
(``copy_to_user``). Both sides use this one description of the pointers:

- :func:`gather` reads the pointed-to data through ``read(address, size) -> bytes``
  (the daemon: process_vm_readv on the caller; a frame client: its own memory);
- :func:`scatter` writes the reply's out-data through ``write(address, data)``.

``read`` and ``write`` raise ``OSError(EFAULT)`` for memory they cannot reach; a NULL
pointer with a nonzero size is EFAULT here, before they are called. The layouts
are those of libdrm 2.4.114's structs (vgpu.uapi); a struct shorter than the KMD's
reads as zero-extended. Imports only :mod:`vgpu.uapi`.
"""
from __future__ import annotations

import ctypes
import errno
from typing import Callable

from . import uapi

Read = Callable[[int, int], bytes]
Write = Callable[[int, bytes], None]

#: The most pointed-to data one request may carry (bytes). Past it, E2BIG before
#: anything is read: a count of 2^32 handles must not make the daemon read 16 GiB.
MAX_POINTED = 16 << 20

#: The most chunks one CS may have: each is a read of the caller's memory, made by the
#: daemon's one ioctl thread while every other client waits (a million chunks took
#: 24 s). Linux has no cap (the cost stays in the caller's thread); real clients
#: send fewer than 16 (IBs, fence, dependencies, syncobjs, BO handles).
MAX_CS_CHUNKS = 256

_NR = uapi._IOC_NR
_CHUNK = uapi.drm_amdgpu_cs_chunk
_BO_LIST_IN = uapi.drm_amdgpu_bo_list_in


def _fault(what: str) -> OSError:
    return OSError(errno.EFAULT, f"bad pointer: {what}")


def _args(struct: type, arg: bytes):
    """The request's struct, zero-extended or cut to the KMD's size (drm_ioctl)."""
    size = ctypes.sizeof(struct)
    return struct.from_buffer_copy(bytes(arg[:size]).ljust(size, b"\0"))


class _Gather:
    """The extra of one request, appended piece by piece within MAX_POINTED."""

    def __init__(self, read: Read):
        self.read = read
        self.parts: list[bytes] = []
        self.size = 0

    def room(self, n: int) -> None:
        if self.size + n > MAX_POINTED:
            raise OSError(errno.E2BIG, f"request points to more than {MAX_POINTED} bytes")

    def put(self, data: bytes) -> None:
        self.room(len(data))
        self.parts.append(data)
        self.size += len(data)

    def user(self, ptr: int, n: int, what: str) -> bytes:
        """Append (and return) the ``n`` bytes at user address ``ptr``."""
        if n == 0:
            return b""
        if not ptr:
            raise _fault(f"{what} is NULL")
        self.room(n)
        data = self.read(ptr, n)
        self.put(data)
        return data


def _gather_cs(a, g: _Gather) -> None:
    """CS: ``in.chunks`` points to ``num_chunks`` u64 pointers, each to a chunk
    header whose ``chunk_data`` points to ``length_dw`` dwords. Flattened: each header
    followed by its data. A BO_HANDLES chunk's data is a drm_amdgpu_bo_list_in whose
    ``bo_info_ptr`` points to the entries: they follow it (padded to a dword) and its
    ``length_dw`` counts both (kmd/cs.py reads them there)."""
    n = a.in_.num_chunks
    if n > MAX_CS_CHUNKS:
        raise OSError(errno.EINVAL, f"CS with {n} chunks: at most {MAX_CS_CHUNKS}")
    g.room(8 * n)
    if n and not a.in_.chunks:
        raise _fault("CS chunks is NULL")
    table = g.read(a.in_.chunks, 8 * n) if n else b""
    for i in range(n):
        ptr = int.from_bytes(table[8 * i:8 * i + 8], "little")
        if not ptr:
            raise _fault(f"CS chunk {i} is NULL")
        h = _CHUNK.from_buffer_copy(g.read(ptr, ctypes.sizeof(_CHUNK)))
        size = 4 * h.length_dw
        if h.chunk_id != uapi.AMDGPU_CHUNK_ID_BO_HANDLES:
            g.put(bytes(h))
            g.user(h.chunk_data, size, f"CS chunk {i} data")
            continue
        if size and not h.chunk_data:
            raise _fault(f"CS chunk {i} data is NULL")
        head = g.read(h.chunk_data, min(size, ctypes.sizeof(_BO_LIST_IN))) if size else b""
        bl = _args(_BO_LIST_IN, head)
        entries = bl.bo_number * bl.bo_info_size
        padded = (entries + 3) & ~3
        g.room(ctypes.sizeof(_CHUNK) + ctypes.sizeof(bl) + padded)
        h.length_dw = (ctypes.sizeof(bl) + padded) // 4
        g.put(bytes(h))
        g.put(bytes(bl))
        g.user(bl.bo_info_ptr, entries, f"CS chunk {i} BO entries")
        g.put(bytes(padded - entries))


def _gather_syncobj_timeline(a, g: _Gather, nr: int) -> None:
    n = a.count_handles
    g.user(a.handles, 4 * n, "syncobj handles")
    if nr == _NR(uapi.DRM_IOCTL_SYNCOBJ_QUERY):
        g.room(8 * n)
        g.put(bytes(8 * n))   # QUERY's points are its output: zeros go in
    else:
        g.user(a.points, 8 * n, "syncobj points")


def _gather_syncobj_wait(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_syncobj_wait, arg)
    g.user(a.handles, 4 * a.count_handles, "syncobj handles")


def _gather_syncobj_array(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_syncobj_array, arg)
    g.user(a.handles, 4 * a.count_handles, "syncobj handles")


def _gather_bo_list(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_amdgpu_bo_list, arg).in_
    g.user(a.bo_info_ptr, a.bo_number * a.bo_info_size, "BO list entries")


def _gather_wait_fences(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_amdgpu_wait_fences, arg).in_
    g.user(a.fences, a.fence_count * ctypes.sizeof(uapi.drm_amdgpu_fence), "fences")


def _gather_userq(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_amdgpu_userq, arg).in_
    if a.op == uapi.AMDGPU_USERQ_OP_CREATE:
        g.user(a.mqd, a.mqd_size, "USERQ mqd")


def _gather_userq_signal(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_amdgpu_userq_signal, arg)
    g.user(a.syncobj_handles, 4 * a.num_syncobj_handles, "USERQ_SIGNAL syncobj handles")
    g.user(a.bo_read_handles, 4 * a.num_bo_read_handles, "USERQ_SIGNAL read BO handles")
    g.user(a.bo_write_handles, 4 * a.num_bo_write_handles, "USERQ_SIGNAL write BO handles")


def _gather_userq_wait(arg: bytes, g: _Gather) -> None:
    a = _args(uapi.drm_amdgpu_userq_wait, arg)
    g.user(a.syncobj_handles, 4 * a.num_syncobj_handles, "USERQ_WAIT syncobj handles")
    g.user(a.syncobj_timeline_handles, 4 * a.num_syncobj_timeline_handles, "USERQ_WAIT timeline handles")
    g.user(a.syncobj_timeline_points, 8 * a.num_syncobj_timeline_handles, "USERQ_WAIT timeline points")
    g.user(a.bo_read_handles, 4 * a.num_bo_read_handles, "USERQ_WAIT read BO handles")
    g.user(a.bo_write_handles, 4 * a.num_bo_write_handles, "USERQ_WAIT write BO handles")


_TIMELINE_WAIT_NR = _NR(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT)

#: ``_IOC_NR`` -> the gatherer of a request with pointers (one lookup for the others).
def _gather_info(arg: bytes, g: _Gather) -> None:
    """INFO reads nothing; amdgpu_info_ioctl refuses a NULL return_pointer with EINVAL
    (not the EFAULT of a copy to it) before the query is looked at."""
    a = _args(uapi.drm_amdgpu_info, arg)
    if a.return_size and not a.return_pointer:
        raise OSError(errno.EINVAL, "INFO with a NULL return_pointer")


_GATHER: dict[int, Callable[[bytes, _Gather], None]] = {
    _NR(uapi.DRM_IOCTL_AMDGPU_INFO): _gather_info,
    _NR(uapi.DRM_IOCTL_SYNCOBJ_WAIT): _gather_syncobj_wait,
    _NR(uapi.DRM_IOCTL_SYNCOBJ_RESET): _gather_syncobj_array,
    _NR(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL): _gather_syncobj_array,
    _TIMELINE_WAIT_NR: lambda arg, g: _gather_syncobj_timeline(
        _args(uapi.drm_syncobj_timeline_wait, arg), g, _TIMELINE_WAIT_NR),
    _NR(uapi.DRM_IOCTL_SYNCOBJ_QUERY): lambda arg, g: _gather_syncobj_timeline(
        _args(uapi.drm_syncobj_timeline_array, arg), g, _NR(uapi.DRM_IOCTL_SYNCOBJ_QUERY)),
    _NR(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL): lambda arg, g: _gather_syncobj_timeline(
        _args(uapi.drm_syncobj_timeline_array, arg), g, _NR(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL)),
    _NR(uapi.DRM_IOCTL_AMDGPU_BO_LIST): _gather_bo_list,
    _NR(uapi.DRM_IOCTL_AMDGPU_CS): lambda arg, g: _gather_cs(_args(uapi.drm_amdgpu_cs, arg), g),
    _NR(uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES): _gather_wait_fences,
    _NR(uapi.DRM_IOCTL_AMDGPU_USERQ): _gather_userq,
    _NR(uapi.DRM_IOCTL_AMDGPU_USERQ_SIGNAL): _gather_userq_signal,
    _NR(uapi.DRM_IOCTL_AMDGPU_USERQ_WAIT): _gather_userq_wait,
}


def gather(request: int, arg: bytes, read: Read) -> bytes:
    """The ``extra`` of ``request`` whose struct is ``arg``: what its pointers point
    to, read through ``read``. Empty for a request without pointers.
    OSError: EFAULT (a NULL or unreachable pointer), E2BIG (over MAX_POINTED),
    EINVAL (a CS of more than MAX_CS_CHUNKS chunks, an INFO without return_pointer)."""
    fn = _GATHER.get(_NR(request)) if uapi._IOC_TYPE(request) == uapi.DRM_IOCTL_BASE else None
    if fn is None:
        return b""
    g = _Gather(read)
    fn(arg, g)
    return b"".join(g.parts)


def _outputs_version(arg: bytes):
    v = _args(uapi.drm_version, arg)
    return [(v.name, v.name_len, "VERSION name"), (v.date, v.date_len, "VERSION date"),
            (v.desc, v.desc_len, "VERSION desc")]


def _outputs_query(arg: bytes):
    a = _args(uapi.drm_syncobj_timeline_array, arg)
    return [(a.points, 8 * a.count_handles, "syncobj points")]


def _outputs_info(arg: bytes):
    a = _args(uapi.drm_amdgpu_info, arg)
    return [(a.return_pointer, a.return_size, "INFO return_pointer")]


def _outputs_gem_op(arg: bytes):
    a = _args(uapi.drm_amdgpu_gem_op, arg)
    if a.op == uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO:
        return [(a.value, ctypes.sizeof(uapi.drm_amdgpu_gem_create_in), "GEM_OP value")]
    return []


def _outputs_userq_wait(arg: bytes):
    a = _args(uapi.drm_amdgpu_userq_wait, arg)
    return [(a.out_fences, 16 * a.num_fences, "USERQ_WAIT out_fences")]


_OUTPUTS: dict[int, Callable[[bytes], list]] = {
    _NR(uapi.DRM_IOCTL_VERSION): _outputs_version,
    _NR(uapi.DRM_IOCTL_SYNCOBJ_QUERY): _outputs_query,
    _NR(uapi.DRM_IOCTL_AMDGPU_INFO): _outputs_info,
    _NR(uapi.DRM_IOCTL_AMDGPU_GEM_OP): _outputs_gem_op,
    _NR(uapi.DRM_IOCTL_AMDGPU_USERQ_WAIT): _outputs_userq_wait,
}


def outputs(request: int, arg: bytes) -> list[tuple[int, int, str]]:
    """Where ``request``'s out-data goes: ``(address, size, what)`` in the order the
    reply's out-data holds it (VERSION's three strings, SYNCOBJ_QUERY's points, INFO's
    answer, GEM_OP GET_GEM_CREATE_INFO's struct); empty for the others."""
    fn = _OUTPUTS.get(_NR(request)) if uapi._IOC_TYPE(request) == uapi.DRM_IOCTL_BASE else None
    return fn(arg) if fn is not None else []


def reply_room(request: int, arg: bytes) -> int:
    """How many bytes of out-data ``request`` can take back (the sum of its outputs),
    at most MAX_POINTED: an INFO's return_size may be any u32, its answer is small."""
    return min(MAX_POINTED, sum(size for _, size, _ in outputs(request, arg)))


def scatter(request: int, arg: bytes, out: bytes, write: Write) -> None:
    """Write the reply's out-data ``out`` behind the output pointers of the request
    whose struct (as sent) is ``arg``: each output takes at most its size, in order,
    as many bytes as ``out`` has (VERSION: each string as long as the caller asked).
    OSError(EFAULT): a NULL or unwritable output pointer that has bytes to take."""
    if not out:
        return
    pos = 0
    for ptr, size, what in outputs(request, arg):
        n = max(0, min(size, len(out) - pos))
        if n and not ptr and what.startswith("VERSION"):
            pos += n   # drm_copy_field skips a NULL buffer: libdrm asks for lengths so
            continue
        if n:
            if not ptr:
                raise _fault(f"{what} is NULL")
            write(ptr, bytes(out[pos:pos + n]))
        pos += n
