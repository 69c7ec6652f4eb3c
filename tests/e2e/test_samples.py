"""Every sample (samples/*.py) passes against a fresh mount, given `--device MOUNT` and
given `--device MOUNT/dev/dri/renderD128`: one device-path rule for all of them
(samples/session.py add_device_argument). Each runs at its smallest size, in its own
process, with an empty kernel cache; what a sample prints is checked by the sample's
own test (test_sdma_e2e.py, test_compute_e2e.py, test_gpu_hang_sample.py,
test_syncobj_timeline_sample.py, test_preemption_e2e.py, test_partitions_e2e.py,
test_cache_model_e2e.py, test_eviction_e2e.py), which run it through :func:`run_sample` too."""
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, _env

#: Every sample, with the arguments of its smallest run.
SAMPLES = {
    "sdma_write_linear": ["--size", "4096"],
    "sdma_const_fill": ["--size", "4096"],
    "sdma_copy_linear": ["--size", "4096"],
    "syncobj_timeline": [],
    "gpu_hang": [],
    "compute_vector_add": ["--n", "64"],
    "gpu_fault": [],
    "umd_saxpy": ["--n", "1000"],
    "umd_matmul": [],
    "umd_softmax": ["--rows", "2", "--cols", "200"],
    "umd_mlp": [],
    "sync_bug_ib_reuse": [],
    "preemption": ["--low-rounds", "40000", "--arrive-after", "0.05"],
    "timeslice": ["--rounds", "2000", "--chunks", "4"],
    "partitions": [],
    "cache_flush_bug": [],
    "vram_oversubscription": [],
}
#: The mount a sample needs, when not a plain one.
MOUNTS = {"gpu_hang": "short_timeout_mount", "partitions": "partitions_mount",
          "cache_flush_bug": "cache_model_mount"}     # the L2 model, or the bug cannot show
UMD_SAMPLES = [name for name in SAMPLES if name.startswith("umd_")]
DEVICE_PATHS = {"mount": "", "render-node": "dev/dri/renderD128"}   # --device, relative to the mount


def run_sample(name: str, device: str | None, *args, cache_dir=None, mount_env: str | None = None,
               timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``samples/<name>.py --device DEVICE ARGS`` (no --device when ``device`` is None)
    as a user would, with this repository on PYTHONPATH; ``cache_dir`` becomes
    VGPU_CACHE_DIR (the umd kernel cache), ``mount_env`` VGPU_MOUNT; ``env`` adds
    variables (VGPU_USERQ=0: umd on CS)."""
    extra, env = env, _env(mount_env)
    env.pop("VGPU_DEBUG", None)
    env.update(extra or {})
    if cache_dir is not None:
        env["VGPU_CACHE_DIR"] = str(cache_dir)
    device_args = [] if device is None else ["--device", device]
    return subprocess.run([sys.executable, os.path.join(ROOT, "samples", f"{name}.py"), *device_args, *args],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def passed(r: subprocess.CompletedProcess) -> str:
    """The sample's stdout, after checking that it exited 0 with PASS as its last line."""
    assert r.returncode == 0 and r.stdout.rstrip().endswith("PASS"), f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("path", DEVICE_PATHS.values(), ids=DEVICE_PATHS.keys())
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_passes(name, path, request, tmp_path):
    # gpu_hang and partitions wait for the ring timeout: 0.5 s instead of 2 s
    mount = request.getfixturevalue(MOUNTS.get(name, "vgpu_mount"))
    device = os.path.join(mount, path) if path else mount
    out = passed(run_sample(name, device, *SAMPLES[name], cache_dir=tmp_path))
    if name in UMD_SAMPLES:
        assert f"device {mount}:" in out       # umd.Device.mount is the mount point either way
        assert os.listdir(tmp_path), "the sample's kernels were not written to VGPU_CACHE_DIR"


def test_umd_sample_without_device_uses_vgpu_mount(vgpu_mount, tmp_path):
    out = passed(run_sample("umd_saxpy", None, *SAMPLES["umd_saxpy"], cache_dir=tmp_path, mount_env=vgpu_mount))
    assert f"device {vgpu_mount}:" in out


@pytest.mark.parametrize("name", ["sdma_copy_linear", "syncobj_timeline", "umd_saxpy"])
def test_sample_passes_over_the_frame_protocol(name, vgpu_mount, tmp_path, monkeypatch):
    """The legacy transport through the real client: libvgpu with VGPU_TRANSPORT=frame
    writes request frames and reads replies, and under strace no DRM ioctl is made."""
    monkeypatch.setenv("VGPU_TRANSPORT", "frame")
    passed(run_sample(name, vgpu_mount, *SAMPLES[name], cache_dir=tmp_path))
    if name != "sdma_copy_linear":
        return
    log = tmp_path / "strace.log"
    env = _env()
    r = subprocess.run(["strace", "-f", "-e", "trace=ioctl,pwrite64", "-o", str(log), sys.executable,
                        os.path.join(ROOT, "samples", "sdma_copy_linear.py"), "--device", vgpu_mount, "--size", "4096"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert "pwrite64(" in text and "DRM_IOCTL_AMDGPU_CS" not in text
