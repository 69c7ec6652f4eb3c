"""End to end: CPU/GPU coherence of BOs seen by a raw client that never calls msync.

The memory model: a BO is shared memory. CPU writes through an mmap(MAP_SHARED) of
``MOUNT/bo/<offset-hex>`` (offset from GEM_MMAP) are visible to the GPU at once, and
GPU writes are visible to the CPU by the time the job's fence signals. Nothing else
is needed: no msync, no flush, no extra ioctl.

Each test reproduces one way of getting this wrong, looping many iterations in one
client process (frames written by hand with ``tests.helpers.Drm``, packets from
``vgpu.sdma``; no libvgpu) and counting the iterations that went wrong:

1. GPU -> CPU with two jobs in flight: job 1 and job 2 each fill one page of a BO,
   the client waits for job 2 only; both pages must be new (one ring, and two rings
   ordered by a syncobj).
2. Mesa's IB suballocation: the CPU writes the next IB into the IB BO while a long
   job that runs from the same BO is executing; the new IB must be what runs.
3. CPU writes to a page of a BO that a running job uses but does not write must
   survive the job's completion.
4. CPU -> GPU: a pattern written through the mapping is what an SDMA COPY_LINEAR
   copies (GTT and VRAM).

Tests 1, 3 and 4 put their IBs in with write(2) on the BO file (which reaches the
GPU whatever the mapping does), so that each isolates the direction it is about;
test 2 writes IBs through the mapping, as Mesa does.
"""
import json

import pytest

from tests.helpers import run_client

ITERATIONS = 200

# The client side: raw ioctls and the few objects every test needs.
PRELUDE = r"""
import ctypes, json, mmap, os, random, struct, sys
from tests.helpers import Drm
from vgpu import uapi
from vgpu.sdma import SdmaIb

N = int(sys.argv[1])
GTT, VRAM = uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_VRAM
DMA = uapi.AMDGPU_HW_IP_DMA
PAGE, MiB = 4096, 1 << 20
FOREVER = (1 << 64) - 1
d = Drm(os.environ["VGPU_MOUNT"])

a = uapi.drm_amdgpu_ctx()
a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
CTX = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id
_va = [0x100000000]


class Bo:
    # A BO mapped in the GPU VM at .va. With cpu=True: .fd is its BO file opened
    # O_RDWR and .map an mmap(MAP_SHARED) of it (never flushed).
    def __init__(self, size, domain, cpu=True):
        self.size, self.va = size, _va[0]
        _va[0] += -(-size // PAGE) * PAGE
        self.handle = d.gem_create(size, domain)
        v = uapi.drm_amdgpu_gem_va(handle=self.handle, operation=uapi.AMDGPU_VA_OP_MAP,
                                   va_address=self.va, map_size=size,
                                   flags=uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE
                                   | uapi.AMDGPU_VM_PAGE_EXECUTABLE)
        d.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, v)
        if cpu:
            self.fd = os.open(d.bo_path(d.gem_mmap(self.handle)), os.O_RDWR)
            self.map = mmap.mmap(self.fd, size)


def bo_list(*bos):
    b = uapi.drm_amdgpu_bo_list()
    b.in_.operation, b.in_.bo_number = uapi.AMDGPU_BO_LIST_OP_CREATE, len(bos)
    b.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
    entries = b"".join(struct.pack("<II", bo.handle, 0) for bo in bos)
    return d.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, b, entries)[0].out.list_handle


def syncobj_create():
    return d.ioctl(uapi.DRM_IOCTL_SYNCOBJ_CREATE, uapi.drm_syncobj_create())[0].handle


def chunk(chunk_id, data):
    data = bytes(data)
    return bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=len(data) // 4)) + data


def submit(ring, ib_va, ib, bos, wait_syncobjs=(), signal_syncobjs=()):
    # AMDGPU_CS of one IB (`ib`: the SdmaIb already in memory at ib_va) -> its seq.
    chunks = [chunk(uapi.AMDGPU_CHUNK_ID_IB, uapi.drm_amdgpu_cs_chunk_ib(
        va_start=ib_va, ib_bytes=4 * len(ib), ip_type=DMA, ring=ring))]
    for chunk_id, handles in ((uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, wait_syncobjs),
                              (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, signal_syncobjs)):
        if handles:
            chunks.append(chunk(chunk_id, struct.pack(f"<{len(handles)}I", *handles)))
    cs = uapi.drm_amdgpu_cs()
    cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks = CTX, bos, len(chunks)
    return d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, b"".join(chunks))[0].out.handle


def wait_cs(ring, seq, timeout=FOREVER):
    # AMDGPU_WAIT_CS: status 0 signaled, 1 still busy; a failed job raises OSError.
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ip_type, w.in_.ring, w.in_.ctx_id, w.in_.timeout = seq, DMA, ring, CTX, timeout
    return d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)[0].out.status


def waits_ok(ring, *seqs):
    ok = True
    for seq in seqs:
        try:
            ok = wait_cs(ring, seq) == 0 and ok
        except OSError:
            ok = False
    return ok


def busy(ring, seq):
    # Still running? (a zero-timeout WAIT_CS; informational only, never asserted)
    return wait_cs(ring, seq, timeout=0) == 1


def filled(value, nbytes=PAGE):
    return struct.pack("<I", value) * (nbytes // 4)


def long_copies(ib, src, dst, count=4):
    # `count` COPY_LINEARs of 4 MiB (the packet's maximum) VRAM -> VRAM: keeps a job busy.
    for _ in range(count):
        ib.copy_linear(dst.va, src.va, src.size)
    return ib


def report(**counts):
    print(json.dumps(counts))
"""


def run(vgpu_mount: str, body: str, *args) -> dict:
    """Run PRELUDE + body (sys.argv[1] = ITERATIONS, then `args`); the counts it reported."""
    r = run_client(PRELUDE + body, ITERATIONS, *args, mount=vgpu_mount, timeout=120, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_none(counts: dict, failures: dict, info: str = "") -> None:
    """Every count named in `failures` (key -> what went wrong) must be zero."""
    bad = [f"{what} in {counts[key]} of {ITERATIONS} iterations"
           for key, what in failures.items() if counts[key]]
    assert not bad, "; ".join(bad) + (f" ({info})" if info else "")


# -- 1. GPU -> CPU: wait on the second of two jobs -------------------------------------

TWO_JOBS = r"""
ib, dst = Bo(PAGE, GTT), Bo(2 * PAGE, GTT)
src, big = Bo(4 * MiB, VRAM, cpu=False), Bo(4 * MiB, VRAM, cpu=False)
bos = bo_list(ib, dst, src, big)
s = syncobj_create()
RING1, RING2 = (0, 1) if sys.argv[2] == "syncobj" else (0, 0)
stale1 = stale2 = failed = 0
for i in range(N):
    v1, v2 = 0x10000000 + i, 0x20000000 + i
    # Every other iteration job 1 is long, so job 2 is queued while job 1 runs.
    ib1 = long_copies(SdmaIb(), src, big) if i % 2 else SdmaIb()
    ib1.constant_fill(dst.va, v1, PAGE)
    ib2 = SdmaIb().constant_fill(dst.va + PAGE, v2, PAGE)
    os.pwrite(ib.fd, ib1.tobytes(), 0)
    os.pwrite(ib.fd, ib2.tobytes(), 256)
    if RING1 == RING2:
        submit(RING1, ib.va, ib1, bos)
        seq2 = submit(RING2, ib.va + 256, ib2, bos)
    else:
        submit(RING1, ib.va, ib1, bos, signal_syncobjs=[s])
        seq2 = submit(RING2, ib.va + 256, ib2, bos, wait_syncobjs=[s])
    failed += not waits_ok(RING2, seq2)   # job 2 only
    stale1 += dst.map[:PAGE] != filled(v1)
    stale2 += dst.map[PAGE:] != filled(v2)
report(stale1=stale1, stale2=stale2, failed=failed)
"""


@pytest.mark.parametrize("order", ["same_ring", "syncobj"])
def test_wait_on_second_job_shows_both_jobs_writes(vgpu_mount, order):
    counts = run(vgpu_mount, TWO_JOBS, order)
    assert_none(counts, {"stale1": "job 1's page stale", "stale2": "job 2's page stale",
                         "failed": "wait on job 2 failed"})


# -- 2. Mesa: the next IB written while a job runs from the same IB BO ----------------

IB_WHILE_RUNNING = r"""
SLOT, SLOTS = 256, 16                     # all IBs suballocated from one page
ibs = Bo(SLOT * SLOTS, GTT)
src, dst = Bo(4 * MiB, VRAM, cpu=False), Bo(4 * MiB, VRAM, cpu=False)
out = Bo(2 * PAGE, GTT)
bos = bo_list(ibs, src, dst, out)
a_missing = b_missing = failed = overlapped = 0
for i in range(N):
    a_off, b_off = (2 * i % SLOTS) * SLOT, ((2 * i + 1) % SLOTS) * SLOT
    va, vb = 0x30000000 + i, 0x40000000 + i
    ib_a = long_copies(SdmaIb(), src, dst).constant_fill(out.va, va, PAGE)
    ibs.map[a_off:a_off + 4 * len(ib_a)] = ib_a.tobytes()
    seq_a = submit(0, ibs.va + a_off, ib_a, bos)
    ib_b = SdmaIb().constant_fill(out.va + PAGE, vb, PAGE)
    ibs.map[b_off:b_off + 4 * len(ib_b)] = ib_b.tobytes()   # while job A runs
    overlapped += busy(0, seq_a)
    seq_b = submit(0, ibs.va + b_off, ib_b, bos)
    failed += not waits_ok(0, seq_a, seq_b)
    a_missing += out.map[:PAGE] != filled(va)
    b_missing += out.map[PAGE:] != filled(vb)
report(a_missing=a_missing, b_missing=b_missing, failed=failed, overlapped=overlapped)
"""


def test_ib_written_while_a_job_runs_from_the_same_bo(vgpu_mount):
    counts = run(vgpu_mount, IB_WHILE_RUNNING)
    assert_none(counts, {"b_missing": "the IB written during job A did not run (job B's fill missing)",
                         "a_missing": "job A's fill missing",
                         "failed": "a fence failed"},
                f"job A was still running after the CPU wrote IB B in {counts['overlapped']} iterations")


# -- 3. CPU data in a page the running job does not write survives the job ----------

CPU_PAGE_SURVIVES = r"""
ib, dst = Bo(PAGE, GTT), Bo(2 * PAGE, GTT)
src, big = Bo(4 * MiB, VRAM, cpu=False), Bo(4 * MiB, VRAM, cpu=False)
bos = bo_list(ib, dst, src, big)
lost = gpu_missing = failed = overlapped = 0
for i in range(N):
    v = 0x50000000 + i
    prog = long_copies(SdmaIb().constant_fill(dst.va, v, PAGE), src, big)
    os.pwrite(ib.fd, prog.tobytes(), 0)
    seq = submit(0, ib.va, prog, bos)
    data = random.Random(i).randbytes(PAGE)
    dst.map[PAGE:] = data                  # the page the job never writes
    overlapped += busy(0, seq)
    failed += not waits_ok(0, seq)
    lost += dst.map[PAGE:] != data
    gpu_missing += dst.map[:PAGE] != filled(v)
report(lost=lost, gpu_missing=gpu_missing, failed=failed, overlapped=overlapped)
"""


def test_cpu_writes_to_a_page_the_job_does_not_write_survive(vgpu_mount):
    counts = run(vgpu_mount, CPU_PAGE_SURVIVES)
    assert_none(counts, {"lost": "the CPU's page was lost", "gpu_missing": "the job's fill missing",
                         "failed": "the fence failed"},
                f"the job was still running after the CPU write in {counts['overlapped']} iterations")


# -- 4. CPU -> GPU: what the CPU wrote is what the GPU copies -------------------------

COPY_PATTERN = r"""
SIZE = 64 << 10
domain = VRAM if sys.argv[2] == "vram" else GTT
ib, src, dst = Bo(PAGE, GTT), Bo(SIZE, domain), Bo(SIZE, domain)
bos = bo_list(ib, src, dst)
prog = SdmaIb().copy_linear(dst.va, src.va, SIZE)
os.pwrite(ib.fd, prog.tobytes(), 0)
wrong = failed = 0
for i in range(N):
    pattern = random.Random(i).randbytes(SIZE)
    src.map[:] = pattern
    failed += not waits_ok(0, submit(0, ib.va, prog, bos))
    wrong += dst.map[:] != pattern
report(wrong=wrong, failed=failed)
"""


@pytest.mark.parametrize("domain", ["gtt", "vram"])
def test_copy_of_a_pattern_written_through_the_mapping(vgpu_mount, domain):
    counts = run(vgpu_mount, COPY_PATTERN, domain)
    assert_none(counts, {"wrong": "the copy differs from the pattern", "failed": "the fence failed"})
