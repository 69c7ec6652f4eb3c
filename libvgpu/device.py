"""Device: one open DRM file of a vgpu mount (libdrm's amdgpu_device_handle).

``device_initialize`` opens the render node, reads VERSION and DEV_INFO, and
builds the user-space VA manager from DEV_INFO, as libdrm's
``amdgpu_device_initialize`` does. Threads may share one Device as they share a
libdrm device: each ioctl is a pwrite()/pread() pair tagged with the calling
thread's id (docs/design.md section 3), so a thread blocked in a wait never holds
up another's ioctl. Only an fd that cannot take offsets (a socket or pipe
standing in for the control file) falls back to plain write()/read() pairs,
serialised by a lock.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from pathlib import Path
from typing import NamedTuple

from vgpu import uapi
from vgpu.paths import mount_point, node_path

from .errors import error_for, from_oserror
from .handle import Handle
from .ioctl import drm_ioctl
from .va import VaManager



class DrmVersion(NamedTuple):
    """drmGetVersion's answer."""
    major: int
    minor: int
    patchlevel: int
    name: str
    date: str
    desc: str


class Device(Handle):
    """An open vgpu DRM file. Use :func:`device_initialize` to make one; release
    it with :meth:`close` (or :meth:`free`, the same call, or ``with``)."""

    _repr_fields = ("node", "fd")

    def __init__(self, fd: int, node: Path):
        self.fd = fd
        self.node = node
        self.mount = mount_point(node)  # MOUNT/dev/dri/<node>
        # A control file takes request tags; anything else (no offsets) gets plain
        # write()/read() pairs under the lock, which also serialises close.
        self._tagged = stat.S_ISREG(os.fstat(fd).st_mode)
        self._lock = threading.RLock()
        self._bos: dict[int, object] = {}  # GEM handle -> Bo, for unmapping at deinit
        self.version: DrmVersion | None = None
        self.info: uapi.drm_amdgpu_info_device | None = None
        self.vamgr: VaManager | None = None
        self.vamgr_32: VaManager | None = None

    # -- the one path to the device -------------------------------------------------
    def ioctl(self, request: int, struct, extra: bytes = b"", reply_extra: int = 0):
        """:func:`libvgpu.ioctl.drm_ioctl` on this file, tagged with the calling
        thread's id (on an fd without offsets: untagged, serialised)."""
        fd = self.fd
        if fd < 0:
            raise error_for(errno.EBADF, f"{uapi.ioctl_name(request)}: device is closed")
        if self._tagged:
            return drm_ioctl(fd, request, struct, extra, reply_extra, tag=threading.get_native_id())
        with self._lock:
            if self.fd < 0:
                raise error_for(errno.EBADF, f"{uapi.ioctl_name(request)}: device is closed")
            return drm_ioctl(self.fd, request, struct, extra, reply_extra)

    @property
    def major_version(self) -> int:
        return self.version.major

    @property
    def minor_version(self) -> int:
        return self.version.minor

    def free(self) -> None:
        device_deinitialize(self)

    close = free


class DrmDevice(NamedTuple):
    """One device of a mount, as drmGetDevices2 lists it: its PCI slot and its
    primary and render nodes."""
    pci_slot: str
    primary: Path
    render: Path


def get_devices(path: str | os.PathLike) -> list[DrmDevice]:
    """The devices of the mount ``path`` names (its mount point or a node under it),
    in minor order, as libdrm's drmGetDevices2 finds them: the nodes of
    ``MOUNT/sys/class/drm`` grouped by the PCI device each one's ``device`` link
    leads to. One on a plain mount; one per partition on a ``vgpu mount
    --partitions N`` (docs/kmd.md, "Partitions"). Raises :class:`VgpuError` when
    the mount has no sysfs to read."""
    mount = mount_point(path)
    drm = mount / "sys" / "class" / "drm"
    nodes: dict[str, dict[str, tuple[int, Path]]] = {}
    try:
        for name in os.listdir(drm):
            for prefix, kind, base in (("card", "primary", 0), ("renderD", "render", 128)):
                if name.startswith(prefix) and name[len(prefix):].isdigit():
                    slot = os.path.basename(os.path.realpath(drm / name / "device"))
                    nodes.setdefault(slot, {})[kind] = (int(name[len(prefix):]) - base,
                                                        mount / "dev" / "dri" / name)
    except OSError as e:
        raise from_oserror(e, f"list {drm}") from e
    found = [(n["primary"][0], DrmDevice(slot, n["primary"][1], n["render"][1]))
             for slot, n in nodes.items() if "primary" in n and "render" in n]
    return [d for _, d in sorted(found)]


def device_initialize(path: str | os.PathLike) -> Device:
    """Open a vgpu device: ``path`` is the mount point (the render node is used)
    or a node (``MOUNT/dev/dri/card0`` / ``renderD128``). Like
    amdgpu_device_initialize: queries VERSION and DEV_INFO, builds the VA managers.
    Raises :class:`VgpuError`; nothing stays open on failure.
    """
    node = node_path(path)
    try:
        fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise from_oserror(e, f"open {node}") from e
    return device_initialize_fd(fd, node)


def device_initialize_fd(fd: int, node: str | os.PathLike) -> Device:
    """:func:`device_initialize` on an already open control file ``fd`` (the
    Device owns it from now on, and closes it on failure); ``node`` is its path
    under the mount, used to find ``MOUNT/bo/``."""
    dev = Device(fd, Path(node))
    try:
        dev.version = get_version(dev)
        dev.info = query_info_struct(dev, uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)
        dev.vamgr, dev.vamgr_32 = VaManager.from_dev_info(dev.info)
    except BaseException:
        os.close(fd)
        dev.fd = -1
        raise
    return dev


def device_deinitialize(dev: Device) -> None:
    """Close the DRM file: live CPU maps are unmapped first (nothing to flush);
    the KMD frees every handle, context and VA of the file on close.
    Idempotent."""
    with dev._lock:
        if dev.fd < 0:
            return
        try:
            for bo in list(dev._bos.values()):
                bo._drop_mapping()
        finally:
            dev._bos.clear()
            fd, dev.fd = dev.fd, -1
            os.close(fd)


# -- queries ----------------------------------------------------------------------

def get_version(dev: Device) -> DrmVersion:
    """DRM_IOCTL_VERSION (drmGetVersion): ask for the lengths, then the strings."""
    v = uapi.drm_version()
    dev.ioctl(uapi.DRM_IOCTL_VERSION, v)
    lengths = (v.name_len, v.date_len, v.desc_len)
    v = uapi.drm_version(name_len=lengths[0], date_len=lengths[1], desc_len=lengths[2])
    _, extra = dev.ioctl(uapi.DRM_IOCTL_VERSION, v, reply_extra=sum(lengths))
    strings, pos = [], 0
    for n in lengths:
        strings.append(bytes(extra[pos:pos + n]).split(b"\0", 1)[0].decode("utf-8", "replace"))
        pos += n
    return DrmVersion(v.version_major, v.version_minor, v.version_patchlevel, *strings)


def get_cap(dev: Device, capability: int) -> int:
    """DRM_IOCTL_GET_CAP (drmGetCap): the value of ``DRM_CAP_*``."""
    cap = uapi.drm_get_cap(capability=capability)
    dev.ioctl(uapi.DRM_IOCTL_GET_CAP, cap)
    return cap.value


def query_info(dev: Device, info_id: int, size: int, **query) -> bytes:
    """AMDGPU_INFO (amdgpu_query_info): the raw answer, at most ``size`` bytes.

    ``query`` fills the request's union member, e.g.
    ``query_hw_ip={"type": AMDGPU_HW_IP_DMA, "ip_instance": 0}`` or
    ``query_fw=drm_amdgpu_query_fw(...)``.
    """
    req = uapi.drm_amdgpu_info(return_size=size, query=info_id)
    for member, value in query.items():
        if not hasattr(req, member) or member.startswith("_"):
            raise TypeError(f"drm_amdgpu_info has no query member {member!r}")
        if isinstance(value, dict):
            target = getattr(req, member)
            for field, v in value.items():
                setattr(target, field, v)
        else:
            setattr(req, member, value)
    _, answer = dev.ioctl(uapi.DRM_IOCTL_AMDGPU_INFO, req, reply_extra=size)
    return answer


def query_info_struct(dev: Device, info_id: int, cls, **query):
    """:func:`query_info` decoded into ``cls`` (a short answer reads as zero)."""
    return cls.from_bytes(query_info(dev, info_id, ctypes.sizeof(cls), **query))


def _query_u64(dev: Device, info_id: int, **query) -> int:
    return int.from_bytes(bytes(query_info(dev, info_id, 8, **query)).ljust(8, b"\0"), "little")


def _query_u32(dev: Device, info_id: int, **query) -> int:
    return int.from_bytes(bytes(query_info(dev, info_id, 4, **query)).ljust(4, b"\0"), "little")


def query_gpu_info(dev: Device) -> uapi.drm_amdgpu_info_device:
    """AMDGPU_INFO_DEV_INFO, fresh (``dev.info`` holds the copy from initialisation)."""
    return query_info_struct(dev, uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)


def query_hw_ip_info(dev: Device, ip_type: int, ip_instance: int = 0) -> uapi.drm_amdgpu_info_hw_ip:
    """AMDGPU_INFO_HW_IP_INFO (amdgpu_query_hw_ip_info)."""
    return query_info_struct(dev, uapi.AMDGPU_INFO_HW_IP_INFO, uapi.drm_amdgpu_info_hw_ip,
                             query_hw_ip={"type": ip_type, "ip_instance": ip_instance})


def query_hw_ip_count(dev: Device, ip_type: int) -> int:
    """AMDGPU_INFO_HW_IP_COUNT (amdgpu_query_hw_ip_count)."""
    return _query_u32(dev, uapi.AMDGPU_INFO_HW_IP_COUNT, query_hw_ip={"type": ip_type})


def query_heap_info(dev: Device, heap: int, flags: int = 0) -> uapi.drm_amdgpu_heap_info:
    """AMDGPU_INFO_MEMORY for one heap (amdgpu_query_heap_info).

    ``heap`` is AMDGPU_GEM_DOMAIN_VRAM or _GTT; with
    AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED in ``flags`` the CPU-visible VRAM heap.
    """
    mem = query_info_struct(dev, uapi.AMDGPU_INFO_MEMORY, uapi.drm_amdgpu_memory_info)
    if heap == uapi.AMDGPU_GEM_DOMAIN_VRAM:
        if flags & uapi.AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED:
            return mem.cpu_accessible_vram
        return mem.vram
    if heap == uapi.AMDGPU_GEM_DOMAIN_GTT:
        return mem.gtt
    raise error_for(errno.EINVAL, f"query_heap_info: heap {heap:#x} is neither VRAM nor GTT")


def query_firmware_version(dev: Device, fw_type: int, ip_instance: int = 0,
                           index: int = 0) -> tuple[int, int]:
    """AMDGPU_INFO_FW_VERSION (amdgpu_query_firmware_version): (version, feature)."""
    fw = query_info_struct(dev, uapi.AMDGPU_INFO_FW_VERSION, uapi.drm_amdgpu_info_firmware,
                           query_fw={"fw_type": fw_type, "ip_instance": ip_instance, "index": index})
    return fw.ver, fw.feature


def query_timestamp(dev: Device) -> int:
    """AMDGPU_INFO_TIMESTAMP: the GPU clock in ns (amdgpu_query_info)."""
    return _query_u64(dev, uapi.AMDGPU_INFO_TIMESTAMP)


def query_gpuvm_fault(dev: Device) -> uapi.drm_amdgpu_info_gpuvm_fault:
    """AMDGPU_INFO_GPUVM_FAULT (Linux 6.x): the last page fault of this file's VM,
    {addr, status, vmhub}; all zero if it has had none."""
    return query_info_struct(dev, uapi.AMDGPU_INFO_GPUVM_FAULT, uapi.drm_amdgpu_info_gpuvm_fault)


def query_last_fault(dev: Device) -> uapi.vgpu_info_last_fault:
    """VGPU_INFO_LAST_FAULT (vgpu's addition): this file's last job that failed with a
    crash dump (seq_no, ctx_id, ip_type, ring, error) and the N of its devcd<N>;
    seq_no 0 if none has. Set before the job's fence signals."""
    return query_info_struct(dev, uapi.VGPU_INFO_LAST_FAULT, uapi.vgpu_info_last_fault)


def query_job_counters(dev: Device, ip_type: int, ring: int, seq_no: int) -> uapi.vgpu_info_job_counters:
    """VGPU_INFO_JOB_COUNTERS (vgpu's addition): the performance counters of this
    file's finished job ``seq_no`` on ring ``ring`` of ``ip_type`` (docs/observability.md).
    VgpuBusy while the job runs; VgpuNoSuchObject for another file's job or one
    older than the ring's last 4096."""
    req = uapi.drm_amdgpu_info(return_size=ctypes.sizeof(uapi.vgpu_info_job_counters),
                               query=uapi.VGPU_INFO_JOB_COUNTERS)
    q = uapi.vgpu_info_job_query(ip_type=ip_type, ring=ring, seq_no=seq_no)
    ctypes.memmove(ctypes.addressof(req._u), bytes(q), ctypes.sizeof(q))   # the query union
    _, answer = dev.ioctl(uapi.DRM_IOCTL_AMDGPU_INFO, req, reply_extra=req.return_size)
    return uapi.vgpu_info_job_counters.from_bytes(answer)
