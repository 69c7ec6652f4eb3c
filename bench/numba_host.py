"""(k) umd's Numba host helpers: reduce and vectorize against numpy, and the fixed cost
of a launch.

All through the mount, in a client process that uses umd as a program would, with
VGPU_CACHE_DIR an empty temporary directory (the kernels are compiled in the
warm-up round):

- *reduce*: ``@umd.reduce`` of ``a + b`` over 16M float32 (1M in quick mode) on a
  DeviceArray, the call to its numpy-scalar result (two generated kernels, then a
  4-byte copy back); against ``numpy.sum`` of the host array. Integer-valued floats,
  so both sums are exact and the results are checked equal.
- *vectorize*: ``@umd.vectorize(['float32(float32, float32)'])`` of ``2 * x * y + x``
  over 16M floats on DeviceArrays, the call + ``synchronize()`` (the result stays on
  the device, as Numba's); against the numpy expression on the host arrays. Checked
  equal (each float op is correctly rounded on both sides, docs/isa.md 3).
- *launch cost*: a one-wave kernel (1 workgroup of 32 threads that writes one
  element) launched with ``k[1, 32](out)`` then ``umd.synchronize()``, against a NOP
  submission in the same process (an SDMA NOP IB through libvgpu, ``cs_submit`` then
  WAIT_CS: section (b)'s latency): the difference is what umd and the compute ring add
  to the bare submission.

Runs alternate (ours, numpy, ...) after the warm-up; each figure is the median.

    python3 -m bench.numba_host        # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile

from . import util


def _sizes(quick: bool) -> dict[str, int]:
    return {"reduce": 1 << (20 if quick else 24), "vectorize": 1 << (20 if quick else 24)}


def _reduce(n: int, reps: int) -> dict[str, float]:
    import numpy as np

    import umd

    @umd.reduce
    def sum_reduce(a, b):
        return a + b

    x = np.random.default_rng(0).integers(-8, 8, n).astype(np.float32)
    dx = umd.to_device(x)
    if sum_reduce(dx) != x.sum():
        raise RuntimeError("umd.reduce differs from numpy.sum")
    return util.alternate(reps, {"umd": lambda: sum_reduce(dx), "numpy": lambda: np.sum(x)})


def _vectorize(n: int, reps: int) -> dict[str, float]:
    import numpy as np

    import umd

    @umd.vectorize(["float32(float32, float32)"], target="cuda")
    def fused(x, y):
        return 2 * x * y + x

    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, n), dtype=np.float32)
    dx, dy = umd.to_device(x), umd.to_device(y)
    want = np.float32(2) * x * y + x
    if not np.array_equal(fused(dx, dy).copy_to_host(), want):
        raise RuntimeError("umd.vectorize differs from the numpy expression")

    def ours():
        fused(dx, dy)
        umd.synchronize()
    return util.alternate(reps, {"umd": ours, "numpy": lambda: np.float32(2) * x * y + x})


def _launch_cost(mount: str, reps: int) -> dict[str, float]:
    import libvgpu
    import numpy as np

    import umd
    from umd import i32

    from .cs_latency import NOP_IB

    @umd.jit
    def one_wave(out: i32[:]):
        if umd.grid(1) == 0:
            out[0] = 1

    out = umd.zeros(1, np.int32)

    def launch():
        one_wave[1, 32](out)
        umd.synchronize()

    with libvgpu.device_initialize(mount) as dev:
        gpu = util.Submitter(dev, NOP_IB)
        try:
            t = util.alternate(reps, {"launch": launch, "nop": lambda: gpu.wait(gpu.submit())})
        finally:
            gpu.close()
    if out.copy_to_host()[0] != 1:
        raise RuntimeError("the one-wave kernel did not run")
    return t


def client(mount: str) -> None:
    import umd
    quick = util.quick()
    sizes = _sizes(quick)
    umd.set_device(mount)
    r = {"sizes": sizes,
         "reduce": _reduce(sizes["reduce"], 2 if quick else 7),
         "vectorize": _vectorize(sizes["vectorize"], 2 if quick else 7),
         "launch": _launch_cost(mount, 20 if quick else 200)}
    umd.get_device().close()
    print(json.dumps(r), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        cache_dir = tempfile.mkdtemp(prefix="vgpu-bench-cache-")
        stack.callback(shutil.rmtree, cache_dir, True)
        return util.client_json("bench.numba_host", vgpu_mount, extra_env={"VGPU_CACHE_DIR": cache_dir})


def report(r: dict) -> list[tuple[str, str, str]]:
    s, red, vec, lc = r["sizes"], r["reduce"], r["vectorize"], r["launch"]
    return [
        ("reduce, umd.reduce", f"{red['umd'] * 1e3:.1f} ms",
         f"{s['reduce'] >> 20}M float32 on the device, to the result; umd / numpy "
         f"{red['umd'] / red['numpy']:.1f}x (target <= 3x)"),
        ("reduce, numpy.sum", f"{red['numpy'] * 1e3:.1f} ms", ""),
        ("vectorize, umd.vectorize", f"{vec['umd'] * 1e3:.1f} ms",
         f"{s['vectorize'] >> 20}M float32, 2 * x * y + x, + synchronize; umd / numpy "
         f"{vec['umd'] / vec['numpy']:.1f}x (target <= 2x)"),
        ("vectorize, numpy expression", f"{vec['numpy'] * 1e3:.1f} ms", ""),
        ("one-wave launch + synchronize", util.fmt_us(lc["launch"]),
         f"k[1, 32](out); NOP submission (CS -> WAIT_CS) {util.fmt_us(lc['nop'])}, "
         f"launch / NOP {lc['launch'] / lc['nop']:.1f}x"),
        ("NOP submission, same process", util.fmt_us(lc["nop"]), "section (b)'s latency"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2])
    else:
        for row in report(run()):
            print("  ".join(row))
