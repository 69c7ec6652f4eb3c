"""8/16-bit and boolean arrays end to end on a mount: a client process launches the
kernels of tests/umd/byte_kernels.py with `kernel[grid, block](...)` on DeviceArrays
and host numpy arrays, checks them against numpy exactly, and sees the launch's dtype
check name the argument."""
from .test_runtime import client, ok


def test_small_type_kernels_end_to_end(vgpu_mount):
    r = ok(client("""
        from tests.umd import byte_kernels as K
        rng = np.random.default_rng(16)

        # a uint8 image, 301 x 203 (ragged against 16 x 16 blocks): invert, threshold
        img = rng.integers(0, 256, (301, 203), dtype=np.uint8)
        grid = ((301 + 15) // 16, (203 + 15) // 16)
        d_img, d_out = umd.to_device(img), umd.device_array((301, 203), np.uint8)
        K.invert[grid, (16, 16)](d_img, d_out)
        assert (d_out.copy_to_host() == 255 - img).all()
        K.threshold[grid, (16, 16)](d_img, np.int32(128), d_out)
        assert (d_out.copy_to_host() == np.where(img > 128, 255, 0)).all()
        print("image ok")

        # grayscale from uint8 RGB (h, w, 3), host arrays copied in and back
        rgb = rng.integers(0, 256, (301, 203, 3), dtype=np.uint8)
        gray = np.zeros((301, 203), np.uint8)
        K.grayscale[grid, (16, 16)](rgb, gray)
        c = rgb.astype(np.int32)
        assert (gray == ((77 * c[..., 0] + 150 * c[..., 1] + 29 * c[..., 2]) >> 8)).all()
        print("grayscale ok")

        # int16 accumulate with wraparound
        n = 10_007
        x = rng.integers(-32768, 32768, n, dtype=np.int16)
        acc = umd.to_device(np.zeros(n, np.int16))
        K.accumulate16[(n + 127) // 128, 128](acc, umd.to_device(x), np.int32(5))
        assert (acc.copy_to_host() == (5 * x.astype(np.int64)).astype(np.int16)).all()
        print("accumulate ok")

        # a boolean mask from a comparison, then used to select
        v = rng.integers(-128, 128, n, dtype=np.int8)
        d_v, mask = umd.to_device(v), umd.device_array(n, np.bool_)
        K.make_mask[(n + 127) // 128, 128](d_v, np.int32(10), mask)
        assert (mask.copy_to_host() == (v > 10)).all()
        out = umd.device_array(n, np.int32)
        K.select[(n + 127) // 128, 128](d_v, mask, out)
        assert (out.copy_to_host() == np.where(v > 10, v, 0)).all()
        print("mask ok")

        # 8/16-bit and bool scalars, wrapped as numpy's astype wraps them
        got = np.zeros(7, np.int32)
        K.small_scalars[1, 32](np.uint8(200), 200, np.uint16(9), -40000, np.bool_(False), got)
        assert got.tolist() == [200, -56, 9, 25536, 0, 200 - 56 + 9 + 25536, -1], got
        print("scalars ok")

        # the launch checks small dtypes and names the argument
        try:
            K.invert[grid, (16, 16)](umd.to_device(img.view(np.int8)), d_out)
        except umd.ArgumentTypeError as e:
            assert "argument img expects a 2-D uint8 array" in str(e), e
            print("dtype check ok")
    """, vgpu_mount))
    for line in ("image ok", "grayscale ok", "accumulate ok", "mask ok", "scalars ok", "dtype check ok"):
        assert line in r.stdout
