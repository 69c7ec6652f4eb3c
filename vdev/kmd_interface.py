"""What vdev needs from the KMD: the whole vdev-to-kmd contract (docs/internals.md,
"vdev and the KMD").

vdev reaches the driver only through the members listed here, and imports kmd only
through this module, except where ``vdev.daemon`` builds the device it serves
(with the mount options of ``vdev.options``, which reads ``kmd.limits.Limits``):
``kmd.device.Device(vram_size=, gtt_size=, timeout=, shm_dir=, limits=)``, or
``kmd.gpu.PartitionedGpu(count, ...)`` for ``--partitions``, which raise
``kmd.shmem.StoreError`` (an OSError whose ``strerror`` says what to do) when the BO
store cannot be set up. ``kmd.device.Device`` is the implementation;
tests/vdev/test_kmd_interface.py checks that it has every member with a compatible
signature, so a change on the KMD side that would break vdev fails there first.
Besides the device, vdev shows the PCIe root port the GPU sits behind, which no
device drives: ``root_port_files()`` (kmd/pci.py), a provider of fixed entries.

Threads (docs/vdev.md, "Threads"). vdev calls the KMD from the trio loop that
serves every client, so a method called there must answer without waiting for GPU
work; what may wait (``close_file``, the write of a writable debugfs entry) vdev
runs in a ``trio.to_thread`` worker, and a ``PendingReply`` on the loop, woken by its
callbacks. The
KMD calls back into vdev only through callbacks it is handed, from its own threads
and possibly under the device lock: ``SyncExport.notify_on_change`` and a
PendingReply's ``subscribe(wake)``; they queue work on the loop and return.

Errors. A refusal is a :class:`KmdError` (its ``errno`` becomes the failing
syscall's); any other exception from the KMD is a bug, which vdev reports as EIO
plus a kmsg line ``vdev: internal error in <op>: ...``.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol, Tuple, Union, runtime_checkable

from kmd.errors import KmdError
from kmd.fdinfo import OwnedText
from kmd.ioctl import PendingReply, Reply
from kmd.pci import root_port_files
from kmd.trace import Reader, Stream

__all__ = ["KmdError", "PendingReply", "Reply", "KernelLog", "BufferObject", "PrimeExport", "SyncExport",
           "KmdGpu", "KmdDevice", "PartitionShare", "ProviderEntry", "OwnedText", "Reader", "Stream",
           "root_port_files"]

#: A generated file in a provider's answer: ``read()`` -> its text, taken once per
#: open(); or ``(read, write)`` for a writable entry, ``write(data: bytes)`` run in
#: a worker thread (it may wait for engines; a KmdError fails the write()), or
#: ``(read, write, mode)`` with the file's mode (0200: a write-only attribute).
#: An ``OwnedText(read, uid)`` is a file only ``uid`` (and root) may read, mode 0400
#: (a client's fdinfo); a nested dict is a directory of entries. A ``Stream``
#: (trace_pipe, vgpu_timeline): each open gets a ``Reader`` from its
#: ``open_reader()``, whose ``read(size)`` never waits (b"" when empty) and whose
#: ``subscribe(wake) -> cancel`` calls ``wake()`` once, from any thread, when
#: entries may have come; ``close()`` at release.
ProviderEntry = Union[Callable[[], str], Tuple[Callable[[], str], Callable[[bytes], object]],
                      Tuple[Callable[[], str], Callable[[bytes], object], int], OwnedText, Stream]


@runtime_checkable
class KernelLog(Protocol):
    """``Device.kmsg``, the log behind MOUNT/dev/kmsg. Thread-safe."""

    def log(self, message: str) -> object:
        """Append one dmesg-style line (the KMD adds timestamp and device name)."""

    def text(self) -> str:
        """Every line kept so far, each ending in a newline."""


@runtime_checkable
class BufferObject(Protocol):
    """What ``bo/<offset-hex>`` shows of a BO. ``mmap_offset`` and ``path`` never
    change while the BO lives."""

    uid: int            # the creator's uid
    mmap_offset: int    # GEM_MMAP's fake offset, the name under bo/
    path: str           # its shared-memory file, the symlink's target (docs/memory.md)

    def may_access(self, uid: int) -> bool:
        """True if ``uid`` may readlink bo/<hex> (and open the file behind it): root,
        the creator, a uid that imported the BO through PRIME."""


@runtime_checkable
class PrimeExport(Protocol):
    """What ``prime/<token-hex>`` names: an exported BO (kmd/prime.py)."""

    token: int          # the name under prime/
    uid: int            # the exporter's uid (the file's owner)
    size: int           # the BO's size: the file's size

    def may_access(self, uid: int) -> bool:
        """True if ``uid`` may open the file: root and the uids that may map the BO."""

    def hold(self) -> bool:
        """An open starts holding the export (a dma-buf fd); False if it is gone."""

    def unhold(self) -> None:
        """A release stops holding it; may free the BO. Takes the device lock: vdev
        calls it in a worker thread."""

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` of the BO's bytes at ``offset`` (b"" past the end). Does not wait."""

    def write(self, offset: int, data: bytes) -> int:
        """Store into the BO; returns the bytes stored (KmdError ENOSPC past the end)."""


@runtime_checkable
class SyncExport(Protocol):
    """What ``sync/<token-hex>`` names: an exported syncobj or sync file
    (docs/syncobj.md)."""

    token: int          # the name under sync/
    uid: int            # the exporter's uid: the only one (with root) that may open it

    def signaled(self) -> bool:
        """True once its fence has signalled (poll() then answers POLLIN)."""

    def status(self) -> str:
        """The text a read() returns ("active\\n", "signaled\\n", ...)."""

    def notify_on_change(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once, when the export may have become signalled (at once if
        it may be already). ``fn`` runs in the signalling thread, possibly under the
        device lock: it must only hand work off and never raise."""


@runtime_checkable
class PartitionShare(Protocol):
    """``KmdDevice.partition``: which share of the GPU a device drives (kmd/partition.py).
    vdev names its nodes after it: card<index>, renderD<128 + index>, PCI function
    ``pci_slot``, debugfs dri/<index>."""

    index: int
    pci_slot: str


@runtime_checkable
class KmdGpu(Protocol):
    """The mount-wide views of the KMD behind one mount: a ``kmd.device.Device``
    (the whole GPU, its own only partition) or a ``kmd.gpu.PartitionedGpu``
    (``vgpu mount --partitions N``), whose lookups answer for every partition."""

    kmsg: KernelLog
    partitions: list   # the KmdDevice of each partition, in index order

    def bo_by_offset(self, offset: int) -> BufferObject | None:
        """The live BO whose mmap offset is ``offset``, or None (never created, or
        freed). Does not wait."""

    def prime_by_token(self, token: int) -> PrimeExport | None:
        """The export behind ``prime/<token-hex>``, or None once nothing holds it.
        Does not wait."""

    def sync_file_by_token(self, token: int) -> SyncExport | None:
        """The export behind ``sync/<token-hex>``, or None once its exporter closed
        it. Does not wait."""

    def client_files(self) -> dict[str, dict]:
        """The tree of proc/: {pid: {"fdinfo": {client id: OwnedText}}}, one file per
        open DRM file (docs/observability.md); asked at each lookup and listing, the
        read functions run on the loop and do not wait."""

    def tracing_files(self) -> dict[str, ProviderEntry]:
        """The entries of sys/kernel/debug/tracing/ (nested dicts are directories),
        as sysfs_files() (docs/tracing.md)."""

    def devcoredumps(self) -> dict[int, str]:
        """The crash dumps kept now, {N: text}: sys/class/devcoredump/devcd<N>/data
        (docs/crash-dumps.md). Asked at each lookup and listing; does not wait."""

    def pci_bus_files(self) -> dict[str, ProviderEntry]:
        """The files of sys/bus/pci/ (``rescan``): (read, write, mode) each
        (kmd/pci_hotplug.py)."""

    def shutdown(self) -> None:
        """Stop the engines and remove the BO store; the daemon calls it once, after
        the file system is unmounted."""


@runtime_checkable
class KmdDevice(KmdGpu, Protocol):
    """The KMD of one device (one partition): what its nodes card<i> and renderD<128+i>,
    its sysfs directory and its debugfs dri/<i> reach."""

    partition: PartitionShare
    unplugged: bool   # removed from the PCI bus (kmd/pci_hotplug.py): its nodes and sysfs are gone

    def open_file(self, pid: int, uid: int, comm: str = "?", render: bool = True) -> object:
        """A new DRM file for one open() of card0 (``render=False``) or renderD128
        (``render=True``) by process ``pid`` of ``uid`` named ``comm``. The file is
        opaque to vdev: it is only passed back to ioctl() and close_file(). Does not
        wait."""

    def close_file(self, f: object) -> None:
        """The last close of ``f``: free every handle, VA, context, job and token it
        held. May wait for the file's jobs: vdev calls it in a worker thread. Called
        once per file."""

    def check_permission(self, f: object, request: int) -> None:
        """Raise the KmdError the dispatch would raise for ``f`` and ``request`` before
        its handler (EBADF, ENODEV, ENOTTY, EOPNOTSUPP, EACCES), or return. Asked
        when copying the request's pointed-to data failed: that errno comes after."""

    def refused_before_dispatch(self, f: object, request: int, arg: bytes, error: int, tid: int = 0) -> None:
        """Record a request the ioctl path refused before ``ioctl`` (its pointers could
        not be read), for the trace recordings."""
        ...

    def ioctl(self, f: object, request: int, arg: bytes, extra: bytes = b"", tid: int = 0,
              tag: int | None = None) -> Union[Reply, PendingReply]:
        """Run one request (an ioctl with its pointed-to data gathered, or a parsed
        frame; docs/design.md section 3) for file ``f``; ``tid`` is the calling thread
        and ``tag`` a frame's tag, for the trace records.
        Never waits for GPU work (it runs on the loop): the answer is a ``Reply``
        (result, arg: the updated struct, extra: the out-data) or a ``PendingReply``
        (kmd/ioctl.py): ``ready()``, ``subscribe(wake) -> cancel``, ``deadline``
        and ``finish() -> Reply``, which vdev drives on the loop, woken by the fence
        callbacks (vdev.nodes.wait_pending). Raises KmdError for a refused request
        (also from ``finish()``, failing the read())."""

    def timestamp_query(self, f: object) -> Optional[int]:
        """What AMDGPU_INFO TIMESTAMP would answer ``f`` now, or None when that request
        must go through ``ioctl`` (refused, or recorded). Takes no lock and changes
        nothing: vdev.ioctl.fast answers the clock read with it, in C."""

    def sysfs_files(self) -> dict[str, ProviderEntry]:
        """The entries of sys/class/drm/card<i>/device/, asked at each lookup and
        listing. The read functions run on the loop: they must not wait."""

    def debugfs_files(self) -> dict[str, ProviderEntry]:
        """The entries of sys/kernel/debug/dri/<i>/, as sysfs_files()."""
