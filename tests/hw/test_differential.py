"""Differential test: random SDMA streams through _core and ref must agree byte for byte,
also when each is preempted at random packet boundaries and resumed (docs/preemption.md)."""
import random

import numpy as np
import pytest

from kmd.hw import _core, ref
from kmd.hw import sdma as S
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_READ, PTE_WRITE

RW = PTE_READ | PTE_WRITE
P = 4096
IB_VA = 0x7000_0000
# (va, pages, flags, arena page offset or None for a separate buffer).  BOs 0 and 1
# are views of one arena mapped back to back in *reverse* host order; BO 1 and 2 are
# adjacent in VA but apart in host memory; BO 3 is read-only; gaps are unmapped.
LAYOUT = [
    (0x1_0000_0000, 3, RW, 4),
    (0x1_0000_3000, 4, RW, 0),
    (0x1_0000_7000, 2, RW, None),
    (0x1_0001_0000, 3, PTE_READ, None),
    (0x2_0000_0000, 5, RW, None),
]
FENCE_VA = LAYOUT[4][0]


def build_vm(hw, seed):
    rng = np.random.default_rng(seed)
    arena = rng.integers(0, 256, 8 * P, dtype=np.uint8)
    pt, bufs = hw.PageTable(), [arena]
    for va, pages, flags, off in LAYOUT:
        if off is None:
            buf = rng.integers(0, 256, pages * P, dtype=np.uint8)
            bufs.append(buf)
            pt.map(va, buf, 0, pages * P, flags)
        else:
            pt.map(va, arena, off * P, pages * P, flags)
    ib = np.zeros(16 * P, np.uint8)
    bufs.append(ib)
    pt.map(IB_VA, ib, 0, ib.nbytes, PTE_READ)
    return pt, bufs


def rand_addr(rng, writable: bool, n: int) -> int:
    """Start of an n-byte access inside one BO; now and then one that runs off its end."""
    bos = [b for b in LAYOUT if (b[2] & PTE_WRITE or not writable) and b[1] * P >= n]
    va, pages, _, _ = rng.choice(bos)
    if rng.random() < 0.03:
        return va + rng.randrange(pages * P)
    return va + rng.randrange(pages * P - n + 1)


def random_stream(seed: int) -> list[int]:
    """A valid packet stream; about one in 40 packets is built to fault."""
    rng = random.Random(seed)
    ib = S.SdmaIb()
    fence = 0
    for _ in range(rng.randrange(1, 40)):
        kind = rng.choice(["write", "copy", "fill1", "fill4", "fence", "nop", "trap"])
        if rng.random() < 0.025:
            kind = rng.choice(["bad_op", "ro_write", "unmapped", "truncate"])
        if kind == "write":
            data = [rng.getrandbits(32) for _ in range(rng.randrange(1, 64))]
            ib.write_linear(rand_addr(rng, True, 4 * len(data)) & ~3, data)
        elif kind == "copy":
            n = rng.randrange(1, 3 * P)
            while True:    # overlapping copies are unspecified (docs/hw.md): avoid them
                src, dst = rand_addr(rng, False, n), rand_addr(rng, True, n)
                if src + n <= dst or dst + n <= src:
                    break
            ib.copy_linear(dst, src, n)
        elif kind in ("fill1", "fill4"):
            size = S.SDMA_FILLSIZE_BYTE if kind == "fill1" else S.SDMA_FILLSIZE_DWORD
            n = rng.randrange(1, 2 * P)
            ib.constant_fill(rand_addr(rng, True, n), rng.getrandbits(32), n, size)
        elif kind == "fence":
            fence += 1
            ib.fence(FENCE_VA + 4 * rng.randrange(16), fence)
        elif kind == "nop":
            n = rng.randrange(4)
            ib.raw(S.sdma_header(S.SDMA_OP_NOP, 0, n), *[rng.getrandbits(32) for _ in range(n)])
        elif kind == "trap":
            ib.trap(rng.getrandbits(28))
        elif kind == "bad_op":
            ib.raw(rng.choice([3, 4, 7, 9, 10, 12, 14, 15, 16, 0x7F]))
        elif kind == "ro_write":
            ib.fence(LAYOUT[3][0] + rng.randrange(LAYOUT[3][1] * P), 1)
        elif kind == "unmapped":
            ib.copy_linear(0x3_0000_0000 + rng.randrange(P), rand_addr(rng, False, 64), 64)
        else:
            ib.write_linear(rand_addr(rng, True, 16), [1, 2, 3, 4])
            ib.dwords = ib.dwords[:-rng.randrange(1, 4)]
            break
    return ib.dwords


def run_stream(hw, seed: int, dwords: list[int]):
    pt, bufs = build_vm(hw, seed)
    raw = np.array(dwords, np.uint32).view(np.uint8)
    bufs[-1][:raw.nbytes] = raw
    ih = InterruptRing()
    result = hw.SdmaEngine("sdma0", ih).run(pt, IB_VA, len(dwords), ctx_id=seed, ring_id=1)
    return result, ih.drain(), bufs


@pytest.mark.parametrize("block", range(8))
def test_core_matches_reference(block):
    statuses = set()
    for seed in range(block * 40, block * 40 + 40):     # 320 streams in all
        dwords = random_stream(seed)
        got, got_ih, got_mem = run_stream(_core, seed, dwords)
        want, want_ih, want_mem = run_stream(ref, seed, dwords)
        assert got == want, f"seed {seed}"
        assert got_ih == want_ih, f"seed {seed}"
        for i, (a, b) in enumerate(zip(got_mem, want_mem)):
            assert np.array_equal(a, b), f"seed {seed}: buffer {i} differs"
        statuses.add((want.status, want.reason))
    assert ("ok", None) in statuses and any(status == "fault" for status, _ in statuses)


def run_stream_preempted(hw, seed: int, dwords: list[int], points: list[int]):
    """run_stream, preempted by the engine's trigger at `points` (one part each) and
    resumed until it ends: (final result, summed counters, IH entries, buffers)."""
    pt, bufs = build_vm(hw, seed)
    raw = np.array(dwords, np.uint32).view(np.uint8)
    bufs[-1][:raw.nbytes] = raw
    ih = InterruptRing()
    engine, parts, resume = hw.SdmaEngine("sdma0", ih), [], None
    for n in points + [None]:
        engine.preempt_after(n)
        parts.append(engine.run(pt, IB_VA, len(dwords), ctx_id=seed, ring_id=1, resume=resume))
        if parts[-1].status != "preempted":
            break
        resume = parts[-1].resume
    while parts[-1].status == "preempted":
        parts.append(engine.run(pt, IB_VA, len(dwords), ctx_id=seed, ring_id=1,
                                resume=parts[-1].resume))
    summed = {name: sum(getattr(p, name) for p in parts)
              for name in ("packets", "bytes_moved", "bytes_read", "bytes_written", "pt_walks")}
    return parts, summed, ih.drain(), bufs


@pytest.mark.parametrize("block", range(4))
def test_preempted_streams_match(block):
    """Each engine preempted at one to three random packet boundaries and resumed: the
    memory, IH entries, final status and summed counters of the unpreempted run."""
    preempted = 0
    for seed in range(block * 40, block * 40 + 40):     # 160 streams
        dwords = random_stream(seed)
        want, want_ih, want_mem = run_stream(ref, seed, dwords)
        rng = random.Random(seed)
        points = [rng.randrange(want.packets + 2) for _ in range(rng.randint(1, 3))]
        for hw in (_core, ref):
            parts, summed, got_ih, got_mem = run_stream_preempted(hw, seed, dwords, points)
            got = parts[-1]
            assert (got.status, got.fault, got.reason, got.packet_offset, got.opcode) == \
                (want.status, want.fault, want.reason, want.packet_offset, want.opcode), f"seed {seed}"
            assert summed == {name: getattr(want, name) for name in summed}, f"seed {seed}"
            assert got_ih == want_ih, f"seed {seed}"
            for i, (a, b) in enumerate(zip(got_mem, want_mem)):
                assert np.array_equal(a, b), f"seed {seed}: buffer {i} differs"
            preempted += len(parts) > 1
    assert preempted > 50           # of 80 runs: most streams are preempted at least once
