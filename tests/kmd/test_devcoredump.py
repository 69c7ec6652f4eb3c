"""Crash dumps: a fault or hang on SDMA or compute logs one kmsg line, marks the
context guilty and leaves devcd<N> with every section (kmd/devcoredump.py)."""
import errno
import re
import struct
import threading

import pytest

from kmd import devcoredump as D
from kmd.hw import GpuFault, SdmaIb
from kmd.hw.compute import ComputeResult
from vgpu import pm4 as P
from vgpu import uapi
from vgpu.pm4 import Pm4Ib

from .conftest import KmdError, call, gem_create, gem_va
from .test_cs import chunk

VA_IB, VA_CODE, VA_DATA = 0x10000000, 0x20000000, 0x30000000
SECTIONS = ["=== header ===", "=== process ===", "=== context ===", "=== ring ===", "=== fault ===",
            "=== ib ===", "=== vm ===", "=== bo list ==="]
COMPUTE_SECTIONS = ["=== waves ===", "=== kernel ==="]
LINE = re.compile(r"GPU fault .* GPU crash dump triggered \(devcd(\d+)\)")


class Client:
    """A context, an IB BO, an executable code BO and a data BO, all mapped."""

    def __init__(self, dev, f):
        self.dev, self.f = dev, f
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
        self.ctx = call(dev, f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id
        self.ib = gem_create(dev, f, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT)
        self.code = gem_create(dev, f, 4096)
        self.data = gem_create(dev, f, 4096)
        R, W, X = uapi.AMDGPU_VM_PAGE_READABLE, uapi.AMDGPU_VM_PAGE_WRITEABLE, uapi.AMDGPU_VM_PAGE_EXECUTABLE
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.ib, VA_IB, 65536, flags=R))
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.code, VA_CODE, 4096, flags=R | X))
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, self.data, VA_DATA, 4096))
        f.bos[self.code].write(0, struct.pack("<4Q", 0x1111, 0x2222, 0x3333, 0x4444))

    def submit(self, ib, ip=uapi.AMDGPU_HW_IP_COMPUTE) -> int:
        self.f.bos[self.ib].write(0, ib.tobytes())
        c = uapi.drm_amdgpu_cs_chunk_ib()
        c.va_start, c.ib_bytes, c.ip_type = VA_IB, len(ib) * 4, ip
        a = uapi.drm_amdgpu_cs()
        a.in_.ctx_id, a.in_.num_chunks = self.ctx, 1
        return call(self.dev, self.f, "AMDGPU_CS", a, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))[0].out.handle

    def wait(self, seq, ip=uapi.AMDGPU_HW_IP_COMPUTE) -> int:
        a = uapi.drm_amdgpu_wait_cs()
        a.in_.handle, a.in_.ip_type, a.in_.ctx_id, a.in_.timeout = seq, ip, self.ctx, (1 << 64) - 1
        try:
            call(self.dev, self.f, "AMDGPU_WAIT_CS", a)
            return 0
        except KmdError as e:
            return e.errno


class FakeCompute:
    def __init__(self, result=None):
        self.result, self.hang, self.stop = result, result is None, threading.Event()

    def dispatch(self, pt, code_va, **kw):
        if self.hang:
            self.stop.wait(10)
            return ComputeResult("aborted", pc=16, exec=1, sgprs=[0] * 24, vgprs=[[0] * 32] * 4)
        return self.result

    def abort(self):
        self.stop.set()
        return True


@pytest.fixture
def c(dev, client):
    return Client(dev, client)


def dispatch_ib():
    return (Pm4Ib().set_program(VA_CODE, P.rsrc1(4, 24), P.rsrc2(2)).set_num_threads(64)
            .set_user_data([VA_DATA, 0]).dispatch_direct(2).release_mem(VA_DATA, 1))


def the_dump(dev):
    m = LINE.search(dev.kmsg.text())
    assert m, dev.kmsg.text()
    dumps = dev.devcoredumps()
    return dumps[int(m.group(1))]


def test_sdma_fault_dump(dev, c):
    seq = c.submit(SdmaIb().nop().fence(0x7000000, 1), uapi.AMDGPU_HW_IP_DMA)
    assert c.wait(seq, uapi.AMDGPU_HW_IP_DMA) == errno.EFAULT
    dump = the_dump(dev)
    for s in SECTIONS:
        assert s in dump, s
    assert "comm: test" in dump and "pid: 1000" in dump and "guilty: yes" in dump
    assert ">>> 0001: FENCE addr=0x7000000" in dump
    assert "address: 0x7000000 (write, unmapped)" in dump
    assert f"{VA_CODE:#014x}-" in dump and "r-x" in dump


def test_compute_wave_fault_dump(dev, c):
    vgprs = [[lane * 16 + r for lane in range(32)] for r in range(4)]
    bad = ComputeResult("fault", "unmapped", GpuFault(0x9000, "read", "unmapped"), pc=8, workgroup=(1, 0, 0),
                        wave=1, exec=0x0000000F, sgprs=list(range(24)), vgprs=vgprs, instructions=5)
    dev.rings[(uapi.AMDGPU_HW_IP_COMPUTE, 0)].engine._compute = FakeCompute(bad)
    assert c.wait(c.submit(dispatch_ib())) == errno.EFAULT
    line = next(l for l in dev.kmsg.text().splitlines() if "crash dump" in l)
    assert "[comp_1.0.0] GPU fault" in line and "read of VA 0x9000 (unmapped)" in line and "wave PC 0x8" in line
    dump = the_dump(dev)
    for s in SECTIONS + COMPUTE_SECTIONS:
        assert s in dump, s
    assert "DISPATCH_DIRECT groups=2x1x1" in dump and ">>> 0011: DISPATCH_DIRECT" in dump
    assert f"PC: 0x8 (VA {VA_CODE + 8:#x})" in dump and "EXEC: 0x0000000f (4 active lanes)" in dump
    assert "workgroup: (1, 0, 0) wave 1" in dump
    assert "  s0  00000000 00000001" in dump
    assert "  v1  0:00000001 1:00000011 2:00000021 3:00000031\n" in dump   # active lanes only
    kernel = dump.split("=== kernel ===")[1].split("===")[0]
    assert f">>> {VA_CODE + 8:#014x} +0x0008:" in kernel
    assert c.f.contexts[c.ctx].guilty


def test_compute_packet_fault_dump(dev, c):
    assert c.wait(c.submit(Pm4Ib().nop().set_sh_reg(0x100, 5))) == errno.EINVAL
    dump = the_dump(dev)
    assert "reason: bad_register" in dump and ">>> 0001: SET_SH_REG SH+0x100=0x5" in dump
    assert "no dispatch was running" in dump


def test_compute_hang_dump(dev, c):
    dev.rings[(uapi.AMDGPU_HW_IP_COMPUTE, 0)].engine._compute = FakeCompute()
    assert c.wait(c.submit(dispatch_ib())) == errno.ETIME
    text = dev.kmsg.text()
    assert "ring comp_1.0.0 timeout" in text and "GPU reset succeeded" in text
    dump = the_dump(dev)
    assert "status: aborted" in dump and "reason: timeout" in dump and "dispatch status: aborted" in dump


def test_store_keeps_the_last_dumps():
    store = D.CoredumpStore(limit=2)
    assert [store.add(lambda n: f"dump {n}") for _ in range(3)] == [0, 1, 2]
    assert store.snapshot() == {1: "dump 1", 2: "dump 2"}


def test_store_formats_each_dump_once_when_first_asked():
    store, made = D.CoredumpStore(), []
    n = store.add(lambda n: made.append(n) or f"dump {n}")
    assert made == []                       # add() only registers: it runs under the device lock
    assert store.snapshot() == {n: "dump 0"} and store.snapshot() == {n: "dump 0"}
    store.render(n)
    assert made == [0]


def test_dump_is_formatted_outside_the_device_lock(dev, c, monkeypatch):
    """While a dump is being formatted (in the ring thread), other clients' ioctls
    run; the kmsg line and devcd<N> exist from the start, and the fence signals only
    once the text is whole."""
    formatting, release = threading.Event(), threading.Event()
    real = D.format_dump

    def slow_format(snap, n):
        formatting.set()
        assert release.wait(10)
        return real(snap, n)

    monkeypatch.setattr(D, "format_dump", slow_format)
    other = dev.open_file(pid=2000, uid=1000, comm="other", render=True)
    seq = c.submit(SdmaIb().nop().fence(0x7000000, 1), uapi.AMDGPU_HW_IP_DMA)
    assert formatting.wait(10)
    done = []
    t = threading.Thread(target=lambda: done.append(gem_create(dev, other, 4096)))
    t.start()
    t.join(5)
    assert done, "an ioctl of another client waited for the crash dump"
    assert LINE.search(dev.kmsg.text())
    ring = dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)]
    assert not ring.fence(seq).signaled
    release.set()
    assert c.wait(seq, uapi.AMDGPU_HW_IP_DMA) == errno.EFAULT
    assert "address: 0x7000000 (write, unmapped)" in the_dump(dev)
    dev.close_file(other)


def test_a_dump_lists_a_bounded_window_of_a_big_vm(dev, client):
    """A file with thousands of mappings (and no BO list, so its job holds every BO):
    the dump keeps MAX_ENTRIES mappings around the fault and MAX_ENTRIES BOs, and says
    how many it left out; sixteen such dumps stay small, and so does the capture
    under the device lock."""
    c = Client(dev, client)
    n = 3 * D.MAX_ENTRIES
    for i in range(n):
        h = gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
        call(dev, client, "AMDGPU_GEM_VA", gem_va(dev, client, h, 0x100000000 + 2 * 4096 * i, 4096))
    hole = 0x100000000 + 2 * 4096 * (n // 2) + 4096            # between two mappings
    assert c.wait(c.submit(SdmaIb().write_linear(hole, [1]), uapi.AMDGPU_HW_IP_DMA),
                  uapi.AMDGPU_HW_IP_DMA) == errno.EFAULT
    (text,) = dev.devcoredumps().values()
    vm = text.split("=== vm ===")[1].split("===")[0]
    assert f"{D.MAX_ENTRIES} of {n + 3} mappings shown, around the fault" in vm
    assert f"{hole - 4096:#014x}" in vm and f"{hole + 4096:#014x}" in vm
    assert vm.count(" handle ") == D.MAX_ENTRIES
    bos = text.split("=== bo list ===")[1]
    assert bos.count("  handle ") == D.MAX_ENTRIES and f"and {n + 3 - D.MAX_ENTRIES} more BOs" in bos
