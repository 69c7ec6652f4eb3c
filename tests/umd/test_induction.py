"""Loop addresses stepped in the latch (compiler/induction.py, docs/umd-compiler.md 1.1):
an offset affine in a for-range counter is computed once before the loop and stepped
by its constant or uniform increment, not recomputed every iteration; exact modulo
2^32 for every input (counting down, a variable step, multiplies that wrap, a
divergent loop with break and continue), bit for bit what level 1 computes."""
import numpy as np
import pytest

import umd
from umd import Ptr, f32, i32
from umd.compiler import build

from . import kernels as K
from .test_compiler_opt import loop_body, same_as_level1
from .test_lane_masks import k0_loop

RNG = np.random.default_rng(22)


def test_matmul_k0_loop_steps_both_tile_addresses():
    body = k0_loop(build(K.matmul).asm_text)
    # per iteration: k0 + tx and k0 + ty for the bounds tests, and the two address
    # steps in the latch; no multiply-add or shift of an index left in the loop
    assert "v_mad_u32" not in body and "v_lshl_b32" not in body
    assert body.count("v_add_u32") == 4
    # 16 multiply-adds: 56 instructions before lane masks, reassociation and this
    assert len(body) + 1 == 51


@umd.kernel
def iv_loops(n: i32, m: i32, step: i32, off: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.thread_idx.x
    acc = 0.0
    for j in range(n - 1, -1, -1):                 # counting down
        acc += x[(j * m + i) * 2 + off]            # a multiply, an add, a multiply (off >= 0)
    for j in range(1, 3 * n, step):                # a uniform, variable step
        acc += x[j * m + i]
    for j in range(0, 3 * n, 3):                   # divergent: continue and break
        if j % 2 == 1 and i % 3 == 0:
            continue
        if j > i * 2:
            break
        acc += x[(i - j) * 3 + 100 + off]          # the counter subtracted
    out[i] = acc


@umd.kernel
def iv_wrap(n: i32, m: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.thread_idx.x
    acc = 0.0
    for j in range(0, 4 * n, 4):
        acc += x[j * m + i]            # j * m wraps past 2^32; the index does not
    out[i] = acc


def test_induction_variables_in_the_kernels():
    c = build(iv_wrap)
    body = loop_body(c.asm_text)
    assert "v_mad_u32" not in body and "v_lshl_b32" not in body
    assert "v_add_u32" in body                  # the address's step


@pytest.mark.parametrize("m", [1 << 30 | 1, -(1 << 30) + 2, 2])
def test_wrapping_steps_exact(m):
    n = 6
    x = RNG.standard_normal(256).astype(np.float32)
    (got,) = same_as_level1(iv_wrap, 1, 32, n, m, x, np.zeros(32, np.float32))[1:]
    want = []
    for i in range(32):
        acc = np.float32(0)
        for j in range(0, 4 * n, 4):
            idx = (j * m + i) & 0xFFFFFFFF
            acc = np.float32(acc + x[idx])
        want.append(acc)
    np.testing.assert_array_equal(got, np.array(want, np.float32))


@pytest.mark.parametrize("n,m,step,off", [(6, 3, 2, 5), (4, 1, 5, 3), (5, 2, 1, 1), (0, 2, 1, 0)])
def test_counting_down_variable_step_and_divergent_loops(n, m, step, off):
    x = RNG.standard_normal(512).astype(np.float32)
    same_as_level1(iv_loops, 1, 32, n, m, step, off, x, np.zeros(32, np.float32))
    c = build(iv_loops)
    assert c.asm_text.count("_loop:") == 3
