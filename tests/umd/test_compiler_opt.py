"""The optimisation passes (docs/umd-compiler.md 1): each does what it says on a known
kernel, and the optimised kernels compute bit for bit what the kernels compiled with
folding and dead code only (level 1) compute, on the reference executor, including
ragged sizes, divergent control flow and loops that must not be unrolled."""
import re

import numpy as np
import pytest

import umd
from umd import Ptr, f32, i32
from umd.compiler import build

from . import kernels as K
from . import numba_kernels as N
from .refrun import run

RNG = np.random.default_rng(14)


def mnemonics(compiled) -> list[str]:
    return [ln.split()[0] for ln in compiled.asm_text.splitlines()
            if ln.startswith("    ") and not ln.strip().startswith(".")]


def loop_body(asm: str, n: int = 0) -> list[str]:
    """The instructions of the n-th loop (from its label to its back branch: an
    s_branch, or the s_cbranch_scc1 of a rotated uniform loop)."""
    labels = re.findall(r"^(\.L\d+_loop):", asm, re.M)
    top = labels[n]
    text = asm.split(top + ":\n", 1)[1].split(f"s_branch {top}\n", 1)[0].split(f"s_cbranch_scc1 {top}\n", 1)[0]
    return [ln.split()[0] for ln in text.splitlines() if ln.startswith("    ") and ln.strip()]


MULTIPLIES = ("v_mul_f32", "v_mad_f32", "v_fma_f32")


def per_multiply_add(compiled) -> float:
    """Instructions per multiply (v_mul_f32, v_mad_f32 or v_fma_f32) in the innermost
    loop that multiplies."""
    asm = compiled.asm_text
    bodies = [loop_body(asm, k) for k in range(asm.count("_loop:"))]
    body = min((b for b in bodies if any(m in b for m in MULTIPLIES)), key=len)
    return (len(body) + 1) / sum(body.count(m) for m in MULTIPLIES)   # + the back branch


# -- each pass on a known kernel ---------------------------------------------------------
def test_cse_one_shift_for_three_accesses_of_saxpy():
    # y[i] = a * x[i] + y[i]: the index's << 2 once, not per access; no copy of i
    plain, opt = build(K.saxpy, level=1), build(K.saxpy)
    assert mnemonics(plain).count("v_lshl_b32") == 3
    assert mnemonics(opt).count("v_lshl_b32") == 1
    assert "v_mov_b32" in mnemonics(plain) and "v_mov_b32" not in mnemonics(opt)
    assert len(mnemonics(opt)) < len(mnemonics(plain))


@umd.kernel
def repeated(n: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    if i < n:
        out[i] = x[i] * f32(i * 3 + 1) + f32(i * 3 + 1)


def test_cse_expression_computed_once():
    c = build(repeated)
    plain = build(repeated, level=1)
    def count(k, op):   # level 2 turns i's multiply and add into one v_mad_u32
        return k.count(op) + (k.count("v_mad_u32") if op == "v_add_u32" else 0)
    for op in ("v_mul_lo_u32", "v_add_u32", "v_cvt_f32_i32"):      # i * 3 + 1, f32(...)
        assert count(mnemonics(plain), op) - count(mnemonics(c), op) == 1, op
    n = 70
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(c, 2, 64, n, x, out)
    k = (np.arange(n) * 3 + 1).astype(np.float32)
    np.testing.assert_array_equal(out, x * k + k)


@umd.kernel
def row_sums(n: i32, m: i32, a: Ptr[f32], out: Ptr[f32]):
    i = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    if i < n:
        s = 0.0
        for j in range(m):
            s += a[i * m + j]
        out[i] = s


def test_licm_moves_the_row_offset_out_of_the_loop():
    c = build(row_sums)
    assert "v_mul_lo_u32" not in loop_body(c.asm_text)
    assert "v_mul_lo_u32" in loop_body(build(row_sums, level=1).asm_text)
    n, m = 37, 13
    a = RNG.standard_normal((n, m)).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(c, 1, 64, n, m, a, out)
    want = np.zeros(n, np.float32)
    for j in range(m):
        want = want + a[:, j]
    np.testing.assert_array_equal(out, want)


def test_unroll_and_lds_offsets_in_the_tiled_matmul():
    c, plain = build(K.matmul), build(K.matmul, level=1)
    assert c.ir_text.count("loop") == 1 and plain.ir_text.count("loop") == 2
    # b_tile[kk, tx] (at LDS 1024 + 64 kk) in pairs through tx * 4 + 1024 (lds_pairs.py)
    base = re.search(r"v_add_u32 (v\d+), v\d+, 1024\n(?:.*\n)*?\.L\d+_loop:", c.asm_text).group(1)
    pairs = re.findall(rf"ds_read2_b32 v\[\d+:\d+\], {base} offset0:(\d+) offset1:(\d+)",
                       c.asm_text)
    assert sorted(int(o) for p in pairs for o in p) == [16 * k for k in range(16)]
    assert "ds_read_b32" not in c.asm_text
    quads = re.findall(r"ds_read_b128 v\[\d+:\d+\], v\d+, (\d+)", c.asm_text)
    assert sorted(map(int, quads)) == [0, 16, 32, 48]       # a_tile[ty, kk..kk+3]
    # 2 LDS reads, the multiply and the add per multiply-add, plus the counter and the
    # rotated loop's test and branch at the bottom
    assert per_multiply_add(plain) == 14
    assert per_multiply_add(c) < 6
    # the unrolled body: per four multiply-adds, one quad read of A's row, two pair reads
    # of B's column and four v_mad_f32
    body = c.asm_text.split("s_barrier\n", 1)[1].split("s_barrier\n", 1)[0]
    ops = [ln.split()[0] for ln in body.splitlines() if ln.startswith("    ") and ln.strip()]
    assert ops == (["ds_read_b128"] + ["ds_read2_b32", "v_mad_f32", "v_mad_f32"] * 2) * 4


@umd.kernel
def lds_rows(n: i32, x: Ptr[f32], out: Ptr[f32], flags: Ptr[i32]):
    tile = umd.shared_array(f32, (8, 8))
    itile = umd.shared_array(i32, 64)
    t = umd.thread_idx.x
    tile[t // 8, t % 8] = x[t]
    itile[t] = flags[t]
    umd.syncthreads()
    r = t // 8
    s = 0.0
    for k in range(8):                      # two quads of row r
        s += tile[r, k] * x[k]
    out[t] = s
    out[64 + t] = tile[r, 0] + tile[r, 1] + tile[r, 2] + tile[7 - r, 3]   # other base
    m = 0
    for k in range(4):                      # i32: not merged
        m += itile[4 * r + k]
    flags[t] = m
    out[128 + t] = tile[r, 4]               # stored as it is: not merged
    u = tile[r, 5] * 2.0
    umd.syncthreads()
    tile[t // 8, t % 8] = 0.0               # a store between: not merged
    umd.syncthreads()
    out[192 + t] = u + tile[r, 6] * tile[r, 7]


def test_lds_quads_merge_four_consecutive_shared_reads():
    plain, c = build(lds_rows, level=1), build(lds_rows)
    assert "ds_read_b128" not in plain.asm_text
    assert mnemonics(c).count("ds_read_b128") == 2
    x = RNG.standard_normal(64).astype(np.float32)
    flags = RNG.integers(-50, 50, 64).astype(np.int32)
    (_, out, got_flags) = same_as_level1(lds_rows, 1, 64, 64, x, np.zeros(256, np.float32),
                                         flags)
    tile, r = x.reshape(8, 8), np.arange(64) // 8
    s = np.zeros(64, np.float32)
    for k in range(8):
        s = s + tile[r, k] * x[k]
    np.testing.assert_array_equal(out[:64], s)
    np.testing.assert_array_equal(out[64:128], tile[r, 0] + tile[r, 1] + tile[r, 2] + tile[7 - r, 3])
    np.testing.assert_array_equal(out[128:192], tile[r, 4])
    np.testing.assert_array_equal(out[192:], tile[r, 5] * np.float32(2.0))
    np.testing.assert_array_equal(got_flags, flags.reshape(16, 4).sum(1)[r])


@umd.kernel
def multiply_adds(n: i32, a: f32, x: Ptr[f32], y: Ptr[f32], out: Ptr[f32]):
    i = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    if i < n:
        t = x[i] * y[i]
        out[i] = a * x[i] + y[i] + t * 2.0     # a*x + y and t*2.0 + (...) are mads
        out[n + i] = 3.0 * 0.5 + x[i]          # constants fold, nothing to merge
        out[2 * n + i] = x[i] * 3.0 + 1.0      # two constants: a mul and an add stay
        out[3 * n + i] = t + t                 # t has two uses: its mul stays


def test_mad_merges_a_multiply_into_its_add_bit_for_bit():
    # v_mad_f32 rounds the product, then the sum: what v_mul_f32 + v_add_f32 give, for
    # NaNs, infinities, overflow and denormals too (same_as_level1 compares the bits)
    plain, c = build(multiply_adds, level=1), build(multiply_adds)
    assert "v_mad_f32" not in mnemonics(plain)
    assert mnemonics(c).count("v_mad_f32") == 2 and mnemonics(c).count("v_mul_f32") == 2
    assert "v_fma_f32" not in mnemonics(c)
    n = 64
    x = np.concatenate([RNG.standard_normal(32), [np.nan, np.inf, -np.inf, 3e38, -3e38,
                        1e-40, -1e-45, 0.0, -0.0, 1e-20] * 3, [1.5, 2.5]]).astype(np.float32)
    with np.errstate(all="ignore"):
        y = np.roll(x, 5) * np.float32(-1.25)
        (_, _, got) = same_as_level1(multiply_adds, 1, 64, n, np.float32(0.75), x, y,
                                     np.zeros(4 * n, np.float32))
        a, t = np.float32(0.75), x * y
        want = np.concatenate([a * x + y + t * np.float32(2.0), x + np.float32(1.5),
                               x * np.float32(3.0) + np.float32(1.0), t + t])
    np.testing.assert_array_equal(got, want)


@umd.kernel
def not_unrolled(n: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.thread_idx.x
    s = 0.0
    for k in range(n):                 # variable trip count
        s += x[k]
    for k in range(100):               # too many trips
        s += f32(k)
    for k in range(4):                 # a break
        if x[k] > 1.0:
            break
        s += x[k]
    out[i] = s


def test_unroll_leaves_variable_long_and_breaking_loops():
    c = build(not_unrolled)
    assert c.ir_text.count("loop") == 3
    x = np.array([0.5, -0.25, 2.0, 0.125, 1.0], np.float32)
    out = np.zeros(1, np.float32)
    run(c, 1, 1, 5, x, out)
    want = np.float32(0)
    for v in x:
        want = np.float32(want + v)
    for k in range(100):
        want = np.float32(want + np.float32(k))
    for v in x[:4]:
        if v > 1:
            break
        want = np.float32(want + v)
    assert out[0] == want


def test_stencil_reads_the_halo_with_negative_offsets():
    c = build(N.stencil_1d)
    offsets = [int(o) for o in re.findall(r"ds_read_b32 v\d+, v\d+, (-?\d+)", c.asm_text)]
    quads = re.findall(r"ds_read_b128 v\[\d+:\d+\], v\d+, (-?\d+)", c.asm_text)
    offsets += [int(o) + 4 * k for o in quads for k in range(4)]     # the first four merge
    pairs = re.findall(r"ds_read2_b32 v\[\d+:\d+\], v\d+ offset0:(\d+) offset1:(\d+)", c.asm_text)
    offsets += [4 * int(o) for p in pairs for o in p]                 # the next two
    assert len(quads) == len(pairs) == 1 and sorted(offsets) == [4 * k for k in range(-N.RADIUS, N.RADIUS + 1)]


@umd.kernel
def two_sided_store(n: i32, x: Ptr[f32], out: Ptr[f32]):
    i = umd.thread_idx.x
    if i < n:
        if x[i] > 0.0:
            out[i] = x[i] * 2.0
        else:
            out[i] = x[i] - 1.0


def test_sinking_one_store_after_if_else():
    c, plain = build(two_sided_store), build(two_sided_store, level=1)
    assert mnemonics(plain).count("global_store_dword") == 2
    assert mnemonics(c).count("global_store_dword") == 1
    x = RNG.standard_normal(40).astype(np.float32)
    (_, got) = same_as_level1(two_sided_store, 1, 64, 37, x, np.zeros(40, np.float32))
    np.testing.assert_array_equal(got[:37], np.where(x[:37] > 0, x[:37] * np.float32(2),
                                                      x[:37] - np.float32(1)))
    assert not got[37:].any()
    # the matmul's tile loads: `t[ty, tx] = a[...] if inside else 0.0` as one ds_write
    # after an if without else
    m = build(K.matmul)
    assert mnemonics(m).count("ds_write_b32") == 2 and "_else" not in m.asm_text


def test_adjacent_arguments_share_one_scalar_load():
    # n, a, x, y (offsets 0..23) and block_dim.x (24: the block dims come first among
    # the hidden arguments) are 7 dwords in s6..s12: one s_load_dwordx8 of offsets
    # 0..31, inside the 48-byte segment, whose eighth dword lands in s13, which holds
    # no argument
    c = build(K.saxpy)
    loads = [line.split() for line in c.asm_text.splitlines() if "s_load" in line]
    assert [(ld[0], ld[1], ld[-1]) for ld in loads] == [("s_load_dwordx8", "s[6:13],", "0")]


@umd.kernel
def gap_kernel(n: i32, a: f32, x: Ptr[f32], y: Ptr[f32]):
    # reads grid_dim.x (offset 36) past the block dims: a 3-dword gap from y's end
    i = umd.thread_idx.x
    if i < n:
        y[i] = a * x[i] + f32(umd.grid_dim.x)


def test_small_kernarg_gaps_are_loaded_over():
    # n..y (0..23) and grid_dim.x (36) keep their distance (the block dims between are
    # a 3-dword gap, regalloc KERNARG_GAP_DWORDS): s6..s15, one x8 and one x2; the
    # kernel reads the right values
    c = build(gap_kernel)
    loads = [line.split() for line in c.asm_text.splitlines() if "s_load" in line]
    assert [(ld[0], ld[-1]) for ld in loads] == [("s_load_dwordx8", "0"), ("s_load_dwordx2", "32")]
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    run(c, 3, 32, 20, np.float32(2), x, y)
    np.testing.assert_array_equal(y[:20], 2 * x[:20] + 3)
    assert not y[20:].any()


@umd.kernel
def far_arguments(n: i32, pad0: i32, pad1: i32, pad2: i32, pad3: i32, m: i32, out: Ptr[i32]):
    i = umd.thread_idx.x
    if i < n:
        out[i] = m
    if i < m:
        out[i + 32] = n


def test_arguments_far_apart_get_loads_of_their_own():
    # n (0) and m (20) are 4 dwords apart: more than the gap kept (regalloc
    # KERNARG_GAP_DWORDS = 3), so m is not placed 5 SGPRs after n and gets its own
    # load; the kernel still reads the right values
    c = build(far_arguments)
    loads = [m for m in mnemonics(c) if m.startswith("s_load")]
    assert len(loads) >= 2
    out = np.zeros(64, np.int32)
    run(c, 1, 32, 20, 0, 0, 0, 0, 10, out)
    assert list(out[:20]) == [10] * 20 and not out[20:32].any()
    assert list(out[32:42]) == [20] * 10 and not out[42:].any()


def test_short_exec_skips_and_dead_exec_restores_go():
    # saxpy's `if i < n` body is five exec-safe instructions: no s_cbranch_execz; the
    # exec restore before s_endpgm is dead; level 1 keeps both. Ragged n: the last wave
    # runs the body with some (and a wave past n with no) lanes on, results stay exact
    opt, plain = build(K.saxpy), build(K.saxpy, level=1)
    assert "s_cbranch_execz" in mnemonics(plain) and "s_cbranch_execz" not in mnemonics(opt)
    assert mnemonics(opt)[-2:] == ["global_store_dword", "s_endpgm"]
    assert len(opt.line_table) == len(mnemonics(opt))
    n = 70
    x, y = RNG.standard_normal(96).astype(np.float32), RNG.standard_normal(96).astype(np.float32)
    want = y.copy()
    want[:n] = np.float32(1.5) * x[:n] + y[:n]
    run(opt, 3, 32, n, np.float32(1.5), x, y)
    np.testing.assert_array_equal(y, want)


@umd.kernel
def skip_kept(n: i32, out: Ptr[i32]):
    i = umd.thread_idx.x
    if i < n:
        out[i] = umd.atomic.add(out, 40, 1)
        if out[i] > 3:
            out[i] = 7


def test_exec_skips_kept_over_scalar_or_branching_bodies():
    # a body with a nested branch (SALU, SCC/VCC writes) keeps its skip
    c = build(skip_kept)
    assert "s_cbranch_execz" in mnemonics(c)


def test_and_of_compares_is_built_in_vcc():
    # `if row < m and k0 + tx < k`: lane masks ANDed in VCC, no 0/1 values in VGPRs
    body = loop_body(build(K.matmul).asm_text)
    assert "v_cndmask_b32" not in body and "s_and_b32" in body


@umd.kernel
def bit_and_condition(n: i32, v: i32, out: Ptr[i32]):
    i = umd.thread_idx.x
    if (i < n) & v:                    # an integer &: true where v's low bit is set
        out[i] = 1


def test_integer_and_is_not_fused_as_a_logical_and():
    for v in (1, 2, 3):
        (got,) = same_as_level1(bit_and_condition, 1, 32, 20, v, np.zeros(32, np.int32))
        np.testing.assert_array_equal(got, [(i < 20) & v for i in range(32)])


# -- optimised == level 1, bit for bit ------------------------------------------------------
def same_as_level1(kernel, grid, block, *args):
    outs = []
    for level in (1, 2):
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        run(build(kernel, level=level), grid, block, *copies)
        outs.append([a for a in copies if isinstance(a, np.ndarray)])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a.view(np.uint32) if a.dtype == np.float32 else a,
                                      b.view(np.uint32) if b.dtype == np.float32 else b)
    return outs[1]


@pytest.mark.parametrize("m,n,k", [(32, 16, 48), (20, 19, 37)])
def test_matmul_whole_and_ragged(m, n, k):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    grid = ((n + 15) // 16, (m + 15) // 16)
    (_, _, got) = same_as_level1(K.matmul, grid, (16, 16), m, n, k, a, b, c)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_saxpy_ragged():
    n = 1000
    x, y = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    (_, got) = same_as_level1(K.saxpy, (n + 255) // 256, 256, n, np.float32(0.75), x, y)
    np.testing.assert_array_equal(got, np.float32(0.75) * x + y)


def test_stencil_ragged():
    n = 150
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    (_, got) = same_as_level1(N.stencil_1d, (n + N.STENCIL_BLOCK - 1) // N.STENCIL_BLOCK,
                              N.STENCIL_BLOCK, x, out)
    pad = np.concatenate([np.zeros(N.RADIUS, np.float32), x, np.zeros(N.RADIUS, np.float32)])
    want = np.zeros(n, np.float32)
    for k in range(2 * N.RADIUS + 1):
        want = want + pad[k:k + n]
    np.testing.assert_array_equal(got, want)


def test_divergent_kernels_unchanged():
    n = 50
    x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0] * 10, np.float32)
    same_as_level1(K.classify, 1, 64, n, x, np.zeros(64, np.int32))
    same_as_level1(K.loops, 1, 64, 40, np.zeros(64, np.int32))
    xs = RNG.standard_normal(12).astype(np.float32)
    same_as_level1(K.uniform_loop, 1, 40, 12, xs, np.zeros(40, np.float32))
    xr = RNG.standard_normal(300).astype(np.float32)
    same_as_level1(K.reduce_sum, 5, 64, 300, xr, np.zeros(1, np.float32))
    xl = RNG.standard_normal(8 * 40).astype(np.float32)
    same_as_level1(N.local_sort, 1, 64, xl, np.zeros_like(xl))
    same_as_level1(not_unrolled, 1, 3, 5, np.array([0.5, -0.25, 2.0, 0.125, 1.0], np.float32),
                   np.zeros(3, np.float32))


def test_prologue_loads_never_write_reserved_sgprs():
    # Over every kernel of the test modules: no s_load of the prologue writes the
    # workgroup ids (s16..s18), nor scratch SGPRs (s2..s5) other than as the staging
    # of a vector or 64-bit argument. int_powers64's arguments
    # once put block_dim.x at its kernarg distance past s16..s18, and one x4 load
    # clobbered the workgroup ids.
    from . import wide_kernels as W
    from umd.kernel import Kernel
    kernels = [k for mod in (K, N, W) for k in vars(mod).values() if isinstance(k, Kernel)]
    checked = 0
    for k in kernels:
        if k.options.get("device"):
            continue
        for line in build(k).asm_text.splitlines():
            m = re.match(r"\s+s_load_dword(?:x\d+)? s\[?(\d+)(?::(\d+))?\]?, s\[0:1\]", line)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
                regs = set(range(lo, hi + 1))
                assert not regs & {16, 17, 18}, (k.fn.__name__, line)
                # scratch only as the staging of a vector or 64-bit argument (s2, s[2:3])
                assert not regs & {2, 3, 4, 5} or regs in ({2}, {2, 3}), (k.fn.__name__, line)
                checked += 1
    assert checked > 50


@umd.kernel
def uniform_loops(n: i32, out: Ptr[i32]):
    i = umd.thread_idx.x
    total = 0
    for k in range(n):              # zero iterations when n == 0
        total += k
    j = 0
    while j * j < n:                # a header (j * j) before the test
        j += 1
        if j == 5:
            continue
        total += 100
    out[i] = total + 1000 * j


def test_uniform_loops_are_rotated_and_still_exact():
    # the test at the bottom (s_cbranch_scc1 back to the top, no s_branch), the first
    # test once before the loop: zero-trip loops run nothing; continue goes through the
    # header again
    c = build(uniform_loops)
    assert not re.search(r"s_branch \.L\d+_loop", c.asm_text)
    assert len(re.findall(r"s_cbranch_scc1 \.L\d+_loop", c.asm_text)) == 2
    for n in (0, 1, 7, 30):
        out = np.zeros(32, np.int32)
        run(c, 1, 32, n, out)
        j = 0
        total = sum(range(n))
        while j * j < n:
            j += 1
            if j != 5:
                total += 100
        assert list(out) == [total + 1000 * j] * 32, n
