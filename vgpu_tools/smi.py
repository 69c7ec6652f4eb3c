"""`vgpu smi` and `vgpu smi dmon`: the device, its engines and the processes using it,
as nvidia-smi prints them (docs/observability.md, "vgpu smi").

Everything is read from the mount's files, never through the device node (opening it
would make smi a client of the GPU it reports on):

- sysfs, readable by everyone: product_name, mem_info_{vram,gtt}_{used,total},
  gpu_busy_percent, vgpu_num_evictions, vgpu_num_bytes_moved and
  vgpu_engines/<ring>/{busy_percent,counters};
- proc/<pid>/fdinfo/<client-id>, each readable by its client's uid and root: the
  process table, and the user queues (a `vgpu-userq-<name>` line per queue of the
  DRM file, kmd/fdinfo.py). A non-root user sees their own processes and queues,
  root sees all, as /proc/<pid>/fdinfo allows; smi says how many it could not read.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

from vgpu.errors import DEAD_MOUNT_ERRNOS, UserError, dead_mount_hint
from vgpu.paths import mount_point

DRM_CLASS = ("sys", "class", "drm")
MiB = 1 << 20


class SmiError(UserError):
    """The mount is no live vgpu: the message says how to get one."""


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _counters(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[name] = int(value)
    return out


def _fdinfo(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if k}


def _cards(root: str) -> list[tuple[int, str]]:
    """[(card index, its sysfs device directory)] of the mount, by index: one per
    device (a partitioned mount has one per partition, docs/partitions.md)."""
    drm = os.path.join(root, *DRM_CLASS)
    names = [n for n in os.listdir(drm) if n.startswith("card") and n[4:].isdigit()]
    return sorted((int(n[4:]), os.path.join(drm, n, "device")) for n in names)


def _device(index: int, sysfs: str, root: str) -> tuple[dict, list[dict]]:
    """(the device's dict, its engines) from its sysfs directory."""
    uevent = dict(line.partition("=")[::2] for line in _read(os.path.join(sysfs, "uevent")).splitlines())
    device = {
        "index": index,
        "name": _read(os.path.join(sysfs, "product_name")).strip(),
        "pci_id": f"{_read(os.path.join(sysfs, 'vendor')).strip()}:{_read(os.path.join(sysfs, 'device')).strip()}",
        "pci_slot": uevent.get("PCI_SLOT_NAME", ""),
        "mount": os.path.realpath(root),
        "vram_total_bytes": int(_read(os.path.join(sysfs, "mem_info_vram_total"))),
        "vram_used_bytes": int(_read(os.path.join(sysfs, "mem_info_vram_used"))),
        "gtt_total_bytes": int(_read(os.path.join(sysfs, "mem_info_gtt_total"))),
        "gtt_used_bytes": int(_read(os.path.join(sysfs, "mem_info_gtt_used"))),
        "busy_percent": int(_read(os.path.join(sysfs, "gpu_busy_percent"))),
        "evictions": int(_read(os.path.join(sysfs, "vgpu_num_evictions"))),
        "bytes_moved": int(_read(os.path.join(sysfs, "vgpu_num_bytes_moved"))),
    }
    engines = []
    engines_dir = os.path.join(sysfs, "vgpu_engines")
    for name in os.listdir(engines_dir):
        d = os.path.join(engines_dir, name)
        counters = _counters(_read(os.path.join(d, "counters")))
        engines.append({"name": name, "gpu": index, "busy_percent": int(_read(os.path.join(d, "busy_percent"))),
                        "jobs": counters.get("jobs", 0), "busy_ns": counters.get("busy_ns", 0),
                        "counters": counters})
    engines.sort(key=lambda e: (not e["name"].startswith("sdma"), e["name"]))
    return device, engines


def sample(mount: str) -> dict:
    """One reading of the mount: {"device" (the first, GPU 0), "devices", "engines"
    (every device's, each with its "gpu"), "processes" (one row per GPU and pid),
    "hidden" (fdinfo files this user may not read)}. Raises SmiError if it is no vgpu
    mount."""
    root = mount_point(mount)
    devices, engines = [], []
    how = f"start one with `vgpu mount {root}`, or name another with --mount MOUNT or $VGPU_MOUNT"
    try:
        for index, sysfs in _cards(root):
            device, its_engines = _device(index, sysfs, root)
            devices.append(device)
            engines += its_engines
    except (OSError, ValueError) as e:
        if getattr(e, "errno", None) in DEAD_MOUNT_ERRNOS:
            raise SmiError(dead_mount_hint(root)) from None
        raise SmiError(f"{root} is not a live vgpu mount ({os.path.join(root, *DRM_CLASS)}: "
                       f"{getattr(e, 'strerror', None) or e}); {how}") from None
    if not devices:
        raise SmiError(f"{root} is not a live vgpu mount (no card in {os.path.join(root, *DRM_CLASS)}); {how}")
    gpu_of_slot = {d["pci_slot"]: d["index"] for d in devices}
    try:
        processes, hidden = _processes(os.path.join(root, "proc"), gpu_of_slot)
    except OSError as e:
        if e.errno not in DEAD_MOUNT_ERRNOS:
            raise
        raise SmiError(dead_mount_hint(root)) from None
    queues = [q for p in processes for q in p.pop("_queues")]
    queues.sort(key=lambda q: (q["gpu"], q["name"]))
    return {"device": devices[0], "devices": devices, "engines": engines, "processes": processes,
            "user_queues": queues, "hidden": hidden}


def _queue(text: str) -> dict:
    """A `vgpu-userq-<name>` value of fdinfo: `key value` pairs (kmd/fdinfo.py queue_line)."""
    words = text.split()
    kv = dict(zip(words[::2], words[1::2]))

    def num(key: str) -> int:
        v = kv.get(key, "0")
        return int(v) if v.isdigit() else 0
    return {"id": num("id"), "ip": kv.get("ip", "?"), "priority": kv.get("priority", "?"),
            "state": kv.get("state", "?"), "busy_percent": num("busy-percent"), "runs": num("runs"),
            "busy_ns": num("busy-ns")}


def _processes(proc: str, gpu_of_slot: dict[str, int]) -> tuple[list[dict], int]:
    """One row per GPU and process: the fdinfo of the process's DRM files on that GPU
    (told by drm-pdev, the device's PCI slot) summed; each row's "_queues" are its
    files' user queues (sample() takes them out into "user_queues")."""
    by_pid: dict[tuple[int, int], dict] = {}
    hidden = 0
    try:
        pids = os.listdir(proc)
    except OSError:
        return [], 0
    for pid in pids:
        try:
            clients = os.listdir(os.path.join(proc, pid, "fdinfo"))
        except OSError:
            continue        # the process closed its last file meanwhile
        for client in clients:
            try:
                info = _fdinfo(_read(os.path.join(proc, pid, "fdinfo", client)))
            except PermissionError:
                hidden += 1
                continue
            except OSError:
                continue
            gpu = gpu_of_slot.get(info.get("drm-pdev", ""), 0)
            row = by_pid.setdefault((gpu, int(pid)), {
                "gpu": gpu, "pid": int(pid), "name": info.get("vgpu-comm", "?"), "uid": int(info.get("vgpu-uid", -1)),
                "vram_bytes": 0, "gtt_bytes": 0, "contexts": 0, "jobs_submitted": 0, "jobs_in_flight": 0,
                "faults": 0, "hangs": 0, "clients": [], "engine_ns": {}, "user_queues": [], "_queues": []})
            client_id = int(info.get("drm-client-id", client))
            row["clients"].append(client_id)
            for key, field in (("drm-memory-vram", "vram_bytes"), ("drm-memory-gtt", "gtt_bytes"),
                               ("vgpu-contexts", "contexts"), ("vgpu-jobs-submitted", "jobs_submitted"),
                               ("vgpu-jobs-in-flight", "jobs_in_flight"), ("vgpu-faults", "faults"),
                               ("vgpu-hangs", "hangs")):
                row[field] += int(info.get(key, "0").split()[0])
            for key, value in info.items():
                if key.startswith("drm-engine-"):
                    engine = key.removeprefix("drm-engine-")
                    row["engine_ns"][engine] = row["engine_ns"].get(engine, 0) + int(value.split()[0])
                elif key.startswith("vgpu-userq-"):
                    name = key.removeprefix("vgpu-userq-")
                    row["user_queues"].append(name)
                    row["_queues"].append({"gpu": gpu, "name": name, **_queue(value), "pid": row["pid"],
                                           "process": row["name"], "uid": row["uid"], "client": client_id})
    rows = sorted(by_pid.values(), key=lambda r: (r["gpu"], r["pid"]))
    for r in rows:
        r["clients"].sort()
        r["user_queues"].sort()
    return rows, hidden


def as_json(s: dict) -> str:
    return json.dumps({"device": s["device"], "devices": s["devices"], "engines": s["engines"],
                       "user_queues": s["user_queues"], "processes": s["processes"]}, indent=2)


def _size(n: int) -> str:
    if n >= MiB or n == 0:
        return f"{n // MiB}MiB"
    return f"{(n + 1023) // 1024}KiB"


def _usage(used: int, total: int) -> str:
    return f"{_size(used)} / {_size(total)}"


#: The narrowest box (an 80-column terminal's): every fixed column of a row fits in it.
MIN_WIDTH = 79
MAX_WIDTH = 159


def box_width(columns: int | None = None) -> int:
    """The box's width for a terminal of ``columns`` (default: this one's, or
    $COLUMNS): one less, within MIN_WIDTH..MAX_WIDTH (a narrower terminal wraps
    the lines, as nvidia-smi's do)."""
    if columns is None:
        columns = shutil.get_terminal_size((MIN_WIDTH + 1, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, columns - 1))


def screen(s: dict, columns: int | None = None) -> str:
    """The nvidia-smi style screen: one block per device, the engines, the process
    table, in a box as wide as the terminal (:func:`box_width`). Nothing is cut: a
    text longer than the box goes on over the rows below."""
    w = box_width(columns)
    inner = w - 4
    bar = "+" + "-" * (w - 2) + "+"
    name_w = 12 + min(w - MIN_WIDTH, 20)   # a wider box gives the process name up to 32 characters
    qname_w = 8 + min(w - MIN_WIDTH, 24)   # the queue table's process name, likewise

    def row(text: str) -> str:
        parts = [text[i:i + inner] for i in range(0, max(len(text), 1), inner)]
        return "\n".join(f"| {part:<{inner}} |" for part in parts)

    out = [time.strftime("%a %b %d %H:%M:%S %Y"), bar,
           row(f"vgpu smi          Driver: amdgpu          Mount: {s['device']['mount']}"),
           "|" + "=" * (w - 2) + "|",
           row("GPU  Name                PCI ID         VRAM-Usage        GTT-Usage")]
    for i, d in enumerate(s["devices"]):
        if i:
            out.append("|" + "-" * (w - 2) + "|")
        out += [row(f"{d['index']:>3}  {d['name'][:18]:<18}  {d['pci_id']:<13}  "
                    f"{_usage(d['vram_used_bytes'], d['vram_total_bytes']):<16}  "
                    f"{_usage(d['gtt_used_bytes'], d['gtt_total_bytes']):<16}"),
                row(f"     GPU-Util {d['busy_percent']:3d} % (busiest engine, last second)"
                    + (f"   PCI {d['pci_slot']}" if len(s["devices"]) > 1 else "")),
                row(f"     Evictions {d['evictions']}, {_size(d['bytes_moved'])} moved (since the device came up)")]
    out += [bar, row("GPU  Engine      Util      Jobs     Busy-Time"), "|" + "-" * (w - 2) + "|"]
    for e in s["engines"]:
        out.append(row(f"{e['gpu']:>3}  {e['name']:<10} {e['busy_percent']:3d} % {e['jobs']:>9} "
                       f"{e['busy_ns'] / 1e9:>12.3f} s"))
    # User queues: each runs on an engine of its own (docs/userq.md), so a row each.
    out += [bar, row(f"GPU  {'User queue':<12} {'IP':<7}{'PID':>7}  {'Process':<{qname_w}} {'Priority':<11} "
                     f"{'State':<7} {'Util':>5} {'Runs':>6}"), "|" + "-" * (w - 2) + "|"]
    if not s.get("user_queues"):
        out.append(row("  No user queues" + (" of yours (run as root to see all)" if s["hidden"] else "")))
    for q in s.get("user_queues", ()):
        out.append(row(f"{q['gpu']:>3}  {q['name']:<12} {q['ip']:<7}{q['pid']:>7}  "
                       f"{q['process'][:qname_w]:<{qname_w}} {q['priority']:<11} {q['state']:<7} "
                       f"{q['busy_percent']:3d} % {q['runs']:>6}"))
    out += [bar, "", bar, row("Processes:"),
            row(f"GPU{'PID':>7}  {'Process name':<{name_w}}{'UID':>6}{'VRAM':>9}{'GTT':>9}{'Ctx':>4}"
                f"{'UQ':>3}{'Jobs':>7}{'Run':>4}{'Flt':>4}{'Hang':>5}"),
            "|" + "=" * (w - 2) + "|"]
    if not s["processes"]:
        out.append(row("  No running processes found"))
    for p in s["processes"]:
        out.append(row(f"{p['gpu']:>3}{p['pid']:>7}  {p['name'][:name_w]:<{name_w}}{p['uid']:>6}{_size(p['vram_bytes']):>9}"
                       f"{_size(p['gtt_bytes']):>9}{p['contexts']:>4}{len(p.get('user_queues', ())):>3}"
                       f"{p['jobs_submitted']:>7}{p['jobs_in_flight']:>4}{p['faults']:>4}{p['hangs']:>5}"))
    if s["hidden"]:
        out.append(row(f"  ({s['hidden']} DRM file(s) of other users not shown: run as root)"))
    out.append(bar)
    return "\n".join(out) + "\n"


# -- dmon ----------------------------------------------------------------------------------
def _totals(s: dict, gpu: int) -> dict:
    """What dmon differentiates for device `gpu`: per engine busy_ns; SDMA bytes,
    compute lanes, jobs submitted and page faults over its engines; the busy_ns of
    each user queue it shows (fdinfo: a non-root user's own)."""
    engines = [e for e in s["engines"] if e["gpu"] == gpu]
    t = {"busy": {e["name"]: e["counters"].get("busy_ns", 0) for e in engines},
         "rd": 0, "wr": 0, "lanes": 0, "sub": 0, "faults": 0,
         # each user queue's busy_ns, by IP column and (client, queue): queues come and go
         "uq": {col: {(q["client"], q["id"]): q["busy_ns"] for q in s["user_queues"]
                      if q["gpu"] == gpu and q["ip"] == ip} for col, ip in UQ_COLUMNS.items()}}
    for e in engines:
        c = e["counters"]
        if e["name"].startswith("sdma"):
            t["rd"] += c.get("bytes_read", 0)
            t["wr"] += c.get("bytes_written", 0)
        t["lanes"] += c.get("lane_instructions", 0)
        t["sub"] += c.get("submitted", 0)
        t["faults"] += c.get("page_faults", 0)
    return t


#: dmon's user-queue columns: the busy of the queues of an IP (named as drm-engine-*).
UQ_COLUMNS = {"uqSdma": "dma", "uqComp": "compute"}


def _uq_busy(before: dict, after: dict, col: str, dt: float) -> int:
    """Percent of `dt` the user queues of column `col` ran, summed over the queues (each
    has an engine of its own: two queues busy the whole interval read 200). A queue
    made during the interval counts from 0; one freed during it is not counted."""
    b, a = before.get("uq", {}).get(col, {}), after.get("uq", {}).get(col, {})
    ns = sum(max(0, v - b.get(k, 0)) for k, v in a.items())
    return round(100 * ns / 1e9 / dt)


def _col(engines) -> int:
    """The width of a busy column: 8, or the longest engine name (comp_1.0.0 is 10)."""
    return max([8, *map(len, engines)])


def dmon_header(engines: list[str]) -> str:
    w = _col(engines)
    names = "".join(f" {n:>{w}}" for n in engines)
    units = "".join(f" {'%':>{w}}" for _ in engines)
    uq = "".join(f" {n:>7}" for n in UQ_COLUMNS)
    uq_units = "".join(f" {'%':>7}" for _ in UQ_COLUMNS)
    return (f"# gpu{names}{uq}  sdmaRd  sdmaWr   lanes    subm  vramUsed  fault\n"
            f"# Idx{units}{uq_units}    MB/s    MB/s     M/s     1/s       MiB      #")


def dmon_line(before: dict, after: dict, dt: float, vram_used: int, gpu: int = 0,
              engines: list[str] | None = None) -> str:
    """Device `gpu`'s line: a busy column per name of `engines` (the header's; "-" for
    another device's engine), the busy of its user queues per IP (UQ_COLUMNS), then
    its rates over `dt` seconds."""
    names = engines if engines is not None else list(after["busy"])
    w = _col(names)

    def busy(n: str) -> str:
        if n not in after["busy"]:
            return f" {'-':>{w}}"
        return f" {min(100, round(100 * (after['busy'][n] - before['busy'].get(n, 0)) / 1e9 / dt)):>{w}}"
    cols = "".join(busy(n) for n in names)
    cols += "".join(f" {_uq_busy(before, after, c, dt):>7}" for c in UQ_COLUMNS)
    return (f"{gpu:>5}{cols} {(after['rd'] - before['rd']) / MiB / dt:7.1f} {(after['wr'] - before['wr']) / MiB / dt:7.1f}"
            f" {(after['lanes'] - before['lanes']) / 1e6 / dt:7.1f} {(after['sub'] - before['sub']) / dt:7.0f}"
            f" {vram_used / MiB:9.1f} {after['faults'] - before['faults']:6d}")


def dmon(mount: str, delay: float, count: int | None, out=sys.stdout) -> None:
    """Every `delay` seconds (`count` times, or until interrupted) one line per device,
    as nvidia-smi dmon prints one per GPU: each engine's busy share of the interval
    and the device's rates over it."""
    s = sample(mount)
    names = [e["name"] for e in s["engines"]]
    gpus = [d["index"] for d in s["devices"]]
    print(dmon_header(names), file=out, flush=True)
    before, t0 = {g: _totals(s, g) for g in gpus}, time.monotonic()
    n = 0
    while count is None or n < count:
        time.sleep(max(0.0, t0 + delay - time.monotonic()))
        s = sample(mount)
        t1 = time.monotonic()
        after = {g: _totals(s, g) for g in gpus}
        vram = {d["index"]: d["vram_used_bytes"] for d in s["devices"]}
        for g in gpus:
            print(dmon_line(before[g], after[g], t1 - t0, vram[g], g, names), file=out, flush=True)
        before, t0 = after, t1
        n += 1


def cmd_smi(args) -> int:
    try:
        if args.what == "dmon":
            if args.delay <= 0 or (args.count is not None and args.count < 1):
                print("vgpu smi dmon: -d must be > 0 and -c >= 1", file=sys.stderr)
                return 2
            dmon(args.mount, args.delay, args.count)
            return 0
        if args.loop is not None and not args.loop > 0:
            print("vgpu smi: -l must be > 0 seconds", file=sys.stderr)
            return 2
        if args.what is not None:
            print(f"vgpu smi: unknown subcommand {args.what!r} (only dmon)", file=sys.stderr)
            return 2
        while True:
            s = sample(args.mount)
            sys.stdout.write(as_json(s) + "\n" if args.json else screen(s))
            sys.stdout.flush()
            if not args.loop:
                return 0
            time.sleep(args.loop)
    except KeyboardInterrupt:
        return 0


def add_parsers(sub, default_mount: str) -> None:
    p = sub.add_parser("smi", help="device, engines and processes, as nvidia-smi shows them",
                       description="Print the device (VRAM, GTT, utilization per engine), its user "
                                   "queues and the processes using it; `vgpu smi dmon` prints one "
                                   "line per interval. Non-root users see their own processes and "
                                   "queues only. "
                                   "See docs/observability.md.")
    p.add_argument("what", nargs="?", metavar="dmon", help="dmon: one line per interval")
    p.add_argument("--mount", default=default_mount,
                   help="the vgpu mount point, or a device node under it (default $VGPU_MOUNT, then /tmp/vgpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-l", "--loop", type=float, metavar="SECONDS", help="repeat every SECONDS")
    p.add_argument("-d", "--delay", type=float, default=1.0, metavar="SECONDS",
                   help="dmon: interval (default 1)")
    p.add_argument("-c", "--count", type=int, metavar="COUNT", help="dmon: print COUNT lines and exit")
    p.set_defaults(func=cmd_smi)
