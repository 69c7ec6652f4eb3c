"""The power-management files of amdgpu's device directory, from the SMU model
(kmd/power.py), in amdgpu_pm.c's formats and units, where radeontop, nvtop and
`sensors` read them:

- `hwmon/hwmon0/`: name `amdgpu`; temp1_input (millidegrees C) with its label `edge`
  and its crit, crit_hyst and emergency limits; power1_average and power1_cap
  (microwatts); freq1_input / freq2_input (Hz) labelled `sclk` / `mclk`; in0_input
  (mV) labelled `vddgfx`;
- `pp_dpm_sclk`, `pp_dpm_mclk`: the DPM levels, `*` on the current one;
- `gpu_metrics`: the SMU's metrics table, binary (kmd/gpu_metrics.py);
- `power_dpm_force_performance_level` (`auto`: the model picks the level) and
  `unique_id`. The PCI core's `current_link_speed` and the like, beside them in the
  device's directory, are kmd/pci.py's.

An MI100's limits: edge 94 C critical (hysteresis 5 C below), 105 C emergency;
300 W cap.
"""
from __future__ import annotations

import hashlib

from vgpu import uapi

from . import gpu_metrics, power

TEMP_CRIT_MC, TEMP_CRIT_HYST_MC, TEMP_EMERGENCY_MC = 94_000, 89_000, 105_000
POWER_CAP_UW = 300_000_000


def _levels(levels, current: int) -> str:
    return "".join(f"{i}: {mhz}Mhz{' *' if mhz == current else ''}\n" for i, mhz in enumerate(levels))


def unique_id(dev) -> str:
    """amdgpu's unique_id: 16 hex digits, here derived from the PCI slot."""
    return hashlib.sha256(dev.partition.pci_slot.encode()).hexdigest()[:16]


def files(dev) -> dict:
    """The files of the device directory this module answers."""
    read = dev.power.read
    S = uapi
    mhz_to_hz = 1_000_000
    return {
        "hwmon": {"hwmon0": {
            "name": lambda: "amdgpu\n",
            "uevent": lambda: "",   # a class device without a dev_t: an empty uevent
            "temp1_input": lambda: f"{read(S.AMDGPU_INFO_SENSOR_GPU_TEMP)}\n",
            "temp1_label": lambda: "edge\n",
            "temp1_crit": lambda: f"{TEMP_CRIT_MC}\n",
            "temp1_crit_hyst": lambda: f"{TEMP_CRIT_HYST_MC}\n",
            "temp1_emergency": lambda: f"{TEMP_EMERGENCY_MC}\n",
            "power1_average": lambda: f"{read(S.AMDGPU_INFO_SENSOR_GPU_AVG_POWER) * 1_000_000}\n",
            "power1_cap": lambda: f"{POWER_CAP_UW}\n",
            "power1_cap_max": lambda: f"{POWER_CAP_UW}\n",
            "freq1_input": lambda: f"{read(S.AMDGPU_INFO_SENSOR_GFX_SCLK) * mhz_to_hz}\n",
            "freq1_label": lambda: "sclk\n",
            "freq2_input": lambda: f"{read(S.AMDGPU_INFO_SENSOR_GFX_MCLK) * mhz_to_hz}\n",
            "freq2_label": lambda: "mclk\n",
            "in0_input": lambda: f"{read(S.AMDGPU_INFO_SENSOR_VDDGFX)}\n",
            "in0_label": lambda: "vddgfx\n",
        }},
        "pp_dpm_sclk": lambda: _levels(power.DPM_SCLK_MHZ, read(S.AMDGPU_INFO_SENSOR_GFX_SCLK)),
        "pp_dpm_mclk": lambda: _levels((power.MCLK_IDLE_MHZ, power.MCLK_PEAK_MHZ),
                                       read(S.AMDGPU_INFO_SENSOR_GFX_MCLK)),
        "gpu_metrics": lambda: gpu_metrics.table(dev.power),
        "power_dpm_force_performance_level": lambda: "auto\n",
        "unique_id": lambda: unique_id(dev) + "\n",
    }
