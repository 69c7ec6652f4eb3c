# cython: language_level=3
"""AMDGPU_INFO TIMESTAMP, and AMDGPU_WAIT_CS of a job that has finished, answered in C
before pyfuse3 makes a Python object for the request (``pyfuse3.set_ioctl_fast_path``,
deps/pyfuse3/ioctl.patch).

Why (docs/ioctl.md, "The clock read"): the answer is the device clock, and callers
compare it with their own CLOCK_MONOTONIC around the call: IGT's amd_info
query-timestamp wants the two to agree within 1 % over 10 ms, clock calibration
(radv's calibrated timestamps) takes the round trip as its error. Every microsecond
between the request's arrival and the clock read, and between the read and the
reply, counts. Through vdev.ioctl.path the read sits behind the interpreter's whole
request path, which after an idle time runs with cold caches: 150-250 µs on this
project's VMs. Here it is one dictionary lookup, one call into the KMD and one
process_vm_writev.

Contract: a request is answered here only where vdev.ioctl.path would give the same
answer and record nothing: cmd DRM_IOCTL_AMDGPU_INFO with query TIMESTAMP and a
non-zero return_size and return_pointer, on a control handle the mount registered
(:meth:`FastPath.add`), while no drm.debug observer is set (``IoctlPath.observe``), and
when the KMD gives the value (``KmdDevice.timestamp_query``: None for a closed or
unplugged file, one that may not call INFO, or while tracing records requests). The
value goes to the caller's ``return_pointer`` as INFO's out-data does: min(return_size,
8) bytes of it, little-endian (amdgpu's copy_to_user of min(size, 8)). Anything else, a copy to the caller that fails included (its EFAULT
and kmsg line are the Python path's to give), returns 0: the request goes the usual
way.

WAIT_CS (docs/ioctl.md, "Finished waits"): the most frequent request of a submitting
program, and when its job has finished the answer is fixed: the union cleared, status
0. It is answered here, on a registered handle without a drm.debug observer, only
where the KMD's ``Device.wait_cs_done`` (the dispatch's own checks and fence lookup,
in Python) says the dispatch would answer exactly that; a busy or failed fence, a bad
context, ring or sequence number, a closed or unplugged file, and tracing go the
usual way. The decision stays the KMD's: this code only writes the cleared union.
"""
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_SetContext
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memset

from .uio cimport iovec, process_vm_writev

from vgpu import uapi

cdef unsigned int _INFO = uapi.DRM_IOCTL_AMDGPU_INFO
cdef unsigned int _WAIT_CS = uapi.DRM_IOCTL_AMDGPU_WAIT_CS
cdef size_t _WAIT_SIZE = uapi._IOC_SIZE(uapi.DRM_IOCTL_AMDGPU_WAIT_CS)
# drm_amdgpu_wait_cs_in's fields, where vgpu.uapi puts them
cdef size_t _SEQ_AT = uapi.drm_amdgpu_wait_cs_in.handle.offset
cdef size_t _IP_AT = uapi.drm_amdgpu_wait_cs_in.ip_type.offset
cdef size_t _INSTANCE_AT = uapi.drm_amdgpu_wait_cs_in.ip_instance.offset
cdef size_t _RING_AT = uapi.drm_amdgpu_wait_cs_in.ring.offset
cdef size_t _CTX_AT = uapi.drm_amdgpu_wait_cs_in.ctx_id.offset
cdef uint32_t _TIMESTAMP = uapi.AMDGPU_INFO_TIMESTAMP
# struct drm_amdgpu_info's fields this reads, where vgpu.uapi puts them; _IOC_SIZE of
# the request is the whole struct
cdef size_t _INFO_SIZE = uapi._IOC_SIZE(uapi.DRM_IOCTL_AMDGPU_INFO)
cdef size_t _POINTER_AT = uapi.drm_amdgpu_info.return_pointer.offset
cdef size_t _SIZE_AT = uapi.drm_amdgpu_info.return_size.offset
cdef size_t _QUERY_AT = uapi.drm_amdgpu_info.query.offset


cdef class FastPath:
    """The control handles of one mount that the C answer may serve, and the mount's
    IoctlPath (its ``observe``). Keep it alive while its :meth:`capsule` is set."""

    cdef dict _handles
    cdef object _path
    cdef public unsigned long answered   # clock reads answered here, for tests and docs
    cdef public unsigned long waits      # WAIT_CS of finished jobs answered here

    def __init__(self, path):
        self._handles = {}
        self._path = path
        self.answered = 0
        self.waits = 0

    def add(self, fh: int, handle) -> None:
        """``handle`` (a vdev.nodes.ControlHandle: ``dev``, ``file``) is open as ``fh``."""
        self._handles[fh] = handle

    def remove(self, fh: int) -> None:
        self._handles.pop(fh, None)

    def capsule(self):
        """The ``pyfuse3.set_ioctl_fast_path`` capsule of this mount's answer."""
        c = PyCapsule_New(<void *> _answer, b"pyfuse3.ioctl_fast_path", NULL)
        PyCapsule_SetContext(c, <void *> self)
        return c


cdef int _answer(void *data, uint64_t fh, unsigned int cmd, uint64_t arg,
                 const void *in_buf, size_t in_bufsz, void *out_buf, size_t out_bufsz,
                 uint32_t pid, int *result, size_t *out_len) noexcept:
    cdef const unsigned char *b = <const unsigned char *> in_buf
    cdef uint64_t ptr
    cdef uint32_t size, query
    cdef long long ns
    cdef unsigned char value[8]
    cdef iovec local, remote
    if cmd == _WAIT_CS:
        return _wait_cs(<FastPath> data, fh, b, in_bufsz, out_buf, out_bufsz, result, out_len)
    if cmd != _INFO or in_bufsz != _INFO_SIZE:
        return 0
    memcpy(&ptr, b + _POINTER_AT, 8)
    memcpy(&size, b + _SIZE_AT, 4)
    memcpy(&query, b + _QUERY_AT, 4)
    if query != _TIMESTAMP or size == 0 or ptr == 0:   # EINVAL: the Python path's to give
        return 0
    if size > 8:
        size = 8
    cdef FastPath self = <FastPath> data
    try:
        handle = self._handles.get(fh)
        if handle is None or self._path.observe is not None:
            return 0
        t = handle.dev.timestamp_query(handle.file)
        if t is None:
            return 0
        ns = t
    except Exception:   # never out of here: the Python path answers, and logs
        return 0
    memcpy(value, &ns, 8)   # little-endian, as the out-data of the Python path
    local.iov_base = value
    local.iov_len = size
    remote.iov_base = <void *> ptr
    remote.iov_len = size
    if process_vm_writev(pid, &local, 1, &remote, 1, 0) != size:
        return 0
    self.answered += 1
    result[0] = 0
    out_len[0] = 0   # INFO is _IOW: nothing is copied back
    return 1


cdef int _wait_cs(FastPath self, uint64_t fh, const unsigned char *b, size_t in_bufsz, void *out_buf,
                  size_t out_bufsz, int *result, size_t *out_len) noexcept:
    """AMDGPU_WAIT_CS of a job that has finished: the cleared union (status 0) back,
    where the KMD's Device.wait_cs_done says the dispatch would answer just that."""
    cdef uint64_t seq
    cdef uint32_t ip_type, instance, ring, ctx_id
    if in_bufsz != _WAIT_SIZE or out_bufsz != _WAIT_SIZE:
        return 0
    memcpy(&seq, b + _SEQ_AT, 8)
    memcpy(&ip_type, b + _IP_AT, 4)
    memcpy(&instance, b + _INSTANCE_AT, 4)
    memcpy(&ring, b + _RING_AT, 4)
    memcpy(&ctx_id, b + _CTX_AT, 4)
    try:
        handle = self._handles.get(fh)
        if handle is None or self._path.observe is not None:
            return 0
        if not handle.dev.wait_cs_done(handle.file, ctx_id, ip_type, instance, ring, seq):
            return 0
    except Exception:   # never out of here: the Python path answers, and logs
        return 0
    memset(out_buf, 0, out_bufsz)   # amdgpu clears the union, then status = 0
    self.waits += 1
    result[0] = 0
    out_len[0] = out_bufsz
    return 1
