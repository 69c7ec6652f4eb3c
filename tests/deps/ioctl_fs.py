"""A minimal pyfuse3 file system with an ioctl handler, for tests/deps/test_pyfuse3_ioctl.py.

``python3 -m tests.deps.ioctl_fs MOUNT thread|poll|loop|fast``: one file ``f``. Its ioctl
nr 0x10 echoes the struct, nr 0x11 answers (7, struct) as the call's result, nr 0x12
raises FUSEError(ENOENT), nr 0x20 waits 30 s in an async task (records "waiting"
and "cancelled" in the file ``state``), nr 0x21 returns a coroutine answering after
50 ms, nr 0x13 answers (3, struct, then) and then() records "after" (in ``state``),
nr 0x14 the same with a then() that raises. The second argument: ``main(ioctl_thread=True)``, the same with
``ioctl_poll_us=200`` (the reader polls before it sleeps), the stock loop, or the
reader thread with a fast path (``set_ioctl_fast_path``, :func:`fast_path`) that
answers nrs 0x30-0x32 itself and leaves every other request to ``Operations.ioctl``.
"""
import ctypes
import errno
import stat
import sys

import pyfuse3
import trio

STATE: list[str] = []


class IoctlFs(pyfuse3.Operations):
    def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = inode
        e.st_mode = (stat.S_IFDIR | 0o755) if inode == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o666)
        e.st_size = 4096 if inode == 3 else 0
        return e

    async def getattr(self, inode, ctx=None):
        return self._attr(inode)

    async def lookup(self, parent, name, ctx=None):
        if name in (b"f", b"state"):
            return self._attr(2 if name == b"f" else 3)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def open(self, inode, flags, ctx):
        return pyfuse3.FileInfo(fh=inode, direct_io=True)

    async def read(self, fh, off, size):
        return (" ".join(STATE) + "\n").encode()[off:off + size]

    def ioctl(self, inode, fh, cmd, arg, in_buf, out_size, flags, ctx):
        nr = cmd & 0xFF
        if nr == 0x10:
            return in_buf[:out_size]
        if nr == 0x11:
            return 7, in_buf[:out_size]
        if nr == 0x12:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if nr == 0x13:
            return 3, in_buf[:out_size], lambda: STATE.append("after")
        if nr == 0x14:
            return 0, in_buf[:out_size], _fails
        if nr == 0x20:
            return self._long_wait()
        if nr == 0x21:
            return self._short_wait(out_size)
        raise pyfuse3.FUSEError(errno.ENOTTY)

    async def _long_wait(self):
        STATE.append("waiting")
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            STATE.append("cancelled")
            raise
        return b""

    async def _short_wait(self, out_size):
        await trio.sleep(0.05)
        return b"\x01" * out_size


def _fails():
    raise RuntimeError("a then() that fails: logged, and the next request is served")


_FAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint64,
                         ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
                         ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t))


@_FAST
def _answer(data, fh, cmd, arg, in_buf, in_size, out_buf, out_size, pid, result, out_len):
    """nr 0x30: result 5, the struct reversed; 0x31: EPERM; 0x32: the caller's thread
    id (4 bytes) and the fh; anything else: 0, for Operations.ioctl (which answers
    ENOTTY for these three: an answer proves the fast path gave it)."""
    nr = cmd & 0xFF
    if nr == 0x30:
        ctypes.memmove(out_buf, ctypes.string_at(in_buf, in_size)[::-1], min(in_size, out_size))
        result[0], out_len[0] = 5, min(in_size, out_size)
    elif nr == 0x31:
        result[0] = -errno.EPERM
    elif nr == 0x32:
        ctypes.memmove(out_buf, pid.to_bytes(4, "little") + fh.to_bytes(4, "little"), 8)
        result[0], out_len[0] = 0, 8
    else:
        return 0
    return 1


def fast_path():
    """The capsule of :func:`_answer`, as a C extension would make it."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.cast(_answer, ctypes.c_void_p), b"pyfuse3.ioctl_fast_path", None)


def main() -> None:
    mountpoint, mode = sys.argv[1], sys.argv[2]
    pyfuse3.init(IoctlFs(), mountpoint, {"fsname=ioctltest"})
    if mode == "fast":
        pyfuse3.set_ioctl_fast_path(fast_path())
    try:
        trio.run(lambda: pyfuse3.main(ioctl_thread=mode != "loop",
                                      ioctl_poll_us=200 if mode == "poll" else 0))
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
