"""umd streams on user queues (umd/userq_stream.py, docs/umd.md "User queues"), end to
end on a mount: where the queue path behaves differently from CS (no ioctl per
command, fault reports from a queue's crash dump, waits in memory across queues and
streams, the VGPU_USERQ=0 fallback). The rest of tests/umd runs on either path."""
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import _env, read_text

from .test_runtime import PRELUDE, client, ok

ON_QUEUES = {"VGPU_USERQ": "1"}


def test_streams_run_on_user_queues_by_default_and_vgpu_userq_0_falls_back(vgpu_mount):
    code = """
        from umd.userq_stream import UserqStream
        k = hand_kernel("vector_add")
        a = umd.full(64, 1.0, np.float32)
        umd.launch_kernel(k, 1, 64, [a, a, a, 64])
        assert (a.copy_to_host() == 2.0).all()
        s = umd.default_stream()
        print(type(s).__name__, [q is not None for q in getattr(s, "queues", ())])
    """
    r = ok(client(code, vgpu_mount, ON_QUEUES))
    assert r.stdout.split() == ["UserqStream", "[True,", "True]"], r.stdout
    r = ok(client(code, vgpu_mount, {"VGPU_USERQ": "0"}))
    assert r.stdout.split() == ["Stream", "[]"], r.stdout
    kmsg = read_text(f"{vgpu_mount}/dev/kmsg")
    assert "comp_userq" in kmsg and "sdma_userq" in kmsg      # the first client's queues


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_launches_copies_and_events_make_no_ioctl(vgpu_mount, tmp_path):
    code = PRELUDE + """
k = hand_kernel("vector_add")
x, one, y = umd.zeros(64, np.float32), umd.full(64, 1.0, np.float32), umd.zeros(64, np.float32)
t = umd.Stream()
for s in (umd.default_stream(), t):      # queues, kernel upload and arenas: set up before the mark
    umd.launch_kernel(k, 1, 64, [x, one, x, 64], stream=s)
    umd.memcpy_dtod(y.ptr, x.ptr, 256, stream=s)
    umd.Event().record(s)
    s.synchronize()
start, end = umd.Event(), umd.Event()
print("MARK-START", flush=True)
start.record()
for i in range(50):
    umd.launch_kernel(k, 1, 64, [x, one, x, 64])
umd.memcpy_dtod(y.ptr, x.ptr, 256)
umd.memset(x.ptr, 0, 256)
end.record()
t.wait_event(end)
umd.memcpy_dtod(x.ptr, y.ptr, 256, stream=t)
t.synchronize()
end.synchronize()
print("MARK-END", flush=True)
print("OK", (x.copy_to_host() == 52).all(), umd.elapsed_time(start, end) > 0)
"""
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=ioctl,futex,write", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=180, env={**_env(vgpu_mount), **ON_QUEUES}, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("OK True True"), r.stdout
    lines = log.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "MARK-START" in l)
    end = next(i for i, l in enumerate(lines) if "MARK-END" in l)
    between = [l for l in lines[start:end] if "ioctl(" in l]
    assert not between, between[:5]
    # A FUTEX_WAKE only where the engine may be idle: the doorbell alone while it is busy.
    assert 1 <= sum("FUTEX_WAKE" in l for l in lines[start:end]) <= 55


def test_fault_on_a_queue_names_kernel_pc_line_and_address_and_the_stream_goes_on(vgpu_mount):
    r = ok(client("""
        import libvgpu
        k = hand_kernel("read_unmapped", {0x10: 7})
        dst = umd.empty(64, np.float32)
        hole = libvgpu.va_range_alloc(umd.get_device().lv, 1 << 20)   # reserved, never mapped
        dst.fill(3.0)                    # a DMA command before it: the kernel waits for it
        umd.launch_kernel(k, 1, 64, [hole.address, dst])
        s = umd.default_stream()
        old = s.queues
        try:
            umd.synchronize()
            print("no fault")
        except umd.GPUFault as e:
            print(e)
            print("ATTR", e.kernel, hex(e.pc), e.line, hex(e.address), hex(hole.address), e.errno)
        assert s.queues == (None, None)               # freed with the queued work
        v = hand_kernel("vector_add")
        x = umd.to_device(np.arange(64, dtype=np.float32))
        umd.launch_kernel(v, 1, 64, [x, x, x, 64])          # new queues
        x.fill(1.0)
        assert (x.copy_to_host() == 1.0).all()
        print("CONTINUES", all(a is not b and b is not None for a, b in zip(old, s.queues)))
        # a fault in SDMA work is the DMA queue's, named by its commands
        umd.memset(0x7f0000000000, 0, 4096)
        try:
            umd.synchronize()
        except umd.GPUFault as e:
            print("SDMA", e)
    """, vgpu_mount, ON_QUEUES))
    msg, attrs, cont, sdma = r.stdout.strip().splitlines()
    assert "GPU fault in kernel 'read_unmapped' at PC 0x10" in msg and "read_unmapped.s:7" in msg, msg
    assert "EFAULT" in msg and "devcoredump/devcd" in msg
    _, name, pc, line, addr, hole, err = attrs.split()
    assert (name, pc, line, addr, err) == ("read_unmapped", "0x10", "7", hole, "14")
    assert cont == "CONTINUES True", cont          # on new queues
    assert "CONSTANT_FILL 4096 bytes of 0x0 at 0x7f0000000000" in sdma and "EFAULT" in sdma, sdma
    kmsg = read_text(f"{vgpu_mount}/dev/kmsg")
    assert re.search(r"user queue \d+ of client \d+ .* faulted", kmsg), kmsg


def test_launch_blocking_raises_at_the_launch_on_a_queue(vgpu_mount):
    r = ok(client("""
        import libvgpu
        k = hand_kernel("read_unmapped")
        dst = umd.empty(64, np.float32)
        hole = libvgpu.va_range_alloc(umd.get_device().lv, 1 << 20)
        try:
            umd.launch_kernel(k, 1, 64, [hole.address, dst])
            print("returned")
        except umd.GPUFault as e:
            print("raised at launch:", e.kernel, type(umd.default_stream()).__name__)
    """, vgpu_mount, {**ON_QUEUES, "VGPU_LAUNCH_BLOCKING": "1"}))
    assert r.stdout.strip() == "raised at launch: read_unmapped UserqStream"


def test_order_across_queues_and_streams_is_kept_in_memory(vgpu_mount):
    # Long kernels on compute, copies on DMA, another stream waiting for an event: each
    # command must see what the one before it in its stream (or the event) wrote, with
    # no host wait in between. The DMA command logs show the waits are on the GPU.
    r = ok(client("""
        n = 1 << 17
        k = hand_kernel("vector_add")
        s, t = umd.Stream(), umd.Stream()
        a = umd.to_device(np.arange(n, dtype=np.float32))
        b, c, d = umd.zeros(n, np.float32), umd.zeros(n, np.float32), umd.zeros(n, np.float32)
        umd.synchronize()
        b.fill(1.0, stream=s)                                   # DMA
        umd.launch_kernel(k, n // 64, 64, [a, b, c, n], stream=s)   # compute: c = a + 1
        umd.memcpy_dtod(b.ptr, c.ptr, c.nbytes, stream=s)       # DMA: b = c
        umd.launch_kernel(k, n // 64, 64, [a, b, c, n], stream=s)   # compute: c = 2a + 1
        ev = umd.Event().record(s)
        t.wait_event(ev)
        umd.memcpy_dtod(d.ptr, c.ptr, c.nbytes, stream=t)       # another stream, after the event
        t.synchronize()
        want = 2 * np.arange(n, dtype=np.float32) + 1
        assert (d.copy_to_host(stream=t) == want).all()
        assert (c.copy_to_host(stream=s) == want).all()
        big, one64 = umd.empty(8 << 20, np.float32), umd.full(64, 1.0, np.float32)
        umd.synchronize()
        big.fill(7.0, stream=s)                                 # DMA, ms long
        umd.launch_kernel(k, 1, 64, [big, one64, big, 64], stream=s)   # compute waits for it on the GPU
        assert (big.copy_to_host(stream=s)[:66] == [8.0] * 64 + [7.0] * 2).all()
        # ping-pong between the queues with nothing waited for on the host
        x = umd.zeros(64, np.float32)
        one = umd.full(64, 1.0, np.float32)
        y = umd.zeros(64, np.float32)
        for i in range(100):
            umd.launch_kernel(k, 1, 64, [x, one, x, 64], stream=s)
            umd.memcpy_dtod(y.ptr, x.ptr, 256, stream=s)
            umd.memcpy_dtod(x.ptr, y.ptr, 256, stream=s)
        assert (x.copy_to_host(stream=s) == 100).all()
        print("OK")
    """, vgpu_mount, {**ON_QUEUES, "VGPU_DEBUG": "cmd"}))
    assert r.stdout.strip() == "OK"
    assert "POLL_REGMEM u32 at" in r.stderr      # DMA waited for compute on the GPU
    assert re.search(r"WAIT_REG_MEM .*>=", r.stderr), r.stderr[-3000:]


def test_events_time_work_on_both_queues(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        n = 1 << 16
        a = umd.full(n, 1.0, np.float32)
        start, mid, end = umd.Event(), umd.Event(), umd.Event()
        start.record()
        for _ in range(3):
            umd.launch_kernel(k, n // 64, 64, [a, a, a, n])
        mid.record()
        umd.memset(a.ptr, 0, a.nbytes)
        end.record()
        end.synchronize()
        assert start.query() and mid.query() and end.query()
        t0, t1, t2 = start.timestamp(), mid.timestamp(), end.timestamp()
        assert 0 < t0 <= t1 <= t2, (t0, t1, t2)
        assert umd.elapsed_time(start, mid) > 0
        assert (a.copy_to_host() == 0).all()
        print("OK")
    """, vgpu_mount, ON_QUEUES))
    assert r.stdout.strip() == "OK"


def test_profiled_launches_on_a_queue_stream_run_on_its_cs_twin(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        a = umd.full(256, 1.0, np.float32)
        umd.launch_kernel(k, 4, 64, [a, a, a, 256])            # on the queue
        with umd.profile() as prof:
            umd.launch_kernel(k, 4, 64, [a, a, a, 256])        # on the CS twin, after it
        umd.launch_kernel(k, 4, 64, [a, a, a, 256])            # on the queue, after the twin
        assert prof.launches[0].counters["waves"] == 8, prof.launches[0].counters
        assert (a.copy_to_host() == 8.0).all(), a.copy_to_host()[:4]
        print("OK")
    """, vgpu_mount, ON_QUEUES))
    assert r.stdout.strip() == "OK"


def test_hang_on_a_queue_is_a_gpu_hang(short_timeout_mount):
    r = ok(client("""
        image = asm.assemble(".kernel spin\\n.block 32 1 1\\nloop:\\n    s_branch loop\\n", "spin.s").pack()
        k = umd.kernel_from_code_object(image, "spin.s")
        umd.launch_kernel(k, 1, 32, [])
        try:
            umd.synchronize()
            print("no hang")
        except umd.GPUHang as e:
            print(e)
        x = umd.to_device(np.arange(8, dtype=np.int32))
        x.fill(0)
        assert (x.copy_to_host() == 0).all()
    """, short_timeout_mount, ON_QUEUES))
    assert "GPU hang: kernel 'spin'" in r.stdout and "user queue" in r.stdout, r.stdout
    assert re.search(r"ring comp_userq\d+ timeout", read_text(f"{short_timeout_mount}/dev/kmsg"))


def test_dispatch_packets_are_emit_dispatch_and_the_release():
    # The queue path builds a dispatch from cached register packets; it must be the
    # PM4 libvgpu.emit_dispatch and the CS path's end-of-kernel RELEASE_MEM give (no mount).
    import libvgpu
    from umd.userq_stream import dispatch_packets
    from vgpu import pm4 as P

    class Loaded:
        code_va, rsrc1 = 0x1000400, P.rsrc1(8, 16)

        def rsrc2(self, user_sgprs):
            return P.rsrc2(user_sgprs, 512)

    cache = {}
    for kernarg_va in (0, 0x1_0004_6040):
        for grid in ((1, 1, 1), (7, 3, 2)):
            ib = libvgpu.Pm4Ib()
            libvgpu.emit_dispatch(ib, Loaded(), grid, (64, 2, 1),
                                  libvgpu.kernarg_user_data(kernarg_va) if kernarg_va else [])
            ib.release_mem(0, 0, P.DATA_SEL_NONE, event=P.EVENT_BOTTOM_OF_PIPE_TS, cache=P.RELEASE_WB)
            for _ in range(2):          # the first builds the cached part, the second uses it
                assert dispatch_packets(Loaded(), grid, (64, 2, 1), kernarg_va, cache) == ib.dwords
    assert len(cache) == 2


def test_kmd_queues_can_wait_on_each_others_rptr(short_timeout_mount):
    r = ok(client("""
        import libvgpu
        from libvgpu.userq import UserQueue
        from vgpu import uapi, pm4 as P, sdma as S
        dev = umd.get_device().lv
        c, d = UserQueue(dev, uapi.AMDGPU_HW_IP_COMPUTE), UserQueue(dev, uapi.AMDGPU_HW_IP_DMA)
        # compute: a NOP, then wait until DMA's rptr passed DMA's first packet (a 6-dword poll);
        # DMA: that poll, until compute's rptr passed compute's NOP. In order, both can finish.
        c.write(libvgpu.Pm4Ib().nop().wait_reg_mem(d.ptr_va, 6, func=P.WAIT_FUNC_GE).dwords)
        d.write(libvgpu.SdmaIb().poll_regmem(c.ptr_va, 1, func=S.SDMA_FUNC_GE).nop().dwords)
        c.commit(), d.commit()
        try:
            print("DONE" if c.wait(c.wptr, 10) and d.wait(d.wptr, 10) else "STUCK")
        except libvgpu.VgpuError as e:
            print("STUCK", e)
    """, short_timeout_mount))
    assert r.stdout.startswith("DONE"), r.stdout
