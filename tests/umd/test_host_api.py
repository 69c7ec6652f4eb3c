"""Numba CUDA's host API on umd, end to end on a mount: device queries (is_available,
detect, get_current_device and its attributes, select_device, gpus, close),
current_context().get_memory_info(), pinned, mapped and Fortran-order arrays,
to_device/copy_to_host/copy_to_device with Numba's arguments, split and ravel, the
CUDA array interface, defer_cleanup, streams (auto_synchronize) and events
(record, wait, elapsed_time). Each test is a client process, as a program is; the
last one is a program written the way Numba's tutorials write one."""
from .test_runtime import client, ok

IMPORTS = """
        from tests.umd import numba_kernels as K
"""


def test_device_queries(vgpu_mount):
    r = ok(client("""
        assert umd.is_available()
        assert umd.detect() is True
        dev = umd.get_current_device()
        assert dev is umd.get_device() and dev.id == 0
        # DEV_INFO: 2 compute units of 32-lane waves, 1 GHz engine and memory clocks
        assert dev.MULTIPROCESSOR_COUNT == 2 and dev.WARP_SIZE == 32, dev.MULTIPROCESSOR_COUNT
        assert dev.CLOCK_RATE == 1_000_000 and dev.MEMORY_CLOCK_RATE == 1_000_000
        assert dev.GLOBAL_MEMORY_BUS_WIDTH == 4096
        assert dev.ASYNC_ENGINE_COUNT == 2            # the DMA rings HW_IP_INFO reports
        assert dev.MAX_THREADS_PER_BLOCK == 1024 and dev.MAX_BLOCK_DIM_X == 1024
        assert dev.MAX_SHARED_MEMORY_PER_BLOCK == 65536 and dev.MAX_GRID_DIM_X == 2**32 - 1
        assert dev.compute_capability == (9, 0)       # family AI: GFX9
        assert isinstance(dev.name, str) and dev.PCI_BUS_ID >= 0
        try:
            dev.NO_SUCH_ATTRIBUTE
            raise SystemExit("an unknown attribute was answered")
        except AttributeError as e:
            print("unknown:", e)
        assert len(umd.gpus) == 1 and umd.list_devices()[0] is dev and umd.gpus[0] is dev
        assert umd.gpus.current is dev
        ctx = umd.current_context()
        free, total = ctx.get_memory_info()
        assert total == 64 << 20 and 0 < free <= total, (free, total)
        a = umd.device_array(1 << 20, np.uint8)
        free2, total2 = ctx.get_memory_info()
        assert total2 == total and free2 == free - (1 << 20), (free, free2)
        assert umd.select_device(0) is dev
        umd.close()
        assert dev.closed
        again = umd.get_current_device()
        assert again is not dev and again.id == 0
        print("OK")
    """, vgpu_mount))
    assert "Found 1 vgpu device" in r.stdout and "Compute Capability: 9.0" in r.stdout, r.stdout
    assert "1/1 devices are supported" in r.stdout
    assert "unknown: " in r.stdout and "NO_SUCH_ATTRIBUTE" in r.stdout
    assert r.stdout.strip().endswith("OK")


def test_is_available_without_a_mount(tmp_path):
    r = ok(client("""
        print(umd.is_available())
    """, str(tmp_path)))
    assert r.stdout.strip() == "False"


def test_partitions_are_devices(partitions_mount):
    r = ok(client("""
        assert len(umd.gpus) == 2 and [d.id for d in umd.list_devices()] == [0, 1]
        d0, d1 = umd.gpus
        # each partition has one of the two CUs and half the VRAM
        assert d0.MULTIPROCESSOR_COUNT == d1.MULTIPROCESSOR_COUNT == 1
        # PCI functions 0 and 1 of the device at ffff:01:00 (sysfs, vgpu.paths)
        from vgpu.paths import PCI_BUS, PCI_DOMAIN, pci_slot
        assert (d1.PCI_DOMAIN_ID, d1.PCI_BUS_ID, d1.PCI_DEVICE_ID) == (PCI_DOMAIN, PCI_BUS, 0)
        assert (d0.pci_slot, d1.pci_slot) == (pci_slot(0), pci_slot(1))
        assert umd.get_current_device() is d0
        with umd.gpus[1]:
            assert umd.get_current_device() is d1
            a = umd.to_device(np.arange(8, dtype=np.float32))
            assert a.device is d1
            assert umd.current_context().get_memory_info().total == 32 << 20
        assert umd.get_current_device() is d0
        assert umd.select_device(1) is d1 and umd.get_current_device() is d1
        assert (a.copy_to_host() == np.arange(8)).all()
        try:
            umd.select_device(2)
            raise SystemExit("selected a third device")
        except umd.UMDError as e:
            print("refused:", e)
        print("OK")
    """, partitions_mount))
    assert "refused: " in r.stdout and "2 devices" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK")


def test_arrays_with_numba_arguments(vgpu_mount):
    r = ok(client(IMPORTS + """
        h = np.arange(12, dtype=np.float64).reshape(3, 4)
        d = umd.device_array((3, 4))                 # Numba's default dtype: float64
        assert d.dtype == np.float64 and d.nbytes == 96 and d.size == 12
        f = umd.device_array((3, 4), np.float32, order="F")
        assert f.strides == (4, 12) and f.is_f_contiguous() and not f.is_c_contiguous()
        f.copy_to_device(h.astype(np.float32))       # host -> device, into an F-order array
        out = np.empty((3, 4), np.float32, order="F")
        got = f.copy_to_host(out)                     # into the given array
        assert got is out and (out == h).all()
        like = umd.device_array_like(np.asfortranarray(h))
        assert like.strides == (8, 24) and like.dtype == np.float64

        # to_device(ary, stream, copy, to)
        s = umd.stream()
        d2 = umd.to_device(h, stream=s)
        d3 = umd.to_device(h, copy=False)
        assert d3.shape == (3, 4)
        umd.to_device(h * 2, to=d3)
        assert (d3.copy_to_host() == h * 2).all()
        d3.copy_to_device(d2, stream=s)               # device -> device: d2 into d3
        host = np.zeros_like(h)
        d3.copy_to_host(ary=host, stream=s)
        s.synchronize()
        assert (host == h).all()
        try:
            d3.copy_to_device(np.zeros(5))
            raise SystemExit("copied 40 bytes into 96")
        except ValueError as e:
            print("refused:", e)

        # ravel, reshape, split
        flat = umd.to_device(np.arange(10, dtype=np.int32))
        parts = flat.split(4)
        assert [p.shape for p in parts] == [(4,), (4,), (2,)]
        assert (parts[2].copy_to_host() == [8, 9]).all()
        assert (d2.ravel().copy_to_host() == h.ravel()).all()
        assert d2.reshape(4, 3).shape == (4, 3)

        # the CUDA array interface, version 3
        cai = d2.__cuda_array_interface__
        assert cai["shape"] == (3, 4) and cai["typestr"] == "<f8" and cai["version"] == 3
        assert cai["data"] == (d2.ptr, False) and cai["strides"] is None
        assert f.__cuda_array_interface__["strides"] == (4, 12)
        assert umd.is_cuda_array(d2) and not umd.is_cuda_array(h)
        class Foreign:                                # another library's array of our memory
            def __init__(self, arr, shape):
                self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__, shape=shape)
                self.keep = arr
        view = umd.as_cuda_array(Foreign(d2, (12,)))
        assert view.shape == (12,) and view.ptr == d2.ptr and (view.copy_to_host() == h.ravel()).all()
        v = umd.to_device(np.ones(1000, np.float32))
        K.increment_by_one[4, 256](Foreign(v, (1000,)))        # a kernel takes it in place
        assert (v.copy_to_host() == 2).all()
        try:
            umd.as_cuda_array(h)
            raise SystemExit("as_cuda_array took a numpy array")
        except TypeError as e:
            print("refused:", e)
        print("OK")
    """, vgpu_mount))
    assert r.stdout.count("refused: ") == 2, r.stdout
    assert r.stdout.strip().endswith("OK")


def test_pinned_mapped_and_deferred(vgpu_mount):
    r = ok(client(IMPORTS + """
        p = umd.pinned_array((1000,), np.float32)
        assert isinstance(p, np.ndarray) and p.shape == (1000,) and p.dtype == np.float32
        p[:] = np.arange(1000)
        d = umd.to_device(p)
        assert (d.copy_to_host() == p).all()
        h = np.arange(4096, dtype=np.float32)
        with umd.pinned(h):                          # the pages are registered (userptr BO)
            d = umd.to_device(h)
            d.copy_to_host(h)
        try:
            with umd.pinned(h[::2]):
                pass
            raise SystemExit("pinned a strided view")
        except ValueError as e:
            print("refused:", e)

        # a mapped array: host memory the kernel reads and writes in place
        m = umd.mapped_array(1000, np.float32)
        m[:] = np.arange(1000)
        assert umd.is_cuda_array(m)
        K.increment_by_one[4, 256](m)
        umd.synchronize()
        assert (m == np.arange(1000) + 1).all()
        m2 = umd.mapped_array((2, 3), np.float32)
        assert m2.__cuda_array_interface__["data"][0] != 0

        # defer_cleanup: memory freed inside is not reused before the block ends
        a = umd.device_array(1000, np.float32)
        ptr = a.ptr
        with umd.defer_cleanup():
            del a
            b = umd.device_array(1000, np.float32)
            assert b.ptr != ptr
        c = umd.device_array(1000, np.float32)
        assert c.ptr == ptr
        print("OK")
    """, vgpu_mount))
    assert "refused: " in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK")


def test_streams_and_events(vgpu_mount):
    r = ok(client(IMPORTS + """
        s = umd.stream()
        assert isinstance(s, umd.Stream)
        x = np.arange(100_000, dtype=np.float32)
        with s.auto_synchronize():
            dx = umd.to_device(x, stream=s)
            dy = umd.device_array_like(dx, stream=s)
            start, end = umd.event(timing=True), umd.event()
            start.record(s)
            K.vector_add[(x.size + 255) // 256, 256, s](dx, dx, dy)
            end.record(s)
        assert end.query()
        ms = start.elapsed_time(end)
        assert ms > 0 and umd.event_elapsed_time(start, end) == ms
        other = umd.stream()
        end.wait(other)                              # other's later work waits for the kernel
        out = umd.device_array_like(dy, stream=other)
        out.copy_to_device(dy, stream=other)
        assert (out.copy_to_host(stream=other) == 2 * x).all()
        quiet = umd.event(timing=False)
        quiet.record(s)
        try:
            start.elapsed_time(quiet)
            raise SystemExit("timed an event made without timing")
        except umd.UMDError as e:
            print("refused:", e)
        d0 = umd.default_stream()
        with d0.auto_synchronize():
            dx.copy_to_host(stream=0)               # Numba's 0: the default stream
        print("OK")
    """, vgpu_mount))
    assert "refused: " in r.stdout, r.stdout
    assert r.stdout.strip().endswith("OK")


def test_tutorial_program(vgpu_mount):
    # Written as the tutorials write one: query the device, size the launch from it,
    # pinned host buffers, chunks copied and computed on two streams, the kernel timed
    # with events, the results copied back into a given array; checked against numpy.
    r = ok(client("""
        from tests.umd.numba_kernels import saxpy_grid_stride
        umd.detect()
        device = umd.get_current_device()
        print("Device:", device.name, "SMs:", device.MULTIPROCESSOR_COUNT)
        ctx = umd.current_context()
        free, total = ctx.get_memory_info()
        print(f"memory: {free} free of {total}")

        N = 1 << 18
        CHUNKS = 4
        threads = min(256, device.MAX_THREADS_PER_BLOCK)
        blocks = 4 * device.MULTIPROCESSOR_COUNT

        x = umd.pinned_array(N, dtype=np.float32)
        y = umd.pinned_array(N, dtype=np.float32)
        result = umd.pinned_array(N, dtype=np.float32)
        rng = np.random.default_rng(7)
        x[:] = rng.standard_normal(N, dtype=np.float32)
        y[:] = rng.standard_normal(N, dtype=np.float32)
        a = np.float32(2.0)

        streams = [umd.stream() for _ in range(2)]
        start, stop = umd.event(timing=True), umd.event(timing=True)
        start.record()
        chunk = N // CHUNKS
        for k in range(CHUNKS):
            s = streams[k % 2]
            lo, hi = k * chunk, (k + 1) * chunk
            d_x = umd.to_device(x[lo:hi], stream=s)
            d_y = umd.to_device(y[lo:hi], stream=s)
            d_out = umd.device_array(chunk, dtype=np.float32, stream=s)
            saxpy_grid_stride[blocks, threads, s](a, d_x, d_y, d_out)
            d_out.copy_to_host(result[lo:hi], stream=s)
        for s in streams:
            s.synchronize()
        stop.record()
        stop.synchronize()
        elapsed = umd.event_elapsed_time(start, stop)
        print(f"saxpy of {N} elements: {elapsed:.3f} ms")
        expect = a * x + y
        assert np.allclose(result, expect, rtol=1e-6, atol=1e-6)
        print("max error", float(np.max(np.abs(result - expect))))
        print("OK")
    """, vgpu_mount))
    assert r.stdout.strip().endswith("OK"), r.stdout
