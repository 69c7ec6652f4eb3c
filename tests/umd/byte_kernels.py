"""Numba-CUDA-style kernels on 8- and 16-bit and boolean arrays (uint8 images, int16
accumulators, boolean masks), written as Numba users write them (`cuda.` -> `umd.`,
plus the annotations docs/umd-compiler.md asks for: `u8[:, :]` for a 2-D uint8 array,
`b1[:]` for a 1-D np.bool_ array). tests/umd/test_small_types.py runs them on both
executors; tests/umd/test_small_types_e2e.py runs them through a mount.
"""
import numpy as np

import umd
from umd import b1, boolean, f32, i8, i16, i32, int16, u8, u16, uint8


@umd.jit
def invert(img: u8[:, :], out: u8[:, :]):
    y, x = umd.grid(2)
    if y < img.shape[0] and x < img.shape[1]:
        out[y, x] = 255 - img[y, x]


@umd.jit
def threshold(img: uint8[:, :], t: i32, out: uint8[:, :]):
    y, x = umd.grid(2)
    if y < img.shape[0] and x < img.shape[1]:
        out[y, x] = 255 if img[y, x] > t else 0


@umd.jit
def grayscale(rgb: u8[:, :, :], gray: u8[:, :]):
    # the integer BT.601 weights (77, 150, 29) / 256
    y, x = umd.grid(2)
    if y < rgb.shape[0] and x < rgb.shape[1]:
        gray[y, x] = (77 * rgb[y, x, 0] + 150 * rgb[y, x, 1] + 29 * rgb[y, x, 2]) >> 8


@umd.jit
def accumulate16(acc: int16[:], x: i16[:], reps: i32):
    i = umd.grid(1)
    if i < acc.shape[0]:
        for _ in range(reps):
            acc[i] += x[i]          # wraps on every store, as int16 does in Numba


@umd.jit
def accumulate_u16(acc: u16[:], x: u16[:]):
    i = umd.grid(1)
    if i < acc.shape[0]:
        acc[i] = acc[i] + x[i]


@umd.jit
def make_mask(x: i8[:], t: i32, mask: b1[:]):
    i = umd.grid(1)
    if i < x.shape[0]:
        mask[i] = x[i] > t


@umd.jit
def select(x: i8[:], mask: boolean[:], out: i32[:]):
    i = umd.grid(1)
    if i < x.shape[0]:
        if mask[i]:
            out[i] = x[i]
        else:
            out[i] = 0


@umd.jit
def count_true(mask: b1[:], out: i32[:]):
    # a boolean element counts as 0/1 in arithmetic
    i = umd.grid(1)
    if i < mask.shape[0]:
        out[i] = mask[i] + mask[i]


@umd.jit
def widen(a: i8[:], b: u8[:], c: i16[:], d: u16[:], out: i32[:, :]):
    # loads sign- or zero-extend to 32 bits
    i = umd.grid(1)
    if i < a.shape[0]:
        out[0, i] = a[i]
        out[1, i] = b[i]
        out[2, i] = c[i]
        out[3, i] = d[i]
        out[4, i] = b[i] * b[i] + d[i]      # int32 arithmetic: no wrap at 8 or 16 bits


@umd.jit
def store_wraps(v: i32[:], f: f32[:], o8: u8[:], s8: i8[:], o16: u16[:], s16: i16[:],
                fo8: u8[:], fs8: i8[:], bo: b1[:], from_bool: u8[:]):
    i = umd.grid(1)
    if i < v.shape[0]:
        o8[i] = v[i]
        s8[i] = v[i]
        o16[i] = v[i]
        s16[i] = v[i]
        fo8[i] = f[i]           # truncation toward zero, then wrap
        fs8[i] = f[i]
        bo[i] = v[i]            # nonzero -> True
        from_bool[i] = v[i] > 0


@umd.jit
def casts(v: i32[:], out: i32[:, :]):
    i = umd.grid(1)
    if i < v.shape[0]:
        out[0, i] = u8(v[i])
        out[1, i] = np.int8(v[i])
        out[2, i] = u16(v[i]) + 0
        out[3, i] = i16(v[i])
        out[4, i] = b1(v[i])
        out[5, i] = np.uint8(v[i]) + np.uint8(v[i])      # int32 arithmetic after the cast


@umd.jit
def flat_bytes(p: umd.Ptr[u8], out: i32[:]):
    i = umd.grid(1)
    if i < out.shape[0]:
        out[i] = p[i]


@umd.jit
def shared_bytes(x: u8[:], out: u8[:]):
    s = umd.shared.array(64, np.uint8)
    t = umd.threadIdx.x
    i = umd.grid(1)
    if i < x.shape[0]:
        s[t] = x[i] + 1
    umd.syncthreads()
    if i < x.shape[0]:
        out[i] = s[63 - t]


@umd.jit
def local_shorts(x: i16[:], out: i16[:]):
    tmp = umd.local.array(4, i16)
    i = umd.grid(1)
    if i < x.shape[0]:
        for k in range(4):
            tmp[k] = x[i] * (k + 1) * 4096
        out[i] = tmp[0] + tmp[1] + tmp[2] + tmp[3]


# -- refused (plain functions: tests/umd/test_small_types.py builds them) --------------

def atomic_add8(h: u8[:], i: i32):
    umd.atomic.add(h, i, 1)


def atomic_max16(h: i16[:]):
    umd.atomic.max(h, 0, 3)


@umd.jit
def small_scalars(a: u8, b: i8, c: u16, d: i16, flag: b1, out: i32[:]):
    """8/16-bit and bool scalar arguments: i32 values in the kernel, as Numba widens them."""
    i = umd.grid(1)
    if i == 0:
        out[0] = a
        out[1] = b
        out[2] = c
        out[3] = d
        out[4] = 1 if flag else 0
        out[5] = a + b + c + d            # arithmetic on them is int32 arithmetic
        if not flag:
            out[6] = -1


GAMMA = (255 * (np.arange(256) / 255.0) ** 0.5).astype(np.uint8)     # a global lookup table


@umd.jit
def gamma_lut(img: u8[:], out: u8[:]):
    i = umd.grid(1)
    if i < img.shape[0]:
        out[i] = GAMMA[img[i]]
