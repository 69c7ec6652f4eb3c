"""Object limits per file and per device (kmd/limits.py, docs/kmd.md "Limits"):
Linux's errnos (ENOSPC for a full handle table, ENOMEM for an allocation), one kmsg
line per client and limit, and the counts going back down. Real KMD, no FUSE."""
import ctypes
import errno
import struct

import pytest

from kmd.device import Device
from kmd.hw import SdmaIb
from kmd.limits import CountedDict, CountedSet, Limits
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create
from .test_cs import VA_A, Setup


@pytest.fixture
def small():
    """A device whose limits are small enough to reach in a test."""
    d = Device(vram_size=16 * MiB, gtt_size=16 * MiB, timeout=5.0, limits=Limits(
        bos=12, bos_per_file=8, contexts=6, contexts_per_file=4, syncobjs=6, syncobjs_per_file=4,
        bo_lists=6, bo_lists_per_file=4, jobs=6, jobs_per_file=4))
    try:
        yield d
        d.check_invariants()
    finally:
        d.shutdown()


def _ctx():
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    return a


def _syncobj():
    return uapi.drm_syncobj_create()


def _bo_list(handle):
    a = uapi.drm_amdgpu_bo_list()
    a.in_.operation = uapi.AMDGPU_BO_LIST_OP_CREATE
    a.in_.bo_number = 1
    a.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
    return a, struct.pack("<II", handle, 0)


def _gem():
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.alignment, a.in_.domains = 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT
    return a


def _lines(dev, text):
    return [line for line in dev.kmsg.text().splitlines() if text in line]


def test_defaults_follow_linux():
    lim = Limits()
    assert lim.contexts_per_file == 4095        # amdgpu ids 1..AMDGPU_VM_MAX_NUM_CTX - 1
    assert lim.bos == 262144                    # kmd.shmem.MAX_BOS
    assert Limits.option("bo_lists_per_file") == "--max-bo-lists-per-file"


@pytest.mark.parametrize("kind,name,make", [
    ("BOs", "AMDGPU_GEM_CREATE", lambda h: (_gem(), b"")),
    ("contexts", "AMDGPU_CTX", lambda h: (_ctx(), b"")),
    ("syncobjs", "SYNCOBJ_CREATE", lambda h: (_syncobj(), b"")),
    ("BO lists", "AMDGPU_BO_LIST", lambda h: _bo_list(h)),
])
def test_per_file_cap_is_enospc_and_per_device_cap_is_enomem(small, kind, name, make):
    dev = small
    per_file = 8 if kind == "BOs" else 4
    per_device = 12 if kind == "BOs" else 6
    a = dev.open_file(pid=1, uid=1000, comm="a")
    b = dev.open_file(pid=2, uid=1001, comm="b")
    # A BO for the BO lists to name (the BO caps are tested without one).
    ha = gem_create(dev, a, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) if kind != "BOs" else 0
    hb = gem_create(dev, b, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) if kind != "BOs" else 0
    for _ in range(per_file):
        call(dev, a, name, *make(ha))
    for _ in range(3):  # refused again and again: one kmsg line
        fails(errno.ENOSPC, dev, a, name, *make(ha))
    assert len(_lines(dev, f"client {a.id} (pid 1, a) reached the per-file limit of {per_file} {kind}")) == 1
    assert not _lines(dev, f"refused for client {a.id}")   # no line per refused call
    for _ in range(per_device - per_file):
        call(dev, b, name, *make(hb))
    for _ in range(2):
        fails(errno.ENOMEM, dev, b, name, *make(hb))
    assert len(_lines(dev, f"client {b.id} (pid 2, b) reached the device's limit of {per_device} {kind}")) == 1
    dev.check_invariants()
    dev.close_file(a)
    call(dev, b, name, *make(hb))     # room again once a's objects are gone
    dev.close_file(b)
    assert dev.limiter.tally == dict.fromkeys(dev.limiter.tally, 0)


def test_jobs_in_flight_cap_is_enomem(small):
    dev = small
    f = dev.open_file(pid=1, uid=1000, comm="jobs")
    s = Setup(dev, f, size=4096)
    seqs = [s.submit(SdmaIb().poll_regmem(VA_A, 1)) for _ in range(4)]
    assert len(f.jobs) == 4 and dev.limiter.tally["jobs"] == 4
    fails(errno.ENOMEM, dev, f, "AMDGPU_CS", *_cs_args(s))
    assert len(_lines(dev, "reached the per-file limit of 4 jobs in flight")) == 1
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seqs[-1]) == 0
    s.submit(SdmaIb().poll_regmem(VA_A, 1))       # done jobs no longer count
    s.wait(s.submit(SdmaIb().poll_regmem(VA_A, 1)))
    dev.close_file(f)
    assert dev.limiter.tally["jobs"] == 0


def _cs_args(s):
    """A CS (args, extra) for Setup `s` like Setup.submit builds, for fails()."""
    ib = SdmaIb().poll_regmem(VA_A, 1)
    s.bo(s.ib).write(0, ib.tobytes())
    c = uapi.drm_amdgpu_cs_chunk_ib()
    c.va_start, c.ib_bytes, c.ip_type = 0x10000000, len(ib) * 4, uapi.AMDGPU_HW_IP_DMA
    h = uapi.drm_amdgpu_cs_chunk()
    h.chunk_id, h.length_dw = uapi.AMDGPU_CHUNK_ID_IB, ctypes.sizeof(c) // 4
    a = uapi.drm_amdgpu_cs()
    a.in_.ctx_id, a.in_.bo_list_handle, a.in_.num_chunks = s.ctx, s.list, 1
    return a, bytes(h) + bytes(c)


def test_the_bo_store_bound_stays_the_upper_bound(small):
    dev = small
    dev.memory.store.max_bos = dev.memory.bo_count + 2    # below --max-bos (12)
    f = dev.open_file(pid=1, uid=1000, comm="x")
    gem_create(dev, f, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    gem_create(dev, f, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    fails(errno.ENOMEM, dev, f, "AMDGPU_GEM_CREATE", _gem())
    assert _lines(dev, "reached the device's limit of 2 BOs")
    dev.close_file(f)


def test_counted_tables_keep_the_device_tally():
    tally = {"x": 0}
    d = CountedDict(tally, "x")
    d[1] = "a"
    d[1] = "b"
    d.setdefault(2, "c")
    d.update({3: "d", 4: "e"})
    assert tally["x"] == 4
    del d[1]
    d.pop(2)
    d.pop(99, None)
    d.popitem()
    assert tally["x"] == 1
    d.clear()
    assert tally["x"] == 0
    s = CountedSet(tally, "x")
    s.add(1)
    s.add(1)
    s.add(2)
    s.discard(3)
    s.discard(1)
    assert tally["x"] == 1
    s.remove(2)
    assert tally["x"] == 0
