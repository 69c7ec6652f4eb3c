"""Compute and memory partitions: how `vgpu mount --partitions N` splits the GPU
(docs/kmd.md, "Partitions"; after amdgpu_xcp.c and the MI300's SPX/DPX/... modes).

The emulated GPU has TOTAL_CUS compute units (the compute engine's worker threads)
and TOTAL_SDMA SDMA engines. A partition owns a whole share of each, a share of
VRAM and of GTT, and its own command processor (an XCC's MEC), so N must divide both
counts. Each partition is driven by its own kmd.device.Device (kmd/gpu.py): its
own rings, schedulers, watchdogs, interrupt ring, heaps, contexts and reset
counter, which is what makes a hang, a reset, a fault or an out-of-memory in one
invisible to the others. What they share is listed in `Shared`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vgpu.paths import pci_slot

from .vram import PAGE_SIZE

if TYPE_CHECKING:   # light at run time: `vgpu mount` checks --partitions with it
    from .devcoredump import CoredumpStore
    from .kmsg import KernelLog
    from .shmem import ShmemStore
    from .trace import Tracer

# The whole GPU (kmd/info.py: 1 SE x 1 SH x NUM_CU_PER_SH compute units, RINGS[DMA]
# SDMA engines; tests/kmd/test_partitions.py holds them together).
TOTAL_CUS = 2
TOTAL_SDMA = 2
# amdgpu's names of the compute partition modes by partition count (amdgpu_xcp.h,
# AMDGPU_SPX_PARTITION_MODE ...) and of the memory partition modes (NPS1, NPS2...).
COMPUTE_MODES = {1: "SPX", 2: "DPX", 3: "TPX", 4: "QPX"}
# Compute ring names are amdgpu's on gfx9 (gfx_v9_0_compute_ring_init: "comp_%d.%d.%d"
# of me, pipe, queue): the KMD's compute queues are on MEC1 (me 1), whose 4 pipes
# have 8 queues each, given out across the pipes first ("allocate horizontally across
# pipes", gfx_v9_0_sw_init), so ring k is queue k // 4 of pipe k % 4. vgpu numbers
# the compute rings of the whole GPU in partition order (partition p's ring i is the
# GPU's ring p * rings + i), so partitions have distinct names and the unpartitioned
# GPU's are an MI100's (docs/kmd.md, "Rings").
MEC_ME = 1
MEC_PIPES = 4
MEC_QUEUES_PER_PIPE = 8


def compute_ring_name(k: int) -> str:
    """amdgpu's name of the GPU's compute ring `k` (0-based); ValueError past MEC1's queues."""
    if not 0 <= k < MEC_PIPES * MEC_QUEUES_PER_PIPE:
        raise ValueError(f"compute ring {k}: MEC1 has {MEC_PIPES * MEC_QUEUES_PER_PIPE} queues")
    return f"comp_{MEC_ME}.{k % MEC_PIPES}.{k // MEC_PIPES}"


def supported_counts() -> list[int]:
    """The partition counts this GPU can take: those that divide its CUs and SDMA engines."""
    return [n for n in range(1, min(TOTAL_CUS, TOTAL_SDMA) + 1)
            if TOTAL_CUS % n == 0 and TOTAL_SDMA % n == 0]


@dataclass(frozen=True)
class Partition:
    """One partition's share: `index` of `count`, the physical compute units and SDMA
    engines it owns, its VRAM and GTT sizes. It is PCI function `index` of the device
    (`pci_slot`), with DRM minors card<index> and renderD<128 + index>."""

    index: int
    count: int
    cus: tuple[int, ...]
    sdma: tuple[int, ...]
    vram_size: int
    gtt_size: int

    @classmethod
    def whole(cls, vram_size: int, gtt_size: int) -> "Partition":
        """The unpartitioned GPU (SPX, NPS1)."""
        return cls(0, 1, tuple(range(TOTAL_CUS)), tuple(range(TOTAL_SDMA)), vram_size, gtt_size)

    @property
    def pci_slot(self) -> str:
        return pci_slot(self.index)

    @property
    def compute_mode(self) -> str:
        return COMPUTE_MODES.get(self.count, f"{self.count}PX")

    @property
    def memory_mode(self) -> str:
        return f"NPS{self.count}"

    @property
    def sdma_names(self) -> list[str]:
        return [f"sdma{i}" for i in self.sdma]

    def compute_ring_names(self, gpu_rings: int) -> list[str]:
        """The names of this partition's share of the GPU's `gpu_rings` compute rings
        (an equal part, as of the SDMA engines; compute_ring_name)."""
        rings = gpu_rings // self.count
        return [compute_ring_name(self.index * rings + i) for i in range(rings)]

    def describe(self) -> str:
        """One line for kmsg and `vgpu info`."""
        return (f"partition {self.index} of {self.count} ({self.compute_mode}, {self.memory_mode}): "
                f"CUs {','.join(map(str, self.cus))}, {' '.join(self.sdma_names)}, "
                f"VRAM {self.vram_size >> 20} MiB, GTT {self.gtt_size >> 20} MiB")


def split(count: int, vram_size: int, gtt_size: int) -> list[Partition]:
    """The `count` partitions of a GPU with `vram_size` of VRAM and `gtt_size` of GTT:
    consecutive CUs and SDMA engines, and VRAM and GTT cut in equal parts (rounded
    down to 4 KiB). ValueError, with what to do, for a count the GPU cannot take."""
    counts = supported_counts()
    if isinstance(count, bool) or not isinstance(count, int) or count not in counts:
        raise ValueError(
            f"--partitions {count}: the GPU has {TOTAL_CUS} compute units and {TOTAL_SDMA} SDMA engines, "
            f"and each partition needs a whole share of both, so it can be split into "
            f"{' or '.join(map(str, counts))} partition(s) "
            f"({', '.join(COMPUTE_MODES.get(n, str(n)) for n in counts)})")
    vram, gtt = (vram_size // count) & ~(PAGE_SIZE - 1), (gtt_size // count) & ~(PAGE_SIZE - 1)
    if vram < PAGE_SIZE or gtt < PAGE_SIZE:
        raise ValueError(f"--partitions {count}: VRAM {vram_size} and GTT {gtt_size} bytes leave "
                         f"less than {PAGE_SIZE} bytes of each per partition")
    cus, sdma = TOTAL_CUS // count, TOTAL_SDMA // count
    return [Partition(i, count, tuple(range(i * cus, (i + 1) * cus)), tuple(range(i * sdma, (i + 1) * sdma)),
                      vram, gtt)
            for i in range(count)]


@dataclass
class Shared:
    """What the partitions of one GPU share: one kernel log (each partition writes
    its lines under its own PCI name), one store of BO files, one devcoredump
    numbering (sys/class/devcoredump is the system's), one set of tracepoints."""

    kmsg: KernelLog
    store: ShmemStore
    coredumps: CoredumpStore
    trace: Tracer
