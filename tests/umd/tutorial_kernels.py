"""More kernels as Numba CUDA's documentation and the common tutorials write them,
translated mechanically (`cuda.` -> `umd.`, annotations added): the naive and the
shared-memory matmul of Numba's docs, block reductions, a block scan, a Monte-Carlo
estimate of pi with an integer hash, divergence with while/break, mixed casts, a
padded shared-memory transpose. tests/umd/test_tutorial_kernels.py runs them on the
reference executor, tests/umd/test_numba_e2e.py through a mount."""
import umd
from umd import f32, float32, i32, int32, u32

TPB = 16            # threads per block side (Numba's fast_matmul)
BLOCK = 128         # threads per block of the reductions and the scan
TILE = 16           # transpose tile side


@umd.jit
def matmul(A: f32[:, :], B: f32[:, :], C: f32[:, :]):
    i, j = umd.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        tmp = 0.
        for k in range(A.shape[1]):
            tmp += A[i, k] * B[k, j]
        C[i, j] = tmp


@umd.jit
def fast_matmul(A: f32[:, :], B: f32[:, :], C: f32[:, :]):
    sA = umd.shared.array(shape=(TPB, TPB), dtype=float32)
    sB = umd.shared.array(shape=(TPB, TPB), dtype=float32)
    x, y = umd.grid(2)
    tx = umd.threadIdx.x
    ty = umd.threadIdx.y
    bpg = umd.gridDim.x
    tmp = float32(0.)
    for i in range(bpg):
        sA[ty, tx] = 0
        sB[ty, tx] = 0
        if y < A.shape[0] and (tx + i * TPB) < A.shape[1]:
            sA[ty, tx] = A[y, tx + i * TPB]
        if x < B.shape[1] and (ty + i * TPB) < B.shape[0]:
            sB[ty, tx] = B[ty + i * TPB, x]
        umd.syncthreads()
        for j in range(TPB):
            tmp += sA[ty, j] * sB[j, tx]
        umd.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = tmp


@umd.jit
def block_sum(a: f32[:], partial: f32[:]):
    buf = umd.shared.array(BLOCK, float32)
    tid = umd.threadIdx.x
    i = umd.grid(1)
    buf[tid] = a[i] if i < a.size else 0
    umd.syncthreads()
    s = umd.blockDim.x // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        umd.syncthreads()
        s //= 2
    if tid == 0:
        partial[umd.blockIdx.x] = buf[0]


@umd.jit
def block_min_max(a: i32[:], out: i32[:, :]):
    lo = umd.shared.array(BLOCK, int32)
    hi = umd.shared.array(BLOCK, int32)
    tid = umd.threadIdx.x
    i = umd.grid(1)
    if i < a.size:
        lo[tid] = a[i]
        hi[tid] = a[i]
    else:
        lo[tid] = 2147483647
        hi[tid] = -2147483648
    umd.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            lo[tid] = min(lo[tid], lo[tid + s])
            hi[tid] = max(hi[tid], hi[tid + s])
        umd.syncthreads()
        s //= 2
    if tid == 0:
        out[umd.blockIdx.x, 0] = lo[0]
        out[umd.blockIdx.x, 1] = hi[0]


@umd.jit
def block_scan(a: i32[:], out: i32[:]):
    # Hillis-Steele inclusive scan of each block, double-buffered in shared memory
    buf = umd.shared.array((2, BLOCK), int32)
    tid = umd.threadIdx.x
    i = umd.grid(1)
    pout, pin = 0, 1
    buf[pout, tid] = a[i] if i < a.size else 0
    umd.syncthreads()
    offset = 1
    while offset < umd.blockDim.x:
        pout, pin = pin, pout
        if tid >= offset:
            buf[pout, tid] = buf[pin, tid] + buf[pin, tid - offset]
        else:
            buf[pout, tid] = buf[pin, tid]
        umd.syncthreads()
        offset *= 2
    if i < a.size:
        out[i] = buf[pout, tid]


@umd.jit(device=True)
def hash_u32(x: u32) -> u32:
    # a 32-bit integer finaliser (xor-shift-multiply)
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


@umd.jit
def monte_carlo_pi(samples: i32, seed: u32, hits: i32[:]):
    i = umd.grid(1)
    if i < hits.size:
        count = 0
        for k in range(samples):
            h1 = hash_u32(seed ^ u32(i * samples + k) * 2)
            h2 = hash_u32(h1 + 0x9E3779B9)
            x = float32(h1 >> 8) * (1.0 / 16777216.0)
            y = float32(h2 >> 8) * (1.0 / 16777216.0)
            if x * x + y * y <= 1.0:
                count += 1
        hits[i] = count


@umd.jit
def collatz_steps(start: i32[:], steps: i32[:], limit: i32):
    i = umd.grid(1)
    if i >= start.size:
        return
    n = start[i]
    s = 0
    while n != 1:
        if s >= limit:
            s = -1
            break
        if n % 2 == 0:
            n //= 2
        else:
            n = 3 * n + 1
        s += 1
    steps[i] = s


@umd.jit
def mixed_casts(x: f32[:], k: i32[:], u: u32[:], out_f: f32[:, :], out_i: i32[:, :]):
    i = umd.grid(1)
    if i < x.size:
        out_f[i, 0] = x[i] + k[i]                   # the int is converted
        out_f[i, 1] = k[i] / 2                      # true division: a float
        out_f[i, 2] = float(u[i]) * 0.5
        out_f[i, 3] = float32(k[i] * 3) / float32(7)
        out_i[i, 0] = int(x[i])                     # toward zero
        out_i[i, 1] = k[i] // 3                     # floor
        out_i[i, 2] = int32(u[i] >> 1)
        out_i[i, 3] = round(x[i])                   # half to even
        out_i[i, 4] = k[i] % 7                      # sign of the divisor


@umd.jit
def transpose(a: f32[:, :], out: f32[:, :]):
    # the tile has a padding column, so a column of it spans every LDS bank
    tile = umd.shared.array((TILE, TILE + 1), float32)
    x = umd.blockIdx.x * TILE + umd.threadIdx.x     # column of a
    y = umd.blockIdx.y * TILE + umd.threadIdx.y     # row of a
    if y < a.shape[0] and x < a.shape[1]:
        tile[umd.threadIdx.y, umd.threadIdx.x] = a[y, x]
    umd.syncthreads()
    x = umd.blockIdx.y * TILE + umd.threadIdx.x     # column of out
    y = umd.blockIdx.x * TILE + umd.threadIdx.y     # row of out
    if y < out.shape[0] and x < out.shape[1]:
        out[y, x] = tile[umd.threadIdx.x, umd.threadIdx.y]


@umd.jit
def block_votes(x: f32[:], out: i32[:, :]):
    # Numba's cuda.syncthreads_count / _and / _or, and the fences, in a block reduction
    i = umd.grid(1)
    v = x[i] if i < x.size else 0.0
    n_pos = umd.syncthreads_count(v > 0.0)
    all_small = umd.syncthreads_and(abs(v) < 3.0)
    any_big = umd.syncthreads_or(v > 2.0)
    umd.threadfence()
    umd.threadfence_block()
    umd.threadfence_system()
    if umd.threadIdx.x == 0:
        b = umd.blockIdx.x
        out[b, 0] = n_pos
        out[b, 1] = all_small
        out[b, 2] = any_big
    for r in range(3):                       # again in a loop: each round its own count
        c = umd.syncthreads_count(i % 3 == r)
        if umd.threadIdx.x == 0:
            out[umd.blockIdx.x, 3 + r] = c
