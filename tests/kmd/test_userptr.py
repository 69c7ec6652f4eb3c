"""GEM_USERPTR through the dispatch (kmd/userptr.py): the flags and errno values of
amdgpu_gem_userptr_ioctl, and the GPU reading and writing this test process's own
pages at job boundaries (the DRM file is opened with this process's pid)."""
import ctypes
import errno
import mmap
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest

from kmd import userptr as U
from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create, gem_va
from .test_cs import VA_A, Setup

GTT = uapi.AMDGPU_GEM_DOMAIN_GTT
PAGE = mmap.PAGESIZE
VA_USER = VA_A + 16 * MiB


def address(buf) -> int:
    """The address of a buffer's first byte (read-only ones too)."""
    return np.frombuffer(buf, np.uint8).__array_interface__["data"][0]


def userptr_args(addr, size, flags=U.REGISTER | U.VALIDATE | U.ANONONLY):
    return uapi.drm_amdgpu_gem_userptr(addr=addr, size=size, flags=flags)


def userptr(dev, f, addr, size, flags=U.REGISTER | U.VALIDATE | U.ANONONLY) -> int:
    return call(dev, f, "AMDGPU_GEM_USERPTR", userptr_args(addr, size, flags))[0].handle


def anon(size, prot=mmap.PROT_READ | mmap.PROT_WRITE) -> mmap.mmap:
    """Private anonymous memory, page aligned (Python's default, MAP_SHARED, is shmem:
    a file mapping "/dev/zero (deleted)", which ANONONLY refuses, as Linux does)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=prot)


@pytest.fixture
def me(dev):
    """A DRM file of this very process (the userptr owner is the opener)."""
    f = dev.open_file(pid=os.getpid(), uid=os.getuid(), comm="pytest", render=True)
    yield f
    if not f.closed:
        dev.close_file(f)


@pytest.fixture
def buf():
    m = anon(4 * PAGE)
    yield m
    try:
        m.close()
    except BufferError:
        pass


def test_userptr_makes_a_gtt_bo(dev, me, buf):
    h = userptr(dev, me, address(buf), 4 * PAGE)
    bo = me.bos[h]
    assert bo.domain == GTT and bo.size == 4 * PAGE and bo.userptr is not None
    assert bo.userptr.owner.pid == os.getpid() and dev.memory.gtt_used == 4 * PAGE
    a = uapi.drm_amdgpu_gem_op(handle=h, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO)
    info = uapi.drm_amdgpu_gem_create_in.from_buffer_copy(call(dev, me, "AMDGPU_GEM_OP", a)[1])
    assert (info.bo_size, info.domains) == (4 * PAGE, GTT)


@pytest.mark.parametrize("offset,size,flags,err,why", [
    (1, PAGE, U.REGISTER, errno.EINVAL, "address not page aligned"),
    (0, PAGE + 1, U.REGISTER, errno.EINVAL, "size not page aligned"),
    (0, 0, U.REGISTER, errno.EINVAL, "size 0"),
    (0, PAGE, U.REGISTER | 0x10, errno.EINVAL, "unknown flag"),
    (0, PAGE, 0, errno.EACCES, "writable without REGISTER"),
    (0, PAGE, U.VALIDATE | U.ANONONLY, errno.EACCES, "writable without REGISTER, even validated"),
])
def test_refused(dev, me, buf, offset, size, flags, err, why):
    fails(err, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(buf) + offset, size, flags))


def test_readonly_needs_no_register(dev, me, buf):
    assert userptr(dev, me, address(buf), PAGE, U.READONLY)


def test_past_the_user_address_space_is_einval(dev, me):
    fails(errno.EINVAL, dev, me, "AMDGPU_GEM_USERPTR", userptr_args((1 << 47) - PAGE, 2 * PAGE, U.REGISTER))


def test_validate_checks_the_range(dev, me, buf):
    m = anon(2 * PAGE)
    gone = address(m)
    m.close()  # its pages are unmapped now (a new mapping could land there: checked below)
    if U.check_range(os.getpid(), gone, PAGE, False, False)[0] == errno.EFAULT:
        fails(errno.EFAULT, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(gone, PAGE))
        userptr(dev, me, gone, PAGE, U.REGISTER)  # without VALIDATE nothing is checked yet
    # Into an inaccessible page: EFAULT. (A range past the end of one mapping may be
    # covered by the next one in a long-lived process: the hole is made, not assumed.)
    guard = anon(2 * PAGE)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(address(guard) + PAGE), ctypes.c_size_t(PAGE), 0) == 0  # PROT_NONE
    fails(errno.EFAULT, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(guard), 2 * PAGE))
    userptr(dev, me, address(guard), PAGE)  # the page before it is fine
    # Read-only memory: fine for READONLY, EFAULT for a writable userptr.
    ro = anon(PAGE, prot=mmap.PROT_READ)
    fails(errno.EFAULT, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(ro), PAGE))
    assert userptr(dev, me, address(ro), PAGE, U.READONLY | U.VALIDATE | U.ANONONLY)
    assert "is mapped r--" in dev.kmsg.text()


def test_anononly_refuses_file_backed_memory(dev, me):
    shared = mmap.mmap(-1, PAGE)  # MAP_SHARED|MAP_ANONYMOUS is shmem: it has a file too
    fails(errno.EPERM, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(shared), PAGE))
    with tempfile.TemporaryFile() as t:
        t.truncate(PAGE)
        m = mmap.mmap(t.fileno(), PAGE)
        fails(errno.EPERM, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(m), PAGE))
        assert "file-backed" in dev.kmsg.text()
        h = userptr(dev, me, address(m), PAGE, U.REGISTER | U.VALIDATE)  # without ANONONLY: fine
        assert me.bos[h].userptr is not None
        call(dev, me, "GEM_CLOSE", uapi.drm_gem_close(handle=h))
        m.close()


def test_out_of_gtt_is_enomem(dev, me):
    big = anon(128 * MiB)
    fails(errno.ENOMEM, dev, me, "AMDGPU_GEM_USERPTR", userptr_args(address(big), 128 * MiB, U.REGISTER))
    big.close()


def test_a_gone_process_is_efault(dev):
    p = subprocess.Popen(["true"])
    p.wait()
    f = dev.open_file(pid=p.pid, uid=os.getuid(), comm="gone")
    fails(errno.EFAULT, dev, f, "AMDGPU_GEM_USERPTR", userptr_args(0x10000, PAGE, U.REGISTER))
    dev.close_file(f)


def test_no_cpu_map_no_placement_change_no_export(dev, me, buf):
    h = userptr(dev, me, address(buf), PAGE)
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = h
    fails(errno.EPERM, dev, me, "AMDGPU_GEM_MMAP", m)
    fails(errno.EPERM, dev, me, "AMDGPU_GEM_OP",
          uapi.drm_amdgpu_gem_op(handle=h, op=uapi.AMDGPU_GEM_OP_SET_PLACEMENT, value=GTT))
    fails(errno.EPERM, dev, me, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=h))


def test_the_gpu_writes_the_callers_pages(dev, me, buf):
    """CONSTANT_FILL into a userptr BO: the bytes are in this process's buffer when
    the fence has signalled; the bytes the job did not write keep the CPU's."""
    buf[:] = b"\x11" * len(buf)
    s = Setup(dev, me)
    h = userptr(dev, me, address(buf), 4 * PAGE)
    call(dev, me, "AMDGPU_GEM_VA", gem_va(dev, me, h, VA_USER, 4 * PAGE))
    seq = s.submit(SdmaIb().constant_fill(VA_USER + PAGE, 0xC0FFEE11, 2 * PAGE))
    assert s.wait(seq) == 0
    assert buf[:PAGE] == b"\x11" * PAGE
    assert buf[PAGE:3 * PAGE] == struct.pack("<I", 0xC0FFEE11) * (2 * PAGE // 4)
    assert buf[3 * PAGE:] == b"\x11" * PAGE


def test_the_gpu_reads_the_callers_pages(dev, me, buf):
    """A READONLY userptr: the GPU copies out of it the bytes the CPU wrote just
    before the submission; its mapping is never writable (a write is a page fault)."""
    s = Setup(dev, me)
    h = userptr(dev, me, address(buf), 4 * PAGE, U.READONLY | U.VALIDATE)
    call(dev, me, "AMDGPU_GEM_VA", gem_va(dev, me, h, VA_USER, 4 * PAGE))
    mapping = next(m for m in me.vm.mappings() if m.va == VA_USER)
    assert mapping.flags & uapi.AMDGPU_VM_PAGE_WRITEABLE == 0
    buf[:16] = b"first submission"
    assert s.wait(s.submit(SdmaIb().copy_linear(VA_A, VA_USER, 16))) == 0
    assert s.bo(s.a).read(0, 16) == b"first submission"
    buf[:16] = b"second, changed!"
    assert s.wait(s.submit(SdmaIb().copy_linear(VA_A, VA_USER, 16))) == 0
    assert s.bo(s.a).read(0, 16) == b"second, changed!"
    seq = s.submit(SdmaIb().constant_fill(VA_USER, 0, 16))
    with pytest.raises(Exception) as e:
        s.wait(seq)
    assert e.value.errno == errno.EFAULT and buf[:16] == b"second, changed!"


def test_write_back_keeps_cpu_writes_the_job_did_not_overwrite(dev, me, buf):
    """UserPages.end writes back only the bytes that changed in the BO since the copy
    in: a CPU store made meanwhile to other bytes survives."""
    h = userptr(dev, me, address(buf), 4 * PAGE)
    bo = me.bos[h]
    buf[:] = bytes(len(buf))
    assert bo.userptr.begin(bo.storage) == (0, "")
    bo.storage[100:104] = np.frombuffer(b"GPU!", np.uint8)   # what a job writes
    buf[5000:5003] = b"CPU"                                  # what the CPU writes meanwhile
    assert bo.userptr.end(bo.storage) == (0, "")
    assert buf[100:104] == b"GPU!" and buf[5000:5003] == b"CPU"
    assert bo.userptr.active == 0 and bo.userptr.snapshot is None


def test_runs_merge_small_gaps():
    assert U._runs(np.array([0, 1, 2, 10, 200, 201])) == [(0, 11), (200, 202)]


def test_a_job_of_a_process_that_is_gone_fails_with_efault(dev):
    """The owner exits after USERPTR: the next job using the BO fails with EFAULT
    before it runs (logged); the daemon and the rest of the file carry on."""
    p = subprocess.Popen(["sleep", "30"])
    try:
        f = dev.open_file(pid=p.pid, uid=os.getuid(), comm="sleep")
        s = Setup(dev, f)
        h = userptr(dev, f, 0x10000, PAGE, U.REGISTER)
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, VA_USER, PAGE))
    finally:
        p.kill()
        p.wait()
    seq = s.submit(SdmaIb().constant_fill(VA_A, 1, 16))
    with pytest.raises(Exception) as e:
        s.wait(seq)
    assert e.value.errno == errno.EFAULT
    assert "cannot start" in dev.kmsg.text() and "EFAULT" in dev.kmsg.text()
    call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, VA_USER, PAGE, op=uapi.AMDGPU_VA_OP_UNMAP, flags=0))
    assert s.wait(s.submit(SdmaIb().constant_fill(VA_A, 7, 16))) == 0
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 7)
    dev.close_file(f)


def test_gem_info_shows_userptr_bos(dev, me, buf):
    """A userptr BO is a pinned GTT BO to amdgpu_gem_info (amdgpu_bo_print_info)."""
    h = userptr(dev, me, address(buf), PAGE, U.READONLY)
    assert f"\t\t0x{h:08x}: {PAGE:12d} byte GTT pin count 1\n" in dev.debugfs_files()["amdgpu_gem_info"]()
