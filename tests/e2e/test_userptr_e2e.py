"""End to end: GEM_USERPTR (docs/kmd.md, "GEM_USERPTR"). A client hands the device a
page-aligned buffer of its own; an SDMA CONSTANT_FILL writes it and the client sees
the bytes in that buffer once the fence has signalled; an SDMA copy reads it."""
import os

import pytest

from tests.helpers import NOBODY, run_client

CLIENT = """
import mmap, struct, sys
import libvgpu
from vgpu import uapi

M = sys.argv[1]
PAGE = mmap.PAGESIZE
buf = mmap.mmap(-1, 16 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
buf[:] = b"\\x11" * len(buf)

def submit(dev, ctx, bos, packets, ib):
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    with libvgpu.bo_list_create(dev, bos) as bo_list:
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_va.address, len(packets))],
                                resources=bo_list)
        libvgpu.cs_submit(ctx, req)
        return libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)

with libvgpu.device_initialize(M) as dev, libvgpu.cs_ctx_create(dev) as ctx:
    user = libvgpu.create_bo_from_user_mem(dev, buf)
    ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    dst = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    user_va, ib_va, dst_va = (libvgpu.va_range_alloc(dev, n) for n in (user.size, 4096, 4096))
    libvgpu.bo_va_op(user, 0, user.size, user_va.address)
    libvgpu.bo_va_op(ib, 0, 4096, ib_va.address)
    libvgpu.bo_va_op(dst, 0, 4096, dst_va.address)
    # The GPU writes the client's own pages.
    fill = libvgpu.SdmaIb().constant_fill(user_va.address + 4 * PAGE, 0xC0FFEE11, 8 * PAGE)
    print("fill signaled", submit(dev, ctx, [user, ib], fill, ib))
    print("before", buf[:4 * PAGE] == b"\\x11" * (4 * PAGE))
    print("filled", buf[4 * PAGE:12 * PAGE] == struct.pack("<I", 0xC0FFEE11) * (2 * PAGE))
    print("after", buf[12 * PAGE:] == b"\\x11" * (4 * PAGE))
    # The GPU reads what the CPU wrote since.
    buf[:16] = b"written by a CPU"
    copy = libvgpu.SdmaIb().copy_linear(dst_va.address, user_va.address, 16)
    print("copy signaled", submit(dev, ctx, [user, ib, dst], copy, ib))
    print("copied", bytes(dst.cpu_map()[:16]))
    dst.cpu_unmap()
    ib.cpu_unmap()
"""


@pytest.mark.parametrize("uid", [None, NOBODY], ids=["same-uid", "uid-65534"])
def test_the_gpu_writes_and_reads_a_clients_own_buffer(vgpu_mount, uid):
    if uid is not None and os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    r = run_client(CLIENT, vgpu_mount, uid=uid, check=True)
    assert r.stdout.splitlines() == [
        "fill signaled True", "before True", "filled True", "after True",
        "copy signaled True", "copied b'written by a CPU'"], r.stdout + r.stderr
