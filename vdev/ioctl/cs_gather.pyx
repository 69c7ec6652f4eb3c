# cython: language_level=3
"""A CS's pointed-to data read from the caller in C: the common case of
vgpu.pointers.gather for DRM_IOCTL_AMDGPU_CS, in three system calls.

Why (docs/ioctl.md, "The CS gather in C"): a CS points to a table of chunk pointers,
each chunk header to its data: three dependent reads of the caller's memory. Through
vdev.ioctl.uaccess each is a ctypes call wrapped in Python (4 µs hot, three times
that after an idle gap), where process_vm_readv itself takes about 1 µs. Here the
table is one process_vm_readv, every header one more (an iovec each), and every
chunk's data a third, written straight into the bytes object returned.

Contract: ``gather_cs(pid, arg)`` returns exactly what ``vgpu.pointers.gather(
DRM_IOCTL_AMDGPU_CS, arg, UserMemory(pid).read)`` returns, or None, and then the
caller runs that Python reference, which gives the same answer or the errno and
reason of the refusal. None for everything but the plain case: no chunks or more
than MAX_CHUNKS, a NULL pointer anywhere, a BO_HANDLES chunk (its entries are a
fourth, dependent read), more than vgpu.pointers.MAX_POINTED bytes, a read that
fails or comes back short (EFAULT, EPERM, ESRCH: the reference says which). The
caller's memory may change between a declined read here and the reference's: the
reference's reading is then the one the request gets, as if it came a moment later.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy

from .uio cimport iovec, process_vm_readv

import ctypes

from vgpu import pointers, uapi

#: The most chunks read here (real clients send fewer than 16; more go the Python way).
DEF MAX_CHUNKS = 16
MAX = MAX_CHUNKS

#: The request this reads for: its _IOC_SIZE is the whole drm_amdgpu_cs.
CS = uapi.DRM_IOCTL_AMDGPU_CS
cdef size_t _CS_SIZE = uapi._IOC_SIZE(uapi.DRM_IOCTL_AMDGPU_CS)
# drm_amdgpu_cs_in's fields and drm_amdgpu_cs_chunk's, where vgpu.uapi puts them
cdef size_t _NUM_AT = uapi.drm_amdgpu_cs_in.num_chunks.offset
cdef size_t _CHUNKS_AT = uapi.drm_amdgpu_cs_in.chunks.offset
cdef size_t _ID_AT = uapi.drm_amdgpu_cs_chunk.chunk_id.offset
cdef size_t _LEN_AT = uapi.drm_amdgpu_cs_chunk.length_dw.offset
cdef size_t _DATA_AT = uapi.drm_amdgpu_cs_chunk.chunk_data.offset
cdef uint32_t _BO_HANDLES = uapi.AMDGPU_CHUNK_ID_BO_HANDLES
cdef uint64_t _MAX_POINTED = pointers.MAX_POINTED
# a chunk header is 16 bytes (the headers array below)
assert ctypes.sizeof(uapi.drm_amdgpu_cs_chunk) == 16


def gather_cs(int pid, const unsigned char[:] arg):
    """The flattened chunks of the CS whose struct is ``arg``, read from process
    ``pid``; None where the Python reference must answer (see the module's contract)."""
    cdef uint32_t n, length_dw, chunk_id
    cdef uint64_t table_ptr, total
    cdef uint64_t table[MAX_CHUNKS]
    cdef uint64_t data[MAX_CHUNKS]
    cdef uint64_t sizes[MAX_CHUNKS]
    cdef unsigned char headers[MAX_CHUNKS][16]
    cdef iovec local[MAX_CHUNKS]
    cdef iovec remote[MAX_CHUNKS]
    cdef size_t i, k, pos
    cdef ssize_t want
    cdef char *out
    if <size_t> arg.shape[0] != _CS_SIZE:
        return None
    memcpy(&n, &arg[_NUM_AT], 4)
    memcpy(&table_ptr, &arg[_CHUNKS_AT], 8)
    if n == 0 or n > MAX_CHUNKS or table_ptr == 0:
        return None
    local[0].iov_base = table
    local[0].iov_len = 8 * n
    remote[0].iov_base = <void *> table_ptr
    remote[0].iov_len = 8 * n
    if process_vm_readv(pid, local, 1, remote, 1, 0) != <ssize_t> (8 * n):
        return None
    for i in range(n):
        if table[i] == 0:
            return None
        local[i].iov_base = headers[i]
        local[i].iov_len = 16
        remote[i].iov_base = <void *> table[i]
        remote[i].iov_len = 16
    if process_vm_readv(pid, local, n, remote, n, 0) != <ssize_t> (16 * n):
        return None
    total = 16 * n
    for i in range(n):
        memcpy(&chunk_id, &headers[i][_ID_AT], 4)
        memcpy(&length_dw, &headers[i][_LEN_AT], 4)
        memcpy(&data[i], &headers[i][_DATA_AT], 8)
        sizes[i] = 4 * <uint64_t> length_dw
        if chunk_id == _BO_HANDLES or (sizes[i] and data[i] == 0):
            return None
        total += sizes[i]
    if total > _MAX_POINTED:
        return None
    result = PyBytes_FromStringAndSize(NULL, <Py_ssize_t> total)
    out = PyBytes_AS_STRING(result)
    pos = 0
    k = 0
    want = 0
    for i in range(n):
        memcpy(out + pos, headers[i], 16)
        pos += 16
        if sizes[i]:
            local[k].iov_base = out + pos
            local[k].iov_len = sizes[i]
            remote[k].iov_base = <void *> data[i]
            remote[k].iov_len = sizes[i]
            k += 1
            want += sizes[i]
            pos += sizes[i]
    if k and process_vm_readv(pid, local, k, remote, k, 0) != want:
        return None
    return result
