"""C = A @ B with a tiled @umd.kernel: 16x16 tiles of A and B staged in shared memory.

Each workgroup of 16x16 threads computes one 16x16 tile of C. For each step k0 along
K, every thread loads one element of A's tile and one of B's into shared arrays
(zero outside the matrices, so any M, N, K work), the workgroup meets at
syncthreads, and each thread accumulates its row of A's tile times its column of B's.
Two sizes run: multiples of 16, and a ragged one that exercises the edges.

Tolerance: each C element is a K-term dot product, accumulated in float32 one
correctly rounded v_mul_f32 and v_add_f32 at a time (docs/isa.md 3, no fused
multiply-add). Its rounding error is bounded by gamma_K * (|A| @ |B|), with
gamma_K = K*u / (1 - K*u) and u = 2^-24 (Higham, Accuracy and Stability of Numerical
Algorithms, 3.1). numpy's float32 `@` (BLAS: another summation order, FMA) has its
own error of the same size, so the check is against numpy in float64: |C - A @ B|
<= gamma_K * (|A| @ |B|) element by element. For K = 256 that is 1.5e-5 relative to
the magnitudes, well under the usual rtol 1e-4.

    python samples/umd_matmul.py --device /tmp/vgpu
"""
import argparse
import time

import numpy as np

import umd
from session import add_device_argument
from umd import Ptr, f32, i32
from vgpu.errors import exit_main

TILE = 16


@umd.kernel
def matmul(m: i32, n: i32, k: i32, a: Ptr[f32], b: Ptr[f32], c: Ptr[f32]):
    a_tile = umd.shared_array(f32, (TILE, TILE))
    b_tile = umd.shared_array(f32, (TILE, TILE))
    tx = umd.thread_idx.x
    ty = umd.thread_idx.y
    row = umd.block_idx.y * TILE + ty
    col = umd.block_idx.x * TILE + tx
    acc = 0.0
    for k0 in range(0, k, TILE):
        if row < m and k0 + tx < k:
            a_tile[ty, tx] = a[row * k + k0 + tx]
        else:
            a_tile[ty, tx] = 0.0
        if k0 + ty < k and col < n:
            b_tile[ty, tx] = b[(k0 + ty) * n + col]
        else:
            b_tile[ty, tx] = 0.0
        umd.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        umd.syncthreads()
    if row < m and col < n:
        c[row * n + col] = acc


def gpu_matmul(da: umd.DeviceArray, db: umd.DeviceArray, dc: umd.DeviceArray) -> None:
    """Launch matmul over C's tiles: grid (ceil(N/16), ceil(M/16)), 16x16 threads
    (umd_mlp.py's layers call it too)."""
    m, k = da.shape
    n = db.shape[1]
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    matmul[grid, (TILE, TILE)](m, n, k, da, db, dc)


def run_case(rng: np.random.Generator, m: int, n: int, k: int) -> bool:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    da, db, dc = umd.to_device(a), umd.to_device(b), umd.empty((m, n), np.float32)
    print(f"C[{m}x{n}] = A[{m}x{k}] @ B[{k}x{n}]: grid ({-(-n // TILE)}, {-(-m // TILE)}), "
          f"block ({TILE}, {TILE})")
    t0 = time.perf_counter()
    gpu_matmul(da, db, dc)
    c = dc.copy_to_host()
    dt = time.perf_counter() - t0
    print(f"  GPU: {dt * 1e3:.1f} ms, launch to result on the host ({2 * m * n * k / dt / 1e6:.0f} MFLOP/s)")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    u = 2.0 ** -24
    bound = k * u / (1 - k * u) * (np.abs(a64) @ np.abs(b64))
    err = np.abs(c - want)
    worst = float((err / bound).max())
    print(f"  max |C - A@B| = {err.max():.3g}; worst error / bound = {worst:.3f} (must be <= 1); "
          f"numpy float32 @ differs from float64 by up to {np.abs(a @ b - want).max():.3g}")
    ok = bool((err <= bound).all())
    print(f"  check: {'within' if ok else 'NOT within'} gamma_K * (|A| @ |B|), gamma_K = {k * u:.2g}")
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p, default="umd's current device, $VGPU_MOUNT or /tmp/vgpu")
    args = p.parse_args()
    dev = umd.set_device(args.device) if args.device else umd.get_device()
    print(f"device {dev.mount}: {dev.name}")
    t0 = time.perf_counter()
    compiled = matmul.compile()      # else the first launch compiles (or loads it from the cache)
    print(f"kernel {compiled.name}: compiled or loaded from the disk cache in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
    rng = np.random.default_rng(2)
    ok = run_case(rng, 128, 128, 256)          # whole tiles
    ok = run_case(rng, 100, 75, 130) and ok    # ragged edges in M, N and K
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
