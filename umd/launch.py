"""Kernel launch: grid/block validation, argument packing, code-object upload, dispatch.

The compiler (umd.compiler) produces a ``CompiledKernel``; the contract (docs/umd.md):

- ``name``, ``code_object`` (a .vco image, ``vgpu.asm.assemble(...).pack()``),
  ``args`` (``ArgSpec(name, kind, offset, size)``, kind ``i32``/``u32``/``f32``/``ptr``),
  ``kernarg_size``, ``line_table`` ({PC byte offset from the entry: source line}),
  ``source_file``;
- ArgSpecs whose name starts with ``__`` are filled by the launch:
  ``__grid_dim_x/y/z`` and ``__block_dim_x/y/z`` (u32); the others take the
  caller's arguments, in order (or by name from a dict).

The kernarg segment is written at the top of the stream's compute IB buffer and its
VA goes to user data s[0:1] (libvgpu.kernarg_user_data). A code object is uploaded
once per device (cached by its bytes).
"""
from __future__ import annotations

import math
import struct

import numpy as np

import libvgpu

from . import debug
from .compiler import ArgSpec, CompiledKernel
from .debug import DebugFlag
from .errors import LaunchError
from .stream import current_stream

MAX_BLOCK_THREADS = 1024
MAX_GRID_DIM = (1 << 32) - 1
_FORMATS = {"ptr": "<Q", "u32": "<I", "i32": "<i", "f32": "<f"}
_HIDDEN = {"__grid_dim_x": ("grid", 0), "__grid_dim_y": ("grid", 1), "__grid_dim_z": ("grid", 2),
           "__block_dim_x": ("block", 0), "__block_dim_y": ("block", 1), "__block_dim_z": ("block", 2)}


def kernel_from_code_object(image: bytes, source_file: str = "", line_table: dict | None = None):
    """A CompiledKernel for a hand-written .vco: name and arguments from its metadata."""
    obj = libvgpu.code_object_parse(image)
    args = [ArgSpec(a.name, a.kind, a.offset, a.size) for a in obj.args]
    return CompiledKernel(name=obj.name, code_object=bytes(image), args=args, kernarg_size=obj.kernarg_size,
                          line_table=dict(line_table or {}), source_file=source_file)


def _dims(what: str, value, limit: int) -> tuple[int, int, int]:
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


def pack_args(compiled, grid, block, args) -> tuple[bytes, list]:
    """The kernarg bytes and the BOs the pointer arguments point into."""
    specs = list(compiled.args)
    user = [a for a in specs if not a.name.startswith("__")]
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
    size = max([compiled.kernarg_size] + [a.offset + a.size for a in specs])
    out = bytearray(size)
    bos = []
    dims = {"grid": grid, "block": block}
    for spec in specs:
        if spec.name.startswith("__"):
            if spec.name not in _HIDDEN:
                raise LaunchError(f"{compiled.name}: unknown hidden argument {spec.name}")
            where, i = _HIDDEN[spec.name]
            value = dims[where][i]
        else:
            value = values[user.index(spec)]
            if spec.kind == "ptr":
                if hasattr(value, "ptr"):
                    bo = getattr(value, "bo", None)
                    if bo is not None:
                        bos.append(bo)
                    value = value.ptr
                elif not isinstance(value, (int, np.integer)):
                    raise LaunchError(f"{compiled.name}: argument {spec.name} is a pointer; pass a "
                                      f"DeviceArray or a device address, not {type(value).__name__}")
            elif spec.kind in ("i32", "u32") and not isinstance(value, (int, np.integer)):
                raise LaunchError(f"{compiled.name}: argument {spec.name} is {spec.kind}; got "
                                  f"{type(value).__name__} {value!r}")
        if spec.kind not in _FORMATS:
            raise LaunchError(f"{compiled.name}: argument {spec.name} of unknown kind {spec.kind!r}")
        try:
            struct.pack_into(_FORMATS[spec.kind], out, spec.offset,
                             float(value) if spec.kind == "f32" else int(value))
        except (struct.error, TypeError, ValueError) as e:
            raise LaunchError(f"{compiled.name}: argument {spec.name}={value!r} does not fit "
                              f"{spec.kind}: {e}") from None
    return bytes(out), bos


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
    else:
        debug.log(DebugFlag.CACHE, f"kernel {compiled.name} already loaded at {loaded.code_va:#x}")
    return loaded


def launch_kernel(compiled, grid, block, args=(), stream=None) -> None:
    """Queue ``compiled`` on ``stream`` (default stream) over ``grid`` workgroups of
    ``block`` threads. Raises LaunchError for a bad grid, block or argument;
    with VGPU_LAUNCH_BLOCKING=1 waits and raises GPUFault/GPUHang here."""
    grid = _dims("grid", grid, MAX_GRID_DIM)
    block = _dims("block", block, MAX_BLOCK_THREADS)
    if math.prod(block) > MAX_BLOCK_THREADS:
        raise LaunchError(f"block {block} has {math.prod(block)} threads; at most {MAX_BLOCK_THREADS}")
    s = current_stream(stream)
    loaded = load_kernel(s.device, compiled)
    required = tuple(loaded.obj.block)
    if any(required) and required != block:
        raise LaunchError(f"{compiled.name} requires block {required}, launched with {block}")
    kernarg, bos = pack_args(compiled, grid, block, args)
    debug.log(DebugFlag.API, f"launch {compiled.name} grid={grid} block={block} stream={s.name} "
                             f"kernargs={kernarg.hex()}")
    s.dispatch(loaded, grid, block, kernarg, f"DISPATCH {compiled.name} {grid}x{block}", bos, compiled)
    if debug.LAUNCH_BLOCKING:
        s.synchronize()
