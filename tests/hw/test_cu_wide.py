"""The 64-bit vISA operations (docs/isa.md 4.8) against numpy, on both executors.

Every lane takes one pair of operands from a table of edge values (signed zeros,
infinities, NaN, subnormals, the i64/u64 limits, values that round in conversions);
results must be numpy's bit for bit, with NaN canonical.  The differential test adds
random programs (tests/hw/test_cu_differential.py).
"""
import itertools
import math

import numpy as np
import pytest

from kmd.hw import _core, cu_ref, ref
from vgpu import isa as I

from .isa_gen import MEM_VA, Rig

UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]
A_OFF, B_OFF, C_OFF, OUT_OFF = 0, 0x10000, 0x20000, 0x30000
NAN64 = np.uint64(I.CANONICAL_NAN64)

F64 = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e300, -1e300, 5e-324, -2.2e-308,
                math.inf, -math.inf, math.nan, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1.5,
                2.5, -0.5, 4503599627370497.5, 16777217.0, 3.4028235677973366e38,
                1.7976931348623157e308, 0.1, -7.75])
I64 = np.array([0, 1, -1, 2, -2, 3, 7, -7, 1 << 32, (1 << 32) - 1, -(1 << 32), (1 << 53) + 1,
                (1 << 24) + 1, (1 << 62), (1 << 63) - 1, -(1 << 63), 12345678901234,
                -98765432109, 0x7FFF_FFFF_0000_0001], np.int64)


def both():
    def core(name, ih):
        return _core.ComputeEngine(name, ih, threads=2)
    return [Rig(cu_ref.ComputeEngine, ref.PageTable, 64 * 4096),
            Rig(core, _core.PageTable, 64 * 4096)]


def run(line, a, b=None, c=None, out32=False):
    """`line` on v[4:5]=a, v[6:7]=b, v[8:9]=c (8-byte values) -> v[10:11] (or v10 with
    out32), one lane per element, on both executors; returns the raw result bits."""
    n = len(a)
    results = []
    for rig in both():
        for off, arr in ((A_OFF, a), (B_OFF, b), (C_OFF, c)):
            if arr is not None:
                rig.put(off, np.asarray(arr).view(np.uint64) if np.asarray(arr).itemsize == 8
                        else np.asarray(arr).astype(np.uint32).astype(np.uint64))
        store = (f"global_store_dword v3, v10, s[2:3], {OUT_OFF}" if out32 else
                 f"global_store_dwordx2 v3, v[10:11], s[2:3], {OUT_OFF}")
        text = f"""
        s_lshl_b32 s20, s16, 5
        v_add_u32 v12, v0, s20
        v_lshl_b32 v3, v12, 3
        global_load_dwordx2 v[4:5], v3, s[2:3], {A_OFF}
        global_load_dwordx2 v[6:7], v3, s[2:3], {B_OFF}
        global_load_dwordx2 v[8:9], v3, s[2:3], {C_OFF}
        {line}
        {store}
        s_endpgm
        """
        r = rig.run(text, (-(-n // 32), 1, 1), (32, 1, 1), user_data=UD)
        assert r.status == "ok", r
        raw = rig.mem[OUT_OFF:OUT_OFF + 8 * n].view(np.uint64).copy()
        results.append(raw & 0xFFFFFFFF if out32 else raw)
    assert (results[0] == results[1]).all(), "the executors disagree"
    return results[0]


def canon64(x):
    x = np.asarray(x, np.float64)
    u = x.view(np.uint64).copy()
    u[np.isnan(x)] = NAN64
    return u


def pairs(values):
    a, b = zip(*itertools.product(values, repeat=2))
    return np.array(a, values.dtype), np.array(b, values.dtype)


@pytest.mark.parametrize("name,fn", [("v_add_f64", np.add), ("v_sub_f64", np.subtract),
                                     ("v_mul_f64", np.multiply), ("v_div_f64", np.divide)])
def test_f64_arithmetic(name, fn):
    a, b = pairs(F64)
    with np.errstate(all="ignore"):
        want = canon64(fn(a, b))
    assert (run(f"{name} v[10:11], v[4:5], v[6:7]", a, b) == want).all()


@pytest.mark.parametrize("name,fn", [("v_min_f64", np.fmin), ("v_max_f64", np.fmax)])
def test_f64_min_max_ignore_nan(name, fn):
    a, b = pairs(F64)
    got = run(f"{name} v[10:11], v[4:5], v[6:7]", a, b)
    want = canon64(fn(a, b))
    # ±0 compare equal: the ISA returns the second operand (as the 32-bit ops do)
    zeros = (a == 0) & (b == 0)
    assert (got[~zeros] == want[~zeros]).all()
    assert (got[zeros] == b[zeros].view(np.uint64)).all()


def test_fma_f64_rounds_once():
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.standard_normal(200), [1.0 + 2.0 ** -30, 1e308, 0.0, -0.0, math.inf]])
    b = np.concatenate([rng.standard_normal(200), [1.0 - 2.0 ** -30, 10.0, -0.0, -0.0, 0.0]])
    c = np.concatenate([rng.standard_normal(200), [-1.0, -math.inf, -0.0, 0.0, 1.0]])
    got = run("v_fma_f64 v[10:11], v[4:5], v[6:7], v[8:9]", a, b, c)
    want = a[:200] * b[:200] + c[:200]
    # the 1 + 2^-30 case: the exact product 1 - 2^-60 survives only with one rounding
    assert got.view(np.float64)[200] == -(2.0 ** -60)
    assert got.view(np.float64)[201] == -math.inf
    assert got[202] == np.float64(-0.0).view(np.uint64)     # 0 * -0 + -0 = -0 + -0 = -0
    assert got[203] == np.float64(0.0).view(np.uint64)      # -0 * -0 + 0 = +0
    assert got[204] == NAN64
    assert np.allclose(got.view(np.float64)[:200], want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name,fn", [("v_sqrt_f64", np.sqrt), ("v_floor_f64", np.floor),
                                     ("v_ceil_f64", np.ceil), ("v_trunc_f64", np.trunc),
                                     ("v_rndne_f64", np.rint)])
def test_f64_unary(name, fn):
    with np.errstate(all="ignore"):
        want = canon64(fn(F64))
    assert (run(f"{name} v[10:11], v[4:5]", F64) == want).all()


def test_compares_write_lane_masks():
    a, b = pairs(F64)
    for name, fn in (("eq", np.equal), ("lt", np.less), ("le", np.less_equal)):
        got = run(f"v_cmp_{name}_f64 vcc, v[4:5], v[6:7]\n"
                  "v_mov_b32 v13, 0\n v_mov_b32 v14, 1\n v_cndmask_b32 v10, v13, v14, vcc", a, b, out32=True)
        assert (got == fn(a, b)).all(), name
    ai, bi = pairs(I64)
    for name, fn in (("eq_i64", np.equal), ("lt_i64", np.less), ("le_i64", np.less_equal),
                     ("lt_u64", lambda x, y: x.view(np.uint64) < y.view(np.uint64)),
                     ("le_u64", lambda x, y: x.view(np.uint64) <= y.view(np.uint64))):
        got = run(f"v_cmp_{name} s30, v[4:5], v[6:7]\n"
                  "v_mov_b32 v13, 0\n v_mov_b32 v14, 1\n v_cndmask_b32 v10, v13, v14, s30", ai, bi, out32=True)
        assert (got == fn(ai, bi)).all(), name


def test_integer_arithmetic_wraps():
    a, b = pairs(I64)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    with np.errstate(all="ignore"):
        assert (run("v_add_u64 v[10:11], v[4:5], v[6:7]", a, b) == ua + ub).all()
        assert (run("v_sub_u64 v[10:11], v[4:5], v[6:7]", a, b) == ua - ub).all()
        assert (run("v_mul_lo_u64 v[10:11], v[4:5], v[6:7]", a, b) == ua * ub).all()
    q = run("v_div_u64 v[10:11], v[4:5], v[6:7]", a, b)
    want = np.array([x // y if y else (1 << 64) - 1 for x, y in zip(ua.tolist(), ub.tolist())],
                    np.uint64)
    assert (q == want).all()
    q = run("v_div_i64 v[10:11], v[4:5], v[6:7]", a, b).view(np.int64)
    want = [-1 if y == 0 else x if (x, y) == (-(1 << 63), -1) else
            int(abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
            for x, y in zip(a.tolist(), b.tolist())]
    assert q.tolist() == want


def test_shifts_take_the_amount_mod_64():
    a = np.repeat(I64, 8)
    amount = np.tile(np.array([0, 1, 31, 32, 33, 63, 64, 65], np.int64), len(I64))
    ua = a.view(np.uint64)
    k = (amount & 63).astype(np.uint64)
    assert (run("v_lshl_b64 v[10:11], v[4:5], v6", a, amount) == ua << k).all()
    assert (run("v_lshr_b64 v[10:11], v[4:5], v6", a, amount) == ua >> k).all()
    assert (run("v_ashr_i64 v[10:11], v[4:5], v6", a, amount).view(np.int64) ==
            a >> k.astype(np.int64)).all()


def test_conversions():
    with np.errstate(all="ignore"):
        f32 = F64.astype(np.float32)
    got = run("v_cvt_f32_f64 v10, v[4:5]", F64, out32=True).astype(np.uint32)
    want = f32.view(np.uint32).copy()
    want[np.isnan(f32)] = I.CANONICAL_NAN
    assert (got == want).all()
    got = run("v_cvt_f64_f32 v[10:11], v4", f32.view(np.uint32))
    assert (got == canon64(f32.astype(np.float64))).all()
    assert (run("v_cvt_f64_i64 v[10:11], v[4:5]", I64) == I64.astype(np.float64).view(np.uint64)).all()
    u = I64.view(np.uint64)
    assert (run("v_cvt_f64_u64 v[10:11], v[4:5]", I64) == u.astype(np.float64).view(np.uint64)).all()
    got = run("v_cvt_f32_i64 v10, v[4:5]", I64, out32=True).astype(np.uint32)
    assert (got == I64.astype(np.float32).view(np.uint32)).all()      # one rounding
    got = run("v_cvt_f32_u64 v10, v[4:5]", I64, out32=True).astype(np.uint32)
    assert (got == u.astype(np.float32).view(np.uint32)).all()
    # float -> integer: truncate, saturate, NaN -> 0
    got = run("v_cvt_i64_f64 v[10:11], v[4:5]", F64).view(np.int64)
    want = [0 if math.isnan(x) else max(-(1 << 63), min((1 << 63) - 1, int(x)))
            if math.isfinite(x) else ((1 << 63) - 1 if x > 0 else -(1 << 63)) for x in F64]
    assert got.tolist() == want
    got = run("v_cvt_u64_f64 v[10:11], v[4:5]", F64)
    want = [0 if math.isnan(x) or x <= -1 else min((1 << 64) - 1, int(x)) if math.isfinite(x)
            else (1 << 64) - 1 for x in F64]
    assert got.tolist() == want


def test_scalar_pair_sources_and_overlap():
    """An SGPR pair is a broadcast source; a destination may overlap its sources."""
    a = F64
    got = run("s_mov_b32 s30, 0\n s_mov_b32 s31, 0x40000000\n"      # s[30:31] = 2.0
              "v_mul_f64 v[4:5], v[4:5], s[30:31]\n v_mov_b32 v10, v4\n v_mov_b32 v11, v5", a)
    with np.errstate(all="ignore"):
        assert (got == canon64(a * 2.0)).all()


def test_atomic_adds_return_the_old_value():
    """Lanes add in ascending order to one address; each gets the sum before it."""
    for rig in both():
        rig.put(A_OFF, np.array([0.25, 0], np.float64))
        rig.put(B_OFF, np.array([5, 0], np.uint64))
        r = rig.run(f"""
        v_cvt_f64_u64 v[4:5], v[0:1]          ; v1 is 0: lane id as a double
        v_mov_b32 v1, 0
        v_cvt_f64_u64 v[4:5], v[0:1]
        v_mov_b32 v6, 0
        global_atomic_add_f64 v[8:9], v6, v[4:5], s[2:3], {A_OFF}
        global_atomic_add_u64 v[10:11], v6, v[0:1], s[2:3], {B_OFF}
        v_lshl_b32 v3, v0, 3
        global_store_dwordx2 v3, v[8:9], s[2:3], {C_OFF}
        global_store_dwordx2 v3, v[10:11], s[2:3], {OUT_OFF}
        s_endpgm""", (1, 1, 1), (32, 1, 1), user_data=UD)
        assert r.status == "ok"
        lanes = np.arange(32)
        before = np.concatenate([[0], np.cumsum(lanes)[:-1]])
        assert (rig.mem[C_OFF:C_OFF + 256].view(np.float64) == 0.25 + before).all()
        assert (rig.mem[OUT_OFF:OUT_OFF + 256].view(np.uint64) == 5 + before).all()
        assert rig.mem[A_OFF:A_OFF + 8].view(np.float64)[0] == 0.25 + lanes.sum()
