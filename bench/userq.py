"""(l) user-mode queues against CS, in the same client process (docs/userq.md).

- NOP latency: one SDMA NOP written to an SDMA user queue, wptr published, the
  doorbell rung and FUTEX_WAKEd, then FUTEX_WAIT until the queue's rptr passes it;
  the median of one at a time. Beside it the same NOP through CS + WAIT_CS
  (libvgpu's prebuilt-free path, as (b) measures it) and their ratio.
- Throughput: N NOPs committed back to back on the queue, one wait for the last.
- SDMA CONSTANT_FILL and COPY_LINEAR of 64 MiB through the queue against numpy's
  fill and copy of the same size, as ratios (section (c) does the same through CS).
- umd: TINY back-to-back tiny kernels (one wave each) on a umd stream of user queues
  and on a CS stream (``umd.Stream(userq=False)``, what VGPU_USERQ=0 gives) in one
  client process, one synchronize after the last: launches/s both ways and their
  ratio; and the median of one small launch + synchronize both ways (the fixed cost).

    python3 -m bench.userq            # mounts a vgpu itself
"""
from __future__ import annotations

import contextlib
import sys
import time

from . import util

BIG = 64 * util.MiB


def client(mount: str, rounds: int) -> None:
    """Client process: prints JSON {uq, cs: [seconds per pair], uq_rate, fill, copy,
    np_fill, np_copy: seconds}."""
    import json

    import libvgpu
    from libvgpu.userq import UserQueue
    from vgpu import uapi
    out = {}
    with libvgpu.device_initialize(mount) as dev, contextlib.ExitStack() as stack:
        def alloc(size: int, domain: int):
            bo = stack.enter_context(libvgpu.bo_alloc(dev, size, 4096, domain))
            va = stack.enter_context(libvgpu.va_range_alloc(dev, size, 1 << 21))
            libvgpu.bo_va_op(bo, 0, size, va.address)
            return bo, va.address

        q = stack.enter_context(UserQueue(dev, uapi.AMDGPU_HW_IP_DMA))
        nop = libvgpu.SdmaIb().nop().dwords
        q.wait(q.submit(nop))
        uq = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            q.wait(q.submit(nop))
            uq.append(time.perf_counter() - t0)
        gpu = util.Submitter(dev, (0).to_bytes(4, "little"), [])
        stack.callback(gpu.close)
        cs = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            gpu.wait(gpu.submit())
            cs.append(time.perf_counter() - t0)
        n = rounds * 5
        t0 = time.perf_counter()
        for _ in range(n):
            q.write(nop)
        q.wait(q.commit())
        out["uq_rate"] = n / (time.perf_counter() - t0)
        (_, src), (_, dst) = alloc(BIG, uapi.AMDGPU_GEM_DOMAIN_VRAM), alloc(BIG, uapi.AMDGPU_GEM_DOMAIN_VRAM)
        fill, copy = libvgpu.SdmaIb(), libvgpu.SdmaIb()
        for off in range(0, BIG, 4 * util.MiB):
            fill.constant_fill(dst + off, 0x5A5A5A5A, 4 * util.MiB)
            copy.copy_linear(dst + off, src + off, 4 * util.MiB)
        reps = 2 if util.quick() else 5
        # numpy's fill and copy as section (c) measures them (its _numpy_cases), the
        # queue's and numpy's runs alternated so that a drift of the machine hits both.
        from .sdma_bandwidth import _numpy_cases
        fill_dw, copy_dw = fill.dwords, copy.dwords
        out.update(util.alternate(reps, {"fill": lambda: q.wait(q.submit(fill_dw)),
                                         "copy": lambda: q.wait(q.submit(copy_dw)), **_numpy_cases()}))
        out["uq"], out["cs"] = uq, cs
    print(json.dumps(out))


TINY = 10_000


def _tiny_kernel():
    import umd
    from umd import i32

    @umd.kernel
    def bump(x: i32[:], n: i32):
        i = umd.grid(1)
        if i < n:
            x[i] += 1
    return bump


def umd_client(mount: str, count: int, rounds: int) -> None:
    """Client process: prints JSON {uq_rate, cs_rate: launches/s; uq_fixed, cs_fixed:
    seconds of one launch + synchronize (median)} for one-wave kernels."""
    import json
    import os

    import numpy as np
    os.environ["VGPU_MOUNT"] = mount
    import umd
    bump = _tiny_kernel()
    out = {}
    x = umd.zeros(32, np.int32)
    for name, s in (("uq", umd.Stream()), ("cs", umd.Stream(userq=False))):
        if name == "uq" and type(s).__name__ != "UserqStream":
            raise SystemExit("the device's umd streams do not run on user queues")
        bump[1, 32, s](x, 32)
        s.synchronize()
        t0 = time.perf_counter()
        for _ in range(count):
            bump[1, 32, s](x, 32)
        s.synchronize()
        out[f"{name}_rate"] = count / (time.perf_counter() - t0)
        t = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            bump[1, 32, s](x, 32)
            s.synchronize()
            t.append(time.perf_counter() - t0)
        out[f"{name}_fixed"] = util.median(t)
    if not (x.copy_to_host() == 2 * (1 + count + rounds)).all():
        raise SystemExit("the tiny kernels' counters are wrong")
    umd.close()
    print(json.dumps(out))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def c_client_nop(mount: str, count: int) -> float | None:
    """Seconds per NOP (submit -> rptr observed) of samples/c/userq_nop under `vgpu
    run`: the queue's latency without a Python client's own cost. None when the
    sample is not built (make build builds it)."""
    import re
    import subprocess
    program = util.ROOT / "samples" / "c" / "userq_nop"
    if not program.exists():
        return None
    r = subprocess.run([sys.executable, "-m", "vgpu_tools", "run", "--mount", mount, "--", str(program),
                        "--count", str(count)], capture_output=True, text=True, env=util.env(),
                       cwd=str(util.ROOT), timeout=300)
    m = re.search(r"NOPs: ([\d.]+) us each", r.stdout)
    return float(m.group(1)) * 1e-6 if r.returncode == 0 and m else None


def run(vgpu_mount: str | None = None) -> dict:
    rounds = 50 if util.quick() else 1000
    with contextlib.ExitStack() as stack:
        if vgpu_mount is None:
            vgpu_mount = stack.enter_context(util.vgpu_mount())
        r = util.client_json("bench.userq", vgpu_mount, rounds)
        tiny = 1000 if util.quick() else TINY
        r["umd"] = util.client_json("bench.userq", "umd", vgpu_mount, tiny, 50 if util.quick() else 200)
        r["umd"]["count"] = tiny
        r["c_nop"] = c_client_nop(vgpu_mount, 500 if util.quick() else 5000)
    r["uq_median"], r["cs_median"] = util.median(r.pop("uq")), util.median(r.pop("cs"))
    r["rounds"] = rounds
    return r


def report(r: dict) -> list[tuple[str, str, str]]:
    u = r["umd"]
    return [
        ("NOP submit -> rptr observed (SDMA user queue)", util.fmt_us(r["uq_median"]),
         f"median of {r['rounds']}, libvgpu's Python UserQueue"),
        ("NOP submit -> rptr observed, C client", util.fmt_us(r["c_nop"]) if r.get("c_nop") else "not built",
         "samples/c/userq_nop under vgpu run: stores and futex calls; target <= 30 µs"),
        ("NOP CS -> WAIT_CS (same process)", util.fmt_us(r["cs_median"]),
         f"user queue {r['cs_median'] / r['uq_median']:.1f}x faster"),
        ("NOPs back to back through the queue", f"{r['uq_rate']:,.0f}/s", "one wait for the last"),
        ("CONSTANT_FILL 64 MiB via user queue", f"{BIG / r['fill'] / 1e9:.2f} GB/s",
         f"{r['np_fill'] / r['fill']:.2f}x numpy's fill (target >= 0.9x)"),
        ("COPY_LINEAR 64 MiB via user queue", f"{BIG / r['copy'] / 1e9:.2f} GB/s",
         f"{r['np_copy'] / r['copy']:.2f}x numpy's copy (target >= 1.1x)"),
        (f"umd: {u['count']:,} tiny kernels, user queues", f"{u['uq_rate']:,.0f}/s",
         f"{u['uq_rate'] / u['cs_rate']:.2f}x the CS path's {u['cs_rate']:,.0f}/s (VGPU_USERQ=0; target >= 10x)"),
        ("umd: small launch + synchronize, user queues", util.fmt_us(u["uq_fixed"]),
         f"CS path {util.fmt_us(u['cs_fixed'])}: {u['cs_fixed'] / u['uq_fixed']:.1f}x faster"),
    ]


if __name__ == "__main__":
    if sys.argv[1:3] == ["--client", "umd"]:
        umd_client(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    else:
        for row in report(run()):
            print("  ".join(row))
