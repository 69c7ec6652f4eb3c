"""End to end, real ioctl() calls from raw clients (tests/raw_ioctl.py: ctypes structs
and libc's ioctl, no libvgpu) on one mount: the daemon reads and writes the data
behind the struct's pointers in the calling process (docs/design.md section 3).

- Bad pointers (the CS chunk table, a chunk, a chunk's data, BO entries, INFO's
  return_pointer, VERSION's buffers, syncobj handle and point arrays, WAIT_FENCES'
  fences, the struct itself) are EFAULT; the daemon serves the next request, and 9000
  calls of them change nothing it shows (clients, amdgpu_gem_info, amdgpu_vm_info, amdgpu_fence_info, BO
  files, kmsg) and leave its RSS where it was (a bound on memory, not on time).
- Struct sizes: libdrm 2.4.114's GEM_VA and a newer kernel's longer one (zero tail)
  both map; a nonzero tail is EINVAL; a shorter CTX reads as zero-extended; GEM_VA
  sent as IOWR (direction bits ignored).
- An O_RDONLY file of card0 and of renderD128 answers VERSION, GET_CAP and INFO.
- A client of another uid (65534) against the root daemon: requests with pointers work.
"""
import ctypes
import os

import pytest

from tests.conftest import _mounted
from tests.helpers import NOBODY, read_text, run_client, start_client
from vgpu import uapi

DEBUGFS = "sys/kernel/debug/dri/0"


@pytest.fixture(scope="module")
def mount():
    yield from _mounted("--vram", "64M")


def daemon_pid(mount) -> int:
    return int(read_text(f"{mount}/sys/module/vgpu/daemon_pid"))


def daemon_status(pid: int) -> dict:
    out = {}
    for line in read_text(f"/proc/{pid}/status").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.split()
    return out


def state(mount) -> dict:
    """What the daemon shows of its clients and objects."""
    return {name: read_text(f"{mount}/{DEBUGFS}/{name}") for name in ("clients", "amdgpu_gem_info", "amdgpu_vm_info",
                                                                      "amdgpu_fence_info")} \
        | {"bo": sorted(os.listdir(f"{mount}/bo")),
           "gtt_used": read_text(f"{mount}/sys/class/drm/card0/device/mem_info_gtt_used")}


# Sets up a context, a BO (with an IB that writes a marker), a syncobj; says "ready";
# on each line from the test runs that many rounds of every bad call (each must be
# EFAULT), then a GET_CAP and prints "done"; on "good" runs the good CS and prints the
# marker; on "quit" exits.
BAD_CALLS = r"""
import ctypes, mmap, os, sys
from vgpu import uapi
from vgpu.sdma import SdmaIb
from tests.raw_ioctl import *

M = sys.argv[1]
r = Raw(M)
ctx = r.ctx()
bo = Bo(r, 4096)
ib = SdmaIb().write_linear(bo.va + 2048, [0xC0FFEE]).tobytes()
bo.write(0, ib)
s = r.syncobj_create(signaled=True)

# memory that is not there: below mmap_min_addr, a PROT_NONE page, a kernel address
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
noaccess = libc.mmap(None, 4096, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
readonly = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
BAD = (0x10, 0x8000, noaccess, 0xFFFF800000000000)

def good_cs():
    return Chunks([ib_chunk(bo.va, len(ib) // 4), bo_handles_chunk([bo.handle])]).struct(ctx)

def bad_calls(bad):
    calls = []
    a = good_cs(); a.in_.chunks = bad                               # the chunk table
    calls.append((uapi.DRM_IOCTL_AMDGPU_CS, a))
    a = good_cs(); a._keep.table[1] = bad                           # a chunk
    calls.append((uapi.DRM_IOCTL_AMDGPU_CS, a))
    a = good_cs(); a._keep.headers[0].chunk_data = bad              # a chunk's data
    calls.append((uapi.DRM_IOCTL_AMDGPU_CS, a))
    a = good_cs(); a._keep.keep[1].bo_info_ptr = bad                # BO_HANDLES entries
    calls.append((uapi.DRM_IOCTL_AMDGPU_CS, a))
    for ptr in (bad, readonly):                                     # INFO's answer
        calls.append((uapi.DRM_IOCTL_AMDGPU_INFO, uapi.drm_amdgpu_info(
            return_pointer=ptr, return_size=64, query=uapi.AMDGPU_INFO_DEV_INFO)))
    calls.append((uapi.DRM_IOCTL_VERSION, uapi.drm_version(name_len=6, name=bad)))
    calls.append((uapi.DRM_IOCTL_SYNCOBJ_WAIT, uapi.drm_syncobj_wait(handles=bad, count_handles=1)))
    calls.append((uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, uapi.drm_syncobj_array(handles=bad, count_handles=1)))
    calls.append((uapi.DRM_IOCTL_SYNCOBJ_RESET, uapi.drm_syncobj_array(handles=bad, count_handles=2)))
    handles = u32_array([s])
    calls.append((uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, uapi.drm_syncobj_timeline_wait(
        handles=address(handles), points=bad, count_handles=1)))
    calls.append((uapi.DRM_IOCTL_SYNCOBJ_QUERY, uapi.drm_syncobj_timeline_array(
        handles=address(handles), points=bad, count_handles=1)))
    calls.append((None, handles))   # kept alive, not called
    b = uapi.drm_amdgpu_bo_list()
    b.in_.bo_number, b.in_.bo_info_size, b.in_.bo_info_ptr = 1, 8, bad
    calls.append((uapi.DRM_IOCTL_AMDGPU_BO_LIST, b))
    w = uapi.drm_amdgpu_wait_fences()
    w.in_.fences, w.in_.fence_count = bad, 1
    calls.append((uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, w))
    calls.append((uapi.DRM_IOCTL_GET_CAP, bad))                     # the struct itself
    return calls

keep = {bad: bad_calls(bad) for bad in BAD}
print("ready", sum(1 for request, _ in keep[0x10] if request is not None), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "quit":
        break
    if cmd[0] == "good":
        seq = r.submit(ctx, [ib_chunk(bo.va, len(ib) // 4), bo_handles_chunk([bo.handle])])
        print(r.wait_cs(ctx, seq), hex(int.from_bytes(bo.read(2048, 4), "little")), r.syncobj_wait([s]), flush=True)
        continue
    wrong = []
    for i in range(int(cmd[0])):
        for bad in BAD:
            for request, arg in keep[bad]:
                if request is None:
                    continue
                err = r.errno(request, arg)
                if err != errno.EFAULT:
                    wrong.append((uapi.ioctl_name(request), hex(bad), errname(err)))
        assert r.get_cap() == 1
    print("done", len(wrong), sorted(set(wrong)), flush=True)
"""


def test_bad_pointers_are_efault_change_nothing_and_leak_nothing(mount):
    client = start_client(BAD_CALLS, mount)
    pid = daemon_pid(mount)
    try:
        ready, ncalls = client.stdout.readline().split()
        assert ready == "ready" and int(ncalls) == 15

        def rounds(n):
            client.stdin.write(f"{n}\n")
            client.stdin.flush()
            return client.stdout.readline().rstrip("\n").split(None, 2)

        assert rounds(1) == ["done", "0", "[]"]
        assert rounds(50) == ["done", "0", "[]"]        # warm up the daemon's caches and pools
        before, status = state(mount), daemon_status(pid)
        assert rounds(150) == ["done", "0", "[]"]       # 150 rounds x 4 bad addresses x 15 calls
        after, status_after = state(mount), daemon_status(pid)
        assert after == before
        grown = int(status_after["VmRSS"][0]) - int(status["VmRSS"][0])
        print(f"\ndaemon RSS {status['VmRSS'][0]} -> {status_after['VmRSS'][0]} kB over "
              f"{150 * 4 * 15} bad calls")
        assert grown < 2048, f"the daemon grew by {grown} kB"  # a leak of ~256 bytes per call shows
        # the client's next requests work: the CS runs, its marker is there
        client.stdin.write("good\n")
        client.stdin.flush()
        assert client.stdout.readline().split() == ["0", "0xc0ffee", "0"]
        client.stdin.write("quit\n")
        client.stdin.flush()
        assert client.wait(timeout=30) == 0
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    kmsg = read_text(f"{mount}/dev/kmsg")
    assert "internal error" not in kmsg and "Traceback" not in kmsg


# -- struct sizes ------------------------------------------------------------------------------
SIZES = r"""
import ctypes, sys
from vgpu import uapi
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
h = r.gem_create(8192)
def va(addr, op=uapi.AMDGPU_VA_OP_MAP):
    return uapi.drm_amdgpu_gem_va(handle=h, operation=op, flags=RWX, va_address=addr, map_size=4096)
def sized(struct, size, tail=0):
    buf = ctypes.create_string_buffer(bytes(struct)[:size].ljust(size, b"\0"), size)
    if tail:
        buf[size - 1] = tail
    return buf
GEM_VA = uapi.DRM_IOCTL_AMDGPU_GEM_VA
out = []
out.append(errname(r.errno(GEM_VA, va(0x400000))))                                   # libdrm's 40 bytes
out.append(errname(r.errno(resized(GEM_VA, 64), sized(va(0x500000), 64))))          # a newer kernel's 64
out.append(errname(r.errno(resized(GEM_VA, 64), sized(va(0x600000), 64, tail=1))))  # nonzero tail
out.append(errname(r.errno(GEM_VA, va(0x500000))))          # mapped by the 64-byte call: overlap
out.append(errname(r.errno(GEM_VA, va(0x600000, uapi.AMDGPU_VA_OP_UNMAP))))  # not mapped by the refused one
iowr = uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, uapi._IOC_NR(GEM_VA), 40)
out.append(errname(r.errno(iowr, va(0x700000))))                                     # IOWR: bits ignored
out.append(errname(r.errno(GEM_VA, va(0x700000, uapi.AMDGPU_VA_OP_UNMAP))))
# a CTX shorter than the KMD's (no priority): zero-extended, ctx_id comes back in the first 4 bytes
short = sized(uapi.drm_amdgpu_ctx_in(op=uapi.AMDGPU_CTX_OP_ALLOC_CTX), 12)
out.append(errname(r.errno(resized(uapi.DRM_IOCTL_AMDGPU_CTX, 12), short)))
out.append(int.from_bytes(short.raw[:4], "little"))
# a longer CTX with a zero tail, then with a nonzero one
out.append(errname(r.errno(resized(uapi.DRM_IOCTL_AMDGPU_CTX, 24), sized(uapi.drm_amdgpu_ctx_in(op=1), 24))))
out.append(errname(r.errno(resized(uapi.DRM_IOCTL_AMDGPU_CTX, 24), sized(uapi.drm_amdgpu_ctx_in(op=1), 24, 7))))
print(*out)
"""


def test_struct_sizes_shorter_and_longer_than_the_kmds(mount):
    r = run_client(SIZES, mount, check=True)
    assert r.stdout.split() == ["ok", "ok", "EINVAL", "EINVAL", "ENOENT", "ok", "ok", "ok", "1", "ok", "EINVAL"]


# -- O_RDONLY ---------------------------------------------------------------------------------
RDONLY = r"""
import os, sys
from vgpu import uapi
from tests.raw_ioctl import *
for node in ("card0", "renderD128"):
    r = Raw(sys.argv[1], node, os.O_RDONLY)
    major, name, date, desc = r.version()
    dev = r.info(uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)
    mem = r.info(uapi.AMDGPU_INFO_MEMORY, uapi.drm_amdgpu_memory_info)
    hw = r.info(uapi.AMDGPU_INFO_HW_IP_INFO, uapi.drm_amdgpu_info_hw_ip, query_hw_ip__type=uapi.AMDGPU_HW_IP_DMA)
    print(node, major, name, r.get_cap(uapi.DRM_CAP_SYNCOBJ), r.get_cap(uapi.DRM_CAP_SYNCOBJ_TIMELINE),
          dev.virtual_address_alignment > 0, mem.vram.total_heap_size, hw.available_rings)
    r.close()
"""


def test_an_o_rdonly_file_answers_version_get_cap_and_info(mount):
    r = run_client(RDONLY, mount, check=True)
    vram = 64 << 20
    assert r.stdout.splitlines() == [f"card0 3 amdgpu 1 1 True {vram} 3", f"renderD128 3 amdgpu 1 1 True {vram} 3"]


# -- another uid --------------------------------------------------------------------------------
OTHER_UID = r"""
import os, sys
from vgpu import uapi
from vgpu.sdma import SdmaIb
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
major, name, date, desc = r.version()
dev = r.info(uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)
ctx = r.ctx()
bo = Bo(r, 4096)
ib = SdmaIb().write_linear(bo.va + 2048, [0xBEEF]).tobytes()
bo.write(0, ib)
s1, s2 = r.syncobj_create(), r.syncobj_create()
lst = r.bo_list([bo.handle])
seq = r.submit(ctx, [ib_chunk(bo.va, len(ib) // 4), syncobj_out_chunk([s1, s2])], bo_list=lst)
first = r.syncobj_wait([s1, s2], flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL)
# a timeline point signalled, then queried (out-data behind `points`)
handles, points = u32_array([s1]), u64_array([5])
r.call(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, uapi.drm_syncobj_timeline_array(
    handles=address(handles), points=address(points), count_handles=1))
points[0] = 0
r.call(uapi.DRM_IOCTL_SYNCOBJ_QUERY, uapi.drm_syncobj_timeline_array(
    handles=address(handles), points=address(points), count_handles=1))
# GEM_OP GET_GEM_CREATE_INFO: the creation parameters behind `value`
info = uapi.drm_amdgpu_gem_create_in()
r.call(uapi.DRM_IOCTL_AMDGPU_GEM_OP, uapi.drm_amdgpu_gem_op(
    handle=bo.handle, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO, value=address(info)))
print(os.getuid(), name, dev.virtual_address_alignment > 0, r.wait_cs(ctx, seq),
      hex(int.from_bytes(bo.read(2048, 4), "little")), first, points[0], info.bo_size, info.domains)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_a_client_of_another_uid_has_its_pointers_served(mount):
    r = run_client(OTHER_UID, mount, uid=NOBODY, check=True)
    assert r.stdout.split() == [str(NOBODY), "amdgpu", "True", "0", "0xbeef", "0", "5", "4096", "2"]
    assert "may not read the memory" not in read_text(f"{mount}/dev/kmsg")


# -- INFO's answer: min(return_size, its size) ------------------------------------------------
INFO_TAIL = r"""
import ctypes, errno, sys
from vgpu import uapi
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
out = []
for query, size in ((uapi.AMDGPU_INFO_ACCEL_WORKING, 16), (uapi.AMDGPU_INFO_TIMESTAMP, 64),
                    (uapi.AMDGPU_INFO_DEV_INFO, 4096)):
    buf = ctypes.create_string_buffer(b"\xaa" * size, size)
    r.call(uapi.DRM_IOCTL_AMDGPU_INFO, uapi.drm_amdgpu_info(return_pointer=address(buf), return_size=size,
                                                             query=query))
    out.append(len(buf.raw.rstrip(b"\xaa")))   # how far the answer reached (<= its size)
out.append(errname(r.errno(uapi.DRM_IOCTL_AMDGPU_INFO, uapi.drm_amdgpu_info(
    return_pointer=0, return_size=8, query=uapi.AMDGPU_INFO_TIMESTAMP))))
print(*out)
"""


def test_info_writes_only_its_answer_and_a_null_pointer_is_einval(mount):
    """amdgpu_info_ioctl copies min(return_size, sizeof(answer)) and refuses a NULL
    return_pointer with EINVAL: the caller's buffer past the answer keeps its bytes."""
    r = run_client(INFO_TAIL, mount, check=True)
    accel, timestamp, dev_info, null = r.stdout.split()
    assert int(accel) <= 4 and int(timestamp) <= 8
    assert 0 < int(dev_info) <= ctypes.sizeof(uapi.drm_amdgpu_info_device_userq)
    assert null == "EINVAL"
