"""BO_LIST, CS, WAIT_CS, WAIT_FENCES and faults, through the dispatch table."""
import ctypes
import errno
import mmap
import os
import struct
import threading
import time

import pytest

from kmd.errors import KmdError
from kmd.hw import SdmaIb
from kmd.ioctl import PendingReply
from vgpu import uapi

from .conftest import call, fails, gem_create, gem_va

VA_IB, VA_A, VA_B = 0x10000000, 0x20000000, 0x30000000
DMA = uapi.AMDGPU_HW_IP_DMA
FOREVER = (1 << 64) - 1


class Setup:
    """A client with a context, an IB BO and two 64 KiB data BOs mapped."""

    def __init__(self, dev, f, size=65536, domain=None):
        self.dev, self.f = dev, f
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
        self.ctx = call(dev, f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id
        self.ib = gem_create(dev, f, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT)
        self.slot = 0  # each submission gets its own 512-byte IB slot
        self.a = gem_create(dev, f, size, domain)
        self.b = gem_create(dev, f, size, domain)
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.ib, VA_IB, 65536, flags=uapi.AMDGPU_VM_PAGE_READABLE))
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.a, VA_A, size))
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.b, VA_B, size))
        self.list = self.bo_list([self.ib, self.a, self.b])

    def bo(self, h):
        return self.f.bos[h]

    def bo_list(self, handles):
        a = uapi.drm_amdgpu_bo_list()
        a.in_.operation = uapi.AMDGPU_BO_LIST_OP_CREATE
        a.in_.bo_number = len(handles)
        a.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
        entries = b"".join(struct.pack("<II", h, 0) for h in handles)
        return call(self.dev, self.f, "AMDGPU_BO_LIST", a, entries)[0].out.list_handle

    def submit(self, ib: SdmaIb, ring=0, deps=(), ctx=None, extra_chunks=b"", nchunks=1, raw=False):
        """Submit `ib`; returns its seq, or with `raw` what Device.ioctl answered (a
        Reply, or a PendingReply when the context has no room)."""
        ib_va = VA_IB + 512 * (self.slot % 128)
        self.slot += 1
        self.bo(self.ib).write(ib_va - VA_IB, ib.tobytes())
        c = uapi.drm_amdgpu_cs_chunk_ib()
        c.va_start, c.ib_bytes, c.ip_type, c.ring = ib_va, len(ib) * 4, DMA, ring
        chunks = chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c))
        if deps:
            chunks += chunk(uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, b"".join(bytes(d) for d in deps))
            nchunks += 1
        a = uapi.drm_amdgpu_cs()
        a.in_.ctx_id = self.ctx if ctx is None else ctx
        a.in_.bo_list_handle = self.list
        a.in_.num_chunks = nchunks
        if raw:
            return self.dev.ioctl(self.f, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), chunks + extra_chunks)
        return call(self.dev, self.f, "AMDGPU_CS", a, chunks + extra_chunks)[0].out.handle

    def wait(self, seq, ring=0, timeout=FOREVER, raw=False):
        a = uapi.drm_amdgpu_wait_cs()
        a.in_.handle, a.in_.ip_type, a.in_.ring, a.in_.ctx_id, a.in_.timeout = seq, DMA, ring, self.ctx, timeout
        if raw:
            return self.dev.ioctl(self.f, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, bytes(a))
        return call(self.dev, self.f, "AMDGPU_WAIT_CS", a)[0].out.status


def chunk(cid, data: bytes) -> bytes:
    h = uapi.drm_amdgpu_cs_chunk()
    h.chunk_id, h.length_dw = cid, len(data) // 4
    return bytes(h) + data


@pytest.fixture
def s(dev, client):
    return Setup(dev, client)


def test_write_fill_copy(s):
    data = list(range(0x100, 0x140))
    seq = s.submit(SdmaIb().write_linear(VA_A, data)
                   .constant_fill(VA_A + 4096, 0xDEADBEEF, 8192)
                   .copy_linear(VA_B + 100, VA_A, 4096 + 8192))
    assert seq == 1
    assert s.wait(seq) == 0
    a, b = s.bo(s.a), s.bo(s.b)
    assert a.read(0, 256) == struct.pack("<64I", *data)
    assert a.read(4096, 8192) == struct.pack("<I", 0xDEADBEEF) * 2048
    assert b.read(100, 4096 + 8192) == a.read(0, 4096 + 8192)
    assert s.dev.kmsg.text().count("GPU fault") == 0


def test_sequence_numbers_and_both_rings(s):
    seqs = [s.submit(SdmaIb().fence(VA_A + 8 * i, i + 1), ring=i % 2) for i in range(6)]
    assert seqs == [1, 1, 2, 2, 3, 3]
    assert s.wait(3, ring=0) == 0 and s.wait(3, ring=1) == 0
    assert s.bo(s.a).read(0, 48) == struct.pack("<6Q", *range(1, 7))
    info = s.dev.debugfs_files()
    assert "--- ring 1 (sdma1) ---\nLast signaled fence          0x00000003\n" in info["amdgpu_fence_info"]()
    assert "emitted seq:  3" in info["vgpu_ring_sdma1"]()


def test_fault_unmapped_marks_guilty_and_fence_errors(s, dev, client):
    seq = s.submit(SdmaIb().write_linear(0x7000000000, [1, 2, 3]))
    with pytest.raises(Exception) as e:
        s.wait(seq)
    assert e.value.errno == errno.EFAULT
    log = dev.kmsg.text()
    assert "page fault" in log and "0x7000000000" in log and "sdma0" in log and "packet offset 0" in log
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_QUERY_STATE2, s.ctx
    assert call(dev, client, "AMDGPU_CTX", a)[0].out.state.flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    # a guilty context can no longer submit
    fails(errno.ECANCELED, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 1),
          chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 4))))


def cs_args(ctx, lst, n):
    a = uapi.drm_amdgpu_cs()
    a.in_.ctx_id, a.in_.bo_list_handle, a.in_.num_chunks = ctx, lst, n
    return a


def ib_chunk(va, nbytes, ip=DMA, ring=0):
    c = uapi.drm_amdgpu_cs_chunk_ib()
    c.va_start, c.ib_bytes, c.ip_type, c.ring = va, nbytes, ip, ring
    return c


@pytest.mark.parametrize("ib,what", [
    (SdmaIb().raw(0x000000FF), "unknown opcode"),
    (SdmaIb().write_linear(VA_IB, [1]), "read-only page"),
    (SdmaIb().copy_linear(VA_A, VA_A + (1 << 20), 16), "unmapped source"),
])
def test_faults(s, dev, ib, what):
    seq = s.submit(ib)
    with pytest.raises(Exception) as e:
        s.wait(seq)
    assert e.value.errno in (errno.EFAULT, errno.EINVAL)
    assert "GPU fault" in dev.kmsg.text()


def test_ib_outside_vm_is_a_fault(s, dev):
    c = ib_chunk(0x5000000000, 16)
    call(dev, s.f, "AMDGPU_CS", cs_args(s.ctx, s.list, 1), chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))
    with pytest.raises(Exception) as e:
        s.wait(1)
    assert e.value.errno == errno.EFAULT


def test_other_files_unaffected_by_a_fault(dev, client, root_client):
    bad, good = Setup(dev, client), Setup(dev, root_client)
    seq_bad = bad.submit(SdmaIb().write_linear(0x7000000000, [1]))
    seq_good = good.submit(SdmaIb().write_linear(VA_A, [42]))
    with pytest.raises(Exception):
        bad.wait(seq_bad)
    assert good.wait(seq_good) == 0
    assert good.bo(good.a).read(0, 4) == struct.pack("<I", 42)


@pytest.mark.parametrize("mutate,err", [
    (lambda a, c: (setattr(a.in_, "ctx_id", 99), c), errno.EINVAL),
    (lambda a, c: (setattr(a.in_, "num_chunks", 0), b""), errno.EINVAL),
    (lambda a, c: (setattr(a.in_, "num_chunks", 2), c), errno.EINVAL),
    (lambda a, c: (None, c[:-4]), errno.EINVAL),
    (lambda a, c: (None, c + b"\0" * 4), errno.EINVAL),
    (lambda a, c: (setattr(a.in_, "bo_list_handle", 77), c), errno.ENOENT),
    (lambda a, c: (setattr(a.in_, "flags", 1), c), errno.EINVAL),
    (lambda a, c: (None, chunk(0x55, bytes(8))), errno.EINVAL),
    (lambda a, c: (None, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 6)))), errno.EINVAL),
    (lambda a, c: (None, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 8, ring=5)))), errno.EINVAL),
    (lambda a, c: (None, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 8, ip=uapi.AMDGPU_HW_IP_GFX)))), errno.EINVAL),
])
def test_cs_refused(s, dev, client, mutate, err):
    a = cs_args(s.ctx, s.list, 1)
    c = chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 8)))
    _, c = mutate(a, c)
    fails(err, dev, client, "AMDGPU_CS", a, c)
    assert all(r.emitted_seq == 0 for r in dev.rings.values())


def test_bo_list_ops(s, dev, client):
    a = uapi.drm_amdgpu_bo_list()
    a.in_.operation, a.in_.list_handle = uapi.AMDGPU_BO_LIST_OP_DESTROY, s.list
    call(dev, client, "AMDGPU_BO_LIST", a)
    fails(errno.ENOENT, dev, client, "AMDGPU_BO_LIST", a)
    a.in_.operation, a.in_.bo_number, a.in_.bo_info_size = uapi.AMDGPU_BO_LIST_OP_CREATE, 1, 8
    fails(errno.ENOENT, dev, client, "AMDGPU_BO_LIST", a, struct.pack("<II", 999, 0))
    fails(errno.EINVAL, dev, client, "AMDGPU_BO_LIST", a, struct.pack("<I", s.a))
    a.in_.operation = 7
    fails(errno.EINVAL, dev, client, "AMDGPU_BO_LIST", a, struct.pack("<II", s.a, 0))


def test_wait_cs_errors_and_timeout(s, dev, client):
    a = uapi.drm_amdgpu_wait_cs()
    a.in_.handle, a.in_.ip_type, a.in_.ctx_id = 5, DMA, s.ctx
    fails(errno.EINVAL, dev, client, "AMDGPU_WAIT_CS", a)  # never emitted
    a.in_.handle, a.in_.ctx_id = 0, 42
    fails(errno.EINVAL, dev, client, "AMDGPU_WAIT_CS", a)
    # a job that polls memory until the CPU writes it: WAIT_CS with timeout 0 says busy
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 7).fence(VA_A + 8, 1))
    assert s.wait(seq, timeout=0) == 1
    assert s.wait(seq, timeout=time.monotonic_ns() + 20_000_000) == 1
    s.bo(s.a).write(0, struct.pack("<I", 7))
    assert s.wait(seq) == 0


def test_hang_times_out_and_resets(dev, client):
    s = Setup(dev, client)
    other = Setup(dev, dev.open_file(pid=9, uid=9, comm="innocent"))
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1234))
    queued = s.submit(SdmaIb().fence(VA_A + 8, 5))
    with pytest.raises(Exception) as e:
        s.wait(seq)
    assert e.value.errno == errno.ETIME
    with pytest.raises(Exception) as e:
        s.wait(queued)
    assert e.value.errno == errno.ECANCELED
    log = dev.kmsg.text()
    assert "ring sdma0 timeout" in log and "GPU reset begin!" in log and "GPU reset succeeded" in log
    assert other.wait(other.submit(SdmaIb().fence(VA_A, 3))) == 0
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_QUERY_STATE2, other.ctx
    assert call(dev, other.f, "AMDGPU_CTX", a)[0].out.state.flags == uapi.AMDGPU_CTX_QUERY2_FLAGS_RESET  # innocent
    dev.close_file(other.f)


def test_dependencies_across_rings(s):
    blocker = s.submit(SdmaIb().poll_regmem(VA_A, 1).fence(VA_A + 8, 11), ring=0)
    d = uapi.drm_amdgpu_cs_chunk_dep()
    d.ip_type, d.ring, d.ctx_id, d.handle = DMA, 0, s.ctx, blocker
    after = s.submit(SdmaIb().copy_linear(VA_B, VA_A + 8, 4), ring=1, deps=[d])
    assert s.wait(after, ring=1, timeout=time.monotonic_ns() + 50_000_000) == 1
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(after, ring=1) == 0
    assert s.bo(s.b).read(0, 4) == struct.pack("<I", 11)


def fence_entries(s, *pairs) -> bytes:
    out = b""
    for ring, seq in pairs:
        f = uapi.drm_amdgpu_fence()
        f.ctx_id, f.ip_type, f.ring, f.seq_no = s.ctx, DMA, ring, seq
        out += bytes(f)
    return out


def wait_fences_args(count, wait_all, timeout):
    a = uapi.drm_amdgpu_wait_fences()
    a.in_.fence_count, a.in_.wait_all, a.in_.timeout_ns = count, wait_all, timeout
    return a


def test_wait_fences_all_and_any(s, dev, client):
    """amdgpu_cs_wait_fences_ioctl: status 1 once satisfied, 0 on timeout."""
    seq_a = s.submit(SdmaIb().poll_regmem(VA_A, 1), ring=0)
    seq_b = s.submit(SdmaIb().fence(VA_B, 1), ring=1)
    s.wait(seq_b, ring=1)
    both = fence_entries(s, (0, seq_a), (1, seq_b))
    out, _ = call(dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(2, 0, FOREVER), both)
    assert out.out.status == 1 and out.out.first_signaled == 1
    out, _ = call(dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(2, 0, 0), fence_entries(s, (0, seq_a)) * 2)
    assert out.out.status == 0 and out.out.first_signaled == 0xFFFFFFFF  # wait-any timed out
    out, _ = call(dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(2, 1, time.monotonic_ns() + 20_000_000), both)
    assert out.out.status == 0 and out.out.first_signaled == 0
    pending = dev.ioctl(client, uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, bytes(wait_fences_args(2, 1, FOREVER)), both)
    assert isinstance(pending, PendingReply) and not pending.ready()
    threading.Timer(0.05, s.bo(s.a).write, args=(0, struct.pack("<I", 1))).start()
    out = uapi.drm_amdgpu_wait_fences.from_buffer_copy(pending.wait().arg)
    assert out.out.status == 1 and out.out.first_signaled == 0
    fails(errno.EINVAL, dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(3, 1, FOREVER), fence_entries(s, (0, seq_a)))
    fails(errno.EINVAL, dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(0, 1, FOREVER), b"")
    fails(errno.EINVAL, dev, client, "AMDGPU_WAIT_FENCES", wait_fences_args(1, 1, FOREVER), fence_entries(s, (0, 99)))


def test_wait_fences_errors_as_amdgpu(s, dev, client):
    """Wait-all takes the fences in order and fails with the first error it meets;
    wait-any fails with the error of the first fence signalled; a fence signalled
    long ago (no longer tracked) counts as signalled without error."""
    bad = s.submit(SdmaIb().write_linear(0x7000000000, [1]), ring=1)
    with pytest.raises(KmdError):
        s.wait(bad, ring=1)
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    ctx2 = call(dev, client, "AMDGPU_CTX", a)[0].out.alloc.ctx_id  # s.ctx is guilty now
    busy = s.submit(SdmaIb().poll_regmem(VA_A, 1), ctx=ctx2)
    good = s.submit(SdmaIb().fence(VA_B, 1), ring=1, ctx=ctx2)
    dev.rings[(DMA, 1)].fence(good).wait(10)

    def entries(*triples):
        out = b""
        for ctx, ring, seq in triples:
            out += bytes(uapi.drm_amdgpu_fence(ctx_id=s.ctx if ctx is s else ctx, ip_type=DMA, ring=ring, seq_no=seq))
        return out

    def result(count, wait_all, data, timeout=0):
        return dev.ioctl(client, uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES,
                         bytes(wait_fences_args(count, wait_all, timeout)), data)

    # wait-all: the failed fence first -> its error (from the read: a PendingReply)
    r = result(2, 1, entries((s, 1, bad), (ctx2, 0, busy)))
    assert isinstance(r, PendingReply)
    with pytest.raises(KmdError) as e:
        r.wait()
    assert e.value.errno == errno.EFAULT
    # wait-all: a busy fence before it -> timed out, no error (amdgpu stops at the first busy one)
    out = uapi.drm_amdgpu_wait_fences.from_buffer_copy(result(2, 1, entries((ctx2, 0, busy), (s, 1, bad))).arg)
    assert out.out.status == 0
    # wait-any: the first signalled one is the failed one -> its error
    with pytest.raises(KmdError) as e:
        result(3, 0, entries((ctx2, 0, busy), (s, 1, bad), (ctx2, 1, good))).wait()
    assert e.value.errno == errno.EFAULT
    # wait-any: a good one signalled before it in the array -> status 1, no error
    out = uapi.drm_amdgpu_wait_fences.from_buffer_copy(
        result(3, 0, entries((ctx2, 0, busy), (ctx2, 1, good), (s, 1, bad))).arg)
    assert out.out.status == 1 and out.out.first_signaled == 1
    # a fence no longer tracked (signalled long ago) counts, without error
    ring1 = dev.rings[(DMA, 1)]
    ring1.fences.pop(bad)
    out = uapi.drm_amdgpu_wait_fences.from_buffer_copy(result(2, 1, entries((s, 1, bad), (ctx2, 1, good))).arg)
    assert out.out.status == 1
    out = uapi.drm_amdgpu_wait_fences.from_buffer_copy(result(2, 0, entries((ctx2, 1, good), (s, 1, bad))).arg)
    assert out.out.status == 1 and out.out.first_signaled == 1  # the first untracked one, as amdgpu
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert dev.rings[(DMA, 0)].fence(busy).wait(10)


def test_closing_a_bo_under_a_running_job_defers_the_free(s, dev, client):
    used = dev.memory.vram_allocator.used
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1).constant_fill(VA_A + 64, 0x11, 4096))
    c = uapi.drm_gem_close()
    c.handle = s.b
    call(dev, client, "GEM_CLOSE", c)
    assert dev.memory.vram_allocator.used == used  # still held by the job
    dev.check_invariants()
    s.bo(s.a).write(0, struct.pack("<I", 1))
    s.wait(seq)
    assert dev.memory.vram_allocator.used == used - 65536


def test_a_bo_only_mapped_in_the_vm_outlives_the_files_jobs_in_flight(s, dev, client):
    # Not in the job's BO list, but reachable through the VM: its memory (and its
    # physical range) is not handed to anyone else before the job is done.
    extra = gem_create(dev, client, 65536)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, extra, 0x40000000, 65536))
    offset = client.bos[extra].gpu_offset
    used = dev.memory.vram_allocator.used
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=extra))
    assert dev.memory.vram_allocator.used == used
    other = dev.open_file(pid=2, uid=2, comm="other")
    try:
        h = gem_create(dev, other, 65536)
        assert other.bos[h].gpu_offset != offset    # the range is still the job's
        dev.check_invariants()
        s.bo(s.a).write(0, struct.pack("<I", 1))
        s.wait(seq)
        assert dev.memory.vram_allocator.used == used   # extra freed, other's BO allocated
        dev.check_invariants()
    finally:
        dev.close_file(other)


def test_user_fence(s, dev, client):
    """The FENCE chunk (amdgpu_cs_p1_user_fence): 8 bytes at any offset inside a
    one-page BO get the seq once the job is done."""
    page = gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    for offset in (64, 4088, 4):
        f = uapi.drm_amdgpu_cs_chunk_fence(handle=page, offset=offset)
        seq = s.submit(SdmaIb().nop(), extra_chunks=chunk(uapi.AMDGPU_CHUNK_ID_FENCE, bytes(f)), nchunks=2)
        s.wait(seq)
        assert s.bo(page).read(offset, 8) == struct.pack("<Q", seq)


@pytest.mark.parametrize("handle,offset,why", [
    (999, 0, "no such BO (amdgpu: EINVAL)"),
    ("big", 0, "a BO of more than one page"),
    ("page", 4089, "past the end"),
    ("page", 1 << 32, "far past the end"),
    ("userptr", 0, "a userptr BO"),
])
def test_user_fence_refused(s, dev, client, handle, offset, why):
    h = {"big": s.b, "page": gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)}.get(handle, handle)
    if handle == "userptr":  # a userptr BO of this process's own page (amdgpu_ttm_tt_get_usermm)
        from .test_userptr import address, anon, userptr
        me = dev.open_file(pid=os.getpid(), uid=os.getuid(), comm="pytest", render=True)
        s = Setup(dev, me)
        client, page = me, anon(mmap.PAGESIZE)
        h = userptr(dev, me, address(page), mmap.PAGESIZE)
    f = uapi.drm_amdgpu_cs_chunk_fence(handle=h, offset=offset & 0xFFFFFFFF if offset < 1 << 32 else 0xFFFFFFFF)
    fails(errno.EINVAL, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 2),
          chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 4))) + chunk(uapi.AMDGPU_CHUNK_ID_FENCE, bytes(f)))
    if handle == "userptr":
        dev.close_file(client)


@pytest.mark.parametrize("flag", [uapi.AMDGPU_IB_FLAG_CE, uapi.AMDGPU_IB_FLAG_PREAMBLE, uapi.AMDGPU_IB_FLAG_PREEMPT,
                                  uapi.AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE, uapi.AMDGPU_IB_FLAG_RESET_GDS_MAX_WAVE_ID,
                                  uapi.AMDGPU_IB_FLAGS_SECURE, uapi.AMDGPU_IB_FLAG_EMIT_MEM_SYNC, 0x7F])
def test_cs_accepts_every_ib_flag_of_the_uapi(s, flag):
    s.bo(s.ib).write(0, SdmaIb().fence(VA_A, flag).tobytes())
    c = ib_chunk(VA_IB, 16)
    c.flags = flag
    seq = call(s.dev, s.f, "AMDGPU_CS", cs_args(s.ctx, s.list, 1), chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))[0].out.handle
    assert s.wait(seq) == 0 and s.bo(s.a).read(0, 4) == struct.pack("<I", flag)


def test_cs_refuses_ib_flags_the_uapi_does_not_define(s, dev, client):
    for flags in (1 << 7, 1 << 31):
        c = ib_chunk(VA_IB, 8)
        c.flags = flags
        fails(errno.EINVAL, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 1), chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))
    c = ib_chunk(VA_IB, 8)
    c._pad = 1
    fails(errno.EINVAL, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 1), chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))


def test_cs_checks_in_amdgpus_order(s, dev, client):
    """amdgpu_cs_parser_init: no chunks is EINVAL before the context is looked at, a
    guilty context ECANCELED; dependency entries are counted whole (a partial one at
    the end is ignored)."""
    seq = s.submit(SdmaIb().write_linear(0x7000000000, [1]))
    with pytest.raises(KmdError):
        s.wait(seq)
    fails(errno.EINVAL, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 0), b"")
    fails(errno.ECANCELED, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 1),
          chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 4))))
    other = Setup.__new__(Setup)
    other.__dict__.update(s.__dict__)
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    other.ctx = call(dev, client, "AMDGPU_CTX", a)[0].out.alloc.ctx_id
    dep = bytes(uapi.drm_amdgpu_cs_chunk_dep(ip_type=DMA, ctx_id=other.ctx, handle=0))
    seq = other.submit(SdmaIb().nop(), nchunks=2, extra_chunks=chunk(uapi.AMDGPU_CHUNK_ID_DEPENDENCIES,
                                                                      dep + bytes(4)))
    assert other.wait(seq) == 0


def test_wait_cs_returns_the_fence_error_from_the_read(s, dev, client):
    """amdgpu_cs_wait_ioctl returns fence->error as the ioctl's result: the read()
    fails with it, also when the job failed long before, and with timeout 0."""
    seq = s.submit(SdmaIb().write_linear(0x7000000000, [1]))
    assert dev.rings[(DMA, 0)].fence(seq).wait(10)
    for timeout in (FOREVER, 0):
        pending = s.wait(seq, timeout=timeout, raw=True)
        assert isinstance(pending, PendingReply)  # the write() succeeded
        with pytest.raises(KmdError) as e:
            pending.wait()
        assert e.value.errno == errno.EFAULT


def test_wait_cs_answers_as_amdgpu(s, dev, client):
    """The reply is the union cleared, then `status` (0 signalled, 1 busy)."""
    seq = s.submit(SdmaIb().nop())
    s.wait(seq)
    reply = s.wait(seq, raw=True)
    assert reply.arg == bytes(uapi.drm_amdgpu_wait_cs())
    busy = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    out = uapi.drm_amdgpu_wait_cs.from_buffer_copy(s.wait(busy, timeout=0, raw=True).arg)
    assert out.out.status == 1 and bytes(out)[8:] == bytes(len(bytes(out)) - 8)
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(busy) == 0


def test_gem_wait_idle_waits_for_the_job(s, dev, client):
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    a = uapi.drm_amdgpu_gem_wait_idle()
    a.in_.handle, a.in_.timeout = s.b, 0
    assert call(dev, client, "AMDGPU_GEM_WAIT_IDLE", a)[0].out.status == 1
    a.in_.timeout = time.monotonic_ns() + 20_000_000
    assert call(dev, client, "AMDGPU_GEM_WAIT_IDLE", a)[0].out.status == 1
    threading.Timer(0.05, s.bo(s.a).write, args=(0, struct.pack("<I", 1))).start()
    a.in_.timeout = FOREVER
    assert call(dev, client, "AMDGPU_GEM_WAIT_IDLE", a)[0].out.status == 0
    assert s.wait(seq) == 0


def test_a_pending_wait_is_woken_by_the_fence_callback(s, dev, client):
    """The protocol vdev drives on its loop: subscribe(wake) hangs callbacks on the
    fences; the signalling thread calls wake(); ready() then holds and finish()
    answers. No thread waits and nothing polls."""
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    pending = s.wait(seq, raw=True)
    assert isinstance(pending, PendingReply) and pending.deadline is None
    woken = threading.Event()
    threads = []
    cancel = pending.subscribe(lambda: (threads.append(threading.current_thread().name), woken.set()))
    assert not pending.ready() and not woken.is_set()
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert woken.wait(10) and pending.ready()
    # The interrupt handler signals fences, run on the ring's own worker right after
    # it raised the end-of-job trap (kmd/irq.py): no thread hand-off on the way.
    assert threads == ["ring-sdma0"]
    cancel()
    assert uapi.drm_amdgpu_wait_cs.from_buffer_copy(pending.finish().arg).out.status == 0
    assert not dev.rings[(DMA, 0)].fence(seq)._callbacks  # nothing left hanging on the fence


def test_at_most_max_ibs_per_submission(s, dev, client):
    """amdgpu_cs_p1_ib: more IBs than amdgpu_ring_max_ibs for the IP (49 for SDMA) is
    EINVAL, and nothing is queued; 49 run."""
    s.bo(s.ib).write(0, SdmaIb().nop().tobytes())
    one = chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(ib_chunk(VA_IB, 4)))
    fails(errno.EINVAL, dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 50), one * 50)
    assert all(r.emitted_seq == 0 for r in dev.rings.values())
    seq = call(dev, client, "AMDGPU_CS", cs_args(s.ctx, s.list, 49), one * 49)[0].out.handle
    assert s.wait(seq) == 0


def test_wait_cs_done_is_true_exactly_where_wait_cs_answers_status_0_at_once(s, dev, client):
    """Device.wait_cs_done, which lets the transport answer WAIT_CS in C: True only
    where the dispatch answers at once with the cleared union and status 0."""
    done = dev.wait_cs_done
    seq = s.submit(SdmaIb().nop())
    s.wait(seq)
    assert done(client, s.ctx, DMA, 0, 0, seq)
    assert s.wait(seq, raw=True).arg == bytes(uapi.drm_amdgpu_wait_cs())    # what the C answer writes
    busy = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    assert not done(client, s.ctx, DMA, 0, 0, busy)                          # still running
    bad = s.submit(SdmaIb().write_linear(0x7000000000, [1]))                 # faults
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(busy) == 0
    assert dev.rings[(DMA, 0)].fence(bad).wait(10)
    assert not done(client, s.ctx, DMA, 0, 0, bad)                           # its EFAULT is the dispatch's
    assert not done(client, s.ctx, DMA, 0, 0, bad + 100)                     # never emitted: EINVAL
    assert not done(client, s.ctx + 50, DMA, 0, 0, seq)                      # no such context
    assert not done(client, s.ctx, DMA, 1, 0, seq)                           # no ring instance 1
    assert not done(client, s.ctx, 99, 0, 0, seq)                            # no such IP
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"1\n")
    assert not done(client, s.ctx, DMA, 0, 0, seq)                           # tracing records requests
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"0\n")
    assert done(client, s.ctx, DMA, 0, 0, seq)
    dev.close_file(client)
    assert not done(client, s.ctx, DMA, 0, 0, seq)                           # EBADF's to give
