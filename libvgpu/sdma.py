"""SDMA packet builder (libdrm tests' sdma packet macros, tinygrad-style chaining).

    ib = SdmaIb().write_linear(dst_va, [1, 2, 3]).fence(fence_va, 1)
    bo.cpu_map()[:len(ib) * 4] = ib.tobytes()

One encoder per packet; the encodings are the hardware ABI in vgpu.sdma.
"""
from vgpu.sdma import *  # noqa: F401,F403
from vgpu.sdma import SdmaIb, sdma_header  # noqa: F401
