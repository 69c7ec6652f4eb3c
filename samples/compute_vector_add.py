"""c = a + b on the compute ring, with nothing between you and the hardware.

The kernel is hand-written vISA (samples/kernels/vector_add.s), assembled here with
vgpu.asm and uploaded to an executable BO (libvgpu.code_object_load). The kernel
arguments go to a kernarg BO whose VA is passed in USER_DATA_0/1 (s[0:1] at wave
start). The IB is raw PM4: SET_SH_REG for the program, resources, threads per group
and user data, DISPATCH_DIRECT, then RELEASE_MEM writing a 64-bit fence value that
the CPU checks after the CS fence signals. numpy checks the result.

    python samples/compute_vector_add.py --device /tmp/vgpu [--n 100000]
"""
import argparse
import struct

import numpy as np

import libvgpu
from compute_common import ComputeSession
from session import add_device_argument
from libvgpu import pm4
from vgpu import uapi
from vgpu.errors import exit_main

FENCE_VALUE = 0xC0DE0000_00000001


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_argument(p)
    p.add_argument("--n", type=int, default=100_000, help="elements (default 100000)")
    args = p.parse_args()
    n = args.n
    with ComputeSession(args.device) as s:
        kernel = s.load_kernel("vector_add")
        a, b, c = (s.alloc(4 * n, name, uapi.AMDGPU_GEM_DOMAIN_VRAM) for name in "abc")
        rng = np.random.default_rng(1)
        host_a = rng.standard_normal(n, dtype=np.float32)
        host_b = rng.standard_normal(n, dtype=np.float32)
        a.cpu[:4 * n] = host_a.tobytes()
        b.cpu[:4 * n] = host_b.tobytes()
        kernarg = s.alloc(kernel.obj.kernarg_size, "kernargs")
        kernarg.cpu[:kernel.obj.kernarg_size] = kernel.pack_args(a=a.va, b=b.va, c=c.va, n=n)
        fence = s.alloc(8, "fence")

        groups = -(-n // 64)
        ib = libvgpu.emit_dispatch(libvgpu.Pm4Ib(), kernel, grid=(groups, 1, 1),
                                   user_data=libvgpu.kernarg_user_data(kernarg.va))
        ib.release_mem(fence.va, FENCE_VALUE, pm4.DATA_SEL_64)
        print(f"  PM4 ({len(ib)} dwords):")
        for line in pm4.disasm_pm4(ib.dwords):
            print("    " + line.strip())
        req = s.submit(ib)
        s.wait(req)
        value, = struct.unpack("<Q", fence.cpu[:8])
        print(f"  CS fence seq {req.seq_no} signaled; RELEASE_MEM wrote {value:#x}")
        got = np.frombuffer(bytes(c.cpu[:4 * n]), np.float32)
        want = host_a + host_b
        bad = np.flatnonzero(got != want)
        if bad.size:
            i = bad[0]
            print(f"  check: {bad.size} of {n} elements differ, first c[{i}] = {got[i]} (want {want[i]})")
        else:
            print(f"  check: all {n} elements of c equal a + b")
        ok = not bad.size and value == FENCE_VALUE
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
