"""(g) umd: compiled kernels, the kernel compiler and copies, each against numpy.

All through the mount, in a client process that uses umd as a program would, with
VGPU_CACHE_DIR an empty temporary directory:

- *saxpy*: ``y = a*x + y`` over 16M floats (1M in quick mode), a @umd.kernel launched
  on device arrays, timed from the launch to the end of ``synchronize()``; against
  numpy ``a * x + y`` on the host arrays in the same process. The GPU result is checked
  equal to numpy's (every float op is correctly rounded, docs/isa.md 3).
- *matmul*: 512x512 @ 512x512 float32 (128 in quick mode), the 16x16 shared-memory
  tiled kernel of samples/umd_matmul.py, launch + synchronize; against numpy ``@``
  (BLAS). Checked with allclose.
- *compile*: saxpy and matmul compiled (``umd.compiler.compile_kernel``): *cold* is the
  first compile in the fresh client process with the cache empty (with whatever a
  process pays once); the median of further cold compiles after emptying the cache
  dir is in the note; *cached* is a compile that finds the kernel on
  disk (the second compile, as a second process running the program would).
- *instructions*: the same two kernels dispatched once more straight on the emulated
  compute unit (kmd.hw._core, no mount, in the client after its timed runs), at the
  same sizes: the engine's count of wave instructions issued, times the 32 lanes of
  a wave, per multiply-add of the matmul and per element of saxpy (what the engine
  pays for: an instruction skipped over by EXEC = 0 costs as much as a full one),
  and, from the disassembly, the instructions per multiply-add of the innermost loop
  that multiplies (its body and back branch over its v_mul_f32 count).
- *memcpy*: 64 MiB (8 MiB in quick mode) host -> device (``memcpy_htod`` +
  ``synchronize``) and device -> host (``memcpy_dtoh``), against numpy ``copyto`` of
  the same bytes between host arrays. The same buffers every round, so after the
  warm-up the device block's CPU map has its pages (a fresh block's first copy pays
  a page fault per 4 KiB page, docs/umd.md).

Runs alternate (ours, numpy, ours, ...) after a warm-up; each figure is the median.

The client runs with ``OPENBLAS_THREAD_TIMEOUT=4``: after each ``a @ b`` OpenBLAS's
worker threads otherwise busy-wait for about 2^28 cycles (0.1 s) before they sleep, so
on a 2-core machine the umd launch that follows ran with both cores taken by the
client's idle BLAS threads while the daemon's compute-unit threads waited for them
(matmul 125-150 ms instead of 96 ms, docs/bench.md). With the timeout they
sleep at once; numpy's own ``@`` measured the same either way (1.5-1.8 ms).

    python3 -m bench.umd        # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import util

import umd

# The kernels are the samples' own, so the figures describe the code users read.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
from umd_matmul import TILE, matmul  # noqa: E402
from umd_saxpy import saxpy  # noqa: E402


def _sizes(quick: bool) -> dict[str, int]:
    return {"saxpy": 1 << (20 if quick else 24), "matmul": 128 if quick else 512,
            "copy": (8 if quick else 64) * util.MiB}


def _compile_times(reps: int) -> dict[str, float]:
    from umd.compiler import cache, compile_kernel

    def compile_all():
        for k in (saxpy, matmul):
            compile_kernel(k.fn, k.options)

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def clear_cache():
        for f in cache.cache_dir().glob("*"):
            f.unlink()

    first = timed(compile_all)                 # fresh process, empty cache
    cold, cached = [], []
    for _ in range(reps):
        cached.append(timed(compile_all))      # the kernels are on disk
        clear_cache()
        cold.append(timed(compile_all))
    return {"cold_first": first, "cold": util.median(cold), "cached": util.median(cached)}


def _saxpy(n: int, reps: int) -> dict[str, float]:
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    a = np.float32(0.5)
    dx, dy = umd.to_device(x), umd.to_device(y)
    grid = (n + 255) // 256

    def launch():
        saxpy[grid, 256](n, a, dx, dy)
        umd.synchronize()

    # One launch checked against numpy, then the timed rounds (which keep updating dy).
    launch()
    if not np.array_equal(dy.copy_to_host(), a * x + y):
        raise RuntimeError("umd saxpy differs from numpy's a * x + y")
    return util.alternate(reps, {"umd": launch, "numpy": lambda: a * x + y})


def _matmul(size: int, reps: int) -> dict[str, float]:
    import numpy as np
    rng = np.random.default_rng(1)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    da, db, dc = umd.to_device(a), umd.to_device(b), umd.empty((size, size), np.float32)
    grid = (size + TILE - 1) // TILE

    def launch():
        matmul[(grid, grid), (TILE, TILE)](size, size, size, da, db, dc)
        umd.synchronize()

    t = util.alternate(reps, {"umd": launch, "numpy": lambda: a @ b})
    if not np.allclose(dc.copy_to_host(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4):
        raise RuntimeError("umd matmul differs from numpy's a @ b")
    return t


def _memcpy(nbytes: int, reps: int) -> dict[str, float]:
    import numpy as np
    src = np.full(nbytes, 7, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    d = umd.empty(nbytes, np.uint8)

    def h2d():
        umd.memcpy_htod(d.ptr, src)
        umd.synchronize()

    t = util.alternate(reps, {"h2d": h2d, "d2h": lambda: umd.memcpy_dtoh(dst, d.ptr),
                          "numpy": lambda: np.copyto(dst, src)})
    if not np.array_equal(dst, src):
        raise RuntimeError("memcpy D2H of the H2D copy differs from the source")
    return t


def _engine_dispatch(compiled, grid, block, args: list) -> tuple[object, list]:
    """Dispatch a CompiledKernel on a fresh kmd.hw._core compute unit, arrays and
    kernargs mapped in one page table as umd.launch lays them out; -> (ComputeResult,
    the arrays as the kernel left them)."""
    import struct

    import numpy as np

    from kmd.hw import _core
    from kmd.hw.ih import InterruptRing
    from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE
    from vgpu.asm import CodeObject

    code_va, karg_va, mem_va = 0x10_0000, 0x20_0000, 0x100_0000
    obj = CodeObject.unpack(compiled.code_object)
    code = np.zeros((len(obj.code) + 4095) // 4096 * 4096, np.uint8)
    code[:len(obj.code)] = np.frombuffer(obj.code, np.uint8)
    karg = np.zeros(4096, np.uint8)
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    offsets, off = [], 0
    for a in arrays:
        offsets.append(off)
        off += (a.nbytes + 4095) // 4096 * 4096
    mem = np.zeros(max(off, 4096), np.uint8)
    for a, o in zip(arrays, offsets):
        mem[o:o + a.nbytes] = a.view(np.uint8).reshape(-1)
    pt = _core.PageTable()
    pt.map(code_va, code, 0, code.nbytes, PTE_READ | PTE_EXEC)
    pt.map(karg_va, karg, 0, 4096, PTE_READ)
    pt.map(mem_va, mem, 0, mem.nbytes, PTE_READ | PTE_WRITE)
    values = dict(zip([a.name for a in compiled.args if not a.name.startswith("__")], args))
    for k, axis in enumerate("xyz"):
        values[f"__grid_dim_{axis}"] = (tuple(grid) + (1, 1))[k]
        values[f"__block_dim_{axis}"] = (tuple(block) + (1, 1))[k]
    where = {id(a): mem_va + o for a, o in zip(arrays, offsets)}
    for spec in compiled.args:
        v = values[spec.name]
        raw = struct.pack("<Q", where[id(v)]) if spec.kind == "ptr" else \
            struct.pack("<f", v) if spec.kind == "f32" else struct.pack("<I", int(v) & 0xFFFFFFFF)
        karg[spec.offset:spec.offset + spec.size] = np.frombuffer(raw, np.uint8)
    engine = _core.ComputeEngine("comp_1.0.0", InterruptRing())
    r = engine.dispatch(pt, code_va + obj.entry, sgprs=obj.sgprs, vgprs=obj.vgprs,
                        lds_bytes=obj.lds_bytes, grid=(tuple(grid) + (1, 1))[:3],
                        block=(tuple(block) + (1, 1))[:3],
                        user_data=[karg_va & 0xFFFFFFFF, karg_va >> 32])
    if r.status != "ok":
        raise RuntimeError(f"{compiled.name} on the engine: {r}")
    return r, [mem[o:o + a.nbytes].view(a.dtype).reshape(a.shape) for a, o in zip(arrays, offsets)]


def inner_loop_per_multiply_add(asm: str) -> float:
    """Instructions per multiply (v_mul_f32, v_mad_f32, v_fma_f32) in the innermost loop
    that has one: its body from the loop label to the back branch (an s_branch, or the
    s_cbranch_scc1 of a rotated uniform loop), the branch included."""
    import re
    multiplies = ("v_mul_f32", "v_mad_f32", "v_fma_f32")
    bodies = []
    for top in re.findall(r"^(\.L\d+_loop):", asm, re.M):
        text = asm.split(top + ":\n", 1)[1].split(f"s_branch {top}\n", 1)[0].split(f"s_cbranch_scc1 {top}\n", 1)[0]
        body = [ln.split()[0] for ln in text.splitlines() if ln.startswith("    ") and ln.strip()]
        if any(m in body for m in multiplies):
            bodies.append(body)
    body = min(bodies, key=len)
    return (len(body) + 1) / sum(body.count(m) for m in multiplies)


def instruction_counts(sizes: dict[str, int]) -> dict[str, float]:
    """Instructions (wave instructions x 32) per saxpy element and per matmul
    multiply-add (engine count), and the matmul's inner-loop instructions per
    multiply-add (disassembly)."""
    import numpy as np

    from umd.compiler import compile_kernel

    n, size = sizes["saxpy"], sizes["matmul"]
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = compile_kernel(saxpy.fn, saxpy.options)
    r, (_, got) = _engine_dispatch(c, ((n + 255) // 256,), (256,), [n, np.float32(0.5), x, y])
    if not np.array_equal(got, np.float32(0.5) * x + y):
        raise RuntimeError("saxpy on the engine differs from numpy's a * x + y")
    saxpy_lanes = r.instructions * 32 / n
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    c = compile_kernel(matmul.fn, matmul.options)
    grid = (size + TILE - 1) // TILE
    r, (_, _, got) = _engine_dispatch(c, (grid, grid), (TILE, TILE),
                                      [size, size, size, a, b, np.zeros((size, size), np.float32)])
    if not np.allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4):
        raise RuntimeError("matmul on the engine differs from numpy's a @ b")
    return {"saxpy_per_element": saxpy_lanes, "matmul_per_madd": r.instructions * 32 / size ** 3,
            "matmul_inner_per_madd": inner_loop_per_multiply_add(c.asm_text)}


def client(mount: str) -> None:
    quick = util.quick()
    sizes = _sizes(quick)
    umd.set_device(mount)
    r = {"sizes": sizes, "compile": _compile_times(2 if quick else 5)}
    r["saxpy"] = _saxpy(sizes["saxpy"], 2 if quick else 7)
    r["matmul"] = _matmul(sizes["matmul"], 3)
    r["memcpy"] = _memcpy(sizes["copy"], 2 if quick else 5)
    umd.get_device().close()
    r["instructions"] = instruction_counts(sizes)
    print(json.dumps(r), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        cache_dir = tempfile.mkdtemp(prefix="vgpu-bench-cache-")
        stack.callback(shutil.rmtree, cache_dir, True)
        return util.client_json("bench.umd", vgpu_mount, extra_env={
            "VGPU_CACHE_DIR": cache_dir, "OPENBLAS_THREAD_TIMEOUT": "4"})


def report(r: dict) -> list[tuple[str, str, str]]:
    s, c = r["sizes"], r["compile"]
    n, size, nbytes = s["saxpy"], s["matmul"], s["copy"]
    sx, mm, cp, ic = r["saxpy"], r["matmul"], r["memcpy"], r["instructions"]
    flops = 2 * size ** 3

    def mibs(t: float) -> str:
        return f"{nbytes / t / util.MiB:.0f} MiB/s"

    return [
        ("saxpy, umd kernel", f"{sx['umd'] * 1e3:.1f} ms",
         f"{n >> 20}M floats, launch + synchronize; umd / numpy {sx['umd'] / sx['numpy']:.2f}x"),
        ("saxpy, numpy a * x + y", f"{sx['numpy'] * 1e3:.1f} ms", ""),
        ("matmul, umd kernel (16x16 tiles)", f"{mm['umd'] * 1e3:.0f} ms",
         f"{size}x{size}, {flops / mm['umd'] / 1e9:.2f} GFLOP/s; umd / numpy {mm['umd'] / mm['numpy']:.1f}x"),
        ("matmul, numpy @", f"{mm['numpy'] * 1e3:.2f} ms", f"{flops / mm['numpy'] / 1e9:.1f} GFLOP/s"),
        ("matmul, instructions per multiply-add", f"{ic['matmul_per_madd']:.2f}",
         f"wave instructions x 32 / {size}^3 (engine count); inner loop "
         f"{ic['matmul_inner_per_madd']:.2f} (disassembly)"),
        ("saxpy, instructions per element", f"{ic['saxpy_per_element']:.2f}",
         "wave instructions x 32 / n (engine count)"),
        ("compile saxpy + matmul, cold", f"{c['cold_first'] * 1e3:.1f} ms",
         f"fresh process, empty cache; {c['cold'] * 1e3:.1f} ms after clearing the cache"),
        ("compile saxpy + matmul, cached", f"{c['cached'] * 1e3:.2f} ms",
         f"from disk; cold / cached {c['cold'] / c['cached']:.0f}x"),
        ("memcpy H2D, umd", mibs(cp["h2d"]),
         f"{nbytes >> 20} MiB, + synchronize; {cp['numpy'] / cp['h2d']:.2f}x numpy's copy"),
        ("memcpy D2H, umd", mibs(cp["d2h"]), f"{cp['numpy'] / cp['d2h']:.2f}x numpy's copy"),
        ("memcpy, numpy copyto", mibs(cp["numpy"]), "host to host"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2])
    else:
        for row in report(run()):
            print("  ".join(row))
