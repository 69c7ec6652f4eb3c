"""Copy/fill bandwidth of the emulated hardware against numpy (docs/design.md section 9).

    python3 -m kmd.hw.bench        # prints MiB/s and ratios; no pass/fail

Two 64 MiB ranges of one 512 MiB arena ("VRAM") mapped into one VM, as in a
VRAM->VRAM SDMA copy inside a BO.  Best of N runs, ratios within one run.
"""
from __future__ import annotations

import time

import numpy as np

from kmd.hw import _core, ref
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_READ, PTE_WRITE
from kmd.hw.sdma import SDMA_COPY_COUNT_MASK, SdmaIb

MiB = 1 << 20
VA = 0x1_0000_0000
IB_VA = 0x8000_0000


def best(fn, reps: int = 10) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(size: int = 64 * MiB) -> None:
    arena = np.ones(512 * MiB, np.uint8)
    pt = _core.PageTable()
    pt.map(VA, arena, 0, arena.nbytes, PTE_READ | PTE_WRITE)
    src, dst = arena[:size], arena[256 * MiB:256 * MiB + size]

    chunk = SDMA_COPY_COUNT_MASK + 1            # one COPY_LINEAR moves at most 4 MiB
    ib = SdmaIb()
    for off in range(0, size, chunk):
        ib.copy_linear(VA + 256 * MiB + off, VA + off, min(chunk, size - off))
    ibbuf = np.frombuffer(ib.tobytes(), np.uint8).copy()
    pt.map(IB_VA, np.resize(ibbuf, (ibbuf.nbytes + 4095) // 4096 * 4096), 0,
           (ibbuf.nbytes + 4095) // 4096 * 4096, PTE_READ)
    engine = _core.SdmaEngine("sdma0", InterruptRing())

    cases = [
        ("PageTable.copy", lambda: pt.copy(VA + 256 * MiB, VA, size),
         lambda: dst.__setitem__(slice(None), src)),
        ("SDMA COPY_LINEAR", lambda: engine.run(pt, IB_VA, len(ib)),
         lambda: dst.__setitem__(slice(None), src)),
        ("fill dword", lambda: pt.fill(VA + 256 * MiB, 0x12345678, size, 4),
         lambda: dst.view(np.uint32).fill(0x12345678)),
        ("fill byte", lambda: pt.fill(VA + 256 * MiB, 0x5A, size, 1), lambda: dst.fill(0x5A)),
    ]
    print(f"{size // MiB} MiB VRAM->VRAM, best of 10")
    for name, ours, numpy_op in cases:
        a, b = best(ours), best(numpy_op)
        print(f"  {name:18s} vgpu {size / a / MiB:8.0f} MiB/s   numpy {size / b / MiB:8.0f} MiB/s"
              f"   ratio {b / a:.2f}")

    # The reference is for correctness, not speed: show by how much the core wins.
    small = 4 * MiB
    rpt = ref.PageTable()
    rpt.map(VA, arena, 0, 64 * MiB, PTE_READ | PTE_WRITE)
    a, b = best(lambda: pt.copy(VA + 32 * MiB, VA, small), 3), \
        best(lambda: rpt.copy(VA + 32 * MiB, VA, small), 3)
    print(f"  core vs ref copy of {small // MiB} MiB: {b / a:.0f}x")


if __name__ == "__main__":
    main()
