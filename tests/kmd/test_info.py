"""VERSION, GET_CAP and INFO."""
import ctypes
import errno

import pytest

from vgpu import uapi

from .conftest import MiB, call, fails, gem_create, info


def test_version(dev, client):
    v = uapi.drm_version()
    v.name_len, v.date_len, v.desc_len = 16, 3, 0
    out, extra = call(dev, client, "VERSION", v)
    assert out.version_major == 3
    assert extra[:16].rstrip(b"\0") == b"amdgpu" and len(extra) == 19   # amdgpu_drv.c DRIVER_NAME
    assert out.name_len == 6 and out.date_len == 8 and out.desc_len > 0
    v.name_len = 1 << 20
    fails(errno.EINVAL, dev, client, "VERSION", v)


def test_get_cap(dev, client):
    c = uapi.drm_get_cap()
    c.capability = uapi.DRM_CAP_PRIME
    out, _ = call(dev, client, "GET_CAP", c)
    assert out.value == uapi.DRM_PRIME_CAP_IMPORT | uapi.DRM_PRIME_CAP_EXPORT
    c.capability = 0x7777
    fails(errno.EINVAL, dev, client, "GET_CAP", c)


def test_dev_info(dev, client):
    d = uapi.drm_amdgpu_info_device.from_buffer_copy(
        info(dev, client, uapi.AMDGPU_INFO_DEV_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_device)))
    assert d.family == uapi.AMDGPU_FAMILY_AI
    assert d.virtual_address_alignment == 4096
    assert 0 < d.virtual_address_offset < d.virtual_address_max


def test_memory_queries_track_usage(dev, client):
    def u64(q):
        return int.from_bytes(info(dev, client, q, 8), "little")
    assert u64(uapi.AMDGPU_INFO_VRAM_USAGE) == 0
    gem_create(dev, client, MiB)
    gem_create(dev, client, 2 * MiB, uapi.AMDGPU_GEM_DOMAIN_GTT)
    assert u64(uapi.AMDGPU_INFO_VRAM_USAGE) == MiB
    assert u64(uapi.AMDGPU_INFO_GTT_USAGE) == 2 * MiB
    vg = uapi.drm_amdgpu_info_vram_gtt.from_buffer_copy(
        info(dev, client, uapi.AMDGPU_INFO_VRAM_GTT, ctypes.sizeof(uapi.drm_amdgpu_info_vram_gtt)))
    assert vg.vram_size == 64 * MiB and vg.gtt_size == 64 * MiB
    m = uapi.drm_amdgpu_memory_info.from_buffer_copy(
        info(dev, client, uapi.AMDGPU_INFO_MEMORY, ctypes.sizeof(uapi.drm_amdgpu_memory_info)))
    assert m.vram.heap_usage == MiB and m.gtt.heap_usage == 2 * MiB
    assert m.vram.total_heap_size == 64 * MiB


def test_return_size_cuts_the_answer_and_never_pads_it(dev, client):
    """amdgpu_info_ioctl copies min(return_size, the answer's size): a shorter buffer
    gets the head, a longer one the answer alone (its tail is the caller's), and any
    u32 size is taken (no upper bound)."""
    assert len(info(dev, client, uapi.AMDGPU_INFO_VRAM_GTT, 4)) == 4
    assert info(dev, client, uapi.AMDGPU_INFO_ACCEL_WORKING, 16) == (1).to_bytes(4, "little")
    assert len(info(dev, client, uapi.AMDGPU_INFO_TIMESTAMP, 1 << 20)) == 8
    d = info(dev, client, uapi.AMDGPU_INFO_DEV_INFO, 0xFFFFFFFF)
    assert len(d) == ctypes.sizeof(uapi.drm_amdgpu_info_device_userq)


def test_info_without_a_size_is_einval(dev, client):
    """amdgpu_info_ioctl: `if (!info->return_size || ...) return -EINVAL` (the NULL
    return_pointer half is the ioctl transport's: tests/vdev/ioctl/test_pointers.py)."""
    fails(errno.EINVAL, dev, client, "AMDGPU_INFO",
          uapi.drm_amdgpu_info(query=uapi.AMDGPU_INFO_TIMESTAMP, return_size=0, return_pointer=0x1000))


def test_hw_ip(dev, client):
    h = uapi.drm_amdgpu_info_hw_ip.from_buffer_copy(info(
        dev, client, uapi.AMDGPU_INFO_HW_IP_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip),
        query_hw_ip__type=uapi.AMDGPU_HW_IP_DMA))
    assert h.available_rings == 0b11
    # GFX: the IP block is there (it drives the compute rings), without a GFX ring,
    # as Arcturus's amdgpu answers (IGT's amd_queue_reset needs the version)
    g = uapi.drm_amdgpu_info_hw_ip.from_buffer_copy(info(
        dev, client, uapi.AMDGPU_INFO_HW_IP_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip),
        query_hw_ip__type=uapi.AMDGPU_HW_IP_GFX))
    assert (g.hw_ip_version_major, g.hw_ip_version_minor, g.available_rings) == (9, 0, 0)
    assert (g.ib_start_alignment, g.ib_size_alignment) == (32, 32)
    n = info(dev, client, uapi.AMDGPU_INFO_HW_IP_COUNT, 4, query_hw_ip__type=uapi.AMDGPU_HW_IP_GFX)
    assert n == (1).to_bytes(4, "little")
    n = info(dev, client, uapi.AMDGPU_INFO_HW_IP_COUNT, 4, query_hw_ip__type=uapi.AMDGPU_HW_IP_UVD)
    assert n == bytes(4)


@pytest.mark.parametrize("ip", [uapi.AMDGPU_HW_IP_UVD, uapi.AMDGPU_HW_IP_VCE, uapi.AMDGPU_HW_IP_UVD_ENC,
                                uapi.AMDGPU_HW_IP_VCN_DEC, uapi.AMDGPU_HW_IP_VCN_ENC,
                                uapi.AMDGPU_HW_IP_VCN_JPEG, uapi.AMDGPU_HW_IP_VPE])
def test_hw_ip_of_a_block_the_part_lacks_is_all_zeros(dev, client, ip):
    """amdgpu_hw_ip_info answers 0 and a zeroed struct for an IP type it knows whose
    block is absent; IGT's amd_vpe asserts the query succeeds (VPE, Linux 6.7) and
    then skips on available_rings 0. Past the last type it knows: EINVAL."""
    raw = info(dev, client, uapi.AMDGPU_INFO_HW_IP_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip),
               query_hw_ip__type=ip)
    assert raw == bytes(ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip))
    assert info(dev, client, uapi.AMDGPU_INFO_HW_IP_COUNT, 4, query_hw_ip__type=ip) == bytes(4)
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = uapi.AMDGPU_INFO_HW_IP_INFO, ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip)
    a.query_hw_ip.type = uapi.AMDGPU_HW_IP_VPE + 1
    fails(errno.EINVAL, dev, client, "AMDGPU_INFO", a)


@pytest.mark.parametrize("query,size", [(0x7F, 8), (uapi.AMDGPU_INFO_DEV_INFO, 0)])
def test_info_errors(dev, client, query, size):
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = query, size
    fails(errno.EINVAL, dev, client, "AMDGPU_INFO", a)


def test_timestamp_and_fw(dev, client):
    t1 = int.from_bytes(info(dev, client, uapi.AMDGPU_INFO_TIMESTAMP, 8), "little")
    t2 = int.from_bytes(info(dev, client, uapi.AMDGPU_INFO_TIMESTAMP, 8), "little")
    assert t2 >= t1
    fw = uapi.drm_amdgpu_info_firmware.from_buffer_copy(info(
        dev, client, uapi.AMDGPU_INFO_FW_VERSION, 8, query_fw__fw_type=uapi.AMDGPU_INFO_FW_SDMA))
    assert fw.ver != 0


def test_counters_an_mi100_answers(dev, client):
    """VRAM_LOST_COUNTER (u32) and NUM_VRAM_CPU_PAGE_FAULTS (u64) as amdgpu_kms.c answers
    them: vgpu's resets keep VRAM (it is host memory), and every VRAM page is
    CPU-visible, so both stay 0; the answer is min(return_size, its size) as
    copy_to_user's min(size, 4u) / min(size, 8u)."""
    assert info(dev, client, uapi.AMDGPU_INFO_VRAM_LOST_COUNTER, 4) == bytes(4)
    assert info(dev, client, uapi.AMDGPU_INFO_VRAM_LOST_COUNTER, 8) == bytes(4)
    assert info(dev, client, uapi.AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS, 8) == bytes(8)


def test_max_ibs_per_ip_as_amdgpu_ring_max_ibs(dev, client):
    """AMDGPU_INFO_MAX_IBS: one u32 per HW IP (AMDGPU_HW_IP_NUM of Linux 6.7+, VPE
    included): GFX 192, COMPUTE 125, VCN_JPEG 16, the others 49."""
    raw = info(dev, client, uapi.AMDGPU_INFO_MAX_IBS, 4 * 10)
    assert list((ctypes.c_uint32 * 10).from_buffer_copy(raw)) == [192, 125, 49, 49, 49, 49, 49, 49, 16, 49]
    assert info(dev, client, uapi.AMDGPU_INFO_MAX_IBS, 8) == raw[:8]


def test_ras_features_einval_without_a_ras_context(dev, client):
    """vgpu models no RAS (no ECC, no error injection): amdgpu without a RAS context
    answers RAS_ENABLED_FEATURES with EINVAL, and so does vgpu."""
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = uapi.AMDGPU_INFO_RAS_ENABLED_FEATURES, 8
    fails(errno.EINVAL, dev, client, "AMDGPU_INFO", a)


def test_timestamp_query_answers_as_info_timestamp_or_declines(dev, client):
    """Device.timestamp_query (the clock read vdev.ioctl.fast answers in C): the value
    INFO TIMESTAMP gives where dispatch would answer it and record nothing, else None."""
    def via_info(f):
        return int.from_bytes(info(dev, f, uapi.AMDGPU_INFO_TIMESTAMP, 8), "little")
    a = via_info(client)
    t = dev.timestamp_query(client)
    b = via_info(client)
    assert a <= t <= b
    master = dev.open_file(pid=2000, uid=1000, comm="card", render=False)   # first card0 open: authenticated
    assert dev.timestamp_query(master) is not None
    other = dev.open_file(pid=2001, uid=1001, comm="card", render=False)    # unauthenticated: EACCES
    assert dev.timestamp_query(other) is None
    fails(errno.EACCES, dev, other, "AMDGPU_INFO", uapi.drm_amdgpu_info(query=uapi.AMDGPU_INFO_TIMESTAMP,
                                                                        return_size=8))
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"1\n")
    assert dev.trace.on and dev.timestamp_query(client) is None   # tracing records every request
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"0\n")
    assert dev.timestamp_query(client) is not None
    dev.close_file(other)
    assert dev.timestamp_query(other) is None
    dev.sysfs_files()["remove"][1](b"1")
    assert dev.timestamp_query(client) is None and dev.timestamp_query(master) is None   # ENODEV
