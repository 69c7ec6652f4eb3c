"""MOUNT/sys/kernel/debug/dri/<i>/*: amdgpu's debugfs files under their names and
in Linux's formats (docs/observability.md, "debugfs"), each function citing the
kernel function whose seq_printf formats it follows; vgpu's own views are named
vgpu_*: the ring's scheduler state (vgpu_ring_<name>) and the GPU VA mappings of
every client (vgpu_vm_mappings) and the user queues (vgpu_userqs), which amdgpu's
files do not show."""
import time

from vgpu import uapi
from vgpu.paths import PCI_SLOT

from . import csa as _csa, info as _info, perf
from .gem import DOMAIN_NAMES

DRM_CLIENT_NAME_MAX_LEN = 64   # include/drm/drm_file.h
# amdgpu_bo_print_flag, in amdgpu_bo_print_info's order.
BO_FLAGS = ("CPU_ACCESS_REQUIRED", "NO_CPU_ACCESS", "CPU_GTT_USWC", "VRAM_CLEARED", "VRAM_CONTIGUOUS",
            "VM_ALWAYS_VALID", "EXPLICIT_SYNC")
VM_LISTS = ("idle", "evicted", "relocated", "moved", "invalidated", "done")
# The VBIOS part number amdgpu_firmware_info prints last (atom_context->vbios_pn):
# vgpu has no VBIOS and names itself.
VBIOS_PN = "vgpu"


def files(dev) -> dict:
    """dri/<i>/ of device `dev`: name -> read function, called at each open (text, or
    bytes for amdgpu_ring_<name>). None is writable: on Linux these files are read-only."""
    return {
        # drm_name_info: the driver's name (amdgpu_drv.c DRIVER_NAME), then the device.
        "name": lambda: f"amdgpu dev={PCI_SLOT} unique={PCI_SLOT}\n",
        "clients": lambda: clients(dev),
        "amdgpu_gem_info": lambda: gem_info(dev),
        "amdgpu_vm_info": lambda: vm_info(dev),
        "amdgpu_fence_info": lambda: fence_info(dev),
        "amdgpu_firmware_info": lambda: firmware_info(dev),
        "amdgpu_pm_info": lambda: pm_info(dev),
        "amdgpu_gpu_recover": lambda: gpu_recover(dev),
        **{f"amdgpu_ring_{r.name}": r.buffer.dump for r in dev.rings.values()},
        **{f"vgpu_ring_{r.name}": r.describe for r in dev.rings.values()},
        "vgpu_vm_mappings": lambda: vm_mappings_info(dev),
        "vgpu_userqs": lambda: userqs_info(dev),
    }


def userqs_info(dev) -> str:
    """vgpu_userqs, vgpu's own: every user queue (kmd/userq.py), one line each: its
    engine, client, id, priority, state, ring, rptr, doorbells served, busy time."""
    queues = sorted(dev.userqs.by_slot.values(), key=lambda q: q.slot)
    return "".join(q.describe() + "\n" for q in queues) or "no user queues\n"


def gpu_recover(dev) -> str:
    """amdgpu_gpu_recover: a read resets the GPU (amdgpu_fence.c gpu_recover_get, 0444)
    and prints the reset's result as "%lld\\n" of reset_res: 0, since vgpu's reset
    cannot fail."""
    dev.gpu_reset()
    return "0\n"


def pm_info(dev) -> str:
    """amdgpu_pm_info as amdgpu_debugfs_pm_info_pp prints it: the clocks, voltage and
    power of the SMU model (kmd/power.py), the temperature and the load of the
    busiest engine; then vgpu's additions, the load per engine over the last
    perf.BUSY_WINDOW seconds and each engine's counters since the device started
    (docs/observability.md)."""
    now = time.monotonic()
    sensor = dev.power.read
    out = ["GFX Clocks and Power:",
           f"\t{sensor(uapi.AMDGPU_INFO_SENSOR_GFX_MCLK)} MHz (MCLK)",
           f"\t{sensor(uapi.AMDGPU_INFO_SENSOR_GFX_SCLK)} MHz (SCLK)",
           f"\t{sensor(uapi.AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK)} MHz (PSTATE_SCLK)",
           f"\t{sensor(uapi.AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_MCLK)} MHz (PSTATE_MCLK)",
           f"\t{sensor(uapi.AMDGPU_INFO_SENSOR_VDDGFX)} mV (VDDGFX)",
           f"\t{dev.power.power_w:.2f} W (average GPU)", "",
           f"GPU Temperature: {sensor(uapi.AMDGPU_INFO_SENSOR_GPU_TEMP) // 1000} C",
           f"GPU Load: {dev.busy_meter.percent()} %", "", f"Engine load (last {perf.BUSY_WINDOW:g} s):"]
    out += [f"\t{r.name}: {dev.busy_meter.ring_percent(r)} %" for r in dev.rings.values()]
    for r in dev.rings.values():
        out += ["", f"Counters of {r.name}:"]
        out += [f"\t{k}: {v}" for k, v in r.perf.snapshot(r.running_since(), now).items()]
    return "\n".join(out) + "\n"


def fence_info(dev) -> str:
    """amdgpu_fence_info (amdgpu_fence.c amdgpu_debugfs_fence_info_show): per ring the
    last signalled and emitted hardware sequence numbers; SDMA rings add the trailing
    fence, which counts preemptions (amdgpu_ring_preempt_ib), requested and done
    being the same count here since vgpu's preemption completes synchronously."""
    out = []
    for r in dev.rings.values():
        out += [f"--- ring {r.ring_id} ({r.name}) ---",
                f"Last signaled fence          0x{r.signaled_seq & 0xFFFFFFFF:08x}",
                f"Last emitted                 0x{r.hw_emitted & 0xFFFFFFFF:08x}"]
        if r.ip_type == uapi.AMDGPU_HW_IP_DMA:
            trail = sum(dict(r.preemptions).values()) & 0xFFFFFFFF
            out += [f"Last signaled trailing fence 0x{trail:08x}", f"Last emitted                 0x{trail:08x}"]
    return "\n".join(out) + "\n"


def clients(dev) -> str:
    """clients (drm_debugfs.c drm_clients_info), oldest file first. dev is the minor
    of the node the file opened; a file has no client name (DRM_IOCTL_SET_CLIENT_NAME
    is not answered), so "<unset>"."""
    w = DRM_CLIENT_NAME_MAX_LEN
    lines = [f"{'command':>20} {'tgid':>5} {'dev':>3} master a {'uid':>5} {'magic':>10} {'name':>{w}} {'id':>20}"]
    index = dev.partition.index
    with dev.lock:
        for f in dev.files.values():
            minor = index + (128 if f.render else 0)
            name = getattr(f, "client_name", None) or "<unset>"
            lines.append(f"{f.comm:>20} {f.pid:>5} {minor:>3}   {'y' if f.master else 'n'}    "
                         f"{'y' if f.authenticated else 'n'} {f.uid:>5} {f.magic:>10} "
                         f"{name:>{w}} {f.id:>20}")
    return "\n".join(lines) + "\n"


def _copied(dev, what) -> list:
    """[(file, what(file))] for every file, copied under the device lock (C-speed
    copies of its tables); the text is then made outside the lock, so a client with
    100,000 BOs does not stall the others while root reads debugfs."""
    with dev.lock:
        return [(f, what(f)) for f in dev.files.values()]


def bo_line(id_: int, bo) -> str:
    """amdgpu_object.c amdgpu_bo_print_info: id, size, placement (all of VRAM is CPU
    visible: INFO VRAM_GTT's cpu_accessible_vram), pin count, export, creation flags.
    An exported BO's "ino" is its export token, the name of MOUNT/prime/<token-hex>."""
    placement = "VRAM VISIBLE" if bo.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM else DOMAIN_NAMES[bo.domain]
    line = f"\t\t0x{id_:08x}: {bo.size:12d} byte {placement}"
    if bo.pin_count:
        line += f" pin count {bo.pin_count}"
    if bo.export is not None:
        line += f" exported as ino:{bo.export.token}"
    return line + "".join(f" {n}" for n in BO_FLAGS if bo.flags & getattr(uapi, f"AMDGPU_GEM_CREATE_{n}"))


def gem_info(dev) -> str:
    """amdgpu_gem_info (amdgpu_gem.c amdgpu_debugfs_gem_info_show): each file's BOs by
    handle. Kernel BOs (context save areas, kmd/csa.py) have no handle and are not
    listed, as on Linux; amdgpu_vm_info lists them."""
    out = []
    for f, bos in _copied(dev, lambda f: list(f.bos.items())):
        out.append(f"pid {f.pid:8d} command {f.comm}:")
        out += [bo_line(handle, bo) for handle, bo in sorted(bos, key=lambda hb: hb[0])]
    return "\n".join(out) + "\n" if out else ""


PERMS = (("r", uapi.AMDGPU_VM_PAGE_READABLE), ("w", uapi.AMDGPU_VM_PAGE_WRITEABLE),
         ("x", uapi.AMDGPU_VM_PAGE_EXECUTABLE))


def vm_mappings(f, bos=None, mappings=None) -> list[str]:
    """One line per GPU VA mapping of a file (also used by crash dumps); `bos` and
    `mappings` are copies of its handle table and mappings, when made under the lock."""
    handles = {id(bo): h for h, bo in (f.bos.items() if bos is None else bos)}
    return [f"\t{m.va:#014x}-{m.end:#014x} {''.join(c if m.flags & b else '-' for c, b in PERMS)} "
            f"handle {handles.get(id(m.bo), 0)} bo_offset {m.offset:#x}"
            for m in (f.vm.mappings() if mappings is None else mappings)]


def _vm_lists(f, mapped: list, kernel: list) -> dict[str, list]:
    """The BOs of a file's VM by amdgpu's bo_va state (amdgpu_vm.h): page tables are
    updated at GEM_VA and at every move, so no BO is ever moved, relocated or
    invalidated. A per-VM BO (VM_ALWAYS_VALID) is idle, or evicted when out of its
    preferred domains; every other BO, the context save areas included, is done."""
    lists = {name: [] for name in VM_LISTS}
    for bo in mapped + kernel:
        if id(bo) not in f.per_vm_bos:
            lists["done"].append(bo)
        elif bo.domain & bo.preferred_domains:
            lists["idle"].append(bo)
        else:
            lists["evicted"].append(bo)
    return lists


def vm_info(dev) -> str:
    """amdgpu_vm_info (amdgpu_debugfs.c amdgpu_debugfs_vm_info_show and amdgpu_vm.c
    amdgpu_debugfs_vm_bo_info): per file its VM's BOs by state, numbered within each
    list, then each list's total size and count."""
    out = []
    for f, (mapped, kernel) in _copied(dev, lambda f: (f.vm.bos(), [bo for _, bo in _csa.kernel_bos(f)])):
        out.append(f"pid:{f.pid}\tProcess:{f.comm} ----------")
        lists = _vm_lists(f, mapped, kernel)
        for name, bos in lists.items():
            out.append(f"\t{name.capitalize()} BOs:")
            out += [bo_line(i, bo) for i, bo in enumerate(bos)]
        for name, bos in lists.items():
            out.append(f"\t{'Total ' + name + ' size:':<23} {sum(bo.size for bo in bos):12d}\tobjs:\t{len(bos)}")
    return "\n".join(out) + "\n" if out else ""


def vm_mappings_info(dev) -> str:
    """vgpu_vm_mappings, vgpu's own: each client's GPU VA mappings (vm_mappings)."""
    out = []
    for f, (pages, bos, maps) in _copied(dev, lambda f: (f.vm.page_table.mapped_pages(),
                                                          list(f.bos.items()), f.vm.mappings())):
        out.append(f"client {f.id} pid {f.pid} ({f.comm}): {pages} pages mapped")
        out.extend(vm_mappings(f, bos, maps))
    return "\n".join(out) + "\n" if out else ""


# amdgpu_kms.c amdgpu_debugfs_firmware_info_show, in its order: (label, fw_type, index).
FIRMWARE = [("VCE", uapi.AMDGPU_INFO_FW_VCE, 0), ("UVD", uapi.AMDGPU_INFO_FW_UVD, 0),
            ("MC", uapi.AMDGPU_INFO_FW_GMC, 0), ("ME", uapi.AMDGPU_INFO_FW_GFX_ME, 0),
            ("PFP", uapi.AMDGPU_INFO_FW_GFX_PFP, 0), ("CE", uapi.AMDGPU_INFO_FW_GFX_CE, 0),
            ("RLC", uapi.AMDGPU_INFO_FW_GFX_RLC, 0),
            ("RLC SRLC", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL, 0),
            ("RLC SRLG", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM, 0),
            ("RLC SRLS", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM, 0),
            ("MEC", uapi.AMDGPU_INFO_FW_GFX_MEC, 0), ("MEC2", uapi.AMDGPU_INFO_FW_GFX_MEC, 1),
            ("SOS", uapi.AMDGPU_INFO_FW_SOS, 0), ("ASD", uapi.AMDGPU_INFO_FW_ASD, 0)]
TA_NAMES = ("XGMI", "RAS", "HDCP", "DTM", "RAP", "SECUREDISPLAY")   # amdgpu_kms.c ta_fw_name
FIRMWARE_TAIL = [("VCN", uapi.AMDGPU_INFO_FW_VCN), ("DMCU", uapi.AMDGPU_INFO_FW_DMCU),
                 ("DMCUB", uapi.AMDGPU_INFO_FW_DMCUB), ("TOC", uapi.AMDGPU_INFO_FW_TOC)]


def _firmware(dev, fw_type: int, index: int = 0) -> tuple[int, int]:
    """(feature, ver): INFO FW_VERSION's answer, as amdgpu_firmware_info serves both."""
    a = uapi.drm_amdgpu_info(query=uapi.AMDGPU_INFO_FW_VERSION)
    a.query_fw.fw_type, a.query_fw.index = fw_type, index
    fw = uapi.drm_amdgpu_info_firmware.from_buffer_copy(_info._answer(dev, None, a))
    return fw.feature, fw.ver


def firmware_info(dev) -> str:
    """amdgpu_firmware_info: every firmware's feature and version, then the VBIOS."""
    line = "{} feature version: {}, firmware version: 0x{:08x}".format
    out = [line(name, *_firmware(dev, t, i)) for name, t, i in FIRMWARE]
    for i, name in enumerate(TA_NAMES):
        feature, ver = _firmware(dev, uapi.AMDGPU_INFO_FW_TA, i)
        out.append(f"TA {name} feature version: 0x{feature:08x}, firmware version: 0x{ver:08x}")
    feature, ver = _firmware(dev, uapi.AMDGPU_INFO_FW_SMC)
    out.append(f"SMC feature version: {feature}, firmware version: 0x{ver:08x} "
               f"({ver >> 16 & 0xFFFF}.{ver >> 8 & 0xFF}.{ver & 0xFF})")
    out += [line(f"SDMA{i}", *_firmware(dev, uapi.AMDGPU_INFO_FW_SDMA, i)) for i in range(len(dev.partition.sdma))]
    out += [line(name, *_firmware(dev, t)) for name, t in FIRMWARE_TAIL]
    out.append(f"VBIOS version: {VBIOS_PN}")
    return "\n".join(out) + "\n"
