"""Device identity and queries: VERSION, GET_CAP, GET_CLIENT and INFO (amdgpu_kms.c,
drm_ioctl.c).

vgpu answers as amdgpu 3.x does for an AMD compute-only part, an Arcturus (MI100,
GC 9.4.1, family AI): that part has no GFX ring, like vgpu, and libdrm and Mesa
recognise it by chip_external_rev - chip_rev == 0x32 (amdgpu_test's
asic_is_gfx_pipe_removed, Mesa's ac_gpu_info.c ARCTURUS range) and send their work
to COMPUTE (and DMA) instead of GFX. Every other DEV_INFO field says what vgpu
really has: one shader engine with 2 compute units of 32-lane waves, the VA range
of kmd/vm.py, no high VA range; INFO READ_MMR_REG answers GB_ADDR_CONFIG with the
same engine and render-backend counts (docs/kmd.md, "What the device reports").
"""
import ctypes
import errno

from vgpu import isa, uapi

from . import onchip, userq as _userq
from .kms import KMS_CAPS
from .errors import KmdError, check
from .job import MAX_IBS
from .vm import VA_END, VA_START
from .vram import PAGE_SIZE

DRIVER_NAME = b"amdgpu"    # amdgpu_drv.c DRIVER_NAME: what libdrm programs and Mesa look for
DRIVER_DATE = b"20261129"
DRIVER_DESC = b"vgpu virtual GPU (FUSE-emulated, amdgpu-compatible uapi)"
# KMS major version 3 is what libdrm_amdgpu's amdgpu_device_initialize() accepts.
VERSION = (3, 49, 0)
PCI_VENDOR = 0x1002
PCI_DEVICE = 0x738C        # AMD Instinct MI100 (Arcturus), amdgpu_drv.c pciidlist CHIP_ARCTURUS
PCI_REVISION = 0x01        # pci_rev: the PCI config space revision
CHIP_REV = 1               # chip_rev: adev->rev_id
# soc15.c soc15_common_early_init, CHIP_ARCTURUS: external_rev_id = rev_id + 0x32.
EXTERNAL_REV = CHIP_REV + 0x32
# What the shader engine holds (gfx config): vgpu's compute units (kmd/hw, 2 of them).
NUM_SHADER_ENGINES = 1
NUM_SH_PER_SE = 1
NUM_CU_PER_SH = 2
NUM_RB_PER_SE = 1
# Rings per hardware IP of the whole GPU: ip type -> number of rings (docs/design.md
# 5.1); a partition has its share of them (ring_count). Eight compute rings, as an
# MI100's amdgpu makes (amdgpu_num_kcq's default, gfx_v9_0_compute_ring_init): tools
# that put two jobs on two rings of one IP (IGT's amd_queue_reset) need more than one.
RINGS = {uapi.AMDGPU_HW_IP_DMA: 2, uapi.AMDGPU_HW_IP_COMPUTE: 8}
CAPS = {
    uapi.DRM_CAP_PRIME: uapi.DRM_PRIME_CAP_IMPORT | uapi.DRM_PRIME_CAP_EXPORT,
    uapi.DRM_CAP_TIMESTAMP_MONOTONIC: 1,
    uapi.DRM_CAP_SYNCOBJ: 1,            # kmd/syncobj.py
    uapi.DRM_CAP_SYNCOBJ_TIMELINE: 1,
    **KMS_CAPS,                         # a mode config without display (kmd/kms.py)
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


def get_client(dev, file, args, extra):
    """drm_getclient (drm_ioctl.c): only `idx` 0, the caller, is answered, with
    `auth` (1 for an authenticated file: the master, root's, or one the master
    authenticated with AUTH_MAGIC, kmd/drm_auth.py), `pid`
    (the pid that opened the file; Linux gives the caller's, which vgpu does not
    see per request), `uid` the overflow uid 65534, `magic` and `iocs` 0. libdrm's
    amdgpu_get_auth asks it on a primary node; the table refuses it on renderD128
    (flags 0, no DRM_RENDER_ALLOW: EACCES), as Linux does.

    EINVAL: idx other than 0 (what old tools stop enumerating at)."""
    check(args.idx == 0, errno.EINVAL, f"client idx {args.idx}: only 0 (the caller) is answered")
    args.auth = 1 if file.authenticated else 0
    args.pid = file.pid
    args.uid = OVERFLOW_UID
    args.magic = 0
    args.iocs = 0


OVERFLOW_UID = 65534


def cus_per_sh(dev) -> int:
    """The compute units of `dev`'s shader array: NUM_CU_PER_SH for the whole GPU,
    its share for a partition (kmd/partition.py; amdgpu answers a partition's
    render node with the CUs of its own XCCs)."""
    return len(dev.partition.cus) // (NUM_SHADER_ENGINES * NUM_SH_PER_SE)


def ring_count(dev, ip_type: int) -> int:
    """The rings of hardware IP `ip_type` this device (or partition) has."""
    return sum(1 for ip, _ in dev.rings if ip == ip_type)


def dev_info(dev) -> uapi.drm_amdgpu_info_device:
    """AMDGPU_INFO_DEV_INFO as amdgpu_kms.c fills it, for an Arcturus part with
    vgpu's own engine: the identity of an MI100 (family AI, external_rev = chip_rev
    + 0x32: compute-only), the shape of vgpu's compute units (1 SE x 1 SH x 2 CUs,
    or a partition's share of them, 32-lane waves, 128 VGPRs), no GFX (no CE RAM,
    no GS buffers), vgpu's VA range."""
    cus = cus_per_sh(dev)
    cu_mask = (1 << cus) - 1
    d = uapi.drm_amdgpu_info_device()
    d.device_id = PCI_DEVICE
    d.chip_rev = CHIP_REV
    d.external_rev = EXTERNAL_REV
    d.pci_rev = PCI_REVISION
    d.family = uapi.AMDGPU_FAMILY_AI
    d.num_shader_engines = NUM_SHADER_ENGINES
    d.num_shader_arrays_per_engine = NUM_SH_PER_SE
    d.gpu_counter_freq = 1_000_000  # kHz: TIMESTAMP counts nanoseconds
    d.max_engine_clock = 1_000_000
    d.max_memory_clock = 1_000_000
    d.cu_active_number = NUM_SHADER_ENGINES * NUM_SH_PER_SE * cus
    d.cu_ao_mask = cu_mask
    for se in range(NUM_SHADER_ENGINES):
        for sh in range(NUM_SH_PER_SE):
            d.cu_bitmap[se][sh] = d.cu_ao_bitmap[se][sh] = cu_mask
    d.num_rb_pipes = NUM_SHADER_ENGINES * NUM_RB_PER_SE
    d.enabled_rb_pipes_mask = (1 << d.num_rb_pipes) - 1
    d.num_hw_gfx_contexts = 8       # gfx_v9_0_gpu_early_init: max_hw_contexts for GC 9.4.1
    d.virtual_address_offset = VA_START
    d.virtual_address_max = VA_END
    d.virtual_address_alignment = PAGE_SIZE
    d.pte_fragment_size = 2 << 20
    d.gart_page_size = PAGE_SIZE
    d.vram_type = uapi.AMDGPU_VRAM_TYPE_HBM
    d.vram_bit_width = 4096         # MI100: four HBM2 stacks
    d.wave_front_size = isa.WAVE_SIZE
    d.num_shader_visible_vgprs = isa.MAX_VGPRS
    d.num_cu_per_sh = cus
    d.num_tcc_blocks = 1
    d.high_va_offset = 0
    d.high_va_max = 0
    return d


# -- INFO READ_MMR_REG ---------------------------------------------------------------
# The registers soc15.c's soc15_allowed_read_registers whitelist lets a client read
# (amdgpu_read_mm_registers, answered by soc15_read_register), as absolute dword
# offsets: the IP's base for Arcturus (arct_ip_offset.h: GC 0x2000, SDMA0 0x1260,
# SDMA1 0x1860) plus the register (gc_9_0_offset.h; sdma*_STATUS_REG is 0x25).
GC_BASE, SDMA0_BASE, SDMA1_BASE = 0x2000, 0x1260, 0x1860
mmGRBM_STATUS = GC_BASE + 0x0004
mmGRBM_STATUS2 = GC_BASE + 0x0002
mmGRBM_STATUS_SE0 = GC_BASE + 0x0005
mmGRBM_STATUS_SE1 = GC_BASE + 0x0006
mmGRBM_STATUS_SE2 = GC_BASE + 0x000E
mmGRBM_STATUS_SE3 = GC_BASE + 0x000F
mmSDMA0_STATUS_REG = SDMA0_BASE + 0x0025
mmSDMA1_STATUS_REG = SDMA1_BASE + 0x0025
mmCP_STAT = GC_BASE + 0x01A0
mmCP_STALLED_STAT1 = GC_BASE + 0x019D
mmCP_STALLED_STAT2 = GC_BASE + 0x019E
mmCP_STALLED_STAT3 = GC_BASE + 0x019C
mmCP_CPF_BUSY_STAT = GC_BASE + 0x0088
mmCP_CPF_STALLED_STAT1 = GC_BASE + 0x0089
mmCP_CPF_STATUS = GC_BASE + 0x0087
mmCP_CPC_BUSY_STAT = GC_BASE + 0x0085
mmCP_CPC_STALLED_STAT1 = GC_BASE + 0x0086
mmCP_CPC_STATUS = GC_BASE + 0x0084
mmGB_ADDR_CONFIG = GC_BASE + 0x063E
mmDB_DEBUG2 = GC_BASE + 0x060D
# In soc15_allowed_read_registers' order; none of them is GRBM-indexed.
READABLE_REGISTERS = {
    mmGRBM_STATUS: "GRBM_STATUS", mmGRBM_STATUS2: "GRBM_STATUS2",
    mmGRBM_STATUS_SE0: "GRBM_STATUS_SE0", mmGRBM_STATUS_SE1: "GRBM_STATUS_SE1",
    mmGRBM_STATUS_SE2: "GRBM_STATUS_SE2", mmGRBM_STATUS_SE3: "GRBM_STATUS_SE3",
    mmSDMA0_STATUS_REG: "SDMA0_STATUS_REG", mmSDMA1_STATUS_REG: "SDMA1_STATUS_REG",
    mmCP_STAT: "CP_STAT", mmCP_STALLED_STAT1: "CP_STALLED_STAT1",
    mmCP_STALLED_STAT2: "CP_STALLED_STAT2", mmCP_STALLED_STAT3: "CP_STALLED_STAT3",
    mmCP_CPF_BUSY_STAT: "CP_CPF_BUSY_STAT", mmCP_CPF_STALLED_STAT1: "CP_CPF_STALLED_STAT1",
    mmCP_CPF_STATUS: "CP_CPF_STATUS", mmCP_CPC_BUSY_STAT: "CP_CPC_BUSY_STAT",
    mmCP_CPC_STALLED_STAT1: "CP_CPC_STALLED_STAT1", mmCP_CPC_STATUS: "CP_CPC_STATUS",
    mmGB_ADDR_CONFIG: "GB_ADDR_CONFIG", mmDB_DEBUG2: "DB_DEBUG2",
}
# amdgpu_kms.c: at most 128 registers per query; se and sh indices below
# AMDGPU_GFX_MAX_SE (4) and AMDGPU_GFX_MAX_SH_PER_SE (2), or all ones (broadcast).
MAX_MMR_COUNT = 128
AMDGPU_GFX_MAX_SE = 4
AMDGPU_GFX_MAX_SH_PER_SE = 2
# Register fields vgpu sets (gc_9_0_sh_mask.h, sdma0_4_2_2_sh_mask.h).
GRBM_STATUS_TA_BUSY = 1 << 14
GRBM_STATUS_SPI_BUSY = 1 << 22
GRBM_STATUS_CP_BUSY = 1 << 29
GRBM_STATUS_GUI_ACTIVE = 1 << 31
GRBM_STATUS2_UTCL2_BUSY = 1 << 15
GRBM_STATUS2_EA_BUSY = 1 << 16
GRBM_STATUS2_TC_BUSY = 1 << 25
GRBM_STATUS2_CPF_BUSY = 1 << 28
GRBM_STATUS2_CPC_BUSY = 1 << 29
GRBM_STATUS_SE_TA_BUSY = 1 << 25
GRBM_STATUS_SE_SPI_BUSY = 1 << 27
CP_STAT_CP_BUSY = 1 << 31
SDMA_STATUS_REG_IDLE = 1 << 0
# What a running compute job keeps busy on a compute-only part: the command
# processor (CP, its fetcher CPF and compute unit CPC), the shader processor
# interpolator that launches waves (SPI), the texture addresser and cache of their
# loads and stores (TA, TC), and the memory path (UTCL2, EA). An SDMA copy keeps the
# memory path busy. No graphics block (VGT, PA, SC, SX, DB, CB...) is ever busy.
COMPUTE_GRBM_STATUS = GRBM_STATUS_GUI_ACTIVE | GRBM_STATUS_CP_BUSY | GRBM_STATUS_SPI_BUSY | GRBM_STATUS_TA_BUSY
COMPUTE_GRBM_STATUS2 = (GRBM_STATUS2_CPF_BUSY | GRBM_STATUS2_CPC_BUSY | GRBM_STATUS2_TC_BUSY
                        | GRBM_STATUS2_UTCL2_BUSY | GRBM_STATUS2_EA_BUSY)
SDMA_GRBM_STATUS2 = GRBM_STATUS2_UTCL2_BUSY | GRBM_STATUS2_EA_BUSY
COMPUTE_GRBM_STATUS_SE = GRBM_STATUS_SE_SPI_BUSY | GRBM_STATUS_SE_TA_BUSY
# gfx_v9_0_gpu_early_init, GC 9.4.1: gb_addr_config keeps the hardware's bits under
# 0x0C188800 (NUM_SHADER_ENGINES [20:19], NUM_RB_PER_SE [27:26], two reserved bits)
# and takes the rest from 0x22014042: 4 pipes, 256-byte interleave, 2 compressed
# fragments, 16 banks.
GB_ADDR_CONFIG_GOLDEN = 0x22014042
GB_ADDR_CONFIG_NUM_SHADER_ENGINES_SHIFT = 19
GB_ADDR_CONFIG_NUM_RB_PER_SE_SHIFT = 26


def gb_addr_config() -> int:
    """GB_ADDR_CONFIG as Arcturus's gfx_v9_0 leaves it, with log2 of the shader
    engines and of the render backends per engine DEV_INFO reports."""
    return (GB_ADDR_CONFIG_GOLDEN
            | (NUM_SHADER_ENGINES.bit_length() - 1) << GB_ADDR_CONFIG_NUM_SHADER_ENGINES_SHIFT
            | (NUM_RB_PER_SE.bit_length() - 1) << GB_ADDR_CONFIG_NUM_RB_PER_SE_SHIFT)


def _busy(dev, ip_type: int, index: int) -> bool:
    ring = dev.rings.get((ip_type, index))
    if ring is not None and ring.running is not None:
        return True
    # A user queue's run keeps its IP's engine busy too (kmd/userq.py); a DMA queue
    # counts as sdma0's, as the SDMA engine 0 serves its queue slots.
    if ip_type == uapi.AMDGPU_HW_IP_DMA and index != 0:
        return False
    return any(q.ip_type == ip_type and q.running_since() is not None for q in list(dev.userqs.by_slot.values()))


def read_register(dev, offset: int) -> int | None:
    """The value of whitelisted register `offset`, None if it is not readable.
    Status registers say which blocks are busy now: while the compute ring runs a
    job, GRBM_STATUS has GUI_ACTIVE, CP, SPI and TA busy, GRBM_STATUS2 CPF, CPC,
    TC, UTCL2 and EA, GRBM_STATUS_SE0 SPI and TA, CP_STAT CP_BUSY; while an SDMA
    ring runs one, GRBM_STATUS2 has UTCL2 and EA busy and SDMAn_STATUS_REG loses
    IDLE. The other status and stall registers read 0; GB_ADDR_CONFIG is
    gb_addr_config(); DB_DEBUG2 is 0 (no depth block on a compute-only part)."""
    if offset not in READABLE_REGISTERS:
        return None
    compute = _busy(dev, uapi.AMDGPU_HW_IP_COMPUTE, 0)
    if offset == mmGB_ADDR_CONFIG:
        return gb_addr_config()
    if offset == mmGRBM_STATUS:
        return COMPUTE_GRBM_STATUS if compute else 0
    if offset == mmGRBM_STATUS2:
        sdma = _busy(dev, uapi.AMDGPU_HW_IP_DMA, 0) or _busy(dev, uapi.AMDGPU_HW_IP_DMA, 1)
        return (COMPUTE_GRBM_STATUS2 if compute else 0) | (SDMA_GRBM_STATUS2 if sdma else 0)
    if offset == mmGRBM_STATUS_SE0:
        return COMPUTE_GRBM_STATUS_SE if compute else 0
    if offset == mmCP_STAT:
        return CP_STAT_CP_BUSY if compute else 0
    if offset in (mmSDMA0_STATUS_REG, mmSDMA1_STATUS_REG):
        idle = not _busy(dev, uapi.AMDGPU_HW_IP_DMA, 0 if offset == mmSDMA0_STATUS_REG else 1)
        return SDMA_STATUS_REG_IDLE if idle else 0
    return 0


def read_mmr_reg(dev, r) -> bytes:
    """amdgpu_kms.c AMDGPU_INFO_READ_MMR_REG: `count` consecutive registers from
    `dword_offset`, each of soc15's whitelist. `instance` holds the SE index in
    bits [7:0] and the SH index in [15:8], 0xff meaning all (libdrm passes
    0xffffffff); the whitelisted registers are not GRBM-indexed, so a valid index
    reads the same value. EINVAL: an SE index >= 4 or SH index >= 2 that is not
    0xff, count over 128. EFAULT: a register off the whitelist ("unallowed offset")."""
    se = r.instance >> uapi.AMDGPU_INFO_MMR_SE_INDEX_SHIFT & uapi.AMDGPU_INFO_MMR_SE_INDEX_MASK
    sh = r.instance >> uapi.AMDGPU_INFO_MMR_SH_INDEX_SHIFT & uapi.AMDGPU_INFO_MMR_SH_INDEX_MASK
    check(se == uapi.AMDGPU_INFO_MMR_SE_INDEX_MASK or se < AMDGPU_GFX_MAX_SE, errno.EINVAL,
          f"READ_MMR_REG shader engine {se} (0..{AMDGPU_GFX_MAX_SE - 1} or 0xff)")
    check(sh == uapi.AMDGPU_INFO_MMR_SH_INDEX_MASK or sh < AMDGPU_GFX_MAX_SH_PER_SE, errno.EINVAL,
          f"READ_MMR_REG shader array {sh} (0..{AMDGPU_GFX_MAX_SH_PER_SE - 1} or 0xff)")
    check(r.count <= MAX_MMR_COUNT, errno.EINVAL, f"READ_MMR_REG count {r.count} over {MAX_MMR_COUNT}")
    out = []
    for i in range(r.count):
        value = read_register(dev, r.dword_offset + i)
        if value is None:
            raise KmdError(errno.EFAULT, f"unallowed offset {r.dword_offset + i:#x}")
        out.append(value)
    return b"".join(v.to_bytes(4, "little") for v in out)


def gds_config() -> uapi.drm_amdgpu_info_gds:
    """AMDGPU_INFO_GDS_CONFIG as amdgpu_kms.c answers it: the compute partition is
    the whole of each on-chip heap (kmd/onchip.py); no GFX partition."""
    g = uapi.drm_amdgpu_info_gds()
    g.compute_partition_size = g.gds_total_size = onchip.GDS_SIZE
    g.gws_per_compute_partition = onchip.GWS_SIZE
    g.oa_per_compute_partition = onchip.OA_SIZE
    return g


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
        # Linux 6.16's struct: 2.4.114's, then the fields since (a shorter
        # return_size gets the older struct, as copy_to_user of min(size) does).
        d = uapi.drm_amdgpu_info_device_userq(base=dev_info(dev))
        d.min_engine_clock, d.min_memory_clock = 300_000, 500_000   # kHz, kmd/power.py's lowest levels
        d.userq_ip_mask = 1 << uapi.AMDGPU_HW_IP_COMPUTE | 1 << uapi.AMDGPU_HW_IP_DMA
        return bytes(d)
    if q == uapi.AMDGPU_INFO_UQ_FW_AREAS:
        ip = a.query_hw_ip.type
        check(ip in _userq.FW_AREA, errno.EINVAL, f"hw ip {ip} has no user queues")
        m = uapi.drm_amdgpu_info_uq_metadata()
        size, align = _userq.FW_AREA[ip]
        if ip == uapi.AMDGPU_HW_IP_COMPUTE:
            m.compute.eop_size, m.compute.eop_alignment = size, align
        else:
            m.sdma.csa_size, m.sdma.csa_alignment = size, align
        return bytes(m)
    if q == uapi.AMDGPU_INFO_READ_MMR_REG:
        return read_mmr_reg(dev, a.read_mmr_reg)
    if q == uapi.AMDGPU_INFO_GDS_CONFIG:
        return bytes(gds_config())
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
    if q == uapi.AMDGPU_INFO_NUM_EVICTIONS:
        return dev.residency.evictions.to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_NUM_BYTES_MOVED:
        return dev.residency.bytes_moved.to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_TIMESTAMP:
        return dev.gpu_timestamp().to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_VRAM_LOST_COUNTER:
        # A reset keeps VRAM (it is host memory here): nothing is ever lost.
        return (0).to_bytes(4, "little")
    if q == uapi.AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS:
        # Faults that move a BO into CPU-visible VRAM: all of vgpu's VRAM is visible.
        return (0).to_bytes(8, "little")
    if q == uapi.AMDGPU_INFO_MAX_IBS:
        return b"".join(n.to_bytes(4, "little") for n in MAX_IBS)
    if q == uapi.AMDGPU_INFO_RAS_ENABLED_FEATURES:
        # amdgpu_kms.c: no RAS context -> EINVAL; vgpu models no ECC or RAS errors.
        raise KmdError(errno.EINVAL, "RAS_ENABLED_FEATURES: vgpu models no RAS (as amdgpu without a RAS context)")
    if q in (uapi.AMDGPU_INFO_HW_IP_INFO, uapi.AMDGPU_INFO_HW_IP_COUNT):
        ip, inst = a.query_hw_ip.type, a.query_hw_ip.ip_instance
        # amdgpu_hw_ip_info knows every type up to VPE (Linux 6.7), and answers one
        # whose IP block the part lacks (UVD, VCE, VCN, JPEG, VPE on Arcturus) with
        # zeros: IGT's amd_vpe and amd_jpeg tests ask, then skip on no rings.
        check(ip <= uapi.AMDGPU_HW_IP_VPE, errno.EINVAL, f"unknown hw ip {ip}")
        rings = ring_count(dev, ip)
        # GFX: Arcturus has the GFX IP block (gfx_v9_0, which drives its compute
        # rings) but no GFX ring, so amdgpu answers version 9.0 with no rings, and
        # counts one instance (amdgpu_hw_ip_info, AMDGPU_INFO_HW_IP_COUNT).
        gfx_block = ip == uapi.AMDGPU_HW_IP_GFX
        if q == uapi.AMDGPU_INFO_HW_IP_COUNT:
            return (1 if rings or gfx_block else 0).to_bytes(4, "little")
        check(inst == 0, errno.EINVAL, f"ip instance {inst} does not exist")
        hq = uapi.drm_amdgpu_info_hw_ip_userq()
        h = hq.base
        if ip in _userq.FW_AREA:
            hq.userq_num_slots = _userq.SLOTS
        if rings:
            h.hw_ip_version_major, h.hw_ip_version_minor = (4, 0) if ip == uapi.AMDGPU_HW_IP_DMA else (9, 0)
            h.ib_start_alignment = 256 if ip == uapi.AMDGPU_HW_IP_DMA else 32
            h.ib_size_alignment = 4
            h.available_rings = (1 << rings) - 1
        elif gfx_block:
            h.hw_ip_version_major, h.hw_ip_version_minor = 9, 0
            h.ib_start_alignment = h.ib_size_alignment = 32
        return bytes(hq)
    if q == uapi.AMDGPU_INFO_SENSOR:
        return dev.power.read(a.sensor_info.type).to_bytes(4, "little")   # kmd/power.py
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
    if q == uapi.VGPU_INFO_USERQ_STATE:
        uq = file.userqs.get(a.query_hw_ip.type)
        check(uq is not None, errno.ENOENT, f"no user queue {a.query_hw_ip.type}")
        return bytes(uapi.vgpu_info_userq_state(rptr=uq.rptr, state=_userq.STATE_CODES[uq.state],
                                                error=uq.error, devcd=uq.devcd))
    if q == uapi.VGPU_INFO_JOB_COUNTERS:
        return bytes(job_counters(dev, file, uapi.vgpu_info_job_query.from_buffer_copy(bytes(a._u))))
    raise KmdError(errno.EINVAL, f"unsupported INFO query {q:#x}")


def job_counters(dev, file, q) -> "uapi.vgpu_info_job_counters":
    """VGPU_INFO_JOB_COUNTERS: the record the ring kept of one of `file`'s jobs."""
    ring = dev.rings.get((q.ip_type, q.ring))
    check(ring is not None, errno.EINVAL, f"no ring {q.ring} of hw ip {q.ip_type}")
    check(0 < q.seq_no <= ring.emitted_seq, errno.EINVAL, f"seq {q.seq_no} never emitted on {ring.name}")
    fence = ring.fence(q.seq_no)
    check(fence is None or fence.signaled, errno.EBUSY, f"job seq {q.seq_no} on {ring.name} not finished")
    rec = ring.perf.job_record(q.seq_no)
    check(rec is not None and rec.client_id == file.id, errno.ENOENT,
          f"no counters of seq {q.seq_no} on {ring.name} for this file")
    out = uapi.vgpu_info_job_counters(seq_no=q.seq_no, ip_type=q.ip_type, ring=q.ring, error=rec.error,
                                      started_ns=dev.device_ns(rec.started), ended_ns=dev.device_ns(rec.ended))
    for name, _ in uapi.vgpu_info_job_counters._fields_[7:]:   # busy_ns onwards
        setattr(out, name, rec.counters.get(name, 0))
    return out


def info(dev, file, args, extra):
    """Answer one AMDGPU_INFO_* query. The answer comes back as out-data of
    min(`return_size`, its size) bytes, as amdgpu_info_ioctl's copy_to_user of
    min(size, sizeof(answer)): a shorter buffer gets the head, a longer one keeps its
    tail. EINVAL: unknown query or hw ip, return_size 0 (checked first, as amdgpu
    does; a NULL return_pointer is the ioctl transport's EINVAL, vgpu.pointers, since a
    frame request carries no usable pointer); READ_MMR_REG with an SE/SH index out of
    range or a count over 128.
    EFAULT: READ_MMR_REG of a register off soc15's whitelist (see read_mmr_reg).

    Queries: ACCEL_WORKING, DEV_INFO, VRAM_USAGE, VIS_VRAM_USAGE, GTT_USAGE,
    VRAM_GTT, MEMORY, NUM_EVICTIONS and NUM_BYTES_MOVED (u64 counters since the
    device came up, kmd/residency.py), TIMESTAMP, HW_IP_INFO, HW_IP_COUNT, FW_VERSION, READ_MMR_REG
    (soc15.c's register whitelist), GDS_CONFIG; GPUVM_FAULT
    (Linux 6.x, amdgpu 3.55: drm_amdgpu_info_gpuvm_fault, the last page fault of the
    file's VM, zeros if none; answered although VERSION says 3.49); and vgpu's own
    VGPU_INFO_LAST_FAULT (vgpu_info_last_fault: the file's last failed job and the
    N of its crash dump devcd<N>, zeros if none) and VGPU_INFO_JOB_COUNTERS
    (vgpu_info_job_counters of a finished job of the file; EINVAL, EBUSY, ENOENT as
    its struct says)."""
    check(args.return_size, errno.EINVAL, "return_size 0")
    return _answer(dev, file, args)[: args.return_size]
