"""The soak: fuzzed traffic from several processes against a real mount, then a
report (docs/kmd.md, "Soak"). `make soak` runs 1,000,000 requests; tests/e2e/test_soak.py
a 100,000-request version.

    python3 -m tests.soak [--requests N] [--procs P] [--rounds R] [--seed S] [--mount M]

What runs, for R rounds (each with fresh fuzz processes, so every round ends with
their files closed):
- P fuzzers (one of them as uid 65534), every other one over real ioctls (pointers
  aimed at the fuzzed data, at garbage or left as they are), the rest over frames:
  valid requests of every ioctl of the uapi, mutated or not, framing abuse
  (tests/fuzzlib.py), on renderD128 (card0 too, as root); now and then they reopen their file, map a BO file, look up names under
  bo/, sync/ and prime/, read debugfs.
- one IB fuzzer per ring (sdma0, sdma1, comp_1.0.0): fuzzed SDMA packets, PM4 packets
  and vISA kernels in its own VM; a context made guilty by a fault or a hang is
  replaced.
- a victim (uid 65534): copies and fills on both SDMA rings and WRITE_DATA on the
  compute ring, each result checked byte for byte (CRC32) against what it should be.

The report: requests sent, crashes (the daemon died), hangs (a request or the
liveness probe that got no answer for HANG_LIMIT seconds), the victim's checks and
failures, the daemon's RSS before (after the first round, VRAM touched) and after
(the last round), leaks (once every fuzz client is gone: VRAM/GTT in use, BO files in
the store, DRM files, daemon fds, compared with before; "internal error" lines in
kmsg). Exit status 0 when there are no crashes, hangs, victim failures or leaks and
the RSS grew by less than RSS_SLACK_MIB.

Standard library and the wire contract only in the client processes (the uid-65534
ones may run under the system python).
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import fcntl
import json
import mmap
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.fuzzlib import (RINGS, Known, clamp_waits, cs_request, fuzzed_frame, learn, pm4_ib,  # noqa: E402
                           sdma_ib, visa_words)
from vgpu import uapi  # noqa: E402
from vgpu.frame import FrameError, encode_request, parse_reply, parse_request  # noqa: E402
from vgpu.pm4 import Pm4Ib  # noqa: E402
from vgpu.sdma import SdmaIb  # noqa: E402

NOBODY = 65534
HANG_LIMIT = 20.0         # seconds without an answer that make a hang
RSS_SLACK_MIB = 16        # RSS growth from the first round to the last that still counts as flat
MiB = 1 << 20


class Hang(Exception):
    pass


def _alarm(_sig, _frm):
    raise Hang()


class Client:
    """One open control file, the raw protocol; every call counted."""

    def __init__(self, mount: str, node: str = "renderD128"):
        self.path = os.path.join(mount, "dev", "dri", node)
        self.fd = os.open(self.path, os.O_RDWR)
        self.sent = 0

    def close(self):
        os.close(self.fd)

    def send(self, frame: bytes) -> bytes | None:
        """write() a frame and read() its reply; None if either fails (an errno)."""
        self.sent += 1
        try:
            os.write(self.fd, frame)
        except OSError:
            return None
        signal.setitimer(signal.ITIMER_REAL, HANG_LIMIT)
        try:
            return os.read(self.fd, uapi.VGPU_MAX_FRAME)
        except OSError:
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def ioctl(self, request: int, arg, extra: bytes = b""):
        data = self.send(encode_request(request, bytes(arg), extra))
        if data is None:
            raise OSError("ioctl failed")
        r = parse_reply(data)
        return type(arg).from_buffer_copy(r.arg.ljust(len(bytes(arg)), b"\0")), r.extra


def _map(c: Client, mount: str, handle: int, size: int) -> mmap.mmap:
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = handle
    off = c.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_MMAP, m)[0].out.addr_ptr
    with open(os.path.join(mount, "bo", format(off, "x")), "r+b") as f:
        return mmap.mmap(f.fileno(), size)


def _bo(c: Client, size: int, domain: int, va: int | None = None, flags: int = 0xE) -> int:
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.alignment, a.in_.domains = size, 4096, domain
    h = c.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, a)[0].out.handle
    if va is not None:
        c.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(
            handle=h, operation=uapi.AMDGPU_VA_OP_MAP, va_address=va, map_size=size, flags=flags))
    return h


def _ctx(c: Client, old: int = 0) -> int:
    """A new context (freeing `old`, made guilty by a fault or a hang)."""
    if old:
        a = uapi.drm_amdgpu_ctx()
        a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_FREE_CTX, old
        c.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    return c.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id


def _wait(c: Client, ctx: int, ip: int, ring: int, seq: int, timeout_s: float = 10.0) -> None:
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ip_type, w.in_.ring, w.in_.ctx_id = seq, ip, ring, ctx
    w.in_.timeout = time.monotonic_ns() + int(timeout_s * 1e9)
    c.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)


# -- the client processes ------------------------------------------------------------

def _fuzz(mount: str, count: int, seed: int, report, send_one) -> None:
    """The fuzz loop of both transports: ``send_one(rng, client, known, name, frame)``
    sends one fuzzed request and returns its outcome's name (Hang: stuck)."""
    rng = random.Random(seed)
    node = "card0" if os.getuid() == 0 and seed % 2 else "renderD128"
    c = Client(mount, node)
    k = Known()
    sent = stuck = 0
    stuck_names: list[str] = []          # which requests got no answer: what to look at
    outcomes: collections.Counter = collections.Counter()
    for i in range(count):
        if i and i % 5000 == 0:          # a new DRM file now and then: closes in between
            sent += c.sent
            c.close()
            c = Client(mount, node)
            k = Known()
        name, frame = fuzzed_frame(rng, k)
        try:
            outcomes[send_one(rng, c, k, name, frame)] += 1
        except Hang:
            stuck += 1
            outcomes["stuck"] += 1
            stuck_names.append(name)
            continue
        if i % 997 == 0:
            _side_trip(rng, mount, c, k)
    sent += c.sent
    c.close()
    report({"role": "fuzzer", "sent": sent, "stuck": stuck, "stuck_names": stuck_names, "outcomes": dict(outcomes)})


def _send_frame(rng: random.Random, c: Client, k: Known, name: str, frame: bytes) -> str:
    data = c.send(frame)
    if data is None:
        return "refused"
    try:
        r = parse_reply(data)
    except FrameError:
        return "bad reply"
    learn(k, name, r.arg, r.extra)
    return "ok"


def frame_fuzzer(mount: str, count: int, seed: int, report) -> None:
    _fuzz(mount, count, seed, report, _send_frame)


_ARENA_SIZE = 1 << 20
_arena = None


def _arena_address() -> int:
    """A 1 MiB buffer followed by a PROT_NONE page, where fuzzed pointers point: the
    daemon writes through them what the KMD answers (INFO, VERSION, QUERY...), as
    Linux would, so they must not point into this process's own heap."""
    global _arena
    if _arena is None:
        _arena = mmap.mmap(-1, _ARENA_SIZE + mmap.PAGESIZE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(_arena))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(base + _ARENA_SIZE, mmap.PAGESIZE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
        _arena_address.base = base
    return _arena_address.base


def _ioctl_args(rng: random.Random, request: int, arg: bytes, extra: bytes):
    """The struct of a fuzzed request as an ioctl's argument buffer: ``_IOC_SIZE`` bytes
    (the kernel copies that many whatever the struct), each u64 field made, at random,
    a pointer to the request's (fuzzed) extra data in the arena, a garbage address or
    the arena's last byte, or left alone: the daemon must survive what they point to."""
    buf = ctypes.create_string_buffer(bytes(arg), max(len(arg), uapi._IOC_SIZE(request), 1))
    base = _arena_address()
    data = bytes(extra[:_ARENA_SIZE])
    _arena[:len(data)] = data
    for off in range(0, len(arg) - 7, 8):
        r = rng.random()
        if r < 0.35:
            struct.pack_into("<Q", buf, off, base)
        elif r < 0.42:
            struct.pack_into("<Q", buf, off, rng.choice([1, 0xDEAD0000, 0xFFFF_FFFF_FFFF_F000, 1 << 47,
                                                          base + _ARENA_SIZE - 1]))
    return buf


def _send_ioctl(rng: random.Random, c: Client, k: Known, name: str, frame: bytes) -> str:
    try:
        req = parse_request(frame, strict=False)
    except FrameError:
        return "unparsable"
    request = req.request
    if rng.random() < 0.05:   # another size or direction on the same number
        request = (request & 0x3FFF_FFFF & ~(0x3FFF << 16)) | (rng.randrange(4) << 30) | (rng.randrange(1, 512) << 16)
    buf = _ioctl_args(rng, request, req.arg, req.extra)
    # a pointer planted in a wait's timeout field would make it wait for days
    n = len(req.arg)
    buf[:n] = clamp_waits(name, buf.raw[:n])
    c.sent += 1
    signal.setitimer(signal.ITIMER_REAL, HANG_LIMIT)
    try:
        fcntl.ioctl(c.fd, request, buf, True)
    except OSError as e:
        return "EINTR (hang)" if e.errno == errno.EINTR else "refused"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    learn(k, name, buf.raw[:n])
    return "ok"


def ioctl_fuzzer(mount: str, count: int, seed: int, report) -> None:
    """As frame_fuzzer, over real ioctls: the same fuzzed requests, their pointers aimed
    at the fuzzed extra data, at garbage or left as they are; now and then another
    request number's size or direction bits."""
    _fuzz(mount, count, seed, report, _send_ioctl)


def _side_trip(rng: random.Random, mount: str, c: Client, k: Known) -> None:
    """Names and files besides the control file: a BO file mapped and written, guessed
    names under bo/, sync/, prime/, debugfs read by root."""
    try:
        if k.bos and rng.random() < 0.5:
            m = _map(c, mount, rng.choice(k.bos), 4096)
            m[:8] = rng.randbytes(8)
            m.close()
        for d in ("bo", "sync", "prime"):
            name = format(rng.getrandbits(40) << 12, "x") if d == "bo" else format(rng.getrandbits(31), "x")
            try:
                os.stat(os.path.join(mount, d, name))
            except OSError:
                pass
        if os.getuid() == 0 and rng.random() < 0.3:
            for name in ("amdgpu_gem_info", "amdgpu_vm_info", "clients", "amdgpu_fence_info"):
                with open(os.path.join(mount, "sys/kernel/debug/dri/0", name)) as f:
                    f.read()
    except (OSError, ValueError, Hang):
        pass


def ib_fuzzer(mount: str, ring_index: int, seed: int, stop_file: str, report) -> None:
    """Fuzzed IBs on one ring until `stop_file` exists."""
    rng = random.Random(seed)
    ip, ring = RINGS[ring_index]
    c = Client(mount)
    ib_va, code_va, data_va = 0x10000000, 0x20000000, 0x30000000
    ib = _bo(c, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT, ib_va, 0x2 | 0x8)
    code = _bo(c, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT, code_va, 0x2 | 0x8)
    data = _bo(c, MiB, uapi.AMDGPU_GEM_DOMAIN_VRAM, data_va)
    ib_map, code_map, data_map = _map(c, mount, ib, 65536), _map(c, mount, code, 65536), _map(c, mount, data, MiB)
    data_map[:] = bytes(MiB)             # VRAM touched
    ctx = _ctx(c)
    vas = [(data_va, MiB)]
    jobs = faults = stuck = 0
    while not os.path.exists(stop_file):
        if ip == uapi.AMDGPU_HW_IP_DMA:
            words = sdma_ib(rng, vas).tobytes()
        else:
            kernel = visa_words(rng)
            code_map[:len(kernel)] = kernel
            words = pm4_ib(rng, vas, code_va).tobytes()
        words = words[:65536]
        ib_map[:len(words)] = words
        req, arg, extra = cs_request(ctx, ib_va, len(words), ip, ring)
        try:
            data_reply = c.send(encode_request(req, arg, extra))
        except Hang:
            stuck += 1
            continue
        if data_reply is None:           # a guilty context: a new one
            ctx = _ctx(c, ctx)
            continue
        jobs += 1
        seq = uapi.drm_amdgpu_cs.from_buffer_copy(parse_reply(data_reply).arg).out.handle
        try:
            _wait(c, ctx, ip, ring, seq)
        except Hang:
            stuck += 1
        except OSError:
            faults += 1
    sent = c.sent
    ib_map.close(), code_map.close(), data_map.close()
    c.close()
    report({"role": "ib", "ring": ring_index, "sent": sent, "jobs": jobs, "faults": faults, "stuck": stuck})


def victim(mount: str, seed: int, stop_file: str, report) -> None:
    """Known work on every ring, each result checked; any error or mismatch is a failure."""
    rng = random.Random(seed)
    c = Client(mount)
    size = 256 * 1024
    ib_va, src_va, dst_va = 0x10000000, 0x20000000, 0x30000000
    ib = _bo(c, 65536, uapi.AMDGPU_GEM_DOMAIN_GTT, ib_va, 0x2 | 0x8)
    src = _bo(c, size, uapi.AMDGPU_GEM_DOMAIN_VRAM, src_va)
    dst = _bo(c, size, uapi.AMDGPU_GEM_DOMAIN_VRAM, dst_va)
    ib_map, src_map, dst_map = _map(c, mount, ib, 65536), _map(c, mount, src, size), _map(c, mount, dst, size)
    ctx = _ctx(c)
    checks = failures = 0
    notes = []
    i = 0
    while not os.path.exists(stop_file):
        i += 1
        ip, ring = RINGS[i % 3]
        if ip == uapi.AMDGPU_HW_IP_DMA and i % 2:
            payload = rng.randbytes(size)
            src_map[:] = payload
            words = SdmaIb().copy_linear(dst_va, src_va, size).tobytes()
            want = zlib.crc32(payload)
        elif ip == uapi.AMDGPU_HW_IP_DMA:
            value = rng.getrandbits(32)
            words = SdmaIb().constant_fill(dst_va, value, size).tobytes()
            want = zlib.crc32(struct.pack("<I", value) * (size // 4))
        else:
            values = [rng.getrandbits(32) for _ in range(64)]
            dst_map[:256] = bytes(256)
            words = Pm4Ib().write_data(dst_va, values).tobytes()
            want = zlib.crc32(struct.pack("<64I", *values))
        ib_map[:len(words)] = words
        req, arg, extra = cs_request(ctx, ib_va, len(words), ip, ring)
        try:
            data = c.send(encode_request(req, arg, extra))
            if data is None:
                raise OSError("CS refused")
            seq = uapi.drm_amdgpu_cs.from_buffer_copy(parse_reply(data).arg).out.handle
            _wait(c, ctx, ip, ring, seq, timeout_s=HANG_LIMIT)
        except (OSError, Hang) as e:
            failures += 1
            notes.append(f"job {i} on ring {ring} ip {ip}: {e!r}")
            ctx = _ctx(c, ctx)
            continue
        got = zlib.crc32(dst_map[:256] if ip == uapi.AMDGPU_HW_IP_COMPUTE else dst_map[:])
        checks += 1
        if got != want:
            failures += 1
            notes.append(f"job {i}: checksum {got:#x}, expected {want:#x}")
    sent = c.sent
    ib_map.close(), src_map.close(), dst_map.close()
    c.close()
    report({"role": "victim", "sent": sent, "checks": checks, "failures": failures, "notes": notes[:10]})


# -- the runner ----------------------------------------------------------------------

def _status(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/status") as f:
            d = dict(line.split(":", 1) for line in f if ":" in line)
        return {k: int(d[k].split()[0]) // 1024 for k in ("VmRSS", "RssAnon", "RssShmem", "RssFile")}
    except OSError:
        return {}


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _store(pid: int) -> str | None:
    """The daemon's BO store directory: where its lock file is."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if os.path.basename(target) == ".lock" and "/vgpu-" in target:
                return os.path.dirname(target)
    except OSError:
        pass
    return None


def _read(mount: str, rel: str) -> str:
    with open(os.path.join(mount, rel)) as f:
        return f.read()


def _snapshot(mount: str, pid: int) -> dict:
    store = _store(pid)
    clients = _read(mount, "sys/kernel/debug/dri/0/clients").strip().splitlines()[1:]
    return {
        "vram_used": int(_read(mount, "sys/class/drm/card0/device/mem_info_vram_used")),
        "gtt_used": int(_read(mount, "sys/class/drm/card0/device/mem_info_gtt_used")),
        "bo_files": len(os.listdir(store)) if store else -1,
        "clients": len(clients),
        "fds": _fds(pid),
    }


def _spawn(role: str, args: list[str], uid: int | None, out_path: str) -> subprocess.Popen:
    from tests.helpers import _drop_to, _env, client_python
    cmd = [client_python(uid), "-m", "tests.soak", "--role", role, "--out", out_path, *args]
    return subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            preexec_fn=_drop_to(uid) if uid is not None else None)


class Probe(threading.Thread):
    """Liveness: a VERSION every 0.25 s on its own file; an answer slower than
    HANG_LIMIT, or none, is a hang. Also watches that the daemon lives."""

    def __init__(self, mount: str, pid: int):
        super().__init__(daemon=True)
        self.mount, self.pid = mount, pid
        self.stop = threading.Event()
        self.hangs = self.trips = 0
        self.worst = 0.0
        self.died = False

    def run(self):
        box = {}

        def one():
            v = uapi.drm_version()
            try:
                fd = os.open(os.path.join(self.mount, "dev/dri/renderD128"), os.O_RDWR)
                os.write(fd, encode_request(uapi.DRM_IOCTL_VERSION, bytes(v)))
                os.read(fd, 4096)
                os.close(fd)
                box["ok"] = True
            except OSError as e:
                box["err"] = e

        while not self.stop.wait(0.25):
            if not os.path.exists(f"/proc/{self.pid}"):
                self.died = True
                return
            box.clear()
            t0 = time.monotonic()
            t = threading.Thread(target=one, daemon=True)
            t.start()
            t.join(HANG_LIMIT)
            dt = time.monotonic() - t0
            self.trips += 1
            self.worst = max(self.worst, dt)
            if t.is_alive() or "err" in box:
                self.hangs += 1
                if not os.path.exists(f"/proc/{self.pid}"):
                    self.died = True
                    return


def run_soak(requests: int, procs: int = 4, rounds: int = 4, seed: int = 1, mount: str | None = None,
             vram: str = "128M", quiet: bool = False) -> dict:
    """Mount (unless `mount`), run the soak, unmount; returns the report."""
    from tests.helpers import daemon_log, make_mount_dir, mount as do_mount, unmount
    from vgpu_tools.cli import state_paths
    own = mount is None
    if own:
        mount = make_mount_dir()
        do_mount(mount, "--vram", vram, "--gtt", "256M", "--timeout", "0.5")
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    t_start = time.monotonic()
    work = os.path.join("/tmp", f"vgpu-soak-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o777)
    stop = os.path.join(work, "stop")
    report: dict = {"requests": 0, "crashes": 0, "hangs": 0, "client_errors": 0, "victim_checks": 0, "victim_failures": 0,
                    "rss_mib": {}, "leaks": {}, "outcomes": collections.Counter(), "rounds": rounds,
                    "processes": procs}
    try:
        pid = int(state_paths(mount)[1].read_text())
        before = _snapshot(mount, pid)
        report["rss_mib"]["start"] = _status(pid)
        probe = Probe(mount, pid)
        probe.start()
        results = []
        background = [_spawn("victim", [mount, str(seed), stop], NOBODY, os.path.join(work, "victim.json"))]
        background += [_spawn("ib", [mount, str(i), str(seed + 100 + i), stop], None,
                              os.path.join(work, f"ib{i}.json")) for i in range(len(RINGS))]
        per = requests // (rounds * procs)
        for r in range(rounds):
            fuzz = [_spawn("ioctl-fuzzer" if i % 2 else "fuzzer", [mount, str(per), str(seed * 1000 + r * procs + i)],
                           NOBODY if i == 0 else None, os.path.join(work, f"fuzz{r}-{i}.json"))
                    for i in range(procs)]
            for p in fuzz:
                p.wait()
            for i in range(procs):
                path = os.path.join(work, f"fuzz{r}-{i}.json")
                if os.path.exists(path):
                    results.append(json.load(open(path)))
                else:
                    report["client_errors"] += 1  # a fuzz client died without a report
            say(f"round {r + 1}/{rounds}: {sum(x['sent'] for x in results)} requests from the "
                f"fuzzers so far, daemon RSS {_status(pid).get('VmRSS', '?')} MiB, "
                f"{time.monotonic() - t_start:.0f} s")
            if r == 0:
                report["rss_mib"]["after round 1"] = _status(pid)
            if probe.died:
                break
        open(stop, "w").close()
        for p in background:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                report["hangs"] += 1
        for name in ["victim.json"] + [f"ib{i}.json" for i in range(len(RINGS))]:
            path = os.path.join(work, name)
            if os.path.exists(path):
                results.append(json.load(open(path)))
            else:
                report["client_errors"] += 1
        probe.stop.set()
        probe.join()
        report["crashes"] += int(probe.died)
        report["hangs"] += probe.hangs + sum(x.get("stuck", 0) for x in results)
        report["probe"] = {"round trips": probe.trips, "worst ms": round(probe.worst * 1000, 1)}
        report["requests"] = sum(x["sent"] for x in results)
        for x in results:
            report["outcomes"].update(x.get("outcomes", {}))
            report.setdefault("stuck_requests", []).extend(x.get("stuck_names", []))
            if x["role"] == "victim":
                report["victim_checks"] = x["checks"]
                report["victim_failures"] = x["failures"]
                report["victim_notes"] = x["notes"]
            if x["role"] == "ib":
                report.setdefault("ib_jobs", {})[["sdma0", "sdma1", "comp_1.0.0"][x["ring"]]] = \
                    {"jobs": x["jobs"], "failed": x["faults"]}
        if not probe.died:
            # Every fuzz client is gone: once the daemon has released their files, what
            # they held must be back.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _snapshot(mount, pid)["clients"] > before["clients"]:
                time.sleep(0.2)
            time.sleep(0.5)
            after = _snapshot(mount, pid)
            report["rss_mib"]["end"] = _status(pid)
            leaks = {k: (before[k], after[k]) for k in before if after[k] > before[k] + (4 if k == "fds" else 0)}
            kmsg = _read(mount, "dev/kmsg")
            internal = kmsg.count("internal error")
            if internal:
                leaks["internal errors in kmsg"] = internal
            report["leaks"] = leaks
        report["seconds"] = round(time.monotonic() - t_start, 1)
    finally:
        open(stop, "w").close()
        if own:
            log = daemon_log(mount)
            unmount(mount)
            os.rmdir(mount)
            if "Traceback" in log:
                report["daemon_log_tail"] = log[-3000:]
        subprocess.run(["rm", "-rf", work])
    report["outcomes"] = dict(report["outcomes"])
    rss = report["rss_mib"]
    growth = rss.get("end", {}).get("VmRSS", 0) - rss.get("after round 1", {}).get("VmRSS", 0)
    report["rss_growth_mib"] = growth
    report["ok"] = (report["crashes"] == 0 and report["hangs"] == 0 and report["victim_failures"] == 0
                    and report["client_errors"] == 0
                    and not report["leaks"] and growth < RSS_SLACK_MIB and report["victim_checks"] > 0)
    return report


def print_report(rep: dict) -> None:
    rss = rep["rss_mib"]
    print("== vgpu soak ==")
    print(f"requests sent:    {rep['requests']} ({rep['processes']} fuzz processes x {rep['rounds']} rounds, "
          f"3 IB fuzzers, 1 victim; {rep.get('seconds', '?')} s)")
    print(f"outcomes:         {rep['outcomes']}")
    print(f"IB jobs:          {rep.get('ib_jobs')}")
    print(f"crashes:          {rep['crashes']} (the daemon died); client processes that failed: "
          f"{rep['client_errors']}")
    print(f"hangs:            {rep['hangs']} (liveness probe: {rep.get('probe')})"
          + (f"; no answer to {', '.join(rep['stuck_requests'])}" if rep.get("stuck_requests") else ""))
    print(f"victim:           {rep['victim_checks']} checks, {rep['victim_failures']} failures "
          f"{rep.get('victim_notes') or ''}")
    print(f"daemon RSS (MiB): start {rss.get('start')}, after round 1 {rss.get('after round 1')}, "
          f"end {rss.get('end')}; growth after round 1: {rep['rss_growth_mib']} MiB")
    print(f"leaks:            {rep['leaks'] or 'none'}")
    if rep.get("daemon_log_tail"):
        print("daemon log:\n" + rep["daemon_log_tail"])
    print("PASS" if rep["ok"] else "FAIL")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mount", default=None, help="an existing vgpu mount (default: a fresh one)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--role", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.role:
        signal.signal(signal.SIGALRM, _alarm)

        def report(d):
            with open(a.out + ".tmp", "w") as f:
                json.dump(d, f)
            os.rename(a.out + ".tmp", a.out)

        if a.role == "fuzzer":
            frame_fuzzer(a.args[0], int(a.args[1]), int(a.args[2]), report)
        elif a.role == "ioctl-fuzzer":
            ioctl_fuzzer(a.args[0], int(a.args[1]), int(a.args[2]), report)
        elif a.role == "ib":
            ib_fuzzer(a.args[0], int(a.args[1]), int(a.args[2]), a.args[3], report)
        elif a.role == "victim":
            victim(a.args[0], int(a.args[1]), a.args[2], report)
        return 0
    rep = run_soak(a.requests, a.procs, a.rounds, a.seed, a.mount)
    if a.json:
        print(json.dumps(rep, indent=1, default=str))
    else:
        print_report(rep)
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
