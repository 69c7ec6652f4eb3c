"""The reference compute executor (kmd.hw.cu_ref) against docs/isa.md: every instruction,
the EXEC/branch rules, faults, abort, and the sample kernels checked with numpy."""
import math
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kmd.hw import cu_ref, ref
from kmd.hw.ih import IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT, IH_SRC_PROT_FAULT
from kmd.hw.mmu import GpuFault
from vgpu import isa as I
from vgpu.asm import assemble

from .isa_gen import CODE_VA, MEM_VA, Rig, random_program

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kernels"
UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]      # s[2:3] = the data arena
A_OFF, B_OFF, C_OFF, OUT_OFF = 0, 0x1000, 0x2000, 0x3000


@pytest.fixture
def rig():
    return Rig(cu_ref.ComputeEngine, ref.PageTable)


def lanes_op(rig, line, a, b=None, c=None, n=32):
    """Run `line` (operands v4=a, v5=b, v6=c, result v7) on n lanes; returns u32 results."""
    for off, arr in ((A_OFF, a), (B_OFF, b), (C_OFF, c)):
        if arr is not None:
            rig.put(off, np.asarray(arr).view(np.uint32))
    text = f"""
    v_lshl_b32 v3, v0, 2
    global_load_dword v4, v3, s[2:3], {A_OFF}
    global_load_dword v5, v3, s[2:3], {B_OFF}
    global_load_dword v6, v3, s[2:3], {C_OFF}
    {line}
    global_store_dword v3, v7, s[2:3], {OUT_OFF}
    s_endpgm
    """
    r = rig.run(text, (1, 1, 1), (n, 1, 1), user_data=UD)
    assert r.status == "ok", r
    return rig.u32(OUT_OFF, n)


def f32(values):
    return np.array(values, np.float32)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def canon(x):
    u = bits(x).copy()
    u[np.isnan(np.asarray(x, np.float32))] = I.CANONICAL_NAN
    return u


SPECIAL = f32([0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, 3.5, 1e-45, -1e-45, 1e-38, 3.4e38,
               -3.4e38, np.inf, -np.inf, np.nan, 100.0, -100.0, 1e10, -7.25, 0.1, 2 ** 31,
               -2 ** 31, 2 ** 32, 5e9, -0.75, 88.0, 89.0, -104.0, 16777217.0, 1e-3, 42.0])
RNG = np.random.default_rng(1)
INTS = RNG.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
INTS[:8] = [0, 1, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 5, 31, 32]
INTS2 = RNG.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
INTS2[:8] = [0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 3, 0, 33, 7]


def _i(x):
    return np.asarray(x, np.uint32).astype(np.int64)


def _s(x):
    return np.asarray(x, np.uint32).view(np.int32).astype(np.int64)


def _div_i32(a, b):
    out = []
    for x, y in zip(_s(a), _s(b)):
        if y == 0:
            out.append(-1)
        elif x == -2 ** 31 and y == -1:
            out.append(x)
        else:
            out.append(int(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1))
    return np.array(out)


def _rem_i32(a, b):
    out = []
    for x, y in zip(_s(a), _s(b)):
        if y == 0:
            out.append(x)
        elif y == -1:
            out.append(0)
        else:
            out.append(int(math.fmod(x, y)))
    return np.array(out)


INT_OPS = {
    "v_add_u32": lambda a, b: _i(a) + _i(b),
    "v_sub_u32": lambda a, b: _i(a) - _i(b),
    "v_mul_lo_u32": lambda a, b: _i(a) * _i(b),
    "v_mul_hi_u32": lambda a, b: (_i(a).astype(object) * _i(b).astype(object)) >> 32,
    "v_mul_hi_i32": lambda a, b: (_s(a).astype(object) * _s(b).astype(object)) >> 32,
    "v_and_b32": lambda a, b: _i(a) & _i(b),
    "v_or_b32": lambda a, b: _i(a) | _i(b),
    "v_xor_b32": lambda a, b: _i(a) ^ _i(b),
    "v_lshl_b32": lambda a, b: _i(a) << (_i(b) & 31),
    "v_lshr_b32": lambda a, b: _i(a) >> (_i(b) & 31),
    "v_ashr_i32": lambda a, b: _s(a) >> (_i(b) & 31),
    "v_min_i32": lambda a, b: np.minimum(_s(a), _s(b)),
    "v_max_i32": lambda a, b: np.maximum(_s(a), _s(b)),
    "v_min_u32": lambda a, b: np.minimum(_i(a), _i(b)),
    "v_max_u32": lambda a, b: np.maximum(_i(a), _i(b)),
    "v_div_u32": lambda a, b: np.where(_i(b) == 0, 0xFFFFFFFF, _i(a) // np.maximum(_i(b), 1)),
    "v_rem_u32": lambda a, b: np.where(_i(b) == 0, _i(a), _i(a) % np.maximum(_i(b), 1)),
    "v_div_i32": _div_i32,
    "v_rem_i32": _rem_i32,
}


@pytest.mark.parametrize("name", sorted(INT_OPS))
def test_vop2_integer(rig, name):
    got = lanes_op(rig, f"{name} v7, v4, v5", INTS, INTS2)
    want = np.array([int(x) & 0xFFFFFFFF for x in INT_OPS[name](INTS, INTS2)], np.uint32)
    assert (got == want).all(), (got, want)


with np.errstate(all="ignore"):
    FLOAT_OPS = {
        "v_add_f32": lambda a, b: a + b, "v_sub_f32": lambda a, b: a - b,
        "v_mul_f32": lambda a, b: a * b, "v_div_f32": lambda a, b: a / b,
    }


@pytest.mark.parametrize("name", sorted(FLOAT_OPS))
def test_vop2_float_is_ieee_with_canonical_nan(rig, name):
    b = np.roll(SPECIAL, 5)
    got = lanes_op(rig, f"{name} v7, v4, v5", SPECIAL, b)
    with np.errstate(all="ignore"):
        assert (got == canon(FLOAT_OPS[name](SPECIAL, b))).all()


@pytest.mark.parametrize("name,pick", [("v_min_f32", lambda x, y: x < y),
                                       ("v_max_f32", lambda x, y: x > y)])
def test_min_max_f32_nan_and_tie_rules(rig, name, pick):
    a = SPECIAL
    b = np.roll(SPECIAL, 1)
    got = lanes_op(rig, f"{name} v7, v4, v5", a, b)
    want = []
    for x, y in zip(a, b):
        r = y if np.isnan(x) else x if np.isnan(y) else x if pick(x, y) else y
        want.append(canon(r)[()])
    assert list(got) == want
    assert lanes_op(rig, f"{name} v7, v4, v5", f32([0.0] * 32), f32([-0.0] * 32))[0] == \
        0x80000000      # ties give src1


def _libm(fn):
    def f(x):
        try:
            return fn(float(x))
        except (ValueError, OverflowError):
            return None
    return f


UNARY = {
    "v_exp_f32": np.exp, "v_exp2_f32": np.exp2, "v_log_f32": np.log, "v_log2_f32": np.log2,
    "v_sqrt_f32": np.sqrt, "v_sin_f32": np.sin, "v_cos_f32": np.cos, "v_tanh_f32": np.tanh,
    "v_rcp_f32": lambda x: 1.0 / x, "v_rsqrt_f32": lambda x: 1.0 / np.sqrt(x),
    "v_floor_f32": np.floor, "v_ceil_f32": np.ceil, "v_trunc_f32": np.trunc,
    "v_rndne_f32": np.rint,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_vop1_float(rig, name):
    got = lanes_op(rig, f"{name} v7, v4", SPECIAL)
    with np.errstate(all="ignore"):
        want = canon(UNARY[name](SPECIAL.astype(np.float64)).astype(np.float32))
    assert (got == want).all(), [(float(x), hex(g), hex(w)) for x, g, w in
                                 zip(SPECIAL, got, want) if g != w]


def test_conversions(rig):
    got = lanes_op(rig, "v_cvt_i32_f32 v7, v4", SPECIAL).view(np.int32)
    with np.errstate(all="ignore"):
        want = np.where(np.isnan(SPECIAL), 0, np.clip(np.trunc(SPECIAL.astype(np.float64)),
                                                       -2 ** 31, 2 ** 31 - 1))
    assert (got == want).all()
    got = lanes_op(rig, "v_cvt_u32_f32 v7, v4", SPECIAL)
    with np.errstate(all="ignore"):
        want = np.where(np.isnan(SPECIAL), 0, np.clip(np.trunc(SPECIAL.astype(np.float64)),
                                                       0, 2 ** 32 - 1))
    assert (got == want).all()
    assert (lanes_op(rig, "v_cvt_f32_i32 v7, v4", INTS) ==
            bits(INTS.view(np.int32).astype(np.float32))).all()
    assert (lanes_op(rig, "v_cvt_f32_u32 v7, v4", INTS) == bits(INTS.astype(np.float32))).all()


def test_fma_mad_cndmask_not_mov(rig):
    a, b, c = SPECIAL, np.roll(SPECIAL, 3), np.roll(SPECIAL, 7)
    with np.errstate(all="ignore"):
        want = canon((a.astype(np.float64) * b + c).astype(np.float32))
    assert (lanes_op(rig, "v_fma_f32 v7, v4, v5, v6", a, b, c) == want).all()
    got = lanes_op(rig, "v_mad_u32 v7, v4, v5, v6", INTS, INTS2, INTS)
    assert (got == ((_i(INTS) * _i(INTS2) + _i(INTS)) & 0xFFFFFFFF)).all()
    # two scalar factors (the core multiplies once), the product wrapping, all lanes or
    # the low half (the others keep the 0 a wave starts with)
    product = (0x9E3779B9 * 0x7F4A7C15 + _i(INTS)) & 0xFFFFFFFF
    for exec_mask, keep in ((-1, 32), (0xFFFF, 16)):
        got = lanes_op(rig, f"s_mov_b32 s10, 0x9e3779b9\n s_mov_b32 s11, 0x7f4a7c15\n"
                            f" s_mov_b32 exec, {exec_mask}\n v_mad_u32 v7, s10, s11, v4\n"
                            f" s_mov_b32 exec, -1", INTS)
        assert (got == np.where(np.arange(32) < keep, product, 0)).all()
    got = lanes_op(rig, "s_mov_b32 s10, 0xf0f0f0f0\n v_cndmask_b32 v7, v4, v5, s10", INTS, INTS2)
    sel = (0xF0F0F0F0 >> np.arange(32)) & 1
    assert (got == np.where(sel, INTS2, INTS)).all()
    assert (lanes_op(rig, "v_not_b32 v7, v4", INTS) == ~INTS).all()
    assert (lanes_op(rig, "v_mov_b32 v7, -2.5", INTS) == bits(-2.5)).all()


def test_mad_f32_rounds_the_product_then_the_sum(rig):
    """v_mad_f32 is v_mul_f32 then v_add_f32 bit for bit (specials, denormals, NaNs),
    not a fused multiply-add: (1 + 2^-12)^2 - (1 + 2^-11) is 0 once the product is
    rounded (its 2^-24 is a tie to even), 2^-24 when it is not."""
    a, b, c = SPECIAL, np.roll(SPECIAL, 3), np.roll(SPECIAL, 7)
    with np.errstate(all="ignore"):
        want = canon((a * b).astype(np.float32) + c)
    assert (lanes_op(rig, "v_mad_f32 v7, v4, v5, v6", a, b, c) == want).all()
    two_steps = lanes_op(rig, "v_mul_f32 v8, v4, v5\n v_add_f32 v7, v8, v6", a, b, c)
    assert (two_steps == want).all()
    x = np.full(32, 1 + 2.0 ** -12, np.float32)
    y = np.full(32, -(1 + 2.0 ** -11), np.float32)
    assert (lanes_op(rig, "v_mad_f32 v7, v4, v5, v6", x, x, y) == bits(0.0)).all()
    assert (lanes_op(rig, "v_fma_f32 v7, v4, v5, v6", x, x, y) == bits(2.0 ** -24)).all()


@pytest.mark.parametrize("t", ["i32", "u32", "f32"])
@pytest.mark.parametrize("c", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_vector_compares_write_masks(rig, t, c):
    if t == "f32":
        a, b = SPECIAL, np.roll(SPECIAL, 1)
        a[3] = b[3]
        x, y = a.astype(np.float64), b.astype(np.float64)
    else:
        a, b = INTS, INTS2.copy()
        b[9] = a[9]
        x, y = (_s(a), _s(b)) if t == "i32" else (_i(a), _i(b))
    op = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal}[c]
    want = sum(1 << k for k, v in enumerate(op(x, y)) if v)
    got = lanes_op(rig, f"v_cmp_{c}_{t} s10, v4, v5\n v_mov_b32 v7, s10", a, b)
    assert got[0] == want
    # inactive lanes give 0 bits
    got = lanes_op(rig, f"s_mov_b32 exec, 0xffff\n v_cmp_{c}_{t} vcc, v4, v5\n"
                        f" s_mov_b32 exec, -1\n v_mov_b32 v7, vcc", a, b)
    assert got[0] == want & 0xFFFF


def scalar(rig, body, sgprs=40):
    r = rig.run(body + "\n s_endpgm", (1, 1, 1), (1, 1, 1), user_data=UD, sgprs=sgprs)
    assert r.status == "ok", r
    return r


def test_scalar_alu_and_scc():
    rig = Rig(cu_ref.ComputeEngine, ref.PageTable)
    r = scalar(rig, """
    s_mov_b32 s20, 0xffffffff
    s_mov_b32 s10, 1
    s_mov_b32 s11, 2
    s_mov_b32 s12, 0
    s_add_u32 s21, s20, 2          ; 1, carry
    s_addc_u32 s22, s12, 0         ; 1 (carry in)
    s_sub_u32 s23, s10, 2          ; borrow
    s_subb_u32 s24, 5, s10         ; 5 - 1 - 1
    s_mul_i32 s25, -3, s11
    s_mul_hi_u32 s26, s20, s20
    s_andn2_b32 s27, 0xff, s20
    s_orn2_b32 s28, s12, s20
    s_lshl_b32 s29, s10, 33
    s_ashr_i32 s30, 0x80000000, s11
    s_lshr_b32 s31, 0x80000000, s11
    s_min_i32 s32, -1, s10
    s_max_u32 s33, -1, s10
    s_bcnt1_i32 s34, 0xf0f0
    s_ff1_i32 s35, 0x80
    s_ff1_i32 s36, 0
    s_not_b32 s37, 0
    s_cmp_lt_i32 -1, s12
    s_cselect_b32 s38, 11, s12
    s_mov_b64 s[18:19], s[20:21]
    """)
    s = r.sgprs
    assert s[21:39] == [1, 1, 0xFFFFFFFF, 3, (-6) & 0xFFFFFFFF, 0xFFFFFFFE, 0, 0, 2,
                        0xE0000000, 0x20000000, 0xFFFFFFFF, 0xFFFFFFFF, 8, 7, 0xFFFFFFFF,
                        0xFFFFFFFF, 11]
    assert s[18:20] == [0xFFFFFFFF, 1]
    assert r.scc == 1
    assert scalar(rig, "s_mov_b32 s20, 0\n s_cmp_lt_u32 -1, s20").scc == 0
    assert scalar(rig, "s_mov_b32 s20, 2\n s_and_b32 s20, 1, s20").scc == 0
    assert scalar(rig, "s_mov_b32 s20, 1\n s_cmp_eq_u32 s20, 1\n s_mov_b32 s21, 0").scc == 1


@pytest.mark.parametrize("t", ["i32", "u32"])
@pytest.mark.parametrize("c", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_scalar_compares(rig, t, c):
    for a, b in ((1, 2), (2, 1), (5, 5), (-1, 1), (1, -1)):
        x, y = (a, b) if t == "i32" else (a & 0xFFFFFFFF, b & 0xFFFFFFFF)
        want = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
                "ge": x >= y}[c]
        assert scalar(rig, f"s_mov_b32 s20, {b}\n s_cmp_{c}_{t} {a}, s20").scc == int(want)


def test_wave_start_registers(rig):
    r = rig.run("s_endpgm", (3, 2, 2), (5, 4, 3), user_data=list(range(100, 116)),
                sgprs=20, vgprs=4)
    assert r.status == "ok" and r.workgroup == (2, 1, 1) and r.wave == 1
    assert r.sgprs[:19] == list(range(100, 116)) + [2, 1, 1] and r.sgprs[19] == 0
    assert r.exec == (1 << 28) - 1          # 60 threads: wave 1 has 28 lanes
    tids = range(32, 60)
    assert r.vgprs[0][:28] == [t % 5 for t in tids]
    assert r.vgprs[1][:28] == [t // 5 % 4 for t in tids]
    assert r.vgprs[2][:28] == [t // 20 for t in tids]
    assert r.vgprs[0][28:] == [0] * 4 and r.vgprs[3] == [0] * 32
    assert r.instructions == 12 * 2 and r.lane_instructions == 12 * 60


def test_exec_masking_saveexec_branches_and_lane_ops(rig):
    r = rig.run("""
    v_cmp_lt_u32 vcc, v0, 10
    s_and_saveexec_b32 s20, vcc
    s_cbranch_execz skip
    v_mov_b32 v3, 1
skip:
    s_andn2_b32 exec, s20, exec
    v_mov_b32 v3, 2
    s_mov_b32 exec, s20
    v_readfirstlane_b32 s21, v0
    s_mov_b32 exec, 0xf0
    v_readfirstlane_b32 s22, v0
    s_mov_b32 s25, 3
    v_writelane_b32 v4, 77, s25
    v_readlane_b32 s23, v0, 37
    s_or_saveexec_b32 s24, 0x1
    s_mov_b32 exec, 0
    s_cbranch_execnz bad
    s_cbranch_execz good
bad:
    s_trap 1
good:
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), sgprs=30, vgprs=8)
    assert r.status == "ok", r
    assert r.vgprs[3] == [1] * 10 + [2] * 22
    assert r.sgprs[20:25] == [0xFFFFFFFF, 0, 4, 5, 0xF0]
    assert r.vgprs[4][3] == 77


def test_vector_carry_chain(rig):
    got = lanes_op(rig, "v_add_co_u32 v7, v4, v5\n v_addc_co_u32 v8, 0, 0\n"
                        "v_sub_co_u32 v9, v4, v5\n v_mov_b32 v7, v8", INTS, INTS2)
    carry = (_i(INTS) + _i(INTS2)) >> 32
    assert (got == carry).all()


def test_lds_atomics_and_global_atomics(rig):
    rig.put(OUT_OFF, np.array([5, 0, 0x80000000, 0, 7, 9, 0, 0], np.uint32))
    rig.put(OUT_OFF + 24, f32([1.5]))
    r = rig.run(f"""
    v_mov_b32 v3, 0
    v_mov_b32 v4, 1
    ds_add_u32 off, v3, v4
    ds_max_i32 off, v3, v0, 4
    v_cvt_f32_u32 v5, v0
    ds_add_f32 v6, v3, v5, 8
    ds_max_f32 off, v3, v5, 12
    ds_max_u32 off, v3, v0, 16
    ds_read_b32 v7, v3
    ds_read_b32 v8, v3, 4
    ds_read_b32 v9, v3, 8
    v_mov_b32 v10, {OUT_OFF}
    global_atomic_add_u32 v11, v10, v4, s[2:3]
    global_atomic_max_i32 off, v10, v0, s[2:3], 8
    global_atomic_max_u32 off, v10, v0, s[2:3], 4
    global_atomic_min_u32 off, v10, v0, s[2:3], 16
    global_atomic_xchg_b32 off, v10, v0, s[2:3], 20
    global_atomic_add_f32 off, v10, v5, s[2:3], 24
    v_mov_b32 v12, 123
    v_mov_b32 v13, 7
    global_atomic_cmpswap_b32 v14, v10, v[12:13], s[2:3], 16
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), user_data=UD, lds_bytes=64, vgprs=16)
    assert r.status == "ok", r
    assert r.vgprs[7][0] == 32 and r.vgprs[8][0] == 31 and bits(496.0) == r.vgprs[9][0]
    assert r.vgprs[6][:3] == [0, 0, bits(1.0)] and r.vgprs[11][:3] == [5, 6, 7]
    mem = rig.u32(OUT_OFF, 7)
    assert list(mem[:6]) == [37, 31, 31, 0, 0, 31]    # min_u32 0, then cmpswap: 0 != 7
    assert r.vgprs[14][0] == 0
    assert rig.f32(OUT_OFF + 24, 1)[0] == 1.5 + 496.0


def test_byte_and_short_loads_stores(rig):
    rig.put(A_OFF, np.array([0x8180FF7F, 0x00018000], np.uint32))
    r = rig.run(f"""
    v_mov_b32 v3, 0
    global_load_ubyte v4, v3, s[2:3], 1
    global_load_sbyte v5, v3, s[2:3], 1
    global_load_ushort v6, v3, s[2:3], 6
    global_load_sshort v7, v3, s[2:3], 4
    global_store_byte v3, v5, s[2:3], {OUT_OFF + 1}
    global_store_short v3, v7, s[2:3], {OUT_OFF + 6}
    s_endpgm
    """, (1, 1, 1), (1, 1, 1), user_data=UD, vgprs=8)
    assert r.status == "ok"
    assert [r.vgprs[k][0] for k in (4, 5, 6, 7)] == [0xFF, 0xFFFFFFFF, 0x0001, 0xFFFF8000]
    assert list(rig.u32(OUT_OFF, 2)) == [0xFF00, 0x80000000]


def test_scalar_loads_and_pair_addressing(rig):
    rig.put(A_OFF, np.arange(8, dtype=np.uint32) + 100)
    r = rig.run("""
    s_load_dword s20, s[2:3], 4
    s_load_dwordx2 s[22:23], s[2:3], 8
    s_load_dwordx4 s[24:27], s[2:3], 16
    v_mov_b32 v4, s2
    v_mov_b32 v5, s3
    global_load_dword v6, v[4:5], off, 28
    s_endpgm
    """, (1, 1, 1), (1, 1, 1), user_data=UD, vgprs=8)
    assert r.sgprs[20] == 101 and r.sgprs[22:28] == [102, 103, 104, 105, 106, 107]
    assert r.vgprs[6][0] == 107


def test_scalar_load_across_pages_and_into_an_unmapped_one(rig):
    # s_load_dwordx4 over a page boundary reads both pages (the core translates once
    # per page); past the arena's end it faults at the first dword of the unmapped page
    rig.put(4096 - 8, np.arange(4, dtype=np.uint32) + 300)
    r = rig.run("s_load_dwordx4 s[24:27], s[2:3], 4088\n s_endpgm", (1, 1, 1), (1, 1, 1),
                user_data=UD, vgprs=8)
    assert r.sgprs[24:28] == [300, 301, 302, 303]
    r, _ = fault_of(rig, f"s_load_dwordx4 s[24:27], s[2:3], {rig.mem.nbytes - 8}\n s_endpgm",
                    vgprs=8)
    assert r.reason == "unmapped" and r.fault.va == MEM_VA + rig.mem.nbytes


def test_wide_scalar_loads_x8_x16(rig):
    # GCN's s_load_dwordx8 / x16: 8 and 16 consecutive dwords; inside one page and
    # across a page boundary; past the arena's end a fault at the first dword of the
    # unmapped page, with none of the destination registers written
    rig.put(A_OFF, np.arange(16, dtype=np.uint32) + 500)
    rig.put(4096 - 24, np.arange(16, dtype=np.uint32) + 900)
    r = rig.run("""
    s_load_dwordx8 s[20:27], s[2:3], 0
    s_load_dwordx16 s[30:45], s[2:3], 0
    s_load_dwordx16 s[50:65], s[2:3], 4072
    s_endpgm
    """, (1, 1, 1), (1, 1, 1), user_data=UD, vgprs=8, sgprs=66)
    assert r.status == "ok", r
    assert r.sgprs[20:28] == list(range(500, 508))
    assert r.sgprs[30:46] == list(range(500, 516))
    assert r.sgprs[50:66] == list(range(900, 916))
    r, _ = fault_of(rig, f"""
    s_mov_b32 s24, 77
    s_load_dwordx8 s[20:27], s[2:3], {rig.mem.nbytes - 12}
    s_endpgm""", vgprs=8)
    assert r.reason == "unmapped" and r.fault.va == MEM_VA + rig.mem.nbytes
    assert r.sgprs[24] == 77
    r, _ = fault_of(rig, "s_load_dwordx16 s[20:35], s[2:3], 2\n s_endpgm", vgprs=8, sgprs=36)
    assert r.reason == "misaligned"


def test_wide_scalar_load_registers_must_fit(rig):
    # s[n:n+15] past the kernel's declared SGPRs is a bad register, as for x2/x4
    r, _ = fault_of(rig, "s_load_dwordx16 s[20:35], s[2:3], 0\n s_endpgm", vgprs=8, sgprs=30)
    assert r.reason == "bad_register"


def test_barrier_orders_waves(rig):
    # Wave 1 reads what wave 0 wrote to LDS before the barrier, and vice versa.
    r = rig.run("""
    v_lshl_b32 v3, v0, 2
    ds_write_b32 v3, v0
    s_barrier
    v_xor_b32 v4, v3, 0x80         ; the other wave's slot
    ds_read_b32 v5, v4
    s_endpgm
    """, (1, 1, 1), (64, 1, 1), lds_bytes=256, vgprs=8)
    assert r.status == "ok" and r.wave == 1
    assert r.vgprs[5] == list(range(0, 32))


# 32 lanes fill LDS dwords 0..63 with 1000 + k; v3 = 4 * lane.
LDS_1000_PLUS_K = """
    v_lshl_b32 v3, v0, 2
    v_add_u32 v4, v0, 1000
    ds_write_b32 v3, v4
    v_add_u32 v4, v0, 1032
    ds_write_b32 v3, v4, 128
    s_barrier
"""


def test_ds_read_b128_reads_four_dwords_per_lane(rig):
    # LDS dword k holds 1000 + k. Lanes read at 4 * lane (a different quad each, the
    # lane loop) into v[8:11]; then the two half-waves each read one row (16 * (lane >=
    # 16)) into v[12:15], over the address register v12 (every lane reads before any
    # register is written); then with lanes 0..9 only, over v[8:11] again.
    r = rig.run(LDS_1000_PLUS_K + """
    ds_read_b128 v[8:11], v3, 4
    v_lshr_b32 v12, v0, 4
    v_lshl_b32 v12, v12, 6
    ds_read_b128 v[12:15], v12, 8
    s_mov_b32 exec, 0x3ff
    v_mov_b32 v16, 200
    ds_read_b128 v[8:11], v16, 0
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), lds_bytes=256, vgprs=17)
    assert r.status == "ok"
    lane = np.arange(32)
    for k in range(4):
        want = np.where(lane < 10, 1050 + k, 1001 + lane + k)
        assert r.vgprs[8 + k] == list(want)
        assert r.vgprs[12 + k] == list(1002 + 16 * (lane >= 16) + k)


def test_ds_read_b128_faults(rig):
    # 4-byte alignment (GCN in unaligned mode), and all 16 bytes inside the LDS
    r, _ = fault_of(rig, "v_mov_b32 v4, 2\n ds_read_b128 v[4:7], v4\n s_endpgm",
                    lds_bytes=64, vgprs=8)
    assert (r.reason, r.fault) == ("misaligned", None)
    r, _ = fault_of(rig, "v_mov_b32 v4, 52\n ds_read_b128 v[4:7], v4\n s_endpgm",
                    lds_bytes=64, vgprs=8)
    assert r.reason == "lds_bounds"
    r, _ = fault_of(rig, "v_lshl_b32 v4, v0, 1\n ds_read_b128 v[4:7], v4, 0\n s_endpgm",
                    lds_bytes=128, vgprs=8)
    assert r.reason == "misaligned"         # lane 1 (address 2); lane 0 was fine
    r = rig.run("v_mov_b32 v4, 48\n ds_read_b128 v[4:7], v4\n s_endpgm", (1, 1, 1),
                (32, 1, 1), lds_bytes=64, vgprs=8)
    assert r.status == "ok"                 # the last quad


def test_ds_read2_b32_reads_two_dwords_per_lane(rig):
    # LDS dword k holds 1000 + k. Lanes read dwords lane + 1 and lane + 17 (the lane
    # loop); offsets in either order and equal; the B-column pattern (each half-wave the
    # 16 dwords of a tile's row) over the address register v12 (every lane reads before
    # any register is written); one address per half-wave; then lanes 0..9 only.
    r = rig.run(LDS_1000_PLUS_K + """
    ds_read2_b32 v[4:5], v3 offset0:1 offset1:17
    ds_read2_b32 v[6:7], v3 offset0:5
    ds_read2_b32 v[8:9], v3, offset0:3 offset1:3
    v_and_b32 v12, v0, 15
    v_lshl_b32 v12, v12, 2
    ds_read2_b32 v[11:12], v12 offset0:16 offset1:32
    v_lshr_b32 v13, v0, 4
    v_lshl_b32 v13, v13, 6
    ds_read2_b32 v[14:15], v13 offset1:40
    s_mov_b32 exec, 0x3ff
    v_mov_b32 v16, 200
    ds_read2_b32 v[8:9], v16 offset0:12 offset1:2
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), lds_bytes=256, vgprs=17)
    assert r.status == "ok"
    lane = np.arange(32)
    assert r.vgprs[4] == list(1001 + lane) and r.vgprs[5] == list(1017 + lane)
    assert r.vgprs[6] == list(1005 + lane) and r.vgprs[7] == list(1000 + lane)
    assert r.vgprs[8] == list(np.where(lane < 10, 1062, 1003 + lane))
    assert r.vgprs[9] == list(np.where(lane < 10, 1052, 1003 + lane))
    assert r.vgprs[11] == list(1016 + lane % 16) and r.vgprs[12] == list(1032 + lane % 16)
    assert r.vgprs[14] == list(1000 + 16 * (lane >= 16))
    assert r.vgprs[15] == list(1040 + 16 * (lane >= 16))


def test_ds_read2_b32_faults(rig):
    # Both addresses checked per lane, in lane order; a fault writes no register.
    r, _ = fault_of(rig, "v_mov_b32 v4, 2\n ds_read2_b32 v[4:5], v4 offset1:1\n s_endpgm",
                    lds_bytes=64, vgprs=8)
    assert (r.reason, r.fault) == ("misaligned", None)
    for mods in ("offset1:16", "offset0:16 offset1:0", "offset0:255"):
        r, _ = fault_of(rig, f"v_mov_b32 v4, 0\n ds_read2_b32 v[4:5], v4 {mods}\n s_endpgm",
                        lds_bytes=64, vgprs=8)
        assert r.reason == "lds_bounds", mods
    r, _ = fault_of(rig, "v_lshl_b32 v4, v0, 1\n ds_read2_b32 v[4:5], v4\n s_endpgm",
                    lds_bytes=128, vgprs=8)
    assert r.reason == "misaligned"         # lane 1 (address 2); lane 0 was fine
    # lane 1's second address (4 + 60) is past the LDS; lane 0's pair was inside
    r, _ = fault_of(rig, "v_mov_b32 v6, 7\n v_lshl_b32 v4, v0, 2\n"
                         " ds_read2_b32 v[6:7], v4 offset1:15\n s_endpgm",
                    lds_bytes=64, vgprs=8)
    assert r.reason == "lds_bounds" and r.vgprs[6] == [7] * 32 and r.vgprs[7] == [0] * 32
    # the address wraps modulo 2^32 (GCN's 32-bit LDS address)
    r = rig.run("v_mov_b32 v4, -4\n ds_read2_b32 v[4:5], v4 offset0:1 offset1:16\n s_endpgm",
                (1, 1, 1), (32, 1, 1), lds_bytes=64, vgprs=8)
    assert r.status == "ok"
    # offset bits [63:56] must be 0
    word = I.encode(I.FMT_MEM, I.OP_DS_READ2_B32, I.OPR_VGPR + 4, I.OPR_VGPR + 4,
                    imm=1 << 16)
    r, _ = fault_of(rig, f".inst {word:#x}\n s_endpgm", lds_bytes=64, vgprs=8)
    assert r.reason == "illegal_instruction"


def test_every_wave_starts_with_zero_vgprs_even_past_the_decoded_window(rig):
    """docs/isa.md 1.2: a wave's VGPRs other than the local ids start at 0. Each wave
    stores v1 and v5 as it finds them, then writes both: no later wave (the core runs
    many on one worker, in the same registers) may see those values. v5 is written in
    the entry page; v1 only in code on a page behind an unmapped one, which the core
    fetches past its decoded window."""
    text = f"""
    v_lshl_b32 v3, v0, 3
    s_mul_i32 s6, s16, 512
    v_add_u32 v3, s6, v3
    global_store_dword v3, v1, s[2:3], {OUT_OFF}
    global_store_dword v3, v5, s[2:3], {OUT_OFF + 4}
    v_mov_b32 v5, 7
    s_branch 0
    """
    obj = assemble(text)
    branch_pc = len(obj.code) - 16                      # the s_branch, before s_endpgm
    far = 2 * 4096
    code = bytearray(obj.code)
    code[branch_pc:branch_pc + 8] = assemble(f"s_branch {far - branch_pc - 8}").code[:8]
    rig.code[:] = 0
    rig.code[:len(code)] = np.frombuffer(bytes(code), np.uint8)
    tail = assemble("v_mov_b32 v1, 9\n v_mov_b32 v6, 9\n s_endpgm").code
    rig.code[far:far + len(tail)] = np.frombuffer(tail, np.uint8)
    rig.pt.unmap(CODE_VA + 4096, 4096)
    r = rig.engine.dispatch(rig.pt, CODE_VA, sgprs=24, vgprs=8, lds_bytes=0,
                            grid=(32, 1, 1), block=(64, 1, 1), user_data=UD)
    assert r.status == "ok", r
    assert not rig.u32(OUT_OFF, 32 * 64 * 2).any()


def test_memtime_and_nop(rig):
    r = scalar(rig, "s_nop\n s_memtime s[20:21]\n s_memtime s[22:23]")
    t0, t1 = r.sgprs[20] | r.sgprs[21] << 32, r.sgprs[22] | r.sgprs[23] << 32
    assert 0 < t0 <= t1 <= time.monotonic_ns()


# -- faults -------------------------------------------------------------------------------
def fault_of(rig, text, **kw):
    kw.setdefault("user_data", UD)
    r = rig.run(text, (1, 1, 1), (32, 1, 1), **kw)
    assert r.status == "fault"
    return r, rig.ih.drain()


def test_fault_illegal_instruction(rig):
    r, ih = fault_of(rig, "s_nop\n .inst 0x00000000000000ff\n s_endpgm")
    assert (r.reason, r.pc, r.fault, r.instructions) == ("illegal_instruction", 8, None, 1)
    assert [(e.src_id, e.data) for e in ih] == [(IH_SRC_ILLEGAL_INST, 8)]
    # running into zeroed memory, a VGPR in a scalar op, a non-zero unused field
    assert fault_of(rig, "s_nop")[0].pc == 8
    word = I.encode(I.FMT_ALU, I.OP_S_MOV_B32, 20, I.OPR_VGPR + 1)
    assert fault_of(rig, f".inst {word:#x}")[0].reason == "illegal_instruction"
    word = I.encode(I.FMT_SOPP, I.OP_S_ENDPGM, imm=1)
    assert fault_of(rig, f".inst {word:#x}")[0].reason == "illegal_instruction"
    assert fault_of(rig, "s_branch 4")[0].reason == "illegal_instruction"


def test_fault_bad_register(rig):
    r, ih = fault_of(rig, "v_mov_b32 v9, 0\n s_endpgm", vgprs=8)
    assert (r.reason, r.pc) == ("bad_register", 0)
    assert fault_of(rig, "s_mov_b64 s[20:21], s[18:19]", sgprs=21)[0].reason == "bad_register"


def test_fault_unmapped_and_permission(rig):
    r, ih = fault_of(rig, "v_mov_b32 v4, 0\n v_mov_b32 v5, 0x7000\n"
                          "global_load_dword v6, v[4:5], off, 8\n s_endpgm", vgprs=8)
    assert (r.reason, r.pc, r.fault) == ("unmapped", 16, GpuFault(0x7000_0000_0008, "read",
                                                                  "unmapped"))
    assert [(e.src_id, e.data) for e in ih] == [(IH_SRC_PAGE_FAULT, 0x7000_0000_0008)]
    # a store to the read-only code
    rig.ih.drain()
    r = rig.run(f"s_mov_b32 s20, {CODE_VA}\n s_mov_b32 s21, 0\n v_lshl_b32 v4, v0, 2\n"
                "global_store_dword v4, v0, s[20:21]\n s_endpgm", (1, 1, 1), (32, 1, 1),
                vgprs=8, sgprs=24)
    assert (r.status, r.reason, r.fault) == ("fault", "permission",
                                            GpuFault(CODE_VA, "write", "permission"))
    assert [(e.src_id, e.data) for e in rig.ih.drain()] == [(IH_SRC_PROT_FAULT, CODE_VA)]


def test_fault_instruction_fetch_needs_exec(rig):
    r = rig.engine.dispatch(rig.pt, MEM_VA, sgprs=20, vgprs=3, lds_bytes=0, grid=(1, 1, 1),
                            block=(1, 1, 1), user_data=[])
    assert (r.reason, r.fault) == ("permission", GpuFault(MEM_VA, "exec", "permission"))
    r = rig.engine.dispatch(rig.pt, 0x5000_0000, sgprs=20, vgprs=3, lds_bytes=0,
                            grid=(1, 1, 1), block=(1, 1, 1), user_data=[])
    assert (r.reason, r.fault) == ("unmapped", GpuFault(0x5000_0000, "exec", "unmapped"))


def test_fault_misaligned_lds_bounds_trap(rig):
    r, ih = fault_of(rig, "v_mov_b32 v4, 2\n global_load_dword v5, v4, s[2:3]\n s_endpgm",
                     vgprs=8)
    assert (r.reason, r.fault) == ("misaligned", GpuFault(MEM_VA + 2, "read", "misaligned"))
    assert ih[0].src_id == IH_SRC_ILLEGAL_INST and ih[0].data == 8
    r, _ = fault_of(rig, "v_mov_b32 v4, 2\n ds_read_b32 v5, v4\n s_endpgm", lds_bytes=16,
                    vgprs=8)
    assert (r.reason, r.fault) == ("misaligned", None)
    r, _ = fault_of(rig, "v_mov_b32 v4, 12\n ds_write_b32 v4, v4, 4\n s_endpgm",
                    lds_bytes=16, vgprs=8)
    assert r.reason == "lds_bounds"
    r, ih = fault_of(rig, "s_nop\n s_trap 0x42\n s_endpgm")
    assert (r.reason, r.trap_code, r.pc) == ("trap", 0x42, 8)
    assert ih[0].src_id == IH_SRC_ILLEGAL_INST


def test_faulting_store_keeps_lower_lanes_and_load_writes_nothing(rig):
    # lanes 0..15 hit the arena's last page, lanes 16.. the unmapped page after it
    last = rig.mem.nbytes - 64
    r = rig.run(f"v_lshl_b32 v4, v0, 2\n v_mov_b32 v6, 9\n"
                f"global_store_dword v4, v0, s[2:3], {last}\n s_endpgm", (1, 1, 1),
                (32, 1, 1), user_data=UD, vgprs=8)
    assert r.reason == "unmapped" and r.fault.va == MEM_VA + rig.mem.nbytes
    assert list(rig.u32(last, 16)) == list(range(16))
    r = rig.run(f"v_lshl_b32 v4, v0, 2\n v_mov_b32 v6, 9\n"
                f"global_load_dword v6, v4, s[2:3], {last}\n s_endpgm", (1, 1, 1),
                (32, 1, 1), user_data=UD, vgprs=8)
    assert r.reason == "unmapped" and r.vgprs[6] == [9] * 32


def test_exec_zero_vector_memory_does_nothing(rig):
    r = rig.run("s_mov_b32 exec, 0\n v_mov_b32 v4, 3\n global_load_dword v5, v4, off\n"
                "s_endpgm".replace("off", "s[2:3]"), (1, 1, 1), (32, 1, 1), user_data=UD,
                vgprs=8)
    assert r.status == "ok" and r.lane_instructions == 32 and r.instructions == 4


def test_abort_stops_an_endless_loop(rig):
    results = []
    t = threading.Thread(target=lambda: results.append(
        rig.run("top:\n s_branch top", (1, 1, 1), (1, 1, 1))))
    t.start()
    deadline = time.monotonic() + 5
    while not rig.engine.abort():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t.join(5)
    assert results[0].status == "aborted" and results[0].pc == 0
    assert rig.engine.abort() is False


def test_dispatch_argument_checks(rig):
    for kw in ({"sgprs": 18}, {"sgprs": 105}, {"vgprs": 2}, {"vgprs": 129},
               {"lds_bytes": 65537}, {"block": (33, 32, 1)}, {"block": (0, 1, 1)},
               {"user_data": [0] * 17}):
        args = dict(sgprs=20, vgprs=3, lds_bytes=0, grid=(1, 1, 1), block=(1, 1, 1),
                    user_data=[])
        args.update(kw)
        with pytest.raises(ValueError):
            rig.engine.dispatch(rig.pt, CODE_VA, **args)
    r = rig.engine.dispatch(rig.pt, CODE_VA, sgprs=20, vgprs=3, lds_bytes=0,
                            grid=(0, 1, 1), block=(1, 1, 1), user_data=[])
    assert r.status == "ok" and r.instructions == 0


# -- sample kernels -------------------------------------------------------------------------
def sample(name):
    return assemble((SAMPLES / f"{name}.s").read_text(), f"{name}.s")


def test_sample_vector_add(rig):
    n = 200
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    rig.put(0, a), rig.put(0x1000, b)
    r = rig.run(sample("vector_add"), ((n + 63) // 64, 1, 1), (64, 1, 1),
                {"a": MEM_VA, "b": MEM_VA + 0x1000, "c": MEM_VA + 0x2000, "n": n})
    assert r.status == "ok"
    assert (rig.f32(0x2000, n) == a + b).all() and rig.u32(0x2000 + 4 * n, 1)[0] == 0


def test_sample_saxpy(rig):
    n = 130
    x, y = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    rig.put(0, x), rig.put(0x1000, y)
    r = rig.run(sample("saxpy"), (3, 1, 1), (64, 1, 1),
                {"x": MEM_VA, "y": MEM_VA + 0x1000, "a": 2.5, "n": n})
    assert r.status == "ok"
    want = (np.float64(np.float32(2.5)) * x + y).astype(np.float32)
    assert (rig.f32(0x1000, n) == want).all()


def test_sample_reduce_sum(rig):
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    rig.put(0, x)
    r = rig.run(sample("reduce_sum"), ((n + 63) // 64, 1, 1), (64, 1, 1),
                {"x": MEM_VA, "out": MEM_VA + 0x1000, "n": n})
    assert r.status == "ok"
    assert rig.f32(0x1000, 1)[0] == pytest.approx(float(x.astype(np.float64).sum()), abs=1e-4)


def test_sample_matmul_tiled(rig):
    m, n, k = 16, 24, 16
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    rig.put(0, a), rig.put(0x2000, b)
    r = rig.run(sample("matmul_tiled"), (n // 8, m // 8, 1), (8, 8, 1),
                {"a": MEM_VA, "b": MEM_VA + 0x2000, "c": MEM_VA + 0x4000, "m": m, "n": n,
                 "k": k})
    assert r.status == "ok"
    np.testing.assert_allclose(rig.f32(0x4000, m * n).reshape(m, n), a @ b, rtol=1e-5,
                               atol=1e-5)


def test_sample_softmax(rig):
    rows, n = 3, 100
    x = (RNG.standard_normal((rows, n)) * 4).astype(np.float32)
    rig.put(0, x)
    r = rig.run(sample("softmax"), (rows, 1, 1), (64, 1, 1),
                {"x": MEM_VA, "y": MEM_VA + 0x1000, "n": n})
    assert r.status == "ok"
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(rig.f32(0x1000, rows * n).reshape(rows, n),
                               e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_sample_relu_gelu(rig):
    n = 100
    x = (RNG.standard_normal(n) * 3).astype(np.float32)
    rig.put(0, x)
    r = rig.run(sample("relu_gelu"), (2, 1, 1), (64, 1, 1),
                {"x": MEM_VA, "relu": MEM_VA + 0x1000, "gelu": MEM_VA + 0x2000, "n": n})
    assert r.status == "ok"
    assert (rig.f32(0x1000, n) == np.maximum(x, 0)).all()
    xd = x.astype(np.float64)
    gelu = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    np.testing.assert_allclose(rig.f32(0x2000, n), gelu, rtol=1e-5, atol=1e-6)


# -- generated programs -----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_random_programs_run_and_are_deterministic(seed):
    prog = random_program(seed)
    out = []
    for _ in range(2):
        rig = Rig(cu_ref.ComputeEngine, ref.PageTable)
        r = rig.run_program(prog)
        assert r.status == "ok", (r.reason, r.pc)
        out.append((r, rig.mem.tobytes()))
    assert out[0] == out[1]


def test_bit_counting_ops(rig):
    x = np.array(INTS, np.uint32)
    lows = [(int(v) & -int(v)).bit_length() - 1 if v else 0xFFFFFFFF for v in x]
    assert list(lanes_op(rig, "v_ffbl_b32 v7, v4", x)) == lows
    lead = [32 - int(v).bit_length() if v else 0xFFFFFFFF for v in x]
    assert list(lanes_op(rig, "v_ffbh_u32 v7, v4", x)) == lead
    rev = [int(f"{int(v):032b}"[::-1], 2) for v in x]
    assert list(lanes_op(rig, "v_bfrev_b32 v7, v4", x)) == rev
    y = np.array(INTS2, np.uint32)
    pops = [(bin(int(a)).count("1") + int(b)) & 0xFFFFFFFF for a, b in zip(x, y)]
    assert list(lanes_op(rig, "v_bcnt_u32_b32 v7, v4, v5", x, y)) == pops
    below = [bin(int(a) & ((1 << l) - 1)).count("1") + 1 for l, a in enumerate(x)]
    assert list(lanes_op(rig, "v_mbcnt_lo_u32_b32 v7, v4, 1", x)) == below


def test_lane_permutes_follow_gcn(rig):
    # Backward: lane l reads lane (addr + offset) / 4 mod 32; inactive sources read 0.
    rig.put(A_OFF, np.arange(32, dtype=np.uint32) * 4 * 3 + 1)     # lane 3l (low bits junk)
    r = rig.run(f"""
    v_lshl_b32 v3, v0, 2
    global_load_dword v4, v3, s[2:3], {A_OFF}
    v_add_u32 v5, v0, 100
    ds_bpermute_b32 v6, v4, v5
    ds_bpermute_b32 v7, v3, v5, 8
    s_mov_b32 exec, 0x0000ffff
    ds_bpermute_b32 v8, v4, v5
    ds_permute_b32 v9, v3, v5, -4
    v_mov_b32 v10, 0
    ds_permute_b32 v10, v10, v0
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), user_data=UD, vgprs=12)
    assert r.status == "ok", r
    assert r.vgprs[6] == [100 + 3 * l % 32 for l in range(32)]
    assert r.vgprs[7] == [100 + (l + 2) % 32 for l in range(32)]
    src = [3 * l % 32 for l in range(16)]
    assert r.vgprs[8][:16] == [100 + s if s < 16 else 0 for s in src]
    assert r.vgprs[8][16:] == [0] * 16                            # inactive: not written
    # Forward: lane l's value goes to lane l - 1; lane 15's target (14) is written, 15
    # gets nothing (0) since lane 16 is off; lane 0 sends to lane 31 (inactive).
    assert r.vgprs[9][:16] == [101 + l for l in range(15)] + [0]
    # Every lane writes lane 0: the highest active lane wins.
    assert r.vgprs[10][:16] == [15] + [0] * 15


def test_lds_min_sub_exchange_compare_store(rig):
    r = rig.run("""
    v_mov_b32 v3, 0
    v_mov_b32 v4, 100
    ds_write_b32 v3, v4
    ds_write_b32 v3, v4, 4
    v_mov_b32 v4, 0x7f800000
    ds_write_b32 v3, v4, 8
    v_sub_u32 v5, 10, v0
    ds_min_i32 off, v3, v5
    ds_min_u32 off, v3, v5, 4
    v_cvt_f32_i32 v6, v5
    ds_min_f32 off, v3, v6, 8
    ds_sub_u32 v7, v3, v0, 12
    ds_wrxchg_rtn_b32 v8, v3, v0, 16
    v_mov_b32 v10, 0
    v_add_u32 v11, v0, 1
    ds_cmpst_rtn_b32 v12, v3, v[10:11], 20
    ds_read_b32 v13, v3
    ds_read_b32 v14, v3, 4
    ds_read_b32 v15, v3, 8
    ds_read_b32 v16, v3, 12
    ds_read_b32 v17, v3, 16
    ds_read_b32 v18, v3, 20
    s_endpgm
    """, (1, 1, 1), (32, 1, 1), user_data=UD, lds_bytes=64, vgprs=20)
    assert r.status == "ok", r
    assert [r.vgprs[k][0] for k in range(13, 19)] == [
        (-21) & 0xFFFFFFFF, 0, bits(-21.0), (-sum(range(32))) & 0xFFFFFFFF, 31, 1]
    assert r.vgprs[7][:3] == [0, 0, 0xFFFFFFFF]                 # old values, lane order
    assert r.vgprs[8][:3] == [0, 0, 1]
    assert r.vgprs[12][:3] == [0, 1, 1]     # lane 0 stores 1 (0 == 0), the rest see 1
