"""samples/gpu_hang.py against a mount with a short ring timeout."""
from tests.e2e.test_samples import passed, run_sample


def test_gpu_hang_sample(short_timeout_mount):
    out = passed(run_sample("gpu_hang", short_timeout_mount))
    assert "signaled with error ETIME" in out and "signaled with error ECANCELED" in out
    assert "GUILTY_RESET" in out and "INNOCENT_RESET" in out and "GPU reset succeeded" in out
