"""umd: a small CUDA/HIP-like runtime over libvgpu (docs/design.md 7, docs/umd.md).

    import numpy as np, umd
    a = umd.to_device(np.arange(1024, dtype=np.float32))
    b = umd.empty_like(a)
    umd.memcpy_dtod(b.ptr, a.ptr, a.nbytes)
    start, end = umd.Event().record(), None
    ...
    umd.synchronize()

Runtime: Device, memory pool, SDMA copies, streams, events, kernel launch, debug
switches (this half). Kernel compiler: umd.kernel, umd.types, umd.compiler.
"""
from . import debug, memcheck, random
from .array import DeviceArray, empty, empty_like, full, to_device, zeros
from .copy import memcpy_dtod, memcpy_dtoh, memcpy_htod, memset, memset_d32
from .device import Device, get_device, set_device, synchronize
from .errors import (ArgumentTypeError, GPUError, GPUFault, GPUHang, KernelCompileError, LaunchError, OutOfMemory,
                     UMDError, VersionMismatch)
from .event import Event, elapsed_time
from .intrinsics import (activemask, all_sync, any_sync, atomic, atomic_add, atomic_cas, atomic_max,
                         ballot_sync, block_dim, block_idx, blockDim, blockIdx, brev, cbrt, clz, const, ffs,
                         fma, grid, grid_dim, gridDim, gridsize, laneid, lanemask_lt, local, match_all_sync,
                         match_any_sync, math, popc, selp, shared, shared_array, shfl_down_sync, shfl_sync,
                         shfl_up_sync, shfl_xor_sync, syncthreads, syncthreads_and, syncthreads_count,
                         syncthreads_or, syncwarp, thread_idx, threadfence, threadfence_block,
                         threadfence_system, threadIdx, warpsize)
from .kernel import DeviceFunction, Kernel, jit, kernel
from .memcheck import MemcheckError
from .launch import ArgSpec, CompiledKernel, kernel_from_code_object, launch_kernel
from .profiler import LaunchProfile, Profile, profile
from .stream import Stream, default_stream
from .types import Ptr, f32, f64, float32, float64, i32, i64, int32, int64, u32, u64, uint32, uint64

device_array, device_array_like = empty, empty_like      # Numba's names


def memory_stats(device: Device | None = None) -> dict:
    """The pool statistics of ``device`` (default: the current device): bytes in_use,
    cached, peak, and counters."""
    return (device or get_device()).pool.stats()


def empty_cache(device: Device | None = None) -> None:
    """Free the cached blocks of ``device``'s pool (default: the current device), after
    the work that used them."""
    (device or get_device()).pool.empty_cache()

