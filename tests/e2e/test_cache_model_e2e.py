"""`vgpu mount --cache-model` end to end (docs/cache.md): the mount option reaches the
device, samples/cache_flush_bug.py shows the forgotten write-back and its fix, umd
programs stay right with the L2 model on, and the L2 counters reach sysfs."""
import os
import re

from tests.helpers import read_text

from .test_samples import passed, run_sample

CACHE = "sys/class/drm/card0/device/vgpu_cache"


def fields(mount: str) -> dict:
    return dict(line.split(" ", 1) for line in read_text(os.path.join(mount, CACHE)).splitlines())


def test_the_option_gives_the_device_an_l2(cache_model_mount, vgpu_mount):
    assert fields(cache_model_mount)["model"] == "l2"
    assert int(fields(cache_model_mount)["size"]) == 4 << 20
    assert "L2 cache model 4 MiB" in read_text(os.path.join(cache_model_mount, "dev/kmsg"))
    assert fields(vgpu_mount) == {"model": "none"}      # off by default


def test_cache_flush_sample_shows_the_bug_then_the_fix(cache_model_mount):
    out = passed(run_sample("cache_flush_bug", cache_model_mount))
    bug, fix = out.split("fix: RELEASE_MEM writes the L2 back")
    assert "RELEASE_MEM event=0x28 l2=none" in bug and "l2=wb " in fix
    assert "reads c: 0 of 1024 elements are a + b" in bug          # stale at ready
    assert "0 of 1024 elements of d are a + b" in bug              # the SDMA copy too
    assert "1024 of 1024 elements of c are a + b" in bug           # the job's fence wrote it back
    assert "reads c: 1024 of 1024" in fix and "1024 of 1024 elements of d" in fix
    assert "the bug showed" in out and "the fix worked" in out
    c = fields(cache_model_mount)
    assert int(c["l2_misses"]) > 0 and int(c["l2_writebacks"]) > 0 and int(c["l2_invalidations"]) > 0


def test_cache_flush_sample_explains_a_mount_without_the_model(vgpu_mount):
    out = passed(run_sample("cache_flush_bug", vgpu_mount))
    assert "cache model: none (vgpu mount --cache-model MOUNT adds one)" in out
    assert "this mount has no L2 model" in out and "mount with --cache-model" in out


def test_umd_programs_are_right_with_the_model_on(cache_model_mount, tmp_path):
    """The UMD's acquire at each compute IB and release after each kernel (and the
    KMD's job frame) keep umd programs right; their kernels went through the L2."""
    for name, args in (("umd_saxpy", ["--n", "5000"]), ("umd_matmul", []), ("umd_softmax", ["--rows", "3", "--cols", "300"])):
        passed(run_sample(name, cache_model_mount, *args, cache_dir=tmp_path))
    # umd's streams ran on user queues (docs/userq.md): the device's L2 counters, which
    # every engine's traffic goes through, show the kernels' hits and write-backs.
    l2 = dict(line.split(None, 1) for line in read_text(os.path.join(cache_model_mount, CACHE)).splitlines())
    assert int(l2["l2_hits"]) > 0 and int(l2["l2_writebacks"]) > 0 and int(l2["l2_misses"]) > 0
    # and on the CS path (VGPU_USERQ=0) the compute ring's job frame did its ACQUIRE_MEM
    passed(run_sample("umd_saxpy", cache_model_mount, "--n", "5000", cache_dir=tmp_path, env={"VGPU_USERQ": "0"}))
    engine = read_text(os.path.join(cache_model_mount, "sys/class/drm/card0/device/vgpu_engines/comp_1.0.0/counters"))
    counters = dict(line.split() for line in engine.splitlines())
    assert int(counters["l2_hits"]) > 0 and int(counters["pkt_ACQUIRE_MEM"]) > 0
