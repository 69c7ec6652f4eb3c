"""Every public name of `numba.cuda` that numba-cuda's documentation lists is either in
umd under the same spelling or raises the AttributeError that says what to use instead
(umd/numba_names.py, docs/umd.md "Numba CUDA -> umd").

The names below are transcribed from the documentation itself (reference/host.rst,
reference/kernel.rst, reference/memory.rst and the user/ pages: memory, cooperative
groups, the FFI, random, reduction, external memory, IPC), not from umd's own list, so
a name the list forgot fails here. No device is opened."""
import types

import pytest

import umd
from umd.numba_names import MISSING, PROVIDED

#: numba.cuda names by documentation page; dotted ones are attributes of a namespace.
DOCUMENTED = {
    "reference/host.rst": (
        "is_available", "detect", "current_context", "require_context", "synchronize", "close",
        "gpus", "gpus.current", "select_device", "get_current_device", "list_devices",
        "profile_start", "profile_stop", "profiling", "event", "event_elapsed_time",
        "stream", "default_stream", "legacy_default_stream", "per_thread_default_stream",
        "external_stream", "compile", "compile_for_current_device", "compile_ptx",
        "compile_ptx_for_current_device", "compile_all", "is_float16_supported",
        "LinkableCode", "PTXSource", "CUSource", "Cubin", "Fatbin", "Object", "Archive", "LTOIR",
    ),
    "reference/kernel.rst": (
        "jit", "declare_device", "threadIdx", "blockIdx", "blockDim", "gridDim", "laneid",
        "warpsize", "grid", "gridsize", "shared.array", "local.array", "const.array_like",
        "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or",
        "atomic.add", "atomic.sub", "atomic.and_", "atomic.or_", "atomic.xor", "atomic.exch",
        "atomic.inc", "atomic.dec", "atomic.max", "atomic.cas", "cg.this_grid", "cg.GridGroup",
        "cg.GridGroup.sync", "threadfence", "threadfence_block", "threadfence_system",
        "syncwarp", "all_sync", "any_sync", "eq_sync", "ballot_sync", "shfl_sync",
        "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "match_any_sync", "match_all_sync",
        "activemask", "lanemask_lt", "popc", "brev", "clz", "ffs", "fma", "cbrt", "selp",
        "nanosleep", "fp16", "fp16.hadd", "fp16.hfma", "fp16.hsqrt",
    ),
    "reference/memory.rst": (
        "to_device", "device_array", "device_array_like", "pinned_array", "pinned_array_like",
        "mapped_array", "mapped_array_like", "managed_array", "pinned", "mapped",
        "defer_cleanup", "as_cuda_array", "is_cuda_array", "from_cuda_array_interface",
    ),
    "user/external-memory.rst": (
        "set_memory_manager", "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager",
        "GetIpcHandleMixin", "MemoryPointer", "MappedMemory", "PinnedMemory", "MemoryInfo",
        "IpcHandle",
    ),
    "user/ipc.rst": ("open_ipc_array",),
    "user/reduction.rst": ("reduce", "Reduce"),
    "user/random.rst": (
        "random.create_xoroshiro128p_states", "random.xoroshiro128p_uniform_float32",
        "random.xoroshiro128p_uniform_float64", "random.xoroshiro128p_normal_float32",
        "random.xoroshiro128p_normal_float64",
    ),
    # classes the reference pages document by their module path
    "reference (module paths)": ("cudadrv", "dispatcher"),
}

ALL = sorted({name for names in DOCUMENTED.values() for name in names})


def resolve(name: str):
    """umd's object for the dotted ``name``; the first missing part raises."""
    obj = umd
    for part in name.split("."):
        if isinstance(getattr(type(obj), part, None), property):
            return obj                          # gpus.current: opens a device
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", ALL)
def test_documented_name_exists_or_says_what_to_use(name):
    top = name.split(".")[0]
    listed = name in PROVIDED or top in MISSING
    assert listed, f"numba.cuda.{name} is documented but not in umd/numba_names.py"
    if top in MISSING:
        with pytest.raises(AttributeError) as e:
            resolve(name)
        msg = str(e.value)
        assert msg.startswith(f"umd.{top}: not in umd; "), msg
        assert "use" in msg or "not supported" in msg, msg
    else:
        resolve(name)                           # an AttributeError here: umd lost the name


def test_the_list_names_only_documented_or_umd_names():
    # PROVIDED may name more than the pages above (vectorize, jit_module...), but a
    # name must never be both provided and missing.
    assert not set(PROVIDED) & set(MISSING)
    for name in MISSING:
        if isinstance(getattr(umd, name, None), types.ModuleType):
            continue                            # umd.forall: the module once imported
        assert not hasattr(umd, name), f"umd.{name} exists: move it to PROVIDED"
