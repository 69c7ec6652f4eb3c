"""End to end: BO files under MOUNT/bo/ (GEM_MMAP offset -> mmap MAP_SHARED)."""
import os

from tests.helpers import run_client

PRELUDE = """
import errno, mmap, os, stat, sys
from vgpu import uapi
from tests.helpers import Drm
M = sys.argv[1]
MiB = 1 << 20
"""


def test_bo_path_is_a_symlink_to_the_owners_shared_memory_file(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
h = d.gem_create(MiB)
path = d.bo_path(d.gem_mmap(h))
print(stat.S_ISLNK(os.lstat(path).st_mode))
target = os.readlink(path)
st = os.stat(path)   # follows the link
print(target.startswith("/dev/shm/vgpu-"), st.st_size == MiB, stat.S_IMODE(st.st_mode) == 0o600,
      st.st_uid == os.getuid())
print(stat.S_IMODE(os.stat(os.path.dirname(target)).st_mode) == 0o711)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 6


def test_two_mappings_and_read_write_share_one_copy(vgpu_mount):
    # No msync anywhere: every view of the BO is the same pages.
    r = run_client(PRELUDE + """
d = Drm(M)
path = d.bo_path(d.gem_mmap(d.gem_create(MiB)))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, MiB, mmap.MAP_SHARED)
os.close(fd)  # the mapping keeps the open file alive
pattern = bytes(range(256)) * (MiB // 256)
m[:] = pattern
fd2 = os.open(path, os.O_RDWR)
m2 = mmap.mmap(fd2, MiB, mmap.MAP_SHARED)
print(m2[:] == pattern)
m2[4096:4100] = b"ABCD"
print(m[4096:4100] == b"ABCD")
print(os.pread(fd2, 4, 4096) == b"ABCD")
os.pwrite(fd2, b"wxyz", 8192)
print(m[8192:8196] == b"wxyz")
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True"] * 4


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
# good.upper() is another name only when the offset has hex letters (a random one may not).
names = ["1000", "0", "deadbeef000", "0x" + good, good.upper() if good.upper() != good else "0x0",
         "0" + good, "zz", good + "0"]
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
target = os.readlink(path)
os.close(os.open(path, os.O_RDWR))
d.gem_close(h)
print("ENOENT" if not os.path.exists(target) else "file still there")
for _ in range(2):  # a cached name (long entry timeout) is rechecked at readlink
    try:
        os.open(path, os.O_RDWR)
        print("opened")
    except FileNotFoundError:
        print("ENOENT")
print(len([n for n in os.listdir(os.path.dirname(target)) if not n.startswith(".")]))
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["ENOENT", "ENOENT", "ENOENT", "0"]


# Client code: a context, an IB BO and a 64 KiB data BO mapped at VAs; sdma(words)
# writes the IB through the BO file, submits it on sdma0 and returns WAIT_CS's status.
SDMA_CLIENT = PRELUDE + """
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
buf_path = d.bo_path(d.gem_mmap(buf))

def sdma(words):
    fd = os.open(d.bo_path(d.gem_mmap(ib)), os.O_RDWR)
    os.pwrite(fd, struct.pack(f"<{len(words)}I", *words), 0)
    os.close(fd)
    c = uapi.drm_amdgpu_cs_chunk_ib(va_start=VA_IB, ib_bytes=4 * len(words), ip_type=DMA)
    chunk = bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB,
                                           length_dw=ctypes.sizeof(c) // 4)) + bytes(c)
    cs = uapi.drm_amdgpu_cs(); cs.in_.ctx_id, cs.in_.num_chunks = ctx, 1
    seq = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, chunk)[0].out.handle
    w = uapi.drm_amdgpu_wait_cs(); w.in_.handle, w.in_.ip_type, w.in_.ctx_id = seq, DMA, ctx
    w.in_.timeout = (1 << 64) - 1
    return d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)[0].out.status
"""


def test_gpu_writes_reach_a_live_cpu_mapping(vgpu_mount):
    # The libdrm way: map, write, submit, wait on the fence, read; no extra calls:
    # the mapping and the engine share the BO's pages. WAIT_CS answers in read().
    r = run_client(SDMA_CLIENT + """
fd = os.open(buf_path, os.O_RDWR)
m = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
m[:] = b"\\x11" * SIZE
# SDMA (docs/design.md 5.2): CONSTANT_FILL (op 11, dword fill size 2 in header bits 31:30)
# of the whole BO, then WRITE_LINEAR (op 2/0) of two dwords at offset 8.
print(sdma([11 | (2 << 30), VA_A, VA_A >> 32, 0xCAFEBABE, SIZE - 1,
            2, VA_A + 8, (VA_A + 8) >> 32, 1, 0x01234567, 0x89ABCDEF]))
print(m[:8].hex(), m[8:16].hex(), m[SIZE - 4:].hex())
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["0", "bebafecabebafeca", "67452301efcdab89", "bebafeca"]


def test_a_client_truncating_its_bo_file_hurts_nobody(vgpu_mount):
    # The owner may ftruncate its own tmpfs file under the GPU. The daemon's next
    # access past the new end would be SIGBUS: kmd.hw maps a zero page there instead,
    # the job completes, kmsg says what happened, and other clients carry on.
    r = run_client(SDMA_CLIENT + """
os.truncate(buf_path, 0)
# CONSTANT_FILL of the whole (truncated) BO, then COPY_LINEAR of its first half to its second.
print(sdma([11 | (2 << 30), VA_A, VA_A >> 32, 0xCAFEBABE, SIZE - 1,
            1, SIZE // 2 - 1, 0, VA_A, VA_A >> 32, VA_A + SIZE // 2, (VA_A + SIZE // 2) >> 32]))
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["0"]
    r = run_client(PRELUDE + "print(Drm(M).version()[0].version_major)", vgpu_mount, check=True)
    assert r.stdout.strip() == "3"  # another client is served as before
    with open(f"{vgpu_mount}/dev/kmsg") as f:
        assert "BO file truncated under the GPU" in f.read()
