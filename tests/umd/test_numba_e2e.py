"""Numba-CUDA-style kernels (tests/umd/numba_kernels.py) end to end on a mount: each
test runs a client process that launches them with `kernel[grid, block](...)` on
DeviceArrays and on host numpy arrays (copied in and back, as Numba does), and
checks the results against numpy."""
from .test_runtime import client, ok

IMPORTS = """
        from tests.umd import numba_kernels as K
        rng = np.random.default_rng(14)
"""


def test_numba_kernels_end_to_end(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        # vector add with umd.grid; a ragged size (the last block is partial)
        n = 100_003
        a, b = rng.standard_normal((2, n), dtype=np.float32)
        da, db, dc = umd.to_device(a), umd.to_device(b), umd.device_array(n, np.float32)
        K.vector_add[(n + 255) // 256, 256](da, db, dc)
        assert (dc.copy_to_host() == a + b).all()
        print("vector_add ok")

        # the grid-stride saxpy: 8 blocks of 128 threads for 100003 elements
        out = umd.device_array_like(da)
        K.saxpy_grid_stride[8, 128](np.float32(2.5), da, db, out)
        assert (out.copy_to_host() == np.float32(2.5) * a + b).all()
        print("saxpy_grid_stride ok")

        # 2-D matrix add, 37 x 53 with 16 x 16 blocks
        A, B = rng.standard_normal((2, 37, 53), dtype=np.float32)
        dC = umd.device_array((37, 53), np.float32)
        K.matrix_add[(3, 4), (16, 16)](umd.to_device(A), umd.to_device(B), dC)
        assert (dC.copy_to_host() == A + B).all()
        print("matrix_add ok")

        # host arrays are copied to the device and back, as Numba does
        h = np.arange(1000, dtype=np.float32)
        K.increment_by_one[4, 256](h)
        assert (h == np.arange(1000, dtype=np.float32) + 1).all()
        m = np.zeros((20, 30), np.float32)
        K.increment_a_2D_array[(2, 2), (16, 16)](m)
        assert (m == 1).all()
        print("host arrays ok")

        # the histogram with global atomics, and with shared-memory atomics
        x = rng.normal(0, 1, 50_000).astype(np.float32)
        f32 = np.float32
        bw = f32(f32(f32(2.0) - f32(-2.0)) / f32(K.NBINS))
        bins = ((x - f32(-2.0)).astype(f32) / bw).astype(f32).astype(np.int64)
        want = np.bincount(bins[(bins >= 0) & (bins < K.NBINS)], minlength=K.NBINS)
        dx = umd.to_device(x)
        for kern in (K.histogram, K.histogram_shared):
            hist = umd.zeros(K.NBINS, np.int32)
            kern[16, 128](dx, -2.0, 2.0, hist)
            assert (hist.copy_to_host() == want).all(), kern
        print("histogram ok")

        # the 1-D stencil with a halo in shared memory
        n = 10_001
        x = rng.standard_normal(n).astype(np.float32)
        out = umd.device_array(n, np.float32)
        K.stencil_1d[(n + K.STENCIL_BLOCK - 1) // K.STENCIL_BLOCK, K.STENCIL_BLOCK](umd.to_device(x), out)
        pad = np.concatenate([np.zeros(K.RADIUS), x, np.zeros(K.RADIUS)])
        want = sum(pad[k:k + n] for k in range(2 * K.RADIUS + 1))
        assert np.allclose(out.copy_to_host(), want, rtol=1e-6, atol=1e-6)
        print("stencil ok")

        # device functions (inlined), with loops, early returns, arrays and tuples
        n = 500
        x = rng.uniform(-2, 2, n).astype(np.float32)
        coeffs = np.array([0.5, -1.0, 2.0], np.float32)
        out, idx = np.zeros(n, np.float32), np.zeros(n, np.int32)
        K.device_functions[2, 256](x, coeffs, out, idx)
        f = np.float32
        p = (f(f(f(f(0.5) * x) + f(-1.0)) * x) + f(2.0)).astype(f)
        v = np.clip(x, -1, 1)
        want = (np.minimum(v, p) + f(10) * np.maximum(v, p)).astype(f) + f(1)
        assert (out == want).all()
        first = [int(np.argmax(x > f(x[i] + f(0.5)))) if (x > f(x[i] + f(0.5))).any() else -1 for i in range(n)]
        assert idx.tolist() == first
        print("device functions ok")

        # Python's // and % on integers: (-8) // 3 == -3, (-8) % 3 == 1
        a, b = np.array([-8, 8, -8, 7], np.int32), np.array([3, -3, -3, 0], np.int32)
        q, r = np.zeros(4, np.int32), np.zeros(4, np.int32)
        uq, ur = np.zeros(4, np.uint32), np.zeros(4, np.uint32)
        K.int_div_mod[1, 32](a, b, q, r, uq, ur)
        assert q.tolist() == [-3, -3, 2, 0] and r.tolist() == [1, -1, -2, 0], (q, r)
        print("floordiv ok")
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}, timeout=300))
    for what in ("vector_add", "saxpy_grid_stride", "matrix_add", "host arrays", "histogram", "stencil",
                 "device functions", "floordiv"):
        assert f"{what} ok" in r.stdout, r.stdout


def test_array_dtype_and_ndim_are_checked_at_launch(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        good = umd.zeros(8, np.float32)
        for bad in (umd.to_device(np.arange(8.0)), np.arange(8.0), umd.zeros(8, np.int32),
                    umd.zeros((2, 4), np.float32)):
            try:
                K.increment_by_one[1, 32](bad)
                print("accepted", bad)
            except TypeError as e:
                assert isinstance(e, umd.LaunchError)
                print("refused:", e)
        d = umd.to_device(np.arange(8.0))
        assert (d.copy_to_host() == np.arange(8.0)).all()         # nothing was reinterpreted
        K.increment_by_one[1, 32](good)
        assert (good.copy_to_host() == 1).all()
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}))
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("refused") for line in lines), r.stdout
    assert "argument an_array" in lines[0] and "float32" in lines[0] and "float64" in lines[0]
    assert "float64" in lines[1] and "int32" in lines[2] and "1-D" in lines[3] and "2-D" in lines[3]


def test_zero_range_step_stops_the_kernel_with_a_clear_fault(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        out = umd.zeros(16, np.int32)
        K.zero_step[1, 32](2, out)
        assert out.copy_to_host()[:10:2].tolist() == [1] * 5
        try:
            K.zero_step[1, 32](0, out)
            umd.synchronize()
            print("no fault")
        except umd.GPUFault as e:
            print(e)
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}))
    import inspect
    from . import numba_kernels as K
    src, start = inspect.getsourcelines(K.zero_step.fn)
    line = start + next(k for k, text in enumerate(src) if "range(" in text)
    assert "range() step is zero" in r.stdout and f"numba_kernels.py:{line}" in r.stdout, r.stdout


def test_64bit_kernels_end_to_end(vgpu_mount, tmp_path):
    """float64 / int64 / uint64 kernels (tests/umd/wide_kernels.py) through a mount, on
    DeviceArrays and host arrays, and their launch-time dtype checks."""
    r = ok(client("""
        from tests.umd import wide_kernels as W
        rng = np.random.default_rng(64)
        n = 10_007                                   # ragged: the last block is partial
        x, y = rng.standard_normal((2, n))
        dx, dy, dout = umd.to_device(x), umd.to_device(y), umd.device_array(n, np.float64)
        W.saxpy64[(n + 255) // 256, 256](0.75, dx, dy, dout)
        assert (dout.copy_to_host() == 0.75 * x + y).all()
        print("saxpy64 ok")

        m = rng.integers(-(1 << 50), 1 << 50, (300, 17), dtype=np.int64)
        sums = np.zeros(300, np.int64)
        W.row_sums[3, 128](m, sums)                  # host arrays: copied in and back
        assert (sums == m.sum(axis=1)).all()
        print("row_sums ok")

        t = umd.zeros((9, 10, 11), np.float64)
        W.cube_fill[(3, 3, 3), (4, 4, 4)](t, 2.0)
        i, j, k = np.indices((9, 10, 11))
        assert (t.copy_to_host() == 2.0 * (i * 10000 + j * 100 + k)).all()
        assert t.strides == np.zeros((9, 10, 11)).strides and t.itemsize == 8
        print("cube ok")

        for bad in (umd.to_device(x.astype(np.float32)), umd.zeros(n, np.int64),
                    umd.zeros((2, n), np.float64)):
            try:
                W.saxpy64[1, 32](0.75, bad, dy, dout)
                print("accepted", bad)
            except TypeError as e:
                print("refused:", e)
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}, timeout=300))
    for what in ("saxpy64", "row_sums", "cube"):
        assert f"{what} ok" in r.stdout, r.stdout
    refused = [line for line in r.stdout.splitlines() if line.startswith("refused")]
    assert len(refused) == 3 and all("argument x expects a 1-D float64 array" in line
                                     for line in refused), r.stdout
    assert "float32" in refused[0] and "int64" in refused[1] and "2-D" in refused[2]


def test_warp_and_tutorial_kernels_end_to_end(vgpu_mount, tmp_path):
    # The Cython core runs them (two worker threads), with larger, ragged sizes.
    r = ok(client("""
        from tests.umd import tutorial_kernels as T, warp_kernels as W
        rng = np.random.default_rng(2014)

        # the warp reduce: a tree of shfl_down_sync, lane 0 writes the warp's sum
        n = 100_000
        x = rng.standard_normal(n).astype(np.float32)
        grid = (n + 255) // 256
        out = umd.zeros(grid * 256 // umd.warpsize, np.float32)
        W.warp_reduce[grid, 256](umd.to_device(x), out)
        pad = np.zeros(grid * 256)
        pad[:n] = x
        assert np.allclose(out.copy_to_host(), pad.reshape(-1, 32).sum(axis=1), rtol=1e-5, atol=1e-5)
        print("warp_reduce ok")

        # votes and shuffles agree with the reference executor's results
        v = rng.integers(-5, 5, 4096).astype(np.int32)
        votes = np.zeros((4096, 14), np.uint32)
        W.votes[16, 256](v, votes)
        for w in range(0, 4096, 32):
            b = sum(1 << k for k in range(32) if v[w + k] > 0)
            assert (votes[w:w + 32, 0] == b).all() and (votes[w:w + 32, 3] == bin(b).count("1")).all()
        print("votes ok")

        # shared-memory atomics of every kind, on 40 blocks at once
        blocks, block = 40, 96
        xi = rng.integers(-10000, 10000, blocks * block).astype(np.int32)
        fx = rng.standard_normal(blocks * block).astype(np.float32)
        res, fres = np.zeros(blocks * 6, np.int32), np.zeros(blocks * 2, np.float32)
        olds = np.zeros(blocks * block, np.int32)
        W.shared_atomics_all[blocks, block](xi, fx, res, fres, olds)
        res = res.reshape(blocks, 6)
        xs = xi.reshape(blocks, block)
        assert (res[:, 0] == xs.min(axis=1)).all() and (res[:, 1] == xs.max(axis=1)).all()
        assert (res[:, 3] == block).all() and (res[:, 4] == 1000 - xs.sum(axis=1)).all()
        assert (res[:, 5] == 1).all()
        print("shared atomics ok")

        # Numba's shared-memory matmul, 200 x 200 (13 tiles of 16, the last ragged)
        A, B = rng.standard_normal((2, 200, 200)).astype(np.float32)
        C = umd.zeros((200, 200), np.float32)
        T.fast_matmul[(13, 13), (16, 16)](umd.to_device(A), umd.to_device(B), C)
        assert np.allclose(C.copy_to_host(), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
        print("fast_matmul ok")

        # the padded transpose and the block scan
        a = rng.standard_normal((300, 77)).astype(np.float32)
        t = np.zeros((77, 300), np.float32)
        T.transpose[(5, 19), (16, 16)](a, t)
        assert (t == a.T).all()
        s = rng.integers(-50, 50, 1000).astype(np.int32)
        scan = np.zeros_like(s)
        T.block_scan[8, T.BLOCK](s, scan)
        assert (scan == np.concatenate([np.cumsum(s[b:b + 128]) for b in range(0, 1000, 128)])).all()
        print("transpose and scan ok")
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}, timeout=300))
    for what in ("warp_reduce", "votes", "shared atomics", "fast_matmul", "transpose and scan"):
        assert f"{what} ok" in r.stdout, r.stdout
