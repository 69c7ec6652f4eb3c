"""(c) SDMA bandwidth: 64 MiB VRAM->VRAM COPY_LINEAR and CONSTANT_FILL against numpy.

End to end, through the mount: a client process allocates two 64 MiB VRAM BOs,
maps them at VAs and submits an IB of 16 COPY_LINEAR packets of 4 MiB (one packet
moves at most 4 MiB, docs/hw.md), or of 16 dword CONSTANT_FILLs, timing
``cs_submit`` + WAIT_CS. In the same process it times numpy on two 64 MiB uint8
arrays: ``dst[:] = src`` and ``dst.view(uint32).fill(v)``. Runs alternate (ours,
numpy, ours, numpy...); each figure is the median run.

Engine level (no FUSE, no KMD): the same IBs on ``kmd.hw`` directly, a PageTable
over one host arena and an SdmaEngine, as ``python3 -m kmd.hw.bench`` does, with
its own numpy figures from the same process.

    python3 -m bench.sdma_bandwidth        # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import json
import sys

from . import util

SIZE = 64 * util.MiB
PACKET = 4 * util.MiB  # COPY_LINEAR / CONSTANT_FILL count field: at most 4 MiB
FILL = 0x12345678


def copy_ib(dst: int, src: int) -> bytes:
    from libvgpu import SdmaIb
    ib = SdmaIb()
    for off in range(0, SIZE, PACKET):
        ib.copy_linear(dst + off, src + off, PACKET)
    return ib.tobytes()


def fill_ib(dst: int) -> bytes:
    from libvgpu import SdmaIb
    ib = SdmaIb()
    for off in range(0, SIZE, PACKET):
        ib.constant_fill(dst + off, FILL, PACKET)
    return ib.tobytes()


def _numpy_cases():
    import numpy as np
    src, dst = np.ones(SIZE, np.uint8), np.zeros(SIZE, np.uint8)
    return {"np_copy": lambda: dst.__setitem__(slice(None), src),
            "np_fill": lambda: dst.view(np.uint32).fill(FILL)}


def client_mount(mount: str, reps: int) -> dict[str, float]:
    """Through the mount: libvgpu, two VRAM BOs, submit + WAIT_CS timed here."""
    import libvgpu
    from vgpu import uapi
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        bos = [stack.enter_context(libvgpu.bo_alloc(dev, SIZE, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM))
               for _ in range(2)]
        # The BO VAs must be known to write the IBs: map them with a first Submitter.
        holder = util.Submitter(dev, (0).to_bytes(4, "little"), bos)
        stack.callback(holder.close)
        src, dst = holder.map(bos[0]), holder.map(bos[1])
        copy = util.Submitter(dev, copy_ib(dst, src), bos)
        stack.callback(copy.close)
        fill = util.Submitter(dev, fill_ib(dst), bos)
        stack.callback(fill.close)
        return util.alternate(reps, {"copy": lambda: copy.wait(copy.submit()),
                                 "fill": lambda: fill.wait(fill.submit()), **_numpy_cases()})


def client_engine(reps: int) -> dict[str, float]:
    """kmd.hw directly: one arena holding src, dst and the IBs, mapped at VA."""
    import numpy as np
    from kmd.hw import PTE_READ, PTE_WRITE, InterruptRing, PageTable, SdmaEngine
    va, ib_off = 1 << 32, 2 * SIZE
    arena = np.ones(2 * SIZE + 2 * 4096, np.uint8)
    pt = PageTable()
    pt.map(va, arena, 0, arena.nbytes, PTE_READ | PTE_WRITE)
    ibs = [copy_ib(va + SIZE, va), fill_ib(va + SIZE)]
    for i, ib in enumerate(ibs):
        arena[ib_off + i * 4096: ib_off + i * 4096 + len(ib)] = np.frombuffer(ib, np.uint8)
    engine = SdmaEngine("sdma0", InterruptRing())
    return util.alternate(reps, {
        "copy": lambda: engine.run(pt, va + ib_off, len(ibs[0]) // 4),
        "fill": lambda: engine.run(pt, va + ib_off + 4096, len(ibs[1]) // 4),
        **_numpy_cases()})


def client(mount: str, reps: int) -> None:
    print(json.dumps({"mount": client_mount(mount, reps), "engine": client_engine(reps)}), flush=True)


def run(vgpu_mount: str | None = None) -> dict:
    reps = 2 if util.quick() else 10
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        r = util.client_json("bench.sdma_bandwidth", vgpu_mount, reps)
    r["reps"] = reps
    return r


def report(r: dict) -> list[tuple[str, str, str]]:
    def mibs(t: float) -> float:
        return SIZE / t / util.MiB
    rows = []
    for level, label in (("mount", "through the mount"), ("engine", "engine (kmd.hw)")):
        t = r[level]
        rows += [
            (f"SDMA COPY_LINEAR 64 MiB, {label}", f"{mibs(t['copy']):.0f} MiB/s",
             f"numpy copy {mibs(t['np_copy']):.0f} MiB/s, ratio {t['np_copy'] / t['copy']:.2f}"
             + (" (target >= 1.0)" if level == "mount" else "")),
            (f"SDMA CONSTANT_FILL 64 MiB, {label}", f"{mibs(t['fill']):.0f} MiB/s",
             f"numpy fill {mibs(t['np_fill']):.0f} MiB/s, ratio {t['np_fill'] / t['fill']:.2f}"
             + (" (target >= 0.9)" if level == "mount" else "")),
        ]
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    else:
        for row in report(run()):
            print("  ".join(row))
