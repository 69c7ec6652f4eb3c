"""Fuzz the control-file protocol without FUSE: framing (vgpu.frame) + KMD dispatch.

10,000+ requests: valid request numbers with random and mutated payloads, truncated
and oversized frames, wrong magic. Each must end in an errno (FrameError/KmdError)
or a well-formed reply; afterwards the KMD's bookkeeping must be consistent and,
once every file is closed, all memory must be back.
"""
import ctypes
import random
import struct
import threading

from kmd.device import Device
from kmd.errors import KmdError
from kmd.ioctl import PendingReply
from kmd.ioctl_table import TABLE
from vgpu import uapi
from vgpu.frame import FrameError, encode_request, parse_request

MiB = 1 << 20
INTERESTING = [0, 1, 2, 3, 4, 5, 8, 0x10, 0x1000, 0x2000, 0x10000, 0x200000, 0x7FFFFFFF,
               0xFFFFFFFF, 0x80000000, 4097, 6]


def random_struct(rng: random.Random, size: int) -> bytes:
    words = []
    for _ in range((size + 3) // 4):
        r = rng.random()
        words.append(rng.choice(INTERESTING) if r < 0.7 else rng.getrandbits(32) if r < 0.9 else 0)
    return struct.pack(f"<{len(words)}I", *words)[:size]


def template(rng: random.Random, name: str) -> tuple[bytes, bytes]:
    """A mostly-valid request for `name`, so fuzzing gets past the first checks."""
    if name == "AMDGPU_GEM_CREATE":
        a = uapi.drm_amdgpu_gem_create()
        a.in_.bo_size = rng.choice([4096, 65536, MiB, 3 * MiB, 100 * MiB, 0, 1])
        a.in_.alignment = rng.choice([0, 4096, 65536, 2 * MiB, 3])
        a.in_.domains = rng.choice([uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT, 6, 0, 8])
        return bytes(a), b""
    if name == "AMDGPU_GEM_VA":
        a = uapi.drm_amdgpu_gem_va()
        a.handle = rng.randint(0, 6)
        a.operation = rng.randint(0, 5)
        a.flags = rng.choice([6, 2, 14, 0, 1 << 9])
        a.va_address = rng.choice([0x200000, 0x400000, 0x100000000, 0x1001, 0])
        a.offset_in_bo = rng.choice([0, 4096, 3])
        a.map_size = rng.choice([4096, 8192, MiB, 0, 5])
        return bytes(a), b""
    if name == "AMDGPU_BO_LIST":
        a = uapi.drm_amdgpu_bo_list()
        n = rng.randint(0, 4)
        a.in_.operation = rng.randint(0, 3)
        a.in_.list_handle = rng.randint(0, 3)
        a.in_.bo_number = n if rng.random() < 0.8 else rng.randint(0, 100)
        a.in_.bo_info_size = rng.choice([8, 8, 4, 12, 0])
        return bytes(a), b"".join(struct.pack("<II", rng.randint(0, 6), 0) for _ in range(n))
    if name == "AMDGPU_CS":
        ib = uapi.drm_amdgpu_cs_chunk_ib()
        ib.va_start = rng.choice([0x200000, 0x400000, 0x100000000])
        ib.ib_bytes = rng.choice([4, 8, 28, 64, 3])
        ib.ip_type = rng.choice([uapi.AMDGPU_HW_IP_DMA, uapi.AMDGPU_HW_IP_DMA, 0])
        ib.ring = rng.randint(0, 2)
        hdr = uapi.drm_amdgpu_cs_chunk()
        hdr.chunk_id = rng.choice([uapi.AMDGPU_CHUNK_ID_IB, uapi.AMDGPU_CHUNK_ID_IB, 2, 3, 99])
        hdr.length_dw = ctypes.sizeof(ib) // 4
        a = uapi.drm_amdgpu_cs()
        a.in_.ctx_id = rng.randint(0, 3)
        a.in_.bo_list_handle = rng.randint(0, 2)
        a.in_.num_chunks = rng.choice([1, 1, 0, 2])
        return bytes(a), bytes(hdr) + bytes(ib)
    if name == "AMDGPU_CTX":
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = rng.randint(0, 6)
        a.in_.ctx_id = rng.randint(0, 4)
        a.in_.priority = rng.choice([0, -512, 512, 1023, 5, -2048])
        return bytes(a), b""
    if name in ("AMDGPU_WAIT_CS",):
        a = uapi.drm_amdgpu_wait_cs()
        a.in_.handle = rng.randint(0, 3)
        a.in_.ip_type = uapi.AMDGPU_HW_IP_DMA
        a.in_.ring = rng.randint(0, 2)
        a.in_.ctx_id = rng.randint(0, 3)
        a.in_.timeout = rng.choice([0, 1 << 63])  # never a finite wait in the future
        return bytes(a), b""
    if name == "AMDGPU_GEM_METADATA":
        a = uapi.drm_amdgpu_gem_metadata()
        a.handle = rng.randint(0, 6)
        a.op = rng.choice([1, 2, 2, 0, 3])
        a.data.data_size_bytes = rng.choice([0, 4, 256, 257])
        a.data.tiling_info = rng.getrandbits(64)
        return bytes(a), b""
    if name == "AMDGPU_VM":
        a = uapi.drm_amdgpu_vm()
        a.in_.op = rng.choice([1, 2, 2, 0, 3])
        a.in_.flags = rng.choice([0, 0, 0, 1])
        return bytes(a), b""
    if name == "GET_CLIENT":
        return bytes(uapi.drm_client(idx=rng.choice([0, 0, 1]))), b""
    size = ctypes.sizeof(uapi.IOCTLS[next(nr for nr, d in uapi.IOCTLS.items() if d.name == name)].struct)
    return random_struct(rng, size), random_struct(rng, rng.choice([0, 0, 8, 24, 64]))


def mutate(rng: random.Random, data: bytes) -> bytes:
    if not data or rng.random() < 0.7:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        b[rng.randrange(len(b))] = rng.getrandbits(8)
    return bytes(b)


def frame(rng: random.Random, names: list[str]) -> bytes:
    name = rng.choice(names)
    d = next(d for d in uapi.IOCTLS.values() if d.name == name)
    arg, extra = template(rng, name)
    arg, extra = mutate(rng, arg), mutate(rng, extra)
    buf = encode_request(d.request, arg, extra)
    r = rng.random()
    if r < 0.05:
        buf = buf[: rng.randrange(len(buf))]                       # truncated
    elif r < 0.10:
        buf = buf + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))  # oversized
    elif r < 0.13:
        buf = struct.pack("<I", rng.getrandbits(32)) + buf[4:]      # wrong magic
    elif r < 0.16:
        buf = buf[:4] + struct.pack("<I", rng.getrandbits(32)) + buf[8:]  # random request number
    elif r < 0.18:
        buf = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))  # noise
    return buf


def run_one(dev, f, buf: bytes) -> str:
    try:
        req = parse_request(buf)
    except FrameError as e:
        assert e.errno > 0
        return "frame-error"
    try:
        reply = dev.ioctl(f, req.request, req.arg, req.extra)
    except KmdError as e:
        assert e.errno > 0
        return "kmd-error"
    if isinstance(reply, PendingReply):
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", _wait(reply)))
        t.start()
        t.join(30)
        assert not t.is_alive(), "a fuzzed wait never finished"
        reply = box["r"]
        if isinstance(reply, KmdError):
            return "wait-error"
    assert reply.result == 0 and len(reply.arg) == len(req.arg)
    return "ok"


def _wait(reply):
    try:
        return reply.wait()
    except KmdError as e:
        return e


def test_fuzz_10000_requests_keep_the_kmd_consistent():
    dev = Device(vram_size=64 * MiB, gtt_size=64 * MiB, timeout=0.2)
    try:
        rng = random.Random(20261129)
        names = sorted(d.name for d in TABLE.values() if d.implemented)
        # fuzz0 on card0 (the master, so authenticated: the master ioctls and KMS
        # queries get past drm_ioctl_permit), the others on renderD128
        files = [dev.open_file(pid=100 + i, uid=1000 + i, comm=f"fuzz{i}", render=i != 0) for i in range(3)]
        outcomes: dict[str, int] = {}
        for i in range(10_500):
            f = files[i % 3]
            out = run_one(dev, f, frame(rng, names))
            outcomes[out] = outcomes.get(out, 0) + 1
            if i % 500 == 0:
                dev.check_invariants()
        dev.check_invariants()
        assert outcomes.get("ok", 0) > 300 and outcomes.get("kmd-error", 0) > 1000
        assert outcomes.get("frame-error", 0) > 500
        for ring in dev.rings.values():  # let every job finish, then close everything
            if ring.emitted_seq:
                fence = ring.fence(ring.emitted_seq)
                assert fence is None or fence.wait(30)
        for f in files:
            dev.close_file(f)
        dev.check_invariants()
        assert dev.memory.vram_allocator.used == 0 and dev.memory.gtt_used == 0
        assert not dev.bos_by_offset and not dev.zombie_bos and not dev.files
        assert all(not r.hw_pending and not len(r.sched) for r in dev.rings.values())
    finally:
        dev.shutdown()
