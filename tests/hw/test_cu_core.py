"""The Cython compute unit (kmd.hw._core.ComputeEngine) against docs/isa.md.

Every test of tests/hw/test_cu_ref.py runs here again with the Cython engine and the
Cython PageTable (the `rig` fixture and the module's `cu_ref` / `ref` names are swapped
for the core's); below them, what only the core has: its compiled-in opcodes, threads,
abort from another thread while two workers run, and page-table changes under a TLB.
"""
import re
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from kmd.hw import _core
from kmd.hw.ih import InterruptRing
from vgpu import isa as I

from . import test_cu_ref
from .isa_gen import CODE_VA, MEM_VA, Rig
from .test_cu_ref import *  # noqa: F401,F403  (the reference's cases, run on the core)

_CORE_AS_REF = types.SimpleNamespace(ComputeEngine=_core.ComputeEngine)
_CORE_PT = types.SimpleNamespace(PageTable=_core.PageTable)


@pytest.fixture(autouse=True)
def _core_engine(monkeypatch):
    """Tests that build their own Rig from test_cu_ref's names get the core too."""
    monkeypatch.setattr(test_cu_ref, "cu_ref", _CORE_AS_REF)
    monkeypatch.setattr(test_cu_ref, "ref", _CORE_PT)


@pytest.fixture
def rig():
    return Rig(_core.ComputeEngine, _core.PageTable)


def test_compiled_opcodes_match_isa():
    text = (Path(_core.__file__).parent / "_cu_defs.pxi").read_text()
    pairs = re.findall(r"^\s+(OP_\w+|OPR_\w+|CANONICAL_NAN|SGPR_WORKGROUP_ID|USER_SGPRS)"
                       r" = (0x[0-9A-Fa-f]+|\d+)$", text, re.M)
    assert len(pairs) > 100
    for name, value in pairs:
        assert getattr(I, name) == int(value, 0), name


def test_engine_attributes_and_thread_count_checks():
    ih = InterruptRing()
    e = _core.ComputeEngine("comp_1.1.0", ih, threads=3)
    assert (e.name, e.ih, e.threads) == ("comp_1.1.0", ih, 3)
    with pytest.raises(ValueError):
        _core.ComputeEngine("comp_1.1.0", ih, threads=0)


def test_abort_with_two_workers_in_endless_loops():
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    results = []
    t = threading.Thread(target=lambda: results.append(
        rig.run("top:\n s_branch top", (64, 1, 1), (32, 1, 1))))
    t.start()
    deadline = time.monotonic() + 5
    time.sleep(0.05)        # let both workers spin a while
    while not rig.engine.abort():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t.join(5)
    r = results[0]
    assert r.status == "aborted" and r.pc == 0 and r.workgroup == (0, 0, 0)
    assert r.instructions > 0 and rig.engine.abort() is False


def test_fault_in_first_workgroup_cancels_an_endless_later_one():
    # workgroup 0 faults after a while; workgroup 1 (on the other thread) never ends.
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    r = rig.run("""
    s_cmp_eq_u32 s16, 0
    s_cbranch_scc0 forever
    s_mov_b32 s20, 20000
spin:
    s_sub_u32 s20, s20, 1
    s_cmp_gt_u32 s20, 0
    s_cbranch_scc1 spin
    s_trap 7
forever:
    s_branch forever
    """, (2, 1, 1), (1, 1, 1), sgprs=24)
    assert (r.status, r.reason, r.trap_code, r.workgroup) == ("fault", "trap", 7, (0, 0, 0))
    assert r.instructions == 3 + 3 * 20000


def test_unmap_between_dispatches_is_seen():
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    text = "v_mov_b32 v4, 0\n global_load_dword v5, v4, s[2:3]\n s_endpgm"
    ud = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]
    assert rig.run(text, (1, 1, 1), (32, 1, 1), user_data=ud, vgprs=8).status == "ok"
    rig.pt.unmap(MEM_VA, 4096)
    r = rig.run(text, (1, 1, 1), (32, 1, 1), user_data=ud, vgprs=8)
    assert (r.status, r.reason) == ("fault", "unmapped")


# -- the decoded window kept between dispatches (a relaunch of the same kernel) --------
STORE_CONST = "v_mov_b32 v1, {value}\n v_mov_b32 v2, 0\n global_store_dword v2, v1, s[2:3]\n s_endpgm"
UD_MEM = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]


def test_code_rewritten_between_launches_runs_as_rewritten():
    """The engine reuses the last dispatch's decoded code only when the bytes are the
    same: code the CPU rewrote in place (same address, same register counts) runs new."""
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    for value in (7, 7, 9, 7):
        assert rig.run(STORE_CONST.format(value=value), (1, 1, 1), (32, 1, 1), user_data=UD_MEM,
                       vgprs=8, sgprs=24).status == "ok"
        assert rig.u32(0, 1)[0] == value


def test_same_code_with_fewer_registers_is_checked_again():
    """Decoding checks register numbers against the dispatch's counts, so the same bytes
    with fewer VGPRs are decoded again: v9 is out of range with 8."""
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    text = "v_mov_b32 v9, 1\n s_endpgm"
    assert rig.run(text, (1, 1, 1), (32, 1, 1), user_data=UD_MEM, vgprs=16, sgprs=24).status == "ok"
    r = rig.run(text, (1, 1, 1), (32, 1, 1), user_data=UD_MEM, vgprs=8, sgprs=24)
    assert (r.status, r.reason) == ("fault", "bad_register")
    assert rig.run(text, (1, 1, 1), (32, 1, 1), user_data=UD_MEM, vgprs=16, sgprs=24).status == "ok"


def test_a_preempted_dispatch_keeps_its_save_area_from_the_next_ones():
    """A dispatch given no CSA saves into the engine's own; when one is preempted its
    resume keeps that buffer, and dispatches in between use another."""
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    spin = """
    s_mov_b32 s20, 3000
top:
    s_sub_u32 s20, s20, 1
    s_cmp_gt_u32 s20, 0
    s_cbranch_scc1 top
    v_mov_b32 v1, 5
    s_lshl_b32 s21, s16, 2
    v_mov_b32 v2, s21
    global_store_dword v2, v1, s[2:3]
    s_endpgm"""
    rig.engine.preempt_after(500)
    first = rig.run(spin, (8, 1, 1), (32, 1, 1), user_data=UD_MEM, vgprs=8, sgprs=24)
    assert first.status == "preempted" and first.resume.own_csa is not None
    other = Rig(_core.ComputeEngine, _core.PageTable)     # same engine, another VM
    other.engine = rig.engine
    assert other.run(STORE_CONST.format(value=3), (1, 1, 1), (32, 1, 1), user_data=UD_MEM,
                     vgprs=8, sgprs=24).status == "ok"
    obj = rig.load(spin)
    r = rig.engine.dispatch(rig.pt, CODE_VA + obj.entry, sgprs=24, vgprs=8, lds_bytes=0,
                            grid=(8, 1, 1), block=(32, 1, 1), user_data=UD_MEM,
                            resume=first.resume)
    while r.status == "preempted":
        r = rig.engine.dispatch(rig.pt, CODE_VA + obj.entry, sgprs=24, vgprs=8, lds_bytes=0,
                                grid=(8, 1, 1), block=(32, 1, 1), user_data=UD_MEM, resume=r.resume)
    assert r.status == "ok" and (rig.u32(0, 8) == 5).all()
