"""Device memory (kmd.memory, kmd.shmem): every BO is one shared-memory file mapped
into its domain's aperture; freed ranges read as zero; the store cleans up after
itself and after dead daemons; scale and the BO limit. Real KMD, no FUSE."""
import errno
import fcntl
import mmap
import os
import stat

import numpy as np
import pytest

from kmd import shmem
from kmd.device import Device
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create


def _mmap_offset(dev, f, handle) -> int:
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = handle
    return call(dev, f, "AMDGPU_GEM_MMAP", m)[0].out.addr_ptr


def test_a_bo_is_one_file_shared_with_its_aperture(dev, client):
    for domain in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT):
        bo = client.bos[gem_create(dev, client, 3 * 4096, domain)]
        st = os.stat(bo.path)
        assert (st.st_size, stat.S_IMODE(st.st_mode), st.st_uid) == (3 * 4096, 0o600, client.uid)
        heap = dev.memory.heaps[domain]
        assert np.shares_memory(bo.storage, heap.window)
        with open(bo.path, "r+b") as fobj:
            m = mmap.mmap(fobj.fileno(), 3 * 4096)
        m[5000:5004] = b"cpu!"                      # a client's store...
        assert bo.read(5000, 4) == b"cpu!"          # ...is the engines' byte
        heap.window[bo.gpu_offset + 8000] = 0x7F    # and the other way round
        assert m[8000] == 0x7F
        m.close()


def test_a_freed_range_reads_zero_and_its_file_is_gone(dev, client):
    h = gem_create(dev, client, 8192)
    bo = client.bos[h]
    bo.write(0, b"x" * 8192)
    path, offset = bo.path, bo.gpu_offset
    fobj = open(path, "r+b")
    m = mmap.mmap(fobj.fileno(), 8192)              # a mapping that outlives the BO
    call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=h))
    assert not os.path.exists(path)
    assert not dev.memory.vram.window[offset: offset + 8192].any()
    # The same range, handed out again, starts at zero and does not reach the old mapping.
    bo2 = client.bos[gem_create(dev, client, 8192)]
    assert bo2.gpu_offset == offset and bo2.read(0, 8192) == bytes(8192)
    bo2.write(0, b"new owner")
    assert m[:9] == b"xxxxxxxxx"
    m.close()
    fobj.close()


def test_the_store_directory_is_private_and_removed_at_shutdown():
    d = Device(vram_size=MiB, gtt_size=MiB)
    path = d.memory.store.path
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o711
    finally:
        d.shutdown()
    assert not os.path.exists(path)


def test_clean_stale_removes_only_dead_daemons_stores(tmp_path):
    live = shmem.ShmemStore(MiB, str(tmp_path))
    dead = tmp_path / "vgpu-0123456789abcdef"
    dead.mkdir()
    (dead / shmem.LOCK_NAME).touch()
    (dead / "leftover").write_bytes(b"x" * 4096)
    other = tmp_path / "not-vgpu"
    other.mkdir()
    assert shmem.clean_stale(str(tmp_path)) == [str(dead)]
    assert os.path.isdir(live.path) and os.path.isdir(other)
    # The live store's lock is held: nobody else can take it.
    fd = os.open(os.path.join(live.path, shmem.LOCK_NAME), os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            raise AssertionError("a live store's lock was free")
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    live.close()
    assert not os.path.exists(live.path)


def test_clean_stale_leaves_no_fd_on_a_live_stores_lock(tmp_path):
    """A daemon runs clean_stale at start: an fd left on every other live daemon's
    lock would leak one fd per mount (found by the soak, tests/soak.py)."""
    live = shmem.ShmemStore(MiB, str(tmp_path))
    lock = os.path.join(live.path, shmem.LOCK_NAME)

    def fds_on_lock():
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}") == lock
            except OSError:
                pass
        return n

    assert fds_on_lock() == 1          # the store's own
    for _ in range(3):
        assert shmem.clean_stale(str(tmp_path)) == []
    assert fds_on_lock() == 1
    live.close()


def test_a_store_too_small_is_a_clear_error(tmp_path):
    try:
        shmem.ShmemStore(1 << 60, str(tmp_path))
        raise AssertionError("a 1 EiB store was accepted")
    except shmem.StoreError as e:
        assert e.errno == errno.ENOSPC and "VRAM + GTT need" in str(e)


def test_past_the_bo_limit_gem_create_is_enomem(dev, client):
    dev.memory.store.max_bos = dev.memory.bo_count + 3
    handles = [gem_create(dev, client) for _ in range(3)]
    fails(errno.ENOMEM, dev, client, "AMDGPU_GEM_CREATE", _create_args())
    assert "the device's limit of 3 BOs" in dev.kmsg.text()
    call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=handles[0]))
    gem_create(dev, client)                          # room again


def _create_args():
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.alignment, a.in_.domains = 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT
    return a


def test_a_hundred_thousand_live_bos():
    """100,000 BOs of 4 KiB live at once (one file and one mapping each), each with its
    own bytes, then freed by closing the file: nothing is left behind."""
    n = 100_000
    d = Device(vram_size=512 * MiB, gtt_size=16 * MiB)
    try:
        assert d.memory.store.max_bos >= n, "vm.max_map_count too low (the daemon raises it as root)"
        f = d.open_file(pid=1, uid=os.getuid(), comm="many")
        for i in range(n):
            gem_create(d, f, 4096)
        assert d.memory.bo_count == n and d.memory.vram_allocator.used == n * 4096
        for h in (1, n // 2, n):
            d.memory.vram.window[f.bos[h].gpu_offset] = h & 0xFF
        for h in (1, n // 2, n):
            with open(f.bos[h].path, "rb") as fobj:
                assert fobj.read(1)[0] == h & 0xFF
        assert len(os.listdir(d.memory.store.files)) == n
        d.check_invariants()
        d.close_file(f)
        assert d.memory.bo_count == 0 and d.memory.vram_allocator.used == 0
        assert os.listdir(d.memory.store.files) == []
        d.check_invariants()
    finally:
        d.shutdown()


def _pmd_mapped_kib(start: int, end: int) -> int:
    """ShmemPmdMapped of this process's mappings inside [start, end), from smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                lo, hi = (int(x, 16) for x in first.split("-"))
                inside = start <= lo and hi <= end
            elif inside and first == "ShmemPmdMapped:":
                total += int(line.split()[1])
    return total


_THP = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(os.geteuid() != 0 or not _THP, reason="a private tmpfs needs root and THP")
def test_huge_page_store_maps_large_bos_with_pmds():
    """A root daemon's BO files live on a private tmpfs with huge=within_size
    (kmd/shmem.py): a 4 MiB VRAM BO is two huge pages, mapped by PMDs in the aperture,
    and a 4 KiB BO still costs one 4 KiB page. The tmpfs goes with the store."""
    d = Device(vram_size=64 * MiB, gtt_size=16 * MiB, huge_pages=True)
    try:
        store = d.memory.store
        assert store.huge and os.path.ismount(store.files)
        with open("/proc/self/mountinfo") as f:
            line = next(l for l in f if l.split()[4] == store.files)
        assert "tmpfs" in line and shmem.TMPFS_SOURCE in line and "huge=within_size" in line
        f = d.open_file(pid=1000, uid=1000, comm="test", render=True)
        big = f.bos[gem_create(d, f, 4 * MiB, uapi.AMDGPU_GEM_DOMAIN_VRAM)]
        small = f.bos[gem_create(d, f, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)]
        heap = d.memory.vram
        base = heap.window.ctypes.data
        assert base % (2 * MiB) == 0
        heap.window[big.gpu_offset: big.gpu_offset + big.size] = 7   # fault it in through the window
        heap.window[small.gpu_offset: small.gpu_offset + 4096] = 7
        assert _pmd_mapped_kib(base + big.gpu_offset, base + big.gpu_offset + big.size) == 4096
        assert _pmd_mapped_kib(base + small.gpu_offset, base + small.gpu_offset + 4096) == 0
        assert os.stat(big.path).st_blocks * 512 == 4 * MiB
        files = store.files
        d.close_file(f)
    finally:
        d.shutdown()
    assert not os.path.ismount(files) and not os.path.exists(store.path)


@pytest.mark.skipif(os.geteuid() != 0 or not _THP, reason="a private tmpfs needs root and THP")
def test_clean_stale_unmounts_a_dead_daemons_private_tmpfs(tmp_path):
    """A daemon killed with its private tmpfs mounted: the next clean_stale detaches
    the tmpfs and removes the directory."""
    store = shmem.ShmemStore(MiB, str(tmp_path), huge=True)
    assert store.huge
    path, fd = store.create(4096, 0)
    os.close(fd)
    os.close(store._lock_fd)    # what the daemon's death does to its lock
    store._lock_fd = -1
    assert shmem.clean_stale(str(tmp_path)) == [store.path]
    assert not os.path.exists(store.path)
    with open("/proc/self/mountinfo") as f:
        assert store.files not in f.read()
