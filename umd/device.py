"""The umd Device: one open render node of a vgpu mount, checked for a KMD this
runtime can drive, and everything the runtime keeps per device (memory pool,
IB buffers, event cells, loaded kernels, streams); and the current device.

The mount is ``VGPU_MOUNT`` or ``/tmp/vgpu``; :func:`get_device` opens it on first
use and makes it current, as CUDA's primary context is made on the first call.

This module is the bottom of the runtime's objects: streams, events and arrays are
made for a Device and keep it (``.device``); they import this module for the
current device when they are given none, and it imports none of them (docs/umd.md,
"Device").
"""
from __future__ import annotations

import errno
import os
import weakref
from typing import NamedTuple

import libvgpu
from vgpu import uapi
from vgpu.paths import node_path

from . import debug, memcheck
from .attributes import compute_capability, device_attribute
from .debug import DebugFlag
from .errors import UMDError, VersionMismatch
from .memory import EventSlots, IbPool

DEFAULT_MOUNT = "/tmp/vgpu"

#: The KMD interface this runtime is written against (kmd/info.py VERSION): the
#: driver name (amdgpu's, as a vgpu device answers like amdgpu 3.x), the major
#: version (a different major is a different ABI) and the lowest minor that has
#: everything used here (the compute ring, RELEASE_MEM timestamps, syncobjs).
REQUIRED_DRIVER = "amdgpu"
#: A real amdgpu device says "AMD GPU" here: it runs AMD's ISA, not vISA, so the
#: description must name vgpu.
REQUIRED_DESC = "vgpu"
REQUIRED_MAJOR = 3
REQUIRED_MINOR = 49
#: DRM capabilities the runtime relies on, with what it uses them for.
REQUIRED_CAPS = {
    uapi.DRM_CAP_TIMESTAMP_MONOTONIC: ("DRM_CAP_TIMESTAMP_MONOTONIC", "event timestamps"),
    uapi.DRM_CAP_SYNCOBJ: ("DRM_CAP_SYNCOBJ", "cross-stream synchronisation"),
}
#: Hardware IPs and their minimum ring counts.
REQUIRED_IPS = {uapi.AMDGPU_HW_IP_DMA: ("DMA (SDMA)", 1), uapi.AMDGPU_HW_IP_COMPUTE: ("COMPUTE", 1)}

_UPGRADE_KMD = ("upgrade the vgpu package that runs the mount (the KMD is the `vgpu mount` daemon), "
                "then unmount and mount again")
_UPGRADE_UMD = "upgrade umd (it ships in the same vgpu package: pip install -U vgpu)"


def check_kmd(dev: libvgpu.Device) -> None:
    """Refuse a KMD this runtime cannot drive, saying what to upgrade.

    Raises :class:`VersionMismatch`."""
    v = dev.version
    where = dev.mount
    if v.name != REQUIRED_DRIVER or not v.desc.startswith(REQUIRED_DESC):
        raise VersionMismatch(f"{dev.node} is driven by {v.name!r} ({v.desc!r}), not vgpu's "
                              f"{REQUIRED_DRIVER!r} ({REQUIRED_DESC}...): point VGPU_MOUNT at a vgpu mount")
    have = f"{v.major}.{v.minor}.{v.patchlevel}"
    need = f"{REQUIRED_MAJOR}.{REQUIRED_MINOR}"
    if v.major < REQUIRED_MAJOR or (v.major == REQUIRED_MAJOR and v.minor < REQUIRED_MINOR):
        raise VersionMismatch(f"the vgpu KMD at {where} is version {have}, this umd needs {need} or "
                              f"newer: {_UPGRADE_KMD}")
    if v.major > REQUIRED_MAJOR:
        raise VersionMismatch(f"the vgpu KMD at {where} is version {have}, newer than the "
                              f"{REQUIRED_MAJOR}.x interface this umd speaks: {_UPGRADE_UMD}")
    for cap, (name, what) in REQUIRED_CAPS.items():
        try:
            value = libvgpu.get_cap(dev, cap)
        except libvgpu.VgpuError:
            value = 0
        if not value:
            raise VersionMismatch(f"the vgpu KMD {have} at {where} lacks {name} (needed for {what}): "
                                  f"{_UPGRADE_KMD}")
    for ip, (name, rings) in REQUIRED_IPS.items():
        have_rings = libvgpu.query_hw_ip_info(dev, ip).available_rings.bit_count()
        if have_rings < rings:
            raise VersionMismatch(f"the vgpu device at {where} has {have_rings} {name} ring(s), this umd "
                                  f"needs {rings}: {_UPGRADE_KMD}")


class MemoryInfo(NamedTuple):
    """Numba's ``Context.get_memory_info()``: bytes of VRAM free and in total."""
    free: int
    total: int


class Device:
    """An open vgpu device and the runtime's state for it: Numba's Device and its
    Context in one. Use :func:`get_device` (the current device), ``umd.gpus[i]`` or
    ``Device(path)``; ``close()`` frees everything in reverse order. ``with`` on a
    device of ``umd.gpus`` makes it current for the block (Numba's ``with
    cuda.gpus[i]:``); on one made with ``Device(path)`` it closes it at the end.

    ``id`` is its index in :func:`list_devices` (the mount's render nodes in minor
    order: a partition's number), ``pci_slot`` its PCI slot; Numba's attributes
    (``MULTIPROCESSOR_COUNT``, ``WARP_SIZE``...) are read from the KMD
    (umd/attributes.py).

    ``path`` (default ``VGPU_MOUNT``, else ``/tmp/vgpu``) is the mount point or a
    device node under it (``MOUNT/dev/dri/renderD128``, ``MOUNT/dev/dri/card0``):
    libvgpu.device_initialize opens either, and ``mount`` is always the mount point,
    where the runtime finds ``dev/kmsg`` and the crash dumps."""

    def __init__(self, path: str | os.PathLike | None = None):
        path = str(path or os.environ.get("VGPU_MOUNT") or DEFAULT_MOUNT)
        debug.log(DebugFlag.API, f"Device({path!r})")
        try:
            self.lv = libvgpu.device_initialize(path)
        except OSError as e:
            # libvgpu's message says what to do (mount one, use the render node...).
            raise UMDError(f"cannot open the vgpu device at {path}: {e.strerror or e}"
                           + (" (or set VGPU_MOUNT)" if e.errno == errno.ENOENT else "")) from e
        self.mount = str(self.lv.mount)
        try:
            check_kmd(self.lv)
            self.id, self.pci_slot = _find_node(self.lv)
            self.compute_capability = compute_capability(self.lv.info)
        except BaseException:
            self.lv.close()
            raise
        v = self.lv.version
        self.name = f"{v.name} {v.major}.{v.minor}.{v.patchlevel} ({v.desc})"
        self._listed = False          # kept by the device list (umd.gpus), see __enter__
        self._outer: list = []        # the devices current before each `with` of a listed one
        self.pool = memcheck.pool_for(self)
        self.ib_pool = IbPool(self.lv)
        self.kernels: dict[bytes, object] = {}    # code object bytes -> LoadedKernel
        self.const_arrays: dict[bytes, dict] = {}  # code object bytes -> its umd.const arrays
        self.programs: dict[int, object] = {}     # program VA -> compiled kernel (fault reports)
        self.streams: weakref.WeakSet = weakref.WeakSet()   # every live Stream adds itself
        self._default_stream = None    # made on first use by umd.stream.default_stream(device)
        self._event_slots: EventSlots | None = None
        self.deferred_buffers: list = []   # (GpuBuffer, [(stream, mark)]): umd/host.py's mapped memory
        self._print_buffers = None     # umd.kernel_print.PrintBuffers, made by the first print
        self.closed = False

    def synchronize(self) -> None:
        """Wait for every stream of the device; raises the first GPU error."""
        debug.log(DebugFlag.API, "synchronize()")
        for s in list(self.streams):
            s.synchronize()

    def event_slots(self) -> EventSlots:
        """The device's event timestamp cells (a GTT page is mapped on first use)."""
        if self._event_slots is None:
            self._event_slots = EventSlots(self.lv)
        return self._event_slots

    def print_buffers(self):
        """The device's print buffers (kernels that call print(), umd/kernel_print.py)."""
        if self._print_buffers is None:
            from .kernel_print import PrintBuffers
            self._print_buffers = PrintBuffers(self.lv)
        return self._print_buffers

    def close(self) -> None:
        """Wait for the device, then free kernels, buffers and the DRM file."""
        if self.closed:
            return
        self.closed = True
        try:
            for s in list(self.streams):
                try:
                    s.synchronize()
                except Exception:  # a failed stream must not keep the rest alive
                    pass
                s.destroy()
        finally:
            for k in self.kernels.values():
                k.free()
            self.kernels.clear()
            self.const_arrays.clear()
            self.ib_pool.free()
            for buf, _ in self.deferred_buffers:
                buf.free()
            self.deferred_buffers.clear()
            if self._event_slots is not None:
                self._event_slots.free()
            if self._print_buffers is not None:
                self._print_buffers.free()
            self.pool.release_all()
            self.lv.close()
            global _current
            if _current is self:
                _current = None

    def __getattr__(self, name: str):
        if name.isupper():
            return device_attribute(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def get_memory_info(self) -> MemoryInfo:
        """(free, total) bytes of the device's VRAM, from the KMD's memory info
        (AMDGPU_INFO_MEMORY): the heap less what every process has allocated; the
        pool's cached blocks count as allocated until :func:`umd.empty_cache`."""
        heap = libvgpu.query_heap_info(self.lv, uapi.AMDGPU_GEM_DOMAIN_VRAM)
        return MemoryInfo(max(heap.usable_heap_size - heap.heap_usage, 0), heap.total_heap_size)

    @property
    def device(self) -> "Device":
        """Numba's ``Context.device``: the device and its context are one object here."""
        return self

    def __enter__(self) -> "Device":
        if self._listed:
            self._outer.append(_current)
            set_device(self)
        return self

    def __exit__(self, *exc) -> None:
        if not self._listed:
            self.close()
            return
        global _current
        outer = self._outer.pop()
        _current = outer if outer is not None and not outer.closed else None

    def __repr__(self) -> str:
        return f"<umd.Device {self.mount}: {self.name}>"


def _find_node(lv: libvgpu.Device) -> tuple[int, str]:
    """(index, PCI slot) of the open node among the mount's devices (sysfs)."""
    node = os.path.realpath(lv.node)
    for i, d in enumerate(libvgpu.get_devices(lv.mount)):
        if node in (os.path.realpath(d.render), os.path.realpath(d.primary)):
            return i, d.pci_slot
    raise UMDError(f"{lv.node} is not among the devices {lv.mount}/sys/class/drm lists")


_current: Device | None = None
#: The devices of umd.gpus / list_devices / select_device, by the real path of their
#: node: one open Device per node for the process, as Numba has one context per device.
_listed: dict[str, Device] = {}


def _default_path() -> str:
    return str(os.environ.get("VGPU_MOUNT") or DEFAULT_MOUNT)


def _listed_device(path: str | os.PathLike) -> Device:
    """The process's Device for ``path`` (a node, or a mount: its render node), opened
    on first use."""
    key = os.path.realpath(node_path(path))
    dev = _listed.get(key)
    if dev is None or dev.closed:
        dev = Device(path)
        dev._listed = True
        _listed[key] = dev
    return dev


def list_devices(mount: str | os.PathLike | None = None) -> list[Device]:
    """Every device of the mount (default: the current device's, else VGPU_MOUNT's),
    in minor order: one, or one per partition (`vgpu mount --partitions N`). Each is
    opened once per process and kept until :func:`close`."""
    if mount is None:
        mount = _current.mount if _current is not None and not _current.closed else _default_path()
    try:
        nodes = libvgpu.get_devices(mount)
    except OSError as e:
        raise UMDError(f"cannot list the vgpu devices at {mount}: {e.strerror or e}; mount one with "
                       f"`vgpu mount {mount}` or set VGPU_MOUNT") from e
    return [_listed_device(d.render) for d in nodes]


def get_device() -> Device:
    """The current device: on first use, the device at VGPU_MOUNT (or /tmp/vgpu; the
    first partition of a partitioned mount), which is ``list_devices()[0]``."""
    global _current
    if _current is None or _current.closed:
        _current = _listed_device(_default_path())
    return _current


def set_device(dev: Device | str | os.PathLike) -> Device:
    """Make ``dev`` (a Device, or a path to open as :class:`Device` does) the current device."""
    global _current
    _current = dev if isinstance(dev, Device) else Device(dev)
    return _current


def select_device(device_id: int) -> Device:
    """Numba's select_device: make device ``device_id`` of :func:`list_devices` current."""
    devices = list_devices()
    if not 0 <= device_id < len(devices):
        raise UMDError(f"select_device({device_id}): the mount has {len(devices)} devices "
                       f"(0..{len(devices) - 1})")
    return set_device(devices[device_id])


def close_devices() -> None:
    """Numba's cuda.close(): wait for and close every device of the process (listed
    ones and the current one); the next call that needs a device opens it again."""
    global _current
    devices = list(_listed.values()) + ([_current] if _current is not None else [])
    _listed.clear()
    _current = None
    for dev in devices:
        dev.close()


def synchronize() -> None:
    """umd.synchronize(): wait for all work of the current device."""
    if _current is not None and not _current.closed:
        _current.synchronize()
