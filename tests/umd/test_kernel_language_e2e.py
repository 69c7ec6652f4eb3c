"""The kernel-language kernels of tests/umd/lang_kernels.py end to end on a mount:
print() through the runtime's print buffers (lines on the client's stdout at the
synchronisation point, drops on stderr), negative indices on DeviceArrays."""
from .test_runtime import client, ok


def test_print_lines_appear_at_synchronize(vgpu_mount):
    r = ok(client("""
        import sys
        from tests.umd import lang_kernels as K
        x = (np.arange(64, dtype=np.float32) - 20) * np.float32(0.37)
        dx = umd.to_device(x)
        K.print_values[2, 32](dx)
        print("launched", flush=True)          # nothing printed yet: no sync point passed
        umd.synchronize()
        print("synchronized", flush=True)
        K.print_values[2, 32](x)               # a numpy argument: the copy back is the sync
        print("copied back", flush=True)
    """, vgpu_mount))
    out = r.stdout.splitlines()
    want = sorted("thread %d %f" % (i, float(v)) for i, v in
                  enumerate((__import__("numpy").arange(64, dtype="float32") - 20)
                            * __import__("numpy").float32(0.37)))
    a, b, c = out.index("launched"), out.index("synchronized"), out.index("copied back")
    assert a < b < c
    assert sorted(out[a + 1:b]) == want and sorted(out[b + 1:c]) == want
    assert out[:a] == [] and r.stderr.count("dropped") == 0


def test_print_buffer_full_reports_the_drops(vgpu_mount):
    r = ok(client("""
        import umd.kernel_print
        from tests.umd import lang_kernels as K
        umd.kernel_print.PRINT_BUFFER_BYTES = 10 * 20   # ten records of "thread", i, x[i]
        K.print_values[2, 32](np.arange(64, dtype=np.float32))
        K.print_values[1, 32](np.arange(5, dtype=np.float32))   # the buffer was recycled
    """, vgpu_mount))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("thread")]
    assert len(lines) == 15 and len(set(lines[:10])) == 10
    assert sorted(lines[10:]) == ["thread %d %f" % (i, i) for i in range(5)]
    assert "umd: print_values: 54 print() line(s) dropped: the launch's print buffer (200 " \
           "bytes) was full" in r.stderr


def test_negative_indices_and_global_arrays_on_device_arrays(vgpu_mount):
    ok(client("""
        from tests.umd import lang_kernels as K
        a = np.arange(77, dtype=np.float32)
        out = umd.device_array(77, np.float32)
        K.reverse[3, 32](umd.to_device(a), out)
        assert (out.copy_to_host() == a[::-1]).all()
        # a global numpy array in a kernel: a constant uploaded with the kernel
        sm = np.zeros(77, np.float32)
        K.smooth[3, 32](a, sm)
        c = K.SMOOTHING
        assert (sm[1:-1] == c[0] * a[:-2] + c[1] * a[1:-1] + c[2] * a[2:]).all()
    """, vgpu_mount))
