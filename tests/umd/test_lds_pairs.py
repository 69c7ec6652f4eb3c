"""compiler/lds_pairs.py (docs/umd-compiler.md 1.1): two shared reads through one address
register become one ds_read2_b32 where GCN's rules allow it and nothing between them
writes the LDS or synchronises, and the kernels still compute what level 1 computes."""
import re

import numpy as np

import umd
from umd import Ptr, f32, i32
from umd.compiler import build

from . import kernels as K
from .refrun import run
from .test_compiler_opt import per_multiply_add, same_as_level1

RNG = np.random.default_rng(15)
PAIR = re.compile(r"ds_read2_b32 v\[\d+:\d+\], (v\d+) offset0:(\d+) offset1:(\d+)")


@umd.kernel
def shared_reads(n: i32, x: Ptr[f32], flags: Ptr[i32], out: Ptr[f32], iout: Ptr[i32]):
    itile = umd.shared_array(i32, 64)           # LDS 0..255
    tile = umd.shared_array(f32, 512)           # LDS 256..2303
    t = umd.thread_idx.x
    for j in range(8):
        tile[t + 64 * j] = x[t + 64 * j]
    itile[t] = flags[t]
    umd.syncthreads()
    out[t] = tile[t] * tile[t + 5]              # a pair: dwords 64 and 69 past t * 4
    iout[t] = itile[t // 2] - itile[t // 2 + 3]     # an int32 pair: dwords 0 and 3
    out[64 + t] = tile[t] + tile[t + 256]       # 1024 bytes apart: no pair
    out[128 + t] = tile[t + 300] - tile[t + 301]    # past dword 255, no loop: no pair
    a = tile[t + 1]
    umd.syncthreads()
    out[192 + t] = a + tile[t + 2]              # across a barrier: no pair
    b = tile[t + 3]
    tile[448 + t] = 2.0                         # an LDS write between (nobody reads it)
    out[256 + t] = b * tile[t + 4]              # : no pair
    s = 0.0
    for j in range(n):                          # through t * 4 + 1456, made before the loop
        s += tile[t + 300] * tile[t + 310]
    out[320 + t] = s


def test_pairs_form_only_where_gcn_and_the_lds_allow():
    plain, c = build(shared_reads, level=1), build(shared_reads)
    assert "ds_read2_b32" not in plain.asm_text
    pairs = [(int(o0), int(o1)) for _, o0, o1 in PAIR.findall(c.asm_text)]
    assert sorted(pairs) == [(0, 3), (0, 10), (64, 69)], c.asm_text
    # the loop's pair reads through a register computed once, before the loop
    loop = c.asm_text.split("_loop:\n", 1)[1].split("_endloop:", 1)[0]
    base = next(r for r, o0, o1 in PAIR.findall(loop) if (o0, o1) == ("0", "10"))
    assert re.search(rf"v_add_u32 {base}, v\d+, 1456\n(?:.*\n)*?\.L\d+_loop:", c.asm_text)
    assert f"{base}," not in loop.replace(f"{base} offset0", "")
    # the others are separate reads
    singles = sorted(int(o) for o in re.findall(r"ds_read_b32 v\d+, v\d+, (\d+)", c.asm_text))
    assert singles == sorted(256 + 4 * d for d in (0, 256, 300, 301, 1, 2, 3, 4))
    n = 3
    x = RNG.standard_normal(512).astype(np.float32)
    flags = RNG.integers(-1000, 1000, 64).astype(np.int32)
    (_, _, out, iout) = same_as_level1(shared_reads, 1, 64, n, x, flags,
                                       np.zeros(384, np.float32), np.zeros(64, np.int32))
    t = np.arange(64)
    np.testing.assert_array_equal(out[:64], x[t] * x[t + 5])
    np.testing.assert_array_equal(iout, flags[t // 2] - flags[t // 2 + 3])
    np.testing.assert_array_equal(out[64:128], x[t] + x[t + 256])
    np.testing.assert_array_equal(out[128:192], x[t + 300] - x[t + 301])
    np.testing.assert_array_equal(out[192:256], x[t + 1] + x[t + 2])
    np.testing.assert_array_equal(out[256:320], x[t + 3] * x[t + 4])
    s = np.zeros(64, np.float32)
    for _ in range(n):
        s = s + x[t + 300] * x[t + 310]
    np.testing.assert_array_equal(out[320:], s)


def test_tiled_matmul_reads_b_in_pairs_and_still_equals_numpy():
    c = build(K.matmul)
    assert len(PAIR.findall(c.asm_text)) == 8
    # the k0 loop per 16 multiply-adds: 16 v_mad_f32, 4 quads of A and 8 pairs of B
    # (without the pairs 16 single reads: 8 instructions more), and the tile loads,
    # barriers and loop control (28 instructions)
    assert per_multiply_add(c) <= (16 + 4 + 8 + 28) / 16
    m, n, k = 40, 36, 48
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    got = np.zeros((m, n), np.float32)
    run(c, ((n + 15) // 16, (m + 15) // 16), (16, 16), m, n, k, a, b, got, engine="cython")
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
