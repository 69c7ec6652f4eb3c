"""The public names of `numba.cuda` that Numba's documentation lists, and what umd has
for each (docs/umd.md, "Numba CUDA -> umd").

The list is written from numba-cuda's reference pages (reference/host.rst: device
management, measurement, streams, compilation, linkable code; reference/kernel.rst:
kernel declaration and the intrinsics; reference/memory.rst; user/ pages for reduce,
random, cooperative groups, the FFI, external memory managers, IPC, and jit_module).
A name umd provides under the same spelling is in `PROVIDED`; one it does not is in
`MISSING` with what to use instead, and
`umd.<name>` raises the AttributeError `missing()` makes: `umd.NAME: not in umd; ...`.
tests/umd/test_numba_host.py checks every name of both against umd, and
tests/umd/test_numba_names.py the documentation's own list against both.
"""
from __future__ import annotations

#: numba.cuda names umd has, spelt the same (attributes of submodules dotted).
PROVIDED = (
    # host: device management (reference/host.rst)
    "is_available", "detect", "current_context", "synchronize", "close", "gpus", "gpus.current",
    "select_device", "get_current_device", "list_devices",
    # host: measurement, streams
    "event", "event_elapsed_time", "stream", "default_stream",
    # memory (reference/memory.rst, user/memory.rst)
    "to_device", "device_array", "device_array_like", "pinned_array", "mapped_array", "pinned",
    "defer_cleanup", "is_cuda_array", "as_cuda_array",
    # kernel declaration and launch helpers
    "jit", "reduce", "Reduce", "jit_module",
    # thread indexing (reference/kernel.rst)
    "threadIdx", "blockIdx", "blockDim", "gridDim", "laneid", "warpsize", "grid", "gridsize",
    # memory in kernels
    "shared", "shared.array", "local", "local.array", "const", "const.array_like",
    # synchronization and atomics
    "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or",
    "atomic", "atomic.add", "atomic.sub", "atomic.and_", "atomic.or_", "atomic.xor", "atomic.exch",
    "atomic.inc", "atomic.dec", "atomic.max", "atomic.min", "atomic.nanmax", "atomic.nanmin",
    "atomic.compare_and_swap", "atomic.cas",
    # memory fences
    "threadfence", "threadfence_block", "threadfence_system",
    # warp intrinsics
    "syncwarp", "all_sync", "any_sync", "ballot_sync", "shfl_sync", "shfl_up_sync", "shfl_down_sync",
    "shfl_xor_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt",
    # integer, floating point and control flow intrinsics
    "popc", "brev", "clz", "ffs", "fma", "cbrt", "selp",
    # random numbers (user/random.rst)
    "random", "random.create_xoroshiro128p_states", "random.xoroshiro128p_uniform_float32",
    "random.xoroshiro128p_uniform_float64", "random.xoroshiro128p_normal_float32",
    "random.xoroshiro128p_normal_float64",
    # numba's GPU ufuncs, here under umd (numba.vectorize / numba.guvectorize with target='cuda')
    "vectorize", "guvectorize",
    # cooperative groups and the FFI (user/cooperative_groups.rst, user/cudapysupported.rst)
    "cg", "cg.this_grid", "cg.GridGroup", "cg.GridGroup.sync", "declare_device",
    # user/external-memory.rst: get_memory_info's result
    "MemoryInfo",
)

_NOT_SUPPORTED = "not supported: see docs/umd.md, \"Numba CUDA -> umd\""

#: numba.cuda names umd does not have -> what to use instead.
MISSING = {
    "require_context": "use umd.get_current_device(): umd opens the device (its context) on first use",
    "profile_start": "use `with umd.profile() as prof:` (performance counters per launch) or VGPU_TRACE",
    "profile_stop": "use `with umd.profile() as prof:` (performance counters per launch) or VGPU_TRACE",
    "profiling": "use `with umd.profile() as prof:` (performance counters per launch) or VGPU_TRACE",
    "legacy_default_stream": "use umd.default_stream(): umd's default stream is CUDA's legacy one",
    "per_thread_default_stream": "use umd.stream() per thread: umd has one default stream per device",
    "external_stream": "use umd.stream(): a stream of another CUDA runtime cannot drive a vgpu device",
    "pinned_array_like": "use umd.pinned_array(ary.shape, ary.dtype)",
    "mapped_array_like": "use umd.mapped_array(ary.shape, ary.dtype)",
    "managed_array": "use umd.mapped_array (host memory kernels use in place) or umd.device_array: "
                     "vgpu has no unified (managed) memory migration",
    "mapped": "use umd.mapped_array: registering existing host memory for kernels is "
              + _NOT_SUPPORTED,
    "from_cuda_array_interface": "use umd.as_cuda_array(obj) on an object with __cuda_array_interface__",
    "open_ipc_array": "inter-process device memory is " + _NOT_SUPPORTED,
    "compile_ptx": "umd compiles to vISA, not PTX: use umd.compiler.build(fn).asm_text "
                   "(VGPU_DEBUG=shaders prints it)",
    "compile_ptx_for_current_device": "umd compiles to vISA, not PTX: use umd.compiler.build(fn).asm_text",
    "compile": "use umd.compiler.compile_kernel(fn) (a CompiledKernel with its vISA code object)",
    "compile_for_current_device": "use umd.compiler.compile_kernel(fn)",
    "nanosleep": "use a loop on a flag: the vISA has no sleep instruction; " + _NOT_SUPPORTED,
    "eq_sync": "use umd.all_sync(mask, x == umd.shfl_sync(mask, x, 0))",
    "fp16": "float16 arithmetic is " + _NOT_SUPPORTED + " (kernels compute in f32/f64)",
    "bf16": "bfloat16 arithmetic is " + _NOT_SUPPORTED + " (kernels compute in f32/f64)",
    "is_float16_supported": "float16 is " + _NOT_SUPPORTED + "; kernels compute in f32/f64",
    "is_bfloat16_supported": "bfloat16 is " + _NOT_SUPPORTED + "; kernels compute in f32/f64",
    "libdevice": "use math.* and numpy's ufuncs on scalars in kernels (umd's float64 library "
                 "implements them)",
    "runtime": "the CUDA runtime API has no vgpu counterpart: use the umd functions (umd.detect())",
    "driver": "the CUDA driver API has no vgpu counterpart: use libvgpu",
    "is_supported_version": "use umd.is_available(): vgpu has no CUDA toolkit; umd checks the KMD's version "
                            "when a device opens",
    "float16": "float16 is " + _NOT_SUPPORTED + "; use umd.f32",
    "float32x2": "vector types are " + _NOT_SUPPORTED + "; use tuples or local arrays",
    "float32x4": "vector types are " + _NOT_SUPPORTED + "; use tuples or local arrays",
    "int32x4": "vector types are " + _NOT_SUPPORTED + "; use tuples or local arrays",
    "simulator": "use a vgpu mount: every device is emulated already (VGPU_HW=ref runs the "
                 "pure-Python executor)",
    "compile_all": "use umd.compiler.compile_kernel(fn): umd compiles one vISA code object, "
                   "there is no PTX/LTO-IR to gather",
    # the external memory manager (EMM) plugin interface, user/external-memory.rst
    **{name: "umd allocates from its own pool (umd.memory.MemoryPool, umd.memory_stats()): an "
             "external memory manager plugin is " + _NOT_SUPPORTED
       for name in ("set_memory_manager", "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager",
                    "GetIpcHandleMixin", "MemoryPointer", "MappedMemory", "PinnedMemory", "IpcHandle")},
    # linkable code objects for link= (reference/host.rst)
    **{name: "use link= with a Python file of umd.jit(device=True) functions (docs/umd.md, "
             "\"Linking device functions\"): CUDA C, PTX, cubins and LTO-IR cannot run on the vISA"
       for name in ("LinkableCode", "PTXSource", "CUSource", "Cubin", "Fatbin", "Object", "Archive", "LTOIR")},
    "cudadrv": "use umd.DeviceArray, umd.Device, umd.Stream and umd.Event: the CUDA driver's objects "
               "have no vgpu counterpart",
    "dispatcher": "use umd.Kernel, umd.jit's result (kernel[grid, block], .forall, .overloads)",
    "forall": "forall is a kernel's method: kernel.forall(n)(args), or kernel[blocks, threads](args)",
}


def missing(name: str) -> AttributeError:
    """The AttributeError for ``umd.<name>``: what to use instead when Numba's cuda
    has the name, else Python's usual message."""
    if name in MISSING:
        return AttributeError(f"umd.{name}: not in umd; {MISSING[name]}")
    return AttributeError(f"module 'umd' has no attribute {name!r}")
