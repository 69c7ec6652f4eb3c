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
from .array import (DeviceArray, as_cuda_array, device_array, device_array_like, empty, empty_like, full,
                    is_cuda_array, to_device, zeros)
from .copy import memcpy_dtod, memcpy_dtoh, memcpy_htod, memset, memset_d32
from .device import (Device, MemoryInfo, close_devices, get_device, list_devices, select_device, set_device,
                     synchronize)
from .devices import current_context, detect, get_current_device, gpus, is_available
from .errors import (ArgumentTypeError, GPUError, GPUFault, GPUHang, KernelCompileError, LaunchError, OutOfMemory,
                     UMDError, VersionMismatch)
from .event import Event, elapsed_time, event
from .host import MappedArray, mapped_array, pinned, pinned_array
from .intrinsics import (activemask, all_sync, any_sync, atomic, atomic_add, atomic_cas, atomic_max,
                         ballot_sync, block_dim, block_idx, blockDim, blockIdx, brev, cbrt, cg, clz, const, ffs,
                         fma, grid, grid_dim, gridDim, gridsize, laneid, lanemask_lt, local, match_all_sync,
                         match_any_sync, math, popc, selp, shared, shared_array, shfl_down_sync, shfl_sync,
                         shfl_up_sync, shfl_xor_sync, syncthreads, syncthreads_and, syncthreads_count,
                         syncthreads_or, syncwarp, thread_idx, threadfence, threadfence_block,
                         threadfence_system, threadIdx, warpsize)
from .kernel import DeviceFunction, Kernel, jit, kernel
from .compiler.linking import declare_device
from .memcheck import MemcheckError
from .launch import ArgSpec, CompiledKernel, kernel_from_code_object, launch_kernel
from .profiler import LaunchProfile, Profile, profile
from .stream import Stream, default_stream, stream
from . import userq_stream as _userq_stream  # registers the user-queue Stream (Stream.user_queue_variant)
from .types import Ptr, f32, f64, float32, float64, i32, i64, int32, int64, u32, u64, uint32, uint64
from .types import b1, boolean, i8, i16, int8, int16, u8, u16, uint8, uint16
from .guvectorize import guvectorize
from .jit_module import jit_module
from .reduce import Reduce
from .vectorize import vectorize

# An uncaught umd error ends the program with its message, not a traceback (vgpu/errors.py).
from vgpu.errors import install_excepthook as _install_excepthook
_install_excepthook()

# Numba's names. `umd.stream` and `umd.event` are these functions, as in Numba, not the
# modules of the same names (import from umd.stream / umd.event for those).
close = close_devices
event_elapsed_time = elapsed_time
reduce = Reduce                 # Numba's @cuda.reduce (umd.reduce the module: from umd.reduce import ...)


def __getattr__(name: str):
    """A numba.cuda name umd does not have: an AttributeError saying what to use
    instead (umd/numba_names.py)."""
    from .numba_names import missing
    raise missing(name)


def memory_stats(device: Device | None = None) -> dict:
    """The pool statistics of ``device`` (default: the current device): bytes in_use,
    cached, peak, and counters."""
    return (device or get_device()).pool.stats()


def defer_cleanup(device: Device | None = None):
    """``with umd.defer_cleanup():`` memory freed inside the block goes back to the
    pool of ``device`` (default: the current device) only at its end (Numba's)."""
    return (device or get_device()).pool.defer_cleanup()


def empty_cache(device: Device | None = None) -> None:
    """Free the cached blocks of ``device``'s pool (default: the current device), after
    the work that used them."""
    (device or get_device()).pool.empty_cache()

