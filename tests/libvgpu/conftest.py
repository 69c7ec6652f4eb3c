"""libvgpu against the REAL KMD, in process: no FUSE, no daemon, no mount.

libvgpu issues every request as ``ioctl(fd, request, &struct)`` (docs/design.md
section 3), the struct's pointer fields pointing to its own buffers. Here the
ioctl goes to :class:`Transport` instead of the kernel: the fixture replaces
``libvgpu.ioctl._sys_ioctl`` for the client's fd and does, in the calling thread,
what the kernel and the FUSE daemon do together (vdev/ioctl/): copy ``_IOC_SIZE``
bytes of the struct in when the direction has _IOC_WRITE, build the request's
``extra`` from its pointers with ``vgpu.pointers.gather`` (``ctypes.string_at``
standing in for process_vm_readv), run ``kmd.device.Device.ioctl`` on this client's
DRM file (waiting for a ``PendingReply``, blocking the calling thread as a real
ioctl would), write the out-data behind the output pointers with
``vgpu.pointers.scatter`` and copy the struct back when the direction has _IOC_READ.
A refusal raises ``OSError(errno)``, as the failing syscall would. So every pointer
libvgpu sets up is followed exactly as the daemon follows it.

The client's fd is one end of a SOCK_SEQPACKET socket pair: EOF on the other end
(libvgpu closed its fd) is the DRM file's last close, after which the transport
calls ``close_file``, which frees the file's handles, contexts and VAs. With
``transport="frame"`` (``kmd_mount.connect(transport="frame")``, the
``frame_client`` fixture) libvgpu speaks the old frame protocol on that socket
instead: a thread on the far end parses each request frame with ``vgpu.frame`` and
answers with the reply frame (its errno in the header's ``result``, since a refusal
cannot fail the socket's write()/read()).

``MOUNT/bo/<offset-hex>`` is made by the transport: after each GEM_MMAP reply it links
``<mount>/bo/<offset hex>`` to the BO's shared-memory file, the symlink the daemon's
file system answers with (docs/memory.md, "BO files").
"""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading
from pathlib import Path

import pytest

import libvgpu
from kmd.device import Device
from kmd.errors import KmdError
from kmd.ioctl import PendingReply
from libvgpu import ioctl as lio
from vgpu import frame, pointers, uapi

MiB = 1 << 20
# One byte more than any valid frame, so that an oversized one shows as E2BIG
# instead of being silently truncated by recv().
_RECV_BUFFER = uapi.VGPU_MAX_FRAME + 1

#: fd -> Transport: the client fds whose ioctls the in-process "kernel" answers.
_IOCTL_FDS: dict[int, "Transport"] = {}
_REAL_IOCTL = lio._sys_ioctl


def _fake_sys_ioctl(fd: int, request: int, struct, mutate: bool = True):
    """libvgpu.ioctl._sys_ioctl while a kmd_mount is up: a transport's fd goes to it,
    any other to the real fcntl.ioctl."""
    t = _IOCTL_FDS.get(fd)
    if t is None:
        return _REAL_IOCTL(fd, request, struct, mutate)
    return t.ioctl(request, struct)


def _string_at(ptr: int, n: int) -> bytes:
    return ctypes.string_at(ptr, n)


def _memmove(ptr: int, data: bytes) -> None:
    ctypes.memmove(ptr, data, len(data))


class Transport:
    """One open DRM file of the in-process mount.

    ``dev`` is the libvgpu Device on the client end; ``file`` the KMD's DrmFile
    behind it; ``log`` the name of every request served, in order (``GEM_CLOSE``,
    ``AMDGPU_CS``...), and ``refused`` the (name, errno) of those the KMD refused;
    ``extras`` the flattened extra each request carried (what
    ``vgpu.pointers.gather`` built from its pointers, or the frame's inline data).
    ``crashes`` holds exceptions other than KmdError (a bug in the KMD or in this
    transport): the request fails with EIO instead of hanging, and the fixture
    fails the test.
    """

    def __init__(self, mount: "InProcessMount", render: bool, transport: str = "ioctl"):
        self.kmd = mount.kmd
        self.mount = mount.path
        self.transport = transport
        self.file = self.kmd.open_file(pid=os.getpid(), uid=os.getuid(), comm="test", render=render)
        self.log: list[str] = []
        self.refused: list[tuple[str, int]] = []
        self.extras: list[tuple[str, bytes]] = []
        self.crashes: list[BaseException] = []
        client, self._sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._thread = threading.Thread(target=self._serve, name=f"kmd-transport-{self.file.id}",
                                        daemon=True)
        self._thread.start()
        node = self.mount / "dev" / "dri" / ("renderD128" if render else "card0")
        fd = client.detach()
        if transport == "ioctl":
            _IOCTL_FDS[fd] = self
        # device_initialize_fd owns the fd from here on (and closes it on failure),
        # so the socket object must not close it too: detach.
        self.dev = libvgpu.device_initialize_fd(fd, node, transport)

    # -- the ioctl transport: the kernel's FUSE_IOCTL and the daemon, in process -------
    def ioctl(self, request: int, struct) -> int:
        size, direction = uapi._IOC_SIZE(request), uapi._IOC_DIR(request)
        assert ctypes.sizeof(struct) >= size, "libvgpu passed a struct shorter than _IOC_SIZE"
        base = ctypes.addressof(struct)
        arg = ctypes.string_at(base, size) if direction & uapi._IOC_WRITE else bytes(size)
        name = uapi.ioctl_name(request)
        self.log.append(name)
        try:
            extra = pointers.gather(request, arg, _string_at)
            self.extras.append((name, extra))
            reply = self._run(request, arg, extra)
            pointers.scatter(request, arg, reply.extra, _memmove)
        except KmdError as e:
            self.refused.append((name, e.errno))
            raise OSError(e.errno, os.strerror(e.errno)) from None
        except OSError:
            raise          # EFAULT/E2BIG from following the pointers, as the daemon's
        except Exception as e:  # noqa: BLE001 - reported by the fixture, not swallowed
            self.crashes.append(e)
            raise OSError(errno.EIO, f"transport crash: {e!r}") from None
        if direction & uapi._IOC_READ:
            ctypes.memmove(base, bytes(reply.arg[:size]).ljust(size, b"\0"), size)
        return 0

    def _run(self, request: int, arg: bytes, extra: bytes):
        """The KMD's answer to one request (a PendingReply waited for in this thread)."""
        reply = self.kmd.ioctl(self.file, request, arg, extra)
        if isinstance(reply, PendingReply):
            reply = reply.wait()  # blocks this thread only, as a read() would
        if request == uapi.DRM_IOCTL_AMDGPU_GEM_MMAP:
            self._link_bo(uapi.drm_amdgpu_gem_mmap.from_bytes(reply.arg).out.addr_ptr)
        return reply

    # -- the far end of the socket: the frame transport, and the last close -----------
    def _serve(self) -> None:
        try:
            while True:
                try:
                    buf = self._sock.recv(_RECV_BUFFER)
                except OSError:
                    break
                if not buf:  # the client closed its fd: the DRM file's last close
                    break
                self._sock.send(self._answer(buf))
        finally:
            for fd, t in list(_IOCTL_FDS.items()):
                if t is self:    # the fd number may already be another transport's
                    del _IOCTL_FDS[fd]
            self.kmd.close_file(self.file)
            self._sock.close()

    def _answer(self, buf: bytes) -> bytes:
        try:
            req = frame.parse_request(buf)
        except frame.FrameError as e:
            self.refused.append(("frame", e.errno))
            return frame.encode_reply(-e.errno, b"", b"")
        name = uapi.ioctl_name(req.request)
        self.log.append(name)
        self.extras.append((name, req.extra))
        try:
            reply = self._run(req.request, req.arg, req.extra)
        except KmdError as e:
            self.refused.append((name, e.errno))
            return frame.encode_reply(-e.errno, b"", b"")
        except Exception as e:  # noqa: BLE001 - reported by the fixture, not swallowed
            self.crashes.append(e)
            return frame.encode_reply(-errno.EIO, b"", b"")
        return frame.encode_reply(0, reply.arg, reply.extra)

    def _link_bo(self, offset: int) -> None:
        link = self.mount / "bo" / format(offset, "x")
        bo = self.kmd.bo_by_offset(offset)
        if bo is not None and not link.is_symlink():
            link.symlink_to(bo.path)

    # -- for tests ----------------------------------------------------------------------
    def wait_closed(self, timeout: float = 10.0) -> None:
        """Close the libvgpu Device (idempotent) and wait until the transport has
        closed the DRM file."""
        self.dev.close()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the transport did not see the client close"


class InProcessMount:
    """A real ``kmd.device.Device`` and a directory laid out like its mount
    (``dev/dri/``, ``bo/``). ``connect()`` opens one more DRM file on it."""

    def __init__(self, path: Path, **device_args):
        self.path = path
        (path / "dev" / "dri").mkdir(parents=True)
        (path / "bo").mkdir()
        self.kmd = Device(**device_args)
        self.transports: list[Transport] = []

    def connect(self, render: bool = True, transport: str = "ioctl") -> Transport:
        """A new DRM file (renderD128, or card0 with ``render=False``) with a libvgpu
        Device on it, initialised by ``libvgpu.device_initialize_fd``; ``transport``
        "ioctl" (real ioctl calls, answered in process) or "frame"."""
        t = Transport(self, render, transport)
        self.transports.append(t)
        return t

    def close(self) -> None:
        """Close every client, then check what the KMD's bookkeeping must satisfy
        and stop it. Raises the first transport crash."""
        try:
            for t in self.transports:
                t.wait_closed()
            for t in self.transports:
                if t.crashes:
                    raise t.crashes[0]
            self.kmd.check_invariants()
            assert not self.kmd.files, "a DRM file outlived its client"
        finally:
            self.kmd.shutdown()


@pytest.fixture
def kmd_mount(tmp_path, monkeypatch):
    """An InProcessMount with 16 MiB of VRAM and of GTT and a 2 s ring timeout;
    libvgpu's ioctls on its clients' fds are answered in process."""
    monkeypatch.delenv(lio.TRANSPORT_ENV, raising=False)
    monkeypatch.setattr(lio, "_sys_ioctl", _fake_sys_ioctl)
    m = InProcessMount(tmp_path, vram_size=16 * MiB, gtt_size=16 * MiB, timeout=2.0)
    try:
        yield m
    finally:
        m.close()


@pytest.fixture
def client(kmd_mount) -> Transport:
    """One render-node client of ``kmd_mount``: ``client.dev`` (libvgpu),
    ``client.file`` (the KMD's DrmFile), ``client.log``."""
    return kmd_mount.connect()


@pytest.fixture
def frame_client(kmd_mount) -> Transport:
    """As ``client``, speaking the frame protocol (``VGPU_TRANSPORT=frame``)."""
    return kmd_mount.connect(transport="frame")
