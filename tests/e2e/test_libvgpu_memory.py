"""End to end: libvgpu memory calls against a mounted vgpu (client code runs in
its own process, as a real program would)."""

from tests.helpers import run_client

PRELUDE = """
import errno, mmap, os, sys
import numpy as np
import libvgpu as lv
from vgpu import uapi
M = sys.argv[1]
MiB = 1 << 20

def file_bytes(bo, size):
    # A separate open of the BO file: the same pages the mapping and the GPU use.
    fd = os.open(os.path.join(M, "bo", format(bo.mmap_offset, "x")), os.O_RDONLY)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)
"""


def test_alloc_map_write_read_back_vram_and_gtt(vgpu_mount):
    r = run_client(PRELUDE + """
with lv.device_initialize(M) as dev:
    for domain in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT):
        before = lv.query_heap_info(dev, domain).heap_usage
        with lv.bo_alloc(dev, MiB, 64 << 10, domain) as bo:
            print(lv.query_heap_info(dev, domain).heap_usage - before >= MiB)
            print(bo.query_info() == lv.BoInfo(MiB, 64 << 10, domain, 0))
            view = bo.cpu_map()
            print(bo.cpu_map() is view)          # reference-counted: same mapping
            a = bo.cpu_map_array(np.uint32)
            a[:] = np.arange(a.size, dtype=np.uint32) * 3 + domain
            print(file_bytes(bo, MiB) == a.tobytes())  # no msync: one copy
            view[:4] = b"vgpu"
            del a, view
            for _ in range(3):
                bo.cpu_unmap()                    # the last one unmaps
            print(bo._map is None)
            expect = (np.arange(MiB // 4, dtype=np.uint32) * 3 + domain).tobytes()
            expect = b"vgpu" + expect[4:]
            print(file_bytes(bo, MiB) == expect)
            b = bo.cpu_map_array(np.uint8)        # a fresh mapping reads the same bytes
            print(b.tobytes() == expect)
            del b
            bo.cpu_unmap()
            print(bo.wait_for_idle(0))
        print(lv.query_heap_info(dev, domain).heap_usage == before)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 18, r.stdout


def test_query_info(vgpu_mount):
    r = run_client(PRELUDE + """
with lv.device_initialize(M) as dev:
    print(dev.version.name == "amdgpu", dev.version.major >= 3)
    info = dev.info
    print(info.family >= uapi.AMDGPU_FAMILY_AI, info.virtual_address_alignment > 0,
          info.virtual_address_offset < info.virtual_address_max)
    print(lv.query_gpu_info(dev).device_id == info.device_id)
    ip = lv.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA)
    print(ip.available_rings != 0, lv.query_hw_ip_count(dev, uapi.AMDGPU_HW_IP_DMA) >= 1)
    t0 = lv.query_timestamp(dev)
    print(lv.query_timestamp(dev) >= t0)
    vram = lv.query_heap_info(dev, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    print(vram.total_heap_size == 64 * MiB)
    print(lv.get_cap(dev, uapi.DRM_CAP_PRIME) & uapi.DRM_PRIME_CAP_EXPORT != 0)
    try:
        lv.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_VPE + 1)   # past every type amdgpu knows
    except lv.VgpuInvalidArgument as e:
        print(e.errno == errno.EINVAL)
    try:
        lv.bo_alloc(dev, 4096, 4096, 0x80)       # no such domain (0x40 is DOORBELL)
    except lv.VgpuInvalidArgument as e:
        print(e.errno == errno.EINVAL and isinstance(e, OSError))
    with lv.cs_ctx_create(dev) as ctx:
        print(ctx.id != 0, ctx.query_state() == 0)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 15, r.stdout


def test_va_map_unmap_replace_clear(vgpu_mount):
    r = run_client(PRELUDE + """
with lv.device_initialize(M) as dev, lv.bo_alloc(dev, 2 * MiB) as bo:
    lo, hi = dev.info.virtual_address_offset, dev.info.virtual_address_max
    with lv.va_range_alloc(dev, 2 * MiB, 2 * MiB) as va:
        print(lo <= va.address and va.address + va.size <= hi, va.address % (2 * MiB) == 0)
        lv.bo_va_op(bo, 0, 2 * MiB, va.address)
        try:
            lv.bo_va_op(bo, 0, 4096, va.address)  # overlaps the mapping
        except lv.VgpuInvalidArgument:
            print(True)
        lv.bo_va_op(bo, 0, 2 * MiB, va.address, op=uapi.AMDGPU_VA_OP_UNMAP)
        try:
            lv.bo_va_op(bo, 0, 2 * MiB, va.address, op=uapi.AMDGPU_VA_OP_UNMAP)
        except lv.VgpuError as e:
            print(e.errno in (errno.ENOENT, errno.EINVAL))
        lv.bo_va_op(bo, 0, 2 * MiB, va.address)
        # REPLACE the first half read-only: the second half of the old mapping stays,
        # so a MAP over the whole range overlaps until CLEAR empties it.
        lv.bo_va_op(bo, MiB, MiB, va.address, uapi.AMDGPU_VM_PAGE_READABLE,
                    uapi.AMDGPU_VA_OP_REPLACE)
        try:
            lv.bo_va_op(bo, 0, 2 * MiB, va.address)
        except lv.VgpuInvalidArgument:
            print(True)
        lv.bo_va_op_raw(dev, None, 0, 2 * MiB, va.address, 0, uapi.AMDGPU_VA_OP_CLEAR)
        lv.bo_va_op(bo, 0, 2 * MiB, va.address)  # the range is free again
        print(True)
    again = lv.va_range_alloc(dev, 2 * MiB, 2 * MiB)
    print(again.address == va.address)            # freed ranges are reused
    again.free()
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 7, r.stdout
