"""libvgpu against the REAL KMD, in process: no FUSE, no daemon, no mount.

The control-file protocol (docs/design.md section 3) is one write() of a request
frame and one read() of the reply frame; a SOCK_SEQPACKET socket pair keeps those
record boundaries, so libvgpu runs unchanged on one end. A thread on the other end
does what the FUSE daemon does with a frame (vdev/nodes.py): parse it with
``vgpu.frame``, run it with ``kmd.device.Device.ioctl`` on this client's DRM file,
wait for a ``PendingReply``, and answer with the reply frame. Two differences
follow from the socket, both visible only in the transport:

- a refusal cannot fail the write()/read() syscall, so its errno travels in the
  reply header's ``result`` (libvgpu decodes both forms the same way);
- ``MOUNT/bo/<offset-hex>`` is made by the transport: after each GEM_MMAP reply it
  links ``<mount>/bo/<offset hex>`` to the BO's shared-memory file, the symlink the
  daemon's file system answers with (docs/memory.md, "BO files").

EOF on the socket (libvgpu closed its fd) is the DRM file's last close: the
transport calls ``close_file``, which frees the file's handles, contexts and VAs.
"""
from __future__ import annotations

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
from vgpu import frame, uapi

MiB = 1 << 20
# One byte more than any valid frame, so that an oversized one shows as E2BIG
# instead of being silently truncated by recv().
_RECV_BUFFER = uapi.VGPU_MAX_FRAME + 1


class Transport:
    """One open DRM file of the in-process mount, served on a socket pair.

    ``dev`` is the libvgpu Device on the client end; ``file`` the KMD's DrmFile
    behind it; ``log`` the name of every request served, in order (``GEM_CLOSE``,
    ``AMDGPU_CS``...), and ``refused`` the (name, errno) of those the KMD refused.
    ``crashes`` holds exceptions other than KmdError (a bug in the KMD or in this
    transport): the request fails with EIO instead of hanging, and the fixture
    fails the test.
    """

    def __init__(self, mount: "InProcessMount", render: bool):
        self.kmd = mount.kmd
        self.mount = mount.path
        self.file = self.kmd.open_file(pid=os.getpid(), uid=os.getuid(), comm="test", render=render)
        self.log: list[str] = []
        self.refused: list[tuple[str, int]] = []
        self.crashes: list[BaseException] = []
        client, self._sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._thread = threading.Thread(target=self._serve, name=f"kmd-transport-{self.file.id}",
                                        daemon=True)
        self._thread.start()
        node = self.mount / "dev" / "dri" / ("renderD128" if render else "card0")
        # device_initialize_fd owns the fd from here on (and closes it on failure),
        # so the socket object must not close it too: detach.
        self.dev = libvgpu.device_initialize_fd(client.detach(), node)

    # -- the far end ------------------------------------------------------------------
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
        try:
            reply = self.kmd.ioctl(self.file, req.request, req.arg, req.extra)
            if isinstance(reply, PendingReply):
                reply = reply.wait()  # blocks this thread only, as a read() would
            if req.request == uapi.DRM_IOCTL_AMDGPU_GEM_MMAP:
                self._link_bo(uapi.drm_amdgpu_gem_mmap.from_bytes(reply.arg).out.addr_ptr)
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

    def connect(self, render: bool = True) -> Transport:
        """A new DRM file (renderD128, or card0 with ``render=False``) with a libvgpu
        Device on it, initialised by ``libvgpu.device_initialize_fd``."""
        t = Transport(self, render)
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
def kmd_mount(tmp_path):
    """An InProcessMount with 16 MiB of VRAM and of GTT and a 2 s ring timeout."""
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
