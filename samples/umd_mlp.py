"""Inference of a 2-layer MLP with @umd.kernel: dense + GELU, dense, softmax, argmax.

    h      = gelu(x @ W1 + b1)        matmul from samples/umd_matmul.py, then bias_act(..., GELU)
    logits = h @ W2 + b2              matmul, then bias_act(..., NONE)
    p      = softmax(logits)          softmax_rows from samples/umd_softmax.py
    class  = argmax(p)                on the host

The layers reuse the other samples' kernels. A library would fuse the bias and the
activation into the matmul's last step (its epilogue); umd kernels cannot call
functions (docs/umd-compiler.md 11), so fusing them here would mean a second copy of
the tiled loop. Instead one element-wise kernel, bias_act, follows each matmul.

The weights are fixed: drawn from a seeded generator (scaled by 1/sqrt(fan-in)), as
are the 256 inputs. GELU is the tanh form, 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715
v^3))), with umd.math.tanh. numpy runs the same network in float64.

Tolerance: probabilities within rtol 1e-4 (plus atol 1e-7 for the tiny ones) of numpy,
and the same class for every input. Every float32 operation on the GPU is correctly
rounded (docs/isa.md 3: v_add/v_mul/v_div_f32 and tanh/exp are the double results
rounded once), so the dense layers are off by at most gamma_K (|x| @ |W|) with
gamma_K = K * 2^-24, about 1e-5 of the magnitudes for K <= 128, and GELU adds a
few u (the bias add is the same rounded v_add_f32 whether fused or not). A logit
error d moves p_i by at most about 2 d p_i relative, so the probabilities are
expected within ~1e-5 relative; 1e-4 leaves a 10x margin.

    python samples/umd_mlp.py --device /tmp/vgpu
"""
import argparse

import numpy as np

import umd
from session import add_device_argument
from umd import Ptr, f32, i32
from umd_matmul import gpu_matmul
from umd_softmax import softmax
from vgpu.errors import exit_main

BLOCK = 64
NONE, GELU = 0, 1
SQRT_2_OVER_PI = 0.7978845608028654
IN, HIDDEN, OUT, BATCH = 64, 128, 10, 256


@umd.kernel
def bias_act(n: i32, y: Ptr[f32], bias: Ptr[f32], act: i32):
    """y[r, c] = act(y[r, c] + bias[c]) in place, for row r = block_idx.y of a matrix
    with n columns; one thread per element."""
    col = umd.block_idx.x * umd.block_dim.x + umd.thread_idx.x
    if col < n:
        i = umd.block_idx.y * n + col
        v = y[i] + bias[col]
        if act == GELU:
            v = 0.5 * v * (1.0 + umd.math.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
        y[i] = v


def layer(dx: umd.DeviceArray, dw: umd.DeviceArray, db: umd.DeviceArray, act: int) -> umd.DeviceArray:
    """act(x @ w + b): the tiled matmul, then bias_act over (ceil(n / BLOCK), m) workgroups."""
    m, n = dx.shape[0], dw.shape[1]
    dy = umd.empty((m, n), np.float32)
    gpu_matmul(dx, dw, dy)
    bias_act[((n + BLOCK - 1) // BLOCK, m), BLOCK](n, dy, db, act)
    return dy


def reference(x, w1, b1, w2, b2) -> np.ndarray:
    """The same network in float64 numpy."""
    x, w1, b1, w2, b2 = (t.astype(np.float64) for t in (x, w1, b1, w2, b2))
    z = x @ w1 + b1
    h = 0.5 * z * (1 + np.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z ** 3)))
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p, default="umd's current device, $VGPU_MOUNT or /tmp/vgpu")
    args = p.parse_args()
    dev = umd.set_device(args.device) if args.device else umd.get_device()
    print(f"device {dev.mount}: {dev.name}")

    rng = np.random.default_rng(2024)
    w1 = (rng.standard_normal((IN, HIDDEN)) / np.sqrt(IN)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, OUT)) / np.sqrt(HIDDEN)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(OUT)).astype(np.float32)
    x = rng.standard_normal((BATCH, IN), dtype=np.float32)
    print(f"MLP {IN} -> {HIDDEN} (GELU) -> {OUT} (softmax), batch {BATCH}, seeded weights")

    d_w1, d_b1, d_w2, d_b2, d_x = map(umd.to_device, (w1, b1, w2, b2, x))
    d_h = layer(d_x, d_w1, d_b1, GELU)
    d_logits = layer(d_h, d_w2, d_b2, NONE)
    d_p = umd.empty(d_logits.shape, np.float32)
    softmax(d_logits, d_p)
    probs = d_p.copy_to_host()
    classes = probs.argmax(axis=1)

    want = reference(x, w1, b1, w2, b2)
    rel = np.abs(probs - want) / want
    print(f"  classes of the first 16 inputs: {' '.join(map(str, classes[:16]))}")
    print(f"  max relative error of the probabilities {rel.max():.3g}; "
          f"max absolute {np.abs(probs - want).max():.3g}")
    close = bool(np.allclose(probs, want, rtol=1e-4, atol=1e-7))
    same = int((classes == want.argmax(axis=1)).sum())
    print(f"  check: probabilities {'within' if close else 'NOT within'} rtol 1e-4 of numpy (float64); "
          f"argmax equal for {same} of {BATCH} inputs")
    ok = close and same == BATCH
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
