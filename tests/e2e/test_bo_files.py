"""End to end: BO files under MOUNT/bo/ (GEM_MMAP offset -> mmap MAP_SHARED)."""
import os

from tests.helpers import run_client

PRELUDE = """
import errno, mmap, os, stat, sys
from vgpu import uapi
from tests.helpers import Drm
M = sys.argv[1]
MiB = 1 << 20

def direct_read(path, offset, size):
    # O_DIRECT bypasses the page cache: the bytes come from the KMD's copy (bo.read).
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, size)  # page-aligned buffer
    try:
        n = os.preadv(fd, [buf], offset)
        return buf[:n]
    finally:
        os.close(fd)
"""


def test_mmap_write_msync_reaches_the_kmd(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
h = d.gem_create(MiB)
path = d.bo_path(d.gem_mmap(h))
st = os.stat(path)
print(st.st_size == MiB, stat.S_IMODE(st.st_mode) == 0o600, st.st_uid == os.getuid())

fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, MiB, mmap.MAP_SHARED)
os.close(fd)  # the mapping keeps the open file alive
pattern = bytes(range(256)) * (MiB // 256)
m[:] = pattern
m.flush()  # msync: dirty pages are written back to the KMD
print(direct_read(path, 0, MiB) == pattern)

# A second open and mapping of the same BO sees the same bytes.
fd2 = os.open(path, os.O_RDWR)
m2 = mmap.mmap(fd2, MiB, mmap.MAP_SHARED)
print(m2[:] == pattern)
m2[4096:4100] = b"ABCD"
m2.close()  # munmap writes back too
os.close(fd2)
m.close()
print(direct_read(path, 4096, 4096)[:4] == b"ABCD")
print(os.pread(os.open(path, os.O_RDONLY), 4, 4096) == b"ABCD")
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 7


def test_bo_file_from_a_fresh_process(vgpu_mount):
    # The first client writes and stays alive (it holds the handle); a second process
    # of the same uid maps the BO by its name alone.
    holder = PRELUDE + """
d = Drm(M)
h = d.gem_create(8192)
path = d.bo_path(d.gem_mmap(h))
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, b"hello from the first process", 100)
os.close(fd)
print(path, flush=True)
sys.stdin.readline()
"""
    from tests.helpers import start_client
    p = start_client(holder, vgpu_mount)
    try:
        path = p.stdout.readline().strip()
        r = run_client(PRELUDE + """
import mmap
fd = os.open(sys.argv[2], os.O_RDWR)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)
print(m[100:128].decode())
""", vgpu_mount, path, check=True)
        assert r.stdout.strip() == "hello from the first process"
    finally:
        p.communicate("\n", timeout=60)


def test_write_and_read_syscalls(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
path = d.bo_path(d.gem_mmap(d.gem_create(8192, uapi.AMDGPU_GEM_DOMAIN_GTT)))
fd = os.open(path, os.O_RDWR)
print(os.pwrite(fd, b"x" * 100, 8150))      # cut at the end of the BO
print(os.pread(fd, 100, 8150) == b"x" * 42)
print(os.pread(fd, 10, 8192) == b"")
try:
    os.pwrite(fd, b"y", 8192)
except OSError as e:
    print(errno.errorcode[e.errno])
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["42", "True", "True", "EFBIG"]


def test_bo_directory_lists_nothing(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
for _ in range(3):
    os.stat(d.bo_path(d.gem_mmap(d.gem_create(4096))))
print(len(os.listdir(M + "/bo")))
""", vgpu_mount, check=True)
    assert r.stdout.strip() == "0"


def test_guessed_and_non_canonical_names_are_enoent(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
off = d.gem_mmap(d.gem_create(4096))
good = format(off, "x")
names = ["1000", "0", "deadbeef000", "0x" + good, good.upper(), "0" + good, "zz", good + "0"]
for name in names:
    try:
        os.stat(f"{M}/bo/{name}")
        print("found", name)
    except FileNotFoundError:
        print("ENOENT")
os.stat(f"{M}/bo/{good}")
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["ENOENT"] * 8


def test_bo_file_goes_away_with_the_bo(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
h = d.gem_create(4096)
path = d.bo_path(d.gem_mmap(h))
os.close(os.open(path, os.O_RDWR))
d.gem_close(h)
for _ in range(2):  # a cached name (long entry timeout) is rechecked at open()
    try:
        os.open(path, os.O_RDWR)
        print("opened")
    except FileNotFoundError:
        print("ENOENT")
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["ENOENT", "ENOENT"]


def test_bo_file_cannot_be_resized(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
path = d.bo_path(d.gem_mmap(d.gem_create(4096)))
try:
    os.truncate(path, 0)
except OSError as e:
    print(errno.errorcode[e.errno])
print(os.stat(path).st_size)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["EPERM", "4096"]


def test_gpu_writes_reach_a_live_cpu_mapping(vgpu_mount):
    # The libdrm way: map, write, submit, wait on the fence, read; no extra calls.
    # The KMD pushes the GPU's writes into the page cache (cpu_sync -> notify_store)
    # before it signals the fence; WAIT_CS answers through a PendingReply in read().
    r = run_client(PRELUDE + """
import ctypes, struct
d = Drm(M)
VA_IB, VA_A, SIZE = 0x10000000, 0x20000000, 64 << 10
DMA = uapi.AMDGPU_HW_IP_DMA
a = uapi.drm_amdgpu_ctx(); a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
ctx = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id
ib, buf = d.gem_create(4096, uapi.AMDGPU_GEM_DOMAIN_GTT), d.gem_create(SIZE)
for h, va, size in ((ib, VA_IB, 4096), (buf, VA_A, SIZE)):
    v = uapi.drm_amdgpu_gem_va(handle=h, operation=uapi.AMDGPU_VA_OP_MAP, va_address=va, map_size=size,
                               flags=uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE)
    d.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, v)

fd = os.open(d.bo_path(d.gem_mmap(buf)), os.O_RDWR)
m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
m[:] = b"\\x11" * SIZE
m.flush()                      # what libvgpu does for mapped BOs before a submission

# SDMA (DESIGN 5.2): CONSTANT_FILL (op 11, dword fill size 2 in header bits 31:30)
# of the whole BO, then WRITE_LINEAR (op 2/0) of two dwords at offset 8.
words = [11 | (2 << 30), VA_A, VA_A >> 32, 0xCAFEBABE, SIZE - 1,
         2, VA_A + 8, (VA_A + 8) >> 32, 1, 0x01234567, 0x89ABCDEF]
ibfd = os.open(d.bo_path(d.gem_mmap(ib)), os.O_RDWR)
os.pwrite(ibfd, struct.pack(f"<{len(words)}I", *words), 0)

bl = uapi.drm_amdgpu_bo_list()
bl.in_.operation, bl.in_.bo_number = uapi.AMDGPU_BO_LIST_OP_CREATE, 2
bl.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
lst = d.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, bl, struct.pack("<IIII", ib, 0, buf, 0))[0].out.list_handle
c = uapi.drm_amdgpu_cs_chunk_ib(va_start=VA_IB, ib_bytes=4 * len(words), ip_type=DMA)
chunk = bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB,
                                       length_dw=ctypes.sizeof(c) // 4)) + bytes(c)
cs = uapi.drm_amdgpu_cs(); cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks = ctx, lst, 1
seq = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, chunk)[0].out.handle
w = uapi.drm_amdgpu_wait_cs(); w.in_.handle, w.in_.ip_type, w.in_.ctx_id = seq, DMA, ctx
w.in_.timeout = (1 << 64) - 1
print(d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)[0].out.status)
print(m[:8].hex(), m[8:16].hex(), m[SIZE - 4:].hex())
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["0", "bebafecabebafeca", "67452301efcdab89", "bebafeca"]
