"""y = a*x + y with a @umd.kernel, on the default stream and on a second one.

The kernel is Python compiled to vISA on its first launch (docs/umd-compiler.md) and
cached on disk. The first saxpy runs on the default stream; the second, on a
stream of its own, is timed with two Events (GPU timestamps). numpy checks both.

Tolerance: exact. The kernel computes fl(fl(a*x) + y) with one v_mul_f32 and one
v_add_f32, each correctly rounded (round to nearest even, docs/isa.md 3; the compiler
fuses nothing), which is what numpy does for float32 `a * x + y`. So the result
must be bit-identical (rtol 0).

    python samples/umd_saxpy.py --device /tmp/vgpu [--n 1000000]
"""
import argparse

import numpy as np

import umd
from session import add_device_argument
from umd import Ptr, f32, i32
from vgpu.errors import exit_main

BLOCK = 256


@umd.kernel
def saxpy(n: i32, a: f32, x: Ptr[f32], y: Ptr[f32]):
    i = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def check(name: str, got: np.ndarray, want: np.ndarray) -> bool:
    bad = np.flatnonzero(got != want)
    if bad.size:
        i = bad[0]
        print(f"  check {name}: {bad.size} of {want.size} differ, first [{i}] = {got[i]} (want {want[i]})")
        return False
    print(f"  check {name}: all {want.size} elements equal numpy's a * x + y")
    return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p, default="umd's current device, $VGPU_MOUNT or /tmp/vgpu")
    p.add_argument("--n", type=int, default=1_000_000, help="elements (default 1000000)")
    args = p.parse_args()
    n = args.n
    dev = umd.set_device(args.device) if args.device else umd.get_device()
    print(f"device {dev.mount}: {dev.name}")

    rng = np.random.default_rng(1)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    dx, dy = umd.to_device(x), umd.to_device(y)
    grid = (n + BLOCK - 1) // BLOCK

    a = np.float32(2.0)
    print(f"saxpy[{grid}, {BLOCK}](n={n}, a={a}) on the default stream")
    saxpy[grid, BLOCK](n, a, dx, dy)
    c = saxpy.compile()
    print(f"  kernel {c.name}: {len(c.code_object)} bytes of code object, {c.kernarg_size} bytes of kernargs")
    y1 = dy.copy_to_host()
    ok = check("default stream", y1, a * x + y)

    b = np.float32(-0.5)
    stream = umd.Stream()
    start, end = umd.Event(), umd.Event()
    print(f"saxpy[{grid}, {BLOCK}, stream](n={n}, a={b}) on a second stream, between two events")
    start.record(stream)
    saxpy[grid, BLOCK, stream](n, b, dx, dy)
    end.record(stream)
    end.synchronize()
    ms = umd.elapsed_time(start, end)
    print(f"  elapsed_time: {ms:.2f} ms ({n / ms / 1e3:.1f} M elements/s)")
    ok = check("second stream", dy.copy_to_host(), b * x + y1) and ok

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
