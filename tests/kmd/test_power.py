"""The SMU model behind AMDGPU_INFO_SENSOR (kmd/power.py): clocks ramp up with the
load, temperature and power follow it with a lag, units as amdgpu_info's; and the
INFO query through the dispatch, idle and while an engine is busy."""
import errno
import struct
import time

import pytest

from kmd import power
from kmd.errors import KmdError
from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import call
from .test_cs import VA_A, Setup

S = uapi


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def model(load):
    clock = Clock()
    box = {"load": load}
    return power.PowerModel(lambda: box["load"], clock), clock, box


def test_idle_part():
    m, _, _ = model(0.0)
    assert m.read(S.AMDGPU_INFO_SENSOR_GFX_SCLK) == 300
    assert m.read(S.AMDGPU_INFO_SENSOR_GFX_MCLK) == 500
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_LOAD) == 0
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_TEMP) == 30000          # millidegrees
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_AVG_POWER) == 35        # watts
    assert m.read(S.AMDGPU_INFO_SENSOR_VDDGFX) == 700              # millivolts
    assert m.read(S.AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK) == 700
    assert m.read(S.AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_SCLK) == 1000
    assert m.read(S.AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_MCLK) == 1000


@pytest.mark.parametrize("load,sclk", [(0.01, 500), (0.2, 700), (0.3, 850), (0.5, 1000), (1.0, 1000)])
def test_clocks_ramp_up_with_the_load(load, sclk):
    m, _, _ = model(load)
    assert m.read(S.AMDGPU_INFO_SENSOR_GFX_SCLK) == sclk
    assert m.read(S.AMDGPU_INFO_SENSOR_GFX_MCLK) == 1000
    assert 700 < m.read(S.AMDGPU_INFO_SENSOR_VDDGFX) <= 1050


def test_temperature_and_power_follow_the_load_with_a_lag():
    m, clock, box = model(1.0)
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_TEMP) == 30000      # no time has passed
    clock.t += power.POWER_TAU_S
    p1 = m.read(S.AMDGPU_INFO_SENSOR_GPU_AVG_POWER)
    assert 35 + 0.6 * 255 < p1 < 35 + 0.7 * 255                # 1 - 1/e of the way
    t1 = m.read(S.AMDGPU_INFO_SENSOR_GPU_TEMP)
    assert 30000 < t1 < 40000                                  # heat is slower
    clock.t += 10 * power.TEMP_TAU_S
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_TEMP) == pytest.approx(75000, abs=50)
    assert m.read(S.AMDGPU_INFO_SENSOR_GPU_AVG_POWER) == 290      # 35 + 255 W
    box["load"] = 0.0                                          # the load stops: it cools down
    clock.t += power.TEMP_TAU_S
    cooled = m.read(S.AMDGPU_INFO_SENSOR_GPU_TEMP)
    assert 30000 < cooled < 50000


@pytest.mark.parametrize("sensor", [S.AMDGPU_INFO_SENSOR_VDDNB, 0, 0x99])
def test_sensors_a_dgpu_lacks(sensor):
    m, _, _ = model(0.0)
    with pytest.raises(KmdError) as e:
        m.read(sensor)
    assert e.value.errno == errno.EINVAL


def sensor(dev, f, kind) -> int:
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = uapi.AMDGPU_INFO_SENSOR, 4
    a.sensor_info.type = kind
    _, out = call(dev, f, "AMDGPU_INFO", a)
    return int.from_bytes(out[:4], "little")


def test_info_sensor_sees_a_busy_engine(dev, client):
    assert sensor(dev, client, S.AMDGPU_INFO_SENSOR_GFX_SCLK) == 300
    assert sensor(dev, client, S.AMDGPU_INFO_SENSOR_GPU_LOAD) == 0
    s = Setup(dev, client)
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))      # keeps sdma0 busy until the CPU writes
    time.sleep(0.6)
    assert sensor(dev, client, S.AMDGPU_INFO_SENSOR_GPU_LOAD) >= 40
    assert sensor(dev, client, S.AMDGPU_INFO_SENSOR_GFX_SCLK) > 300
    assert sensor(dev, client, S.AMDGPU_INFO_SENSOR_GFX_MCLK) == 1000
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seq) == 0


def test_amdgpu_pm_info_prints_the_model_as_amdgpu_does(dev):
    text = dev.debugfs_files()["amdgpu_pm_info"]()
    lines = text.splitlines()
    assert lines[:7] == ["GFX Clocks and Power:", "\t500 MHz (MCLK)", "\t300 MHz (SCLK)", "\t700 MHz (PSTATE_SCLK)",
                         "\t1000 MHz (PSTATE_MCLK)", "\t700 mV (VDDGFX)", "\t35.00 W (average GPU)"]
    assert "GPU Temperature: 30 C" in lines and "GPU Load: 0 %" in lines


def test_hwmon_and_pp_files_in_amdgpus_units(dev, client):
    files = dev.sysfs_files()
    hw = files["hwmon"]["hwmon0"]
    assert hw["name"]() == "amdgpu\n" and hw["temp1_label"]() == "edge\n"
    assert hw["temp1_input"]() == "30000\n"                         # millidegrees, idle
    assert int(hw["temp1_crit"]()) < int(hw["temp1_emergency"]())
    assert hw["power1_average"]() == "35000000\n"                   # microwatts
    assert hw["power1_cap"]() == "300000000\n"
    assert (hw["freq1_label"](), hw["freq2_label"]()) == ("sclk\n", "mclk\n")
    assert hw["freq1_input"]() == "300000000\n" and hw["freq2_input"]() == "500000000\n"   # Hz
    assert hw["in0_input"]() == "700\n" and hw["in0_label"]() == "vddgfx\n"
    assert files["pp_dpm_sclk"]().splitlines() == ["0: 300Mhz *", "1: 500Mhz", "2: 700Mhz", "3: 850Mhz", "4: 1000Mhz"]
    assert files["pp_dpm_mclk"]().splitlines() == ["0: 500Mhz *", "1: 1000Mhz"]
    assert files["power_dpm_force_performance_level"]() == "auto\n"
    assert len(files["unique_id"]().strip()) == 16 and files["current_link_width"]() == "16\n"
    s = Setup(dev, client)                                        # busy: the clocks move
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    time.sleep(0.6)
    assert files["pp_dpm_mclk"]().splitlines()[1] == "1: 1000Mhz *"
    assert int(hw["freq1_input"]()) > 300_000_000
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seq) == 0
