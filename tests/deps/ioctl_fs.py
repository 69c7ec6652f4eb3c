"""A minimal pyfuse3 file system with an ioctl handler, for tests/deps/test_pyfuse3_ioctl.py.

``python3 -m tests.deps.ioctl_fs MOUNT thread|poll|loop``: one file ``f``. Its ioctl nr
0x10 echoes the struct, nr 0x11 answers (7, struct) as the call's result, nr 0x12
raises FUSEError(ENOENT), nr 0x20 waits 30 s in an async task (records "waiting"
and "cancelled" in the file ``state``), nr 0x21 returns a coroutine answering after
50 ms. The second argument: ``main(ioctl_thread=True)``, the same with
``ioctl_poll_us=200`` (the reader polls before it sleeps), or the stock loop.
"""
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


def main() -> None:
    mountpoint, mode = sys.argv[1], sys.argv[2]
    pyfuse3.init(IoctlFs(), mountpoint, {"fsname=ioctltest"})
    try:
        trio.run(lambda: pyfuse3.main(ioctl_thread=mode != "loop",
                                      ioctl_poll_us=200 if mode == "poll" else 0))
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
