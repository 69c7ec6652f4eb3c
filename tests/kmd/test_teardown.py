"""Bounded costs (docs/kmd.md, "Bounded costs"): a closing file is torn down in
slices under the device lock, so other clients' ioctls get in; freeing N objects is
O(N). Real KMD, no FUSE; no timing is asserted."""
import struct
import threading
import time

from kmd import device as kmd_device
from tests.helpers import wait_for
from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import call, gem_create, gem_va
from .test_cs import VA_A, Setup


def _version(dev, f):
    v = uapi.drm_version()
    v.name_len = v.date_len = v.desc_len = 16
    return call(dev, f, "VERSION", v)[0]


def test_a_closing_file_releases_the_device_lock_between_slices(dev):
    big = dev.open_file(pid=10, uid=1000, comm="big")
    other = dev.open_file(pid=11, uid=1001, comm="other")
    for _ in range(10_000):
        gem_create(dev, big, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    closer = threading.Thread(target=dev.close_file, args=(big,))
    closer.start()
    during, worst = 0, 0.0
    while closer.is_alive():
        t = time.monotonic()
        _version(dev, other)
        worst = max(worst, time.monotonic() - t)
        if closer.is_alive():
            during += 1  # answered while the close was still under way
    closer.join()
    print(f"\n{during} VERSION calls answered during the close, worst {worst * 1000:.1f} ms")
    assert during >= 3
    assert dev.memory.bo_count == 0 and big.id not in dev.files
    dev.close_file(other)


def test_mapped_bos_are_unmapped_one_by_one_without_a_scan(dev, client):
    handles = [gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) for _ in range(2000)]
    for i, h in enumerate(handles):
        call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x100000000 + i * 8192, 4096))
    assert len(client.mapped_bos()) == 2000
    for h in handles[::2]:
        call(dev, client, "GEM_CLOSE", uapi.drm_gem_close(handle=h))
    assert [m.va for m in client.vm.mappings()] == [0x100000000 + i * 8192 for i in range(1, 2000, 2)]
    assert {id(b) for b in client.mapped_bos()} == {id(client.bos[h]) for h in handles[1::2]}
    unmap = gem_va(dev, client, handles[1], 0x100000000 + 8192, 0, op=uapi.AMDGPU_VA_OP_UNMAP)
    call(dev, client, "AMDGPU_GEM_VA", unmap)
    assert len(client.vm.mappings()) == 999 and client.vm.page_table.mapped_pages() == 999
    dev.close_file(client)
    assert dev.memory.bo_count == 0


def test_a_bo_list_with_65536_entries(dev, client):
    """BO_LIST keeps each BO once: duplicates are found with a set, not a list scan."""
    handles = [gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) for _ in range(256)]
    s = Setup.__new__(Setup)
    s.dev, s.f = dev, client
    lst = s.bo_list([handles[i % 256] for i in range(65536)])
    assert len(client.bo_lists[lst]) == 256


def test_closing_a_file_with_jobs_in_flight_keeps_its_bos_until_they_finish(dev, client):
    """The BOs a closing file drops while its job runs wait for that job as one
    group, and are all released (in slices) before its fence signals."""
    s = Setup(dev, client)
    extra = [gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) for _ in range(3000)]
    for i, h in enumerate(extra):
        call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x100000000 + i * 4096, 4096))
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    ring = dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)]
    fence = ring.fence(seq)
    wait_for(lambda: ring.running is not None, "the job to start")  # running: not cancelled
    a = s.bo(s.a)
    count = dev.memory.bo_count
    # The close unmaps the VM, which makes a job still reading it fault and finish at
    # once; keep the mappings so that this job runs on until the test lets it go.
    client.vm.clear_all_steps = lambda: iter(())
    client.vm.unmap_bo = lambda bo: None
    dev.close_file(client)
    assert dev.memory.bo_count == count          # every BO waits for the running job
    assert len(dev.zombie_bos) == count
    groups = {id(w) for ws in dev._waiting_by_job.values() for w in ws}
    assert len(groups) == 1                       # ... as one group
    dev.check_invariants()
    a.storage[:4] = memoryview(struct.pack("<I", 1))   # let the POLL_REGMEM finish
    assert fence.wait(10)
    assert dev.memory.bo_count == 0 and not dev.zombie_bos and not dev._waiting_by_job


def test_run_sliced_releases_the_lock_between_slices(dev, monkeypatch):
    monkeypatch.setattr(kmd_device, "SLICE", 0.0)
    seen = []

    def steps():
        for i in range(5):
            seen.append(dev.lock._is_owned())
            yield

    dev.run_sliced(steps())
    assert seen == [True] * 5
    holders = []

    def probe():
        for _ in range(3):
            # Between slices another thread can take the lock.
            holders.append(dev.lock.acquire(timeout=5))
            dev.lock.release()
            yield

    dev.run_sliced(probe())
    assert holders == [True] * 3


def test_debugfs_views_are_formatted_outside_the_device_lock(dev, client, monkeypatch):
    """amdgpu_gem_info, amdgpu_vm_info and vgpu_vm_mappings copy a file's tables under the lock and make their text
    (a line per BO, per mapping: 100,000 of them cost a quarter of a second) outside it."""
    from kmd import debugfs

    held = []

    class Watch(dict):
        def __getitem__(self, key):
            held.append(dev.lock._is_owned())
            return super().__getitem__(key)

    class WatchedPerms(tuple):
        def __iter__(self):
            held.append(dev.lock._is_owned())
            return super().__iter__()

    monkeypatch.setattr(debugfs, "DOMAIN_NAMES", Watch(debugfs.DOMAIN_NAMES))
    monkeypatch.setattr(debugfs, "PERMS", WatchedPerms(debugfs.PERMS))
    h = gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x100000000, 4096))
    assert "byte GTT" in debugfs.gem_info(dev) and "byte GTT" in debugfs.vm_info(dev)
    assert "bo_offset" in debugfs.vm_mappings_info(dev)
    assert held and not any(held)
