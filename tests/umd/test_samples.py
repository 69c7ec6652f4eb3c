"""The umd samples (samples/umd_*.py) run end to end against a fresh mount, each in its
own process with an empty kernel cache, and pass their own numpy checks."""
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, _env

SAMPLES = ("umd_saxpy", "umd_matmul", "umd_softmax", "umd_mlp")


def run_sample(name: str, *args, mount: str | None = None, cache_dir) -> subprocess.CompletedProcess:
    env = _env(mount)
    env["VGPU_CACHE_DIR"] = str(cache_dir)
    env.pop("VGPU_DEBUG", None)
    return subprocess.run([sys.executable, os.path.join(ROOT, "samples", f"{name}.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_passes(name, vgpu_mount, tmp_path):
    r = run_sample(name, "--device", vgpu_mount, cache_dir=tmp_path)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("PASS"), \
        f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert os.listdir(tmp_path), "the sample's kernels were not written to VGPU_CACHE_DIR"


def test_sample_uses_vgpu_mount_without_device(vgpu_mount, tmp_path):
    r = run_sample("umd_saxpy", "--n", "5000", mount=vgpu_mount, cache_dir=tmp_path)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert f"device {vgpu_mount}:" in r.stdout
