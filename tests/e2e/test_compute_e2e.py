"""The compute ring through a real mount: both compute samples, a fault's crash dump
with every section, and an endless kernel caught by the ring timeout."""
import os
import re

from tests.e2e.test_samples import passed, run_sample
from tests.helpers import read_text, run_client

SECTIONS = ["header", "process", "context", "ring", "fault", "ib", "waves", "kernel", "vm", "bo list"]


def test_vector_add_sample(vgpu_mount):
    out = passed(run_sample("compute_vector_add", vgpu_mount, "--n", "5000"))
    assert "DISPATCH_DIRECT groups=79x1x1" in out and "all 5000 elements of c equal a + b" in out


def test_gpu_fault_sample_and_its_dump(vgpu_mount):
    out = passed(run_sample("gpu_fault", vgpu_mount))
    assert "EFAULT" in out and "GUILTY" in out
    kmsg = read_text(f"{vgpu_mount}/dev/kmsg")
    m = re.search(r"\[comp_1\.0\.0\] GPU fault .* GPU crash dump triggered \(devcd(\d+)\)", kmsg)
    assert m, kmsg
    assert os.listdir(f"{vgpu_mount}/sys/class/devcoredump") == [f"devcd{m.group(1)}"]
    dump = read_text(f"{vgpu_mount}/sys/class/devcoredump/devcd{m.group(1)}/data")
    for name in SECTIONS:
        assert f"=== {name} ===" in dump, name
    assert ">>> " in dump.split("=== kernel ===")[1] and "global_load_dword" in dump


ENDLESS = r"""
import errno, sys
import libvgpu
from libvgpu.code_object import code_object_load
from vgpu import asm, uapi

with libvgpu.device_initialize(sys.argv[1]) as dev, libvgpu.cs_ctx_create(dev) as ctx:
    image = asm.assemble(".kernel spin\n.block 32 1 1\nloop:\n    s_branch loop\n", "spin.s").pack()
    with code_object_load(dev, image) as k, libvgpu.bo_alloc(dev, 4096) as ib_bo, \
            libvgpu.va_range_alloc(dev, 4096) as va:
        libvgpu.bo_va_op(ib_bo, 0, 4096, va.address)
        ib = libvgpu.emit_dispatch(libvgpu.Pm4Ib(), k, grid=(1, 1, 1))
        ib_bo.cpu_map()[:len(ib) * 4] = ib.tobytes()
        ib_bo.cpu_unmap()
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_COMPUTE, [libvgpu.IbInfo(va.address, len(ib))])
        libvgpu.cs_submit(ctx, req)
        try:
            libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
            print("signaled")
        except OSError as e:
            print(errno.errorcode[e.errno])
"""


def test_endless_kernel_is_caught_by_the_timeout(short_timeout_mount):
    path = short_timeout_mount
    r = run_client(ENDLESS, path, check=True)
    assert r.stdout.strip() == "ETIME"
    kmsg = read_text(f"{path}/dev/kmsg")
    assert "ring comp_1.0.0 timeout" in kmsg and "GPU reset succeeded" in kmsg
    m = re.search(r"GPU fault .*job timeout.* GPU crash dump triggered \(devcd(\d+)\)", kmsg)
    assert m, kmsg
    dump = read_text(f"{path}/sys/class/devcoredump/devcd{m.group(1)}/data")
    assert "status: aborted" in dump and "dispatch status: aborted" in dump
    assert "s_branch" in dump.split("=== kernel ===")[1]
