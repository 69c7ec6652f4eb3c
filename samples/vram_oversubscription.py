"""Oversubscribing VRAM: twice as many VRAM BOs as the device has VRAM, all in use.

Before vgpu evicted anything, the first VRAM BO past the device's VRAM failed with
ENOMEM. Now a VRAM allocation that does not fit evicts the least recently used idle
BOs to GTT (their bytes stay: a BO's file is mapped at a new physical address), and a
job that names a BO in its BO list gets it back in VRAM at submission, evicting
others. Everything runs, just with more memory traffic. Here:

  1. allocate --factor x VRAM worth of VRAM BOs (--bo-mib each), CPU-map them all;
  2. the CPU writes seeded random bytes into the first half of every BO;
  3. one SDMA job per BO copies its first half onto its second half, in a BO list of
     its own (the BO comes back to VRAM for it), BO after BO, LRU order: the worst case;
  4. the CPU checks both halves of every BO through the mappings it kept all along
     (sha256 against the expected bytes) and prints the evictions and bytes moved
     (AMDGPU_INFO_NUM_EVICTIONS, AMDGPU_INFO_NUM_BYTES_MOVED).

    python samples/vram_oversubscription.py --device /tmp/vgpu
    python samples/vram_oversubscription.py --device /tmp/vgpu --total-mib 128 --json
"""
import argparse
import hashlib
import json
import sys
import time

import numpy as np

import libvgpu
from session import Session, add_device_argument
from vgpu import uapi
from vgpu.errors import exit_main

MiB = 1 << 20


def counters(dev) -> tuple[int, int]:
    """(evictions, bytes moved) since the device came up."""
    def u64(query):
        return int.from_bytes(libvgpu.query_info(dev, query, 8), "little")
    return u64(uapi.AMDGPU_INFO_NUM_EVICTIONS), u64(uapi.AMDGPU_INFO_NUM_BYTES_MOVED)


def expected(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


class Run(Session):
    def __init__(self, device: str, bo_bytes: int, total: int | None, factor: float):
        super().__init__(device)
        self.vram = libvgpu.query_heap_info(self.dev, uapi.AMDGPU_GEM_DOMAIN_VRAM).total_heap_size
        total = total or int(self.vram * factor)
        self.count = max(1, total // bo_bytes)
        self.ib = self.alloc(4096, "IB", uapi.AMDGPU_GEM_DOMAIN_GTT)
        print(f"VRAM {self.vram // MiB} MiB; allocating {self.count} VRAM BOs of {bo_bytes // MiB} MiB "
              f"= {self.count * bo_bytes // MiB} MiB ({self.count * bo_bytes / self.vram:.2f}x VRAM)")
        fits = self.vram // bo_bytes
        self.bos = []
        for i in range(self.count):
            self.bos.append(self.alloc(bo_bytes, f"BO {i}", uapi.AMDGPU_GEM_DOMAIN_VRAM))
        if self.count > fits:
            print(f"all {self.count} allocated: BO {fits} and later used to fail with ENOMEM")

    def run(self) -> tuple[bool, str, float]:
        half = len(self.bos[0].cpu) // 2
        for i, m in enumerate(self.bos):
            m.cpu[:half] = expected(i, half)
        t0 = time.monotonic()
        for i, m in enumerate(self.bos):
            packets = libvgpu.SdmaIb().copy_linear(m.va + half, m.va, half)
            data = packets.tobytes()
            self.ib.cpu[: len(data)] = data
            with libvgpu.bo_list_create(self.dev, [self.ib.bo, m.bo]) as bo_list:
                req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(self.ib.va, len(packets))],
                                        resources=bo_list)
                libvgpu.cs_submit(self.ctx, req)
            if not libvgpu.cs_query_fence_status(libvgpu.fence_of(self.ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE):
                raise SystemExit(f"BO {i}: the job's fence did not signal")
        seconds = time.monotonic() - t0
        whole, ok = hashlib.sha256(), True
        for i, m in enumerate(self.bos):
            want = expected(i, half)
            got = bytes(m.cpu)
            whole.update(got)
            if got[:half] != want or got[half:] != want:
                ok = False
                print(f"  BO {i}: WRONG bytes ({'first' if got[:half] != want else 'second'} half)")
        return ok, whole.hexdigest(), seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(p)
    p.add_argument("--bo-mib", type=int, default=8, help="size of each BO in MiB (default 8)")
    p.add_argument("--factor", type=float, default=2.0, help="BOs as a multiple of VRAM (default 2)")
    p.add_argument("--total-mib", type=int, help="MiB of BOs in all (overrides --factor)")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the results (bench)")
    args = p.parse_args()
    with Run(args.device, args.bo_mib * MiB, args.total_mib and args.total_mib * MiB, args.factor) as r:
        ev0, moved0 = counters(r.dev)
        ok, checksum, seconds = r.run()
        ev, moved = counters(r.dev)
        ev, moved = ev - ev0, moved - moved0
        print(f"{r.count} copy jobs in {seconds:.3f} s; evictions {ev}, bytes moved {moved // MiB} MiB")
        print(f"checksum of all BOs: sha256 {checksum} ({'as expected' if ok else 'WRONG'})")
        oversubscribed = r.count * len(r.bos[0].cpu) > r.vram
        shown = ok and (ev > 0 or not oversubscribed)
        if args.json:
            print(json.dumps({"vram": r.vram, "bos": r.count, "bo_bytes": len(r.bos[0].cpu), "seconds": seconds,
                              "evictions": ev, "bytes_moved": moved, "ok": ok}))
    print("PASS" if shown else "FAIL")
    sys.exit(0 if shown else 1)


if __name__ == "__main__":
    exit_main(main)   # a mistake ends in one line, not a traceback (docs/errors.md)
