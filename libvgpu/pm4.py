"""PM4 packet builder for the compute ring (tinygrad-style chaining).

    ib = (Pm4Ib().set_program(code_va, rsrc1(vgprs, sgprs), rsrc2(2))
          .set_num_threads(64).set_user_data([kernarg_lo, kernarg_hi])
          .dispatch_direct(groups).release_mem(fence_va, 1))
    bo.cpu_map()[:len(ib) * 4] = ib.tobytes()

One encoder per packet; the encodings and register offsets are the hardware ABI in
vgpu.pm4 (docs/pm4.md).
"""
from vgpu.pm4 import *  # noqa: F401,F403
from vgpu.pm4 import Pm4Ib, pm4_type3_header, rsrc1, rsrc2  # noqa: F401
