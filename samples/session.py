"""What every sample starts with: the --device argument, a device, a context, and
buffers allocated, CPU-mapped and GPU-mapped in one call (libdrm tests'
amdgpu_bo_alloc_and_map).

Everything a Session allocates is freed in reverse order when it closes (an ExitStack).
"""
import argparse
import contextlib
from dataclasses import dataclass

import libvgpu
from vgpu import uapi

DOMAIN_NAMES = {uapi.AMDGPU_GEM_DOMAIN_GTT: "GTT", uapi.AMDGPU_GEM_DOMAIN_VRAM: "VRAM"}


def add_device_argument(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """The --device option every sample takes: the mount point or a device node under it
    (MOUNT/dev/dri/renderD128, MOUNT/dev/dri/card0). Required unless ``default`` says
    what an omitted --device means.

    The path is only ever opened: libvgpu.device_initialize (or umd.Device, which calls
    it) takes either form, and the opened device's ``.mount`` is the mount point, for
    the files under it (dev/kmsg, sys/...). A sample never joins paths to --device."""
    what = "vgpu mount point, or a device node under it (MOUNT/dev/dri/renderD128 or MOUNT/dev/dri/card0)"
    if default is None:
        parser.add_argument("--device", required=True, help=what)
    else:
        parser.add_argument("--device", help=f"{what}; default: {default}")


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
