"""End to end: the SDMA samples and GPU faults through a real mount, clients as
separate processes."""
from pathlib import Path

import pytest

from tests.e2e.test_samples import passed, run_sample
from tests.helpers import read_text, run_client, start_client

SAMPLES = ["sdma_write_linear", "sdma_const_fill", "sdma_copy_linear"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_passes_with_1_mib(vgpu_mount, sample):
    # 1 MiB takes several WRITE_LINEAR packets (test_samples.py runs one page)
    out = passed(run_sample(sample, vgpu_mount, "--size", str(1 << 20)))
    assert "MISMATCH" not in out


def test_ib_reuse_sample_shows_the_bug_then_the_fix(vgpu_mount):
    """samples/sync_bug_ib_reuse.py: an IB slot rewritten while its job is still queued
    behind a blocker runs the new packets (buffer A never filled); waiting for the
    job's fence first fills both buffers. Deterministic: the blocker holds the ring."""
    out = passed(run_sample("sync_bug_ib_reuse", vgpu_mount))
    bug, fix = out.split("fix: wait for job 1's fence")
    assert "buffer A NOT filled: job 1 ran job 2 packets, buffer B filled with 0xBBBBBBBB" in bug
    assert "buffer A filled with 0xAAAAAAAA, buffer B filled with 0xBBBBBBBB" in fix
    assert bug.index("job 2 from slot X, rewritten") < bug.index("CPU sets the flag")
    assert fix.index("CPU sets the flag") < fix.index("waited for job 1's fence") < fix.index("job 2 from slot X")


# A client that maps a BO, lets the GPU write to an unmapped VA, and reports.
FAULTING_CLIENT = r"""
import errno, sys, libvgpu
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
ctx = libvgpu.cs_ctx_create(dev)
ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
va = libvgpu.va_range_alloc(dev, 4096)
libvgpu.bo_va_op(ib, 0, 4096, va.address)
packets = libvgpu.SdmaIb().write_linear(0x7000000000, [1, 2, 3])
ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va.address, len(packets))])
seq = libvgpu.cs_submit(ctx, req)
try:
    libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
    print("no error")
except OSError as e:
    print("wait failed", errno.errorcode[e.errno])
print("state", ctx.query_state())
try:
    libvgpu.cs_submit(ctx, req)
except OSError as e:
    print("resubmit", errno.errorcode[e.errno])
"""

# A well-behaved client: fills a VRAM BO and checks it, in a loop.
GOOD_CLIENT = r"""
import struct, sys, libvgpu
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
ctx = libvgpu.cs_ctx_create(dev)
ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
dst = libvgpu.bo_alloc(dev, 65536, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
va_ib, va_dst = libvgpu.va_range_alloc(dev, 4096), libvgpu.va_range_alloc(dev, 65536)
libvgpu.bo_va_op(ib, 0, 4096, va_ib.address)
libvgpu.bo_va_op(dst, 0, 65536, va_dst.address)
view, ibv = dst.cpu_map(), ib.cpu_map()
with libvgpu.bo_list_create(dev, [ib, dst]) as bl:
    for i in range(int(sys.argv[2])):
        p = libvgpu.SdmaIb().constant_fill(va_dst.address, i, 65536)
        ibv[:len(p) * 4] = p.tobytes()
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ib.address, len(p))], resources=bl)
        libvgpu.cs_submit(ctx, req)
        assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        assert bytes(view) == struct.pack("<I", i) * 16384, i
print("good client done")
"""


def test_fault_is_reported_and_isolated(vgpu_mount):
    good = start_client(GOOD_CLIENT, vgpu_mount, "40")
    bad = run_client(FAULTING_CLIENT, vgpu_mount)
    assert bad.returncode == 0, bad.stderr
    assert "wait failed EFAULT" in bad.stdout
    assert "resubmit ECANCELED" in bad.stdout
    flags = int(bad.stdout.split("state ")[1].split()[0])
    assert flags & 4  # AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    out, err = good.communicate(timeout=120)
    assert good.returncode == 0 and "good client done" in out, err
    kmsg = read_text(Path(vgpu_mount, "dev/kmsg"))
    assert "page fault" in kmsg and "0x007000000000" in kmsg and "GPU fault" in kmsg and "sdma0" in kmsg
    # the daemon is still serving
    r = run_client(GOOD_CLIENT, vgpu_mount, "2")
    assert r.returncode == 0, r.stderr
