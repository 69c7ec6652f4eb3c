"""Fixtures of the vdev tests: the real KMD behind the file system (no mount)."""
import pytest

from kmd.device import Device

MiB = 1 << 20


@pytest.fixture
def dev(request):
    d = Device(vram_size=2 * MiB, gtt_size=2 * MiB, timeout=1.0)
    request.addfinalizer(d.shutdown)
    return d
