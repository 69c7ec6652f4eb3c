"""What every sample starts with: a device, a context, and buffers allocated, CPU-mapped
and GPU-mapped in one call (libdrm tests' amdgpu_bo_alloc_and_map).

Everything a Session allocates is freed in reverse order when it closes (an ExitStack).
"""
import contextlib
from dataclasses import dataclass

import libvgpu
from vgpu import uapi

DOMAIN_NAMES = {uapi.AMDGPU_GEM_DOMAIN_GTT: "GTT", uapi.AMDGPU_GEM_DOMAIN_VRAM: "VRAM"}


@dataclass
class MappedBo:
    bo: libvgpu.Bo
    cpu: memoryview
    va: int


class Session:
    def __init__(self, device: str):
        self.stack = contextlib.ExitStack()
        self.dev = self.stack.enter_context(libvgpu.device_initialize(device))
        self.ctx = self.stack.enter_context(libvgpu.cs_ctx_create(self.dev))
        v = self.dev.version
        print(f"opened {self.dev.node}: {v.name} {v.major}.{v.minor}.{v.patchlevel}, context {self.ctx.id}")

    def alloc(self, size: int, what: str, domain: int = uapi.AMDGPU_GEM_DOMAIN_GTT,
              flags: int = 0) -> MappedBo:
        """A BO of `size` bytes (rounded up to pages), its CPU map, a VA range and the GPU
        mapping (`flags`: AMDGPU_VM_PAGE_*, 0 = read/write/execute)."""
        size = -(-size // 4096) * 4096
        bo = self.stack.enter_context(libvgpu.bo_alloc(self.dev, size, 4096, domain))
        cpu = bo.cpu_map()
        self.stack.callback(bo.cpu_unmap)
        va = self.stack.enter_context(libvgpu.va_range_alloc(self.dev, size, 4096))
        libvgpu.bo_va_op(bo, 0, size, va.address, flags)
        self.stack.callback(libvgpu.bo_va_op, bo, 0, size, va.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
        print(f"  {what}: {size} bytes in {DOMAIN_NAMES[domain]}, handle {bo.handle}, "
              f"GPU VA {va.address:#x}")
        return MappedBo(bo, cpu, va.address)

    def close(self) -> None:
        self.stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
