"""Row-wise softmax with a @umd.kernel: one workgroup per row, reductions in shared memory.

y[r, j] = exp(x[r, j] - max_j x[r, j]) / sum_j exp(x[r, j] - max_j x[r, j])

Each of the 128 threads of a workgroup walks its row with a stride of 128 (any row
length works), keeping a partial maximum; the partials are reduced in a shared array
(halving the active threads at each step, syncthreads between steps). Subtracting the
maximum keeps exp() from overflowing (float32's exp overflows from 88.7 up; the last
test row is all 100.0). The same tree sums exp(x - max); a last pass writes the
quotients.

Tolerance: rtol 1e-5 against numpy in float64. v_exp_f32 is exp in double rounded to
float32 (docs/isa.md 3), so each term has a relative error of about u = 2^-24 plus
that of x - max (at most u * |x - max| <= 80 u here, absolute in the exponent); the
sum of n positive terms adds at most (n/128 + 7) u relative, the division u. That
is under 1e-5 for these rows; numpy's own float32 softmax has errors of this size.

    python samples/umd_softmax.py --device /tmp/vgpu [--rows 64] [--cols 1000]
"""
import argparse
import math

import numpy as np

import umd
from session import add_device_argument
from umd import Ptr, f32, i32
from vgpu.errors import exit_main

BLOCK = 128


@umd.kernel
def softmax_rows(n: i32, x: Ptr[f32], y: Ptr[f32]):
    red = umd.shared_array(f32, BLOCK)
    t = umd.thread_idx.x
    base = umd.block_idx.x * n

    m = -math.inf
    for j in range(t, n, BLOCK):
        m = umd.math.fmax(m, x[base + j])
    red[t] = m
    umd.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:
            red[t] = umd.math.fmax(red[t], red[t + s])
        umd.syncthreads()
        s //= 2
    row_max = red[0]
    umd.syncthreads()           # everyone has read red[0] before it is overwritten

    total = 0.0
    for j in range(t, n, BLOCK):
        total += umd.math.exp(x[base + j] - row_max)
    red[t] = total
    umd.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:
            red[t] += red[t + s]
        umd.syncthreads()
        s //= 2
    row_sum = red[0]

    for j in range(t, n, BLOCK):
        y[base + j] = umd.math.exp(x[base + j] - row_max) / row_sum


def softmax(dx: umd.DeviceArray, dy: umd.DeviceArray) -> None:
    """Launch softmax_rows: one workgroup of BLOCK threads per row of the 2-D dx."""
    rows, cols = dx.shape
    softmax_rows[rows, BLOCK](cols, dx, dy)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p, default="umd's current device, $VGPU_MOUNT or /tmp/vgpu")
    p.add_argument("--rows", type=int, default=64, help="rows (default 64)")
    p.add_argument("--cols", type=int, default=1000, help="row length (default 1000)")
    args = p.parse_args()
    dev = umd.set_device(args.device) if args.device else umd.get_device()
    print(f"device {dev.mount}: {dev.name}")

    rng = np.random.default_rng(3)
    x = rng.standard_normal((args.rows, args.cols), dtype=np.float32) * 4
    x[0] = rng.uniform(-40, 40, args.cols)   # exp(x - max) down to e^-80, still a normal float32
    x[-1, :] = 100.0             # equal entries: exactly 1/cols each; exp(100) alone is inf in float32
    dx, dy = umd.to_device(x), umd.empty(x.shape, np.float32)
    print(f"softmax over {args.rows} rows of {args.cols}: softmax_rows[{args.rows}, {BLOCK}]")
    softmax(dx, dy)
    y = dy.copy_to_host()

    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    rel = np.abs(y - want) / want
    print(f"  max relative error {rel.max():.3g} (row {np.unravel_index(rel.argmax(), rel.shape)[0]}); "
          f"rows sum to 1 within {np.abs(y.sum(axis=1, dtype=np.float64) - 1).max():.2g}")
    ok = bool(np.isfinite(y).all()) and bool((rel <= 1e-5).all())
    print(f"  check: {'all' if ok else 'NOT all'} {y.size} values within rtol 1e-5 of numpy (float64)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
