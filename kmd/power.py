"""The power-management model behind AMDGPU_INFO_SENSOR: clocks, voltage,
temperature and power that follow what the emulated engines do.

An MI100's SMU picks a DPM level from the engines' activity, and heat and power
follow with a lag. vgpu has no SMU, so this module models one from the only input
it has, the load: the busy share of the busiest engine over the last second
(BusyMeter, the value of gpu_busy_percent). With load L in [0, 1]:

- GFX_SCLK steps through DPM_SCLK_MHZ, the lowest level idle, the top one from
  L >= 0.5 up (the SMU ramps up well before an engine is saturated); GFX_MCLK is
  MCLK_IDLE_MHZ idle and MCLK_PEAK_MHZ as soon as any engine is busy. The top
  levels are DEV_INFO's max_engine_clock / max_memory_clock (kmd/info.py).
- VDDGFX rises linearly with the shader clock, VDDGFX_MIN_MV to VDDGFX_MAX_MV.
- GPU_TEMP and GPU_AVG_POWER relax toward a target set by the load,
  TEMP_IDLE_C + L * TEMP_RISE_C and POWER_IDLE_W + L * POWER_RISE_W, as a
  first-order lag with time constants TEMP_TAU_S and POWER_TAU_S: a load that
  starts heats the part over tens of seconds, power follows within a second or two.
  The state advances whenever a sensor is read (nothing runs in the background),
  and the energy used so far (`energy_j`, gpu_metrics' energy_accumulator) grows by
  the mean of the power before and after each step times its length.
- GPU_LOAD is L in percent; the stable and peak pstate clocks are fixed levels
  (amdgpu's UMD pstates: the profile_standard and profile_peak levels).

Units are amdgpu_info's: MHz, millidegrees Celsius, percent, whole watts,
millivolts. VDDNB is an APU's rail: a dGPU's amdgpu answers EINVAL, as here.
"""
from __future__ import annotations

import errno
import math
import threading
import time

from vgpu import uapi

from .errors import KmdError

DPM_SCLK_MHZ = (300, 500, 700, 850, 1000)   # the top one is DEV_INFO's max_engine_clock
MCLK_IDLE_MHZ, MCLK_PEAK_MHZ = 500, 1000    # HBM2: low and high memory clock
STABLE_SCLK_MHZ, STABLE_MCLK_MHZ = 700, 1000
VDDGFX_MIN_MV, VDDGFX_MAX_MV = 700, 1050
TEMP_IDLE_C, TEMP_RISE_C, TEMP_TAU_S = 30.0, 45.0, 20.0
POWER_IDLE_W, POWER_RISE_W, POWER_TAU_S = 35.0, 255.0, 1.5
RAMP_LOAD = 0.5                             # load from which the top sclk level is used


class PowerModel:
    """One device's (or partition's) SMU: `load` gives the busy share in [0, 1]."""

    def __init__(self, load, clock=time.monotonic):
        self._load, self._clock = load, clock
        self._lock = threading.Lock()
        self._t = clock()
        self.temp_c, self.power_w = TEMP_IDLE_C, POWER_IDLE_W
        self.energy_j = 0.0

    def _advance(self, load: float) -> None:
        """Move temperature and power toward their targets for the time since the
        last reading, as if the load had been `load` all along."""
        now = self._clock()
        dt, self._t = max(0.0, now - self._t), now
        self.temp_c += (TEMP_IDLE_C + load * TEMP_RISE_C - self.temp_c) * (1 - math.exp(-dt / TEMP_TAU_S))
        before = self.power_w
        self.power_w += (POWER_IDLE_W + load * POWER_RISE_W - self.power_w) * (1 - math.exp(-dt / POWER_TAU_S))
        self.energy_j += (before + self.power_w) / 2 * dt

    @staticmethod
    def sclk_mhz(load: float) -> int:
        if load <= 0:
            return DPM_SCLK_MHZ[0]
        top = len(DPM_SCLK_MHZ) - 1
        return DPM_SCLK_MHZ[max(1, min(top, math.ceil(load / RAMP_LOAD * top)))]

    def snapshot(self) -> tuple[float, float, float, float]:
        """One reading of the whole model: (load in [0, 1], temperature C, power W,
        energy J so far), for tables that report several values of one moment."""
        load = min(1.0, max(0.0, self._load()))
        with self._lock:
            self._advance(load)
            return load, self.temp_c, self.power_w, self.energy_j

    @staticmethod
    def mclk_mhz(load: float) -> int:
        return MCLK_PEAK_MHZ if load > 0 else MCLK_IDLE_MHZ

    def read(self, sensor: int) -> int:
        """One AMDGPU_INFO_SENSOR value. EINVAL: VDDNB (no such rail on a dGPU) or an
        unknown sensor."""
        load, temp, power, _ = self.snapshot()
        sclk = self.sclk_mhz(load)
        values = {
            uapi.AMDGPU_INFO_SENSOR_GFX_SCLK: sclk,
            uapi.AMDGPU_INFO_SENSOR_GFX_MCLK: self.mclk_mhz(load),
            uapi.AMDGPU_INFO_SENSOR_GPU_TEMP: round(temp * 1000),
            uapi.AMDGPU_INFO_SENSOR_GPU_LOAD: round(load * 100),
            uapi.AMDGPU_INFO_SENSOR_GPU_AVG_POWER: int(power),
            uapi.AMDGPU_INFO_SENSOR_VDDGFX: round(VDDGFX_MIN_MV + (VDDGFX_MAX_MV - VDDGFX_MIN_MV)
                                                  * (sclk - DPM_SCLK_MHZ[0]) / (DPM_SCLK_MHZ[-1] - DPM_SCLK_MHZ[0])),
            uapi.AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK: STABLE_SCLK_MHZ,
            uapi.AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_MCLK: STABLE_MCLK_MHZ,
            uapi.AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_SCLK: DPM_SCLK_MHZ[-1],
            uapi.AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_MCLK: MCLK_PEAK_MHZ,
        }
        if sensor not in values:
            what = "VDDNB is an APU's rail" if sensor == uapi.AMDGPU_INFO_SENSOR_VDDNB else "unknown sensor"
            raise KmdError(errno.EINVAL, f"AMDGPU_INFO_SENSOR type {sensor}: {what}")
        return values[sensor]
