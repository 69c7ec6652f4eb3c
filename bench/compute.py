"""(f) Compute: vISA lane-instructions per second, and a 16M-float vector add against numpy.

Engine level (no FUSE, no KMD), in this process: a ``kmd.hw`` PageTable over numpy
buffers and a ComputeEngine, as the KMD's command processor uses them.

- *Lane-instructions/s*: ``samples/kernels/saxpy.s`` on the Cython core (two worker
  threads) and on the plain-Python reference (``kmd.hw.cu_ref``), each the
  dispatch's ``lane_instructions`` over its wall time; the reference gets a smaller grid
  (it is about three orders of magnitude slower), which does not change a per-lane rate.
- *Vector add*: ``samples/kernels/vector_add.s`` over 16M floats (262144 workgroups of
  64) on the core against numpy ``a + b`` on the same arrays, alternating (core, numpy,
  core, ...); each figure is the median run. The result is checked against numpy's.

    python3 -m bench.compute
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

from . import util

N_ADD = 16 << 20
KERNELS = Path(__file__).resolve().parents[1] / "samples" / "kernels"
CODE_VA, KARG_VA, DATA_VA = 0x10_0000, 0x20_0000, 1 << 32


class _Setup:
    """One VM: the kernel (R+X), its kernargs (R) and float arrays (RW) at 4 GiB steps."""

    def __init__(self, pt_cls, kernel: str, arrays, args: bytes) -> None:
        import numpy as np
        from kmd.hw import PTE_EXEC, PTE_READ, PTE_WRITE
        from vgpu.asm import assemble
        self.obj = assemble((KERNELS / f"{kernel}.s").read_text(), f"{kernel}.s")
        self.pt = pt_cls()
        self.code = np.zeros(4096, np.uint8)
        self.code[:len(self.obj.code)] = np.frombuffer(self.obj.code, np.uint8)
        self.karg = np.zeros(4096, np.uint8)
        self.karg[:len(args)] = np.frombuffer(args, np.uint8)
        self.pt.map(CODE_VA, self.code, 0, 4096, PTE_READ | PTE_EXEC)
        self.pt.map(KARG_VA, self.karg, 0, 4096, PTE_READ)
        for i, a in enumerate(arrays):
            self.pt.map(DATA_VA * (i + 1), a.view(np.uint8), 0, a.nbytes, PTE_READ | PTE_WRITE)

    def dispatch(self, engine, n: int):
        return engine.dispatch(self.pt, CODE_VA, sgprs=self.obj.sgprs, vgprs=self.obj.vgprs,
                               lds_bytes=0, grid=((n + 63) // 64, 1, 1), block=(64, 1, 1),
                               user_data=[KARG_VA, 0])


def _saxpy_rate(engine_cls, pt_cls, n: int, reps: int) -> float:
    """Lane-instructions per second of saxpy over n elements (median of reps)."""
    import numpy as np
    from kmd.hw import InterruptRing
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    setup = _Setup(pt_cls, "saxpy", [x, y], struct.pack("<QQfI", DATA_VA, 2 * DATA_VA, 0.5, n))
    engine = engine_cls("comp_1.0.0", InterruptRing())
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = setup.dispatch(engine, n)
        rates.append(r.lane_instructions / (time.perf_counter() - t0))
        assert r.status == "ok", r
    return util.median(rates)


def _vector_add(reps: int) -> dict[str, float]:
    import numpy as np
    from kmd.hw import InterruptRing, _core
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N_ADD, dtype=np.float32)
    b = rng.standard_normal(N_ADD, dtype=np.float32)
    c = np.zeros(N_ADD, np.float32)
    setup = _Setup(_core.PageTable, "vector_add", [a, b, c],
                   struct.pack("<QQQI", DATA_VA, 2 * DATA_VA, 3 * DATA_VA, N_ADD))
    engine = _core.ComputeEngine("comp_1.0.0", InterruptRing())
    ours, theirs = [], []
    result = None
    for _ in range(reps + 1):               # the first round warms both up
        t0 = time.perf_counter()
        r = setup.dispatch(engine, N_ADD)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = a + b
        theirs.append(time.perf_counter() - t0)
        assert r.status == "ok", r
    if not np.array_equal(c, result):
        raise RuntimeError("vector_add on the compute core differs from numpy's a + b")
    return {"core": util.median(ours[1:]), "numpy": util.median(theirs[1:]),
            "lane_instructions": r.lane_instructions}


def run(mount: str | None = None) -> dict:
    """The figures; `mount` is unused (engine level), kept for bench/__main__.py."""
    from kmd.hw import _core, cu_ref, ref
    quick = util.quick()
    reps = 3 if quick else 7
    return {
        "core_rate": _saxpy_rate(_core.ComputeEngine, _core.PageTable,
                                 1 << (18 if quick else 22), reps),
        "ref_rate": _saxpy_rate(cu_ref.ComputeEngine, ref.PageTable, 1 << (10 if quick else 12),
                                2 if quick else 3),
        "add": _vector_add(2 if quick else reps),
    }


def report(r: dict) -> list[tuple[str, str, str]]:
    add = r["add"]
    return [
        ("lane-instructions/s, Cython core (saxpy)", f"{r['core_rate'] / 1e6:.0f} M/s",
         "2 worker threads"),
        ("lane-instructions/s, reference (saxpy)", f"{r['ref_rate'] / 1e6:.3f} M/s",
         f"core / reference {r['core_rate'] / r['ref_rate']:.0f}x"),
        ("vector add 16M floats, Cython core", f"{add['core'] * 1e3:.1f} ms",
         f"{add['lane_instructions'] / add['core'] / 1e6:.0f} M lane-instructions/s"),
        ("vector add 16M floats, numpy a + b", f"{add['numpy'] * 1e3:.1f} ms",
         f"core / numpy {add['core'] / add['numpy']:.1f}x (target <= 5x)"),
    ]


if __name__ == "__main__":
    for row in report(run()):
        print("  ".join(row))
