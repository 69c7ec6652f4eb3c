"""The command processor of the compute ring (the MEC of a GFX9 part): hardware,
so it lives in kmd/hw/ and imports nothing of the rest of kmd.

`CommandProcessor.run(pt, ib_va, ib_size_dw, ctx_id, ring_id)` has SdmaEngine's
interface, so kmd/ring.py's Ring drives it unchanged. It fetches the IB through the
file's page table, decodes PM4 type-3 packets (vgpu/pm4.py, docs/pm4.md), keeps the
SH registers the packets set, hands DISPATCH_DIRECT to the compute units
(`ComputeEngine.dispatch`), follows INDIRECT_BUFFER chains, writes fences
(RELEASE_MEM) and data (WRITE_DATA), copies and fills memory (DMA_DATA, the CP DMA)
and polls memory (WAIT_REG_MEM). Anything it
cannot decode is a fault, reported like an SDMA fault: an IH entry, a result with
status 'fault', the offset of the packet.

The SH registers start at zero for every IB the ring submits (a chained IB shares
its parent's), so one client's program address never leaks into another's job.
"""
from __future__ import annotations

import dataclasses
import struct
import threading
import time

from vgpu import isa
from vgpu import pm4 as P

from kmd.hw import REFERENCE, ComputeEngine
from kmd.hw.ih import IH_SRC_CP_EOP, IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT, IH_SRC_PROT_FAULT
from kmd.hw.mmu import GpuFault

POLL_STEP_S = 50e-6             # WAIT_REG_MEM sleeps this long between reads
DMA_STEP_BYTES = 1 << 20        # DMA_DATA moves this much between abort checks
MAX_WORKGROUP_THREADS = 1024    # NUM_THREAD_X * Y * Z, as on GFX9

# Fault reasons of the CP itself (the compute units add their own, docs/pm4.md).
REASON_ILLEGAL_PACKET = "illegal_packet"
REASON_TRUNCATED = "truncated"
REASON_BAD_REGISTER = "bad_register"
REASON_IB_DEPTH = "ib_depth"
REASON_BAD_DISPATCH = "bad_dispatch"
REASON_MISALIGNED = "misaligned"


@dataclasses.dataclass
class IbFrame:
    """One IB of a chain: its VA, its dwords, and the packet being run in it."""

    va: int
    dwords: tuple
    offset: int = 0


@dataclasses.dataclass
class CpResume:
    """Where a preempted run stops (opaque to the KMD): the IB chain from the submitted
    IB to the innermost, each as (va, dwords, offset of the packet to run next or
    being run), the SH registers, and the preempted DISPATCH_DIRECT's DispatchResume
    (None when the run stopped between packets)."""

    frames: list
    regs: dict
    dispatch: object = None


@dataclasses.dataclass
class CpResult:
    """Outcome of CommandProcessor.run(), a superset of SdmaResult.

    status 'ok' / 'fault' / 'aborted' / 'preempted' (resume: the CpResume to pass back
    to run()); fault: the GpuFault of a page fault (from a
    packet or a wave), else None; reason: see docs/pm4.md; packet_offset / opcode:
    the faulting / aborted packet in the innermost IB (or the last one run);
    packets: packets fully executed (chained IBs included); ib_chain: the IBs from
    the submitted one to the innermost, each with the offset being run; dispatch:
    the ComputeResult of the DISPATCH_DIRECT that faulted or was aborted (else
    the last one run, or None); sh_regs: the SH registers set at that moment.

    Performance counters (docs/observability.md): packet_ops, {PM4 opcode: packets
    completed}; counters, the sum of the dispatches' (kmd/hw/compute.py
    COMPUTE_COUNTERS) with the CP DMA's bytes_read / bytes_written.
    """

    status: str
    fault: GpuFault | None = None
    reason: str | None = None
    packet_offset: int = 0
    opcode: int = -1
    packets: int = 0
    bytes_moved: int = 0
    ib_chain: list = dataclasses.field(default_factory=list)
    dispatch: object = None
    dispatches: int = 0
    sh_regs: dict = dataclasses.field(default_factory=dict)
    packet_ops: dict = dataclasses.field(default_factory=dict)
    counters: dict = dataclasses.field(default_factory=dict)
    resume: CpResume | None = dataclasses.field(default=None, repr=False)

    def count(self, counters: dict) -> None:
        mine = self.counters
        if not mine:                    # the first (often the only) dispatch of the run
            mine.update(counters)
            return
        _add_counters(mine, counters)


def _add_counters_py(mine: dict, theirs: dict) -> None:
    for name, value in theirs.items():
        mine[name] = mine.get(name, 0) + value


# The same in C, from the Cython core (kmd/hw/_cp_fast.pxi): the sum of a run's
# counters (some 16 per dispatch), and _run_ib's loop over the packets that cannot stop
# a run (a tiny launch is four SET_SH_REGs around its DISPATCH_DIRECT). With the
# reference twins (VGPU_HW=ref) the Python lines run.
if REFERENCE:
    _add_counters, _simple_packets = _add_counters_py, None
else:
    from kmd.hw._core import add_counters as _add_counters, simple_packets as _simple_packets


class _Stop(Exception):
    """Ends a run: carries the result's status, reason and fault."""

    def __init__(self, status: str, reason: str | None = None, fault: GpuFault | None = None,
                 dispatch=None):
        super().__init__(reason)
        self.status, self.reason, self.fault = status, reason, fault
        self.dispatch = dispatch    # 'preempted' inside a dispatch: its DispatchResume


def default_compute_engine(name: str, ih, cus: int = 2, l2=None):
    """The compute units kmd.hw selects: the Cython core's ComputeEngine, or the
    reference executor's under VGPU_HW=ref (both export one), with `cus` compute
    units (worker threads; the reference runs on one whatever the number), on the L2
    model `l2` (kmd.hw.L2Cache) when the device has one."""
    if l2 is not None:
        return ComputeEngine(name, ih, threads=cus, l2=l2)
    return ComputeEngine(name, ih, threads=cus)


# The packet loop's constants (vgpu/pm4.py), bound once.
_NOP_FILLER, _NOP, _TYPE3, _PREDICATE, _COUNT_MASK = (P.PM4_NOP_FILLER, P.PKT3_NOP, P.PM4_TYPE3,
                                                      P.PM4_PREDICATE, P.PM4_COUNT_MASK)
_SET_SH_REG, _DISPATCH_DIRECT, _RELEASE_MEM = P.PKT3_SET_SH_REG, P.PKT3_DISPATCH_DIRECT, P.PKT3_RELEASE_MEM
_BODY_DW, _SH_REGS_KNOWN = P.PKT3_BODY_DW, P.SH_REGS_KNOWN
_USER_DATA_REGS = tuple(P.COMPUTE_USER_DATA_0 + i for i in range(P.COMPUTE_USER_DATA_COUNT))
# (first register, body dwords) of the SET_SH_REG packets _set_sh_reg found good: only
# known registers, a body of at least two dwords. _run_ib writes these directly. The
# set is bounded (the ranges of known registers are few; a fuzzer's are not kept).
_SH_RANGES_OK: set = set()
_SH_RANGES_MAX = 4096

_PGM_LO, _PGM_HI = P.COMPUTE_PGM_LO, P.COMPUTE_PGM_HI
_RSRC1, _RSRC2 = P.COMPUTE_PGM_RSRC1, P.COMPUTE_PGM_RSRC2
_NUM_THREAD_X, _NUM_THREAD_Y, _NUM_THREAD_Z = (P.COMPUTE_NUM_THREAD_X, P.COMPUTE_NUM_THREAD_Y,
                                               P.COMPUTE_NUM_THREAD_Z)


def _dispatch_setup(key: tuple) -> tuple:
    """What DISPATCH_DIRECT takes from the program registers `key` (PGM_LO, PGM_HI,
    RSRC1, RSRC2, NUM_THREAD_X, Y, Z): (code_va, block, vgprs, sgprs, the user data
    registers to pass, lds_bytes, bad), bad when they make no valid dispatch (a
    bad_dispatch fault)."""
    lo, hi, rsrc1, rsrc2, bx, by, bz = key
    block = (bx, by, bz)
    code_va = P.pgm_address(lo, hi)
    vgprs, sgprs = P.decode_rsrc1(rsrc1)
    # Registers are granted in granules (docs/pm4.md); the last granule may reach
    # past the register file, which then bounds it.
    vgprs, sgprs = min(vgprs, isa.MAX_VGPRS), min(sgprs, isa.MAX_SGPRS)
    user_sgprs, lds_bytes = P.decode_rsrc2(rsrc2)
    bad = (code_va == 0 or min(block) < 1 or bx * by * bz > MAX_WORKGROUP_THREADS
           or user_sgprs > P.COMPUTE_USER_DATA_COUNT or sgprs < isa.MIN_SGPRS
           or vgprs < isa.MIN_VGPRS or lds_bytes > P.MAX_LDS_BYTES)
    return code_va, block, vgprs, sgprs, _USER_DATA_REGS[:user_sgprs], lds_bytes, bad


_COMPARE = (
    lambda a, b: True, lambda a, b: a < b, lambda a, b: a <= b, lambda a, b: a == b,
    lambda a, b: a != b, lambda a, b: a >= b, lambda a, b: a > b,
)


class CommandProcessor:
    """One compute ring's command processor. `compute` is the ComputeEngine that
    runs dispatches; by default it is made on the first dispatch, with `cus`
    compute units. `l2`: the device's L2 model (kmd.hw.L2Cache, docs/cache.md) when
    the mount has one: RELEASE_MEM and ACQUIRE_MEM then do their cache actions, and
    the compute units go through it. Without it the cache bits change nothing."""

    def __init__(self, name: str, ih, compute=None, cus: int = 2, l2=None) -> None:
        self.name, self.ih = name, ih
        self.l2 = l2
        self._compute = compute
        self._cus = cus
        self._running = False
        self._abort = False
        self._preempt = False
        self._dispatching = False
        self._lock = threading.Lock()
        self._setup_key, self._setup = None, None
        # Called with the dword offset (in the submitted IB) of a packet that waits:
        # a WAIT_REG_MEM whose first read did not satisfy it; the packets before it are
        # done (a user queue publishes its rptr there, kmd/userq_worker.py).
        self.on_wait = None

    @property
    def compute(self):
        if self._compute is None:
            self._compute = default_compute_engine(self.name, self.ih, self._cus, self.l2)
        return self._compute

    def abort(self) -> bool:
        """Stop the run in progress at its next packet boundary or poll step, and
        the dispatch in progress (ComputeEngine.abort). False when idle."""
        if not self._running:
            return False
        self._abort = True
        # The dispatch may be about to start: keep asking until it takes the abort
        # or ends, so a one-shot watchdog never misses an endless kernel.
        deadline = time.monotonic() + 1.0
        while self._dispatching and not self._compute.abort() and time.monotonic() < deadline:
            time.sleep(0.0005)
        return True

    def preempt(self) -> bool:
        """Preempt the run in progress (from another thread): it stops at its next
        packet boundary or poll step, or, inside a DISPATCH_DIRECT, at the waves' next
        instruction (ComputeEngine.preempt); the result is 'preempted' with the
        CpResume that continues it. False (nothing done) when idle: a request never
        preempts a later run."""
        if not self._running:
            return False
        self._preempt = True
        deadline = time.monotonic() + 1.0       # as abort(): a dispatch about to start
        # A cooperative dispatch refuses preemption (docs/isa.md 4.1): stop after it.
        while (self._dispatching and not self._abort and not self._compute.preempt()
               and not getattr(self._compute, "cooperative", False)
               and time.monotonic() < deadline):
            time.sleep(0.0005)
        return True

    def preempt_after(self, n: int | None) -> None:
        """Test trigger of the compute units (ComputeEngine.preempt_after)."""
        self.compute.preempt_after(n)

    def run(self, pt, ib_va: int, ib_size_dw: int, ctx_id: int = 0, ring_id: int = 0,
            resume: CpResume | None = None, csa=None) -> CpResult:
        """Run one IB; with `resume` (a preempted result's, same IB), continue it.
        `csa`: the context's save area, where a preempted dispatch's waves go."""
        if ib_size_dw < 0:
            raise ValueError(f"run: negative IB size {ib_size_dw}")
        if resume is not None and (not isinstance(resume, CpResume)
                                   or resume.frames[0][0] != ib_va
                                   or len(resume.frames[0][1]) != ib_size_dw):
            raise ValueError("run: resume does not belong to this IB")
        with self._lock:  # one run at a time, as one ring feeds one CP
            self._abort = False
            self._preempt = False
            self._running = True
            pin = pt.pin()
            res = CpResult("ok")
            self._regs: dict[int, int] = dict(resume.regs) if resume else {}
            self._ctx_id, self._ring_id, self._csa = ctx_id, ring_id, csa
            self._resume_dispatch = resume.dispatch if resume else None
            try:
                self._run_ib(pt, ib_va, ib_size_dw, res, resume.frames if resume else None)
            except _Stop as stop:
                res.status, res.reason, res.fault = stop.status, stop.reason, stop.fault
                if stop.status == "fault":
                    self._push_fault(res)
                elif stop.status == "preempted":
                    # A resumed dispatch not yet re-entered is still to be continued.
                    dispatch = stop.dispatch or self._resume_dispatch
                    res.resume = CpResume([(f.va, f.dwords, f.offset) for f in res.ib_chain],
                                          dict(self._regs), dispatch)
            finally:
                self._running = False
                self._abort = False
                self._preempt = False
                self._csa = self._resume_dispatch = None
                pin.release()
            res.sh_regs = self._regs        # this run's own dict (run() makes a new one)
            return res

    # -- packets ---------------------------------------------------------------
    def _run_ib(self, pt, va: int, size_dw: int, res: CpResult, resume=None) -> None:
        """Run the IB at `va`; `resume`: the CpResume frames from this IB inward (its
        dwords as first fetched, and the packet to continue at)."""
        frame = IbFrame(va, ())
        res.ib_chain.append(frame)
        if resume:
            _, frame.dwords, pos = resume[0]
            inner = resume[1:]
        else:
            try:
                frame.dwords = struct.unpack(f"<{size_dw}I", pt.read(va, size_dw * 4))
            except GpuFault as fault:
                raise _Stop("fault", fault.reason, fault) from None
            pos, inner = 0, None
        ib = frame.dwords
        end = len(ib)
        ops = res.packet_ops
        chain = res.ib_chain
        execute = self._execute
        regs = self._regs
        sh_ok = _SH_RANGES_OK
        simple = _simple_packets
        # The loop runs for every packet of every IB: the header fields are decoded
        # inline (vgpu.pm4's pm4_opcode, pm4_type, pm4_body_dw), and so is SET_SH_REG,
        # the most frequent packet (what _set_sh_reg does, its checks' outcome cached).
        # A packet that cannot stop the run (a NOP filler, such a SET_SH_REG, with the
        # core a RELEASE_MEM that does nothing: runs of them go to simple_packets in C)
        # leaves the result's position fields and packet count to be brought up to
        # date before anything can read them: the next packet run by _execute, a stop,
        # the end.
        last = last_op = -1             # the last packet whose position is not yet in res
        done = 0                        # packets completed here not yet in res.packets
        while pos < end:
            hdr = ib[pos]
            op = hdr >> 8 & 0xFF
            if (op == _SET_SH_REG or op == _RELEASE_MEM or hdr == _NOP_FILLER) and simple is not None \
                    and inner is None:
                pos, k, at, at_op = simple(self, ib, pos, regs, ops, sh_ok, _NOP_FILLER, _NOP,
                                           _SET_SH_REG, _COUNT_MASK, _RELEASE_MEM,
                                           P.RELEASE_DST_TC_L2, self.l2 is None)
                if k:                   # (none: this packet takes the lines below)
                    done += k
                    last, last_op = at, at_op
                    continue
            if self._abort:
                frame.offset = res.packet_offset = pos
                res.opcode, res.packets = op, res.packets + done
                raise _Stop("aborted")
            if self._preempt and not inner:     # a resumed chain first re-enters its IBs
                frame.offset = res.packet_offset = pos
                res.opcode, res.packets = op, res.packets + done
                raise _Stop("preempted")
            if hdr == _NOP_FILLER:
                last, last_op, inner = pos, op, None
                pos += 1
                done += 1
                ops[_NOP] = ops.get(_NOP, 0) + 1
                continue
            if hdr >> 30 != _TYPE3 or hdr & _PREDICATE:
                frame.offset = res.packet_offset = pos
                res.opcode, res.packets = -1, res.packets + done
                raise _Stop("fault", REASON_ILLEGAL_PACKET)
            n = (hdr >> 16 & _COUNT_MASK) + 1
            if pos + 1 + n > end:
                frame.offset = res.packet_offset = pos
                res.opcode, res.packets = op, res.packets + done
                raise _Stop("fault", REASON_TRUNCATED)
            if op == _SET_SH_REG and (ib[pos + 1], n) in sh_ok:
                base = ib[pos + 1]
                if n == 3:
                    regs[base], regs[base + 1] = ib[pos + 2], ib[pos + 3]
                else:
                    regs.update(zip(range(base, base + n - 1), ib[pos + 2: pos + 1 + n]))
                last, last_op, inner = pos, op, None
            else:
                frame.offset = res.packet_offset = pos
                res.opcode, res.packets = op, res.packets + done
                done, last = 0, -1
                self._inner, inner = inner, None    # the chained IB a resumed packet re-enters
                execute(pt, op, ib[pos + 1: pos + 1 + n], res)
                if chain[-1] is not frame:  # back from a chained IB
                    chain.pop()
                    res.packet_offset, res.opcode = pos, P.PKT3_INDIRECT_BUFFER
            ops[op] = ops.get(op, 0) + 1
            done += 1
            pos += 1 + n
        res.packets += done
        if last >= 0:
            frame.offset = res.packet_offset = last
            res.opcode = last_op

    def _execute(self, pt, op: int, body, res: CpResult) -> None:
        want = _BODY_DW.get(op)
        if want is not None and len(body) != want:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        try:
            if op == _SET_SH_REG:                   # the most frequent packets first
                self._set_sh_reg(body)
            elif op == _DISPATCH_DIRECT:
                self._dispatch(pt, body, res)
            elif op == _RELEASE_MEM:
                self._release_mem(pt, body, res)
            elif op == P.PKT3_NOP:
                return
            elif op == P.PKT3_ACQUIRE_MEM:
                self.cache_sync(P.acquire_mem_l2_actions(body[0]), res)
            elif op == P.PKT3_INDIRECT_BUFFER:
                self._indirect_buffer(pt, body, res)
            elif op == P.PKT3_WAIT_REG_MEM:
                self._wait_reg_mem(pt, body, res)
            elif op == P.PKT3_WRITE_DATA:
                self._write_data(pt, body)
            elif op == P.PKT3_DMA_DATA:
                self._dma_data(pt, body, res)
            else:
                raise _Stop("fault", REASON_ILLEGAL_PACKET)
        except GpuFault as fault:
            raise _Stop("fault", fault.reason, fault) from None

    def _set_sh_reg(self, body) -> None:
        if len(body) < 2:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        base = body[0]
        regs = range(base, base + len(body) - 1)
        if not _SH_REGS_KNOWN.issuperset(regs):
            raise _Stop("fault", REASON_BAD_REGISTER)
        self._regs.update(zip(regs, body[1:]))
        if len(_SH_RANGES_OK) < _SH_RANGES_MAX:
            _SH_RANGES_OK.add((base, len(body)))      # _run_ib's shortcut from now on

    def _dispatch(self, pt, body, res: CpResult) -> None:
        x, y, z, initiator = body
        reg = self._regs.get
        key = (reg(_PGM_LO, 0), reg(_PGM_HI, 0), reg(_RSRC1, 0), reg(_RSRC2, 0),
               reg(_NUM_THREAD_X, 0), reg(_NUM_THREAD_Y, 0), reg(_NUM_THREAD_Z, 0))
        # The decoded program registers of the last dispatch (a relaunch sets the same).
        if key != self._setup_key:
            self._setup_key, self._setup = key, _dispatch_setup(key)
        code_va, block, vgprs, sgprs, user_regs, lds_bytes, bad = self._setup
        if bad or not initiator & P.DISPATCH_INITIATOR_COMPUTE_SHADER_EN:
            raise _Stop("fault", REASON_BAD_DISPATCH)
        if x * y * z == 0:
            return  # no workgroups: nothing runs, as on hardware
        user_data = [reg(r, 0) for r in user_regs]
        compute = self.compute
        resume, self._resume_dispatch = self._resume_dispatch, None
        self._dispatching = True
        try:
            if self._abort:
                raise _Stop("aborted")
            if self._preempt:
                raise _Stop("preempted", dispatch=resume)
            result = compute.dispatch(pt, code_va, sgprs=sgprs, vgprs=vgprs, lds_bytes=lds_bytes,
                                      grid=(x, y, z), block=block, user_data=user_data,
                                      ctx_id=self._ctx_id, ring_id=self._ring_id,
                                      resume=resume, csa=self._csa)
        finally:
            self._dispatching = False
        res.dispatch = result
        res.count(result.counters)
        if result.status == "preempted":
            raise _Stop("preempted", dispatch=result.resume)
        res.dispatches += 1
        if result.status == "aborted":
            raise _Stop("aborted")
        if result.status != "ok":
            raise _Stop("fault", result.reason, result.fault)

    def _indirect_buffer(self, pt, body, res: CpResult) -> None:
        va = body[0] & 0xFFFFFFFC | (body[1] & 0xFFFF) << 32
        if not body[2] & P.IB_VALID:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        if len(res.ib_chain) > P.MAX_IB_DEPTH:
            raise _Stop("fault", REASON_IB_DEPTH)
        self._run_ib(pt, va, body[2] & P.IB_SIZE_MASK, res, self._inner)

    @staticmethod
    def _aligned(addr: int, align: int) -> int:
        if addr % align:
            raise _Stop("fault", REASON_MISALIGNED)
        return addr

    def cache_sync(self, actions: int, res: CpResult | None = None) -> dict:
        """The L2 actions (vgpu.pm4 L2_* flags) of a RELEASE_MEM or ACQUIRE_MEM, or of
        the KMD's job frame; their counters go to `res`. Nothing without an L2 model."""
        if self.l2 is None or not actions:
            return {}
        counters = self.l2.sync(actions)
        if res is not None:
            res.count(counters)
        return counters

    def _release_mem(self, pt, body, res: CpResult) -> None:
        data_sel, int_sel, dst_sel = body[1] >> 29, body[1] >> 24 & 7, body[1] >> 16 & 3
        if data_sel > P.DATA_SEL_TIMESTAMP or int_sel > 3 or dst_sel > P.RELEASE_DST_TC_L2:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        addr = body[2] | body[3] << 32
        # Dispatches run to completion before the next packet, so the end-of-pipe
        # event has already happened when this packet runs; its cache actions are
        # done before the data is written (what makes the data a release).
        if self.l2 is not None:         # (cache_sync does nothing without an L2 model)
            self.cache_sync(P.release_mem_l2_actions(body[0]), res)
        if data_sel == P.DATA_SEL_32:
            pt.write(self._aligned(addr, 4), struct.pack("<I", body[4]))
        elif data_sel == P.DATA_SEL_64:
            pt.write(self._aligned(addr, 8), struct.pack("<II", body[4], body[5]))
        elif data_sel == P.DATA_SEL_TIMESTAMP:
            pt.write(self._aligned(addr, 8), struct.pack("<Q", time.monotonic_ns()))
        if int_sel:
            self.ih.push(IH_SRC_CP_EOP, self._ring_id, self._ctx_id, body[6])

    def _wait_reg_mem(self, pt, body, res: CpResult) -> None:
        func, space, operation = body[0] & 7, body[0] >> 4 & 3, body[0] >> 6 & 3
        if func == 7 or space > P.WAIT_MEM_SPACE_MEM or operation != 0:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        if space == P.WAIT_MEM_SPACE_REG:
            return  # no registers are emulated: a register wait is satisfied at once
        addr = self._aligned(body[1] | body[2] << 32, 4)
        ref, mask, compare = body[3], body[4], _COMPARE[func]
        told = self.on_wait is None
        while True:
            mem, = struct.unpack("<I", pt.read(addr, 4))
            if compare(mem & mask, ref):
                return
            if not told:
                told = True
                self.on_wait(res.ib_chain[0].offset)
            if self._abort:
                raise _Stop("aborted")
            if self._preempt:       # the packet runs again on resume: it only reads
                raise _Stop("preempted")
            time.sleep(POLL_STEP_S)

    def _write_data(self, pt, body) -> None:
        if len(body) < 4 or body[0] >> 8 & 0xF not in P.WRITE_DST_MEMORY:
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        addr = self._aligned(body[1] | body[2] << 32, 4)
        data = body[3:]
        if body[0] & P.WR_ONE_ADDR:  # every dword to the same address: the last stays
            data = data[-1:]
        pt.write(addr, struct.pack(f"<{len(data)}I", *data))

    def _dma_data(self, pt, body, res: CpResult) -> None:
        """DMA_DATA as a GFX9 MEC runs it for the forms Mesa's CP DMA and libdrm's
        tests emit: memory to memory (SRC_SEL 0 with SAS 0, or 3: L2), the DATA dword
        repeated over the destination (SRC_SEL 2), destination memory (DST_SEL 0
        with DAS 0, or 3) or NOWHERE (2: the source is read, as a prefetch, and
        nothing written). SAIC / DAIC keep the source / destination address fixed:
        the first source dword is read over and over / every dword lands on the
        same address (the last stays). Copies run front to back in steps of
        DMA_STEP_BYTES, so an abort stops a long one. BYTE_COUNT 0 moves nothing.
        Faults: illegal_packet for GDS or register (SAS/DAS) addressing, which vgpu
        does not model; misaligned for a DATA fill, or a SAIC/DAIC transfer, whose
        count or address is not a multiple of 4; a page fault for memory it cannot
        read or write."""
        control, command = body[0], body[5]
        src_sel = control >> P.DMA_DATA_SRC_SEL_SHIFT & 3
        dst_sel = control >> P.DMA_DATA_DST_SEL_SHIFT & 3
        if (src_sel == P.DMA_SRC_GDS or dst_sel == P.DMA_DST_GDS
                or (src_sel == P.DMA_SRC_ADDR and command & P.DMA_CMD_SAS)
                or (dst_sel == P.DMA_DST_ADDR and command & P.DMA_CMD_DAS)):
            raise _Stop("fault", REASON_ILLEGAL_PACKET)
        src, dst = body[1] | body[2] << 32, body[3] | body[4] << 32
        nbytes = command & P.DMA_BYTE_COUNT_MASK
        fill = src_sel == P.DMA_SRC_DATA
        src_fixed = fill or bool(command & P.DMA_CMD_SAIC)
        dst_fixed = dst_sel != P.DMA_DST_NOWHERE and bool(command & P.DMA_CMD_DAIC)
        if nbytes == 0:
            return
        if src_fixed or dst_fixed:
            self._aligned(nbytes, 4)
            if dst_sel != P.DMA_DST_NOWHERE:
                self._aligned(dst, 4)
            if src_fixed and not fill:
                self._aligned(src, 4)
        if fill:
            word = struct.pack("<I", body[1])
        elif src_fixed:
            word = pt.read(src, 4)
        done = 0
        while done < nbytes:
            if self._abort:
                raise _Stop("aborted")
            n = min(DMA_STEP_BYTES, nbytes - done)
            data = word * (n // 4) if src_fixed else pt.read(src + done, n)
            if dst_fixed:
                pt.write(dst, data[-4:])
            elif dst_sel != P.DMA_DST_NOWHERE:
                pt.write(dst + done, data)
            done += n
        res.bytes_moved += nbytes
        # The transfer as the engine makes it: a DATA fill reads nothing from memory,
        # NOWHERE writes nothing; a fixed address is read / written once per dword.
        res.count({"bytes_read": 0 if fill else nbytes,
                   "bytes_written": 0 if dst_sel == P.DMA_DST_NOWHERE else nbytes})

    def _push_fault(self, res: CpResult) -> None:
        if res.dispatch is not None and res.dispatch.status == "fault" and res.fault is res.dispatch.fault:
            return  # the compute units reported their own fault
        if res.fault is not None:
            src = IH_SRC_PAGE_FAULT if res.fault.reason == "unmapped" else IH_SRC_PROT_FAULT
            self.ih.push(src, self._ring_id, self._ctx_id, res.fault.va)
        else:
            self.ih.push(IH_SRC_ILLEGAL_INST, self._ring_id, self._ctx_id, res.packet_offset)
