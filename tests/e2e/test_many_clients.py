"""Many client processes at once: concurrent submission, priorities through the
mount, and a client killed mid-stream leaving nothing behind."""
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_sdma_e2e import GOOD_CLIENT
from tests.helpers import ROOT, read_text, start_client, wait_for

SYSFS = "sys/class/drm/card0/device"
DEBUGFS = "sys/kernel/debug/dri/0"


def used(mount):
    return (int(read_text(Path(mount, SYSFS, "mem_info_vram_used"))),
            int(read_text(Path(mount, SYSFS, "mem_info_gtt_used"))))


def test_four_clients_submit_at_once(vgpu_mount):
    procs = [start_client(GOOD_CLIENT, vgpu_mount, "50") for _ in range(4)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and "good client done" in out
    # FUSE delivers release() after a process exits, and the close runs in slices.
    wait_for(lambda: used(vgpu_mount) == (0, 0), "the clients' memory to be freed")


# Allocates, maps, makes contexts and BO lists, queues jobs behind a job that never
# finishes, then reports and waits to be killed.
HOARDER = r"""
import sys, libvgpu
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
ctxs = [libvgpu.cs_ctx_create(dev) for _ in range(3)]
bos = [libvgpu.bo_alloc(dev, 1 << 20, 4096, d) for d in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT) * 3]
vas = [libvgpu.va_range_alloc(dev, 1 << 20) for _ in bos]
for bo, va in zip(bos, vas):
    libvgpu.bo_va_op(bo, 0, 1 << 20, va.address)
ib = bos[1]
cpu = ib.cpu_map()
hang = libvgpu.SdmaIb().poll_regmem(vas[0].address, 0xC0FFEE)
nop = libvgpu.SdmaIb().nop()
cpu[:len(hang) * 4] = hang.tobytes()
cpu[256:256 + len(nop) * 4] = nop.tobytes()
bl = libvgpu.bo_list_create(dev, bos)
libvgpu.cs_submit(ctxs[0], libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(vas[1].address, len(hang))], resources=bl))
for i in range(20):
    libvgpu.cs_submit(ctxs[i % 3], libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(vas[1].address + 256, len(nop))], resources=bl))
print("ready", flush=True)
sys.stdin.readline()
"""


def test_sigkill_mid_stream_leaves_nothing(vgpu_mount):
    base = used(vgpu_mount)
    p = start_client(HOARDER, vgpu_mount)
    assert p.stdout.readline().strip() == "ready"
    assert used(vgpu_mount)[0] > base[0]
    clients = read_text(Path(vgpu_mount, DEBUGFS, "clients"))
    assert str(p.pid) in clients
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    # FUSE releases the file after the process is gone; the hung job ends at the
    # ring timeout (2 s), then its memory comes back.
    wait_for(lambda: str(p.pid) not in read_text(Path(vgpu_mount, DEBUGFS, "clients")), "client closed")
    wait_for(lambda: used(vgpu_mount) == base, "memory back to baseline", limit=60)
    ring = read_text(Path(vgpu_mount, DEBUGFS, "vgpu_ring_sdma0"))
    assert re.search(r"queued jobs:\s+0", ring) and "idle" in ring
    assert str(p.pid) not in read_text(Path(vgpu_mount, DEBUGFS, "amdgpu_gem_info"))
    assert str(p.pid) not in read_text(Path(vgpu_mount, DEBUGFS, "amdgpu_vm_info"))
    # the device still works for others
    r = subprocess.run([sys.executable, str(Path(ROOT, "samples", "sdma_const_fill.py")), "--device",
                        vgpu_mount], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
