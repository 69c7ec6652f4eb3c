"""vISA code objects: parse a `.vco`, upload its code to an executable BO, and emit
the PM4 that dispatches it (what a ROCm loader and radv's compute path do).

    with code_object_load(dev, open("k.vco", "rb").read()) as k:
        args = k.pack_args(a=a_va, b=b_va, c=c_va, n=n)        # kernarg bytes
        ib = emit_dispatch(Pm4Ib(), k, grid=(n // 64, 1, 1), user_data=[lo, hi])

The format is the code-object header of vgpu.isa (docs/isa.md 8): counts, entry
point, code, JSON metadata naming the kernel arguments.
"""
from __future__ import annotations

import errno
import json
import struct
from dataclasses import dataclass, field

from vgpu import isa, uapi
from vgpu import pm4 as P

from .bo import bo_alloc
from .errors import error_for
from .handle import Handle
from .va import bo_va_op, va_range_alloc

PAGE_SIZE = 4096
# 8/16-bit and bool arguments sit widened in a 32-bit slot (docs/isa.md 8): the caller
# passes the value as the kernel should see it (-3 for an i8, 0/1 for a b1).
_ARG_FORMATS = {"ptr": "<Q", "u32": "<I", "i32": "<i", "f32": "<f", "u64": "<Q", "i64": "<q",
                "f64": "<d", "u8": "<i", "i8": "<i", "u16": "<i", "i16": "<i", "b1": "<i"}


@dataclass(frozen=True)
class KernelArg:
    name: str
    kind: str       # ptr | u32 | i32 | f32 | u64 | i64 | f64 | u8 | i8 | u16 | i16 | b1
    offset: int
    size: int


@dataclass
class CodeObject:
    """A parsed `.vco`: the code and what a dispatch needs."""

    code: bytes
    name: str
    sgprs: int
    vgprs: int
    lds_bytes: int
    entry: int
    kernarg_size: int
    args: list[KernelArg] = field(default_factory=list)
    block: tuple[int, int, int] = (0, 0, 0)


def code_object_parse(data: bytes) -> CodeObject:
    """Parse a `.vco` image. VgpuInvalidArgument (EINVAL) when it is not one, or
    its counts are outside what the compute units accept."""
    try:
        h = isa.VcoHeader.unpack(data)
        if h.code_offset + h.code_size > len(data) or h.meta_offset + h.meta_size > len(data):
            raise ValueError("code object truncated")
        if h.code_size % isa.INST_BYTES or h.entry % isa.INST_BYTES or h.entry >= max(h.code_size, 1):
            raise ValueError(f"code of {h.code_size} bytes with entry {h.entry}: not whole instructions")
        if not (isa.MIN_SGPRS <= h.sgprs <= isa.MAX_SGPRS and isa.MIN_VGPRS <= h.vgprs <= isa.MAX_VGPRS
                and 0 <= h.lds_bytes <= isa.MAX_LDS_BYTES):
            raise ValueError(f"{h.sgprs} SGPRs, {h.vgprs} VGPRs, {h.lds_bytes} bytes of LDS out of range")
        meta = json.loads(bytes(data[h.meta_offset:h.meta_offset + h.meta_size]) or b"{}")
        args = [KernelArg(a["name"], a["kind"], a["offset"], a["size"]) for a in meta.get("args", [])]
    except (ValueError, KeyError, TypeError) as e:
        raise error_for(errno.EINVAL, f"code_object_parse: {e}") from e
    return CodeObject(bytes(data[h.code_offset:h.code_offset + h.code_size]), meta.get("name", "kernel"),
                      h.sgprs, h.vgprs, h.lds_bytes, h.entry, h.kernarg_size, args, tuple(h.block))


class LoadedKernel(Handle):
    """A code object resident in GPU memory: its BO (mapped readable|executable),
    the program address and resource words. Free with free() or `with`."""

    _repr_fields = ("name", ("code_va", "#x"))

    def __init__(self, obj: CodeObject, bo, va, code_va: int):
        self.obj, self.bo, self.va, self.code_va = obj, bo, va, code_va
        self.rsrc1 = P.rsrc1(obj.vgprs, obj.sgprs)

    @property
    def name(self) -> str:
        return self.obj.name

    @property
    def lds_bytes(self) -> int:
        return self.obj.lds_bytes

    def rsrc2(self, user_sgprs: int) -> int:
        return P.rsrc2(user_sgprs, self.obj.lds_bytes)

    def pack_args(self, **values) -> bytes:
        """The kernarg segment: each named argument at its offset (metadata order)."""
        out = bytearray(self.obj.kernarg_size)
        missing = [a.name for a in self.obj.args if a.name not in values]
        unknown = set(values) - {a.name for a in self.obj.args}
        if missing or unknown:
            raise error_for(errno.EINVAL, f"pack_args({self.name}): missing {missing}, unknown {sorted(unknown)}")
        for a in self.obj.args:
            struct.pack_into(_ARG_FORMATS[a.kind], out, a.offset, values[a.name])
        return bytes(out)

    def free(self) -> None:
        """Unmap the code from the GPU VA, release the VA range and free the BO.
        Idempotent."""
        if self.bo is None:
            return
        bo, self.bo = self.bo, None
        bo_va_op(bo, 0, bo.size, self.va.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
        self.va.free()
        bo.free()


def code_object_load(dev, data: bytes | CodeObject,
                     domain: int = uapi.AMDGPU_GEM_DOMAIN_VRAM) -> LoadedKernel:
    """Upload a code object's code to a new BO mapped READABLE|EXECUTABLE (not
    writeable: a kernel cannot overwrite itself). The entry point lands on a
    256-byte boundary, as COMPUTE_PGM_LO requires. Half-done work is undone."""
    obj = data if isinstance(data, CodeObject) else code_object_parse(data)
    pad = -obj.entry % P.PGM_ADDR_ALIGN
    size = -(-(pad + len(obj.code)) // PAGE_SIZE) * PAGE_SIZE
    bo = bo_alloc(dev, size, PAGE_SIZE, domain)
    va = None
    try:
        bo.cpu_map()[pad:pad + len(obj.code)] = obj.code
        bo.cpu_unmap()
        va = va_range_alloc(dev, size, PAGE_SIZE)
        bo_va_op(bo, 0, size, va.address,
                 uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_EXECUTABLE)
    except BaseException:
        if va is not None:
            va.free()
        bo.free()
        raise
    return LoadedKernel(obj, bo, va, va.address + pad + obj.entry)


def emit_dispatch(ib: P.Pm4Ib, kernel: LoadedKernel, grid, block=None, user_data=()) -> P.Pm4Ib:
    """Append SET_SH_REG (program, resources, threads per group, user data) and
    DISPATCH_DIRECT of `grid` workgroups. `block` defaults to the kernel's required
    block size; `user_data` (at most 16 dwords) lands in s0.. (by convention s[0:1]
    is the kernarg VA: pass `kernarg_user_data(va)`)."""
    block = tuple(block or kernel.obj.block)
    if len(block) != 3 or min(block) < 1:
        raise error_for(errno.EINVAL, f"emit_dispatch({kernel.name}): block {block} (the kernel requires none)")
    grid = tuple(grid) + (1,) * (3 - len(grid))
    user_data = list(user_data)
    ib.set_program(kernel.code_va, kernel.rsrc1, kernel.rsrc2(len(user_data)))
    ib.set_num_threads(*block)
    if user_data:
        ib.set_user_data(user_data)
    return ib.dispatch_direct(*grid)


def kernarg_user_data(kernarg_va: int) -> list[int]:
    """user_data[0:2] for a kernarg segment at `kernarg_va` (s[0:1] at wave start)."""
    return [kernarg_va & 0xFFFFFFFF, kernarg_va >> 32]
