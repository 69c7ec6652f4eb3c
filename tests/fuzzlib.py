"""Fuzzed traffic for the control files: valid frames of every ioctl, mutated, plus
framing abuse; fuzzed IBs for every ring. Used in process (tests/kmd/test_rss.py,
through the KMD's dispatch) and over a mount by the soak (tests/soak.py, `make
soak`; tests/e2e/test_soak.py).

Standard library and the wire contract (vgpu.*) only, so a client running as
another uid under the system python can use it.

- `Known`: what a client has learned from its replies (handles, contexts, syncobjs,
  BO lists, tokens, sequence numbers), so the next valid requests name live objects.
- `valid_request(rng, name, known)`: (request, arg, extra) that the KMD should accept
  for ioctl `name`, or nearly.
- `fuzzed_frame(rng, known)`: one frame: a valid request of a random ioctl (every
  ioctl of uapi.IOCTLS), its struct and inline data mutated or not, the frame abused
  or not (truncated, extended, wrong magic, wrong number, sizes that disagree,
  noise, over the 128 KiB limit). Waits are bounded: a timeout left infinite by a
  mutation is clamped, unless `allow_forever`.
- `learn(known, name, arg, extra)`: take what a successful reply gives.
- `sdma_ib(rng, vas)`, `pm4_ib(rng, vas, code_va)`, `visa_words(rng)`: fuzzed IBs
  and kernels around the client's own mapped VAs.
"""
from __future__ import annotations

import ctypes
import random
import struct
import time

from vgpu import isa, pm4, uapi
from vgpu.frame import encode_request
from vgpu.sdma import SdmaIb

MiB = 1 << 20
INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 0x10, 0x40, 0x80, 0xFF, 0x100, 0x1000, 0x2000, 0x10000,
               0x200000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 4095, 4097]
NAMES = sorted(d.name for d in uapi.IOCTLS.values())
BY_NAME = {d.name: d for d in uapi.IOCTLS.values()}
WAITS = {"AMDGPU_WAIT_CS", "AMDGPU_WAIT_FENCES", "AMDGPU_GEM_WAIT_IDLE", "SYNCOBJ_WAIT",
         "SYNCOBJ_TIMELINE_WAIT"}
RINGS = [(uapi.AMDGPU_HW_IP_DMA, 0), (uapi.AMDGPU_HW_IP_DMA, 1), (uapi.AMDGPU_HW_IP_COMPUTE, 0)]
VA_BASE = 0x100000000           # where fuzz clients map their BOs


class Known:
    """Handles and numbers a client learned from its replies (bounded: old ones go)."""

    KEEP = 64

    def __init__(self):
        self.bos: list[int] = []
        self.ctxs: list[int] = []
        self.syncobjs: list[int] = []
        self.lists: list[int] = []
        self.tokens: list[int] = []
        self.prime: list[int] = []
        self.seqs: dict[tuple[int, int], int] = {}

    def add(self, what: str, value: int) -> None:
        items = getattr(self, what)
        items.append(value)
        if len(items) > self.KEEP:
            del items[0]

    def pick(self, rng: random.Random, what: str) -> int:
        items = getattr(self, what)
        if items and rng.random() < 0.9:
            return rng.choice(items)
        return rng.choice([0, 1, 2, 3, 0xFFFFFFFF, rng.getrandbits(32)])


def _deadline(rng: random.Random) -> int:
    """An absolute CLOCK_MONOTONIC timeout: now (poll) or a few ms ahead."""
    return time.monotonic_ns() + rng.choice([0, 0, 1, 2, 5]) * 1_000_000


def _chunk(cid: int, data: bytes) -> bytes:
    h = uapi.drm_amdgpu_cs_chunk()
    h.chunk_id, h.length_dw = cid, len(data) // 4
    return bytes(h) + data


def cs_request(ctx_id: int, ib_va: int, ib_bytes: int, ip: int, ring: int, bo_list: int = 0,
               extra_chunks: bytes = b"", nchunks: int = 0) -> tuple[int, bytes, bytes]:
    c = uapi.drm_amdgpu_cs_chunk_ib()
    c.va_start, c.ib_bytes, c.ip_type, c.ring = ib_va, ib_bytes, ip, ring
    a = uapi.drm_amdgpu_cs()
    a.in_.ctx_id, a.in_.bo_list_handle, a.in_.num_chunks = ctx_id, bo_list, 1 + nchunks
    return uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), _chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)) + extra_chunks


def valid_request(rng: random.Random, name: str, k: Known) -> tuple[int, bytes, bytes]:
    """A request for ioctl `name` the KMD should mostly accept, naming `k`'s objects."""
    d = BY_NAME[name]
    a = d.struct()
    extra = b""
    if name == "VERSION":
        a.name_len = a.date_len = a.desc_len = rng.choice([0, 8, 64])
    elif name == "GET_CLIENT":
        a.idx = rng.choice([0, 0, 1])
    elif name == "GET_CAP":
        a.capability = rng.choice([0x1, 0x5, 0x6, 0x13, 0x14, rng.randint(0, 0x20)])
    elif name == "GEM_CLOSE":
        a.handle = k.pick(rng, "bos")
    elif name == "PRIME_HANDLE_TO_FD":
        a.handle, a.flags = k.pick(rng, "bos"), rng.choice([0, 0o2000000, 2])
    elif name == "PRIME_FD_TO_HANDLE":
        a.fd = k.pick(rng, "prime")
    elif name == "AMDGPU_GEM_CREATE":
        a.in_.bo_size = rng.choice([4096, 4096, 8192, 65536, MiB, 3 * 4096])
        a.in_.alignment = rng.choice([0, 4096, 65536])
        a.in_.domains = rng.choice([uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_VRAM,
                                    uapi.AMDGPU_GEM_DOMAIN_VRAM | uapi.AMDGPU_GEM_DOMAIN_GTT, 8, 16, 32])
        a.in_.domain_flags = rng.choice([0, 0, 1, 2, 4])
    elif name == "AMDGPU_GEM_MMAP":
        a.in_.handle = k.pick(rng, "bos")
    elif name == "AMDGPU_CTX":
        a.in_.op = rng.choice([1, 1, 2, 3, 4, 5, 6])
        a.in_.ctx_id = k.pick(rng, "ctxs")
        a.in_.priority = rng.choice([0, 0, -512, 512, 1023, -1023])
    elif name == "AMDGPU_BO_LIST":
        a.in_.operation = rng.choice([0, 0, 1, 2])
        a.in_.list_handle = k.pick(rng, "lists")
        n = rng.randint(1, 4)
        a.in_.bo_number, a.in_.bo_info_size = n, 8
        extra = b"".join(struct.pack("<II", k.pick(rng, "bos"), 0) for _ in range(n))
    elif name == "AMDGPU_CS":
        ip, ring = rng.choice(RINGS)
        chunks, n = b"", 0
        if rng.random() < 0.3 and k.syncobjs:
            chunks += _chunk(rng.choice([uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT]),
                             struct.pack("<I", k.pick(rng, "syncobjs")))
            n += 1
        if rng.random() < 0.2 and k.seqs:
            (dip, dring), seq = rng.choice(list(k.seqs.items()))
            dep = uapi.drm_amdgpu_cs_chunk_dep(ip_type=dip, ring=dring, ctx_id=k.pick(rng, "ctxs"), handle=seq)
            chunks += _chunk(uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, bytes(dep))
            n += 1
        return cs_request(k.pick(rng, "ctxs"), VA_BASE + 4096 * rng.randint(0, 8), rng.choice([4, 8, 16, 28]),
                          ip, ring, k.pick(rng, "lists") if rng.random() < 0.5 else 0, chunks, n)
    elif name == "AMDGPU_INFO":
        a.return_size = rng.choice([4, 8, 16, 64, 256, 1024])
        a.query = rng.choice([0x00, 0x02, 0x03, 0x05, 0x0E, 0x0F, 0x10, 0x11, 0x13, 0x14, 0x15, 0x16, 0x17,
                              0x18, 0x19, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x80,
                              rng.randint(0, 0xFF)])
        raw = bytearray(bytes(a))
        struct.pack_into("<IIII", raw, 16, rng.choice([0, 1, 2, 3]), rng.randint(0, 2), rng.randint(0, 3),
                         rng.choice([0, 0x263E, 0x2634, rng.getrandbits(16)]))
        return d.request, bytes(raw), b""
    elif name == "AMDGPU_GEM_METADATA":
        a.handle, a.op = k.pick(rng, "bos"), rng.choice([1, 2])
        a.data.data_size_bytes = rng.choice([0, 4, 64, 256])
        a.data.tiling_info = rng.getrandbits(64)
    elif name == "AMDGPU_GEM_WAIT_IDLE":
        a.in_.handle, a.in_.timeout = k.pick(rng, "bos"), _deadline(rng)
    elif name == "AMDGPU_GEM_VA":
        a.handle = k.pick(rng, "bos")
        a.operation = rng.choice([1, 1, 2, 3, 4])
        a.flags = rng.choice([0x2, 0x4, 0x6, 0xE])
        a.va_address = VA_BASE + 4096 * rng.randint(0, 64)
        a.offset_in_bo = rng.choice([0, 0, 4096])
        a.map_size = rng.choice([4096, 4096, 8192])
    elif name == "AMDGPU_WAIT_CS":
        ip, ring = rng.choice(RINGS)
        a.in_.handle = k.seqs.get((ip, ring), rng.randint(0, 3))
        a.in_.ip_type, a.in_.ring, a.in_.ctx_id = ip, ring, k.pick(rng, "ctxs")
        a.in_.timeout = _deadline(rng)
    elif name == "AMDGPU_GEM_OP":
        a.handle, a.op, a.value = k.pick(rng, "bos"), rng.choice([0, 1]), rng.choice([2, 4, 6])
    elif name == "AMDGPU_GEM_USERPTR":
        a.addr, a.size, a.flags = 0x7F0000000000, rng.choice([4096, 8192]), rng.choice([0, 1, 8, 9])
    elif name == "AMDGPU_WAIT_FENCES":
        n = rng.randint(1, 3)
        fences = []
        for _ in range(n):
            ip, ring = rng.choice(RINGS)
            fences.append(bytes(uapi.drm_amdgpu_fence(ctx_id=k.pick(rng, "ctxs"), ip_type=ip, ring=ring,
                                                      seq_no=k.seqs.get((ip, ring), 1))))
        a.in_.fence_count, a.in_.wait_all, a.in_.timeout_ns = n, rng.randint(0, 1), _deadline(rng)
        extra = b"".join(fences)
    elif name == "AMDGPU_VM":
        a.in_.op = rng.choice([1, 2])
    elif name == "AMDGPU_FENCE_TO_HANDLE":
        ip, ring = rng.choice(RINGS)
        a.in_.fence.ctx_id, a.in_.fence.ip_type, a.in_.fence.ring = k.pick(rng, "ctxs"), ip, ring
        a.in_.fence.seq_no = k.seqs.get((ip, ring), 0)
        a.in_.what = rng.choice([0, 1, 2])
    elif name == "AMDGPU_SCHED":
        a.in_.op, a.in_.fd = rng.choice([1, 2]), 0
        a.in_.priority, a.in_.ctx_id = rng.choice([0, 512, -512]), k.pick(rng, "ctxs")
    elif name == "SYNCOBJ_CREATE":
        a.flags = rng.choice([0, 1])
    elif name == "SYNCOBJ_DESTROY":
        a.handle = k.pick(rng, "syncobjs")
    elif name == "SYNCOBJ_HANDLE_TO_FD":
        a.handle, a.flags = k.pick(rng, "syncobjs"), rng.choice([0, 1])
    elif name == "SYNCOBJ_FD_TO_HANDLE":
        a.fd, a.flags = k.pick(rng, "tokens"), rng.choice([0, 1])
        a.handle = k.pick(rng, "syncobjs") if a.flags else 0
    elif name in ("SYNCOBJ_WAIT", "SYNCOBJ_TIMELINE_WAIT", "SYNCOBJ_RESET", "SYNCOBJ_SIGNAL",
                  "SYNCOBJ_QUERY", "SYNCOBJ_TIMELINE_SIGNAL"):
        n = rng.randint(1, 3)
        handles = struct.pack(f"<{n}I", *(k.pick(rng, "syncobjs") for _ in range(n)))
        points = struct.pack(f"<{n}Q", *(rng.choice([0, 1, 2, 5]) for _ in range(n)))
        a.count_handles = n
        timeline = name in ("SYNCOBJ_TIMELINE_WAIT", "SYNCOBJ_QUERY", "SYNCOBJ_TIMELINE_SIGNAL")
        extra = handles + (points if timeline else b"")
        if "WAIT" in name:
            a.timeout_nsec, a.flags = _deadline(rng), rng.choice([0, 1, 2, 3, 4])
    elif name == "SYNCOBJ_TRANSFER":
        a.src_handle, a.dst_handle = k.pick(rng, "syncobjs"), k.pick(rng, "syncobjs")
        a.src_point, a.dst_point = rng.choice([0, 1, 2]), rng.choice([0, 1, 3])
    return d.request, bytes(a), extra


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Flip bits, plant interesting dwords, zero or randomize bytes."""
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        r, pos = rng.random(), rng.randrange(len(b))
        if r < 0.4:
            b[pos] ^= 1 << rng.randrange(8)
        elif r < 0.8 and len(b) >= 4:
            pos = rng.randrange(len(b) // 4) * 4
            b[pos:pos + 4] = struct.pack("<I", rng.choice(INTERESTING))
        else:
            b[pos] = rng.getrandbits(8)
    return bytes(b)


def abuse(rng: random.Random, frame: bytes) -> bytes:
    """Break the framing itself."""
    r = rng.random()
    if r < 0.15:
        return frame[: rng.randrange(len(frame))]                              # truncated
    if r < 0.30:
        return frame + rng.randbytes(rng.randint(1, 64))                        # extended
    if r < 0.40:
        return struct.pack("<I", rng.getrandbits(32)) + frame[4:]              # magic
    if r < 0.55:
        return frame[:4] + struct.pack("<I", rng.getrandbits(32)) + frame[8:]  # request number
    if r < 0.70:
        return frame[:8] + struct.pack("<I", rng.choice(INTERESTING)) + frame[12:]  # arg_size
    if r < 0.80:
        return frame[:12] + struct.pack("<I", rng.choice(INTERESTING)) + frame[16:]  # extra_size
    if r < 0.93:
        return rng.randbytes(rng.randint(0, 300))                              # noise
    return frame + bytes(uapi.VGPU_MAX_FRAME)                                   # over the limit


def clamp_waits(name: str, arg: bytes) -> bytes:
    """Keep a wait that a mutation made infinite (or far off) to a few ms: fuzzing is
    about the device's answers, not about waiting for fences that never come."""
    d = BY_NAME.get(name)
    if d is None or name not in WAITS:
        return arg
    # A mutated arg may be shorter or longer than the struct: the KMD zero-extends a
    # short one (a timeout it lacks is 0) and reads the struct's bytes of a long one,
    # so clamp those bytes and keep the rest as the mutation left it.
    size = ctypes.sizeof(d.struct)
    a = d.struct.from_buffer_copy(bytes(arg[:size]).ljust(size, b"\0"))
    soon = time.monotonic_ns() + 5_000_000
    if name in ("AMDGPU_WAIT_CS", "AMDGPU_GEM_WAIT_IDLE"):
        a.in_.timeout = min(a.in_.timeout, soon)
    elif name == "AMDGPU_WAIT_FENCES":
        a.in_.timeout_ns = min(a.in_.timeout_ns, soon)
    else:
        a.timeout_nsec = min(a.timeout_nsec & ((1 << 63) - 1), soon)
    return bytes(a)[:len(arg)] + bytes(arg[size:])


def fuzzed_frame(rng: random.Random, k: Known, allow_forever: bool = False,
                 names: list[str] = NAMES) -> tuple[str, bytes]:
    """(ioctl name, frame): a valid request of a random ioctl, mutated or not, abused or not."""
    name = rng.choice(names)
    request, arg, extra = valid_request(rng, name, k)
    r = rng.random()
    if r < 0.45:
        arg = mutate(rng, arg)
    elif r < 0.60:
        extra = mutate(rng, extra)
    if not allow_forever:
        arg = clamp_waits(name, arg)
    frame = encode_request(request, arg, extra)
    if rng.random() < 0.12:
        frame = abuse(rng, frame)
    return name, frame


def learn(k: Known, name: str, arg: bytes, extra: bytes = b"") -> None:
    """Take the handles a successful reply of `name` hands out."""
    d = BY_NAME.get(name)
    if d is None or len(arg) < ctypes.sizeof(d.struct):
        return
    a = d.struct.from_buffer_copy(arg)
    if name == "AMDGPU_GEM_CREATE":
        k.add("bos", a.out.handle)
    elif name == "AMDGPU_CTX" and a.in_.op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
        k.add("ctxs", a.out.alloc.ctx_id)
    elif name == "AMDGPU_BO_LIST" and a.in_.operation == uapi.AMDGPU_BO_LIST_OP_CREATE:
        k.add("lists", a.out.list_handle)
    elif name == "SYNCOBJ_CREATE":
        k.add("syncobjs", a.handle)
    elif name == "SYNCOBJ_HANDLE_TO_FD":
        k.add("tokens", a.fd)
    elif name == "SYNCOBJ_FD_TO_HANDLE" and a.handle:
        k.add("syncobjs", a.handle)
    elif name == "PRIME_HANDLE_TO_FD":
        k.add("prime", a.fd)
    elif name == "PRIME_FD_TO_HANDLE":
        k.add("bos", a.handle)
    elif name == "AMDGPU_FENCE_TO_HANDLE" and a.in_.what == 0:
        k.add("syncobjs", a.out.handle)


# -- fuzzed IBs --------------------------------------------------------------------------

def _va(rng: random.Random, vas: list[tuple[int, int]]) -> int:
    """Mostly an address in one of the client's mappings, sometimes anywhere."""
    r = rng.random()
    if r < 0.8 and vas:
        va, size = rng.choice(vas)
        return va + rng.randrange(0, size, 4)
    if r < 0.9:
        return rng.choice([0, 0x1000, 0x7000000000, (1 << 47) - 4, 1 << 48])
    return rng.getrandbits(48) & ~3


def sdma_ib(rng: random.Random, vas: list[tuple[int, int]], max_packets: int = 6) -> SdmaIb:
    """SDMA packets of every kind around the client's VAs, or random dwords."""
    ib = SdmaIb()
    for _ in range(rng.randint(1, max_packets)):
        r = rng.random()
        n = rng.choice([4, 8, 64, 4096, 3, 0x10000])
        if r < 0.15:
            ib.copy_linear(_va(rng, vas), _va(rng, vas), n)
        elif r < 0.30:
            ib.write_linear(_va(rng, vas), [rng.getrandbits(32) for _ in range(rng.randint(1, 8))])
        elif r < 0.45:
            ib.constant_fill(_va(rng, vas), rng.getrandbits(32), n)
        elif r < 0.55:
            ib.fence(_va(rng, vas), rng.getrandbits(32))
        elif r < 0.60:
            ib.poll_regmem(_va(rng, vas), rng.choice([0, 1, rng.getrandbits(32)]))
        elif r < 0.70:
            ib.timestamp(_va(rng, vas))
        elif r < 0.75:
            ib.trap(rng.getrandbits(8))
        elif r < 0.85:
            ib.nop(rng.randint(0, 3))
        else:
            ib.raw(*(rng.getrandbits(32) for _ in range(rng.randint(1, 6))))
    return ib


def visa_words(rng: random.Random, n: int = 24) -> bytes:
    """A kernel of mostly valid vISA instructions with random operands, ending in
    s_endpgm (or not)."""
    ops = list(isa.BY_CODE.values())
    words = []
    for _ in range(rng.randint(1, n)):
        if rng.random() < 0.9:
            info = rng.choice(ops)
            words.append(isa.encode(info.fmt, info.code, rng.randint(0, 40), rng.randint(0, 40),
                                    rng.randint(0, 40), rng.randint(0, 40), rng.getrandbits(24)))
        else:
            words.append(rng.getrandbits(64))
    if rng.random() < 0.9:
        words.append(isa.encode(isa.FMT_SOPP, 0x01))
    return struct.pack(f"<{len(words)}Q", *words)


def pm4_ib(rng: random.Random, vas: list[tuple[int, int]], code_va: int, max_packets: int = 6) -> pm4.Pm4Ib:
    """PM4 packets of every kind the compute ring takes, a dispatch of the kernel at
    `code_va` among them, or random dwords."""
    ib = pm4.Pm4Ib()
    for _ in range(rng.randint(1, max_packets)):
        r = rng.random()
        if r < 0.30:
            ib.set_program(code_va if rng.random() < 0.9 else _va(rng, vas) & ~0xFF,
                           pm4.rsrc1(rng.choice([4, 8, 32, 64]), rng.choice([8, 16, 32])),
                           pm4.rsrc2(rng.randint(0, 4), rng.choice([0, 0, 1024])))
            ib.set_num_threads(rng.choice([1, 32, 64]), 1, 1)
            ib.set_user_data([_va(rng, vas) & 0xFFFFFFFF, _va(rng, vas) >> 32])
            ib.dispatch_direct(rng.choice([1, 1, 2, 4]), 1, 1)
        elif r < 0.40:
            ib.release_mem(_va(rng, vas), rng.getrandbits(32))
        elif r < 0.50:
            ib.write_data(_va(rng, vas), [rng.getrandbits(32) for _ in range(rng.randint(1, 4))])
        elif r < 0.55:
            ib.wait_reg_mem(_va(rng, vas), rng.choice([0, 1]))
        elif r < 0.65:
            ib.dma_data(_va(rng, vas), _va(rng, vas), rng.choice([4, 64, 4096]))
        elif r < 0.70:
            ib.dma_fill(_va(rng, vas), rng.getrandbits(32), rng.choice([4, 64, 4096]))
        elif r < 0.75:
            ib.acquire_mem()
        elif r < 0.80:
            ib.indirect_buffer(_va(rng, vas), rng.randint(1, 16))
        elif r < 0.88:
            ib.set_sh_reg(rng.randint(0, 0x300), *(rng.getrandbits(32) for _ in range(rng.randint(1, 4))))
        elif r < 0.93:
            ib.nop(rng.randint(0, 3))
        else:
            ib.raw(*(rng.getrandbits(32) for _ in range(rng.randint(1, 6))))
    return ib
