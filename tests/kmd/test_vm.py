"""GEM_VA: map, unmap, replace, clear; page flags reach the hardware page table."""
import errno

import pytest

from kmd import hw
from kmd.vm import VA_END, VA_START
from vgpu import uapi

from .conftest import call, fails, gem_create, gem_va

VA = 0x100000000
RW = uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE


def test_map_write_read_through_page_table(dev, client):
    h = gem_create(dev, client, 3 * 4096)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA, 2 * 4096, offset=4096))
    pt = client.vm.page_table
    pt.write(VA + 4000, b"abcdefgh")
    assert client.bos[h].read(4096 + 4000, 8) == b"abcdefgh"
    assert pt.read(VA + 4000, 8) == b"abcdefgh"
    with pytest.raises(hw.GpuFault):
        pt.read(VA + 2 * 4096, 1)


def test_read_only_mapping_faults_on_write(dev, client):
    h = gem_create(dev, client)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA, 4096, flags=uapi.AMDGPU_VM_PAGE_READABLE))
    with pytest.raises(hw.GpuFault) as e:
        client.vm.page_table.write(VA, b"x")
    assert e.value.va == VA


@pytest.mark.parametrize("va,size,offset,why", [
    (VA + 1, 4096, 0, "va misaligned"),
    (VA, 4095, 0, "size misaligned"),
    (VA, 4096, 100, "offset misaligned"),
    (VA, 0, 0, "zero size"),
    (0, 4096, 0, "below the VA range"),
    (VA_END - 4096, 8192, 0, "past the VA range"),
    (VA, 3 * 4096, 0, "past the BO end"),
])
def test_map_refused(dev, client, va, size, offset, why):
    h = gem_create(dev, client, 8192)
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, va, size, offset=offset))


def test_overlap_refused_and_unmap(dev, client):
    h = gem_create(dev, client, 8192)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA, 8192))
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA + 4096, 8192))
    fails(errno.ENOENT, dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA + 4096, 8192, op=uapi.AMDGPU_VA_OP_UNMAP))
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA, 8192, op=uapi.AMDGPU_VA_OP_UNMAP))
    assert client.vm.page_table.mapped_pages() == 0
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA + 4096, 8192))


def test_other_errors(dev, client):
    h = gem_create(dev, client)
    fails(errno.ENOENT, dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, 999, VA, 4096))
    a = gem_va(dev, client, h, VA, 4096, op=77)
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", a)
    a = gem_va(dev, client, h, VA, 4096, flags=1 << 20)
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", a)
    a = gem_va(dev, client, h, VA, 4096)
    a._pad = 1
    fails(errno.EINVAL, dev, client, "AMDGPU_GEM_VA", a)


def test_replace_and_clear_split_mappings(dev, client):
    a, b = gem_create(dev, client, 4 * 4096), gem_create(dev, client, 4096)
    client.bos[a].write(0, bytes(range(16)) * 1024)
    client.bos[b].write(0, b"B" * 4096)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, a, VA, 4 * 4096))
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, b, VA + 4096, 4096, op=uapi.AMDGPU_VA_OP_REPLACE))
    pt = client.vm.page_table
    assert pt.read(VA + 4096, 4) == b"BBBB"
    assert pt.read(VA + 2 * 4096, 16) == client.bos[a].read(2 * 4096, 16)
    assert len(client.vm.mappings()) == 3
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, 0, VA + 2 * 4096, 4096, op=uapi.AMDGPU_VA_OP_CLEAR))
    assert [(m.va - VA, m.size) for m in client.vm.mappings()] == [(0, 4096), (4096, 4096), (3 * 4096, 4096)]
    assert pt.mapped_pages() == 3
    with pytest.raises(hw.GpuFault):
        pt.read(VA + 2 * 4096, 1)


def test_close_handle_unmaps(dev, client):
    h = gem_create(dev, client)
    call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, VA_START, 4096))
    c = uapi.drm_gem_close()
    c.handle = h
    call(dev, client, "GEM_CLOSE", c)
    assert client.vm.mappings() == [] and client.vm.page_table.mapped_pages() == 0
