"""samples/gpu_hang.py against a mount with a short ring timeout."""
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def test_gpu_hang_sample(short_timeout_mount):
    r = subprocess.run([sys.executable, str(Path(ROOT, "samples", "gpu_hang.py")), "--device",
                        short_timeout_mount], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "signaled with error ETIME" in out and "signaled with error ECANCELED" in out
    assert "GUILTY_RESET" in out and "INNOCENT_RESET" in out and "GPU reset succeeded" in out
