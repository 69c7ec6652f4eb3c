"""`python3 -m vgpu_tools.demo` (the Python half of `make demo`) on its own temporary
mountpoint: it passes and leaves nothing behind, neither the mountpoint nor the daemon
log `vgpu mount` keeps for it."""
import glob
import os
import subprocess
import sys
import tempfile

from tests.helpers import ROOT, _env
from vgpu_tools.cli import state_paths


def test_demo_passes_and_leaves_no_mountpoint_or_log():
    env = _env()
    env["TMPDIR"] = tmp = tempfile.mkdtemp(prefix="vgpu-demo-test-")
    try:
        r = subprocess.run([sys.executable, "-m", "vgpu_tools.demo"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "FAIL" not in r.stdout, f"{r.stdout}\n{r.stderr}"
        assert glob.glob(os.path.join(tmp, "vgpu-demo-*")) == []
        with open("/proc/self/mountinfo") as f:
            assert tmp not in f.read()
        mount = r.stdout.split("== mounting vgpu at ", 1)[1].split("\n", 1)[0]
        assert not any(p.exists() for p in state_paths(mount))   # same VGPU_STATE_DIR as env
    finally:
        os.system(f"rm -rf {tmp}")
