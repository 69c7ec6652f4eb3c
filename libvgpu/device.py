"""Device: one open DRM file of a vgpu mount (libdrm's amdgpu_device_handle).

``device_initialize`` opens the render node, reads VERSION and DEV_INFO, and
builds the user-space VA manager from DEV_INFO, as libdrm's
``amdgpu_device_initialize`` does. Every request is a real ioctl() on the node
(docs/design.md section 3), so threads share one Device as they share a libdrm
device: each ioctl is its own request to the daemon, and a thread blocked in a wait
never holds up another's. Where Yama restricts ptrace, opening a device first names
the mount's daemon as this process's tracer (``prctl(PR_SET_PTRACER)``), so the daemon
may read and write the buffers the ioctl structs point to.

With ``VGPU_TRANSPORT=frame`` (libvgpu.ioctl) a Device speaks the old frame protocol
instead: pwrite()/pread() pairs tagged with the calling thread's id; only an fd that
cannot take offsets (a socket standing in for the control file) falls back to plain
write()/read() pairs, serialised by a lock.
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
from .ioctl import TRANSPORTS, address, drm_ioctl, transport_from_env
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

    def __init__(self, fd: int, node: Path, transport: str | None = None):
        self.fd = fd
        self.node = node
        self.mount = mount_point(node)  # MOUNT/dev/dri/<node>
        #: "ioctl" (real ioctls, the default) or "frame" ($VGPU_TRANSPORT=frame).
        self.transport = transport or transport_from_env()
        if self.transport not in TRANSPORTS:
            raise error_for(errno.EINVAL, f"unknown transport {self.transport!r}")
        # Frame transport: a control file takes request tags; anything else (no
        # offsets) gets plain write()/read() pairs under the lock.
        self._tagged = stat.S_ISREG(os.fstat(fd).st_mode)
        self._lock = threading.RLock()
        self._bos: dict[int, object] = {}  # GEM handle -> Bo, for unmapping at deinit
        self.version: DrmVersion | None = None
        self.info: uapi.drm_amdgpu_info_device | None = None
        self.vamgr: VaManager | None = None
        self.vamgr_32: VaManager | None = None

    # -- the one path to the device -------------------------------------------------
    def ioctl(self, request: int, struct):
        """:func:`libvgpu.ioctl.drm_ioctl` on this file: ``struct`` is updated in
        place (and returned); its pointer fields point to the caller's buffers. Frame
        transport: tagged with the calling thread's id (on an fd without offsets:
        untagged, serialised)."""
        fd = self.fd
        if fd < 0:
            raise error_for(errno.EBADF, f"{uapi.ioctl_name(request)}: device is closed")
        if self.transport != "frame":
            return drm_ioctl(fd, request, struct, transport=self.transport)
        if self._tagged:
            return drm_ioctl(fd, request, struct, transport="frame", tag=threading.get_native_id())
        with self._lock:
            if self.fd < 0:
                raise error_for(errno.EBADF, f"{uapi.ioctl_name(request)}: device is closed")
            return drm_ioctl(self.fd, request, struct, transport="frame")

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


def device_initialize(path: str | os.PathLike, transport: str | None = None) -> Device:
    """Open a vgpu device: ``path`` is the mount point (the render node is used)
    or a node (``MOUNT/dev/dri/card0`` / ``renderD128``). Like
    amdgpu_device_initialize: queries VERSION and DEV_INFO, builds the VA managers.
    The node is opened O_RDWR as libdrm does, or O_RDONLY when only reading is
    allowed (an ioctl needs no write access; the frame transport does).
    ``transport``: "ioctl" or "frame" (None: ``$VGPU_TRANSPORT``, default ioctl).
    Raises :class:`VgpuError`; nothing stays open on failure.
    """
    node = node_path(path)
    transport = transport or transport_from_env()
    try:
        try:
            fd = os.open(node, os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            if transport == "frame":
                raise
            fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise from_oserror(e, f"open {node}{_open_hint(e.errno, node)}") from e
    return device_initialize_fd(fd, node, transport)


def _open_hint(err: int | None, node: Path) -> str:
    """What to do when ``node`` does not open (the part of the message after its path)."""
    mount = mount_point(node)
    if err == errno.ENOENT:
        return f": no vgpu device at {mount}; mount one with `vgpu mount {mount}`"
    if err in (errno.ENOTCONN, errno.ECONNABORTED):
        return (f": the vgpu mount at {mount} is dead (its daemon exited); "
                f"run `vgpu umount {mount}`, then `vgpu mount {mount}`")
    if err in (errno.EACCES, errno.EPERM) and node.name[4:].isdigit() and node.name.startswith("card"):
        render = node.with_name(f"renderD{128 + int(node.name[4:])}")
        return f": {node.name} is 0660 root:video (the primary node); use {render}, the render node"
    return ""


def device_initialize_fd(fd: int, node: str | os.PathLike, transport: str | None = None) -> Device:
    """:func:`device_initialize` on an already open control file ``fd`` (the
    Device owns it from now on, and closes it on failure); ``node`` is its path
    under the mount, used to find ``MOUNT/bo/``. Any access mode will do for the
    ioctl transport, O_RDONLY included."""
    try:
        dev = Device(fd, Path(node), transport)
    except BaseException:
        os.close(fd)
        raise
    try:
        if dev.transport == "ioctl":
            declare_tracer(dev.mount)
        dev.version = get_version(dev)
        dev.info = query_info_struct(dev, uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)
        dev.vamgr, dev.vamgr_32 = VaManager.from_dev_info(dev.info)
    except BaseException:
        os.close(fd)
        dev.fd = -1
        raise
    return dev


#: prctl(2) PR_SET_PTRACER ("Yama"): name the one process that may ptrace this one.
PR_SET_PTRACER = 0x59616D61
YAMA_PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def declare_tracer(mount: str | os.PathLike) -> bool:
    """Where Yama restricts ptrace (``ptrace_scope`` >= 1), let the daemon of
    ``mount`` (its pid in ``MOUNT/sys/module/vgpu/daemon_pid``) read and write this
    process's memory, as it must to follow the ioctl structs' pointers
    (process_vm_readv/writev): ``prctl(PR_SET_PTRACER, pid)``. A process has one
    such tracer, so with two mounts the last device opened wins. Nothing happens
    without Yama; any failure is ignored (the daemon's access then fails with a
    clear errno on the ioctl). Returns True when the prctl was made."""
    try:
        with open(YAMA_PTRACE_SCOPE) as f:
            if int(f.read().strip() or "0") < 1:
                return False
        with open(os.path.join(mount, "sys", "module", "vgpu", "daemon_pid")) as f:
            pid = int(f.read().strip())
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(ctypes.c_int(PR_SET_PTRACER), ctypes.c_ulong(pid), ctypes.c_ulong(0),
                          ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0
    except (OSError, ValueError, AttributeError):
        return False


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
    """DRM_IOCTL_VERSION (drmGetVersion): ask for the lengths with no buffers, then
    again with buffers of exactly those lengths."""
    v = uapi.drm_version()
    dev.ioctl(uapi.DRM_IOCTL_VERSION, v)
    lengths = (v.name_len, v.date_len, v.desc_len)
    bufs = [ctypes.create_string_buffer(n + 1) for n in lengths]   # + the NUL drmGetVersion adds
    v = uapi.drm_version(name_len=lengths[0], name=address(bufs[0]), date_len=lengths[1],
                         date=address(bufs[1]), desc_len=lengths[2], desc=address(bufs[2]))
    dev.ioctl(uapi.DRM_IOCTL_VERSION, v)
    strings = [b.raw[:min(n, asked)].split(b"\0", 1)[0].decode("utf-8", "replace")
               for b, n, asked in zip(bufs, (v.name_len, v.date_len, v.desc_len), lengths)]
    return DrmVersion(v.version_major, v.version_minor, v.version_patchlevel, *strings)


def get_cap(dev: Device, capability: int) -> int:
    """DRM_IOCTL_GET_CAP (drmGetCap): the value of ``DRM_CAP_*``."""
    cap = uapi.drm_get_cap(capability=capability)
    dev.ioctl(uapi.DRM_IOCTL_GET_CAP, cap)
    return cap.value


def query_info(dev: Device, info_id: int, size: int, **query) -> bytes:
    """AMDGPU_INFO (amdgpu_query_info): the raw answer, ``size`` bytes (the kernel
    writes at most ``size`` bytes through ``return_pointer``; the rest stays zero).

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
    return _info(dev, req)


def _info(dev: Device, req: uapi.drm_amdgpu_info) -> bytes:
    """AMDGPU_INFO into a buffer of ``req.return_size`` bytes (zero where the answer
    is shorter), which ``return_pointer`` points to."""
    answer = ctypes.create_string_buffer(req.return_size)
    req.return_pointer = address(answer)
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_INFO, req)
    return answer.raw


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
    return uapi.vgpu_info_job_counters.from_bytes(_info(dev, req))
