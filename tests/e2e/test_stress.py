"""Stress: 4 processes x 1,000 submissions in a ring of timeline dependencies.

Process k owns a timeline syncobj T_k and exports it; process k+1 imports it (the
last one's goes to process 0). Job i of process k (i = 1..N) waits for point i of
T_{k-1} (process 0: point i - WINDOW of T_3, so the ring has a bounded lag instead
of a deadlock), then copies block i of its own source BO (random data, seeded by k)
into block i of its output BO, stamps a header into it, carries the header of block
i - 1 into block i (a read of what the previous job wrote), writes a log record
(k, i) and GPU timestamps at its start and end, and signals point i of T_k. Even
processes run on sdma0, odd ones on sdma1, so half the edges cross rings.

Every CS is one ioctl (1,000 per process). A dependency must be submitted before a
CS names it (docs/syncobj.md), so a process first waits on the CPU with
WAIT_FOR_SUBMIT | WAIT_AVAILABLE when its predecessor is behind; a CS past the
per-context job cap (64) is not refused, its cs_submit returns once there is room.

Checked: every fence signals (one WAIT_FENCES over all 1,000) and every timeline
reaches point N; no data is lost (the output's SHA-256 equals a numpy model's, every
log record is there); the order holds (each job started after the job it depends
on ended, by the GPU's TIMESTAMP packets). No timing assertions.
"""
import hashlib
import json
from pathlib import Path

import numpy as np

from tests.helpers import read_text, start_client, wait_for

PROCS, N, WINDOW, BLOCK = 4, 1000, 8, 1024
MAGIC = 0x5EED0000

CLIENT = r"""
import hashlib, json, sys, time
import numpy as np
import libvgpu
from vgpu import uapi

M, K, P, N, W, BLOCK, MAGIC = sys.argv[1], *map(int, sys.argv[2:8])
IB_SLOT, LOG = 256, 32
GTT, VRAM = uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_VRAM
AVAILABLE = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT | uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE
dev = libvgpu.device_initialize(M)
ctx = libvgpu.cs_ctx_create(dev)

def alloc(size, domain):
    size = -(-size // 4096) * 4096
    bo = libvgpu.bo_alloc(dev, size, 4096, domain)
    va = libvgpu.va_range_alloc(dev, size, 4096)
    libvgpu.bo_va_op(bo, 0, size, va.address)
    return bo, va.address

src, va_src = alloc(N * BLOCK, VRAM)
out, va_out = alloc(N * BLOCK, VRAM)
log, va_log = alloc(N * LOG, GTT)
ibs, va_ibs = alloc(N * IB_SLOT, GTT)
a = src.cpu_map_array("uint32")
a[:N * BLOCK // 4] = np.random.default_rng(K).integers(0, 1 << 32, N * BLOCK // 4, dtype=np.uint32)
del a
src.cpu_unmap()
ib_cpu, sizes = ibs.cpu_map(), []
for i in range(N):
    o, s, rec = va_out + i * BLOCK, va_src + i * BLOCK, va_log + i * LOG
    ib = libvgpu.SdmaIb().timestamp(rec).copy_linear(o, s, BLOCK) \
        .write_linear(o, [MAGIC | K, i + 1, K * N + i])
    if i:
        ib.copy_linear(o + 12, o - BLOCK + 8, 4)   # block i-1's header word, written by job i-1
    ib.write_linear(rec + 16, [K, i + 1]).timestamp(rec + 8)
    ib_cpu[i * IB_SLOT: i * IB_SLOT + len(ib) * 4] = ib.tobytes()
    sizes.append(len(ib))
del ib_cpu
ibs.cpu_unmap()  # the IBs are in the BO's shared pages; nothing stays mapped
bl = libvgpu.bo_list_create(dev, [src, out, log, ibs])

timeline = libvgpu.syncobj_create(dev)
print(libvgpu.syncobj_export(timeline), flush=True)
prev = libvgpu.syncobj_import(dev, int(sys.stdin.readline()))
print("ready", flush=True)
sys.stdin.readline()  # go

t0 = time.monotonic()
fences, avail, cpu_waits = [], 0, 0
for i in range(N):
    point = i + 1
    dep = point if K else point - W
    wait = []
    if dep >= 1:
        if dep > avail:  # the predecessor has not submitted that point yet
            libvgpu.syncobj_timeline_wait(dev, [prev], [dep], flags=AVAILABLE)
            avail = libvgpu.syncobj_query([prev], last_submitted=True)[0]
            cpu_waits += 1
        wait = [(prev, dep)]
    req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ibs + i * IB_SLOT, sizes[i])],
                            resources=bl, ring=K % 2, timeline_wait=wait, timeline_signal=[(timeline, point)])
    libvgpu.cs_submit(ctx, req)  # past 64 jobs in flight it returns once there is room
    fences.append(libvgpu.fence_of(ctx, req))
signaled, _ = libvgpu.cs_wait_fences(fences)
elapsed = time.monotonic() - t0
point, = libvgpu.syncobj_query([timeline])
data = hashlib.sha256(bytes(out.cpu_map())[:N * BLOCK]).hexdigest()
out.cpu_unmap()
rec = log.cpu_map_array("uint64")[:N * LOG // 8].reshape(N, LOG // 8).copy()
log.cpu_unmap()
print(json.dumps({"k": K, "signaled": signaled, "point": point, "seqs": [f.fence for f in fences],
                  "sha256": data, "start": rec[:, 0].tolist(), "end": rec[:, 1].tolist(),
                  "record": (rec[:, 2] & 0xFFFFFFFF).tolist(), "index": (rec[:, 2] >> 32).tolist(),
                  "cpu_waits": cpu_waits, "seconds": elapsed}), flush=True)
sys.stdin.readline()  # stay open (and keep T_k exported) until everyone is done
"""


def model_sha256(k: int) -> str:
    """What process k's output BO must hold: its source blocks, each with the
    3-dword header of job i and the last header word of block i - 1."""
    blocks = np.random.default_rng(k).integers(0, 1 << 32, N * BLOCK // 4, dtype=np.uint32)
    blocks = blocks.reshape(N, BLOCK // 4)
    i = np.arange(N, dtype=np.uint32)
    blocks[:, 0] = MAGIC | k
    blocks[:, 1] = i + 1
    blocks[:, 2] = k * N + i
    blocks[1:, 3] = k * N + i[:-1]
    return hashlib.sha256(blocks.tobytes()).hexdigest()


def used(mount):
    sysfs = Path(mount, "sys/class/drm/card0/device")
    return int(read_text(sysfs / "mem_info_vram_used")), int(read_text(sysfs / "mem_info_gtt_used"))


def test_four_processes_thousand_submissions_in_a_timeline_ring(vgpu_mount):
    procs = []
    try:
        for k in range(PROCS):
            procs.append(start_client(CLIENT, vgpu_mount, k, PROCS, N, WINDOW, BLOCK, MAGIC))
        tokens = [int(p.stdout.readline()) for p in procs]
        for k, p in enumerate(procs):  # k imports k-1's timeline; 0 imports the last one's
            p.stdin.write(f"{tokens[k - 1]}\n")
            p.stdin.flush()
        assert all(p.stdout.readline().strip() == "ready" for p in procs)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            assert line, f"client exited {p.wait()}"
            results.append(json.loads(line))
        for p in procs:
            p.stdin.write("exit\n")
            p.stdin.flush()
            p.wait(timeout=60)
            assert p.returncode == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    for k, r in enumerate(results):
        assert r["k"] == k
        # every fence signalled; every point of the timeline too
        assert r["signaled"] and r["point"] == N
        assert r["seqs"] == sorted(r["seqs"]) and len(set(r["seqs"])) == N
        # no data lost: each job's record is there, the output matches the model
        assert r["record"] == [k] * N and r["index"] == list(range(1, N + 1))
        assert r["sha256"] == model_sha256(k), f"process {k}: output differs from the model"
        # in order within the process
        start, end = np.array(r["start"]), np.array(r["end"])
        assert (start > 0).all() and (end >= start).all() and (start[1:] >= end[:-1]).all()
    # in order across processes: job i started after the job it waited for ended
    start = np.array([r["start"] for r in results])
    end = np.array([r["end"] for r in results])
    for k in range(1, PROCS):
        bad = np.nonzero(start[k] < end[k - 1])[0]
        assert bad.size == 0, f"process {k} job {bad[0] + 1} started before process {k - 1}'s ended"
    bad = np.nonzero(start[0][WINDOW:] < end[PROCS - 1][:-WINDOW])[0]
    assert bad.size == 0, f"process 0 job {bad[0] + WINDOW + 1} started before its dependency ended"
    print({r["k"]: (round(r["seconds"], 1), r["cpu_waits"]) for r in results})
    # all memory comes back, and the kernel log has no fault or hang
    wait_for(lambda: used(vgpu_mount) == (0, 0), "memory back to zero", limit=60)
    kmsg = read_text(Path(vgpu_mount, "dev/kmsg"))
    assert "fault" not in kmsg and "GPU reset" not in kmsg, kmsg
    # nothing was refused (a CS past the per-context cap waits for room)
    refused = [line for line in kmsg.splitlines() if "refused" in line]
    assert not refused, refused
