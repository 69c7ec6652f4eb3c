"""Emulated GPU hardware: memory apertures (the VRAM and GTT windows), MMU page
tables, SDMA engines, compute units, the L2 cache model, the IH ring.

`VGPU_HW=ref` selects the pure-Python twins (kmd.hw.ref, kmd.hw.cu_ref,
kmd.hw.aperture_ref) instead of the Cython core (kmd.hw._core, kmd.hw._aperture);
both have the same API and behaviour (docs/hw.md).
"""
import os

#: The pure-Python twins are in use (VGPU_HW=ref): modules with a C fast path of their
#: own (kmd/hw/cp.py) take their Python lines then too.
REFERENCE = os.environ.get("VGPU_HW") == "ref"

if REFERENCE:
    from kmd.hw.aperture_ref import Aperture, bus_repairs
    from kmd.hw.cu_ref import ComputeEngine
    from kmd.hw.l2_ref import L2Cache
    from kmd.hw.ref import PageTable, SdmaEngine
    from kmd.hw.userq_ref import userq_done, userq_wait
else:
    from kmd.hw._aperture import Aperture, bus_repairs
    from kmd.hw._core import ComputeEngine, L2Cache, PageTable, SdmaEngine, userq_done, userq_wait

from kmd.hw.ih import IhEntry, InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault, PinnedBuffers
from kmd.hw.sdma import SdmaIb, SdmaResult

__all__ = ["REFERENCE", "Aperture", "bus_repairs", "PageTable", "SdmaEngine", "ComputeEngine", "L2Cache", "InterruptRing", "IhEntry", "GpuFault",
           "PinnedBuffers", "SdmaResult", "SdmaIb", "PTE_READ", "PTE_WRITE", "PTE_EXEC", "userq_wait", "userq_done"]
