"""The L2 cache model (docs/cache.md) against a small Python model of its rules, on
both implementations: the Cython core's L2Cache + ComputeEngine (one thread, so the
request order is the reference's) and the reference's (kmd/hw/l2_ref.py, cu_ref).

Every case runs real kernels through the compute units on a bare page table; the CPU
and SDMA side is the test writing and reading the memory arena directly (they see
memory, not the L2). After every step the memory, the values the kernels loaded,
the cache's lines and its counters are compared with the model's."""
import collections
import random

import numpy as np
import pytest

from kmd.hw import _core, cu_ref, l2_ref, ref
from vgpu import pm4 as P

from .isa_gen import MEM_VA, Rig

LINE = 128
NONE, WB, INV, WB_INV = 0, P.L2_WRITEBACK, P.L2_INVALIDATE, P.L2_WRITEBACK | P.L2_INVALIDATE
ACTIONS = {"none": NONE, "wb": WB, "inv": INV, "wb+inv": WB_INV}
UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]      # s[2:3] = the data arena


class Model:
    """The rules of docs/cache.md over the arena's bytes: a fully associative LRU
    cache of 128-byte lines named by their offset, write-allocate, a dirty byte set
    per line; one request per run of lanes in the same line."""

    def __init__(self, mem: bytearray, capacity: int) -> None:
        self.mem, self.capacity = mem, capacity
        self.lines: collections.OrderedDict[int, list] = collections.OrderedDict()
        self.count = collections.Counter()

    def _line(self, idx: int, new_request: bool):
        if idx in self.lines:
            self.lines.move_to_end(idx)
            self.count["l2_hits"] += new_request
        else:
            self.count["l2_misses"] += 1
            if len(self.lines) == self.capacity:
                victim, (data, dirty) = self.lines.popitem(last=False)
                self.count["l2_evictions"] += 1
                if dirty:
                    self._write_back(victim, data, dirty)
            self.lines[idx] = [bytearray(self.mem[idx * LINE:(idx + 1) * LINE]), set()]
        return self.lines[idx]

    def _write_back(self, idx, data, dirty) -> None:
        for b in dirty:
            self.mem[idx * LINE + b] = data[b]
        self.count["l2_writebacks"] += 1

    def instruction(self, kind: str, offsets, size: int, values=()):
        """One wave instruction over `offsets` (lane order): kind 'load', 'store' or
        'atomic_add'. Returns the loaded (or the atomics' old) values."""
        out, last = [], None
        for lane, off in enumerate(offsets):
            idx, b = divmod(off, LINE)
            data, dirty = self._line(idx, idx != last)
            last = idx
            old = int.from_bytes(data[b:b + size], "little")
            out.append(old)
            if kind != "load":
                new = (values[lane] if kind == "store" else old + values[lane]) & ((1 << 8 * size) - 1)
                data[b:b + size] = new.to_bytes(size, "little")
                dirty.update(range(b, b + size))
        return out

    def sync(self, actions: int) -> None:
        if actions & WB:
            for idx, (data, dirty) in self.lines.items():
                if dirty:
                    self._write_back(idx, data, dirty)
                    dirty.clear()
        if actions & INV:
            for idx in [i for i, (_, dirty) in self.lines.items() if not dirty]:
                del self.lines[idx]
                self.count["l2_invalidations"] += 1


class CachedRig(Rig):
    """A Rig whose engine has an L2 of `lines` lines, with the model beside it."""

    def __init__(self, impl: str, lines: int = 32768, threads: int = 1) -> None:
        if impl == "core":
            self.l2 = _core.L2Cache(lines * LINE)
            engine = lambda name, ih: _core.ComputeEngine(name, ih, threads=threads, l2=self.l2)  # noqa: E731
            super().__init__(engine, _core.PageTable)
        else:
            self.l2 = l2_ref.L2Cache(lines * LINE)
            super().__init__(lambda name, ih: cu_ref.ComputeEngine(name, ih, l2=self.l2), ref.PageTable)
        self.model_mem = bytearray(len(self.mem))
        self.model = Model(self.model_mem, lines)
        self.base = self.mem.ctypes.data

    def where(self, host: int) -> tuple[str, int]:
        """A line's buffer (the arena, the kernargs or the code) and offset in it."""
        for name, buf in (("mem", self.mem), ("karg", self.karg), ("code", self.code)):
            if 0 <= host - buf.ctypes.data < buf.nbytes:
                return name, host - buf.ctypes.data
        raise AssertionError(f"a line at {host:#x} outside the rig's buffers")

    def cpu_write(self, off: int, data: bytes) -> None:
        """The CPU (or SDMA) stores to memory: the L2 does not see it."""
        self.mem[off:off + len(data)] = np.frombuffer(data, np.uint8)
        self.model_mem[off:off + len(data)] = data

    def instruction(self, kind: str, base: int, stride: int, n: int = 32, size: int = 4, seed: int = 0):
        """Run one memory instruction on n lanes at base + lane * stride (lane values
        seed + lane for stores and atomics), on the engine and on the model; check
        the loaded values and return the result."""
        op = {("load", 4): "global_load_dword v4, v3, s[2:3]",
              ("load", 1): "global_load_ubyte v4, v3, s[2:3]",
              ("load", 8): "global_load_dwordx2 v[4:5], v3, s[2:3]",
              ("store", 4): "global_store_dword v3, v7, s[2:3]",
              ("store", 1): "global_store_byte v3, v7, s[2:3]",
              ("atomic_add", 4): "global_atomic_add_u32 v4, v3, v7, s[2:3]"}[kind, size]
        r = self.run(f"""
            s_mov_b32 s8, {stride}
            s_mov_b32 s9, {base}
            s_mov_b32 s10, {seed}
            v_mad_u32 v3, v0, s8, s9
            v_add_u32 v7, s10, v0
            v_mov_b32 v5, 0
            {op}
            s_endpgm
            """, (1, 1, 1), (n, 1, 1), user_data=UD)
        assert r.status == "ok", r
        values = [(seed + lane) & 0xFFFFFFFF for lane in range(n)]
        want = self.model.instruction(kind, [base + lane * stride for lane in range(n)], size, values)
        if kind != "store":
            got = [r.vgprs[4][lane] | (r.vgprs[5][lane] << 32 if size == 8 else 0) for lane in range(n)]
            assert got == want
        return r

    def sync(self, actions: int) -> dict:
        self.model.sync(actions)
        return self.l2.sync(actions)

    def check(self) -> None:
        """Memory, the cache's lines (LRU order, data, dirty bytes) and the counters
        are the model's."""
        assert bytes(self.mem) == bytes(self.model_mem)
        lines = [((key - self.base) // LINE, data, {b for b in range(LINE) if dirty >> b & 1})
                 for key, data, dirty in self.l2.lines()]
        assert lines == [(idx, bytes(data), dirty) for idx, (data, dirty) in self.model.lines.items()]
        totals = self.l2.counters()
        assert totals == {name: self.model.count[name] for name in l2_ref.L2_COUNTERS}


@pytest.fixture(params=["core", "ref"])
def impl(request):
    return request.param


def test_compute_stores_stay_in_l2_until_written_back(impl):
    rig = CachedRig(impl)
    r = rig.instruction("store", 0, 4, seed=100)
    assert not rig.mem[:LINE].any()                   # memory does not have them yet
    assert r.counters["l2_misses"] == 1 and r.counters["l2_hits"] == 0   # 32 lanes, one line
    rig.check()
    assert rig.sync(WB) == {"l2_writebacks": 1, "l2_invalidations": 0}
    assert list(rig.u32(0, 32)) == list(range(100, 132))
    rig.check()


@pytest.mark.parametrize("action", ACTIONS)
def test_each_cache_action(impl, action):
    """Line A dirty (a kernel stored to it), line B clean (a kernel read it); then
    the CPU writes over both in memory, the action runs, and kernels read both."""
    rig = CachedRig(impl)
    A, B = 0, 4096
    rig.cpu_write(B, bytes(range(128)))
    rig.instruction("store", A, 8, n=16, seed=7)      # every other dword of A
    rig.instruction("load", B, 4)
    rig.cpu_write(A, b"\xaa" * LINE)                  # the CPU writes all of A ...
    rig.cpu_write(B, b"\x55" * LINE)                  # ... and all of B
    counters = rig.sync(ACTIONS[action])
    rig.check()
    a = rig.instruction("load", A, 4)                 # checks the values against the model
    b = rig.instruction("load", B, 4)
    rig.check()
    stale_b = b.vgprs[4][0] == int.from_bytes(bytes(range(4)), "little")
    assert stale_b == (action in ("none", "wb"))      # only an invalidate drops B's old copy
    # A's dirty dwords win over the CPU's bytes in the cache; in memory only after a
    # write-back, which leaves the CPU's bytes between them.
    assert [a.vgprs[4][2 * i] for i in range(16)] == list(range(7, 23))
    written = action in ("wb", "wb+inv")
    assert counters == {"l2_writebacks": int(written),
                        "l2_invalidations": {"none": 0, "wb": 0, "inv": 1, "wb+inv": 2}[action]}
    assert (rig.u32(A, 2)[0] == 7) == written and rig.u32(A, 2)[1] == 0xAAAAAAAA


def test_stale_read_until_invalidate(impl):
    rig = CachedRig(impl)
    rig.cpu_write(0, (1).to_bytes(4, "little") * 32)
    assert rig.instruction("load", 0, 4).vgprs[4][0] == 1
    rig.cpu_write(0, (2).to_bytes(4, "little") * 32)  # SDMA / the CPU update the input
    assert rig.instruction("load", 0, 4).vgprs[4][0] == 1     # a hit on the old line
    rig.sync(INV)
    assert rig.instruction("load", 0, 4).vgprs[4][0] == 2
    rig.check()


def test_dirty_victims_are_written_back_on_eviction(impl):
    rig = CachedRig(impl, lines=2)
    for i in range(3):                                # three lines through a 2-line cache
        rig.instruction("store", i * LINE, 4, seed=1000 * (i + 1))
    assert list(rig.u32(0, 32)) == list(range(1000, 1032))   # the LRU line, evicted
    assert not rig.mem[LINE:3 * LINE].any()
    c = rig.l2.counters()
    assert (c["l2_evictions"], c["l2_writebacks"], c["l2_misses"]) == (1, 1, 3)
    rig.instruction("load", 0, 4)                     # evicts line 1 (dirty), reloads line 0
    rig.check()
    rig.instruction("load", LINE, 4)
    rig.check()


def test_clean_victims_are_dropped_and_lru_order_is_kept(impl):
    rig = CachedRig(impl, lines=2)
    rig.instruction("load", 0, 4)
    rig.instruction("load", LINE, 4)
    rig.instruction("load", 0, 4)                     # line 0 most recent: line 1 goes next
    rig.instruction("load", 2 * LINE, 4)
    rig.check()
    assert [(key - rig.base) // LINE for key, _, _ in rig.l2.lines()] == [0, 2]


def test_a_write_back_stores_only_the_bytes_compute_wrote(impl):
    rig = CachedRig(impl)
    rig.instruction("store", 3, 4, n=4, size=1, seed=0x41)   # bytes 3, 7, 11, 15
    rig.cpu_write(0, b"\xee" * LINE)                         # the CPU writes the line meanwhile
    rig.sync(WB_INV)
    rig.check()
    line = bytes(rig.mem[:16])
    assert line == b"\xee\xee\xee\x41\xee\xee\xee\x42\xee\xee\xee\x43\xee\xee\xee\x44"


def test_atomics_run_in_l2(impl):
    rig = CachedRig(impl)
    rig.cpu_write(0, (10).to_bytes(4, "little"))
    r = rig.instruction("atomic_add", 0, 0, seed=1)   # 32 lanes on one dword: 1 + ... + 32
    assert r.counters["l2_misses"] == 1 and r.counters["l2_hits"] == 0
    assert rig.u32(0, 1)[0] == 10                     # memory has not seen them
    rig.sync(WB)
    assert rig.u32(0, 1)[0] == 10 + sum(range(1, 33))
    rig.check()


def test_requests_follow_lines_and_counters_are_per_dispatch(impl):
    rig = CachedRig(impl)
    r = rig.instruction("load", 0, 8)                 # 32 lanes over 256 bytes: 2 requests
    assert (r.counters["l2_misses"], r.counters["l2_hits"]) == (2, 0)
    r = rig.instruction("load", 0, 8, size=8)         # qwords over the same two lines
    assert (r.counters["l2_misses"], r.counters["l2_hits"]) == (0, 2)
    r = rig.instruction("load", 0, 132)               # every lane a new line
    assert r.counters["l2_misses"] + r.counters["l2_hits"] == 32
    rig.check()


def test_without_the_model_memory_is_coherent(impl):
    engine = _core.ComputeEngine if impl == "core" else cu_ref.ComputeEngine
    rig = Rig(engine, _core.PageTable if impl == "core" else ref.PageTable)
    r = rig.run("""
        v_lshl_b32 v3, v0, 2
        global_store_dword v3, v0, s[2:3]
        s_endpgm""", (1, 1, 1), (32, 1, 1), user_data=UD)
    assert list(rig.u32(0, 32)) == list(range(32))
    assert not any(name.startswith("l2_") for name in r.counters)


def test_random_streams_core_and_reference_agree_with_the_model():
    """Seeded random mixes of kernel loads, stores, byte stores, atomics, CPU writes
    and cache actions on a small cache: both implementations stay equal to the model
    after every step (memory, lines, counters, loaded values)."""
    for seed in range(12):
        rng = random.Random(seed)
        lines = rng.choice([1, 3, 8])
        rigs = [CachedRig(impl, lines=lines) for impl in ("core", "ref")]
        for _ in range(25):
            step = rng.random()
            base = rng.randrange(0, 8 * LINE, 4)
            stride = rng.choice([0, 4, 8, 64, 132, 256])
            n = rng.choice([1, 5, 32])
            if step < 0.15:
                data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                off = rng.randrange(0, 12 * LINE)
                for rig in rigs:
                    rig.cpu_write(off, data)
            elif step < 0.3:
                action = rng.choice(list(ACTIONS.values()))
                for rig in rigs:
                    rig.sync(action)
            else:
                kind, size = rng.choice([("load", 4), ("load", 1), ("store", 4), ("store", 1),
                                         ("atomic_add", 4), ("load", 8)])
                if size == 8:
                    base, stride = base & ~7, stride & ~7
                if size == 1:
                    base += rng.randrange(4)
                s = rng.randrange(1 << 32)
                results = [rig.instruction(kind, base, stride, n=n, size=size, seed=s) for rig in rigs]
                core, reference = ({k: v for k, v in r.counters.items()     # the reference has no TLB
                                    if not k.startswith(("tlb_", "pt_"))} for r in results)
                assert core == reference
            for rig in rigs:
                rig.check()


# -- the command processor's cache actions -----------------------------------------------
IB_VA, FLAG = 0x40_0000, 0x3000          # the IB's VA; the flag's offset in the arena


def cp_run(rig, ib: P.Pm4Ib):
    """Run `ib` on a CommandProcessor whose compute units are the rig's engine."""
    from kmd.hw import cp as C
    ibmem = np.zeros(4096, np.uint8)
    rig.pt.map(IB_VA, ibmem, 0, 4096, 2)
    data = ib.tobytes()
    ibmem[:len(data)] = np.frombuffer(data, np.uint8)
    proc = C.CommandProcessor("comp_1.0.0", rig.ih, rig.engine, l2=rig.l2)
    return proc.run(rig.pt, IB_VA, len(ib), ctx_id=1, ring_id=1)


def store_kernel_ib(rig, release_cache: int) -> P.Pm4Ib:
    """A kernel storing lane + 5 to dwords 0..31, then a RELEASE_MEM with
    `release_cache` writing the flag (the 'results are ready' signal)."""
    obj = rig.load("""
        v_lshl_b32 v3, v0, 2
        s_mov_b32 s10, 5
        v_add_u32 v7, s10, v0
        global_store_dword v3, v7, s[2:3]
        s_endpgm""")
    return (P.Pm4Ib().set_program(0x10_0000 + obj.entry, P.rsrc1(obj.vgprs, obj.sgprs), P.rsrc2(4))
            .set_num_threads(32).set_user_data(UD).dispatch_direct(1)
            .release_mem(MEM_VA + FLAG, 1, P.DATA_SEL_32, event=P.EVENT_BOTTOM_OF_PIPE_TS,
                         cache=release_cache))


@pytest.mark.parametrize("cache", [0, P.RELEASE_WB, P.RELEASE_WB_INV], ids=["none", "wb", "wb+inv"])
def test_release_mem_writes_back_before_its_data(impl, cache):
    rig = CachedRig(impl)
    res = cp_run(rig, store_kernel_ib(rig, cache))
    assert res.status == "ok", res
    assert rig.u32(FLAG, 1)[0] == 1                   # the CP writes the flag to memory
    ready = list(rig.u32(0, 32)) == list(range(5, 37))
    assert ready == bool(cache)                       # without a write-back: stale memory
    assert res.counters["l2_writebacks"] == (1 if cache else 0)
    assert res.counters["l2_invalidations"] == (1 if cache == P.RELEASE_WB_INV else 0)
    assert len(rig.l2.lines()) == (0 if cache == P.RELEASE_WB_INV else 1)


def test_acquire_mem_invalidates_before_a_kernel_reads(impl):
    rig = CachedRig(impl)
    rig.cpu_write(0, (1).to_bytes(4, "little"))
    rig.instruction("load", 0, 4)                     # line 0 cached: 1
    rig.cpu_write(0, (2).to_bytes(4, "little"))       # the CPU updates the input
    res = cp_run(rig, P.Pm4Ib().acquire_mem(P.ACQUIRE_INV))
    assert res.status == "ok" and res.counters == {"l2_invalidations": 1, "l2_writebacks": 0}
    rig.model.sync(INV)
    assert rig.instruction("load", 0, 4).vgprs[4][0] == 2
    rig.check()


def test_cache_bits_do_nothing_without_the_model(impl):
    rig = Rig(_core.ComputeEngine if impl == "core" else cu_ref.ComputeEngine,
              _core.PageTable if impl == "core" else ref.PageTable)
    rig.l2 = None
    res = cp_run(rig, store_kernel_ib(rig, 0).acquire_mem(P.ACQUIRE_WB_INV))
    assert res.status == "ok"
    assert list(rig.u32(0, 32)) == list(range(5, 37))    # coherent: no release needed
    assert not any(name.startswith("l2_") for name in res.counters)


def test_cache_action_encodings_are_amdgpus():
    # gfx_v9_0_ring_emit_fence's dw1 (soc15d.h EOP_* | EVENT_TYPE | EVENT_INDEX(5))
    assert P.RELEASE_WB_INV | P.EVENT_CACHE_FLUSH_AND_INV_TS | 5 << 8 == 0x238514
    assert P.RELEASE_WB == 1 << 15 | 1 << 19
    assert P.release_mem_l2_actions(P.RELEASE_WB_INV) == WB_INV
    assert P.release_mem_l2_actions(P.RELEASE_WB) == WB
    assert P.release_mem_l2_actions(P.EOP_TC_ACTION_EN) == INV
    # gfx_v9_0_emit_mem_sync's CP_COHER_CNTL: SH_ICACHE | SH_KCACHE | TC | TCL1 | TC_WB
    assert P.ACQUIRE_WB_INV == 0x28C40000
    assert P.acquire_mem_l2_actions(P.ACQUIRE_WB_INV) == WB_INV
    assert P.acquire_mem_l2_actions(P.ACQUIRE_INV) == INV
    assert P.acquire_mem_l2_actions(P.COHER_SH_ICACHE_ACTION_ENA) == NONE
    text = "\n".join(P.disasm_pm4(P.Pm4Ib().release_mem(0x1000, 1, cache=P.RELEASE_WB)
                                  .acquire_mem(P.ACQUIRE_INV).dwords))
    assert "l2=wb " in text and "l2=inv " in text


# -- the executors' differential, with the model on ------------------------------------------
from .isa_gen import random_program  # noqa: E402
from .test_cu_differential import ORDER_SENSITIVE, SAMPLE_RUNS  # noqa: E402


def l2_same(run, lines: int):
    """run(rig) on both executors, each with an L2 of `lines` lines: equal results,
    memory and cache (lines, counters) before and after a write-back; after it the
    memory is what the same run leaves without a cache."""
    out = []
    for impl in ("ref", "core"):
        rig = CachedRig(impl, lines)
        r = run(rig)
        before = rig.mem.tobytes()
        cache = [(rig.where(k), d, m) for k, d, m in rig.l2.lines()], rig.l2.counters()
        rig.l2.sync(WB_INV)
        out.append((r, before, cache, rig.mem.tobytes()))
    (r_ref, before_ref, cache_ref, after_ref), (r_core, before_core, cache_core, after_core) = out
    assert {k: v for k, v in r_core.counters.items() if not k.startswith(("tlb_", "pt_"))} == \
        {k: v for k, v in r_ref.counters.items() if not k.startswith(("tlb_", "pt_"))}
    r_core.counters = r_ref.counters = {}
    assert r_core == r_ref
    assert before_core == before_ref and cache_core == cache_ref and after_core == after_ref
    plain = Rig(cu_ref.ComputeEngine, ref.PageTable)
    run(plain)
    assert after_ref == plain.mem.tobytes()
    return r_ref


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_through_the_l2(seed):
    """isa_gen's programs (32- and 64-bit loads, stores, atomics, scalar loads) through
    a cache of 1 to 64 lines on both executors."""
    prog = random_program(seed, wide=seed % 2 == 1)
    r = l2_same(lambda rig: rig.run_program(prog), lines=[1, 4, 64][seed % 3])
    assert r.status == "ok"


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_sample_kernels_through_the_l2(name):
    l2_same(SAMPLE_RUNS[name], lines=16)


@pytest.mark.parametrize("name", sorted(set(SAMPLE_RUNS) - ORDER_SENSITIVE))
def test_two_worker_threads_share_the_l2(name):
    """The core's two threads take the cache's lock per instruction: a race-free
    kernel leaves, once written back, the memory it leaves without a cache. Not the
    order-sensitive ones (float atomic sums across workgroups round differently in
    another order: test_cu_differential.ORDER_SENSITIVE)."""
    rig = CachedRig("core", lines=8, threads=2)
    assert SAMPLE_RUNS[name](rig).status == "ok"
    rig.l2.sync(WB_INV)
    plain = Rig(cu_ref.ComputeEngine, ref.PageTable)
    SAMPLE_RUNS[name](plain)
    assert rig.mem.tobytes() == plain.mem.tobytes()


@pytest.mark.parametrize("name", ["vector_add", "matmul_tiled"])
def test_preempted_dispatch_through_the_l2(impl, name):
    """A dispatch preempted (docs/preemption.md) and resumed keeps going through the
    same L2: once written back, memory is the unpreempted run's, and the parts'
    counters add up to the same requests."""
    from kmd.hw import compute
    from .preempting import Preempting
    whole = CachedRig(impl)
    r0 = SAMPLE_RUNS[name](whole)
    cut = CachedRig(impl)
    cut.engine = Preempting(cut.engine, [5, 60, 0, 333], np.zeros(compute.csa_bytes(2), np.uint8))
    r1 = SAMPLE_RUNS[name](cut)
    assert r0.status == r1.status == "ok" and len(cut.engine.parts) >= 3
    for name_ in ("l2_hits", "l2_misses"):
        assert sum(p.counters[name_] for p in cut.engine.parts) == r0.counters[name_]
    for rig in (whole, cut):
        rig.l2.sync(WB_INV)
    assert cut.mem.tobytes() == whole.mem.tobytes()
