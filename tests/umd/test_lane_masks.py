"""Vector bools kept as lane masks in SGPRs (compiler/lane_masks.py, docs/umd-compiler.md
1): a loop-invariant condition is one v_cmp before the loop and an s_and in it, not a
0/1 VGPR re-tested every iteration; kernels whose conditions change EXEC inside loops,
break out of them or are read after them compute bit for bit what the level-1
compile (no lane masks) computes, and what numpy computes."""
import re

import numpy as np
import pytest

import umd
from umd import Ptr, f32, i32
from umd.compiler import build

from . import kernels as K
from . import numba_kernels as N
from .refrun import run
from .test_compiler_opt import loop_body, same_as_level1

RNG = np.random.default_rng(20)


def k0_loop(asm: str) -> list[str]:
    return loop_body(asm, 0)


def before_loop(asm: str) -> list[str]:
    text = asm.split(re.search(r"^\.L\d+_loop:", asm, re.M).group(0), 1)[0]
    return [ln.split()[0] for ln in text.splitlines() if ln.startswith("    ")]


def test_matmul_invariant_conditions_are_masks_not_retested_values():
    asm = build(K.matmul).asm_text
    body = k0_loop(asm)
    # row < m and col < n: one v_cmp each before the loop, into an SGPR; no 0/1 VGPR
    # (v_cndmask) before the loop, no v_cmp_ne test of one in the loop
    assert "v_cndmask_b32" not in before_loop(asm)
    assert "v_cmp_ne_u32" not in body and "v_cndmask_b32" not in body
    assert body.count("v_cmp_lt_i32") == 2           # k0 + tx < k, k0 + ty < k
    assert body.count("s_and_b32") == 2              # each ANDed with its invariant mask
    # the store's `row < m and col < n` after the loop: two masks ANDed, no VGPR test
    tail = asm.split("s_cbranch_scc1", 1)[1]
    assert "v_cmp_ne_u32" not in tail and "v_and_b32" not in tail


@umd.kernel
def masks_in_loops(n: i32, x: Ptr[f32], out: Ptr[i32]):
    i = umd.thread_idx.x
    pos = x[i] > 0.0                   # a vector bool used in loops and after them
    small = i < n
    acc = 0
    for j in range(n):                 # uniform loop, EXEC changed inside it
        if j % 3 == 0 and i > j:
            if pos and small:
                acc += j
            elif pos:
                acc -= 1
        if i + j > n and not pos:
            acc += 100
        acc += 7 if pos else 1
    t = 0
    while t < i:                       # divergent loop, with a break and a continue
        t += 1
        if pos and t % 5 == 0:
            continue
        if not small and t > 20:
            break
        if pos or t == 2:
            acc += 3
    if pos and small:
        out[i] = acc
    else:
        out[i] = -acc


def masks_in_loops_ref(n, x):
    out = []
    for i in range(len(x)):
        pos, small, acc = x[i] > 0, i < n, 0
        for j in range(n):
            if j % 3 == 0 and i > j:
                if pos and small:
                    acc += j
                elif pos:
                    acc -= 1
            if i + j > n and not pos:
                acc += 100
            acc += 7 if pos else 1
        j = 0
        while j < i:
            j += 1
            if pos and j % 5 == 0:
                continue
            if not small and j > 20:
                break
            if pos or j == 2:
                acc += 3
        out.append(acc if pos and small else -acc)
    return out


def test_masks_across_loops_that_change_exec():
    c = build(masks_in_loops)
    # pos and small live across both loops as masks: no 0/1 VGPR re-tested in a loop,
    # none made before them (the v_cndmask left there is `7 if pos else 1`'s select)
    assert "v_cmp_ne_u32" not in c.asm_text
    assert before_loop(c.asm_text).count("v_cndmask_b32") == 1
    assert re.search(r"s_and_saveexec_b32 s\d+, s\d+", c.asm_text)
    for n in (0, 9, 40):
        x = RNG.standard_normal(64).astype(np.float32)
        (_, got) = same_as_level1(masks_in_loops, 1, 64, n, x, np.zeros(64, np.int32))
        np.testing.assert_array_equal(got, masks_in_loops_ref(n, x))


@umd.kernel
def bool_after_divergent_loop(n: i32, x: Ptr[f32], out: Ptr[i32]):
    i = umd.thread_idx.x
    k = 0
    last = False
    while k < i % 7:                   # divergent: each lane leaves after i % 7 turns
        big = x[k] > 0.5               # assigned once, in the loop: lanes that left
        last = big                     # earlier must keep their own last value
        k += 1
    hit = x[i] < 0.0                   # under the whole EXEC, read after the loop
    for j in range(n):
        if i % 2 == 0:
            hit = not hit              # reassigned: a 0/1 value, not a mask
    if last and k > 0:
        out[i] = 1 + (2 if hit else 0)
    else:
        out[i] = 4 if hit else 8


def test_bool_after_divergent_loop():
    x = RNG.standard_normal(32).astype(np.float32)
    for n in (0, 3):
        (_, got) = same_as_level1(bool_after_divergent_loop, 1, 32, n, x, np.zeros(32, np.int32))
        want = []
        for i in range(32):
            last = i % 7 > 0 and x[i % 7 - 1] > 0.5
            hit = (x[i] < 0) != (i % 2 == 0 and n % 2 == 1)
            want.append(1 + 2 * hit if last else (4 if hit else 8))
        np.testing.assert_array_equal(got, want)


@umd.kernel
def select_on_masks(n: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    inside = i < n
    neg = x[i % 16] < 0.0
    acc = 0.0
    for j in range(4):
        acc += (x[j] if neg and inside else 1.0) * 2.0
        acc += 0.5 if neg or j == 2 else 0.25
    if inside:
        out[i] = acc


def test_selects_on_masks():
    n = 45
    x = RNG.standard_normal(16).astype(np.float32)
    (_, got) = same_as_level1(select_on_masks, 2, 32, n, x, np.zeros(n, np.float32))
    want = []
    for i in range(n):
        neg, acc = x[i % 16] < 0, np.float32(0)
        for j in range(4):
            acc = np.float32(acc + np.float32((x[j] if neg else np.float32(1)) * np.float32(2)))
            acc = np.float32(acc + np.float32(0.5 if neg or j == 2 else 0.25))
        want.append(acc)
    np.testing.assert_array_equal(got, np.array(want, np.float32))


@pytest.mark.parametrize("m,n,k", [(37, 53, 29), (16, 16, 16), (5, 70, 33)])
def test_matmul_ragged_matches_numpy_and_level1(m, n, k):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    grid = ((n + 15) // 16, (m + 15) // 16)
    (_, _, got) = same_as_level1(K.matmul, grid, (16, 16), m, n, k, a, b,
                                 np.full((m, n), 7.0, np.float32))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    c = np.zeros((m, n), np.float32)          # the Cython core runs the same code
    run(build(K.matmul), grid, (16, 16), m, n, k, a, b, c, engine="cython")
    np.testing.assert_array_equal(c.view(np.uint32), got.view(np.uint32))


def test_variable_step_loop_test_is_a_select_of_masks():
    # range(start, n, stride): `i < n if stride > 0 else i > n` each iteration is two
    # v_cmp into SGPRs and an s_cselect_b32 of the masks on the uniform sign, ANDed
    # into EXEC; no 0/1 VGPRs (before: three v_cndmask, two v_cmp_ne, four s_mov)
    c = build(N.saxpy_grid_stride)
    body = loop_body(c.asm_text)
    assert "v_cndmask_b32" not in body and "v_cmp_ne_u32" not in body
    assert body.count("s_cselect_b32") == 1
    assert len(body) + 1 <= 14
    n = 1000
    x, y = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    (_, _, got) = same_as_level1(N.saxpy_grid_stride, 3, 64, np.float32(1.5), x, y,
                                 np.zeros(n, np.float32))
    np.testing.assert_array_equal(got, np.float32(1.5) * x + y)
    (got,) = same_as_level1(N.negative_step, 2, 32, 150, np.zeros(150, np.int32))
    np.testing.assert_array_equal(got, np.arange(150) * 2)
    for start, stop, step in ((3, 40, 7), (40, 3, -5), (5, 5, 1)):
        same_as_level1(N.variable_step, 1, 32, start, stop, step, np.zeros(16, np.int32))
