"""MOUNT/sys/kernel/debug/dri/0/*: the driver's state as text, in the spirit of
amdgpu's debugfs files (amdgpu_fence_info, amdgpu_gem_info, clients, ring_*)."""
import errno
import time

from vgpu import uapi

from . import csa as _csa, perf
from .gem import DOMAIN_NAMES


def files(dev) -> dict:
    return {
        # drm_name_info: the driver's name (amdgpu_drv.c DRIVER_NAME), then the device.
        "name": lambda: "amdgpu dev=0000:00:00.0 unique=0000:00:00.0\n",
        "clients": lambda: clients(dev),
        "gem_info": lambda: gem_info(dev),
        "vm_info": lambda: vm_info(dev),
        "fence_info": lambda: fence_info(dev),
        "amdgpu_pm_info": lambda: pm_info(dev),
        "gpu_reset": (lambda: f"resets: {dev.reset_counter}\n", lambda data: dev.gpu_reset()),
        **{f"ring_{r.name}": r.describe for r in dev.rings.values()},
    }


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
    out = []
    for r in dev.rings.values():
        out.append(f"--- ring {r.ring_id} ({r.name}) ---")
        out.append(f"Last signaled fence {r.signaled_seq:#018x}")
        out.append(f"Last emitted        {r.hw_emitted:#018x}")
        out.append(f"Last completed (wb) {r.fence_wb:#018x}")
        out.append(f"Last CS seq         {r.emitted_seq:#018x}")
        failed = [f for f in list(r.fences.values())[-64:] if f.signaled and f.error]
        for f in failed[-8:]:
            out.append(f"  seq {f.seq:#x} signaled with error {errno.errorcode.get(f.error, f.error)}")
    return "\n".join(out) + "\n"


def clients(dev) -> str:
    lines = [f"{'command':>20} {'tgid':>5} {'dev':>3} {'master':>6} {'uid':>5} {'id':>4} node"]
    with dev.lock:
        for f in dev.files.values():
            lines.append(f"{f.comm:>20} {f.pid:>5} {0:>3} {'n':>6} {f.uid:>5} {f.id:>4} {f.node}")
    return "\n".join(lines) + "\n"


def _copied(dev, what) -> list:
    """[(file, what(file))] for every file, copied under the device lock (C-speed
    copies of its tables); the text is then made outside the lock, so a client with
    100,000 BOs does not stall the others while root reads debugfs."""
    with dev.lock:
        return [(f, what(f)) for f in dev.files.values()]


def gem_info(dev) -> str:
    """amdgpu_gem_info: each client's BOs by handle, then its kernel BOs (the context
    save areas of its contexts, kmd/csa.py)."""
    out = []
    for f, (bos, kernel) in _copied(dev, lambda f: (list(f.bos.items()), _csa.kernel_bos(f))):
        out.append(f"pid {f.pid:8d} command {f.comm} client {f.id}:")
        for handle, bo in sorted(bos):
            out.append(f"\t{handle:#010x}: {bo.size:12d} byte {DOMAIN_NAMES[bo.domain]:>4} "
                       f"{bo.where} flags {bo.flags:#x} offset {bo.mmap_offset:#x}"
                       + (f" exported prime/{bo.export.token:x}" if bo.export is not None else "")
                       + (f" {bo.userptr.describe()}" if bo.userptr is not None else ""))
        for ctx_id, bo in kernel:
            out.append(f"\tctx {ctx_id} csa: {bo.size:12d} byte {DOMAIN_NAMES[bo.domain]:>4} "
                       f"{bo.where} kernel")
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


def vm_info(dev) -> str:
    out = []
    for f, (pages, bos, maps) in _copied(dev, lambda f: (f.vm.page_table.mapped_pages(),
                                                          list(f.bos.items()), f.vm.mappings())):
        out.append(f"client {f.id} pid {f.pid} ({f.comm}): {pages} pages mapped")
        out.extend(vm_mappings(f, bos, maps))
    return "\n".join(out) + "\n" if out else ""
