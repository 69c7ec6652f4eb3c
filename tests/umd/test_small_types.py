"""uint8, int8, uint16, int16 and boolean arrays in kernels (tests/umd/byte_kernels.py),
compiled and run on both executors (the reference one and the Cython core), checked
against numpy exactly: loads widen to int32 (sign- or zero-extended), stores wrap as
Numba's do, float stores truncate toward zero then wrap."""
import struct

import numpy as np
import pytest

import umd
from umd.compiler import KernelCompileError, build
from umd.launch import check_array, pack_args
from umd.errors import ArgumentTypeError, LaunchError

from . import byte_kernels as K
from .refrun import run

RNG = np.random.default_rng(8)
ENGINES = ["reference", "cython"]


def _blocks(n, block):
    return (n + block - 1) // block


def _wrap(values, dtype):
    return np.asarray(values, np.int64).astype(dtype)        # numpy's astype wraps


@pytest.mark.parametrize("engine", ENGINES)
def test_uint8_image_invert_and_threshold_ragged(engine):
    img = RNG.integers(0, 256, (37, 53), dtype=np.uint8)
    out = np.zeros_like(img)
    compiled = build(K.invert)
    run(compiled, (3, 4), (16, 16), img, out, engine=engine)
    np.testing.assert_array_equal(out, 255 - img)
    assert "global_load_ubyte" in compiled.asm_text and "global_store_byte" in compiled.asm_text
    out = np.zeros_like(img)
    run(build(K.threshold), (3, 4), (16, 16), img, 100, out, engine=engine)
    np.testing.assert_array_equal(out, np.where(img > 100, 255, 0).astype(np.uint8))


@pytest.mark.parametrize("engine", ENGINES)
def test_grayscale_from_uint8_rgb(engine):
    rgb = RNG.integers(0, 256, (29, 41, 3), dtype=np.uint8)
    gray = np.zeros((29, 41), np.uint8)
    run(build(K.grayscale), (2, 3), (16, 16), rgb, gray, engine=engine)
    c = rgb.astype(np.int32)
    want = ((77 * c[..., 0] + 150 * c[..., 1] + 29 * c[..., 2]) >> 8).astype(np.uint8)
    np.testing.assert_array_equal(gray, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_int16_accumulate_wraps(engine):
    n, reps = 333, 7
    x = RNG.integers(-32768, 32768, n, dtype=np.int16)
    acc = RNG.integers(-32768, 32768, n, dtype=np.int16)
    want = acc.copy()
    with np.errstate(over="ignore"):
        for _ in range(reps):
            want += x
    run(build(K.accumulate16), _blocks(n, 64), 64, acc, x, reps, engine=engine)
    np.testing.assert_array_equal(acc, want)
    a = RNG.integers(0, 65536, n, dtype=np.uint16)
    b = RNG.integers(0, 65536, n, dtype=np.uint16)
    want = a + b                                     # numpy wraps uint16 + uint16
    run(build(K.accumulate_u16), _blocks(n, 64), 64, a, b, engine=engine)
    np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_boolean_mask_then_select(engine):
    n = 517
    x = RNG.integers(-128, 128, n, dtype=np.int8)
    mask = np.zeros(n, np.bool_)
    run(build(K.make_mask), _blocks(n, 128), 128, x, -7, mask, engine=engine)
    np.testing.assert_array_equal(mask, x > -7)
    assert mask.view(np.uint8).max() == 1           # True is stored as 1
    out = np.full(n, 99, np.int32)
    run(build(K.select), _blocks(n, 128), 128, x, mask, out, engine=engine)
    np.testing.assert_array_equal(out, np.where(mask, x, 0).astype(np.int32))
    out = np.zeros(n, np.int32)
    run(build(K.count_true), _blocks(n, 128), 128, mask, out, engine=engine)
    np.testing.assert_array_equal(out, 2 * mask.astype(np.int32))


@pytest.mark.parametrize("engine", ENGINES)
def test_loads_sign_and_zero_extend(engine):
    n = 70
    a = RNG.integers(-128, 128, n, dtype=np.int8)
    b = RNG.integers(0, 256, n, dtype=np.uint8)
    c = RNG.integers(-32768, 32768, n, dtype=np.int16)
    d = RNG.integers(0, 65536, n, dtype=np.uint16)
    a[:4], b[:4], c[:4], d[:4] = [-128, -1, 0, 127], [255, 128, 0, 1], [-32768, -1, 0, 32767], \
        [65535, 32768, 0, 1]
    out = np.zeros((5, n), np.int32)
    run(build(K.widen), _blocks(n, 32), 32, a, b, c, d, out, engine=engine)
    b32, d32 = b.astype(np.int32), d.astype(np.int32)
    np.testing.assert_array_equal(out, np.stack([a, b, c, d, b32 * b32 + d32]).astype(np.int32))


@pytest.mark.parametrize("engine", ENGINES)
def test_stores_wrap_and_truncate_as_numba(engine):
    v = np.array([300, -1, 256, 65536 + 7, -129, 40000, 0, 5, -70000], np.int32)
    f = np.array([300.7, -3.7, 255.9, -0.5, 128.0, -128.9, 1e3, 2.5, -1.5], np.float32)
    n = v.size
    outs = [np.zeros(n, t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.uint8, np.int8,
                                     np.bool_, np.uint8)]
    run(build(K.store_wraps), 1, 32, v, f, *outs, engine=engine)
    assert outs[0][0] == 44                          # storing 300 into uint8 gives 44
    for got, t in zip(outs[:4], (np.uint8, np.int8, np.uint16, np.int16)):
        np.testing.assert_array_equal(got, _wrap(v, t))
    trunc = np.trunc(f).astype(np.int64)
    np.testing.assert_array_equal(outs[4], _wrap(trunc, np.uint8))
    np.testing.assert_array_equal(outs[5], _wrap(trunc, np.int8))
    np.testing.assert_array_equal(outs[6], v != 0)
    assert outs[6].view(np.uint8).max() == 1
    np.testing.assert_array_equal(outs[7], (v > 0).astype(np.uint8))


@pytest.mark.parametrize("engine", ENGINES)
def test_casts_to_small_types_wrap(engine):
    v = np.array([300, -1, 256, 65536 + 7, -129, 40000, 0, 5, -70000, 200], np.int32)
    out = np.zeros((6, v.size), np.int32)
    run(build(K.casts), 1, 32, v, out, engine=engine)
    u8 = _wrap(v, np.uint8).astype(np.int32)
    want = np.stack([u8, _wrap(v, np.int8), _wrap(v, np.uint16), _wrap(v, np.int16),
                     v != 0, 2 * u8]).astype(np.int32)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_flat_pointer_and_local_array(engine):
    p = RNG.integers(0, 256, (7, 11), dtype=np.uint8)
    out = np.zeros(77, np.int32)
    run(build(K.flat_bytes), 3, 32, p, out, engine=engine)
    np.testing.assert_array_equal(out, p.ravel())
    n = 90
    x = RNG.integers(-32768, 32768, n, dtype=np.int16)
    out = np.zeros(n, np.int16)
    run(build(K.local_shorts), _blocks(n, 32), 32, x, out, engine=engine)
    parts = [_wrap(x.astype(np.int64) * (k + 1) * 4096, np.int16).astype(np.int64) for k in range(4)]
    np.testing.assert_array_equal(out, _wrap(sum(parts), np.int16))


@pytest.mark.parametrize("engine", ENGINES)
def test_shared_uint8_array(engine):
    n = 128
    x = RNG.integers(0, 256, n, dtype=np.uint8)
    x[:3] = 255
    out = np.zeros(n, np.uint8)
    run(build(K.shared_bytes), 2, 64, x, out, engine=engine)
    want = (x.astype(np.int32) + 1).astype(np.uint8).reshape(2, 64)[:, ::-1].ravel()
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_global_uint8_lookup_table(engine):
    img = RNG.integers(0, 256, 1000, dtype=np.uint8)
    out = np.zeros_like(img)
    run(build(K.gamma_lut), 8, 128, img, out, engine=engine)
    np.testing.assert_array_equal(out, K.GAMMA[img])


def test_launch_checks_small_dtypes():
    compiled = build(K.invert)
    spec = next(a for a in compiled.args if a.name == "img")
    check_array(compiled, spec, np.zeros((2, 2), np.uint8))
    for bad in (np.zeros((2, 2), np.int8), np.zeros((2, 2), np.bool_), np.zeros(4, np.uint8),
                np.zeros((2, 2), np.int32)):
        with pytest.raises(ArgumentTypeError, match=r"argument img expects a 2-D uint8 array"):
            check_array(compiled, spec, bad)
    compiled = build(K.make_mask)
    spec = next(a for a in compiled.args if a.name == "mask")
    check_array(compiled, spec, np.zeros(3, np.bool_))
    with pytest.raises(ArgumentTypeError, match=r"argument mask expects a 1-D bool array"):
        check_array(compiled, spec, np.zeros(3, np.uint8))


def test_atomics_on_small_types_are_compile_errors():
    for fn, t in ((K.atomic_add8, "u8"), (K.atomic_max16, "i16")):
        with pytest.raises(KernelCompileError, match=rf"umd.atomic.\w+ on {t}.*no 8- or 16-bit atomics"):
            build(fn)


@pytest.mark.parametrize("engine", ENGINES)
def test_small_scalar_arguments_wrap_as_numpy_does(engine):
    """Each value is wrapped to its type's width and sign-extended as numpy's astype
    does (Numba converts an argument to the signature's type); a bool is its truth."""
    values = (300, 200, 70000, -40000, 2)
    out = np.zeros(7, np.int32)
    run(build(K.small_scalars), 1, 32, *values, out, engine=engine)
    want = [np.array(v).astype(t).item() for v, t in zip(values[:4], (np.uint8, np.int8, np.uint16, np.int16))]
    assert want == [44, -56, 4464, 25536]
    assert out.tolist() == want + [1, sum(want), 0]
    out[:] = 0
    run(build(K.small_scalars), 1, 32, 255, -128, 65535, -32768, 0, out, engine=engine)
    assert out.tolist() == [255, -128, 65535, -32768, 0, 255 - 128 + 65535 - 32768, -1]


def test_small_scalar_arguments_in_the_kernarg_segment():
    """umd.launch packs each in a 32-bit slot, widened; a float for one is a LaunchError."""
    compiled = build(K.small_scalars)
    assert [(a.kind, a.size) for a in compiled.args[:5]] == \
        [("u8", 4), ("i8", 4), ("u16", 4), ("i16", 4), ("b1", 4)]
    raw, _ = pack_args(compiled, (1, 1, 1), (32, 1, 1),
                       [np.uint8(7), -1, 65536 + 5, np.int16(-2), np.bool_(True), 0x1000])
    assert struct.unpack_from("<5i", raw, 0) == (7, -1, 5, -2, 1)
    with pytest.raises(LaunchError, match=r"argument a is u8; got float 1.5"):
        pack_args(compiled, (1, 1, 1), (32, 1, 1), [1.5, 0, 0, 0, False, 0x1000])


def test_type_names():
    assert umd.uint8 is umd.u8 and umd.int8 is umd.i8 and umd.uint16 is umd.u16
    assert umd.int16 is umd.i16 and umd.boolean is umd.b1
    assert [t.dtype for t in (umd.u8, umd.i8, umd.u16, umd.i16, umd.b1)] == \
        [np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.bool_)]
    assert repr(umd.u8[:, :]) == "u8[:, :]" and repr(umd.Ptr[umd.b1]) == "Ptr[b1]"
