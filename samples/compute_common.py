"""What the compute samples share: a device, a context, mapped buffers, kernels
assembled from samples/kernels/*.s, and a submit on the compute ring.

Everything one run allocates is freed in reverse order on exit (an ExitStack).
"""
import os

import libvgpu
from libvgpu.code_object import code_object_load
from session import Session
from vgpu import asm, uapi

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
COMPUTE = uapi.AMDGPU_HW_IP_COMPUTE


class ComputeSession(Session):
    """Kernels and the compute ring on top of a Session."""

    def load_kernel(self, name: str):
        """Assemble samples/kernels/<name>.s and upload it (code_object_load)."""
        path = os.path.join(KERNELS, f"{name}.s")
        with open(path) as f:
            image = asm.assemble(f.read(), path).pack()
        kernel = self.stack.enter_context(code_object_load(self.dev, image))
        o = kernel.obj
        print(f"  kernel {o.name}: {len(o.code) // 8} instructions, {o.sgprs} SGPRs, {o.vgprs} VGPRs, "
              f"{o.lds_bytes} bytes LDS, at GPU VA {kernel.code_va:#x} (read+exec)")
        return kernel

    def submit(self, ib: libvgpu.Pm4Ib) -> libvgpu.CsRequest:
        """Write the IB into its own BO and queue it on comp_1.0.0."""
        data = ib.tobytes()
        buf = self.alloc(len(data), "IB", flags=uapi.AMDGPU_VM_PAGE_READABLE)
        buf.cpu[:len(data)] = data
        req = libvgpu.CsRequest(COMPUTE, [libvgpu.IbInfo(buf.va, len(ib))])
        seq = libvgpu.cs_submit(self.ctx, req)
        print(f"  submitted {len(ib)} dwords of PM4 on comp_1.0.0: seq {seq}")
        return req

    def wait(self, req: libvgpu.CsRequest) -> None:
        """Wait for the job's fence (raises OSError with the fence's error)."""
        libvgpu.cs_query_fence_status(libvgpu.fence_of(self.ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
