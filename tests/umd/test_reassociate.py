"""Reassociation of integer add chains in loops (compiler/reassociate.py, docs/umd-compiler.md
1): `inv1 + var + inv2` becomes `(inv1 + inv2) + var`, whose first add leaves the loop
(licm.py). 32-bit adds are exact modulo 2^32 in any order, so negative and wrapping
intermediate values change nothing: the kernels here compute bit for bit what the
level-1 compile computes, and what numpy computes with the same wrapping."""
import re

import numpy as np

import umd
from umd import Ptr, f32, i32
from umd.compiler import build

from . import kernels as K
from .test_compiler_opt import loop_body, same_as_level1
from .test_lane_masks import k0_loop

RNG = np.random.default_rng(21)


def test_matmul_k0_loop_reads_a_through_a_hoisted_row_offset():
    asm = build(K.matmul).asm_text
    # a[row * k + k0 + tx]: row * k + tx once before the loop (one v_mad_u32, the
    # multiply and the add of tx); in the loop no multiply of row and no add of tx
    # to it (induction.py then steps the rest of the address in the latch)
    head = asm.split("_loop:", 1)[0]
    assert re.search(r"v_mad_u32 v\d+, v\d+, s\d+, v0\n", head)
    assert "v_mul_lo_u32" not in k0_loop(asm)


@umd.kernel
def strided_sums(n: i32, stride: i32, off: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.thread_idx.x
    acc = 0.0
    j = 0
    while j < n:                                  # j steps in the body: no induction.py
        acc += x[(i * stride + j + off) & 63]     # i * stride wraps for a large stride
        acc += x[i * 3 + j + off + 40]            # i * 3 + off < 0 for off < 0
        j += 1
    out[i] = acc


def strided_ref(n, stride, off, x):
    out = []
    for i in range(32):
        acc = np.float32(0)
        for j in range(n):
            idx = ((i * stride + j + off) & 0xFFFFFFFF) & 63
            acc = np.float32(acc + x[idx])
            acc = np.float32(acc + x[i * 3 + j + off + 40])
        out.append(acc)
    return np.array(out, np.float32)


def test_reassociated_indices_wrap_like_the_source():
    c = build(strided_sums)
    body = loop_body(c.asm_text)
    # per access one add of j to a hoisted part (6 adds before), no multiply in the loop
    assert body.count("v_add_u32") == 2
    assert "v_mul_lo_u32" not in body and "v_mad_u32" not in body
    x = RNG.standard_normal(256).astype(np.float32)
    for stride, off in ((1 << 30, 5), (-(1 << 31) + 7, -3), (0x7FFFFFFF, -40), (5, 0)):
        n = 8
        (got,) = same_as_level1(strided_sums, 1, 32, n, stride, off, x, np.zeros(32, np.float32))[1:]
        np.testing.assert_array_equal(got, strided_ref(n, stride, off, x))
