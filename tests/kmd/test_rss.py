"""Memory: the daemon's RSS stays flat over repeated rounds of fuzzed requests once
VRAM is touched. Rounds of fuzzed frames of every ioctl (tests/fuzzlib.py) and
fuzzed IBs on every ring go through the KMD's dispatch in this process; RSS comes
from /proc/self/status. What is bounded on purpose is checked too: the kmsg ring,
the crash dumps kept, the files, zombies and BO files once the round's clients are
closed. (The same over a mount, with the daemon's RSS: tests/soak.py.)"""
import collections
import gc
import random

from kmd.device import Device
from kmd.errors import KmdError
from tests.fuzzlib import RINGS, Known, cs_request, fuzzed_frame, learn, pm4_ib, sdma_ib, visa_words
from vgpu import uapi
from vgpu.frame import FrameError, parse_request

from .conftest import MiB, call, gem_create, gem_va

ROUNDS, REQUESTS, IB_EVERY = 5, 12_000, 60
SLACK_MIB = 8   # what bounded histories may still add after the first round (fences kept for WAIT_CS)


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


class IbClient:
    """A file with an IB, a code and a 1 MiB VRAM data BO mapped, touched by the CPU."""

    def __init__(self, dev):
        self.dev = dev
        self.f = f = dev.open_file(pid=7, uid=0, comm="ibfuzz")
        self.ctx = self.new_ctx()
        handles = [gem_create(dev, f, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT),
                   gem_create(dev, f, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT),
                   gem_create(dev, f, MiB, uapi.AMDGPU_GEM_DOMAIN_VRAM)]
        for h, va, size in zip(handles, (0x10000000, 0x20000000, 0x30000000), (65536, 65536, MiB)):
            call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, va, size, flags=0xE))
        self.ib, self.code, self.data = (f.bos[h] for h in handles)
        self.data.storage[:] = 0x5A        # VRAM touched

    def new_ctx(self) -> int:
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
        return call(self.dev, self.f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id

    def job(self, rng):
        ip, ring = rng.choice(RINGS)
        vas = [(0x30000000, MiB)]
        if ip == uapi.AMDGPU_HW_IP_DMA:
            words = sdma_ib(rng, vas).tobytes()
        else:
            self.code.write(0, visa_words(rng))
            words = pm4_ib(rng, vas, 0x20000000).tobytes()
        words = words[:65536]
        self.ib.write(0, words)
        req, arg, extra = cs_request(self.ctx, 0x10000000, len(words), ip, ring)
        try:
            reply = self.dev.ioctl(self.f, req, arg, extra)
            if not hasattr(reply, "result"):  # a PendingReply (a CS waiting for room)
                reply = reply.wait()
            seq = uapi.drm_amdgpu_cs.from_buffer_copy(reply.arg).out.handle
            fence = self.dev.rings[(ip, ring)].fence(seq)
            assert fence is None or fence.wait(30)
        except KmdError:
            self.ctx = self.new_ctx()          # guilty: a new context


def fuzz_round(dev, rng) -> collections.Counter:
    files = [dev.open_file(pid=100 + i, uid=1000 + i, comm=f"fuzz{i}") for i in range(4)]
    known = [Known() for _ in files]
    ibc = IbClient(dev)
    out = collections.Counter()
    for i in range(REQUESTS):
        if i % IB_EVERY == 0:
            ibc.job(rng)
        j = i % len(files)
        name, frame = fuzzed_frame(rng, known[j])
        try:
            req = parse_request(frame)
            reply = dev.ioctl(files[j], req.request, req.arg, req.extra)
            if not hasattr(reply, "result"):
                reply = reply.wait()
            learn(known[j], name, reply.arg, reply.extra)
            out["ok"] += 1
        except (FrameError, KmdError):
            out["refused"] += 1
    for f in files + [ibc.f]:
        dev.close_file(f)
    return out


def test_rss_stays_flat_over_fuzz_rounds():
    dev = Device(vram_size=64 * MiB, gtt_size=64 * MiB, timeout=0.2)
    try:
        rng = random.Random(20261130)
        sizes = []
        for _ in range(ROUNDS):
            out = fuzz_round(dev, rng)
            for ring in dev.rings.values():           # the round's jobs are done
                fence = ring.fence(ring.emitted_seq) if ring.emitted_seq else None
                assert fence is None or fence.wait(30)
            gc.collect()
            sizes.append(rss_mib())
            assert out["ok"] > REQUESTS // 10
            # Bounded on purpose: nothing of the round's clients is left.
            assert not dev.files and not dev.zombie_bos and dev.memory.bo_count == 0
            assert dev.memory.vram_allocator.used == 0 and dev.memory.gtt_used == 0
            assert len(dev.kmsg.lines()) <= 10000 and len(dev.devcoredumps()) <= 16
            assert dev.limiter.tally == dict.fromkeys(dev.limiter.tally, 0)
        dev.check_invariants()
        print(f"\nVmRSS after each of {ROUNDS} rounds of {REQUESTS} requests: {sizes} MiB")
        assert sizes[-1] - sizes[0] <= SLACK_MIB, f"RSS grew from {sizes[0]} to {sizes[-1]} MiB"
    finally:
        dev.shutdown()
