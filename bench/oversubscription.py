"""(j) VRAM oversubscription: the same jobs with 2x VRAM worth of BOs and with VRAM to
spare, in one run.

Mounts two vgpus of its own: 64 MiB of VRAM (oversubscribed 2x) and 256 MiB (the
BOs fit), both with 512 MiB of GTT. On each, samples/vram_oversubscription.py runs
with the same 128 MiB of VRAM BOs (16 x 8 MiB): the CPU fills the first half of
every BO, then one SDMA job per BO, each with the BO in its BO list, copies the
first half onto the second, BO after BO (LRU order, the worst case: on the small
mount every job moves its BO back into VRAM and evicts another). The figure is
the time of those jobs (submit to fence, back to back), the median of the rounds,
alternating mounts; the ratio is the slowdown. The sample checks every byte.

    python3 -m bench.oversubscription        # mounts its vgpus itself
"""
from __future__ import annotations

import json
import subprocess
import sys

from . import util

TOTAL_MIB, BO_MIB = 128, 8
MOUNTS = {"2x VRAM": "64M", "fits": "256M"}


def _sample(mount: str) -> dict:
    r = subprocess.run([sys.executable, str(util.ROOT / "samples" / "vram_oversubscription.py"), "--device", mount,
                        "--total-mib", str(TOTAL_MIB), "--bo-mib", str(BO_MIB), "--json"],
                       env=util.env(), cwd=str(util.ROOT), capture_output=True, text=True, timeout=600)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or lines[-1] != "PASS":
        raise RuntimeError(f"vram_oversubscription failed on {mount}:\n{r.stdout}\n{r.stderr}")
    return json.loads(lines[-2])


def run(vgpu_mount: str | None = None) -> dict:
    """Ignores the shared mount: it needs two of its own VRAM sizes."""
    rounds = 1 if util.quick() else 5
    out = {name: [] for name in MOUNTS}
    with util.daemon_mount([sys.executable, "-m", "vdev.daemon", "--vram", MOUNTS["2x VRAM"], "--gtt", "512M"],
                           "vgpu-small") as small, \
            util.daemon_mount([sys.executable, "-m", "vdev.daemon", "--vram", MOUNTS["fits"], "--gtt", "512M"],
                              "vgpu-large") as large:
        for _ in range(rounds):
            for name, mount in (("2x VRAM", small), ("fits", large)):
                out[name].append(_sample(mount))
    return {"rounds": rounds, **{name: {"seconds": util.median([r["seconds"] for r in rs]),
                                        "evictions": rs[-1]["evictions"], "moved": rs[-1]["bytes_moved"]}
                                 for name, rs in out.items()}}


def report(r: dict) -> list[tuple[str, str, str]]:
    over, fits = r["2x VRAM"], r["fits"]
    note = f"median of {r['rounds']}; {TOTAL_MIB // BO_MIB} jobs, one {BO_MIB} MiB BO each"
    return [
        ("16 copy jobs, 128 MiB of BOs, 256 MiB VRAM", f"{fits['seconds'] * 1e3:.0f} ms",
         f"{fits['evictions']} evictions; {note}"),
        ("16 copy jobs, 128 MiB of BOs, 64 MiB VRAM", f"{over['seconds'] * 1e3:.0f} ms",
         f"{over['evictions']} evictions, {over['moved'] >> 20} MiB moved"),
        ("oversubscription slowdown (2x VRAM / fits)", f"{over['seconds'] / fits['seconds']:.2f}x",
         "same jobs, same run"),
    ]


if __name__ == "__main__":
    for row in report(run()):
        print("  ".join(row))
