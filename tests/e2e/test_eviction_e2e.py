"""VRAM eviction through a mount: several client processes whose VRAM BOs add up to
twice the device's VRAM, each filling and checking its BOs with jobs, concurrently.
Nothing is lost (checksums), every job found its BOs where it needed them (the
client reads the placement of a BO while its job holds it), evictions are counted;
and the oversubscription sample passes and says so."""
import hashlib
from pathlib import Path

import pytest

from tests.e2e.test_samples import passed, run_sample
from tests.helpers import read_text, start_client, vgpu_cli

from ..conftest import _mounted

SYSFS = "sys/class/drm/card0/device"

# argv: mount, seed, BOs, MiB each, rounds. Each round, for every BO in turn: the
# CPU writes seeded bytes into the first half through the mapping it keeps all along;
# a job, with [IB, BO] as its BO list, first waits for a flag the CPU sets (so the BO
# is held by a queued job), then copies the first half onto the second. While the job
# waits, GEM_WAIT_IDLE tells where the BO lives. Prints one line per round.
CLIENT = r"""
import hashlib, sys
import numpy as np
import libvgpu
from libvgpu.ioctl import drm_ioctl
from vgpu import uapi
mount, seed, count, mib, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
size, half = mib << 20, mib << 19
dev = libvgpu.device_initialize(mount)
ctx = libvgpu.cs_ctx_create(dev)
ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
ib_va = libvgpu.va_range_alloc(dev, 4096).address
libvgpu.bo_va_op(ib, 0, 4096, ib_va)
ib_cpu = ib.cpu_map()
bos, cpus, vas = [], [], []
for i in range(count):
    bo = libvgpu.bo_alloc(dev, size, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    va = libvgpu.va_range_alloc(dev, size).address
    libvgpu.bo_va_op(bo, 0, size, va)
    bos.append(bo); cpus.append(bo.cpu_map()); vas.append(va)

def where(bo):
    a = uapi.drm_amdgpu_gem_wait_idle()
    a.in_.handle, a.in_.timeout = bo.handle, 0
    out = drm_ioctl(dev.fd, uapi.DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE, a)
    return out.out.domain

for r in range(rounds):
    digest, in_vram = hashlib.sha256(), 0
    for i, (bo, cpu, va) in enumerate(zip(bos, cpus, vas)):
        data = np.random.default_rng([seed, r, i]).integers(0, 256, half, dtype=np.uint8).tobytes()
        cpu[:half] = data
        ib_cpu[4000:4004] = bytes(4)
        packets = libvgpu.SdmaIb().poll_regmem(ib_va + 4000, 1).copy_linear(va + half, va, half)
        ib_cpu[:len(packets) * 4] = packets.tobytes()
        with libvgpu.bo_list_create(dev, [ib, bo]) as bl:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_va, len(packets))], resources=bl)
            libvgpu.cs_submit(ctx, req)
        in_vram += where(bo) == uapi.AMDGPU_GEM_DOMAIN_VRAM
        ib_cpu[4000:4004] = (1).to_bytes(4, "little")
        assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        got = bytes(cpu)
        assert got[:half] == data and got[half:] == data, f"BO {i} round {r}: wrong bytes"
        digest.update(data)
    print(f"round {r} in_vram {in_vram} sha256 {digest.hexdigest()}", flush=True)
print("done", flush=True)
"""


def expected_digest(seed: int, count: int, mib: int, rnd: int) -> str:
    import numpy as np
    d = hashlib.sha256()
    for i in range(count):
        d.update(np.random.default_rng([seed, rnd, i]).integers(0, 256, mib << 19, dtype=np.uint8).tobytes())
    return d.hexdigest()


@pytest.fixture
def small_vram_mount():
    """64 MiB of VRAM (the default mount's), 512 MiB of GTT."""
    yield from _mounted("--vram", "64M", "--gtt", "512M")


def test_concurrent_clients_oversubscribing_vram_lose_nothing(small_vram_mount):
    mount, clients, count, mib, rounds = small_vram_mount, 4, 4, 8, 3   # 4 x 32 MiB = 2x VRAM
    procs = [start_client(CLIENT, mount, seed, count, mib, rounds) for seed in range(clients)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0 and out.rstrip().endswith("done"), out
        outs.append(out)
    for seed, out in enumerate(outs):
        lines = [line.split() for line in out.splitlines() if line.startswith("round")]
        assert len(lines) == rounds
        for rnd, line in enumerate(lines):
            # every job held its BO in VRAM: nothing was pinned, and a queued job's BOs are never evicted
            assert int(line[3]) == count, f"client {seed} round {rnd}: {line}"
            assert line[5] == expected_digest(seed, count, mib, rnd)
    sysfs = Path(mount, SYSFS)
    assert int(read_text(sysfs / "vgpu_num_evictions")) > 0
    assert int(read_text(sysfs / "vgpu_num_bytes_moved")) >= int(read_text(sysfs / "vgpu_num_evictions")) * (mib << 20)
    smi = vgpu_cli("smi", "--mount", mount, check=True).stdout
    assert f"Evictions {read_text(sysfs / 'vgpu_num_evictions').strip()}, " in smi
    kmsg = read_text(Path(mount, "dev/kmsg"))
    assert "GPU fault" not in kmsg and "out of memory" not in kmsg


def test_the_oversubscription_sample_counts_evictions(vgpu_mount, tmp_path):
    out = passed(run_sample("vram_oversubscription", vgpu_mount, cache_dir=tmp_path))
    # 64 MiB of VRAM: 16 BOs of 8 MiB, the 9th of which was ENOMEM before eviction
    assert "all 16 allocated: BO 8 and later used to fail with ENOMEM" in out
    evictions = int(out.split("evictions ")[1].split(",")[0])
    assert evictions >= 16 and "(as expected)" in out
