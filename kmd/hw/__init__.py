"""Emulated GPU hardware: MMU page tables, SDMA engines, the IH ring.

`VGPU_HW=ref` selects the pure-Python twin (kmd.hw.ref) instead of the Cython
core (kmd.hw._core); both have the same API and behaviour (docs/hw.md).
"""
import os

if os.environ.get("VGPU_HW") == "ref":
    from kmd.hw.ref import PageTable, SdmaEngine
else:
    from kmd.hw._core import PageTable, SdmaEngine

from kmd.hw.ih import IhEntry, InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault, PinnedBuffers
from kmd.hw.sdma import SdmaIb, SdmaResult

__all__ = ["PageTable", "SdmaEngine", "InterruptRing", "IhEntry", "GpuFault", "PinnedBuffers",
           "SdmaResult", "SdmaIb", "PTE_READ", "PTE_WRITE", "PTE_EXEC"]
