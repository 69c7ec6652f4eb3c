"""End to end: the object limits are mount options (kmd/limits.py, docs/kmd.md
"Limits"); past one, a request fails with Linux's errno and kmsg says so once."""
import pytest

from tests.conftest import _mounted
from tests.helpers import NOBODY, read_text, run_client, vgpu_cli

CLIENT = """
import errno, sys
from vgpu import uapi
from tests.helpers import Drm
d = Drm(sys.argv[1])
out = []
for _ in range(5):
    try:
        d.gem_create(4096)
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
for _ in range(4):
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    try:
        d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))
"""


@pytest.fixture
def limited_mount():
    yield from _mounted("--vram", "64M", "--max-bos-per-file", "3", "--max-contexts", "2")


def test_mount_options_set_the_limits(limited_mount):
    r = run_client(CLIENT, limited_mount, uid=NOBODY, check=True)
    assert r.stdout.split() == ["ok"] * 3 + ["ENOSPC"] * 2 + ["ok"] * 2 + ["ENOMEM"] * 2
    kmsg = read_text(f"{limited_mount}/dev/kmsg")
    assert kmsg.count("reached the per-file limit of 3 BOs (ENOSPC; vgpu mount --max-bos-per-file N") == 1
    assert kmsg.count("reached the device's limit of 2 contexts (ENOMEM; vgpu mount --max-contexts N") == 1
    assert "limits set at mount: --max-bos-per-file 3 (default 131072), --max-contexts 2 (default 65536)" in kmsg


def test_a_bad_limit_or_group_is_refused_before_mounting(tmp_path):
    r = vgpu_cli("mount", tmp_path, "--max-bos", "-1")
    assert r.returncode == 2 and "--max-bos" in r.stderr
    r = vgpu_cli("mount", tmp_path, "--group", "no-such-group-here")
    assert r.returncode == 2 and "no group named" in r.stderr
