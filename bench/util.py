"""Shared bench helpers: quick mode, statistics, mounting daemons, client processes.

Every mount is made in a fresh temp directory and always undone in ``finally``
(``fusermount3 -u -z``, then the daemon is stopped by its pid).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def quick() -> bool:
    """BENCH_QUICK=1: few rounds, for the smoke test (whole run well under 30 s)."""
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def env() -> dict:
    """The environment for child processes: this tree first on PYTHONPATH."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    return e


def is_mounted(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


def wait_mounted(path: str, proc: subprocess.Popen | None, what: str, limit: float = 30.0) -> None:
    """Until ``path`` is a live mount; raise (with the daemon's output) if it dies first."""
    deadline = time.monotonic() + limit
    while not is_mounted(path):
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"{what} exited {proc.returncode} before mounting:\n{out}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not mount {path} within {limit:.0f} s")
        time.sleep(0.02)
    os.stat(path)  # first request answered: the loop is serving


def _unmount(path: str) -> None:
    subprocess.run(["fusermount3", "-u", "-z", path], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def daemon_mount(argv: list[str], what: str) -> Iterator[str]:
    """Run ``argv + [MOUNT]`` (a foreground FUSE daemon) on a fresh temp dir; yield MOUNT."""
    path = tempfile.mkdtemp(prefix=f"vgpu-bench-{what}-")
    proc = None
    try:
        proc = subprocess.Popen([*argv, path], env=env(), cwd=str(ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        wait_mounted(path, proc, what)
        yield path
    finally:
        _unmount(path)
        if proc is not None:
            _stop(proc)
        with contextlib.suppress(OSError):
            os.rmdir(path)


@contextlib.contextmanager
def vgpu_mount(vram: str = "512M", gtt: str = "256M") -> Iterator[str]:
    """A vgpu daemon (``python3 -m vdev.daemon``, the process ``vgpu mount`` starts)."""
    with daemon_mount([sys.executable, "-m", "vdev.daemon", "--vram", vram, "--gtt", gtt],
                      "vgpu") as path:
        yield path


@contextlib.contextmanager
def pyfuse3_echo_mount(ioctl_thread: bool = False) -> Iterator[str]:
    """bench.echo_pyfuse3: the stock trio loop, or ``main(ioctl_thread=True)``."""
    argv = [sys.executable, "-m", "bench.echo_pyfuse3", *(["--ioctl-thread"] if ioctl_thread else [])]
    with daemon_mount(argv, "pyfuse3-echo") as path:
        yield path


C_ECHO = ROOT / "bench" / "c_echo" / "echo_fuse"


def build_c_echo() -> Path:
    """Compile bench/c_echo/echo_fuse.c if the binary is missing or older (make does
    this too; doing it here keeps ``python3 -m bench`` self-sufficient)."""
    src = C_ECHO.with_suffix(".c")
    if not C_ECHO.exists() or C_ECHO.stat().st_mtime < src.stat().st_mtime:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True,
                               capture_output=True, text=True).stdout.split()
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(C_ECHO), str(src), *flags], check=True)
    return C_ECHO


@contextlib.contextmanager
def c_echo_mount() -> Iterator[str]:
    # -f: foreground, -s: single-threaded loop (as pyfuse3's one trio loop).
    with daemon_mount([str(build_c_echo()), "-f", "-s"], "c-echo") as path:
        yield path


def start_client(module: str, *args, extra_env: dict | None = None) -> subprocess.Popen:
    """``python3 -m MODULE ARGS`` with line-based text pipes (a bench client process)."""
    return subprocess.Popen([sys.executable, "-m", module, *map(str, args)],
                            env={**env(), **(extra_env or {})}, cwd=str(ROOT),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def client_json(module: str, *args, timeout: float = 600, extra_env: dict | None = None):
    """Run ``python3 -m MODULE --client ARGS`` to the end and return the JSON it prints.
    The process is always reaped; a nonzero exit raises RuntimeError."""
    proc = start_client(module, "--client", *args, extra_env=extra_env)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"{module} client exited {proc.returncode}")
    return json.loads(out)


def ask(proc: subprocess.Popen, line: str) -> str:
    """Send one command line to a client and return its one answer line."""
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    answer = proc.stdout.readline()
    if not answer:
        raise RuntimeError(f"bench client exited ({proc.wait()}) on {line!r}")
    return answer.strip()


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


class Submitter:
    """A libvgpu client with one IB ready to submit on sdma0 (the bench clients' GPU side).

    ``Submitter(mount, ib_bytes, bos)``: opens the device, makes a context, writes
    ``ib_bytes`` into a GTT BO mapped at a VA, and a BO list of the IB and ``bos``.
    The IB BO is unmapped from the CPU after writing (``cs_submit`` never syncs
    memory anyway): what is timed is the submission path itself.
    """

    def __init__(self, dev, ib_bytes: bytes, bos: list = ()):
        import libvgpu
        from vgpu import uapi
        self.stack = contextlib.ExitStack()
        self.dev = dev
        self.ctx = self.stack.enter_context(libvgpu.cs_ctx_create(dev))
        size = -(-len(ib_bytes) // 4096) * 4096
        self.ib_bo = self.stack.enter_context(libvgpu.bo_alloc(dev, size, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT))
        self.ib_bo.cpu_map()[:len(ib_bytes)] = ib_bytes
        self.ib_bo.cpu_unmap()  # munmap: the packets are already in the BO's shared pages
        self.ib_va = self.map(self.ib_bo)
        self.bo_list = self.stack.enter_context(libvgpu.bo_list_create(dev, [self.ib_bo, *bos]))
        self.request = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA,
                                         [libvgpu.IbInfo(self.ib_va, len(ib_bytes) // 4)], self.bo_list)

    def map(self, bo) -> int:
        """GEM_VA-map ``bo`` whole at a fresh VA (unmapped and freed at close)."""
        import libvgpu
        from vgpu import uapi
        va = self.stack.enter_context(libvgpu.va_range_alloc(self.dev, bo.size, 4096))
        libvgpu.bo_va_op(bo, 0, bo.size, va.address)
        self.stack.callback(libvgpu.bo_va_op, bo, 0, bo.size, va.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
        return va.address

    def submit(self) -> int:
        import libvgpu
        return libvgpu.cs_submit(self.ctx, self.request)

    def wait(self, seq: int) -> None:
        """WAIT_CS on ``seq`` with an infinite timeout."""
        import libvgpu
        from vgpu import uapi
        fence = libvgpu.CsFence(self.ctx, uapi.AMDGPU_HW_IP_DMA, 0, 0, seq)
        if not libvgpu.cs_query_fence_status(fence, libvgpu.AMDGPU_TIMEOUT_INFINITE):
            raise RuntimeError(f"fence {seq} not signalled after an infinite wait")

    def close(self) -> None:
        self.stack.close()


def alternate(reps: int, cases: dict) -> dict[str, float]:
    """Median seconds of each callable, run in turn ``reps`` times after one warm-up, so
    a drift of the machine hits every case alike."""
    times = {k: [] for k in cases}
    for fn in cases.values():
        fn()
    for _ in range(reps):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: median(v) for k, v in times.items()}
