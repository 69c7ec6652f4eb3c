"""PartitionedGpu: a GPU split into N partitions (`vgpu mount --partitions N`,
kmd/partition.py), each driven by its own kmd.device.Device.

amdgpu keeps one amdgpu_device and gives each compute partition (amdgpu_xcp.c) a
DRM device of its own, with its own render node, ring schedulers and memory
partition. vgpu goes one step further for isolation, as MIG does: each partition
is a whole Device with its own lock, rings, watchdogs, interrupt ring, VRAM and GTT
heaps, contexts, reset counter and limits, so nothing one partition's clients do (a
hang and its reset, a fault, a full heap, a slow teardown under the lock) reaches
another's. What the partitions share is kmd.partition.Shared: the kernel log, the
BO store, the devcoredump numbering and the tracepoints.

vdev serves a PartitionedGpu as it serves a Device (vdev.kmd_interface.KmdGpu): the
mount-wide views (kmsg, bo/, prime/, sync/, proc/, devcoredump, tracing) answer for
every partition; each partition's nodes, sysfs and debugfs come from its Device.
"""
from __future__ import annotations

import time

from . import partition as _partition, pci_hotplug as _pci_hotplug
from .devcoredump import CoredumpStore
from .device import MiB, Device
from .kmsg import KernelLog
from .shmem import ShmemStore
from .trace import Stream, Tracer


class PartitionedGpu:
    """`count` partitions of one GPU with `vram_size` and `gtt_size` in all. Raises
    ValueError for a count the GPU cannot take (kmd.partition.split), and
    kmd.shmem.StoreError as Device does. `device_options` go to every partition's
    Device (timeout, limits, ...)."""

    def __init__(self, count: int, vram_size: int = 512 * MiB, gtt_size: int = 1024 * MiB,
                 shm_dir: str | None = None, huge_pages: bool = False, **device_options):
        parts = _partition.split(count, vram_size, gtt_size)
        self.store = ShmemStore(vram_size + gtt_size, shm_dir, huge=huge_pages)
        self.shared = _partition.Shared(KernelLog(), self.store, CoredumpStore(), Tracer())
        self.partitions: list[Device] = []
        try:
            for p in parts:
                self.partitions.append(Device(p.vram_size, p.gtt_size, partition=p, shared=self.shared,
                                              **device_options))
        except BaseException:
            self.shutdown()
            raise
        # vdev's own lines (refused accesses, internal errors) go under the first
        # partition's name, the PCI function that holds the whole device's files.
        self.kmsg = self.partitions[0].kmsg
        self.trace = self.shared.trace

    def bo_by_offset(self, offset: int):
        return next((bo for d in self.partitions if (bo := d.bo_by_offset(offset)) is not None), None)

    def prime_by_token(self, token: int):
        return next((ex for d in self.partitions if (ex := d.prime_by_token(token)) is not None), None)

    def sync_file_by_token(self, token: int):
        return next((ex for d in self.partitions if (ex := d.sync_file_by_token(token)) is not None), None)

    def client_files(self) -> dict:
        """proc/<pid>/fdinfo/<client-id> of every partition's files (client ids are
        unique across the partitions; one process may hold files of several)."""
        out: dict = {}
        for d in self.partitions:
            for pid, entry in d.client_files().items():
                out.setdefault(pid, {"fdinfo": {}})["fdinfo"].update(entry["fdinfo"])
        return out

    def devcoredumps(self) -> dict[int, str]:
        return self.shared.coredumps.snapshot()

    def tracing_files(self) -> dict:
        return {**self.trace.files(), "vgpu_timeline": Stream(self.open_timeline)}

    def open_timeline(self):
        """A recording of every partition: one header naming all their rings,
        memory totals and clients."""
        heads = [d.timeline_header() for d in self.partitions]
        header = {"type": "header", "ts": time.monotonic(), "clock": heads[0]["clock"],
                  "rings": [r for h in heads for r in h["rings"]],
                  "clients": [c for h in heads for c in h["clients"]],
                  **{k: sum(h[k] for h in heads) for k in ("vram_total", "gtt_total", "vram_used", "gtt_used")}}
        return self.trace.open_recording(header)

    def pci_rescan(self) -> int:
        """sys/bus/pci/rescan: probe every removed partition (PCI function) again;
        how many came back (kmd/pci_hotplug.py)."""
        return sum(d.pci_rescan() for d in self.partitions)

    def pci_bus_files(self) -> dict:
        return _pci_hotplug.bus_files(self)

    def shutdown(self) -> None:
        """Stop every partition's engines, then remove the shared BO store."""
        for d in self.partitions:
            d.shutdown()
        self.store.close()
