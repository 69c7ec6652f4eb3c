"""The reference compute unit: a plain-Python vISA executor (docs/isa.md).

Written for clarity, not speed: one Python int per lane, one instruction at a time,
memory through PageTable.read/write.  It defines the behaviour the Cython executor
must reproduce byte for byte (tests/hw/isa_gen.py feeds both the same programs).
"""
from __future__ import annotations

import ctypes
import struct
import time

import numpy as np

from kmd.hw import compute as C
from kmd.hw import wide_ref
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault
from kmd.hw.run_control import RunControl
from vgpu import isa as I

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_W = I.WAVE_SIZE
_Q = struct.Struct("<Q")


class _Aborted(Exception):
    pass


class _Preempted(Exception):
    pass


_PARKED = object()      # run_workgroup: every live wave waits at s_barrier_grid


class _Wave:
    __slots__ = ("wg", "index", "s", "v", "exec", "vcc", "scc", "pc", "state")

    def __init__(self, wg, index, sgprs, vgprs, user_data, exec_mask, ids):
        self.wg, self.index = wg, index
        self.s = [0] * sgprs
        self.s[:I.USER_SGPRS] = user_data
        self.s[I.SGPR_WORKGROUP_ID:I.SGPR_WORKGROUP_ID + 3] = wg
        self.v = [[0] * _W for _ in range(vgprs)]
        for lane, xyz in enumerate(ids):
            for d in range(3):
                self.v[I.VGPR_LOCAL_ID + d][lane] = xyz[d]
        self.exec, self.vcc, self.scc, self.pc = exec_mask, 0, 0, 0
        self.state = "run"          # run | barrier | grid | done


def _final_wave(w: _Wave | None, pc: int) -> dict | None:
    """The ComputeResult fields of an ok dispatch: its final workgroup's last wave."""
    if w is None:
        return None
    return {"pc": pc, "workgroup": tuple(w.wg), "wave": w.index, "exec": w.exec, "vcc": w.vcc,
            "scc": w.scc, "sgprs": list(w.s), "vgprs": [list(reg) for reg in w.v]}


def _lanes(mask: int):
    return [l for l in range(_W) if mask >> l & 1]


class ComputeEngine(RunControl):
    """One compute unit (comp_1.0.0 ...): dispatch() runs one grid to completion, or
    until preempt(): abort() and preempt() stop it before the next instruction
    (docs/preemption.md). `l2`: the device's kmd.hw.l2_ref.L2Cache when the mount
    models one (docs/cache.md): global and scalar memory then go through it."""

    def __init__(self, name: str, ih: InterruptRing, threads: int = 2, l2=None) -> None:
        self.name = name
        self.ih = ih
        self.threads = threads          # the reference always runs on one thread
        self.l2 = l2
        self.l2_port = l2.port() if l2 is not None else None
        self._cooperative = False

    @property
    def cooperative(self) -> bool:
        """True while a cooperative dispatch (s_barrier_grid) runs: preempt() refuses it."""
        return self._cooperative

    def preempt(self) -> bool:
        """RunControl's, refused (False) during a cooperative dispatch: the workgroups
        held at its grid barrier are not in the CSA (docs/preemption.md)."""
        return False if self._cooperative else super().preempt()

    def dispatch(self, pt, code_va: int, *, sgprs: int, vgprs: int, lds_bytes: int,
                 grid: tuple[int, int, int], block: tuple[int, int, int],
                 user_data: list[int], ctx_id: int = 0, ring_id: int = 0,
                 resume: C.DispatchResume | None = None, csa=None) -> C.ComputeResult:
        grid, block, user_data = C.check_dispatch(code_va, sgprs, vgprs, lds_bytes, grid,
                                                  block, user_data)
        key = (code_va, sgprs, vgprs, lds_bytes, grid, block, tuple(user_data))
        area = C.check_resume(resume, key, csa, 1)
        self._stop = None
        self._cooperative = C.window_has_grid_barrier(pt, code_va)
        self._running = True
        pin = pt.pin()
        try:
            run = _Dispatch(self, pt, code_va, sgprs, vgprs, lds_bytes, block, user_data)
            result = run.run(grid, resume, area, key, own=csa is None)
        finally:
            self._running = False
            self._cooperative = False
            self._stop = None
            pin.release()
        if result.status == "fault":
            src, data = C.ih_entry(result.reason, result.fault, result.pc)
            self.ih.push(src, ring_id, ctx_id, data)
        return result


class _Dispatch(wide_ref.WideOps):
    def __init__(self, engine, pt, code_va, sgprs, vgprs, lds_bytes, block, user_data):
        self.engine, self.pt, self.code_va = engine, pt, code_va
        self.l2 = engine.l2_port
        self.sgprs, self.vgprs, self.lds_bytes = sgprs, vgprs, lds_bytes
        self.layout = C.wave_layout(block)
        self.user_data = user_data
        self.decoded: dict[int, tuple] = {}
        self.instructions = 0
        self.lane_instructions = 0
        self.ops: dict[int, list[int]] = {}    # opcode -> [instructions, lanes]: counters
        self.waves = 0
        self.last: _Wave | None = None
        self.last_pc = 0
        self.dispatches = 1
        self.final: dict | None = None      # the ok result's wave: the final workgroup's last
        self.limit = engine._trigger if engine._trigger is not None else 1 << 64
        if engine._cooperative:             # not preempted, by the trigger either
            self.limit = 1 << 64
        self.capacity = C.grid_barrier_capacity(block, sgprs, vgprs, lds_bytes, engine.threads)

    def result(self, status, wave, pc, reason=None, fault=None, trap_code=0):
        l2 = self.l2.take_tally() if self.l2 is not None else None
        r = C.ComputeResult(status, reason, fault, pc, instructions=self.instructions,
                            lane_instructions=self.lane_instructions, trap_code=trap_code,
                            counters=C.dispatch_counters(self.ops, waves=self.waves,
                                                         lane_instructions=self.lane_instructions,
                                                         dispatches=self.dispatches, l2=l2))
        if isinstance(wave, dict):      # _final_wave
            for name, value in wave.items():
                setattr(r, name, value)
        elif wave is not None:
            r.workgroup, r.wave = tuple(wave.wg), wave.index
            r.exec, r.vcc, r.scc = wave.exec, wave.vcc, wave.scc
            r.sgprs = list(wave.s)
            r.vgprs = [list(reg) for reg in wave.v]
        return r

    def run(self, grid, resume, csa, key, own: bool) -> C.ComputeResult:
        """The workgroups in plan order (compute.resume_plan): ascending, the saved
        ones restored from the CSA; stops at a fault, an abort or a preemption."""
        gx, gy, gz = grid
        total = gx * gy * gz
        plan = C.resume_plan(resume, total)
        if resume is not None:
            self.dispatches = 0
            self.final = resume.last
        pos = 0
        parked = []         # [(index, waves, lds)] held at the grid barrier, ascending
        for first, count, slot in plan:
            for index in range(first, first + count):
                if self.engine._stop == "preempt":
                    return self.preempted(plan, pos, None, csa, key, own)
                wg = (index % gx, index // gx % gy, index // (gx * gy))
                if slot >= 0:
                    waves = self.restore(csa, slot, wg, index)
                else:
                    waves = [_Wave(wg, i, self.sgprs, self.vgprs, self.user_data, e, ids)
                             for i, (e, ids) in enumerate(self.layout)]
                    self.lds = bytearray(self.lds_bytes)
                    self.waves += len(waves)
                stop = self.run_workgroup(waves)
                if stop is _Preempted:
                    return self.preempted(plan, pos + 1, (index, waves), csa, key, own)
                if stop is _PARKED:
                    if index >= self.capacity:
                        return self.too_many_at_grid_barrier(waves)
                    parked.append((index, waves, self.lds))
                elif stop is not None:
                    return stop
                pos += 1
                if index == total - 1 and stop is None:
                    self.final = _final_wave(self.last, self.last_pc)
        # The grid barrier (docs/isa.md 4.1): every workgroup has ended or waits at it;
        # the waiting ones continue, in ascending order, until the next one.
        while parked:
            phase, parked = parked, []
            for index, waves, lds in phase:
                self.lds = lds
                stop = self.run_workgroup(waves)
                if stop is _PARKED:
                    parked.append((index, waves, self.lds))
                elif stop is not None:
                    return stop
                elif index == total - 1:
                    self.final = _final_wave(self.last, self.last_pc)
        return self.result("ok", self.final, 0)

    def too_many_at_grid_barrier(self, waves) -> C.ComputeResult:
        """A workgroup past the engine's capacity reached s_barrier_grid: the dispatch
        could never pass it (hardware would hang), so it faults there."""
        w = next(w for w in waves if w.state == "run")     # the first one held there
        w.pc -= I.INST_BYTES
        return self.result("fault", w, w.pc, C.REASON_ILLEGAL)

    # -- preemption (docs/preemption.md) ------------------------------------------------------
    def preempted(self, plan, pos, running, csa, key, own) -> C.ComputeResult:
        total = sum(count for _, count, _ in plan)
        saved, pending = C.plan_left(plan, [(pos, total)])
        wave = None
        if running is not None:
            index, waves = running
            used = {slot for _, slot in saved}
            slot = min(set(range(len(csa) // C.CSA_SLOT_BYTES)) - used)
            self.save(csa, slot, index, waves)
            saved = sorted(saved + [(index, slot)])
            wave = next(w for w in waves if w.state == "run")
        r = self.result("preempted", wave, wave.pc if wave else 0)
        r.resume = C.DispatchResume(key, saved, pending, self.final, csa if own else None)
        return r

    def save(self, csa, slot: int, index: int, waves) -> None:
        """Workgroup `index` into CSA slot `slot` (layout: compute.CSA_*)."""
        base = slot * C.CSA_SLOT_BYTES
        C.CSA_SLOT_HEADER.pack_into(csa, base, C.CSA_MAGIC, len(waves), self.sgprs, self.vgprs,
                                    self.lds_bytes, 0, index, *waves[0].wg)
        rec = C.csa_wave_bytes(self.sgprs, self.vgprs)
        off = base + C.CSA_SLOT_HEADER.size
        for w in waves:
            C.CSA_WAVE_HEADER.pack_into(csa, off, w.pc, w.exec, w.vcc, w.scc,
                                        C.WAVE_STATES.index(w.state))
            regs = w.s + [x for reg in w.v for x in reg]
            struct.pack_into(f"<{len(regs)}I", csa, off + C.CSA_WAVE_HEADER.size, *regs)
            off += rec
        csa[off:off + self.lds_bytes] = np.frombuffer(bytes(self.lds), np.uint8)

    def restore(self, csa, slot: int, wg, index: int) -> list[_Wave]:
        """The waves (and self.lds) of workgroup `index` from CSA slot `slot`."""
        rec = C.csa_wave_bytes(self.sgprs, self.vgprs)
        off = slot * C.CSA_SLOT_BYTES + C.CSA_SLOT_HEADER.size
        waves = []
        for i, (e, ids) in enumerate(self.layout):
            w = _Wave(wg, i, self.sgprs, self.vgprs, self.user_data, e, ids)
            w.pc, w.exec, w.vcc, w.scc, state = C.CSA_WAVE_HEADER.unpack_from(csa, off)
            w.state = C.WAVE_STATES[state]
            regs = struct.unpack_from(f"<{self.sgprs + self.vgprs * _W}I", csa,
                                      off + C.CSA_WAVE_HEADER.size)
            w.s = list(regs[:self.sgprs])
            w.v = [list(regs[self.sgprs + r * _W:self.sgprs + (r + 1) * _W])
                   for r in range(self.vgprs)]
            waves.append(w)
            off += rec
        self.lds = bytearray(bytes(csa[off:off + self.lds_bytes]))
        return waves

    def run_workgroup(self, waves):
        """None when the workgroup ends, _Preempted, or the result of a fault / abort."""
        while True:
            for w in waves:
                if w.state != "run":
                    continue
                try:
                    self.run_wave(w)
                except C.WaveFault as f:
                    return self.result("fault", w, w.pc, f.reason, f.fault, f.trap_code)
                except _Aborted:
                    return self.result("aborted", w, w.pc)
                except _Preempted:
                    return _Preempted
            # Every live wave waits: the workgroup barrier opens for those at s_barrier;
            # when all wait at s_barrier_grid the workgroup is held at the grid barrier.
            local = [w for w in waves if w.state == "barrier"]
            for w in local:
                w.state = "run"
            if local:
                continue
            grid = [w for w in waves if w.state == "grid"]
            if not grid:
                return None
            for w in grid:          # they continue when the grid barrier opens
                w.state = "run"
            return _PARKED

    # -- one wave until barrier / end ---------------------------------------------------
    def fetch(self, pc: int):
        hit = self.decoded.get(pc)
        if hit is not None:
            return hit
        va = self.code_va + pc
        if self.code_va % I.INST_BYTES:
            raise C.WaveFault(C.REASON_MISALIGNED, GpuFault(self.code_va, "exec", "misaligned"))
        if not 0 <= va <= _M64 - 7:
            raise C.WaveFault(C.REASON_UNMAPPED, GpuFault(va & _M64, "exec", "unmapped"))
        host, flags = self.pt.translate(va)
        if host is None:
            raise C.WaveFault(C.REASON_UNMAPPED, GpuFault(va, "exec", "unmapped"))
        if not flags & PTE_EXEC:
            raise C.WaveFault(C.REASON_PERMISSION, GpuFault(va, "exec", "permission"))
        word, = _Q.unpack(ctypes.string_at(host, 8))
        info, inst = C.validate(word, self.sgprs, self.vgprs)
        hit = self.decoded[pc] = (info, inst, getattr(self, "op_" + info.name, None))
        return hit

    def run_wave(self, w: _Wave) -> None:
        engine = self.engine
        while True:
            if engine._stop or self.instructions >= self.limit:
                if engine._stop == "abort":
                    raise _Aborted
                engine._trigger = None      # a test trigger fires once
                raise _Preempted
            info, inst, handler = self.fetch(w.pc)
            next_pc = w.pc + I.INST_BYTES
            active = bin(w.exec).count("1")
            if self.l2 is not None:
                self.l2.begin()
            new_pc = handler(w, inst) if handler else self.execute(w, info, inst)
            self.instructions += 1
            self.lane_instructions += active
            tally = self.ops.setdefault(info.code, [0, 0])
            tally[0] += 1
            tally[1] += active
            if w.state == "done":
                self.last, self.last_pc = w, w.pc
                return
            w.pc = next_pc if new_pc is None else new_pc
            if w.state in ("barrier", "grid"):
                return

    # -- operands ---------------------------------------------------------------------------
    @staticmethod
    def sread(w: _Wave, c: int, imm: int) -> int:
        if c < I.MAX_SGPRS:
            return w.s[c]
        if c == I.OPR_VCC:
            return w.vcc
        if c == I.OPR_EXEC:
            return w.exec
        if c == I.OPR_SCC:
            return w.scc
        return imm & _M32           # OPR_LIT

    @staticmethod
    def swrite(w: _Wave, c: int, value: int) -> None:
        value &= _M32
        if c < I.MAX_SGPRS:
            w.s[c] = value
        elif c == I.OPR_VCC:
            w.vcc = value
        else:
            w.exec = value

    def vread(self, w: _Wave, c: int, imm: int) -> list[int]:
        if c >= I.OPR_VGPR:
            return list(w.v[c - I.OPR_VGPR])
        return [self.sread(w, c, imm)] * _W

    # -- program control --------------------------------------------------------------------
    def op_s_endpgm(self, w, inst):
        w.state = "done"

    def op_s_nop(self, w, inst):
        return None

    def op_s_barrier(self, w, inst):
        w.state = "barrier"

    def op_s_barrier_grid(self, w, inst):
        w.state = "grid"

    def op_s_trap(self, w, inst):
        raise C.WaveFault(C.REASON_TRAP, trap_code=inst.imm)

    def _branch(self, w, inst, taken):
        if not taken:
            return None
        off = I.sext32(inst.imm)
        if off % I.INST_BYTES:
            raise C.WaveFault(C.REASON_ILLEGAL)
        return w.pc + I.INST_BYTES + off

    def op_s_branch(self, w, i):
        return self._branch(w, i, True)

    def op_s_cbranch_scc0(self, w, i):
        return self._branch(w, i, w.scc == 0)

    def op_s_cbranch_scc1(self, w, i):
        return self._branch(w, i, w.scc == 1)

    def op_s_cbranch_vccz(self, w, i):
        return self._branch(w, i, w.vcc == 0)

    def op_s_cbranch_vccnz(self, w, i):
        return self._branch(w, i, w.vcc != 0)

    def op_s_cbranch_execz(self, w, i):
        return self._branch(w, i, w.exec == 0)

    def op_s_cbranch_execnz(self, w, i):
        return self._branch(w, i, w.exec != 0)

    # -- scalar ALU -------------------------------------------------------------------------
    def op_s_mov_b64(self, w, i):
        lo, hi = w.s[i.src0], w.s[i.src0 + 1]
        w.s[i.dst], w.s[i.dst + 1] = lo, hi

    def op_s_memtime(self, w, i):
        t = time.monotonic_ns()
        w.s[i.dst], w.s[i.dst + 1] = t & _M32, t >> 32 & _M32

    def op_s_and_saveexec_b32(self, w, i):
        a = self.sread(w, i.src0, i.imm)
        old = w.exec
        w.exec = a & old
        self.swrite(w, i.dst, old)
        # A dst of exec would overwrite the new mask: the saved value wins, as written.
        w.scc = int(w.exec != 0)

    def op_s_or_saveexec_b32(self, w, i):
        a = self.sread(w, i.src0, i.imm)
        old = w.exec
        w.exec = (a | old) & _M32
        self.swrite(w, i.dst, old)
        w.scc = int(w.exec != 0)

    _SOP1 = {
        "s_mov_b32": (lambda a: a, False),
        "s_not_b32": (lambda a: ~a & _M32, True),
        "s_bcnt1_i32": (lambda a: bin(a).count("1"), True),
        "s_ff1_i32": (lambda a: (a & -a).bit_length() - 1 & _M32 if a else _M32, False),
    }
    _SOP2 = {
        "s_mul_i32": (lambda a, b: a * b, False),
        "s_mul_hi_u32": (lambda a, b: a * b >> 32, False),
        "s_and_b32": (lambda a, b: a & b, True),
        "s_or_b32": (lambda a, b: a | b, True),
        "s_xor_b32": (lambda a, b: a ^ b, True),
        "s_andn2_b32": (lambda a, b: a & ~b, True),
        "s_orn2_b32": (lambda a, b: a | (~b & _M32), True),
        "s_lshl_b32": (lambda a, b: a << (b & 31), True),
        "s_lshr_b32": (lambda a, b: a >> (b & 31), True),
        "s_ashr_i32": (lambda a, b: C.s32(a) >> (b & 31), True),
        "s_min_i32": (lambda a, b: min(C.s32(a), C.s32(b)), False),
        "s_min_u32": (lambda a, b: min(a, b), False),
        "s_max_i32": (lambda a, b: max(C.s32(a), C.s32(b)), False),
        "s_max_u32": (lambda a, b: max(a, b), False),
    }
    _CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}

    def execute(self, w: _Wave, info: I.OpInfo, i: I.Inst):
        """Table-driven ops (everything without an op_<name> method)."""
        name = info.name
        if name in self._SOP1:
            fn, sets_scc = self._SOP1[name]
            d = fn(self.sread(w, i.src0, i.imm)) & _M32
            self.swrite(w, i.dst, d)
            if sets_scc:
                w.scc = int(d != 0)
            return None
        if name in self._SOP2:
            fn, sets_scc = self._SOP2[name]
            d = fn(self.sread(w, i.src0, i.imm), self.sread(w, i.src1, i.imm)) & _M32
            self.swrite(w, i.dst, d)
            if sets_scc:
                w.scc = int(d != 0)
            return None
        if name.startswith("s_cmp_"):
            _, _, c, t = name.split("_")
            a, b = self.sread(w, i.src0, i.imm), self.sread(w, i.src1, i.imm)
            if t == "i32":
                a, b = C.s32(a), C.s32(b)
            w.scc = int(self._CMP[c](a, b))
            return None
        if name.startswith("v_cmp_"):
            return self.vcmp(w, name, i)
        if name in _VOP1 or name in _VOP2:
            return self.valu(w, name, i)
        raise AssertionError(f"no semantics for {name}")   # the table and cu_ref disagree

    def _add_carry(self, w, i, carry_in):
        a, b = self.sread(w, i.src0, i.imm), self.sread(w, i.src1, i.imm)
        if carry_in == "sub":
            d, scc = a - b - 0, int(a < b)
        elif carry_in == "subb":
            d, scc = a - b - w.scc, int(a < b + w.scc)
        else:
            d = a + b + (w.scc if carry_in else 0)
            scc = int(d >> 32 != 0)
        self.swrite(w, i.dst, d)
        w.scc = scc

    def op_s_add_u32(self, w, i):
        self._add_carry(w, i, False)

    def op_s_addc_u32(self, w, i):
        self._add_carry(w, i, True)

    def op_s_sub_u32(self, w, i):
        self._add_carry(w, i, "sub")

    def op_s_subb_u32(self, w, i):
        self._add_carry(w, i, "subb")

    def op_s_cselect_b32(self, w, i):
        a, b = self.sread(w, i.src0, i.imm), self.sread(w, i.src1, i.imm)
        self.swrite(w, i.dst, a if w.scc else b)

    # -- scalar memory ----------------------------------------------------------------------
    def _s_load(self, w, i, n):
        addr = (w.s[i.base] | w.s[i.base + 1] << 32) + i.imm & _M64
        if addr % 4:
            raise C.WaveFault(C.REASON_MISALIGNED, GpuFault(addr, "read", "misaligned"))
        data = self.pt_read(addr, 4 * n)
        for k, value in enumerate(struct.unpack(f"<{n}I", data)):
            w.s[i.dst + k] = value

    def op_s_load_dword(self, w, i):
        self._s_load(w, i, 1)

    def op_s_load_dwordx2(self, w, i):
        self._s_load(w, i, 2)

    def op_s_load_dwordx4(self, w, i):
        self._s_load(w, i, 4)

    def op_s_load_dwordx8(self, w, i):
        self._s_load(w, i, 8)

    def op_s_load_dwordx16(self, w, i):
        self._s_load(w, i, 16)

    # -- vector ALU -------------------------------------------------------------------------
    def valu(self, w, name, i):
        fn = _VOP1.get(name)
        a = self.vread(w, i.src0, i.imm)
        dst = w.v[i.dst - I.OPR_VGPR]
        if fn is not None:
            for l in _lanes(w.exec):
                dst[l] = fn(a[l]) & _M32
            return None
        fn = _VOP2[name]
        b = self.vread(w, i.src1, i.imm)
        for l in _lanes(w.exec):
            dst[l] = fn(a[l], b[l]) & _M32
        return None

    def vcmp(self, w, name, i):
        _, _, c, t = name.split("_")
        a, b = self.vread(w, i.src0, i.imm), self.vread(w, i.src1, i.imm)
        cmp = self._CMP[c]
        mask = 0
        for l in _lanes(w.exec):
            x, y = a[l], b[l]
            if t == "i32":
                x, y = C.s32(x), C.s32(y)
            elif t == "f32":
                x, y = C.bits_f32(x), C.bits_f32(y)
            if cmp(x, y):
                mask |= 1 << l
        self.swrite(w, i.dst, mask)

    def _vcarry(self, w, i, kind):
        a, b = self.vread(w, i.src0, i.imm), self.vread(w, i.src1, i.imm)
        dst = w.v[i.dst - I.OPR_VGPR]
        carry_in, mask = w.vcc, 0
        for l in _lanes(w.exec):
            if kind == "sub":
                d, c = a[l] - b[l], a[l] < b[l]
            else:
                d = a[l] + b[l] + (carry_in >> l & 1 if kind == "addc" else 0)
                c = d >> 32 != 0
            dst[l] = d & _M32
            mask |= int(c) << l
        w.vcc = mask

    def op_v_add_co_u32(self, w, i):
        self._vcarry(w, i, "add")

    def op_v_addc_co_u32(self, w, i):
        self._vcarry(w, i, "addc")

    def op_v_sub_co_u32(self, w, i):
        self._vcarry(w, i, "sub")

    def _v3(self, w, i, fn):
        a, b, c = (self.vread(w, f, 0) for f in (i.src0, i.src1, i.src2))
        dst = w.v[i.dst - I.OPR_VGPR]
        for l in _lanes(w.exec):
            dst[l] = fn(a[l], b[l], c[l]) & _M32

    def op_v_fma_f32(self, w, i):
        self._v3(w, i, C.fma_f32)

    def op_v_mad_f32(self, w, i):
        self._v3(w, i, C.mad_f32)

    def op_v_mad_u32(self, w, i):
        self._v3(w, i, lambda a, b, c: a * b + c)

    def op_v_cndmask_b32(self, w, i):
        a, b = self.vread(w, i.src0, 0), self.vread(w, i.src1, 0)
        mask = self.sread(w, i.src2, 0)
        dst = w.v[i.dst - I.OPR_VGPR]
        for l in _lanes(w.exec):
            dst[l] = b[l] if mask >> l & 1 else a[l]

    def op_v_readfirstlane_b32(self, w, i):
        lanes = _lanes(w.exec)
        self.swrite(w, i.dst, w.v[i.src0 - I.OPR_VGPR][lanes[0] if lanes else 0])

    def op_v_readlane_b32(self, w, i):
        lane = self.sread(w, i.src1, i.imm) & 31
        self.swrite(w, i.dst, w.v[i.src0 - I.OPR_VGPR][lane])

    def op_v_writelane_b32(self, w, i):
        a = self.sread(w, i.src0, i.imm)
        lane = self.sread(w, i.src1, i.imm) & 31
        w.v[i.dst - I.OPR_VGPR][lane] = a

    # -- memory helpers ---------------------------------------------------------------------
    def pt_read(self, va: int, n: int) -> bytes:
        if self.l2 is not None:
            return b"".join(self.l2.load(self.host(va + k, "read"), va + k, min(4, n - k))
                            for k in range(0, n, 4))
        try:
            return self.pt.read(va, n)
        except GpuFault as f:
            raise C.WaveFault(f.reason, f) from None

    def pt_write(self, va: int, data: bytes) -> None:
        if self.l2 is not None:
            for k in range(0, len(data), 4):
                self.l2.store(self.host(va + k, "write"), va + k, data[k:k + 4])
            return
        try:
            self.pt.write(va, data)
        except GpuFault as f:
            raise C.WaveFault(f.reason, f) from None

    def host(self, va: int, access: str) -> int:
        """The host address of `va` for an access through the L2 model, which reaches
        memory a dword at most at a time (as the core's lanes and s_load do): the
        page-table check of pt.read/pt.write, per dword."""
        host, flags = self.pt.translate(va & _M64) if va <= _M64 else (None, 0)
        if host is None:
            raise C.WaveFault(C.REASON_UNMAPPED, GpuFault(va & _M64, access, "unmapped"))
        if not flags & (PTE_READ if access == "read" else PTE_WRITE):
            raise C.WaveFault(C.REASON_PERMISSION, GpuFault(va, access, "permission"))
        return host

    def check_atomic(self, va: int) -> None:
        """Through the L2, an atomic is one request: both permissions are checked
        before it, read first (as the core does)."""
        if self.l2 is not None:
            self.host(va, "read")
            self.host(va, "write")

    def gaddr(self, w, i, lane: int) -> int:
        if i.base == I.OPR_OFF:
            r = i.addr - I.OPR_VGPR
            base = w.v[r][lane] | w.v[r + 1][lane] << 32
        else:
            base = (w.s[i.base] | w.s[i.base + 1] << 32) + w.v[i.addr - I.OPR_VGPR][lane]
        return base + i.imm & _M64

    @staticmethod
    def _aligned(addr: int, size: int, access: str) -> None:
        if addr % size:
            raise C.WaveFault(C.REASON_MISALIGNED, GpuFault(addr, access, "misaligned"))

    # -- global memory ----------------------------------------------------------------------
    _LOADS = {"global_load_dword": (4, "<I"), "global_load_ubyte": (1, "<B"),
              "global_load_sbyte": (1, "<b"), "global_load_ushort": (2, "<H"),
              "global_load_sshort": (2, "<h")}
    _STORES = {"global_store_dword": (4, "<I", _M32), "global_store_byte": (1, "<B", 0xFF),
               "global_store_short": (2, "<H", 0xFFFF)}

    def global_load(self, w, i, name):
        size, fmt = self._LOADS[name]
        values = {}
        for l in _lanes(w.exec):
            addr = self.gaddr(w, i, l)
            self._aligned(addr, size, "read")
            values[l] = struct.unpack(fmt, self.pt_read(addr, size))[0] & _M32
        dst = w.v[i.dst - I.OPR_VGPR]
        for l, value in values.items():
            dst[l] = value

    def global_store(self, w, i, name):
        size, fmt, mask = self._STORES[name]
        data = w.v[i.data - I.OPR_VGPR]
        for l in _lanes(w.exec):
            addr = self.gaddr(w, i, l)
            self._aligned(addr, size, "write")
            self.pt_write(addr, struct.pack(fmt, data[l] & mask))

    def global_atomic(self, w, i, name):
        op = _ATOMIC[name.split("_", 2)[2]]
        data = [w.v[i.data - I.OPR_VGPR + k] for k in range(2 if "cmpswap" in name else 1)]
        for l in _lanes(w.exec):
            addr = self.gaddr(w, i, l)
            self._aligned(addr, 4, "read")
            self.check_atomic(addr)
            old, = struct.unpack("<I", self.pt_read(addr, 4))
            new = op(old, *(d[l] for d in data)) & _M32
            self.pt_write(addr, struct.pack("<I", new))
            if i.dst != I.OPR_OFF:
                w.v[i.dst - I.OPR_VGPR][l] = old

    # -- LDS ----------------------------------------------------------------------------
    def lds_addr(self, w, i, lane: int, size: int = 4, offset: int | None = None) -> int:
        addr = w.v[i.addr - I.OPR_VGPR][lane] + (i.imm if offset is None else offset) & _M32
        if addr % 4:
            raise C.WaveFault(C.REASON_MISALIGNED)
        if addr + size > self.lds_bytes:
            raise C.WaveFault(C.REASON_LDS_BOUNDS)
        return addr

    def op_ds_read_b32(self, w, i):
        values = {l: struct.unpack_from("<I", self.lds, self.lds_addr(w, i, l))[0]
                  for l in _lanes(w.exec)}
        dst = w.v[i.dst - I.OPR_VGPR]
        for l, value in values.items():
            dst[l] = value

    def op_ds_read_b128(self, w, i):
        values = {l: struct.unpack_from("<4I", self.lds, self.lds_addr(w, i, l, 16))
                  for l in _lanes(w.exec)}
        for l, quad in values.items():      # all lanes read before any register is written
            for k in range(4):
                w.v[i.dst - I.OPR_VGPR + k][l] = quad[k]

    def op_ds_read2_b32(self, w, i):
        offsets = [4 * o for o in I.offset2_split(i.imm)]
        values = {l: [struct.unpack_from("<I", self.lds, self.lds_addr(w, i, l, 4, o))[0]
                      for o in offsets]
                  for l in _lanes(w.exec)}
        for l, pair in values.items():      # all lanes read before any register is written
            for k in range(2):
                w.v[i.dst - I.OPR_VGPR + k][l] = pair[k]

    def _permute(self, w, i, backward: bool) -> None:
        addr, data = w.v[i.addr - I.OPR_VGPR], w.v[i.data - I.OPR_VGPR]
        lanes = _lanes(w.exec)
        tmp = [0] * _W
        for l in lanes:
            lane = (addr[l] + i.imm & _M32) >> 2 & (_W - 1)
            if not backward:
                tmp[lane] = data[l]             # ascending lanes: the highest writer wins
            elif w.exec >> lane & 1:
                tmp[l] = data[lane]             # an inactive source lane reads 0
        dst = w.v[i.dst - I.OPR_VGPR]
        for l in lanes:
            dst[l] = tmp[l]

    def op_ds_bpermute_b32(self, w, i):
        self._permute(w, i, True)

    def op_ds_permute_b32(self, w, i):
        self._permute(w, i, False)

    def op_v_mbcnt_lo_u32_b32(self, w, i):
        a, b = self.vread(w, i.src0, i.imm), self.vread(w, i.src1, i.imm)
        dst = w.v[i.dst - I.OPR_VGPR]
        for l in _lanes(w.exec):
            dst[l] = bin(a[l] & (1 << l) - 1).count("1") + b[l] & _M32

    def op_ds_write_b32(self, w, i):
        data = w.v[i.data - I.OPR_VGPR]
        for l in _lanes(w.exec):
            struct.pack_into("<I", self.lds, self.lds_addr(w, i, l), data[l])

    def lds_atomic(self, w, i, name):
        op = _ATOMIC[name.split("_", 1)[1]]
        data = [w.v[i.data - I.OPR_VGPR + k] for k in range(2 if "cmpst" in name else 1)]
        for l in _lanes(w.exec):
            addr = self.lds_addr(w, i, l)
            old, = struct.unpack_from("<I", self.lds, addr)
            struct.pack_into("<I", self.lds, addr, op(old, *(d[l] for d in data)) & _M32)
            if i.dst != I.OPR_OFF:
                w.v[i.dst - I.OPR_VGPR][l] = old


_ATOMIC = {
    "add_u32": lambda m, d: m + d,
    "add_f32": lambda m, d: C.binary_f32("v_add_f32", m, d),
    "max_i32": lambda m, d: max(C.s32(m), C.s32(d)),
    "max_u32": max,
    "max_f32": C.max_f32,
    "min_i32": lambda m, d: min(C.s32(m), C.s32(d)),
    "min_u32": min,
    "min_f32": C.min_f32,
    "xchg_b32": lambda m, d: d,
    "cmpswap_b32": lambda m, src, cmp: src if m == cmp else m,
    "sub_u32": lambda m, d: m - d,
    "wrxchg_rtn_b32": lambda m, d: d,
    "cmpst_rtn_b32": lambda m, cmp, src: src if m == cmp else m,    # GCN: compare first
}


def _div_i32(a: int, b: int) -> int:
    a, b = C.s32(a), C.s32(b)
    if b == 0:
        return -1
    if a == -(1 << 31) and b == -1:
        return a
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _rem_i32(a: int, b: int) -> int:
    a, b = C.s32(a), C.s32(b)
    if b == 0:
        return a
    if a == -(1 << 31) and b == -1:
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


_VOP1 = {
    "v_mov_b32": lambda a: a,
    "v_not_b32": lambda a: ~a,
    "v_cvt_f32_i32": lambda a: C.f32_bits(float(C.s32(a))),
    "v_cvt_f32_u32": lambda a: C.f32_bits(float(a)),
    "v_cvt_i32_f32": C.cvt_i32_f32,
    "v_cvt_u32_f32": C.cvt_u32_f32,
    "v_ffbl_b32": lambda a: (a & -a).bit_length() - 1 if a else _M32,
    "v_ffbh_u32": lambda a: 32 - a.bit_length() if a else _M32,
    "v_bfrev_b32": lambda a: int(f"{a:032b}"[::-1], 2),
}
for _name in ("v_floor_f32", "v_ceil_f32", "v_trunc_f32", "v_rndne_f32"):
    _VOP1[_name] = (lambda n: lambda a: C.round_f32(n, a))(_name)
for _name in C.UNARY_F64:
    _VOP1[_name] = (lambda n: lambda a: C.unary_f32(n, a))(_name)

_VOP2 = {
    "v_add_u32": lambda a, b: a + b,
    "v_sub_u32": lambda a, b: a - b,
    "v_mul_lo_u32": lambda a, b: a * b,
    "v_mul_hi_u32": lambda a, b: a * b >> 32,
    "v_mul_hi_i32": lambda a, b: C.s32(a) * C.s32(b) >> 32,
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_lshl_b32": lambda a, b: a << (b & 31),
    "v_lshr_b32": lambda a, b: a >> (b & 31),
    "v_ashr_i32": lambda a, b: C.s32(a) >> (b & 31),
    "v_min_i32": lambda a, b: min(C.s32(a), C.s32(b)),
    "v_max_i32": lambda a, b: max(C.s32(a), C.s32(b)),
    "v_min_u32": min,
    "v_max_u32": max,
    "v_bcnt_u32_b32": lambda a, b: bin(a).count("1") + b,
    "v_div_u32": lambda a, b: a // b if b else _M32,
    "v_rem_u32": lambda a, b: a % b if b else a,
    "v_div_i32": _div_i32,
    "v_rem_i32": _rem_i32,
    "v_min_f32": C.min_f32,
    "v_max_f32": C.max_f32,
}
for _name in ("v_add_f32", "v_sub_f32", "v_mul_f32", "v_div_f32"):
    _VOP2[_name] = (lambda n: lambda a, b: C.binary_f32(n, a, b))(_name)


def _install_memory_ops() -> None:
    """op_<name> methods for the memory instructions that share one implementation."""
    for info in I.OPCODES:
        name = info.name
        if name in _Dispatch._LOADS:
            impl = (lambda n: lambda self, w, i: self.global_load(w, i, n))(name)
        elif name in _Dispatch._STORES:
            impl = (lambda n: lambda self, w, i: self.global_store(w, i, n))(name)
        elif name.startswith("global_atomic_"):
            impl = (lambda n: lambda self, w, i: self.global_atomic(w, i, n))(name)
        elif name.startswith("ds_") and name not in C.LDS_MOVES and "permute" not in name:
            impl = (lambda n: lambda self, w, i: self.lds_atomic(w, i, n))(name)
        else:
            continue
        setattr(_Dispatch, "op_" + name, impl)


_install_memory_ops()
wide_ref.install(_Dispatch)

__all__ = ["ComputeEngine", "InterruptRing"]
