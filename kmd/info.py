"""Device identity and queries: VERSION, GET_CAP and INFO (amdgpu_kms.c).

vgpu presents itself as a GFX9-class part (family AI) so that code written for
libdrm_amdgpu finds the fields it expects: a usable VA range with a nonzero
alignment, two SDMA rings and one compute ring.
"""
import ctypes
import errno

from vgpu import uapi

from .errors import KmdError, check
from .vm import VA_END, VA_START
from .vram import PAGE_SIZE

DRIVER_NAME = b"vgpu"
DRIVER_DATE = b"20261129"
DRIVER_DESC = b"vgpu virtual GPU (FUSE-emulated, amdgpu-compatible uapi)"
# KMS major version 3 is what libdrm_amdgpu's amdgpu_device_initialize() accepts.
VERSION = (3, 49, 0)
PCI_VENDOR = 0x1002
PCI_DEVICE = 0x687F
CHIP_REV = 1
MAX_INFO_RETURN = 64 * 1024
# Rings per hardware IP: ip type -> number of rings (docs/design.md 5.1).
RINGS = {uapi.AMDGPU_HW_IP_DMA: 2, uapi.AMDGPU_HW_IP_COMPUTE: 1}
CAPS = {
    uapi.DRM_CAP_PRIME: uapi.DRM_PRIME_CAP_IMPORT | uapi.DRM_PRIME_CAP_EXPORT,
    uapi.DRM_CAP_TIMESTAMP_MONOTONIC: 1,
    uapi.DRM_CAP_SYNCOBJ: 1,            # kmd/syncobj.py
    uapi.DRM_CAP_SYNCOBJ_TIMELINE: 1,
}


def _fill_version(args, extra_fields):
    out = b""
    for name, value in extra_fields:
        want = getattr(args, name + "_len")
        out += value[:want].ljust(want, b"\0")
        setattr(args, name + "_len", len(value))
    return out


def version(dev, file, args, extra):
    """Driver name, date and description as out-data, each `*_len` bytes as asked
    (cut or zero-padded); the `*_len` fields come back holding the full lengths.
    EINVAL: a requested length over 4 KiB."""
    for name in ("name", "date", "desc"):
        check(getattr(args, name + "_len") <= 4096, errno.EINVAL, f"{name}_len over 4096")
    args.version_major, args.version_minor, args.version_patchlevel = VERSION
    return _fill_version(args, [("name", DRIVER_NAME), ("date", DRIVER_DATE), ("desc", DRIVER_DESC)])


def get_cap(dev, file, args, extra):
    """Value of one DRM_CAP_*. EINVAL: unknown capability."""
    if args.capability not in CAPS:
        raise KmdError(errno.EINVAL, f"unknown capability {args.capability}")
    args.value = CAPS[args.capability]


def dev_info(dev) -> uapi.drm_amdgpu_info_device:
    d = uapi.drm_amdgpu_info_device()
    d.device_id = PCI_DEVICE
    d.chip_rev = CHIP_REV
    d.external_rev = CHIP_REV + 0x28
    d.family = uapi.AMDGPU_FAMILY_AI
    d.num_shader_engines = 1
    d.num_shader_arrays_per_engine = 1
    d.gpu_counter_freq = 1_000_000  # kHz: TIMESTAMP counts nanoseconds
    d.max_engine_clock = 1_000_000
    d.max_memory_clock = 1_000_000
    d.cu_active_number = 2
    d.cu_ao_mask = 0x3
    d.cu_bitmap[0][0] = 0x3
    d.num_rb_pipes = 1
    d.enabled_rb_pipes_mask = 1
    d.num_hw_gfx_contexts = 8
    d.virtual_address_offset = VA_START
    d.virtual_address_max = VA_END
    d.virtual_address_alignment = PAGE_SIZE
    d.pte_fragment_size = 2 << 20
    d.gart_page_size = PAGE_SIZE
    d.vram_type = uapi.AMDGPU_VRAM_TYPE_HBM
    d.vram_bit_width = 2048
    d.wave_front_size = 32
    d.num_shader_visible_vgprs = 256
    d.num_cu_per_sh = 2
    d.num_tcc_blocks = 1
    d.high_va_offset = 0
    d.high_va_max = 0
    return d


def heap(total: int, used: int, largest: int) -> uapi.drm_amdgpu_heap_info:
    h = uapi.drm_amdgpu_heap_info()
    h.total_heap_size = total
    h.usable_heap_size = total
    h.heap_usage = used
    h.max_allocation = largest
    return h


def _answer(dev, file, a) -> bytes:
    q = a.query
    mem = dev.memory
    if q == uapi.AMDGPU_INFO_ACCEL_WORKING:
        return ctypes.c_uint32(1).value.to_bytes(4, "little")
    if q == uapi.AMDGPU_INFO_DEV_INFO:
        return bytes(dev_info(dev))
    if q == uapi.AMDGPU_INFO_VRAM_USAGE or q == uapi.AMDGPU_INFO_VIS_VRAM_USAGE:
        return mem.vram_allocator.used.to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_GTT_USAGE:
        return mem.gtt_used.to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_VRAM_GTT:
        v = uapi.drm_amdgpu_info_vram_gtt()
        v.vram_size = v.vram_cpu_accessible_size = mem.vram_allocator.size
        v.gtt_size = mem.gtt_size
        return bytes(v)
    if q == uapi.AMDGPU_INFO_MEMORY:
        m = uapi.drm_amdgpu_memory_info()
        va = mem.vram_allocator
        m.vram = heap(va.size, va.used, va.largest_free_block())
        m.cpu_accessible_vram = heap(va.size, va.used, va.largest_free_block())
        m.gtt = heap(mem.gtt_size, mem.gtt_used, mem.gtt_size - mem.gtt_used)
        return bytes(m)
    if q == uapi.AMDGPU_INFO_TIMESTAMP:
        return dev.gpu_timestamp().to_bytes(8, "little")
    if q in (uapi.AMDGPU_INFO_HW_IP_INFO, uapi.AMDGPU_INFO_HW_IP_COUNT):
        ip, inst = a.query_hw_ip.type, a.query_hw_ip.ip_instance
        check(ip < uapi.AMDGPU_HW_IP_NUM, errno.EINVAL, f"unknown hw ip {ip}")
        rings = RINGS.get(ip, 0)
        if q == uapi.AMDGPU_INFO_HW_IP_COUNT:
            return (1 if rings else 0).to_bytes(4, "little")
        check(inst == 0, errno.EINVAL, f"ip instance {inst} does not exist")
        h = uapi.drm_amdgpu_info_hw_ip()
        if rings:
            h.hw_ip_version_major, h.hw_ip_version_minor = (4, 0) if ip == uapi.AMDGPU_HW_IP_DMA else (9, 0)
            h.ib_start_alignment = 256 if ip == uapi.AMDGPU_HW_IP_DMA else 32
            h.ib_size_alignment = 4
            h.available_rings = (1 << rings) - 1
        return bytes(h)
    if q == uapi.AMDGPU_INFO_FW_VERSION:
        fw = uapi.drm_amdgpu_info_firmware()
        fw.ver = 0x00010000 | a.query_fw.fw_type  # vgpu's "firmware" is its own code
        fw.feature = 1
        return bytes(fw)
    if q == uapi.AMDGPU_INFO_GPUVM_FAULT:
        # amdgpu_kms.c: the fault_info of the file's VM, zeros if it never faulted.
        return bytes(file.vm.fault_info)
    if q == uapi.VGPU_INFO_LAST_FAULT:
        # vgpu's addition: which job failed last and which devcd<N> holds its dump.
        last = file.last_fault
        return bytes(last if last is not None else uapi.vgpu_info_last_fault())
    raise KmdError(errno.EINVAL, f"unsupported INFO query {q:#x}")


def info(dev, file, args, extra):
    """Answer one AMDGPU_INFO_* query. The answer comes back as out-data of exactly
    `return_size` bytes (cut, or zero-padded), as the kernel's copy_to_user would
    leave the user's buffer. EINVAL: unknown query or hw ip, return_size 0 or over
    64 KiB.

    Queries: ACCEL_WORKING, DEV_INFO, VRAM_USAGE, VIS_VRAM_USAGE, GTT_USAGE,
    VRAM_GTT, MEMORY, TIMESTAMP, HW_IP_INFO, HW_IP_COUNT, FW_VERSION; GPUVM_FAULT
    (Linux 6.x, amdgpu 3.55: drm_amdgpu_info_gpuvm_fault, the last page fault of the
    file's VM, zeros if none; answered although VERSION says 3.49); and vgpu's own
    VGPU_INFO_LAST_FAULT (vgpu_info_last_fault: the file's last failed job and the
    N of its crash dump devcd<N>, zeros if none)."""
    check(0 < args.return_size <= MAX_INFO_RETURN, errno.EINVAL,
          f"return_size {args.return_size} not in 1..{MAX_INFO_RETURN}")
    data = _answer(dev, file, args)
    return data[: args.return_size].ljust(args.return_size, b"\0")
