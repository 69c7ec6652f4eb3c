"""sysfs `gpu_metrics`: the SMU's metrics table as Arcturus's amdgpu exports it
(arcturus_ppt.c, arcturus_get_gpu_metrics), where amdgpu_top, amd-smi and newer
nvtop read temperatures, activity, power and clocks in one read.

The layout is struct gpu_metrics_v1_3 of drivers/gpu/drm/amd/include/
kgd_pp_interface.h (natural alignment, 120 bytes), header format 1, content 3.
smu_cmn_init_soft_gpu_metrics first sets every byte to 0xFF; Arcturus then fills
its fields from the SMU's table. Here they come from one reading of the SMU model
(kmd/power.py PowerModel.snapshot), in the table's units: degrees C, percent,
watts, MHz, 0.1 GT/s:

- temperature_edge: the model's one temperature; the hotspot, HBM and VR sensors it
  does not have stay all ones ("not available" to the tools), as do the per-stack
  temperature_hbm, the voltages and firmware_timestamp Arcturus never fills;
- average_gfx_activity and average_umc_activity: the load (the model has one, the
  busiest engine's share; the memory controller is busy when any engine is);
  average_mm_activity and the VCLK/DCLK clocks: all ones (no video engine);
- average_socket_power; energy_accumulator in the SMU's 15.259 µJ (2^-16 J) units;
- average and current GFXCLK and UCLK: the DPM levels the model is at (it has no
  averaging window: the two are the same); SOCCLK: all ones (not modelled);
- throttle_status and indep_throttle_status 0 (the model never throttles);
  current_fan_speed all ones (an MI100 is passively cooled: no fan to report);
- pcie_link_width and pcie_link_speed: the link of kmd/pci.py, x16 at 160
  (16.0 GT/s); system_clock_counter: CLOCK_BOOTTIME in ns (ktime_get_boottime_ns).
"""
from __future__ import annotations

import ctypes
import time

from . import pci

u16, u32, u64 = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
NUM_HBM_INSTANCES = 4
ENERGY_UNIT_J = 2.0 ** -16


class MetricsTableHeader(ctypes.Structure):
    _fields_ = [("structure_size", u16), ("format_revision", ctypes.c_uint8), ("content_revision", ctypes.c_uint8)]


class GpuMetricsV13(ctypes.Structure):
    """struct gpu_metrics_v1_3, field for field."""
    _fields_ = [
        ("common_header", MetricsTableHeader),
        ("temperature_edge", u16), ("temperature_hotspot", u16), ("temperature_mem", u16),
        ("temperature_vrgfx", u16), ("temperature_vrsoc", u16), ("temperature_vrmem", u16),
        ("average_gfx_activity", u16), ("average_umc_activity", u16), ("average_mm_activity", u16),
        ("average_socket_power", u16), ("energy_accumulator", u64),
        ("system_clock_counter", u64),
        ("average_gfxclk_frequency", u16), ("average_socclk_frequency", u16), ("average_uclk_frequency", u16),
        ("average_vclk0_frequency", u16), ("average_dclk0_frequency", u16), ("average_vclk1_frequency", u16),
        ("average_dclk1_frequency", u16),
        ("current_gfxclk", u16), ("current_socclk", u16), ("current_uclk", u16), ("current_vclk0", u16),
        ("current_dclk0", u16), ("current_vclk1", u16), ("current_dclk1", u16),
        ("throttle_status", u32),
        ("current_fan_speed", u16),
        ("pcie_link_width", u16), ("pcie_link_speed", u16),
        ("padding", u16),
        ("gfx_activity_acc", u32), ("mem_activity_acc", u32),
        ("temperature_hbm", u16 * NUM_HBM_INSTANCES),
        ("firmware_timestamp", u64),
        ("voltage_soc", u16), ("voltage_gfx", u16), ("voltage_mem", u16),
        ("padding1", u16),
        ("indep_throttle_status", u64),
    ]


def table(model) -> bytes:
    """The gpu_metrics bytes of one reading of ``model`` (a kmd.power.PowerModel)."""
    m = GpuMetricsV13.from_buffer_copy(b"\xff" * ctypes.sizeof(GpuMetricsV13))
    m.common_header.structure_size = ctypes.sizeof(GpuMetricsV13)
    m.common_header.format_revision, m.common_header.content_revision = 1, 3
    load, temp_c, power_w, energy_j = model.snapshot()
    activity = round(load * 100)
    sclk, mclk = model.sclk_mhz(load), model.mclk_mhz(load)
    m.temperature_edge = round(temp_c)
    m.average_gfx_activity = m.average_umc_activity = activity
    m.average_socket_power = int(power_w)
    m.energy_accumulator = int(energy_j / ENERGY_UNIT_J)
    m.system_clock_counter = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    m.average_gfxclk_frequency = m.current_gfxclk = sclk
    m.average_uclk_frequency = m.current_uclk = mclk
    m.throttle_status = m.indep_throttle_status = 0
    m.pcie_link_width = pci.LINK_WIDTH
    m.pcie_link_speed = pci.LINK_SPEED_DECI_GTS
    return bytes(m)
