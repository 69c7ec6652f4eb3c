"""The libdrm amdgpu SDMA test flow, shared by the three sdma_* samples.

Mirrors tests/amdgpu/basic_tests.c in libdrm: ctx create -> BO alloc + CPU map
(GTT and VRAM) -> VA map -> packets written into an IB BO -> BO list -> cs_submit
on the DMA ring -> query fence status with an infinite timeout -> CPU check.
"""
import argparse
import sys

import libvgpu
from session import MappedBo, Session, add_device_argument
from vgpu import uapi

DOMAINS = {"GTT": uapi.AMDGPU_GEM_DOMAIN_GTT, "VRAM": uapi.AMDGPU_GEM_DOMAIN_VRAM}


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    add_device_argument(p)
    p.add_argument("--size", type=int, default=64 * 1024, help="bytes per buffer (default 64 KiB)")
    p.add_argument("--ring", type=int, default=0, help="SDMA ring: 0 (sdma0) or 1 (sdma1)")
    return p.parse_args()


class SdmaTest(Session):
    """The SDMA flow on top of a Session."""

    def submit(self, ib_packets: libvgpu.SdmaIb, bos: list[MappedBo], ring: int) -> None:
        """Write the IB into its own GTT BO, submit it on the DMA ring, wait."""
        data = ib_packets.tobytes()
        ib = self.alloc(len(data), "IB")
        ib.cpu[: len(data)] = data
        with libvgpu.bo_list_create(self.dev, [b.bo for b in bos] + [ib.bo]) as bo_list:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib.va, len(ib_packets))],
                                    resources=bo_list, ring=ring)
            seq = libvgpu.cs_submit(self.ctx, req)
            print(f"  submitted {len(ib_packets)} dwords on sdma{ring}: seq {seq}")
            signaled = libvgpu.cs_query_fence_status(libvgpu.fence_of(self.ctx, req),
                                                     libvgpu.AMDGPU_TIMEOUT_INFINITE)
            print(f"  fence seq {seq}: {'signaled' if signaled else 'BUSY'}")
            if not signaled:
                raise SystemExit("fence did not signal")

def check(name: str, got: bytes, want: bytes) -> bool:
    """Compare every byte the CPU sees with what the GPU was asked to produce."""
    if got == want:
        print(f"  check {name}: all {len(want)} bytes match")
        return True
    bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    if bad >= min(len(got), len(want)):
        print(f"  check {name}: MISMATCH in length: got {len(got)} bytes, want {len(want)}")
        return False
    print(f"  check {name}: MISMATCH at byte {bad}: got {got[bad]:#04x}, want {want[bad]:#04x}")
    return False


def finish(ok: bool) -> None:
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)
