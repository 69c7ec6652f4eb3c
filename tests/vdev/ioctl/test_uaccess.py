"""vdev.ioctl.uaccess: copy_from_user / copy_to_user on a process (process_vm_readv /
writev), against this test process itself and a child: the bytes at an address,
EFAULT for an address not mapped (or not readable / writable) and for a range that
runs off the end of a mapping, ESRCH for a process that is gone, EPERM with a reason
for a process the kernel does not let us reach."""
import ctypes
import errno
import mmap
import os
import subprocess
import sys

import pytest

from tests.helpers import NOBODY, ROOT, client_python
from vdev.ioctl.uaccess import UserAccessError, UserMemory

PAGE = mmap.PAGESIZE
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


@pytest.fixture
def pages():
    """Four anonymous pages: 0 and 1 read-write, 2 read-only, 3 PROT_NONE; and the
    address of a fifth one, unmapped right after them."""
    base = _libc.mmap(None, 5 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                      mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    ctypes.memmove(base, bytes(range(256)) * (2 * PAGE // 256), 2 * PAGE)
    ctypes.memset(base + 2 * PAGE, 0x5A, PAGE)
    assert _libc.mprotect(base + 2 * PAGE, PAGE, mmap.PROT_READ) == 0
    assert _libc.mprotect(base + 3 * PAGE, PAGE, PROT_NONE) == 0
    assert _libc.munmap(base + 4 * PAGE, PAGE) == 0
    yield base
    _libc.munmap(base, 4 * PAGE)


def fails(err, fn, *args):
    with pytest.raises(UserAccessError) as e:
        fn(*args)
    assert e.value.errno == err, e.value
    assert e.value.reason
    return e.value


def test_reads_and_writes_this_process(pages):
    mem = UserMemory(os.getpid())
    assert mem.read(pages, 256) == bytes(range(256))
    assert mem.read(pages + PAGE - 8, 16) == bytes(range(248, 256)) + bytes(range(8))  # across pages
    mem.write(pages + 10, b"hello")
    assert ctypes.string_at(pages + 8, 9) == b"\x08\x09hello\x0f\x10"
    assert mem.read(pages, 0) == b"" and mem.read(0, 0) == b""     # nothing to copy: no fault
    mem.write(0, b"")
    buf = ctypes.create_string_buffer(b"ctypes buffer", 32)
    assert mem.read(ctypes.addressof(buf), 13) == b"ctypes buffer"


def test_unmapped_unreadable_and_partial_ranges_are_efault(pages):
    mem = UserMemory(os.getpid())
    for addr, n in [(0, 8), (0x10, 8), (pages + 3 * PAGE, 8), (pages + 4 * PAGE, 8),
                    (0xFFFF800000000000, 8), ((1 << 64) - 8, 8)]:
        fails(errno.EFAULT, mem.read, addr, n)
    # partly mapped: the read-only page then the PROT_NONE one
    e = fails(errno.EFAULT, mem.read, pages + 3 * PAGE - 16, 32)
    assert "only 16" in e.reason
    # the whole readable range, up to the PROT_NONE page, still reads
    assert mem.read(pages, 3 * PAGE)[-1:] == b"\x5a"
    # writes: read-only, PROT_NONE, unmapped; across the end of the writable pages
    for addr in (pages + 2 * PAGE, pages + 3 * PAGE, pages + 4 * PAGE, 0):
        fails(errno.EFAULT, mem.write, addr, b"x" * 8)
    e = fails(errno.EFAULT, mem.write, pages + 2 * PAGE - 4, b"y" * 8)
    assert "only 4" in e.reason
    assert ctypes.string_at(pages + 2 * PAGE - 4, 4) == b"yyyy"   # as copy_to_user: the head went
    assert ctypes.string_at(pages + 2 * PAGE, 4) == b"\x5a" * 4


CHILD = r"""
import ctypes, sys, threading
buf = ctypes.create_string_buffer(b"child memory", 64)
ev = threading.Event()
t = threading.Thread(target=ev.wait)
t.start()
print(ctypes.addressof(buf), t.native_id, flush=True)
sys.stdin.readline()
print(buf.raw[:16].hex(), flush=True)
ev.set()
"""


def test_reads_and_writes_a_child_by_pid_and_by_thread_id():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        addr, tid = map(int, child.stdout.readline().split())
        for who in (child.pid, tid):
            mem = UserMemory(who)
            assert mem.read(addr, 12) == b"child memory"
            fails(errno.EFAULT, mem.read, 0x10, 8)
            fails(errno.EFAULT, mem.write, 0x10, b"x")
        UserMemory(tid).write(addr, b"CHILD")
        child.stdin.write("\n")
        child.stdin.flush()
        assert bytes.fromhex(child.stdout.readline().strip()) == b"CHILD memory\0\0\0\0"
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # the child is gone (and reaped): ESRCH, which the ioctl path answers as EFAULT
    fails(errno.ESRCH, UserMemory(child.pid).read, addr, 8)


# Run as uid 65534: a "daemon" that is not root reads a root process (the test).
DENIED = r"""
import errno, importlib.util, sys
spec = importlib.util.spec_from_file_location("uaccess", sys.argv[1] + "/vdev/ioctl/uaccess.py")
u = importlib.util.module_from_spec(spec)
spec.loader.exec_module(u)
try:
    u.UserMemory(int(sys.argv[2])).read(int(sys.argv[3]), 8)
    print("read")
except u.UserAccessError as e:
    print(errno.errorcode[e.errno], e.reason)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_a_process_the_kernel_does_not_let_us_reach_is_eperm_with_a_reason():
    buf = ctypes.create_string_buffer(8)

    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    r = subprocess.run([client_python(NOBODY), "-c", DENIED, ROOT, str(os.getpid()), str(ctypes.addressof(buf))],
                       capture_output=True, text=True, timeout=60, preexec_fn=drop, cwd="/")
    assert r.returncode == 0, r.stderr
    code, reason = r.stdout.split(" ", 1)
    assert code == "EPERM"
    assert f"uid {NOBODY}" in reason and f"pid {os.getpid()} (uid 0)" in reason
