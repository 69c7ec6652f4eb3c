"""vgpu.pointers: what each request's pointers point to (gather) and where its
out-data goes back (scatter), against a fake address space that records every read.
The layouts gathered are checked against what the KMD parses (kmd.cs.split_chunks,
the syncobj arrays), so a frame client and the daemon's ioctl path build the same
``extra``."""
import ctypes
import errno
import struct

import pytest

from kmd.cs import split_chunks
from vgpu import pointers, uapi


class Memory:
    """A fake address space: byte regions at addresses far apart. read/write outside
    a region (or across its end) is EFAULT, as process_vm_readv makes it; every read
    is recorded."""

    def __init__(self):
        self.regions: dict[int, bytearray] = {}
        self.reads: list[tuple[int, int]] = []
        self.writes: list[tuple[int, bytes]] = []
        self._next = 0x7F0000001000

    def put(self, data) -> int:
        addr = self._next
        self.regions[addr] = bytearray(bytes(data))
        self._next += (len(self.regions[addr]) + 0x1FFF) & ~0xFFF   # a hole after each
        return addr

    def room(self, n: int) -> int:
        return self.put(bytes(n))

    def _find(self, addr: int, n: int):
        for base, buf in self.regions.items():
            if base <= addr and addr + n <= base + len(buf):
                return base, buf
        raise OSError(errno.EFAULT, f"{n} bytes at {addr:#x} not mapped")

    def read(self, addr: int, n: int) -> bytes:
        self.reads.append((addr, n))
        base, buf = self._find(addr, n)
        return bytes(buf[addr - base:addr - base + n])

    def write(self, addr: int, data: bytes) -> None:
        self.writes.append((addr, bytes(data)))
        base, buf = self._find(addr, len(data))
        buf[addr - base:addr - base + len(data)] = data

    def at(self, addr: int, n: int) -> bytes:
        base, buf = self._find(addr, n)
        return bytes(buf[addr - base:addr - base + n])


@pytest.fixture
def mem():
    return Memory()


def efault(fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == errno.EFAULT, e.value
    return e.value


def e2big(fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == errno.E2BIG, e.value


def u32s(*v) -> bytes:
    return struct.pack(f"<{len(v)}I", *v)


def u64s(*v) -> bytes:
    return struct.pack(f"<{len(v)}Q", *v)


# -- CS --------------------------------------------------------------------------------
def cs_arg(mem, chunks, ctx=1) -> bytes:
    """A CS struct whose ``chunks`` points to a table of pointers to the given chunk
    headers (each ``(chunk_id, data_bytes)``; data put in memory behind chunk_data)."""
    ptrs = []
    for chunk_id, data in chunks:
        data_ptr = mem.put(data) if data else 0
        ptrs.append(mem.put(uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=len(data) // 4,
                                                     chunk_data=data_ptr)))
    a = uapi.drm_amdgpu_cs()
    a.in_.ctx_id, a.in_.num_chunks, a.in_.chunks = ctx, len(chunks), mem.put(u64s(*ptrs)) if ptrs else 0
    return bytes(a)


def ib(va=0x200000, nbytes=28, ip=uapi.AMDGPU_HW_IP_DMA) -> bytes:
    return bytes(uapi.drm_amdgpu_cs_chunk_ib(va_start=va, ib_bytes=nbytes, ip_type=ip))


def test_cs_with_ib_bo_handles_and_syncobj_chunks_flattens_as_the_kmd_reads_it(mem):
    entries = b"".join(bytes(uapi.drm_amdgpu_bo_list_entry(bo_handle=h, bo_priority=p))
                       for h, p in ((4, 0), (5, 1), (6, 2)))
    bl = uapi.drm_amdgpu_bo_list_in(bo_number=3, bo_info_size=8, bo_info_ptr=mem.put(entries))
    sem_in = u32s(7, 8)
    out = bytes(uapi.drm_amdgpu_cs_chunk_syncobj(handle=9, point=0)) \
        + bytes(uapi.drm_amdgpu_cs_chunk_syncobj(handle=10, point=5))
    dep = bytes(uapi.drm_amdgpu_cs_chunk_dep(ip_type=2, ctx_id=1, handle=3))
    chunks = [(uapi.AMDGPU_CHUNK_ID_IB, ib()),
              (uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bytes(bl)),
              (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, sem_in),
              (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, dep),
              (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, out)]
    arg = cs_arg(mem, chunks)
    extra = pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, arg, mem.read)
    parsed = split_chunks(extra, len(chunks))
    assert [cid for cid, _ in parsed] == [cid for cid, _ in chunks]
    assert parsed[0][1] == ib()
    # BO_HANDLES: the bo_list_in, then the entries its bo_info_ptr points to
    assert parsed[1][1] == bytes(bl) + entries
    assert parsed[2][1] == sem_in and parsed[3][1] == dep and parsed[4][1] == out
    # nothing is written back for a CS
    assert pointers.outputs(uapi.DRM_IOCTL_AMDGPU_CS, arg) == []


def test_cs_bo_handles_entries_are_padded_to_a_dword(mem):
    # bo_info_size 6 (an odd layout Linux accepts, copying min(size, 8) per entry): 18 bytes
    bl = uapi.drm_amdgpu_bo_list_in(bo_number=3, bo_info_size=6, bo_info_ptr=mem.put(bytes(range(18))))
    arg = cs_arg(mem, [(uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bytes(bl)), (uapi.AMDGPU_CHUNK_ID_IB, ib())])
    extra = pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, arg, mem.read)
    (cid, data), (cid2, data2) = split_chunks(extra, 2)
    assert data == bytes(bl) + bytes(range(18)) + b"\0\0" and data2 == ib()


def test_cs_bo_handles_chunk_shorter_than_its_struct_reads_as_zero_extended(mem):
    # a length_dw of 4 (16 bytes: no bo_info_ptr): zero entries, nothing more read
    bl = uapi.drm_amdgpu_bo_list_in(bo_number=0, bo_info_size=8)
    arg = cs_arg(mem, [(uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bytes(bl)[:16])])
    extra = pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, arg, mem.read)
    [(cid, data)] = split_chunks(extra, 1)
    assert data == bytes(bl)


def test_cs_bad_pointers_are_efault(mem):
    good = cs_arg(mem, [(uapi.AMDGPU_CHUNK_ID_IB, ib())])
    a = uapi.drm_amdgpu_cs.from_buffer_copy(good)
    # the chunks array pointer: NULL, then unmapped
    a.in_.chunks = 0
    efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read)
    a.in_.chunks = 0x10
    efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read)
    # a chunk pointer in the table: NULL, then unmapped
    for bad in (0, 0xDEAD0000):
        a.in_.chunks = mem.put(u64s(bad))
        efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read)
    # chunk_data: NULL with a length, unmapped, and mapped but shorter than length_dw
    for data_ptr, length_dw in ((0, 8), (0xDEAD0000, 8), (mem.put(ib()[:16]), 8)):
        chunk = mem.put(uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB, length_dw=length_dw,
                                                 chunk_data=data_ptr))
        a.in_.chunks = mem.put(u64s(chunk))
        efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read)
    # BO_HANDLES: its data NULL, its bo_info_ptr NULL or unmapped
    for data_ptr in (0, mem.put(uapi.drm_amdgpu_bo_list_in(bo_number=1, bo_info_size=8)),
                     mem.put(uapi.drm_amdgpu_bo_list_in(bo_number=1, bo_info_size=8, bo_info_ptr=0xDEAD0000))):
        chunk = mem.put(uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_BO_HANDLES, length_dw=6,
                                                 chunk_data=data_ptr))
        a.in_.chunks = mem.put(u64s(chunk))
        efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read)


def test_cs_without_chunks_reads_nothing(mem):
    a = uapi.drm_amdgpu_cs()
    a.in_.num_chunks, a.in_.chunks = 0, 0xDEAD0000
    assert pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), mem.read) == b""
    assert mem.reads == []
    # a zero-length chunk with a NULL chunk_data is fine (nothing to read)
    arg = cs_arg(mem, [(uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, b"")])
    assert split_chunks(pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, arg, mem.read), 1) == \
        [(uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, b"")]


# -- huge counts: E2BIG before anything is read --------------------------------------------
BIG = 0xFFFFFFFF


def test_huge_counts_are_e2big_without_reading(mem):
    p = mem.put(bytes(4096))
    cases = [
        (uapi.DRM_IOCTL_SYNCOBJ_WAIT, uapi.drm_syncobj_wait(handles=p, count_handles=BIG)),
        (uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, uapi.drm_syncobj_array(handles=p, count_handles=BIG)),
        (uapi.DRM_IOCTL_SYNCOBJ_RESET, uapi.drm_syncobj_array(handles=p, count_handles=BIG)),
        (uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, uapi.drm_syncobj_timeline_wait(handles=p, points=p, count_handles=BIG)),
        (uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, uapi.drm_syncobj_timeline_array(handles=p, points=p, count_handles=BIG)),
        (uapi.DRM_IOCTL_SYNCOBJ_QUERY, uapi.drm_syncobj_timeline_array(handles=p, points=p, count_handles=BIG)),
    ]
    bl = uapi.drm_amdgpu_bo_list()
    bl.in_.bo_number, bl.in_.bo_info_size, bl.in_.bo_info_ptr = BIG, BIG, p
    cases.append((uapi.DRM_IOCTL_AMDGPU_BO_LIST, bl))
    wf = uapi.drm_amdgpu_wait_fences()
    wf.in_.fences, wf.in_.fence_count = p, BIG
    cases.append((uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, wf))
    for request, arg in cases:
        e2big(pointers.gather, request, bytes(arg), mem.read)
        assert mem.reads == [], uapi.ioctl_name(request)


@pytest.mark.parametrize("n", [pointers.MAX_CS_CHUNKS + 1, BIG])
def test_a_cs_with_too_many_chunks_is_einval_without_reading(mem, n):
    """Each chunk is a read made by the daemon's one ioctl thread while every other
    client waits: a million chunks stalled the mount for 24 s."""
    cs = uapi.drm_amdgpu_cs()
    cs.in_.num_chunks, cs.in_.chunks = n, mem.put(bytes(4096))
    with pytest.raises(OSError) as e:
        pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, bytes(cs), mem.read)
    assert e.value.errno == errno.EINVAL
    assert mem.reads == []


def test_a_huge_bo_handles_chunk_is_e2big_before_its_entries_are_read(mem):
    entries = mem.put(bytes(4096))
    bl = uapi.drm_amdgpu_bo_list_in(bo_number=BIG, bo_info_size=8, bo_info_ptr=entries)
    arg = cs_arg(mem, [(uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bytes(bl))])
    e2big(pointers.gather, uapi.DRM_IOCTL_AMDGPU_CS, arg, mem.read)
    assert all(addr != entries for addr, _ in mem.reads)
    assert max(n for _, n in mem.reads) <= 24


def test_max_pointed_is_the_limit(mem):
    n = pointers.MAX_POINTED // 4
    p = mem.put(bytes(pointers.MAX_POINTED))
    arg = bytes(uapi.drm_syncobj_array(handles=p, count_handles=n))
    assert len(pointers.gather(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, arg, mem.read)) == pointers.MAX_POINTED
    mem.reads.clear()
    arg = bytes(uapi.drm_syncobj_array(handles=p, count_handles=n + 1))
    e2big(pointers.gather, uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, arg, mem.read)
    assert mem.reads == []
    # the sum counts, not each piece: points past the limit once the handles are in
    arg = bytes(uapi.drm_syncobj_timeline_array(handles=p, points=p, count_handles=n // 2 + 1))
    e2big(pointers.gather, uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, arg, mem.read)


# -- syncobj arrays --------------------------------------------------------------------------
def test_syncobj_arrays(mem):
    handles = mem.put(u32s(3, 4, 5))
    points = mem.put(u64s(10, 20, 30))
    g = lambda req, arg: pointers.gather(req, bytes(arg), mem.read)   # noqa: E731
    assert g(uapi.DRM_IOCTL_SYNCOBJ_WAIT, uapi.drm_syncobj_wait(handles=handles, count_handles=3)) == u32s(3, 4, 5)
    assert g(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, uapi.drm_syncobj_array(handles=handles, count_handles=2)) == u32s(3, 4)
    assert g(uapi.DRM_IOCTL_SYNCOBJ_RESET, uapi.drm_syncobj_array(handles=handles, count_handles=1)) == u32s(3)
    tw = uapi.drm_syncobj_timeline_wait(handles=handles, points=points, count_handles=3)
    assert g(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, tw) == u32s(3, 4, 5) + u64s(10, 20, 30)
    ts = uapi.drm_syncobj_timeline_array(handles=handles, points=points, count_handles=2)
    assert g(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, ts) == u32s(3, 4) + u64s(10, 20)
    # QUERY: its points are output, zeros go in and the caller's are never read
    mem.reads.clear()
    assert g(uapi.DRM_IOCTL_SYNCOBJ_QUERY, ts) == u32s(3, 4) + bytes(16)
    assert mem.reads == [(handles, 8)]
    assert pointers.outputs(uapi.DRM_IOCTL_SYNCOBJ_QUERY, bytes(ts)) == [(points, 16, "syncobj points")]
    pointers.scatter(uapi.DRM_IOCTL_SYNCOBJ_QUERY, bytes(ts), u64s(7, 8), mem.write)
    assert mem.at(points, 24) == u64s(7, 8, 30)


def test_syncobj_null_and_bad_pointers_are_efault(mem):
    handles = mem.put(u32s(1))
    for arg, request in [
        (uapi.drm_syncobj_wait(handles=0, count_handles=1), uapi.DRM_IOCTL_SYNCOBJ_WAIT),
        (uapi.drm_syncobj_wait(handles=0xDEAD0000, count_handles=1), uapi.DRM_IOCTL_SYNCOBJ_WAIT),
        (uapi.drm_syncobj_wait(handles=handles, count_handles=2), uapi.DRM_IOCTL_SYNCOBJ_WAIT),  # past the end
        (uapi.drm_syncobj_array(handles=0, count_handles=1), uapi.DRM_IOCTL_SYNCOBJ_SIGNAL),
        (uapi.drm_syncobj_array(handles=0, count_handles=1), uapi.DRM_IOCTL_SYNCOBJ_RESET),
        (uapi.drm_syncobj_timeline_wait(handles=handles, points=0, count_handles=1),
         uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT),
        (uapi.drm_syncobj_timeline_array(handles=handles, points=0, count_handles=1),
         uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL),
        (uapi.drm_syncobj_timeline_array(handles=0, points=0, count_handles=1), uapi.DRM_IOCTL_SYNCOBJ_QUERY),
    ]:
        efault(pointers.gather, request, bytes(arg), mem.read)
    # QUERY's NULL points fail when the answer is written back
    q = uapi.drm_syncobj_timeline_array(handles=handles, points=0, count_handles=1)
    efault(pointers.scatter, uapi.DRM_IOCTL_SYNCOBJ_QUERY, bytes(q), u64s(1), mem.write)
    # a count of zero reads nothing, whatever the pointer
    assert pointers.gather(uapi.DRM_IOCTL_SYNCOBJ_WAIT, bytes(uapi.drm_syncobj_wait(handles=0)), mem.read) == b""


def test_a_shorter_struct_reads_as_zero_extended(mem):
    handles = mem.put(u32s(3, 4))
    full = bytes(uapi.drm_syncobj_array(handles=handles, count_handles=2))
    assert pointers.gather(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, full[:12], mem.read) == u32s(3, 4)
    assert pointers.gather(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, full[:8], mem.read) == b""  # count missing: 0
    # a longer one: the tail is not looked at here (the KMD refuses a nonzero one)
    assert pointers.gather(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, full + b"\1" * 8, mem.read) == u32s(3, 4)


# -- BO_LIST, WAIT_FENCES ------------------------------------------------------------------
def test_bo_list_and_wait_fences(mem):
    entries = bytes(uapi.drm_amdgpu_bo_list_entry(bo_handle=1)) + bytes(uapi.drm_amdgpu_bo_list_entry(bo_handle=2))
    bl = uapi.drm_amdgpu_bo_list()
    bl.in_.bo_number, bl.in_.bo_info_size, bl.in_.bo_info_ptr = 2, 8, mem.put(entries)
    assert pointers.gather(uapi.DRM_IOCTL_AMDGPU_BO_LIST, bytes(bl), mem.read) == entries
    bl.in_.bo_info_ptr = 0
    efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_BO_LIST, bytes(bl), mem.read)
    fences = bytes(uapi.drm_amdgpu_fence(ctx_id=1, ip_type=2, seq_no=5)) * 2
    wf = uapi.drm_amdgpu_wait_fences()
    wf.in_.fences, wf.in_.fence_count = mem.put(fences), 2
    assert pointers.gather(uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, bytes(wf), mem.read) == fences
    wf.in_.fence_count = 3
    efault(pointers.gather, uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, bytes(wf), mem.read)


# -- outputs: VERSION, INFO, GEM_OP ------------------------------------------------------------
def version_arg(**kw) -> bytes:
    return bytes(uapi.drm_version(**kw))


def test_version_with_null_buffers_asks_for_lengths(mem):
    # libdrm's drmGetVersion asks first with zero lengths and NULL buffers
    arg = version_arg()
    assert pointers.gather(uapi.DRM_IOCTL_VERSION, arg, mem.read) == b""
    pointers.scatter(uapi.DRM_IOCTL_VERSION, arg, b"", mem.write)
    # lengths but NULL buffers: drm_copy_field skips them, nothing is written, no EFAULT
    arg = version_arg(name_len=6, date_len=8, desc_len=4)
    pointers.scatter(uapi.DRM_IOCTL_VERSION, arg, b"amdgpu" + b"20150101" + b"AMD ", mem.write)
    assert mem.writes == []
    # only the date has a buffer: it gets the date, not the name
    date = mem.room(8)
    arg = version_arg(name_len=6, date_len=8, date=date, desc_len=4)
    pointers.scatter(uapi.DRM_IOCTL_VERSION, arg, b"amdgpu" + b"20150101" + b"AMD ", mem.write)
    assert mem.writes == [(date, b"20150101")]


def test_version_strings_go_to_their_buffers(mem):
    name, date, desc = mem.room(16), mem.room(16), mem.room(16)
    arg = version_arg(name_len=6, name=name, date_len=3, date=date, desc_len=16, desc=desc)
    pointers.scatter(uapi.DRM_IOCTL_VERSION, arg, b"amdgpu" + b"201" + b"AMD GPU".ljust(16, b"\0"), mem.write)
    assert mem.at(name, 16) == b"amdgpu".ljust(16, b"\0")
    assert mem.at(date, 16) == b"201".ljust(16, b"\0")     # no more than date_len
    assert mem.at(desc, 16) == b"AMD GPU".ljust(16, b"\0")
    # an unwritable buffer with bytes to take is EFAULT
    arg = version_arg(name_len=6, name=0xDEAD0000)
    efault(pointers.scatter, uapi.DRM_IOCTL_VERSION, arg, b"amdgpu", mem.write)


def test_info_answer_goes_to_return_pointer(mem):
    out = mem.room(64)
    a = uapi.drm_amdgpu_info(return_pointer=out, return_size=16, query=uapi.AMDGPU_INFO_ACCEL_WORKING)
    assert pointers.gather(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(a), mem.read) == b""
    assert pointers.reply_room(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(a)) == 16
    pointers.scatter(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(a), b"\1\0\0\0", mem.write)
    assert mem.at(out, 8) == b"\1\0\0\0\0\0\0\0"      # as many bytes as the answer has
    pointers.scatter(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(a), b"\2" * 32, mem.write)
    assert mem.at(out, 20) == b"\2" * 16 + bytes(4)   # never past return_size
    for bad in (0, 0xDEAD0000, out + 64 - 8):          # NULL, unmapped, across the end
        a.return_pointer = bad
        efault(pointers.scatter, uapi.DRM_IOCTL_AMDGPU_INFO, bytes(a), b"\3" * 16, mem.write)


def test_gem_op_create_info_goes_to_value(mem):
    out = mem.room(ctypes.sizeof(uapi.drm_amdgpu_gem_create_in))
    a = uapi.drm_amdgpu_gem_op(handle=1, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO, value=out)
    info = bytes(uapi.drm_amdgpu_gem_create_in(bo_size=4096, alignment=4096, domains=4))
    pointers.scatter(uapi.DRM_IOCTL_AMDGPU_GEM_OP, bytes(a), info, mem.write)
    assert mem.at(out, len(info)) == info
    # SET_PLACEMENT: value is a domain, not a pointer
    a = uapi.drm_amdgpu_gem_op(handle=1, op=uapi.AMDGPU_GEM_OP_SET_PLACEMENT, value=4)
    assert pointers.outputs(uapi.DRM_IOCTL_AMDGPU_GEM_OP, bytes(a)) == []


def test_requests_without_pointers_and_other_drivers_requests(mem):
    for request, arg in [(uapi.DRM_IOCTL_GET_CAP, uapi.drm_get_cap(capability=0xDEAD0000)),
                         (uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(va_address=0xDEAD0000)),
                         (uapi.DRM_IOCTL_SYNCOBJ_CREATE, uapi.drm_syncobj_create())]:
        assert pointers.gather(request, bytes(arg), mem.read) == b""
        assert pointers.outputs(request, bytes(arg)) == []
    # a request of another type with a DRM request's number: not ours
    tcgets = 0x5401
    other = uapi._IOC(3, ord("T"), uapi._IOC_NR(uapi.DRM_IOCTL_SYNCOBJ_WAIT), 32)
    assert pointers.gather(tcgets, b"", mem.read) == b""
    assert pointers.gather(other, bytes(uapi.drm_syncobj_wait(handles=0, count_handles=5)), mem.read) == b""
    assert mem.reads == []


def test_info_with_a_null_return_pointer_is_einval_and_its_room_is_bounded(mem):
    """amdgpu_info_ioctl refuses a NULL return_pointer with EINVAL before the query;
    a return_size of any u32 is fine, and a frame client's reply buffer stays bounded."""
    null = bytes(uapi.drm_amdgpu_info(return_size=8, query=uapi.AMDGPU_INFO_TIMESTAMP))
    with pytest.raises(OSError) as e:
        pointers.gather(uapi.DRM_IOCTL_AMDGPU_INFO, null, mem.read)
    assert e.value.errno == errno.EINVAL and mem.reads == []
    ok = uapi.drm_amdgpu_info(return_pointer=mem.room(8), return_size=0xFFFFFFFF, query=uapi.AMDGPU_INFO_TIMESTAMP)
    assert pointers.gather(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(ok), mem.read) == b""
    assert pointers.reply_room(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(ok)) == pointers.MAX_POINTED
