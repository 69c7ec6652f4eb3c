"""umd.device.check_kmd's driver check: a vgpu device names the driver "amdgpu" as
amdgpu 3.x does (kmd/info.py), and umd tells it from a real amdgpu device by the
description, since only vgpu runs vISA."""
from types import SimpleNamespace

import pytest

import libvgpu
import umd
from umd import device as udev


def fake(name, desc):
    return SimpleNamespace(version=libvgpu.DrmVersion(3, 49, 0, name, "20261129", desc),
                           mount="/tmp/x", node="/tmp/x/dev/dri/renderD128")


@pytest.mark.parametrize("name,desc", [
    ("vgpu", "vgpu virtual GPU"),             # the name before vgpu answered as amdgpu
    ("amdgpu", "AMD GPU"),                    # a real amdgpu device: not vISA
    ("i915", "Intel Graphics"),
])
def test_other_drivers_are_refused(name, desc):
    with pytest.raises(umd.VersionMismatch) as e:
        udev.check_kmd(fake(name, desc))
    assert "point VGPU_MOUNT at a vgpu mount" in str(e.value) and repr(name) in str(e.value)


def test_the_kmds_own_answer_passes_the_name_check():
    from kmd import info
    v = fake(info.DRIVER_NAME.decode(), info.DRIVER_DESC.decode()).version
    assert v.name == udev.REQUIRED_DRIVER and v.desc.startswith(udev.REQUIRED_DESC)
