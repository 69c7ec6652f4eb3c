"""tests/umd/numba_program_kernels.py end to end on a mount, launched as Numba programs
launch them: `k[grid, block, 0, sharedmem]` with dynamic shared memory, cooperative
kernels with `overloads[sig].max_cooperative_grid_blocks`, and the launch's refusals
(too much shared memory, a cooperative launch too large); device arrays named as
globals, used in place."""
from .test_runtime import client, ok

IMPORTS = """
        from tests.umd import numba_program_kernels as K
        from vgpu import isa
        rng = np.random.default_rng(25)
"""


def test_dynamic_shared_and_grid_sync_end_to_end(vgpu_mount):
    r = ok(client(IMPORTS + """
        # dynamic shared memory: the fourth element, stream 0 as in Numba
        n, block = 1000, 128
        x = rng.standard_normal(n).astype(np.float32)
        out = umd.device_array(n, np.float32)
        K.reverse_block[8, block, 0, block * 4](umd.to_device(x), out)
        got = out.copy_to_host()
        full = (n // block) * block
        want = x[:full].reshape(-1, block)[:, ::-1].ravel()
        assert (got[:full] == want).all()
        print("dynamic shared ok")
        o = np.zeros(2, np.int32)
        K.aliased_views[1, 1, umd.default_stream(), 16](o)
        assert o[0] == np.float32(3.14).view(np.int32) and o[1] == 4, o
        print("aliased ok")

        # too much shared memory: static + dynamic past the limit, both named
        try:
            K.static_and_dynamic[1, 32, 0, isa.MAX_LDS_BYTES](umd.device_array(32, np.float32))
        except umd.LaunchError as e:
            assert "64 bytes of static" in str(e) and "65536 bytes of dynamic" in str(e), e
            print("lds limit ok")

        # a cooperative kernel up to its limit, then one block past it
        blocks = K.neighbour_sums.overloads[(umd.f32[:],) * 3].max_cooperative_grid_blocks(64)
        assert blocks == umd.get_current_device().MULTIPROCESSOR_COUNT * 16, blocks
        x = rng.integers(-8, 8, 64 * blocks).astype(np.float32)
        partial, total = umd.zeros(blocks, np.float32), umd.zeros(blocks, np.float32)
        K.neighbour_sums[blocks, 64](umd.to_device(x), partial, total)
        assert (total.copy_to_host() == x.sum()).all()
        print("grid sync ok")
        try:
            K.neighbour_sums[blocks + 1, 64](umd.to_device(np.zeros(64 * (blocks + 1), np.float32)),
                                             umd.zeros(blocks + 1, np.float32),
                                             umd.zeros(blocks + 1, np.float32))
        except umd.LaunchError as e:
            assert "cooperative launch too large" in str(e), e
            print("cooperative limit ok")
        rounds, n = 5, 200
        data = np.zeros(rounds * n, np.int32)
        data[:n] = np.arange(n)
        K.sequence_of_syncs[4, 64](data, rounds)
        want = np.arange(n)
        for r in range(1, rounds):
            want = np.roll(want, 1) + 1
            assert (data[r * n:(r + 1) * n] == want).all(), r
        print("sync loop ok")

        # device arrays named as globals: read and written in place, by reference
        coeffs = rng.standard_normal(7).astype(np.float32)
        K.GLOBAL_COEFFS = umd.to_device(coeffs)
        K.GLOBAL_HITS = umd.zeros(1, np.int32)
        x = rng.standard_normal(100).astype(np.float32)
        out = umd.device_array(100, np.float32)
        K.scale_by_global[2, 64](umd.to_device(x), out)
        assert (out.copy_to_host() == x * np.resize(coeffs, 100)).all()
        K.GLOBAL_COEFFS.copy_from_host(2 * coeffs)          # the kernel sees the new values
        K.scale_by_global[2, 64](umd.to_device(x), out)
        assert (out.copy_to_host() == x * np.resize(2 * coeffs, 100)).all()
        assert K.GLOBAL_HITS.copy_to_host()[0] == 200
        print("captured ok")

        # a declared device function, linked from a Python file
        x = rng.standard_normal(90).astype(np.float32)
        out = np.zeros(90, np.float32)
        K.uses_declared[2, 64](x, out)
        f = np.float32
        head = f(f(f(x[0] + x[1]) + x[2]) + x[3])
        assert (out == (np.clip(x, f(-0.5), f(0.5)) + head).astype(f)).all()
        print("declare_device ok")

        # Numba's FFI example: ffi.from_buffer(x) for a CPointer(float32) parameter, the
        # result in a host 0-d array (r[()]), copied in and back by the launch
        x = np.arange(10, dtype=np.float32)
        r0 = np.ndarray((), dtype=np.float32)
        K.from_buffer_caller[1, 1](r0, x)
        assert r0[()] == 45.0, r0
        # slices: disjoint dynamic shared arrays (Numba's user/memory.rst example)
        got = umd.device_array(4, np.int32)
        K.disjoint_views[1, 1, 0, 8](got)
        assert got.copy_to_host().tolist() == [1, np.float32(3.14).view(np.int32), 1, 1]
        print("from_buffer and slices ok")

        # ufuncs on whole arrays with an output, one thread (Numba's example)
        x = rng.uniform(-3, 3, 64).astype(np.float32)
        r = umd.device_array(64, np.float32)
        K.ufunc_sin[1, 1](umd.to_device(x), r)
        assert (r.copy_to_host() == np.sin(x.astype(np.float64)).astype(np.float32)).all()
        print("ufunc ok")
    """, vgpu_mount))
    for line in ("dynamic shared ok", "aliased ok", "lds limit ok", "grid sync ok",
                 "cooperative limit ok", "sync loop ok", "captured ok",
                 "declare_device ok", "from_buffer and slices ok", "ufunc ok"):
        assert line in r.stdout, r.stdout
