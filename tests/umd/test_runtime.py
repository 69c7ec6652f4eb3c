"""umd runtime end to end: each test mounts a device (tests/conftest.py) and runs
its client code in a separate process, as a program using umd would."""
import re
import textwrap

from tests.helpers import read_text, run_client

PRELUDE = textwrap.dedent("""
    import os, sys
    import numpy as np
    import umd
    from vgpu import asm
    ROOT = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    def hand_kernel(name, line_table=None):
        path = os.path.join(ROOT, "samples", "kernels", name + ".s")
        with open(path) as f:
            return umd.kernel_from_code_object(asm.assemble(f.read(), path).pack(), path, line_table)
""")


def client(code: str, mount_path: str, env_extra: dict | None = None, timeout: float = 120):
    import os
    saved = {k: os.environ.get(k) for k in (env_extra or {})}
    os.environ.update(env_extra or {})
    try:
        return run_client(PRELUDE + textwrap.dedent(code), mount=mount_path, timeout=timeout)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ok(r):
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def test_pool_stats_reuse_and_empty_cache(vgpu_mount):
    r = ok(client("""
        s0 = umd.memory_stats()
        a = umd.empty(1000, np.float32)             # 4000 bytes -> a 4 KiB block
        b = umd.empty(3 << 20, np.uint8)            # 3 MiB -> 4 MiB (2 MiB multiple)
        s1 = umd.memory_stats()
        assert s1["in_use"] == 4096 + (4 << 20), s1
        ptr_a = a.ptr
        del a
        s2 = umd.memory_stats()
        assert s2["in_use"] == 4 << 20 and s2["cached"] == 4096, s2
        c = umd.empty(900, np.int32)                # same size class: the cached block
        assert c.ptr == ptr_a
        s3 = umd.memory_stats()
        assert s3["cache_hits"] == 1 and s3["cached"] == 0, s3
        del b, c
        s4 = umd.memory_stats()
        assert s4["in_use"] == 0 and s4["cached"] == 4096 + (4 << 20) and s4["peak"] == 4096 + (4 << 20), s4
        umd.empty_cache()
        s5 = umd.memory_stats()
        assert s5["cached"] == 0 and s5["reserved"] == 0, s5
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip() == "OK"


def test_size_classes():
    from umd.memory import size_class
    assert [size_class(n) for n in (1, 4096, 4097, 65535, 2 << 20, (2 << 20) + 1, 5 << 20)] == \
        [4096, 4096, 8192, 65536, 2 << 20, 4 << 20, 6 << 20]


def test_memcpy_round_trips_d2d_and_memset(vgpu_mount):
    r = ok(client("""
        rng = np.random.default_rng(0)
        for n in (1, 3, 4096, 65537, (4 << 20) + 5, (8 << 20) + 4099):
            h = rng.integers(0, 256, n, dtype=np.uint8)
            d = umd.to_device(h)
            assert (d.copy_to_host() == h).all(), n
            e = umd.empty_like(d)
            e.copy_to_device(d)
            assert (e.copy_to_host() == h).all(), n
            umd.memset(e.ptr + 1, 0xAB, n - 1) if n > 1 else None
            want = h.copy(); want[1:] = 0xAB; want[0] = h[0]
            assert (e.copy_to_host() == want).all(), n
        for dtype in (np.float32, np.int32, np.uint32):
            h = np.arange(-500, 1500).astype(dtype)
            d = umd.to_device(h)
            assert d.shape == h.shape and d.dtype == h.dtype and d.nbytes == h.nbytes and d.size == h.size
            assert (d.copy_to_host() == h).all()
            assert (umd.full(7, 3, dtype).copy_to_host() == 3).all()
        z = umd.zeros((3, 5), np.float32)
        assert z.copy_to_host().shape == (3, 5) and not z.copy_to_host().any()
        f = umd.full(1000, 1.5, np.float32)
        assert (f.copy_to_host() == 1.5).all() and (np.asarray(f) == 1.5).all()
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip() == "OK"


def test_host_copies_keep_stream_order(vgpu_mount):
    r = ok(client("""
        n = 1 << 18
        k = hand_kernel("vector_add")
        grid = (n + 63) // 64
        a, b, c = (umd.empty(n, np.float32) for _ in range(3))
        one, two = np.full(n, 1.0, np.float32), np.full(n, 2.0, np.float32)
        # a memset queued (not even submitted yet), then H2D of other data: the copy lands last
        umd.memset_d32(a.ptr, np.float32(5.0).view(np.uint32), n)
        umd.memcpy_htod(a.ptr, one)
        assert (a.copy_to_host() == 1.0).all()
        # H2D, then a queued kernel that writes the same buffer: D2H shows the kernel's result
        umd.memcpy_htod(b.ptr, two)
        umd.launch_kernel(k, grid, 64, [a, b, b, n])
        assert (b.copy_to_host() == 3.0).all()
        # a queued kernel that reads a, then H2D into a: the kernel saw the old a
        umd.launch_kernel(k, grid, 64, [a, a, c, n])
        umd.memcpy_htod(a.ptr, two)
        assert (c.copy_to_host() == 2.0).all() and (a.copy_to_host() == 2.0).all()
        # D2H on a stream that waits for another stream's event, with nothing queued after
        # the wait: the copy waits for that event (the kernels are still running on s)
        s, t = umd.Stream(), umd.Stream()
        m = 1 << 20
        x, y = umd.full(m, 1.0, np.float32, stream=s), umd.full(m, 2.0, np.float32, stream=s)
        for _ in range(4):
            umd.launch_kernel(k, m // 64, 64, [x, y, y, m], stream=s)
        t.wait_event(umd.Event().record(s))
        assert (y.copy_to_host(stream=t) == 6.0).all()
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip() == "OK"


def test_host_copy_of_a_non_pool_address_is_an_error(vgpu_mount):
    r = ok(client("""
        import libvgpu
        hole = libvgpu.va_range_alloc(umd.get_device().lv, 1 << 20)   # reserved, never mapped
        a = umd.empty(1024, np.float32)                               # a 4 KiB block
        for what, call in (("memcpy_htod", lambda: umd.memcpy_htod(hole.address, np.ones(16, np.uint8))),
                           ("memcpy_dtoh", lambda: umd.memcpy_dtoh(np.zeros(16, np.uint8), hole.address)),
                           ("memcpy_htod", lambda: umd.memcpy_htod(a.ptr + 8, np.ones(4096, np.uint8))),
                           ("memcpy_dtoh", lambda: umd.memcpy_dtoh(np.zeros(4096, np.uint8), a.ptr + 8))):
            try:
                call()
                print("no error")
            except umd.UMDError as e:
                assert str(e).startswith(what), e
                print(e)
        umd.memcpy_htod(a.ptr, np.arange(1024, dtype=np.float32))     # the device carries on
        assert (a.copy_to_host() == np.arange(1024)).all()
        try:                                                          # would fill a copy of it
            umd.memcpy_dtoh(np.zeros((64, 2), np.uint8)[:, 0], a.ptr)
            raise AssertionError("a non-contiguous host array was accepted")
        except ValueError as e:
            assert "not C-contiguous" in str(e), e
        # the CPU map of a block is kept with it and goes away with its BO
        def bo_maps():
            with open("/proc/self/maps") as f:
                return sum("/vgpu-" in line for line in f)
        before = bo_maps()
        del a
        umd.empty_cache()
        assert bo_maps() == before - 1, (before, bo_maps())
        print("OK")
    """, vgpu_mount))
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "OK" and len(lines) == 5, r.stdout
    hole_msgs, past_msgs = lines[:2], lines[2:4]
    for m in hole_msgs:
        assert re.search(r"device address 0x[0-9a-f]+ is not memory this process allocated with umd", m), m
    for m in past_msgs:
        assert re.search(r"4096 bytes at 0x[0-9a-f]+ run past the end of the allocation that holds it "
                         r"\(a block of 4096 bytes at 0x[0-9a-f]+\)", m), m


def test_stream_ordering_across_rings_and_streams(vgpu_mount):
    r = ok(client("""
        n = 20000
        k = hand_kernel("vector_add")
        s = umd.Stream()
        a = umd.to_device(np.arange(n, dtype=np.float32), stream=s)
        b = umd.empty(n, np.float32)
        c = umd.empty(n, np.float32)
        # fill b on SDMA, add on compute, copy c->b on SDMA, add again: all in stream order
        b.fill(1.0, stream=s)
        umd.launch_kernel(k, (n + 63) // 64, 64, [a, b, c, n], stream=s)
        umd.memcpy_dtod(b.ptr, c.ptr, c.nbytes, stream=s)
        umd.launch_kernel(k, (n + 63) // 64, 64, [a, b, c, n], stream=s)
        assert not s.query() or True
        s.synchronize()
        assert s.query()
        got = c.copy_to_host(stream=s)
        assert (got == 2 * np.arange(n, dtype=np.float32) + 1).all(), got[:8]
        # another stream waits for an event of the first
        t = umd.Stream()
        d = umd.empty(n, np.float32)
        c.fill(5.0, stream=s)
        ev = umd.Event().record(s)
        t.wait_event(ev)
        umd.memcpy_dtod(d.ptr, c.ptr, c.nbytes, stream=t)
        assert (d.copy_to_host(stream=t) == 5.0).all()
        # many launches without a sync point: IBs fill and are submitted on their own
        x = umd.zeros(64, np.float32)
        one = umd.full(64, 1.0, np.float32)
        for i in range(700):
            umd.launch_kernel(k, 1, 64, [x, one, x, 64])
        assert (x.copy_to_host() == 700).all()
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip() == "OK"


def test_events_elapsed_time(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        n = 1 << 16
        a = umd.full(n, 1.0, np.float32)
        start, end = umd.Event(), umd.Event()
        start.record()
        for _ in range(3):
            umd.launch_kernel(k, n // 64, 64, [a, a, a, n])
        end.record()
        end.synchronize()
        assert start.query() and end.query()
        ms = umd.elapsed_time(start, end)
        assert ms > 0, ms
        s1, s2 = umd.Event().record(), umd.Event()
        umd.memset(a.ptr, 0, a.nbytes)
        s2.record()
        assert s2.elapsed_time(s1) <= 0 <= s1.elapsed_time(s2)
        print("OK", ms)
    """, vgpu_mount))
    assert r.stdout.startswith("OK")


def test_objects_keep_their_device(vgpu_mount):
    # A second Device on the mount is a second DRM file (its own VM and pool) and is not
    # current: its arrays, streams and events use it, never the current device.
    r = ok(client("""
        other = umd.Device(os.environ["VGPU_MOUNT"])
        assert umd.get_device() is not other
        a = umd.to_device(np.arange(1024, dtype=np.float32), device=other)
        assert a.device is other and umd.memory_stats(other)["in_use"] == 4096
        assert umd.memory_stats()["in_use"] == 0
        b = umd.empty_like(a, device=other)
        b.copy_to_device(a)
        b.fill(2.0)
        ev = umd.Event(other).record()
        assert ev.stream is umd.default_stream(other) is not umd.default_stream()
        ev.synchronize()
        assert (b.copy_to_host() == 2.0).all()
        s = umd.Stream(other)
        c = umd.empty(16, np.float32, stream=s)
        assert c.device is other and s.device is other
        try:
            umd.Event(other).record(umd.default_stream())
            raise SystemExit("recorded an event on another device's stream")
        except umd.UMDError as e:
            print("refused:", e)
        other.close()
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip().endswith("OK") and "refused: Event.record: the stream is on" in r.stdout


def test_priority_maps_to_the_context(vgpu_mount):
    r = ok(client("""
        from vgpu import uapi
        want = {"high": uapi.AMDGPU_CTX_PRIORITY_HIGH, -1: uapi.AMDGPU_CTX_PRIORITY_HIGH,
                "normal": uapi.AMDGPU_CTX_PRIORITY_NORMAL, 0: uapi.AMDGPU_CTX_PRIORITY_NORMAL,
                "low": uapi.AMDGPU_CTX_PRIORITY_LOW, 1: uapi.AMDGPU_CTX_PRIORITY_LOW}
        for p, prio in want.items():
            s = umd.Stream(priority=p)
            assert s.ctx.priority == prio and s.ctx_priority == prio, (p, s.ctx.priority)
        try:
            umd.Stream(priority="urgent")
            raise SystemExit("accepted a bad priority")
        except ValueError:
            pass
        # the KMD sees it: a fault's crash dump names the context's priority
        hi = umd.Stream(priority="high")
        umd.memset(0x7f0000000000, 0, 4096, stream=hi)
        try:
            hi.synchronize()
        except umd.GPUFault as e:
            print(open(e.dump).read())
    """, vgpu_mount))
    ctx = r.stdout.split("=== context ===")[1].split("===")[0]
    ring = r.stdout.split("=== ring ===")[1].split("===")[0]
    # CS: the context's priority. A user queue stream (umd/userq_stream.py): its queue's,
    # on the dump's ring line (the queue dump's context section always says NORMAL).
    assert "HIGH" in ctx or "_userq" in ring and " high " in ring, (ctx, ring)


def test_version_check_refuses_a_mismatch(vgpu_mount):
    r = client("""
        import umd.device
        umd.device.REQUIRED_MINOR = 99
        try:
            umd.Device()
        except umd.VersionMismatch as e:
            print("REFUSED", e)
        umd.device.REQUIRED_MINOR, umd.device.REQUIRED_MAJOR = 0, 2
        try:
            umd.Device()
        except umd.VersionMismatch as e:
            print("REFUSED", e)
    """, vgpu_mount)
    ok(r)
    old, new = r.stdout.strip().splitlines()
    assert "3.49.0" in old and "3.99 or newer" in old and "upgrade the vgpu package" in old, old
    assert "upgrade umd" in new, new


def test_missing_mount_message(tmp_path):
    r = client("""
        try:
            umd.Device(sys.argv[0] if False else os.environ["VGPU_MOUNT"])
        except umd.UMDError as e:
            print(e)
    """, str(tmp_path / "nothing"))
    assert "vgpu mount" in r.stdout, r.stdout + r.stderr


def test_debug_switches(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        a = umd.to_device(np.ones(64, np.float32))
        e = umd.Event().record()
        umd.launch_kernel(k, 1, 64, [a, a, a, 64])
        e.synchronize()
        del a
        print("done")
    """, vgpu_mount, {"VGPU_DEBUG": "api,mem,cmd,sync,bogus"}))
    err = r.stderr
    assert "unknown option 'bogus'" in err
    assert re.search(r"vgpu\[api\] to_device\(shape=\(64,\), dtype=float32\)", err), err
    assert "vgpu[api] launch vector_add grid=(1, 1, 1) block=(64, 1, 1)" in err
    assert re.search(r"vgpu\[mem\] alloc 256 -> new 0x1000 block", err) and "vgpu[mem] free 0x1000" in err
    # CS: an IB of the ring; user queues (umd/userq_stream.py): the packets written to the queue
    assert re.search(r"vgpu\[cmd\] (IB comp_1\.0\.0|user queue \d+ \(COMPUTE\)) .*\n(.*\n)*.*DISPATCH_DIRECT "
                     r"groups=1x1x1", err), err
    assert re.search(r"vgpu\[mem\] CPU map of the 0x1000 BO at 0x[0-9a-f]+", err), err
    assert re.search(r"vgpu\[sync\] default: (submitted sdma0 seq|committed COMPUTE queue \d+ wptr) \d+", err), err
    assert "vgpu[sync] event" in err
    quiet = ok(client("umd.to_device(np.ones(4)).copy_to_host()", vgpu_mount, {"VGPU_DEBUG": ""}))
    assert "vgpu[" not in quiet.stderr
    every = ok(client("umd.zeros(4).copy_to_host()", vgpu_mount, {"VGPU_DEBUG": "all"}))   # GPU work too
    assert all(f"vgpu[{n}]" in every.stderr for n in ("api", "mem", "cmd", "sync")), every.stderr


def test_debug_parse():
    from umd.debug import ALL, DebugFlag, parse_debug
    assert parse_debug("api, MEM") == DebugFlag.API | DebugFlag.MEM
    assert parse_debug("all") == ALL and parse_debug("") == DebugFlag(0)


def test_gpu_fault_names_kernel_pc_line_and_address(vgpu_mount):
    r = ok(client("""
        import libvgpu
        k = hand_kernel("read_unmapped", {0x10: 7})
        dst = umd.empty(64, np.float32)
        hole = libvgpu.va_range_alloc(umd.get_device().lv, 1 << 20)   # reserved, never mapped
        umd.launch_kernel(k, 1, 64, [hole.address, dst])
        try:
            umd.synchronize()
            print("no fault")
        except umd.GPUFault as e:
            print(e)
            print("ATTR", e.kernel, hex(e.pc), e.line, hex(e.address), hex(hole.address))
        # the stream goes on with a fresh context
        x = umd.to_device(np.arange(8, dtype=np.int32))
        assert (x.copy_to_host() == np.arange(8)).all()
        print("CONTINUES")
    """, vgpu_mount))
    msg, attrs, cont = r.stdout.strip().splitlines()
    assert "GPU fault in kernel 'read_unmapped' at PC 0x10" in msg and "read_unmapped.s:7" in msg, msg
    assert "EFAULT" in msg and "devcoredump/devcd" in msg
    _, name, pc, line, addr, hole = attrs.split()
    assert (name, pc, line, addr) == ("read_unmapped", "0x10", "7", hole)
    assert addr in msg and cont == "CONTINUES"


def test_launch_blocking_points_at_the_launch(vgpu_mount):
    r = ok(client("""
        import libvgpu
        k = hand_kernel("read_unmapped")
        dst = umd.empty(64, np.float32)
        hole = libvgpu.va_range_alloc(umd.get_device().lv, 1 << 20)
        try:
            umd.launch_kernel(k, 1, 64, [hole.address, dst])
            print("returned")
        except umd.GPUFault as e:
            print("raised at launch:", e.kernel)
    """, vgpu_mount, {"VGPU_LAUNCH_BLOCKING": "1"}))
    assert r.stdout.strip() == "raised at launch: read_unmapped"


def test_launch_validation(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        a = umd.empty(64, np.float32)
        bad = [((0,), 64, [a, a, a, 1]), (1, (32, 33), [a, a, a, 1]), (1, 2048, [a, a, a, 1]),
               (1, 64, [a, a, a]), (1, 64, [a, a, 1.5, 1]), (1, 64, [a, a, a, -1]), (1, 32, [a, a, a, 1])]
        for grid, block, args in bad:
            try:
                umd.launch_kernel(k, grid, block, args)
                print("accepted", grid, block)
            except umd.LaunchError as e:
                print("refused:", e)
    """, vgpu_mount))
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 7 and all(l.startswith("refused") for l in lines), r.stdout
    assert "at most 1024" in lines[1] and "1..1024" in lines[2] and "takes 4 arguments" in lines[3] and "requires block (64, 1, 1)" in lines[6]


def test_vector_add_through_launch_kernel(vgpu_mount):
    r = ok(client("""
        k = hand_kernel("vector_add")
        n = 100_003
        rng = np.random.default_rng(1)
        ha, hb = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        a, b, c = umd.to_device(ha), umd.to_device(hb), umd.empty(n, np.float32)
        umd.launch_kernel(k, (n + 63) // 64, (64, 1, 1), {"a": a, "b": b, "c": c, "n": n})
        assert (c.copy_to_host() == ha + hb).all()
        assert len(umd.get_device().kernels) == 1
        umd.launch_kernel(k, (n + 63) // 64, 64, [c, b, c, n])      # cached code object
        assert len(umd.get_device().kernels) == 1
        assert np.allclose(c.copy_to_host(), ha + 2 * hb)
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip() == "OK"


def test_hidden_grid_and_block_arguments():
    from umd.launch import ArgSpec, CompiledKernel, pack_args
    import struct
    k = CompiledKernel("k", b"", [ArgSpec("x", "f32", 0, 4), ArgSpec("__grid_dim_x", "u32", 4, 4),
                                  ArgSpec("__block_dim_y", "u32", 8, 4), ArgSpec("n", "i32", 12, 4)], 16)
    data, _ = pack_args(k, (7, 1, 1), (32, 2, 1), [2.5, -3])
    assert struct.unpack("<fIIi", data) == (2.5, 7, 2, -3)




def test_array_arguments_are_type_checked_and_give_their_shapes():
    from types import SimpleNamespace
    import struct
    import numpy as np
    import pytest
    import umd
    from umd.launch import ArgSpec, CompiledKernel, pack_args
    k = CompiledKernel("k", b"", [ArgSpec("x", "ptr", 0, 8, dtype="f32", ndim=0),
                                  ArgSpec("m", "ptr", 8, 8, dtype="i32", ndim=2),
                                  ArgSpec("__shape_m_1", "u32", 16, 4), ArgSpec("__shape_x_0", "u32", 20, 4)], 24)

    def dev(dtype, shape):                  # what pack_args reads of a DeviceArray
        return SimpleNamespace(ptr=0x1000, dtype=np.dtype(dtype), shape=shape, ndim=len(shape),
                               size=int(np.prod(shape)), bo=None)

    data, _ = pack_args(k, (1, 1, 1), (1, 1, 1), [dev(np.float32, (3, 5)), dev(np.int32, (4, 6))])
    assert struct.unpack("<QQII", data) == (0x1000, 0x1000, 6, 15)      # a flat Ptr's one dimension: its size
    for args, what in [([dev(np.float64, (8,)), dev(np.int32, (4, 6))], "argument x.*float32.*float64"),
                       ([dev(np.float32, (8,)), dev(np.uint32, (4, 6))], "argument m.*int32.*uint32"),
                       ([dev(np.float32, (8,)), dev(np.int32, (24,))], "argument m.*2-D.*1-D"),
                       ([np.arange(8.0), dev(np.int32, (4, 6))], "argument x.*float32.*float64")]:
        with pytest.raises(TypeError, match=what) as e:
            pack_args(k, (1, 1, 1), (1, 1, 1), args)
        assert isinstance(e.value, umd.LaunchError)
    with pytest.raises(umd.LaunchError, match="m.*shape"):               # an address has no shape
        pack_args(k, (1, 1, 1), (1, 1, 1), [0x2000, 0x3000])


def test_gpu_hang_from_an_endless_kernel(short_timeout_mount):
    r = ok(client("""
        image = asm.assemble(".kernel spin\\n.block 32 1 1\\nloop:\\n    s_branch loop\\n", "spin.s").pack()
        k = umd.kernel_from_code_object(image, "spin.s")
        umd.launch_kernel(k, 1, 32, [])
        try:
            umd.synchronize()
            print("no hang")
        except umd.GPUHang as e:
            print(e)
    """, short_timeout_mount))
    assert "GPU hang: kernel 'spin'" in r.stdout and "ring timeout" in r.stdout, r.stdout
    assert re.search(r"ring comp_(1\.0\.0|userq\d+) timeout", read_text(f"{short_timeout_mount}/dev/kmsg"))


def test_device_array_views_as_numpy_and_numba_have_them(vgpu_mount):
    # slicing a DeviceArray gives views of the same memory; an all-integer index copies
    # the element out; strided views copy through the bytes they span and are staged
    # through a contiguous copy for a kernel (before: DeviceArray had no __getitem__)
    r = ok(client("""
        import importlib.util, tempfile
        src = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
        src.write(chr(10).join(["import umd", "from umd import f32", "@umd.jit",
                                "def twice(x: f32[:]):", "    i = umd.grid(1)",
                                "    if i < x.size:", "        x[i] = 2 * x[i]", ""]))
        src.close()
        spec = importlib.util.spec_from_file_location("twice_mod", src.name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        twice = mod.twice

        host = np.arange(60, dtype=np.float32).reshape(6, 10)
        d = umd.to_device(host)
        assert d[2, 3] == host[2, 3] and isinstance(d[2, 3], np.float32)
        row = d[4]                                  # contiguous view: offset into d
        assert row.is_c_contiguous() and row.ptr == d.ptr + 4 * 10 * 4
        assert (row.copy_to_host() == host[4]).all()
        for key in [(slice(1, 5), slice(2, 9, 3)), (Ellipsis, 7), (slice(None, None, -2),),
                    (slice(5, 0, -1), slice(None, None, -3))]:
            assert (d[key].copy_to_host() == host[key]).all(), key
            assert d[key].shape == host[key].shape and d[key].strides == host[key].strides, key
        assert (d.T.copy_to_host() == host.T).all() and not d.T.is_c_contiguous()
        assert d.T.is_f_contiguous()

        d[1, :] = -1.0                              # __setitem__ on a row, a column, a scalar
        host[1, :] = -1.0
        d[:, 0] = np.arange(6)
        host[:, 0] = np.arange(6)
        d[5, 9] = 99
        host[5, 9] = 99
        assert (d.copy_to_host() == host).all()

        col = d[:, 3]                               # strided: through a contiguous copy
        twice[1, 32](col)
        host[:, 3] *= 2
        twice[1, 32](d[2])                          # contiguous: in place
        host[2] *= 2
        flat = d.reshape(60)
        twice[1, 64](flat[::7])
        host.reshape(60)[::7] *= 2
        assert (d.copy_to_host() == host).all()
        d[::2, ::3].fill(7)
        host[::2, ::3] = 7
        assert (d.copy_to_host() == host).all()
        c = d[::-1].copy()
        assert c.is_c_contiguous() and (c.copy_to_host() == host[::-1]).all()
        try:
            d.T.reshape(60)
        except ValueError as e:
            print("reshape:", e)
        try:
            d[[1, 2]]
        except IndexError as e:
            print("fancy:", e)
        del d, row, col, flat, c                    # views keep the memory until the last
        os.unlink(src.name)
        print("views ok")
    """, vgpu_mount))
    assert "views ok" in r.stdout
    assert "reshape: reshape of a view that is not C-contiguous" in r.stdout
    assert "fancy: DeviceArray indexes with integers, slices" in r.stdout


def test_random_states_on_a_device(vgpu_mount):
    # umd.random as numba.cuda.random is used: states made on the host, copied to the
    # device, advanced by each launch (a second launch continues the sequences)
    r = ok(client("""
        from tests.umd import wide_kernels as K
        from umd.random import create_xoroshiro128p_states
        states = create_xoroshiro128p_states(512, seed=3)
        assert states.shape == (512, 2) and states.dtype == np.uint64
        first = states.copy_to_host()
        hits = umd.to_device(np.zeros(1, np.int32))
        K.pi_darts[8, 64](states, 100, hits)
        after_one = states.copy_to_host()
        K.pi_darts[8, 64](states, 100, hits)
        assert (after_one != first).all() and (states.copy_to_host() != after_one).all()
        pi = 4.0 * hits.copy_to_host()[0] / (2 * 512 * 100)
        print(f"pi {pi:.4f}")
        assert abs(pi - np.pi) < 0.03, pi
    """, vgpu_mount))
    assert "pi 3.1" in r.stdout


def test_constant_arrays_on_a_device_and_from_the_cache(vgpu_mount, tmp_path):
    # the second process finds the kernel in the disk cache: its constant arrays with it
    code = """
        from tests.umd import wide_kernels as K
        x = np.linspace(-1, 1, 300, dtype=np.float32)
        out, lut = umd.zeros(300, np.float32), umd.zeros(300, np.int64)
        K.smooth_const[3, 128](umd.to_device(x), out, lut)
        got = lut.copy_to_host()
        assert got.tolist() == [int(K.LUT[i % 3, i % 4]) + 5 for i in range(300)], got[:8]
        xp = np.concatenate([[x[0], x[0]], x, [x[-1], x[-1]]])
        want = sum(np.float32(K.GAUSS5[k]) * xp[k:k + 300] for k in range(5))
        np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-6, atol=1e-7)
        from umd.compiler import cache
        print("cached kernels:", len(list(cache.cache_dir().glob("*"))))
    """
    env = {"VGPU_CACHE_DIR": str(tmp_path / "kcache")}
    first = ok(client(code, vgpu_mount, env))
    second = ok(client(code, vgpu_mount, env))
    assert "cached kernels:" in first.stdout and "cached kernels:" in second.stdout
