"""The pyfuse3 extension of deps/pyfuse3/ioctl.patch, on a file system of its own
(tests/deps/ioctl_fs.py), in each loop mode (the reader thread, the reader thread
polling before it sleeps, the stock loop, the reader thread with a fast path that
declines these requests): Operations.ioctl answered at once, as a result value, as
an error, from an awaitable, with a callable run after the reply, and interrupted by
a signal; and the fast path's own answers."""
import errno
import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _iowr(nr: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (ord("d") << 8) | nr


MODE: dict[str, str] = {}   # mount point -> its mode


@pytest.fixture(scope="module", params=["thread", "poll", "loop", "fast"])
def mount(request, tmp_path_factory):
    mnt = str(tmp_path_factory.mktemp("ioctlfs"))
    MODE[mnt] = request.param
    proc = subprocess.Popen([sys.executable, "-m", "tests.deps.ioctl_fs", mnt, request.param], cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mnt):
            assert proc.poll() is None, "the test file system died"
            assert time.monotonic() < deadline, "the test file system did not mount"
            time.sleep(0.05)
        yield mnt
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _run(code: str, mnt: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``code`` in a client process (fd: the file opened read-only, IOWR(): the encoder)."""
    prelude = ("import errno, fcntl, os, signal, sys, time\n"
               "IOWR = lambda nr, size: (3 << 30) | (size << 16) | (ord('d') << 8) | nr\n"
               f"fd = os.open({mnt!r} + '/f', os.O_RDONLY)\n")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout)


def test_a_sync_handler_echoes_the_struct_on_a_read_only_fd(mount):
    fd = os.open(mount + "/f", os.O_RDONLY)
    try:
        buf = bytearray(b"0123456789abcdef")
        assert fcntl.ioctl(fd, _iowr(0x10, 16), buf, True) == 0
        assert buf == bytearray(b"0123456789abcdef")
        assert fcntl.ioctl(fd, _iowr(0x11, 16), buf, True) == 7   # the (result, data) form
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, _iowr(0x12, 16), buf, True)
        assert e.value.errno == errno.ENOENT
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, _iowr(0x7F, 16), buf, True)
        assert e.value.errno == errno.ENOTTY
    finally:
        os.close(fd)


def test_an_awaitable_answers_later(mount):
    fd = os.open(mount + "/f", os.O_RDONLY)
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, _iowr(0x21, 8), buf, True)
        assert buf == bytearray(b"\x01" * 8)
    finally:
        os.close(fd)


def test_a_signal_interrupts_a_waiting_ioctl_with_eintr(mount):
    r = _run("signal.signal(signal.SIGALRM, lambda *a: None)\n"
             "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
             "t = time.monotonic()\n"
             "try:\n"
             "    fcntl.ioctl(fd, IOWR(0x20, 8), bytearray(8), True)\n"
             "    print('answered')\n"
             "except OSError as e:\n"
             "    print(errno.errorcode[e.errno], round(time.monotonic() - t, 3))\n", mount)
    assert r.returncode == 0, r.stderr
    name, seconds = r.stdout.split()
    assert name == "EINTR"
    assert float(seconds) < 10   # the handler sleeps 30 s: this catches a missed interrupt
    with open(mount + "/state") as f:
        assert f.read().split()[-2:] == ["waiting", "cancelled"]


def test_many_threads_wait_while_another_request_is_answered(mount):
    """Twenty waits in flight (tasks, not workers): an echo still gets through."""
    r = _run("import threading\n"
             "ts = [threading.Thread(target=fcntl.ioctl, args=(fd, IOWR(0x21, 8), bytearray(8), True))"
             " for _ in range(20)]\n"
             "[t.start() for t in ts]\n"
             "b = bytearray(b'x' * 16); fcntl.ioctl(fd, IOWR(0x10, 16), b, True); print(b.decode())\n"
             "[t.join() for t in ts]\n", mount)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "x" * 16


def test_a_poll_window_does_not_delay_or_lose_requests(mount):
    """Requests that come in the reader's poll window, after it, and after an ioctl
    handed to the loop (no poll then) are all answered, from several threads."""
    r = _run("import threading\n"
             "def echo(tag):\n"
             "    for i in range(200):\n"
             "        b = bytearray(b'%c' % tag * 16); fcntl.ioctl(fd, IOWR(0x10, 16), b, True)\n"
             "        assert b == bytearray(b'%c' % tag * 16), b\n"
             "        if i % 50 == 0:\n"
             "            fcntl.ioctl(fd, IOWR(0x21, 8), bytearray(8), True)\n"
             "        if i % 70 == 0:\n"
             "            time.sleep(0.002)   # past the window: the reader sleeps in read()\n"
             "ts = [threading.Thread(target=echo, args=(ord('a') + k,)) for k in range(4)]\n"
             "[t.start() for t in ts]; [t.join() for t in ts]\n"
             "print('ok')\n", mount, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_a_negative_poll_window_is_refused():
    import pyfuse3
    import trio
    with pytest.raises(ValueError, match="ioctl_poll_us"):
        trio.run(lambda: pyfuse3.main(ioctl_thread=True, ioctl_poll_us=-1))


def test_a_fast_path_answers_before_operations_ioctl(mount):
    """set_ioctl_fast_path: its answers (a result, an errno, the caller's thread id
    and the fh) for the nrs Operations.ioctl refuses with ENOTTY; without it those
    nrs are ENOTTY."""
    r = _run("import ctypes, threading\n"
             "b = bytearray(b'abcdefgh'); r = fcntl.ioctl(fd, IOWR(0x30, 8), b, True); print(r, b.decode())\n"
             "try:\n"
             "    fcntl.ioctl(fd, IOWR(0x31, 8), bytearray(8), True)\n"
             "except OSError as e:\n"
             "    print(errno.errorcode[e.errno])\n"
             "def who():\n"
             "    b = bytearray(8); fcntl.ioctl(fd, IOWR(0x32, 8), b, True)\n"
             "    print(int.from_bytes(b[:4], 'little') == threading.get_native_id(), int.from_bytes(b[4:], 'little'))\n"
             "t = threading.Thread(target=who); t.start(); t.join()\n", mount)
    if MODE[mount] != "fast":
        assert r.returncode == 1 and "Inappropriate ioctl" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["5 hgfedcba", "EPERM", "True 2"]   # fh 2: ioctl_fs's open


def test_a_fast_path_can_be_removed():
    import pyfuse3
    from tests.deps.ioctl_fs import fast_path
    pyfuse3.set_ioctl_fast_path(fast_path())
    pyfuse3.set_ioctl_fast_path(None)
    with pytest.raises(ValueError):   # PyCapsule_GetPointer: a capsule of another name
        pyfuse3.set_ioctl_fast_path(ctypes_capsule(b"other"))


def ctypes_capsule(name: bytes):
    import ctypes
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.c_void_p(8), name, None)


def test_a_callable_given_with_the_reply_runs_before_the_next_request(mount):
    """(result, data, then): the call returns result and data; then() has run before
    the next request is answered (here: the read of ``state``); a then() that raises
    is logged and the file system goes on serving."""
    fd = os.open(mount + "/f", os.O_RDONLY)
    try:
        for k in range(3):
            buf = bytearray(b"after the reply!")
            assert fcntl.ioctl(fd, _iowr(0x13, 16), buf, True) == 3
            assert buf == bytearray(b"after the reply!")
            with open(mount + "/state") as f:
                assert f.read().split().count("after") >= k + 1
        buf = bytearray(16)
        assert fcntl.ioctl(fd, _iowr(0x14, 16), buf, True) == 0
        assert fcntl.ioctl(fd, _iowr(0x10, 16), buf, True) == 0
    finally:
        os.close(fd)
