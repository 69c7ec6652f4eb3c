"""Run compiled kernels on the reference executor (kmd.hw.cu_ref) or the Cython core,
no mount needed.

    out = run(compiled, grid, block, n, 2.0, x, y)   # numpy arrays are copied in and back

Arrays go into the rig's arena (each 256-byte aligned); the kernarg segment is packed
from CompiledKernel.args the way umd.launch does it, __grid_dim_*/__block_dim_* and the
arrays' __shape_<arg>_<k> included (a flat Ptr argument's one dimension is its size).
"""
from __future__ import annotations

import struct

import numpy as np

from kmd.hw import _core, cu_ref, ref
from umd.compiler import prints
from umd.types import SMALL_BYTES, ScalarType
from tests.hw.isa_gen import CODE_VA, KARG_VA, MEM_VA, Rig
from vgpu.asm import CodeObject


def _dim3(v):
    v = (v,) if isinstance(v, int) else tuple(v)
    return v + (1,) * (3 - len(v))


def run(compiled, grid, block, *args, mem_size: int = 4 << 20, engine: str = "reference",
        print_bytes: int = 64 << 10, printed: dict | None = None, shared_bytes: int = 0,
        status: str = "ok", captured: dict | None = None):
    """`engine`: "reference" (kmd.hw.cu_ref) or "cython" (kmd.hw._core, two workers).
    A kernel that prints gets a print buffer of `print_bytes` record bytes; `printed`
    (a dict) receives its "lines" and the number "dropped" (umd.compiler.prints).
    `shared_bytes`: the launch's dynamic shared memory (`k[grid, block, 0, bytes]`),
    after the kernel's static LDS as umd.launch places it; `status`: the result's;
    `captured`: the numpy arrays standing for the device arrays the kernel names as
    globals (hidden __global_<k>, copied back as arguments are)."""
    grid, block = _dim3(grid), _dim3(block)
    if engine == "cython":
        rig = Rig(_core.ComputeEngine, _core.PageTable, mem_size=mem_size)
    else:
        rig = Rig(cu_ref.ComputeEngine, ref.PageTable, mem_size=mem_size)
    obj = CodeObject.unpack(compiled.code_object)
    rig.code[:len(obj.code)] = np.frombuffer(obj.code, np.uint8)
    user = [a for a in compiled.args if not a.name.startswith("__")]
    assert len(user) == len(args), (len(user), len(args))
    values = dict(zip([a.name for a in user], args))
    for d, k in zip("xyz", range(3)):
        values[f"__grid_dim_{d}"] = grid[k]
        values[f"__block_dim_{d}"] = block[k]
    values.update(captured or {})
    for spec in user + [a for a in compiled.args if a.name.startswith("__global_")]:
        arr = values[spec.name]
        if spec.kind == "ptr":
            shape = arr.shape if getattr(spec, "ndim", 0) else (arr.size,)
            for k, extent in enumerate(shape):
                values[f"__shape_{spec.name}_{k}"] = extent
    values["__dynamic_shared_bytes"] = shared_bytes
    values.update({k: v.copy() for k, v in compiled.const_arrays().items()})   # umd.const arrays
    if compiled.prints:
        buf = np.zeros(prints.HEADER_WORDS + print_bytes // 4, np.uint32)
        buf[2] = print_bytes
        values[prints.ARG_NAME] = buf
    placed, off = [], 0
    for spec in compiled.args:
        v = values[spec.name]
        if spec.kind == "ptr":
            arr = np.ascontiguousarray(v)
            rig.put(off, arr)
            placed.append((v, off))
            raw = struct.pack("<Q", MEM_VA + off)
            off = (off + arr.nbytes + 255) // 256 * 256
        elif spec.kind == "f32":
            raw = struct.pack("<f", v)
        elif spec.kind == "f64":
            raw = struct.pack("<d", v)
        elif spec.kind in ("i64", "u64"):
            raw = struct.pack("<Q", int(v) & 0xFFFFFFFFFFFFFFFF)
        elif spec.kind in SMALL_BYTES:
            raw = struct.pack("<i", ScalarType(spec.kind).narrow(v))   # as umd.launch packs it
        else:
            raw = struct.pack("<I", int(v) & 0xFFFFFFFF)
        rig.karg[spec.offset:spec.offset + spec.size] = np.frombuffer(raw, np.uint8)
    result = rig.engine.dispatch(rig.pt, CODE_VA + obj.entry, sgprs=obj.sgprs,
                                 vgprs=obj.vgprs, lds_bytes=obj.lds_bytes + shared_bytes, grid=grid,
                                 block=block, user_data=[KARG_VA & 0xFFFFFFFF, KARG_VA >> 32])
    assert result.status == status, (result, compiled.asm_text)
    for arr, o in placed:
        arr[...] = rig.mem[o:o + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    if compiled.prints and printed is not None:
        printed["lines"], printed["dropped"] = prints.decode(compiled.prints,
                                                            values[prints.ARG_NAME].tobytes())
    return result
