"""vdev.ioctl.cs_gather, a CS's pointers read in C: on CS structs in this process's
memory (ctypes buffers, read back with process_vm_readv on our own pid), its bytes are
exactly those of the Python reference (vgpu.pointers.gather through UserMemory), and
it declines (None) every case the reference must answer, so that the refusal's errno
and reason stay the reference's."""
import ctypes
import errno
import os
import random

import pytest

from vdev.ioctl.cs_gather import CS, MAX, gather_cs
from vdev.ioctl.uaccess import UserMemory
from vgpu import pointers, uapi

PID = os.getpid()


def reference(arg: bytes) -> bytes:
    return pointers.gather(CS, arg, UserMemory(PID).read)


class Submission:
    """A CS struct pointing to a chunk table, headers and data held by this object."""

    def __init__(self, chunks: list[tuple[int, bytes]]):
        self.keep = []
        headers = []
        for chunk_id, data in chunks:
            buf = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data.ljust(1, b"\0"))
            self.keep.append(buf)
            h = uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=len(data) // 4,
                                         chunk_data=ctypes.addressof(buf) if data else 0)
            headers.append(h)
        self.keep += headers
        self.table = (ctypes.c_uint64 * max(len(chunks), 1))(*[ctypes.addressof(h) for h in headers])
        self.cs = uapi.drm_amdgpu_cs()
        self.cs.in_.num_chunks = len(chunks)
        self.cs.in_.chunks = ctypes.addressof(self.table)
        self.headers = headers

    @property
    def arg(self) -> bytes:
        return bytes(self.cs)


def ib_chunk(va=0x10000, size=4) -> tuple[int, bytes]:
    ib = uapi.drm_amdgpu_cs_chunk_ib(va_start=va, ib_bytes=size, ip_type=uapi.AMDGPU_HW_IP_DMA)
    return uapi.AMDGPU_CHUNK_ID_IB, bytes(ib)


def test_a_nop_cs_reads_as_the_reference_reads_it():
    s = Submission([ib_chunk()])
    got = gather_cs(PID, s.arg)
    assert got is not None and got == reference(s.arg)
    assert got[:16] == bytes(s.headers[0]) and len(got) == 16 + ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_ib)


def test_random_chunk_lists_read_byte_for_byte_as_the_reference():
    rng = random.Random(23)
    ids = [uapi.AMDGPU_CHUNK_ID_IB, uapi.AMDGPU_CHUNK_ID_FENCE, uapi.AMDGPU_CHUNK_ID_DEPENDENCIES,
           uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, 99]
    for _ in range(300):
        chunks = [(rng.choice(ids), rng.randbytes(4 * rng.randrange(0, 40))) for _ in range(rng.randrange(1, MAX + 1))]
        s = Submission(chunks)
        assert gather_cs(PID, s.arg) == reference(s.arg)


def test_it_declines_what_the_reference_must_refuse_or_read_further():
    s = Submission([ib_chunk()])
    too_many = Submission([ib_chunk()] * (MAX + 1))
    assert gather_cs(PID, too_many.arg) is None and reference(too_many.arg)   # the reference reads it
    none = uapi.drm_amdgpu_cs()
    assert gather_cs(PID, bytes(none)) is None and reference(bytes(none)) == b""   # no chunks: the KMD's EINVAL
    assert gather_cs(PID, s.arg[:-1]) is None                                   # not the struct's size
    s.cs.in_.chunks = 0
    assert gather_cs(PID, s.arg) is None
    with pytest.raises(OSError) as e:
        reference(s.arg)
    assert e.value.errno == errno.EFAULT
    s = Submission([ib_chunk()])
    s.table[0] = 0                                                              # a NULL chunk
    assert gather_cs(PID, s.arg) is None
    s = Submission([ib_chunk()])
    s.headers[0].chunk_data = 0                                                 # NULL data with a length
    assert gather_cs(PID, s.arg) is None
    s = Submission([(uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bytes(uapi.drm_amdgpu_bo_list_in()))])
    assert gather_cs(PID, s.arg) is None and reference(s.arg) is not None       # entries: a fourth read


def test_unreadable_memory_is_declined_at_each_of_the_three_reads():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                              ctypes.c_int, ctypes.c_int, ctypes.c_long]
    page = libc.mmap(None, 4096, 0, 0x22, -1, 0)     # PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS
    assert page not in (None, ctypes.c_void_p(-1).value)
    try:
        for where in ("table", "header", "data"):
            s = Submission([ib_chunk(), ib_chunk(va=0x20000)])
            if where == "table":
                s.cs.in_.chunks = page
            elif where == "header":
                s.table[1] = page
            else:
                s.headers[1].chunk_data = page
            assert gather_cs(PID, s.arg) is None, where
            with pytest.raises(OSError) as e:
                reference(s.arg)
            assert e.value.errno == errno.EFAULT, where
    finally:
        libc.munmap(ctypes.c_void_p(page), ctypes.c_size_t(4096))


def test_another_process_is_read_as_the_reference_reads_it():
    """The pid is the caller's, not ours: a child's CS, read from here."""
    import subprocess
    import sys
    code = ("import ctypes, sys, time\n"
            "sys.path.insert(0, %r)\n"
            "from tests.vdev.ioctl.test_cs_gather import Submission, ib_chunk\n"
            "s = Submission([ib_chunk(), ib_chunk(va=0x30000, size=8)])\n"
            "print(s.arg.hex(), flush=True)\n"
            "sys.stdin.read()\n") % str(__import__("pathlib").Path(__file__).resolve().parents[3])
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        arg = bytes.fromhex(child.stdout.readline().strip())
        got = gather_cs(child.pid, arg)
        assert got is not None
        assert got == pointers.gather(CS, arg, UserMemory(child.pid).read)
        assert got != gather_cs(PID, arg)        # not our own memory at those addresses
    finally:
        child.stdin.close()
        child.wait()
