"""Numba's host-side helpers end to end on a mount: a client process runs forall,
umd.reduce, umd.vectorize, umd.guvectorize, device functions called from Python and
umd.jit_module functions (tests/umd/numba_host_kernels.py, jit_module_funcs.py) on
host and device arrays, and checks them against numpy, error paths included."""
from .test_runtime import client, ok

IMPORTS = """
        from tests.umd import numba_host_kernels as K
        rng = np.random.default_rng(25)
        f = np.float32
"""


def test_forall_reduce_and_device_functions_end_to_end(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        from umd.forall import block_size_for
        # forall: a 1-D launch covering n, for ragged and tiny n, on a given stream
        s = umd.stream()
        for n in (1, 33, 1000, 100_003):
            x, y = rng.standard_normal((2, n), dtype=np.float32)
            out = umd.device_array(n, np.float32)
            K.add_forall.forall(n)(umd.to_device(x), umd.to_device(y), out)
            assert (out.copy_to_host() == x + y).all(), n
            idx = umd.device_array(n, np.int32)
            K.fill_index.forall(n, stream=s)(idx)
            s.synchronize()
            assert (idx.copy_to_host() == np.arange(n)).all(), n
        dev = umd.get_device()
        compiled = K.add_forall.compile()
        assert block_size_for(compiled, 10, dev) == 32
        assert block_size_for(compiled, 100_000, dev) == 1024
        assert block_size_for(compiled, 1000, dev) == 512 if dev.MULTIPROCESSOR_COUNT == 2 else True
        K.fill_index.forall(0)(umd.device_array(1, np.int32))          # nothing launched
        h = np.zeros(50, np.int32)
        K.fill_index.forall(50, tpb=16)(h)                            # a host array: copied back
        assert (h == np.arange(50)).all()
        for bad in (-1, 1.5):
            try:
                K.fill_index.forall(bad)
                raise AssertionError(bad)
            except (TypeError, ValueError) as e:
                assert "forall: ntasks" in str(e), e
        print("forall ok")

        # reduce: host and device inputs, res=, init=, size=, stream=, the empty array
        x = rng.integers(-50, 50, 1_000_003).astype(np.float32)       # exact in any order
        assert K.sum_reduce(x) == x.sum()
        dx = umd.to_device(x)
        got = K.sum_reduce(dx)
        assert got == x.sum() and isinstance(got, np.float32), (got, type(got))
        assert K.sum_reduce(dx, init=10) == x.sum() + 10
        assert K.sum_reduce(dx, size=1000) == x[:1000].sum()
        res = umd.to_device(np.full(3, -1, np.float32))
        assert K.sum_reduce(dx, res=res, init=1, stream=s) is None
        s.synchronize()
        assert res.copy_to_host().tolist() == [x.sum() + 1, -1, -1]
        assert K.max_reduce(dx, init=-1e9) == x.max()
        ints = rng.integers(0, 1 << 20, 70_000).astype(np.int64)
        assert K.sum_reduce(ints) == ints.sum()
        assert K.sum_reduce(np.zeros(0, np.float32), init=4) == f(4)
        assert K.sum_reduce(dx[:0], res=res, init=4) == f(4)            # res left as it was
        assert res.copy_to_host()[0] == x.sum() + 1
        try:
            K.sum_reduce(dx, res=umd.zeros(1, np.float64))
            raise AssertionError("res of another dtype")
        except TypeError as e:
            assert "float64" in str(e), e
        print("reduce ok")

        # one function for host and device: same results; the host's exception propagates
        v = rng.uniform(-2, 2, 300).astype(np.float32)
        out = np.zeros(300, np.float32)
        K.clamp_kernel.forall(300)(v, out, f(-1), f(1))
        assert out.tolist() == [K.clamp(a, f(-1), f(1)) for a in v]
        try:
            K.inverse(0.0)
            raise AssertionError("no exception")
        except ZeroDivisionError:
            pass
        from tests.umd import jit_module_funcs as M
        xs = np.arange(100, dtype=np.float32)
        M.call_inc_add.forall(100)(xs)
        assert (xs == np.arange(100, dtype=np.float32) * 2 + 1).all() and M.inc_add(1) == 3
        print("device functions ok")
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}, timeout=300))
    for what in ("forall", "reduce", "device functions"):
        assert f"{what} ok" in r.stdout, r.stdout


def test_vectorize_and_guvectorize_end_to_end(vgpu_mount, tmp_path):
    r = ok(client(IMPORTS + """
        # vectorize: numpy in -> numpy out, device in -> device out; the f64 signature too
        a, b = rng.uniform(1, 2, (2, 10_001)).astype(np.float32)
        want = (f(2) * (a - b) / (a + b)).astype(f)
        got = K.rel_diff(a, b)
        assert type(got) is np.ndarray and got.dtype == np.float32 and (got == want).all()
        da, db = umd.to_device(a), umd.to_device(b)
        dgot = K.rel_diff(da, db)
        assert isinstance(dgot, umd.DeviceArray) and (dgot.copy_to_host() == want).all()
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        assert np.allclose(K.rel_diff(a64, b64), 2 * (a64 - b64) / (a64 + b64), rtol=1e-15, atol=0)
        # broadcasting, scalars, 2-D, out= (device and host), stream=
        m = rng.uniform(1, 2, (37, 53)).astype(np.float32)
        row = rng.uniform(1, 2, 53).astype(np.float32)
        want2 = (m + f(2) * row).astype(f)
        assert (K.scaled_sum(m, row) == want2).all()
        assert (K.scaled_sum(umd.to_device(m), umd.to_device(row)).copy_to_host() == want2).all()
        assert (K.scaled_sum(m, f(0.5)) == (m + f(1.0))).all()
        assert (K.scaled_sum(m, 0.5) == (m + f(1.0))).all()           # a Python scalar: coerced
        s = umd.stream()
        dout = umd.device_array((37, 53), np.float32)
        assert K.scaled_sum(umd.to_device(m), row, out=dout, stream=s) is dout
        s.synchronize()
        assert (dout.copy_to_host() == want2).all()
        hout = np.zeros((37, 53), np.float32)
        assert K.scaled_sum(m, row, out=hout) is hout and (hout == want2).all()
        assert K.scaled_sum(np.zeros(0, np.float32), np.zeros(0, np.float32)).shape == (0,)
        try:
            K.rel_diff(a.astype(np.int32), b)
            raise AssertionError("no error")
        except TypeError as e:
            assert "no signature takes (int32, float32)" in str(e), e
        try:
            K.scaled_sum(m, row, out=np.zeros(3, np.float32))
            raise AssertionError("no error")
        except ValueError as e:
            assert "out=" in str(e), e
        print("vectorize ok")

        # guvectorize: layouts with core dimensions, device inputs, outputs given
        x, y = rng.standard_normal((2, 300, 17)).astype(np.float32)
        want = (x.astype(np.float64) * y).sum(1)
        got = K.dot(x, y)
        assert got.shape == (300,) and np.allclose(got, want, rtol=1e-5, atol=1e-5)
        dres = K.dot(umd.to_device(x), umd.to_device(y))
        assert isinstance(dres, umd.DeviceArray) and np.allclose(dres.copy_to_host(), want, rtol=1e-5, atol=1e-5)
        A, B = rng.standard_normal((8, 5, 6)), rng.standard_normal((8, 6, 3))
        C = np.zeros((8, 5, 3))
        K.matmul(A, B, C)
        assert np.allclose(C, A @ B, rtol=1e-13)
        dC = umd.device_array((8, 5, 3), np.float64)
        K.matmul(umd.to_device(A), umd.to_device(B), out=dC)
        assert np.allclose(dC.copy_to_host(), A @ B, rtol=1e-13)
        assert np.allclose(K.matmul(A[0], B[0]), A[0] @ B[0])           # no loop dimension
        sh = K.shift(x, f(1.5))
        assert (sh == x + f(1.5)).all()
        try:
            K.dot(x, y[:, :5])
            raise AssertionError("no error")
        except ValueError as e:
            assert "dimension n" in str(e), e
        print("guvectorize ok")

        # the names of numba.cuda that umd does not have say what to use
        try:
            umd.legacy_default_stream
        except AttributeError as e:
            assert str(e).startswith("umd.legacy_default_stream: not in umd; use umd.default_stream()"), e
        print("names ok")
    """, vgpu_mount, env_extra={"VGPU_CACHE_DIR": str(tmp_path)}, timeout=300))
    for what in ("vectorize", "guvectorize", "names"):
        assert f"{what} ok" in r.stdout, r.stdout
