"""Kernel launch: grid/block validation, argument packing, code-object upload, dispatch.

The compiler (umd.compiler) produces a ``CompiledKernel``; the contract (docs/umd.md):

- ``name``, ``code_object`` (a .vco image, ``vgpu.asm.assemble(...).pack()``),
  ``args`` (``ArgSpec(name, kind, offset, size)``, kind ``i32``/``u32``/``f32``/``i64``/
  ``u64``/``f64``/``ptr``),
  ``kernarg_size``, ``line_table`` ({PC byte offset from the entry: source line}),
  ``source_file``;
- ArgSpecs whose name starts with ``__`` are filled by the launch:
  ``__grid_dim_x/y/z`` and ``__block_dim_x/y/z`` (u32), ``__shape_<arg>_<k>`` (u32:
  dimension k of array argument <arg>; its size for a flat ``Ptr``); the others take
  the caller's arguments, in order (or by name from a dict);
- a ``ptr`` ArgSpec with a ``dtype`` ('f32', 'i32', 'u32', 'f64', 'i64', 'u64') takes only arrays of that
  dtype, and with an ``ndim`` (1-3) only arrays of that many dimensions: anything else
  is an ``ArgumentTypeError`` (a ``TypeError`` and a ``LaunchError``), never a
  reinterpretation. A numpy array is copied to the device for the launch and back
  after it (the launch then waits for the kernel), as Numba does.

The kernarg segment is written at the top of the stream's compute IB buffer and its
VA goes to user data s[0:1] (libvgpu.kernarg_user_data). A code object is uploaded
once per device (cached by its bytes).
"""
from __future__ import annotations

import math
import struct
import weakref

import numpy as np

import libvgpu
from vgpu import isa
from vgpu import pm4 as P

from . import debug, profiler
from .attributes import MAX_GRID_DIM
from .compiler import ArgSpec, CompiledKernel, prints
from .compiler.frontend import DYNAMIC_SHARED_ARG
from .debug import DebugFlag
from .errors import ArgumentTypeError, LaunchError
from .stream import current_stream
from .trace import traced
from .types import SMALL_BYTES, ScalarType

MAX_BLOCK_THREADS = isa.MAX_BLOCK_THREADS
_FORMATS = {"ptr": "<Q", "u32": "<I", "i32": "<i", "f32": "<f", "u64": "<Q", "i64": "<q",
            "f64": "<d", **dict.fromkeys(SMALL_BYTES, "<i")}   # small: a widened 32-bit slot
_INT_KINDS = ("i32", "u32", "i64", "u64", *SMALL_BYTES)
_HIDDEN = {"__grid_dim_x": ("grid", 0), "__grid_dim_y": ("grid", 1), "__grid_dim_z": ("grid", 2),
           "__block_dim_x": ("block", 0), "__block_dim_y": ("block", 1), "__block_dim_z": ("block", 2)}
_DTYPES = {"f32": np.dtype(np.float32), "i32": np.dtype(np.int32), "u32": np.dtype(np.uint32),
           "f64": np.dtype(np.float64), "i64": np.dtype(np.int64), "u64": np.dtype(np.uint64),
           "u8": np.dtype(np.uint8), "i8": np.dtype(np.int8), "u16": np.dtype(np.uint16),
           "i16": np.dtype(np.int16), "b1": np.dtype(np.bool_)}
MAX_EXTENT = (1 << 31) - 1            # shapes are i32 in kernels


def kernel_from_code_object(image: bytes, source_file: str = "", line_table: dict | None = None):
    """A CompiledKernel for a hand-written .vco: name and arguments from its metadata."""
    obj = libvgpu.code_object_parse(image)
    args = [ArgSpec(a.name, a.kind, a.offset, a.size) for a in obj.args]
    return CompiledKernel(name=obj.name, code_object=bytes(image), args=args, kernarg_size=obj.kernarg_size,
                          line_table=dict(line_table or {}), source_file=source_file)


def _dims(what: str, value, limit: int) -> tuple[int, int, int]:
    if type(value) is int and 1 <= value <= limit:      # the common 1-D launch
        return (value, 1, 1)
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise LaunchError(f"{what} {value!r}: give 1 to 3 dimensions")
    try:
        dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    except (TypeError, ValueError):
        raise LaunchError(f"{what} {value!r}: dimensions must be integers") from None
    if any(d < 1 or d > limit for d in dims):
        raise LaunchError(f"{what} {dims}: every dimension must be 1..{limit}")
    return dims


def _describe(value) -> str:
    shape = tuple(getattr(value, "shape", ()))
    where = "numpy array" if isinstance(value, np.ndarray) else "array"
    return f"{len(shape)}-D {np.dtype(value.dtype).name} {where} (shape {shape})"


def check_array(compiled, spec, value) -> None:
    """An array argument's dtype and dimensions against its ArgSpec: ArgumentTypeError
    naming the argument, the expected and the given type."""
    dtype = getattr(spec, "dtype", "")
    ndim = getattr(spec, "ndim", 0)
    if not dtype or not hasattr(value, "dtype"):
        return
    want = _DTYPES[dtype]
    if np.dtype(value.dtype) != want or (ndim and len(value.shape) != ndim):
        expected = f"{ndim}-D {want.name} array" if ndim else f"{want.name} array"
        raise ArgumentTypeError(f"{compiled.name}: argument {spec.name} expects a {expected} "
                                f"({umd_type(spec)}), got a {_describe(value)}")


def umd_type(spec) -> str:
    """The annotation an ArgSpec stands for (Ptr[f32], f32[:, :], i32...)."""
    if spec.kind != "ptr":
        return spec.kind
    elem = getattr(spec, "dtype", "") or "?"
    ndim = getattr(spec, "ndim", 0)
    return f"{elem}[{', '.join([':'] * ndim)}]" if ndim else f"Ptr[{elem}]"


def _shape_of(compiled, specs, values, name: str) -> int:
    """The value of hidden argument __shape_<arg>_<k>."""
    arg, _, k = name[len("__shape_"):].rpartition("_")
    spec = next((s for s in specs if s.name == arg and s.kind == "ptr"), None)
    if spec is None or not k.isdigit():
        raise LaunchError(f"{compiled.name}: unknown hidden argument {name}")
    value = values[arg]
    shape = getattr(value, "shape", None)
    if shape is None:
        raise LaunchError(f"{compiled.name}: argument {arg}: the kernel uses its shape, so pass an "
                          f"array (a DeviceArray), not {type(value).__name__} {value!r}")
    shape = tuple(shape) if getattr(spec, "ndim", 0) else (int(np.prod(shape, dtype=np.int64)),)
    if int(k) >= len(shape):
        raise LaunchError(f"{compiled.name}: argument {arg} has {len(shape)} dimensions, the kernel "
                          f"reads dimension {k}")
    extent = int(shape[int(k)])
    if extent > MAX_EXTENT:
        raise LaunchError(f"{compiled.name}: argument {arg}: dimension {k} is {extent}; kernels "
                          f"index with i32 (at most {MAX_EXTENT})")
    return extent


def launch_lds_bytes(compiled, sharedmem: int = 0) -> int:
    """The LDS a workgroup of the launch gets: the kernel's static shared arrays, then
    ``sharedmem`` bytes of dynamic shared memory (the fourth element of
    ``kernel[grid, block, stream, sharedmem]``, where ``umd.shared.array(0, T)``
    lives). LaunchError when the sum passes MAX_SHARED_MEMORY_PER_BLOCK, as CUDA's
    launch fails."""
    if not isinstance(sharedmem, (int, np.integer)) or isinstance(sharedmem, bool) or sharedmem < 0:
        raise LaunchError(f"{compiled.name}: dynamic shared memory must be a number of bytes >= 0, "
                          f"not {sharedmem!r}")
    static = int(compiled.lds_bytes)
    total = static + int(sharedmem)
    if total > isa.MAX_LDS_BYTES:
        raise LaunchError(f"{compiled.name}: {static} bytes of static shared memory + {int(sharedmem)} "
                          f"bytes of dynamic shared memory = {total} bytes per block; at most "
                          f"{isa.MAX_LDS_BYTES} (MAX_SHARED_MEMORY_PER_BLOCK)")
    return total


def _dispatch_resources(compiled, lds_bytes: int) -> tuple[int, int, int]:
    """(sgprs, vgprs, LDS bytes) as the command processor grants them to the compute
    units: registers in granules (docs/pm4.md), LDS in 512-byte granules."""
    vgprs, sgprs = P.decode_rsrc1(P.rsrc1(compiled.vgprs, compiled.sgprs))
    lds = -(-lds_bytes // P.LDS_GRANULE) * P.LDS_GRANULE
    return min(sgprs, isa.MAX_SGPRS), min(vgprs, isa.MAX_VGPRS), lds


def max_cooperative_blocks(compiled, blockdim, dynsmemsize: int = 0, cus: int | None = None,
                           device=None) -> int:
    """Numba's ``max_cooperative_grid_blocks(blockdim, dynsmemsize=0)``: how many blocks
    of ``blockdim`` threads a cooperative launch of ``compiled`` may have, i.e. what
    the device's compute units (``cus``, default: ``device``'s or the current one's
    MULTIPROCESSOR_COUNT) hold resident at once (vgpu.isa.max_resident_workgroups,
    the engines' grid-barrier capacity: docs/isa.md 4.1)."""
    block = _dims("block", blockdim, MAX_BLOCK_THREADS)
    if cus is None:
        from .device import get_device
        cus = (device or get_device()).MULTIPROCESSOR_COUNT
    sgprs, vgprs, lds = _dispatch_resources(compiled, launch_lds_bytes(compiled, dynsmemsize))
    return cus * isa.max_resident_workgroups(math.prod(block), sgprs, vgprs, lds)


def check_cooperative(compiled, grid, block, sharedmem: int = 0, cus: int | None = None,
                      device=None) -> None:
    """A kernel that syncs its grid (``compiled.cooperative``) must have every block
    resident at once: a larger launch is a LaunchError, as CUDA's
    cudaErrorCooperativeLaunchTooLarge."""
    if not getattr(compiled, "cooperative", False):
        return
    limit = max_cooperative_blocks(compiled, block, sharedmem, cus, device)
    blocks = math.prod(grid)
    if blocks > limit:
        raise LaunchError(f"cooperative launch too large (CUDA's cudaErrorCooperativeLaunchTooLarge): "
                          f"{compiled.name} syncs its grid (umd.cg.this_grid().sync()), so all its "
                          f"blocks must be resident at once; launched with {blocks} blocks of "
                          f"{math.prod(block)} threads, at most {limit} fit (see "
                          "kernel.overloads[sig].max_cooperative_grid_blocks(blockdim)); use fewer "
                          "blocks and a grid-stride loop")


class _WithLds:
    """A LoadedKernel seen with another LDS size: the launch's static + dynamic shared
    memory in COMPUTE_PGM_RSRC2 (libvgpu.emit_dispatch reads it from rsrc2)."""

    def __init__(self, loaded, lds_bytes: int) -> None:
        self._loaded, self._lds = loaded, lds_bytes

    def __getattr__(self, name):
        return getattr(self._loaded, name)

    @property
    def lds_bytes(self) -> int:
        return self._lds

    def rsrc2(self, user_sgprs: int) -> int:
        return P.rsrc2(user_sgprs, self._lds)


def captured_arrays(compiled, fn=None, env: dict | None = None) -> dict:
    """The device arrays a kernel names as globals (``compiled.captured``), looked up
    now: in the kernel function's names (its globals, the decorating frame's names
    ``env``, its closure) when it captured them itself, else in the module of the
    device function that did. The hidden argument __global_<k> of each."""
    if not compiled.captured:
        return {}
    import builtins
    import sys
    out = {}
    for name, (module, function, expr) in compiled.captured.items():
        if fn is not None and module == fn.__module__ and function == fn.__name__:
            scope = dict(fn.__globals__)
            scope.update(env or {})
            for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                try:
                    scope[var] = cell.cell_contents
                except ValueError:
                    pass
        else:
            scope = dict(vars(sys.modules.get(module, builtins)))
        head, *attrs = expr.split(".")
        value = scope.get(head)
        for attr in attrs:
            value = getattr(value, attr, None)
        if value is None:
            raise LaunchError(f"{compiled.name}: the device array {expr} it names as a global "
                              "is no longer defined")
        out[name] = value
    return out


def pack_args(compiled, grid, block, args, consts: dict | None = None,
              print_buffer=None, sharedmem: int = 0, captured: dict | None = None) -> tuple[bytes, list]:
    """The kernarg bytes and the BOs the pointer arguments point into; ``consts`` gives
    the DeviceArray of each constant array (hidden __const_<k>, see const_arrays),
    ``print_buffer`` the launch's print buffer (hidden __print_buf, umd/kernel_print.py)."""
    specs, user, size, plan, by_names = _layout(compiled)
    if isinstance(args, dict):
        unknown = set(args) - {a.name for a in user}
        missing = [a.name for a in user if a.name not in args]
        if unknown or missing:
            raise LaunchError(f"{compiled.name}: missing arguments {missing}, unknown {sorted(unknown)}")
        values = [args[a.name] for a in user]
    else:
        values = list(args)
        if len(values) != len(user):
            raise LaunchError(f"{compiled.name} takes {len(user)} arguments "
                              f"({', '.join(a.name for a in user)}), got {len(values)}")
    by_name = None
    if by_names:                        # shapes and globals look arguments up by name
        by_name = {spec.name: v for spec, v in zip(user, values)}
        if captured:
            by_name.update(captured)
    out = bytearray(size)
    bos = []
    for spec, what, extra in plan:
        if what is _ARG:
            value = _user_value(compiled, spec, values[extra], bos)
        elif what is _SHAPE:
            shape = getattr(by_name[extra[0]], "shape", None) if extra is not None else None
            if shape is not None and len(shape) > extra[1]:
                value = int(shape[extra[1]])       # dimension k of an array argument
                if value > MAX_EXTENT:
                    value = _shape_of(compiled, specs, by_name, spec.name)   # says why
            else:
                value = _shape_of(compiled, specs, by_name, spec.name)
        elif what is _DIM:
            value = (grid if extra[0] == "grid" else block)[extra[1]]
        elif what is _CONST:
            if not consts or spec.name not in consts:
                raise LaunchError(f"{compiled.name}: its constant array {spec.name} is not on the "
                                  "device (launch through umd.launch_kernel)")
            bos.append(consts[spec.name].bo)
            value = consts[spec.name].ptr
        elif what is _DYN_SHARED:
            value = sharedmem
        elif what is _GLOBAL:
            if spec.name not in by_name:
                raise LaunchError(f"{compiled.name} uses a device array it names as a global: launch "
                                  "it as kernel[grid, block](...), which looks the array up")
            value = by_name[spec.name]
            check_array(compiled, spec, value)
            if getattr(value, "bo", None) is not None:
                bos.append(value.bo)
            value = value.ptr
        elif what is _PRINT:
            if print_buffer is None:
                raise LaunchError(f"{compiled.name} calls print(): launch it through "
                                  "umd.launch_kernel, which gives it a print buffer")
            bos.append(print_buffer.bo)
            value = print_buffer.address
        else:
            raise LaunchError(f"{compiled.name}: unknown hidden argument {spec.name}")
        fmt = _FORMATS.get(spec.kind)
        if fmt is None:
            raise LaunchError(f"{compiled.name}: argument {spec.name} of unknown kind {spec.kind!r}")
        try:
            struct.pack_into(fmt, out, spec.offset,
                             float(value) if spec.kind in ("f32", "f64") else int(value))
        except (struct.error, TypeError, ValueError) as e:
            raise LaunchError(f"{compiled.name}: argument {spec.name}={value!r} does not fit "
                              f"{spec.kind}: {e}") from None
    return bytes(out), bos


# What fills each kernarg slot (_layout's plan): a caller's argument (by position), an
# array's shape, a grid or block dimension, a constant array, the dynamic shared
# memory size, a captured global, the print buffer, or an unknown hidden name.
_ARG, _SHAPE, _DIM, _CONST, _DYN_SHARED, _GLOBAL, _PRINT, _UNKNOWN = (
    "arg", "shape", "dim", "const", "dyn_shared", "global", "print", "unknown")


def _slot(spec, user_index: dict, user_specs: dict) -> tuple:
    """(spec, what, extra) of one kernarg slot of the plan."""
    name = spec.name
    if name[:2] != "__":                # every hidden name starts with __
        return spec, _ARG, user_index[name]
    if name.startswith("__shape_"):
        arg, _, k = name[len("__shape_"):].rpartition("_")
        if k.isdigit() and getattr(user_specs.get(arg), "ndim", 0):
            return spec, _SHAPE, (arg, int(k))
        return spec, _SHAPE, None       # a flat Ptr's size, or an error: _shape_of
    if name.startswith("__const_"):
        return spec, _CONST, None
    if name == DYNAMIC_SHARED_ARG:
        return spec, _DYN_SHARED, None
    if name.startswith("__global_"):
        return spec, _GLOBAL, None
    if name == prints.ARG_NAME:
        return spec, _PRINT, None
    if name in _HIDDEN:
        return spec, _DIM, _HIDDEN[name]
    return spec, _UNKNOWN, None


#: id(compiled) -> (weakref to it, its args list, specs, user specs, kernarg size,
#: plan, whether the plan looks arguments up by name); an entry goes with its kernel.
_LAYOUTS: dict[int, tuple] = {}


def _layout(compiled) -> tuple[list, list, int, list, bool]:
    """The kernel's ArgSpecs, those the caller gives (no ``__`` name), the kernarg
    segment's size, and the plan of its slots; computed once per CompiledKernel and
    args list (a launch's hot path)."""
    key = id(compiled)
    hit = _LAYOUTS.get(key)
    if hit is None or hit[0]() is not compiled or hit[1] is not compiled.args or len(hit[2]) != len(compiled.args):
        specs = list(compiled.args)
        user = [a for a in specs if not a.name.startswith("__")]
        size = max([compiled.kernarg_size] + [a.offset + a.size for a in specs])
        index = {a.name: i for i, a in enumerate(user)}
        ptrs = {a.name: a for a in user if a.kind == "ptr"}
        plan = [_slot(spec, index, ptrs) for spec in specs]
        by_names = any(what in (_SHAPE, _GLOBAL) for _, what, _ in plan)
        ref = weakref.ref(compiled, lambda _, k=key: _LAYOUTS.pop(k, None))
        hit = _LAYOUTS[key] = (ref, compiled.args, specs, user, size, plan, by_names)
    return hit[2], hit[3], hit[4], hit[5], hit[6]


def _user_value(compiled, spec, value, bos: list):
    """The kernarg value of a caller's argument (a pointer's BO appended to ``bos``)."""
    if spec.kind == "ptr":
        check_array(compiled, spec, value)
        if hasattr(value, "ptr"):
            bo = getattr(value, "bo", None)
            if bo is not None:
                bos.append(bo)
            return value.ptr
        if isinstance(value, np.ndarray):
            raise LaunchError(f"{compiled.name}: argument {spec.name} is a numpy array: "
                              "launch_kernel takes DeviceArrays (kernel[grid, block](...) "
                              "copies numpy arrays in and out)")
        if not isinstance(value, (int, np.integer)):
            raise LaunchError(f"{compiled.name}: argument {spec.name} is a pointer; pass a "
                              f"DeviceArray or a device address, not {type(value).__name__}")
    elif spec.kind in _INT_KINDS and not isinstance(value, (int, np.integer, np.bool_)):
        raise LaunchError(f"{compiled.name}: argument {spec.name} is {spec.kind}; got "
                          f"{type(value).__name__} {value!r}")
    elif spec.kind in SMALL_BYTES:
        value = ScalarType(spec.kind).narrow(value)
    return value


def stage_host_arrays(compiled, args, stream):
    """Numba's host-array rule: each numpy array given for an array argument is
    checked, copied to a device array for the launch, and copied back after it.
    A DeviceArray view that is not C-contiguous (``d[::2]``, ``d.T``) is staged the
    same way through a contiguous device copy: kernels index arrays in C order.
    Mapped host arrays (umd.mapped_array) go in place; an object with
    ``__cuda_array_interface__`` goes as the DeviceArray :func:`as_cuda_array` makes.
    Returns the arguments to pass and the (staged copy, original) pairs to copy back."""
    from .array import DeviceArray, as_cuda_array, is_cuda_array, to_device
    user = _layout(compiled)[1]
    named = isinstance(args, dict)
    if not named and all(spec.kind != "ptr" or (type(value) is DeviceArray and value.is_c_contiguous())
                         for spec, value in zip(user, args)):
        return args, []             # the common launch: device arrays in C order, nothing to stage
    items = [(a, args.get(a.name)) for a in user] if named else list(zip(user, args))
    out = dict(args) if named else list(args)
    back = []
    for k, (spec, value) in enumerate(items):
        if spec.kind != "ptr":
            continue
        if isinstance(value, np.ndarray) and hasattr(value, "ptr"):
            # mapped host memory (umd.mapped_array): used in place
            if value.device is not stream.device or not value.flags.c_contiguous:
                raise LaunchError(f"{compiled.name}: argument {spec.name} is mapped memory of "
                                  "another device, or a strided view of it; kernels take C-contiguous "
                                  "mapped arrays of their stream's device")
            continue
        if not isinstance(value, (DeviceArray, np.ndarray)) and is_cuda_array(value):
            value = as_cuda_array(value, device=stream.device)     # another library's array
            out[spec.name if named else k] = value
        if isinstance(value, DeviceArray) and not value.is_c_contiguous():
            check_array(compiled, spec, value)
            back.append((value.copy(stream), value))
            out[spec.name if named else k] = back[-1][0]
            continue
        if not isinstance(value, np.ndarray):
            continue
        check_array(compiled, spec, value)
        dev = to_device(np.ascontiguousarray(value), stream=stream)     # kernels index in C order
        if value.flags.writeable:
            back.append((dev, value))
        out[spec.name if named else k] = dev
    return out, back


def const_arrays(device, compiled) -> dict:
    """The kernel's constant arrays (umd.const.array_like) on ``device``: uploaded at its
    first launch there, kept for the device's life like the code itself."""
    if not compiled.consts:
        return {}
    key = bytes(compiled.code_object)
    arrays = device.const_arrays.get(key)
    if arrays is None:
        from .array import to_device
        arrays = {k: to_device(v, device=device) for k, v in compiled.const_arrays().items()}
        device.const_arrays[key] = arrays
    return arrays


def load_kernel(device, compiled):
    """The device's LoadedKernel for ``compiled`` (uploaded on first use)."""
    image = bytes(compiled.code_object)
    loaded = device.kernels.get(image)
    if loaded is None:
        loaded = libvgpu.code_object_load(device.lv, image)
        device.kernels[image] = loaded
        device.programs[loaded.code_va] = compiled
        debug.log(DebugFlag.CACHE, f"loaded kernel {compiled.name}: {len(loaded.obj.code)} bytes of code "
                                   f"at {loaded.code_va:#x}")
    elif debug.FLAGS:       # the hot path: no message formatted for nothing
        debug.log(DebugFlag.CACHE, f"kernel {compiled.name} already loaded at {loaded.code_va:#x}")
    return loaded


@traced("kernel", lambda compiled, *a, **k: compiled.name,
        lambda compiled, grid, block, args=(), stream=None, sharedmem=0, captured=None: {"grid": list(_dims("grid", grid, MAX_GRID_DIM)),
                                                            "block": list(_dims("block", block, MAX_BLOCK_THREADS))})
def launch_kernel(compiled, grid, block, args=(), stream=None, sharedmem: int = 0,
                  captured: dict | None = None) -> None:
    """Queue ``compiled`` on ``stream`` (default stream) over ``grid`` workgroups of
    ``block`` threads, with ``sharedmem`` bytes of dynamic shared memory per block
    (launch_lds_bytes; a cooperative kernel is also limited to the blocks that can be
    resident, check_cooperative). Raises LaunchError for a bad grid, block or argument
    (ArgumentTypeError, also a TypeError, for an array of the wrong dtype or
    dimensions); numpy arrays are copied in and, after the kernel, back (the call then
    waits); with VGPU_LAUNCH_BLOCKING=1 waits and raises GPUFault/GPUHang here.
    ``compiled`` may also be a `@umd.kernel`, compiled (or loaded from the cache) here."""
    if not isinstance(compiled, CompiledKernel) and callable(getattr(compiled, "compile", None)):
        compiled = compiled.compile()      # a umd.kernel.Kernel (kernel.py imports this module)
    grid = _dims("grid", grid, MAX_GRID_DIM)
    block = _dims("block", block, MAX_BLOCK_THREADS)
    if math.prod(block) > MAX_BLOCK_THREADS:
        raise LaunchError(f"block {block} has {math.prod(block)} threads; at most {MAX_BLOCK_THREADS}")
    lds = launch_lds_bytes(compiled, sharedmem)
    s = current_stream(stream)
    check_cooperative(compiled, grid, block, sharedmem, device=s.device)
    loaded = load_kernel(s.device, compiled)
    if lds != loaded.lds_bytes:         # dynamic shared memory: the launch's LDS size
        loaded = _WithLds(loaded, lds)
    required = tuple(loaded.obj.block)
    if any(required) and required != block:
        raise LaunchError(f"{compiled.name} requires block {required}, launched with {block}")
    args, back = stage_host_arrays(compiled, args, s)
    printer = buf = on_retire = None
    if compiled.prints:
        printer = s.device.print_buffers()
        buf = printer.acquire()

        def on_retire():
            printer.report(buf, compiled)
    try:
        kernarg, bos = pack_args(compiled, grid, block, args, const_arrays(s.device, compiled), buf,
                                 sharedmem, captured)
    except BaseException:
        if buf is not None:
            printer.release(buf)
        raise
    if debug.FLAGS:
        debug.log(DebugFlag.API, f"launch {compiled.name} grid={grid} block={block} stream={s.name} "
                                 f"kernargs={kernarg.hex()}")
    profiler.launch_alone(s, compiled.name, grid, block, lambda st: st.dispatch(
        loaded, grid, block, kernarg, f"DISPATCH {compiled.name} {grid}x{block}", bos, compiled,
        on_retire))
    for dev, host in back:               # waits for the kernel, as Numba's copy back does
        if not isinstance(host, np.ndarray):        # a strided DeviceArray view
            host.copy_from_host(dev.copy_to_host(stream=s), s)
        elif host.flags.c_contiguous:
            dev.copy_to_host(out=host, stream=s)
        else:
            host[...] = dev.copy_to_host(stream=s)
    if debug.LAUNCH_BLOCKING:
        s.synchronize()
