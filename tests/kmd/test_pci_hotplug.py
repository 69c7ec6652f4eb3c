"""PCI hot unplug and rescan (kmd/pci_hotplug.py), as Linux does it for amdgpu
(amdgpu_pci_remove -> drm_dev_unplug; drm_ioctl answers -ENODEV once
drm_dev_is_unplugged; a rescan probes the device again), and the sysfs files that
ask for it and that say which resets the rings can do (amdgpu_show_reset_mask)."""
import errno

import pytest

from kmd import pci_hotplug
from kmd.errors import KmdError
from kmd.gpu import PartitionedGpu
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create


def _version():
    v = uapi.drm_version()
    return v


def test_remove_makes_every_open_file_answer_enodev(dev, client):
    handle = gem_create(dev, client)
    assert handle
    dev.sysfs_files()["remove"][1](b"1")
    assert dev.unplugged
    fails(errno.ENODEV, dev, client, "VERSION", _version())
    fails(errno.ENODEV, dev, client, "AMDGPU_GEM_CREATE", uapi.drm_amdgpu_gem_create())
    # a file opened on the stale node gets ENODEV too (drm_open: drm_minor_acquire)
    with pytest.raises(KmdError) as e:
        dev.open_file(pid=1000, uid=1000, comm="late", render=True)
    assert e.value.errno == errno.ENODEV
    assert "remove" not in dev.sysfs_files()   # the device's sysfs directory is gone
    # close still works and frees what the file held
    dev.close_file(client)
    assert dev.memory.bo_count == 0


def test_rescan_brings_the_device_back_and_old_files_stay_dead(dev, client):
    pci_hotplug.remove(dev)
    assert pci_hotplug.rescan(dev) == 1
    assert not dev.unplugged
    fails(errno.ENODEV, dev, client, "VERSION", _version())    # opened before the remove
    g = dev.open_file(pid=1000, uid=1000, comm="new", render=True)
    try:
        assert gem_create(dev, g)
        call(dev, g, "VERSION", _version())
    finally:
        dev.close_file(g)
    assert pci_hotplug.rescan(dev) == 0   # nothing removed: nothing to probe
    assert "amdgpu: finishing device." in dev.kmsg.text()


def test_remove_twice_and_bad_writes_are_harmless(dev):
    remove = dev.sysfs_files()["remove"][1]
    remove(b"0\n")                        # Linux: only a nonzero value removes
    assert not dev.unplugged
    with pytest.raises(KmdError) as e:
        remove(b"x")
    assert e.value.errno == errno.EINVAL
    remove(b"1\n")
    pci_hotplug.remove(dev)               # already gone: nothing more happens
    assert dev.unplugged
    pci_hotplug.rescan(dev)
    assert not dev.unplugged


def test_remove_stops_the_running_job_and_cancels_the_queued_ones(dev, client):
    """amdgpu_device_fini_hw stops the schedulers: the running job (here a POLL_REGMEM
    that would wait for ever) is stopped and a queued one never runs; both fences
    signal with ENODEV, with no crash dump and no GPU reset."""
    from kmd.hw import SdmaIb
    from .test_cs import VA_A, Setup
    s = Setup(dev, client)
    running = s.submit(SdmaIb().poll_regmem(VA_A, 1234))
    queued = s.submit(SdmaIb().fence(VA_A + 8, 5))
    ring = dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)]
    fences = [ring.fence(running), ring.fence(queued)]
    pci_hotplug.remove(dev)
    for fence in fences:
        assert fence.wait(5.0)
        assert fence.error == errno.ENODEV
    assert "GPU reset begin!" not in dev.kmsg.text()
    assert not dev.devcoredumps()


def test_partitioned_gpu_removes_one_function_and_rescans_it():
    gpu = PartitionedGpu(2, vram_size=64 * MiB, gtt_size=64 * MiB, timeout=1.0)
    try:
        a, b = gpu.partitions
        a.sysfs_files()["remove"][1](b"1")
        assert a.unplugged and not b.unplugged
        f = b.open_file(pid=1, uid=0, comm="t", render=True)
        b.close_file(f)
        assert gpu.pci_rescan() == 1
        assert not a.unplugged
    finally:
        gpu.shutdown()


def test_reset_masks_say_what_the_kmd_can_do(dev):
    """amdgpu_show_reset_mask's words, in its order (soft, queue, pipe, full): a ring
    of vgpu is reset alone (its running job aborted, the others untouched:
    Device.job_failed), and the whole GPU by amdgpu_gpu_recover."""
    files = dev.sysfs_files()
    assert files["compute_reset_mask"]() == "queue full \n"
    assert files["sdma_reset_mask"]() == "queue full \n"
    assert "gfx_reset_mask" not in files   # no GFX ring: amdgpu creates it only with gfx rings


def test_remove_stops_the_files_user_queues(dev, client):
    """The queues' workers stop with the device; the dead file's close frees the rest."""
    from .test_cs import Setup
    from .test_userq import GTT, Queue
    s = Setup(dev, client, domain=GTT)
    q = Queue(s)
    assert dev.userqs.by_slot
    pci_hotplug.remove(dev)
    assert not dev.userqs.by_slot and not client.userqs
    assert "stopped: device removed" in dev.kmsg.text()
    assert q.id == 1
