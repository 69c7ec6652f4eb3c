"""A randomized model test of the memory model: CPU mappings and GPU engines see one memory.

BOs are shared memory: a CPU write through a BO mapping is visible to the GPU at once
(no flush, no msync), and a GPU write is visible through the mapping by the time its
fence signals. A client keeps a few BOs (GTT and VRAM, a few pages each, each mapped
once for the CPU and once into the GPU VM) and a numpy model of their bytes, then runs
random steps:

- CPU writes through the mappings (random ranges and bytes), only to bytes that no
  unfinished job reads or writes;
- SDMA jobs on both SDMA rings, one to three packets each (CONSTANT_FILL byte and
  dword, WRITE_LINEAR, COPY_LINEAR), some held at first by a POLL_REGMEM gate on a
  word the CPU writes later (the GPU must see that write without a flush);
- compute jobs on the compute ring(s): a vISA kernel ``dst = src * mul + add`` on
  dwords or on bytes (in place or to another range);
- waits: WAIT_CS (cs_query_fence_status), a syncobj wait on the job's SYNCOBJ_OUT,
  poll() of a sync file exported from that syncobj (MOUNT/sync/<token>), WAIT_FENCES
  on several fences; sometimes followed by a zero-timeout WAIT_CS sweep.

The model takes each job's effect when the job is submitted: a job whose ranges
conflict with an unfinished job of another (context, ring) gets that job as a
dependency (a CS dependency chunk or the other job's syncobj as SYNCOBJ_IN), so the
order of effects is the order of submission. After every wait the CPU view of every
BO is compared byte for byte with the model, except the bytes that jobs not known to
be finished may still write. A job is known finished when it was waited for, when it
is a dependency (transitively) of one that was, or when it precedes one that was in
its own (context, ring) queue. The first mismatch is reported with the seed, the step,
the BO, the offset, the expected and the actual byte and the recent operations on it.

Several jobs are in flight at once (back-to-back submissions on three or more rings
from two contexts). The two-client variant runs two such processes at the same time,
each with its own BOs. Reproduce a failure with ``VGPU_COHERENCE_SEED=<seed>``
(``VGPU_COHERENCE_STEPS`` changes the number of steps).
"""
import json
import os
import random
import threading

from tests.helpers import run_client

CLIENT = r'''
import collections, json, os, random, select, sys
import numpy as np
import libvgpu
import libvgpu.sdma as sdma
from libvgpu.code_object import code_object_load
from vgpu import asm, uapi

MOUNT = os.environ["VGPU_MOUNT"]
SEED, STEPS, TAG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(SEED)

GTT, VRAM = uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_VRAM
DMA, COMPUTE = uapi.AMDGPU_HW_IP_DMA, uapi.AMDGPU_HW_IP_COMPUTE
PAGE = 4096
LAYOUT = [("gtt0", GTT, 3), ("vram0", VRAM, 4), ("gtt1", GTT, 2), ("vram1", VRAM, 3)]
IB_SLOT, IB_SLOTS = 2048, 64          # two IBs a page; a slot is reused once its job is known done
KARG_SLOT, KARG_SLOTS = 64, 64
GATE_SLOT, GATE_SLOTS = 64, 64
MAX_IN_FLIGHT = 16
GATE_MAX_AGE = 6                      # steps a gate stays closed (the ring timeout is 2 s)
WAIT_NS = 30 * 10**9                  # a wait that long is a failure, not a slow machine
WAIT_MS = WAIT_NS // 10**6

KERNELS = {
    # dst[i] = src[i] * mul + add on dwords (i < n)
    "mad32": ("global_load_dword", "global_store_dword", 2),
    # the same on bytes: stores share dwords with bytes the CPU or other jobs write
    "mad8": ("global_load_ubyte", "global_store_byte", 0),
}


def kernel_source(name, load, store, shift):
    return f""".kernel coh_{name}
.arg src ptr
.arg dst ptr
.arg n u32
.arg mul u32
.arg add u32
.block 64 1 1
    s_load_dwordx4 s[20:23], s[0:1]
    s_load_dwordx2 s[24:25], s[0:1], 16
    s_load_dword s26, s[0:1], 24
    s_lshl_b32 s27, s16, 6
    v_add_u32 v3, s27, v0
    v_cmp_lt_u32 vcc, v3, s24
    s_and_saveexec_b32 s28, vcc
    s_cbranch_execz done
    v_lshl_b32 v4, v3, {shift}
    {load} v5, v4, s[20:21]
    v_mad_u32 v5, v5, s25, s26
    {store} v4, v5, s[22:23]
done:
    s_endpgm
"""


class Failure(Exception):
    pass


stats = collections.Counter()
history = collections.deque(maxlen=5000)   # (step, text, write ranges)


def fail(step, msg):
    raise Failure(f"seed={SEED} client={TAG} step={step}: {msg}")


# -- setup ----------------------------------------------------------------------------
dev = libvgpu.device_initialize(MOUNT)
contexts = [libvgpu.cs_ctx_create(dev), libvgpu.cs_ctx_create(dev)]


def rings_of(ip):
    mask = libvgpu.query_hw_ip_info(dev, ip).available_rings
    return [r for r in range(32) if mask >> r & 1]


SDMA_RINGS, COMPUTE_RINGS = rings_of(DMA), rings_of(COMPUTE)
assert len(SDMA_RINGS) >= 2 and COMPUTE_RINGS, (SDMA_RINGS, COMPUTE_RINGS)


def alloc(size, domain):
    bo = libvgpu.bo_alloc(dev, size, PAGE, domain)
    va = libvgpu.va_range_alloc(dev, size, PAGE)
    libvgpu.bo_va_op(bo, 0, size, va.address)
    return bo, va.address


class Buf:
    def __init__(self, idx, name, domain, pages):
        self.idx, self.name, self.domain, self.size = idx, name, domain, pages * PAGE
        self.bo, self.va = alloc(self.size, domain)
        self.view = self.bo.cpu_map_array()          # the one CPU mapping, live
        self.mv = self.bo.cpu_map()                  # the same mapping as a memoryview
        self.model = np.zeros(self.size, np.uint8)

    def __repr__(self):
        return f"{self.name} ({'GTT' if self.domain == GTT else 'VRAM'}, {self.size} bytes, handle {self.bo.handle})"


bufs = [Buf(i, name, dom, pages) for i, (name, dom, pages) in enumerate(LAYOUT)]
ib_bo, ib_va = alloc(IB_SLOT * IB_SLOTS, GTT)
ib_view = ib_bo.cpu_map_array()
karg_bo, karg_va = alloc(KARG_SLOT * KARG_SLOTS, GTT)
karg_view = karg_bo.cpu_map_array()
ctl_bo, ctl_va = alloc(GATE_SLOT * GATE_SLOTS, GTT)
ctl_words = ctl_bo.cpu_map_array("uint32")
ctl_words[:] = 0     # gate tokens count from 1
kernels = {name: code_object_load(dev, asm.assemble(kernel_source(name, *k), f"{name}.s").pack())
           for name, k in KERNELS.items()}
bo_list = libvgpu.bo_list_create(dev, [b.bo for b in bufs] + [ib_bo, karg_bo, ctl_bo]
                                 + [k.bo for k in kernels.values()])
free_ib, free_karg, free_gate = list(range(IB_SLOTS)), list(range(KARG_SLOTS)), list(range(GATE_SLOTS))
syncobj_pool = []
gate_token = 0

for b in bufs:  # start from random contents, written by the CPU
    data = np.frombuffer(rng.randbytes(b.size), np.uint8)
    b.view[:] = data  # coherent: no flush
    b.model[:] = data


# -- ranges -----------------------------------------------------------------------------
def overlap(a, b):
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def any_overlap(xs, ys):
    return any(overlap(x, y) for x in xs for y in ys)


def rdesc(r):
    return f"{bufs[r[0]].name}[{r[1]:#x}:{r[2]:#x}]"


def pick_len(limit, align):
    r = rng.random()
    if r < 0.35:
        n = rng.randint(1, min(64, limit))
    elif r < 0.8:
        n = rng.randint(1, min(PAGE, limit))
    else:
        n = rng.randint(1, limit)
    return max(align, n // align * align)


def pick_range(n=None, align=1, bi=None, maxlen=2 * PAGE):
    bi = rng.randrange(len(bufs)) if bi is None else bi
    size = bufs[bi].size
    n = pick_len(min(maxlen, size), align) if n is None else n
    if n > 1 and rng.random() < 0.25:  # straddle a page boundary
        start = rng.randrange(1, size // PAGE) * PAGE - rng.randint(1, n - 1)
        start = min(max(start, 0), size - n) // align * align
    else:
        start = rng.randrange(0, (size - n) // align + 1) * align
    return (bi, start, start + n)


def pick_disjoint(other, align=1):
    n = other[2] - other[1]
    for _ in range(20):
        r = pick_range(n=n, align=align, bi=rng.choice([other[0], rng.randrange(len(bufs))]))
        if not overlap(r, other):
            return r
    return None


# -- jobs ------------------------------------------------------------------------------------
class Job:
    count = 0

    def __init__(self, kind, ctx_i, ip, ring, reads, writes, desc):
        Job.count += 1
        self.id, self.kind, self.desc = Job.count, kind, desc
        self.ctx_i, self.ip, self.ring = ctx_i, ip, ring
        self.entity = (ctx_i, ip, ring)
        self.reads, self.writes = reads, writes
        self.deps, self.fence, self.syncobj = [], None, None
        self.ib_slot = self.karg_slot = self.gate = None
        self.done = False     # known finished (a wait): it retires, its slots are reused
        self.seen = False     # seen finished by a zero-timeout query: only checked earlier

    def __repr__(self):
        ring = f"sdma{self.ring}" if self.ip == DMA else f"comp_1.{self.ring}.0"
        return f"job {self.id} ({self.desc}; ctx {self.ctx_i} {ring} seq {self.fence and self.fence.fence})"


pending = []      # submitted, not known done, in submission order
gates = {}        # gate slot -> (token, job, step closed)


def conflicting(reads, writes, job):
    return any_overlap(writes, job.reads + job.writes) or any_overlap(reads, job.writes)


def pick_free(n=None, align=1, bi=None, avoid=True):
    """A range, trying (when `avoid`) to miss every unfinished job's ranges."""
    r = pick_range(n=n, align=align, bi=bi)
    for _ in range(6 if avoid else 0):
        if not any(conflicting([r], [r], j) for j in pending):
            break
        r = pick_range(n=n, align=align, bi=bi)
    return r


def build_sdma():
    global gate_token
    ib, reads, writes, effects, parts = libvgpu.SdmaIb(), [], [], [], []
    avoid = rng.random() < 0.6
    gate = None
    if free_gate and rng.random() < 0.12:
        gate_token += 1
        gate = (free_gate.pop(), gate_token)
        ib.poll_regmem(ctl_va + gate[0] * GATE_SLOT, gate[1])
        parts.append("gate")
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        what = rng.choice(["fill", "write", "copy"])
        if what == "fill":
            d = pick_free(avoid=avoid)
            value, byte = rng.getrandbits(32), rng.random() < 0.3
            pattern = bytes([value & 0xFF]) if byte else value.to_bytes(4, "little")
            n = d[2] - d[1]
            ib.constant_fill(bufs[d[0]].va + d[1], value, n,
                             sdma.SDMA_FILLSIZE_BYTE if byte else sdma.SDMA_FILLSIZE_DWORD)
            data = np.frombuffer((pattern * (n // len(pattern) + 1))[:n], np.uint8)
            effects.append((d, lambda data=data: data))
            parts.append(f"fill{'8' if byte else '32'} {rdesc(d)}={value:#x}")
            writes.append(d)
        elif what == "write":
            ndw = rng.choice([rng.randint(1, 8), rng.randint(1, 32), rng.randint(1, 128)])
            d = pick_free(n=4 * ndw, avoid=avoid)
            raw = rng.randbytes(4 * ndw)
            ib.write_linear(bufs[d[0]].va + d[1], list(np.frombuffer(raw, "<u4").tolist()))
            data = np.frombuffer(raw, np.uint8)
            effects.append((d, lambda data=data: data))
            parts.append(f"write {rdesc(d)}")
            writes.append(d)
        else:
            s = pick_free(avoid=avoid)
            d = pick_disjoint(s)
            if d is None:
                continue
            ib.copy_linear(bufs[d[0]].va + d[1], bufs[s[0]].va + s[1], s[2] - s[1])
            effects.append((d, lambda s=s: bufs[s[0]].model[s[1]:s[2]].copy()))
            parts.append(f"copy {rdesc(s)}->{rdesc(d)}")
            reads.append(s)
            writes.append(d)
    if not writes:
        if gate:
            free_gate.append(gate[0])
        return None
    ctx_i, ring = rng.randrange(len(contexts)), rng.choice(SDMA_RINGS)
    job = Job("sdma", ctx_i, DMA, ring, reads, writes, ", ".join(parts))
    job.gate = gate
    return job, ib, effects


def build_compute():
    name = rng.choice(list(kernels))
    align = 4 if name == "mad32" else 1
    avoid = rng.random() < 0.6
    src = pick_free(align=align, avoid=avoid)
    dst = src if rng.random() < 0.3 else pick_disjoint(src, align=align)
    if dst is None:
        return None
    n = (src[2] - src[1]) // align
    mul, add = rng.getrandbits(32), rng.getrandbits(32)
    k = kernels[name]
    if not free_karg:
        return None
    karg = free_karg.pop()
    args = k.pack_args(src=bufs[src[0]].va + src[1], dst=bufs[dst[0]].va + dst[1], n=n, mul=mul, add=add)
    karg_view[karg * KARG_SLOT:karg * KARG_SLOT + len(args)] = np.frombuffer(args, np.uint8)
    ib = libvgpu.emit_dispatch(libvgpu.Pm4Ib(), k, grid=(-(-n // 64), 1, 1),
                               user_data=libvgpu.kernarg_user_data(karg_va + karg * KARG_SLOT))

    def effect(src=src, mul=mul, add=add, name=name):
        x = bufs[src[0]].model[src[1]:src[2]].copy()
        if name == "mad32":
            y = x.view("<u4").astype(np.uint64) * mul + add
            return (y & 0xFFFFFFFF).astype("<u4").view(np.uint8)
        return ((x.astype(np.uint64) * mul + add) & 0xFF).astype(np.uint8)

    ctx_i, ring = rng.randrange(len(contexts)), rng.choice(COMPUTE_RINGS)
    job = Job("compute", ctx_i, COMPUTE, ring, [src], [dst],
              f"{name} {rdesc(src)}->{rdesc(dst)} *{mul:#x} +{add:#x}")
    job.karg_slot = karg
    return job, ib, [(dst, effect)]


def submit(step, built):
    job, ib, effects = built
    # every unfinished job of another queue that touches our ranges must finish first
    deps = [k for k in pending if k.entity != job.entity and conflicting(job.reads, job.writes, k)]
    extra = [k for k in pending if k.entity != job.entity and k not in deps]
    if extra and rng.random() < 0.1:
        deps.append(rng.choice(extra))  # an ordering nobody needs, for variety
    fences, syncobj_in = [], []
    for k in deps:
        if k.syncobj is not None and rng.random() < 0.5:
            syncobj_in.append(k.syncobj)
        else:
            fences.append(k.fence)
    stats["deps_fence"] += len(fences)
    stats["deps_syncobj"] += len(syncobj_in)
    if rng.random() < 0.55:
        job.syncobj = syncobj_pool.pop() if syncobj_pool else libvgpu.syncobj_create(dev)
    job.ib_slot = free_ib.pop()
    data = ib.tobytes()
    off = job.ib_slot * IB_SLOT
    assert len(data) <= IB_SLOT, len(data)
    ib_view[off:off + len(data)] = np.frombuffer(data, np.uint8)  # coherent: no flush
    req = libvgpu.CsRequest(job.ip, [libvgpu.IbInfo(ib_va + off, len(ib))], resources=bo_list,
                            ring=job.ring, dependencies=fences, syncobj_in=syncobj_in,
                            syncobj_out=[job.syncobj] if job.syncobj else [])
    try:
        libvgpu.cs_submit(contexts[job.ctx_i], req)
    except OSError as e:
        fail(step, f"CS of {job} failed: {e!r}")
    job.fence = libvgpu.fence_of(contexts[job.ctx_i], req)
    job.deps = deps
    for d, effect in effects:   # the model takes the job's effect now, in packet order
        bufs[d[0]].model[d[1]:d[2]] = effect()
    if job.gate:
        gates[job.gate[0]] = (job.gate[1], job, step)
    pending.append(job)
    history.append((step, f"submit {job}" + (f" after jobs {[k.id for k in deps]}" if deps else ""),
                    job.writes))
    stats[job.kind] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], len(pending))


def open_gate(step, slot):
    token, job, _ = gates.pop(slot)
    # nothing can have passed a closed gate: neither the fence nor a sync file of it
    if libvgpu.cs_query_fence_status(job.fence, 0):
        fail(step, f"{job} signalled before the CPU opened its gate")
    if job.syncobj is not None and rng.random() < 0.5:
        if poll_sync_file(job, 0):
            fail(step, f"the sync file of {job} polled signalled before the CPU opened its gate")
        stats["early_polls"] += 1
    ctl_words[slot * GATE_SLOT // 4] = token  # coherent: no flush; the running POLL_REGMEM must see it
    history.append((step, f"open gate of job {job.id}", []))
    stats["gates"] += 1


def open_old_gates(step, max_age=GATE_MAX_AGE):
    for slot, (_, _, closed) in list(gates.items()):
        if step - closed >= max_age:
            open_gate(step, slot)


def mark(job, attr):
    """`job` finished, so did its dependencies and what precedes it in its queue."""
    todo = [job]
    while todo:
        j = todo.pop()
        if getattr(j, attr):
            continue
        setattr(j, attr, True)
        todo += j.deps
        todo += [k for k in pending if k.entity == j.entity and k.id < j.id]


def retire():
    global pending
    for j in pending:
        if j.done:
            free_ib.append(j.ib_slot)
            if j.karg_slot is not None:
                free_karg.append(j.karg_slot)
            if j.gate:
                assert j.gate[0] not in gates
                free_gate.append(j.gate[0])
            if j.syncobj is not None:
                syncobj_pool.append(j.syncobj)
    pending = [j for j in pending if not j.done]


def poll_sync_file(job, timeout_ms):
    """poll() for POLLIN on a sync file exported from the job's SYNCOBJ_OUT."""
    token = libvgpu.syncobj_export_sync_file(job.syncobj)
    fd = os.open(os.path.join(MOUNT, "sync", format(token, "x")), os.O_RDONLY)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        return bool(p.poll(timeout_ms))
    finally:
        os.close(fd)


def wait(step):
    open_old_gates(step, 0)   # every job can finish now
    if not pending:
        return "nothing"
    how = rng.choices(["wait_cs", "syncobj", "poll", "fences"], [3, 3, 3, 1])[0]
    with_syncobj = [j for j in pending if j.syncobj is not None]
    if how in ("syncobj", "poll") and not with_syncobj:
        how = "wait_cs"
    if how == "fences":
        some = rng.sample(pending, rng.randint(1, len(pending)))
        ok, _ = libvgpu.cs_wait_fences([j.fence for j in some], True, WAIT_NS)
        if not ok:
            fail(step, f"WAIT_FENCES on jobs {[j.id for j in some]} timed out")
        for j in some:
            mark(j, "done")
        what = f"WAIT_FENCES on jobs {[j.id for j in some]}"
    else:
        job = rng.choice(with_syncobj if how in ("syncobj", "poll") else pending)
        if how == "wait_cs":
            if not libvgpu.cs_query_fence_status(job.fence, WAIT_NS):
                fail(step, f"WAIT_CS on {job} timed out")
        elif how == "syncobj":
            try:
                libvgpu.syncobj_wait(dev, [job.syncobj], WAIT_NS)
            except libvgpu.VgpuTimeout:
                fail(step, f"syncobj wait on {job} timed out")
        elif not poll_sync_file(job, WAIT_MS):
            fail(step, f"poll() of the sync file of {job} timed out")
        mark(job, "done")
        what = f"{how} on job {job.id}"
    stats["wait_" + how] += 1
    if rng.random() < 0.3:
        # What else has finished? (WAIT_CS with a zero timeout.) Those jobs' bytes are
        # checked now, but they stay pending for every later choice, so that a seed
        # gives the same steps whatever the timing.
        for j in pending:
            if not (j.done or j.seen) and libvgpu.cs_query_fence_status(j.fence, 0):
                mark(j, "seen")
                stats["seen_by_sweep"] += 1
    retire()
    history.append((step, what, []))
    return what


def check(step, what):
    stats["checks"] += 1
    for b in bufs:
        unknown = np.zeros(b.size, bool)   # bytes unfinished jobs may still write
        for j in pending:
            if j.seen:
                continue
            for bi, s, e in j.writes:
                if bi == b.idx:
                    unknown[s:e] = True
        bad = np.flatnonzero((b.view != b.model) & ~unknown)
        if bad.size:
            off = int(bad[0])
            writers = [f"  step {s}: {t}" for s, t, ws in history
                       if any(w[0] == b.idx and w[1] <= off < w[2] for w in ws)][-8:]
            last = [f"  step {s}: {t}" for s, t, ws in history][-8:]
            fail(step, f"after {what}: BO {b} offset {off:#x}: expected {int(b.model[off]):#04x}, "
                       f"got {int(b.view[off]):#04x} ({bad.size} bytes differ, in [{off:#x}, {int(bad[-1]):#x}])\n"
                       f"unfinished jobs: {pending}\n"
                       f"the last writers of that byte:\n" + "\n".join(writers)
                       + "\nthe last operations:\n" + "\n".join(last))


def cpu_write(step):
    for _ in range(6):
        r = pick_range()
        if not any(any_overlap([r], j.reads + j.writes) for j in pending):
            break
    else:
        return False
    b, (bi, s, e) = bufs[r[0]], r
    data = np.frombuffer(rng.randbytes(e - s), np.uint8)
    how = rng.random()
    if how < 0.15:           # a single byte
        e = s + 1
        b.view[s] = data[0]
        data = data[:1]
    elif how < 0.3:          # through the memoryview of the same mapping
        b.mv[s:e] = data.tobytes()
    else:
        b.view[s:e] = data
    # coherent: no flush
    b.model[s:e] = data
    history.append((step, f"CPU write {rdesc((bi, s, e))}", [(bi, s, e)]))
    stats["cpu_writes"] += 1
    return True


# -- the run ----------------------------------------------------------------------------------
step = 0
try:
    check(0, "setup")
    for step in range(1, STEPS + 1):
        open_old_gates(step)
        action = rng.choices(["cpu", "sdma", "compute", "wait", "gate"], [28, 32, 12, 22, 6])[0]
        if len(pending) >= MAX_IN_FLIGHT or not free_ib:
            action = "wait"
        if action == "cpu" and not cpu_write(step):
            action = "wait"
        if action in ("sdma", "compute"):
            built = build_sdma() if action == "sdma" else build_compute()
            if built is None:
                action = "wait"
            else:
                submit(step, built)
        if action == "gate" and gates:
            open_gate(step, rng.choice(list(gates)))
        if action == "wait":
            check(step, wait(step))
        stats["steps"] += 1
    open_old_gates(STEPS + 1, 0)
    if pending:
        ok, _ = libvgpu.cs_wait_fences([j.fence for j in pending], True, WAIT_NS)
        if not ok:
            fail(STEPS + 1, f"final WAIT_FENCES timed out: {pending}")
        for j in list(pending):
            mark(j, "done")
        retire()
    check(STEPS + 1, "the final wait for all jobs")
except Failure as e:
    print("FAIL", e, flush=True)
    sys.exit(1)
except Exception as e:  # an ioctl that failed, a job whose fence carries an error...
    import traceback
    traceback.print_exc()
    print(f"FAIL seed={SEED} client={TAG} step={step}: {e!r}; unfinished: {pending}", flush=True)
    sys.exit(1)
print("RESULT", json.dumps(dict(stats, seed=SEED, client=TAG)), flush=True)
'''

STEPS_ONE = 1500      # single client
STEPS_TWO = 700       # each of the two concurrent clients


def _base_seed() -> int:
    env = os.environ.get("VGPU_COHERENCE_SEED")
    return int(env, 0) if env else random.SystemRandom().randrange(1 << 32)


def _steps(default: int) -> int:
    return int(os.environ.get("VGPU_COHERENCE_STEPS", default))


def _run(mount: str, seed: int, steps: int, tag: str):
    r = run_client(CLIENT, seed, steps, tag, mount=mount, timeout=150)
    result = None
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    return r, result


def _verdict(r, result, seed: int, tag: str) -> str | None:
    if r.returncode == 0 and result is not None:
        return None
    return (f"coherence model client {tag} failed (seed {seed}; rerun with VGPU_COHERENCE_SEED={seed})\n"
            f"stdout:\n{r.stdout[-20000:]}\nstderr:\n{r.stderr[-20000:]}")


def test_coherence_model_one_client(vgpu_mount):
    seed = _base_seed()
    print(f"seed {seed}")
    r, result = _run(vgpu_mount, seed, _steps(STEPS_ONE), "A")
    problem = _verdict(r, result, seed, "A")
    assert problem is None, problem
    print(result)
    # the run did what it is meant to: every kind of step, overlapping jobs
    for key in ("cpu_writes", "sdma", "compute", "wait_wait_cs", "wait_syncobj", "wait_poll",
                "deps_fence", "deps_syncobj", "gates"):
        assert result.get(key, 0) > 0, (key, result)
    assert result["max_in_flight"] >= 4, result


def test_coherence_model_two_clients(vgpu_mount):
    base = _base_seed()
    seeds = {"A": base, "B": (base * 2654435761 + 1) % (1 << 32)}
    print(f"seeds {seeds}")
    out = {}

    def one(tag):
        out[tag] = _run(vgpu_mount, seeds[tag], _steps(STEPS_TWO), tag)

    threads = [threading.Thread(target=one, args=(tag,)) for tag in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    problems = [p for tag in seeds if (p := _verdict(*out[tag], seeds[tag], tag))]
    assert not problems, "\n\n".join(problems)
    for tag in seeds:
        print(out[tag][1])
        assert out[tag][1]["sdma"] > 0 and out[tag][1]["compute"] > 0
