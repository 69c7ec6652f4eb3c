"""Helpers for end-to-end tests: mount a vgpu, run client programs against it.

Import them from any test: ``from tests.helpers import run_client, Drm``. The
``vgpu_mount`` fixture in tests/conftest.py mounts a fresh device per test.

Client code runs in its own process (``run_client``) so that open files, mmaps and
process exit behave as they do for a real program, and optionally as another uid.
Inside client code, ``Drm`` speaks the control-file protocol with raw
``os.write``/``os.read`` (no libvgpu), for tests of the file system itself.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
NOBODY = 65534


def _env(mount: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    if mount is not None:
        env["VGPU_MOUNT"] = str(mount)
    return env


def vgpu_cli(*args, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
    """Run ``python3 -m vgpu_tools ARGS`` (the `vgpu` command) and capture its output."""
    return subprocess.run([sys.executable, "-m", "vgpu_tools", *map(str, args)], env=_env(),
                          capture_output=True, text=True, timeout=timeout, check=check, cwd=ROOT)


def make_mount_dir() -> str:
    """A fresh directory other uids can reach (pytest's tmp_path is 0700)."""
    path = tempfile.mkdtemp(prefix="vgpu-test-")
    os.chmod(path, 0o755)
    return path


def mount(path: str, *args) -> None:
    """Mount a vgpu at ``path``; raises with the daemon log if it does not come up."""
    r = vgpu_cli("mount", path, *args)
    if r.returncode != 0 or not os.path.ismount(path):
        raise RuntimeError(f"vgpu mount {path} failed ({r.returncode}):\n{r.stdout}{r.stderr}")


def unmount(path: str) -> None:
    """Unmount however the mount is (live, busy or dead) and stop its daemon."""
    try:
        vgpu_cli("umount", path, timeout=60)
    finally:
        subprocess.run(["fusermount3", "-u", "-z", path], stderr=subprocess.DEVNULL)


def daemon_log(path: str) -> str:
    from vgpu_tools.cli import state_paths
    try:
        return state_paths(path)[0].read_text(errors="replace")
    except OSError:
        return ""


def _reachable_by_others(path: str) -> bool:
    """True if every directory on the way to ``path`` is searchable by other users."""
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in p.parents) and bool(os.stat(p).st_mode & 0o001)


def client_python(uid: int | None = None) -> str:
    """The interpreter for a client running as ``uid``.

    Ours (sys.executable) when that uid can execute it; otherwise (e.g. a pyenv
    under a 0700 /root) $VGPU_TEST_PYTHON or the system /usr/bin/python3. Such a
    client gets only the standard library plus this repository (no numpy), which
    is all the uapi and the raw protocol need.
    """
    if uid is None or uid == os.getuid() or _reachable_by_others(sys.executable):
        return sys.executable
    return os.environ.get("VGPU_TEST_PYTHON", "/usr/bin/python3")


def _drop_to(uid: int, groups=()):
    def preexec():
        os.setgroups(list(groups))
        os.setgid(uid)
        os.setuid(uid)
    return preexec


def run_client(code: str, *args, uid: int | None = None, timeout: float = 60,
               mount: str | None = None, check: bool = False, groups=()) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a new process (``sys.argv[1:]`` = ``args`` as strings).

    ``uid``: run as that uid and gid (e.g. NOBODY) with the supplementary ``groups``
    (none by default).
    ``mount``: exported as VGPU_MOUNT. Output is captured as text; with ``check``
    a nonzero exit raises CalledProcessError (its output in the message).
    """
    r = subprocess.run([client_python(uid), "-c", code, *map(str, args)], env=_env(mount),
                       capture_output=True, text=True, timeout=timeout, cwd="/",
                       preexec_fn=_drop_to(uid, groups) if uid is not None else None)
    if check and r.returncode != 0:
        raise AssertionError(f"client exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def start_client(code: str, *args, uid: int | None = None,
                 mount: str | None = None) -> subprocess.Popen:
    """Like run_client, but running on: stdin/stdout are text pipes, so the test can
    read what the client reports (``proc.stdout.readline()``) and tell it to go on."""
    return subprocess.Popen([client_python(uid), "-c", code, *map(str, args)], env=_env(mount),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                            preexec_fn=_drop_to(uid) if uid is not None else None)


def wait_for(predicate, what: str, limit: float = 30.0, interval: float = 0.02):
    """Poll ``predicate`` until it returns a true value; fail after ``limit`` seconds.

    For effects FUSE delivers asynchronously (release after a process exits). Not a
    timing assertion: the limit only bounds a hang.
    """
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def read_text(path) -> str:
    with open(path) as f:
        return f.read()


class Drm:
    """One open control file, speaking the framing with raw os.write/os.read.

    ``ioctl(request, arg_struct, extra)`` returns ``(reply_struct, extra_out)``
    parsed into the request's own struct type; errors raise OSError from the
    failing write() or read().
    """

    def __init__(self, mount: str, node: str = "renderD128"):
        self.mount = mount
        self.fd = os.open(os.path.join(mount, "dev", "dri", node), os.O_RDWR)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, request: int, arg: bytes, extra: bytes = b"") -> None:
        from vgpu.frame import encode_request
        os.write(self.fd, encode_request(request, arg, extra))

    def recv(self, size: int | None = None):
        from vgpu.frame import parse_reply
        from vgpu.uapi import VGPU_MAX_FRAME
        return parse_reply(os.read(self.fd, VGPU_MAX_FRAME if size is None else size))

    def ioctl(self, request: int, arg, extra: bytes = b""):
        self.send(request, bytes(arg), extra)
        reply = self.recv()
        return type(arg).from_buffer_copy(reply.arg.ljust(ctypes.sizeof(arg), b"\0")), reply.extra

    def version(self):
        from vgpu import uapi
        v = uapi.drm_version()
        v.name_len = v.date_len = v.desc_len = 64
        return self.ioctl(uapi.DRM_IOCTL_VERSION, v)

    def gem_create(self, size: int, domains: int | None = None) -> int:
        from vgpu import uapi
        c = uapi.drm_amdgpu_gem_create()
        c.in_.bo_size = size
        c.in_.alignment = 4096
        c.in_.domains = uapi.AMDGPU_GEM_DOMAIN_VRAM if domains is None else domains
        out, _ = self.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, c)
        return out.out.handle

    def gem_mmap(self, handle: int) -> int:
        from vgpu import uapi
        m = uapi.drm_amdgpu_gem_mmap()
        m.in_.handle = handle
        out, _ = self.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_MMAP, m)
        return out.out.addr_ptr

    def gem_close(self, handle: int) -> None:
        from vgpu import uapi
        c = uapi.drm_gem_close()
        c.handle = handle
        self.ioctl(uapi.DRM_IOCTL_GEM_CLOSE, c)

    def bo_path(self, offset: int) -> str:
        return os.path.join(self.mount, "bo", format(offset, "x"))
