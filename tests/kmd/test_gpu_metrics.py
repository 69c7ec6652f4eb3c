"""sysfs gpu_metrics (kmd/gpu_metrics.py): Arcturus's struct gpu_metrics_v1_3, its
header, its layout (kgd_pp_interface.h, natural alignment), the fields
arcturus_get_gpu_metrics fills taken from the SMU model and every other field all
ones, as smu_cmn_init_soft_gpu_metrics leaves it."""
import ctypes
import struct
import time

from kmd import gpu_metrics, power
from kmd.hw import SdmaIb

from .test_cs import VA_A, Setup
from .test_power import model

M = gpu_metrics.GpuMetricsV13


def read(dev) -> M:
    data = dev.sysfs_files()["gpu_metrics"]()
    assert isinstance(data, bytes) and len(data) == ctypes.sizeof(M)
    return M.from_buffer_copy(data)


def test_layout_is_the_kernels():
    assert ctypes.sizeof(M) == 120
    offsets = {"energy_accumulator": 24, "system_clock_counter": 32, "average_gfxclk_frequency": 40,
               "current_gfxclk": 54, "throttle_status": 68, "current_fan_speed": 72, "pcie_link_width": 74,
               "pcie_link_speed": 76, "gfx_activity_acc": 80, "temperature_hbm": 88, "firmware_timestamp": 96,
               "voltage_soc": 104, "indep_throttle_status": 112}
    assert {name: getattr(M, name).offset for name in offsets} == offsets


def test_an_idle_part(dev):
    before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    m = read(dev)
    h = m.common_header
    assert (h.structure_size, h.format_revision, h.content_revision) == (120, 1, 3)
    assert m.temperature_edge == 30 and m.average_gfx_activity == 0 and m.average_umc_activity == 0
    assert m.average_socket_power == 35
    assert (m.current_gfxclk, m.average_gfxclk_frequency, m.current_uclk, m.average_uclk_frequency) == (300, 300,
                                                                                                          500, 500)
    assert (m.pcie_link_width, m.pcie_link_speed) == (16, 160)                  # x16, 16.0 GT/s in 0.1 GT/s
    assert m.throttle_status == 0 and m.indep_throttle_status == 0
    assert before <= m.system_clock_counter <= time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    # what the model does not have (no VCN, one temperature, no fan...): all ones
    assert m.average_mm_activity == m.current_vclk0 == m.temperature_hotspot == m.current_fan_speed == 0xFFFF
    assert m.firmware_timestamp == (1 << 64) - 1 and list(m.temperature_hbm) == [0xFFFF] * 4


def test_a_busy_engine_shows_and_energy_accumulates(dev, client):
    first = read(dev).energy_accumulator
    s = Setup(dev, client)
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))      # keeps sdma0 busy until the CPU writes
    time.sleep(0.6)
    m = read(dev)
    assert m.average_gfx_activity >= 40 and m.current_gfxclk > 300 and m.current_uclk == 1000
    assert m.energy_accumulator > first
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seq) == 0


def test_the_model_integrates_power_into_energy():
    m, clock, box = model(0.0)
    assert m.energy_j == 0.0
    clock.t += 10.0
    m.read(power.uapi.AMDGPU_INFO_SENSOR_GPU_AVG_POWER)
    assert abs(m.energy_j - power.POWER_IDLE_W * 10.0) < 1e-6     # idle power, 10 s
