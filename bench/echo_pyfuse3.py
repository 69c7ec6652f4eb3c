"""The floor of our stack: a minimal pyfuse3 + trio control-file echo daemon.

    python3 -m bench.echo_pyfuse3 [--ioctl-thread] MOUNT

Two files, opened ``direct_io`` like vgpu's control files:

- ``MOUNT/ctl``, the frame echo: ``write()`` stores the frame; ``read()`` returns it
  with the request header replaced by a reply header ({result 0, arg_size,
  extra_size, 0}): for a VERSION request with zero string lengths that is exactly as
  long as vgpu's reply (16 + 64 bytes);
- ``MOUNT/ioctl``, the ioctl echo: ``Operations.ioctl`` (deps/pyfuse3/ioctl.patch)
  returns the struct the kernel copied in (restricted mode), result 0.

By default ``pyfuse3.main()`` is the stock trio loop: the ioctl handler is called in
the loop's ``_session_loop`` task, after a ``wait_readable`` of /dev/fuse. With
``--ioctl-thread`` it is ``main(ioctl_thread=True)``, as vdev.daemon runs it: a
reader thread blocked in ``read(/dev/fuse)`` calls the handler itself and hands
every other request to the loop. Nothing else: what remains is pyfuse3's loop (or
thread), its Python handlers and the kernel.
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import struct
import sys

import pyfuse3
import trio

CTL_INODE = pyfuse3.ROOT_INODE + 1
IOCTL_INODE = CTL_INODE + 1
_NAMES = {b"ctl": CTL_INODE, b"ioctl": IOCTL_INODE}
_HEADER = struct.Struct("<IIII")


class EchoFs(pyfuse3.Operations):
    def __init__(self) -> None:
        super().__init__()
        self.frames: dict[int, bytes] = {}
        self.next_fh = 1

    def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.st_mode = (stat.S_IFDIR | 0o755) if inode == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o666)
        a.st_nlink = 1
        a.entry_timeout = a.attr_timeout = 3600
        return a

    async def getattr(self, inode, ctx=None):
        if inode not in (pyfuse3.ROOT_INODE, CTL_INODE, IOCTL_INODE):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name not in _NAMES:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(_NAMES[name])

    async def open(self, inode, flags, ctx):
        fh, self.next_fh = self.next_fh, self.next_fh + 1
        self.frames[fh] = b""
        return pyfuse3.FileInfo(fh=fh, direct_io=True)

    async def write(self, fh, off, buf):
        self.frames[fh] = buf
        return len(buf)

    async def read(self, fh, off, size):
        frame = self.frames[fh]
        _, _, arg_size, extra_size = _HEADER.unpack_from(frame)
        return _HEADER.pack(0, arg_size, extra_size, 0) + frame[_HEADER.size:]

    def ioctl(self, inode, fh, cmd, arg, in_buf, out_size, flags, ctx):
        # a plain method (not async): answered where it is called, no task
        if inode != IOCTL_INODE:
            raise pyfuse3.FUSEError(errno.ENOTTY)
        return in_buf[:out_size]

    async def release(self, fh):
        self.frames.pop(fh, None)


async def _serve(ioctl_thread: bool) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal)
        await pyfuse3.main(ioctl_thread=ioctl_thread)
        nursery.cancel_scope.cancel()


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            pyfuse3.terminate()
            return


def main(mountpoint: str, ioctl_thread: bool = False) -> None:
    opts = {"fsname=echo_pyfuse3"}
    if os.getuid() == 0:
        opts.add("allow_other")  # as vdev.daemon mounts
    pyfuse3.init(EchoFs(), mountpoint, opts)
    try:
        trio.run(_serve, ioctl_thread)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    thread = "--ioctl-thread" in args
    main(next(a for a in args if a != "--ioctl-thread"), ioctl_thread=thread)
