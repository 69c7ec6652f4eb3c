"""The fault queries: AMDGPU_INFO_GPUVM_FAULT (Linux 6.x: the last page fault of the
file's VM) and vgpu's VGPU_INFO_LAST_FAULT (the file's last failed job and the devcd<N>
of its crash dump), answered through the dispatch after real faulting jobs."""
import ctypes
import errno

from kmd.hw import SdmaIb
from vgpu import pm4 as P
from vgpu import uapi
from vgpu.pm4 import Pm4Ib

from .test_compute_faults import KERNELS, dispatch
from .test_devcoredump import LINE, VA_CODE, Client, FakeCompute, c  # noqa: F401  (fixture)
from .test_info import info

GPUVM, LAST = uapi.drm_amdgpu_info_gpuvm_fault, uapi.vgpu_info_last_fault
PERM = uapi.VGPU_FAULT_STATUS_PERMISSION_FAULTS_SHIFT


def gpuvm_fault(dev, f):
    return GPUVM.from_buffer_copy(info(dev, f, uapi.AMDGPU_INFO_GPUVM_FAULT, ctypes.sizeof(GPUVM)))


def last_fault(dev, f):
    return LAST.from_buffer_copy(info(dev, f, uapi.VGPU_INFO_LAST_FAULT, ctypes.sizeof(LAST)))


def devcd_in_kmsg(dev) -> int:
    return int(LINE.findall(dev.kmsg.text())[-1])


def test_a_file_with_no_fault_gets_zeros(dev, client):
    assert bytes(gpuvm_fault(dev, client)) == bytes(ctypes.sizeof(GPUVM))
    assert bytes(last_fault(dev, client)) == bytes(ctypes.sizeof(LAST))


def test_sdma_page_fault_is_answered_for_that_file_only(dev, c, root_client):
    seq = c.submit(SdmaIb().nop().fence(0x7000000, 1), uapi.AMDGPU_HW_IP_DMA)
    assert c.wait(seq, uapi.AMDGPU_HW_IP_DMA) == errno.EFAULT
    g = gpuvm_fault(dev, c.f)
    assert g.addr == 0x7000000 and g.status != 0
    # An unmapped page (PERMISSION_FAULTS bit 0) written to (WRITEABLE, RW).
    assert g.status == (1 | uapi.AMDGPU_VM_PAGE_WRITEABLE) << PERM | uapi.VGPU_FAULT_STATUS_RW
    assert g.vmhub == uapi.AMDGPU_VMHUB_TYPE_GFX
    last = last_fault(dev, c.f)
    assert (last.seq_no, last.ctx_id, last.ip_type, last.ip_instance, last.ring, last.error) == \
        (seq, c.ctx, uapi.AMDGPU_HW_IP_DMA, 0, 0, errno.EFAULT)
    assert last.devcd == devcd_in_kmsg(dev)
    assert "address: 0x7000000 (write, unmapped)" in dev.devcoredumps()[last.devcd]
    # Another file's VM never faulted.
    assert bytes(gpuvm_fault(dev, root_client)) == bytes(ctypes.sizeof(GPUVM))
    assert last_fault(dev, root_client).seq_no == 0
    # A short return_size gets the head of the answer, as for every INFO query.
    assert info(dev, c.f, uapi.AMDGPU_INFO_GPUVM_FAULT, 8) == (0x7000000).to_bytes(8, "little")


def test_compute_protection_fault(dev, c):
    source, user_data, regs, err, _ = KERNELS["read_only"]   # a store into the R|X code BO
    seq = dispatch(c, source, user_data, regs)
    assert c.wait(seq) == err == errno.EFAULT
    g = gpuvm_fault(dev, c.f)
    assert VA_CODE <= g.addr < VA_CODE + 4096
    assert g.status == uapi.AMDGPU_VM_PAGE_WRITEABLE << PERM | uapi.VGPU_FAULT_STATUS_RW
    last = last_fault(dev, c.f)
    assert (last.seq_no, last.ip_type, last.error, last.devcd) == \
        (seq, uapi.AMDGPU_HW_IP_COMPUTE, errno.EFAULT, devcd_in_kmsg(dev))


def test_failures_that_are_not_vm_faults_name_their_dump_only(dev, c):
    """A bad packet, a misaligned access (the shader's fault, not the MMU's) and a hang
    leave GPUVM_FAULT as it was; VGPU_INFO_LAST_FAULT names each one's dump."""
    seq = c.submit(Pm4Ib().nop().set_sh_reg(0x100, 5))
    assert c.wait(seq) == errno.EINVAL
    assert gpuvm_fault(dev, c.f).status == 0
    last = last_fault(dev, c.f)
    assert (last.seq_no, last.error, last.devcd) == (seq, errno.EINVAL, devcd_in_kmsg(dev))

    c2 = Client(dev, dev.open_file(pid=1001, uid=1000, comm="t2"))
    source, user_data, regs, err, _ = KERNELS["misaligned"]
    assert c2.wait(dispatch(c2, source, user_data, regs)) == errno.EFAULT
    assert gpuvm_fault(dev, c2.f).status == 0 and last_fault(dev, c2.f).error == errno.EFAULT

    c3 = Client(dev, dev.open_file(pid=1002, uid=1000, comm="t3"))
    dev.rings[(uapi.AMDGPU_HW_IP_COMPUTE, 0)].engine._compute = FakeCompute()
    seq3 = c3.submit(Pm4Ib().set_program(VA_CODE, P.rsrc1(4, 24), P.rsrc2(2)).set_num_threads(32)
                     .dispatch_direct(1))
    assert c3.wait(seq3) == errno.ETIME
    last = last_fault(dev, c3.f)
    assert (last.seq_no, last.error, last.devcd) == (seq3, errno.ETIME, devcd_in_kmsg(dev))
    assert "status: aborted" in dev.devcoredumps()[last.devcd]
    assert gpuvm_fault(dev, c3.f).status == 0
    for f in (c2.f, c3.f):
        dev.close_file(f)
