"""PageTable: mapping, translation, permissions, faults, coalesced copies."""
import numpy as np
import pytest

from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault

from .conftest import RW, arena

VA = 0x1_0000_0000


def test_map_translate_unmap(hw):
    pt = hw.PageTable()
    buf = arena(4 * 4096)
    pt.map(VA, buf, 4096, 2 * 4096, RW)
    assert pt.mapped_pages() == 2
    assert pt.translate(VA + 5) == (buf.ctypes.data + 4096 + 5, RW)
    assert pt.translate(VA + 4096) == (buf.ctypes.data + 8192, RW)
    assert pt.translate(VA + 8192) == (None, 0)
    pt.unmap(VA, 4096)
    assert pt.mapped_pages() == 1
    assert pt.translate(VA) == (None, 0)
    pt.unmap(VA + 4096, 4096)
    assert pt.mapped_pages() == 0


@pytest.mark.parametrize("args", [(VA + 1, 0, 4096), (VA, 0, 100), (VA, 0, 0), (VA, 4096, 16384)])
def test_map_rejects_bad_ranges(hw, args):
    va, off, size = args
    with pytest.raises(ValueError):
        hw.PageTable().map(va, arena(16384), off, size, RW)


def test_map_rejects_bad_buffers(hw):
    pt = hw.PageTable()
    with pytest.raises(TypeError):
        pt.map(VA, np.zeros(1024, np.uint32), 0, 4096, RW)
    ro = arena(4096)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        pt.map(VA, ro, 0, 4096, RW)
    with pytest.raises(ValueError):
        pt.map(VA, arena(4096), 0, 4096, 0x100)


def test_read_write_roundtrip(hw):
    pt = hw.PageTable()
    buf = np.zeros(3 * 4096, np.uint8)
    pt.map(VA, buf, 0, 3 * 4096, RW)
    data = bytes(range(256)) * 40
    pt.write(VA + 100, data)
    assert pt.read(VA + 100, len(data)) == data
    assert buf[100:100 + len(data)].tobytes() == data
    pt.write(VA, np.arange(4, dtype=np.uint32))     # any buffer, raw bytes
    assert pt.read(VA, 16) == np.arange(4, dtype=np.uint32).tobytes()


def test_faults_unmapped_and_permission(hw):
    pt = hw.PageTable()
    pt.map(VA, arena(4096), 0, 4096, PTE_READ)
    pt.map(VA + 4096, arena(4096), 0, 4096, PTE_WRITE)
    with pytest.raises(GpuFault) as e:
        pt.read(VA + 8000, 10)
    assert (e.value.va, e.value.access, e.value.reason) == (VA + 8000, "read", "permission")
    with pytest.raises(GpuFault) as e:
        pt.write(VA + 10, b"x")
    assert e.value == GpuFault(VA + 10, "write", "permission")
    with pytest.raises(GpuFault) as e:
        pt.read(VA - 4, 8)
    assert e.value == GpuFault(VA - 4, "read", "unmapped")
    with pytest.raises(GpuFault) as e:
        pt.fill(VA + 4096, 0, 8192, 4)
    assert e.value == GpuFault(VA + 8192, "write", "unmapped")


def test_fault_leaves_faulting_page_untouched(hw):
    """Pages before the fault are written, the faulting page is never touched."""
    pt = hw.PageTable()
    a, b = np.zeros(8192, np.uint8), np.zeros(4096, np.uint8)
    pt.map(VA, a, 0, 8192, RW)
    pt.map(VA + 8192, b, 0, 4096, PTE_READ)
    with pytest.raises(GpuFault) as e:
        pt.write(VA + 4000, b"\xff" * 9000)
    assert e.value == GpuFault(VA + 8192, "write", "permission")
    assert a[4000:].all() and not a[:4000].any() and not b.any()


def test_copy_fault_reports_first_faulting_side(hw):
    pt = hw.PageTable()
    src, dst = arena(3 * 4096, 1), np.zeros(3 * 4096, np.uint8)
    pt.map(VA, src, 0, 2 * 4096, PTE_READ)             # src VA+2p unmapped
    pt.map(VA + 0x10000, dst, 0, 3 * 4096, RW)
    with pytest.raises(GpuFault) as e:
        pt.copy(VA + 0x10000, VA, 3 * 4096)
    assert e.value == GpuFault(VA + 8192, "read", "unmapped")
    assert (dst[:8192] == src[:8192]).all() and not dst[8192:].any()
    dst[:] = 0
    pt.unmap(VA + 0x10000 + 4096, 4096)                # dst faults first now
    with pytest.raises(GpuFault) as e:
        pt.copy(VA + 0x10000, VA, 3 * 4096)
    assert e.value == GpuFault(VA + 0x10000 + 4096, "write", "unmapped")
    assert (dst[:4096] == src[:4096]).all() and not dst[4096:].any()


def test_copy_many_pages_across_discontiguous_bos(hw):
    """Two BOs mapped back to back in VA but apart in host memory."""
    pt = hw.PageTable()
    a, b = np.zeros(5 * 4096, np.uint8), np.zeros(7 * 4096, np.uint8)
    src = arena(64 * 4096, 2)
    pt.map(VA, a, 0, 5 * 4096, RW)
    pt.map(VA + 5 * 4096, b, 0, 7 * 4096, RW)
    pt.map(VA + 0x100000, src, 0, src.nbytes, PTE_READ)
    pt.copy(VA + 123, VA + 0x100000 + 77, 12 * 4096 - 123)
    joined = np.concatenate([a, b])
    assert (joined[123:] == src[77:77 + 12 * 4096 - 123]).all()
    assert not joined[:123].any()


def test_coalesced_mapping_of_views(hw):
    """Views of one arena mapped at scattered VAs: coalescing must follow host order."""
    pt = hw.PageTable()
    big = arena(16 * 4096, 3)
    # Map pages in reverse order so host-contiguity and VA-contiguity disagree.
    for i in range(16):
        pt.map(VA + i * 4096, big, (15 - i) * 4096, 4096, RW)
    got = pt.read(VA, 16 * 4096)
    want = b"".join(big[(15 - i) * 4096:(16 - i) * 4096].tobytes() for i in range(16))
    assert got == want


@pytest.mark.parametrize("elem", [1, 4])
def test_fill(hw, elem):
    pt = hw.PageTable()
    buf = np.zeros(4 * 4096, np.uint8)
    pt.map(VA, buf, 0, buf.nbytes, RW)
    pt.fill(VA + 3, 0x11223344, 3 * 4096 + 5, elem)
    n = 3 * 4096 + 5
    want = (b"\x44" * n) if elem == 1 else (bytes([0x44, 0x33, 0x22, 0x11]) * n)[:n]
    assert buf[3:3 + n].tobytes() == want
    assert not buf[:3].any() and not buf[3 + n:].any()
    with pytest.raises(ValueError):
        pt.fill(VA, 0, 4, 2)


def test_remap_replaces_and_pin_keeps_buffers(hw):
    pt = hw.PageTable()
    a, b = arena(4096, 4), arena(4096, 5)
    pt.map(VA, a, 0, 4096, RW)
    pin = pt.pin()
    pt.map(VA, b, 0, 4096, PTE_READ | PTE_EXEC)
    assert pt.translate(VA) == (b.ctypes.data, PTE_READ | PTE_EXEC)
    assert pt.mapped_pages() == 1
    assert any(x is a for x in pin.buffers)
    assert [x is b for x in pt.pin().buffers] == [True]
    pt.unmap(VA, 4096)
    assert len(pt.pin()) == 0
    assert len(pin) == 1


def test_zero_length_ops_never_fault(hw):
    pt = hw.PageTable()
    assert pt.read(VA, 0) == b""
    pt.write(VA, b"")
    pt.copy(VA, VA + 4096, 0)
    pt.fill(VA, 0, 0, 4)


def test_top_of_va_space_does_not_wrap(hw):
    pt = hw.PageTable()
    top = (1 << 64) - 4096
    pt.map(top, arena(4096), 0, 4096, RW)
    pt.map(0, arena(4096), 0, 4096, RW)
    with pytest.raises(GpuFault) as e:
        pt.read(top + 4000, 200)
    assert e.value == GpuFault(0, "read", "unmapped")
