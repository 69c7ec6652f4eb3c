"""`make demo`: mount a fresh device, exercise memory and the SDMA engine, unmount.

    python3 -m vgpu_tools.demo [MOUNT]

1. `vgpu mount MOUNT` (a fresh temporary directory when MOUNT is not given);
2. libvgpu: allocate a VRAM and a GTT BO, map them, write a pattern, unmap, map
   again and read it back; show the sysfs memory numbers before, during, after;
3. run samples/sdma_write_linear.py, sdma_const_fill.py and sdma_copy_linear.py;
4. show the kernel log and unmount, even when a step fails.
Exit status 0 only if every step passed.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from vgpu.errors import UserError, exit_main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["sdma_write_linear.py", "sdma_const_fill.py", "sdma_copy_linear.py"]
SYSFS = "sys/class/drm/card0/device"


def vgpu(*args: str) -> None:
    status = subprocess.run([sys.executable, "-m", "vgpu_tools", *args]).returncode
    if status:
        raise UserError(f"`vgpu {' '.join(args)}` failed (exit status {status}); its message is above")


def mem_numbers(mount: str) -> str:
    def read(name: str) -> int:
        return int(Path(mount, SYSFS, name).read_text())
    return (f"VRAM {read('mem_info_vram_used') >> 10} KiB used of {read('mem_info_vram_total') >> 20} MiB, "
            f"GTT {read('mem_info_gtt_used') >> 10} KiB used of {read('mem_info_gtt_total') >> 20} MiB")


def memory_exercise(mount: str) -> bool:
    import libvgpu
    from vgpu import uapi

    print(f"== memory (sysfs before: {mem_numbers(mount)})")
    ok = True
    with libvgpu.device_initialize(mount) as dev:
        info = dev.info
        print(f"device family {info.family}, VA range {info.virtual_address_offset:#x}-"
              f"{info.virtual_address_max:#x}, alignment {info.virtual_address_alignment}")
        for name, domain in (("VRAM", uapi.AMDGPU_GEM_DOMAIN_VRAM), ("GTT", uapi.AMDGPU_GEM_DOMAIN_GTT)):
            with libvgpu.bo_alloc(dev, 1 << 20, 4096, domain) as bo:
                pattern = bytes(range(256)) * 4096
                view = bo.cpu_map()
                view[:] = pattern
                bo.cpu_unmap()                      # last unmap: munmap (the pages are the BO's)
                back = bytes(bo.cpu_map())
                bo.cpu_unmap()
                good = back == pattern
                ok &= good
                print(f"{name}: 1 MiB BO handle {bo.handle} at bo/{bo.mmap_offset:x}: wrote, unmapped, "
                      f"mapped again, read back: {'OK' if good else 'MISMATCH'}")
                print(f"   sysfs now: {mem_numbers(mount)}")
    print(f"   sysfs after free: {mem_numbers(mount)}")
    return ok


def forget_mount(mount: str) -> None:
    """Remove a temporary mountpoint and the daemon log `vgpu mount` kept for it."""
    from vgpu_tools.cli import state_paths
    for path in state_paths(mount):
        path.unlink(missing_ok=True)
    try:
        os.rmdir(mount)
    except OSError:
        pass


def main() -> int:
    temporary = len(sys.argv) <= 1
    mount = sys.argv[1] if not temporary else tempfile.mkdtemp(prefix="vgpu-demo-")
    print(f"== mounting vgpu at {mount}")
    vgpu("mount", mount, "--vram", "256M")
    results = {}
    try:
        results["memory"] = memory_exercise(mount)
        for sample in SAMPLES:
            print(f"== samples/{sample} --device {mount}")
            r = subprocess.run([sys.executable, str(ROOT / "samples" / sample), "--device", mount])
            results[sample] = r.returncode == 0
        print("== dev/kmsg (last lines)")
        print("".join(Path(mount, "dev/kmsg").read_text().splitlines(True)[-6:]), end="")
    finally:
        print(f"== unmounting {mount}")
        vgpu("umount", mount)
        if temporary:
            forget_mount(mount)
    print("== summary: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in results.items()))
    return 0 if results and all(results.values()) else 1


if __name__ == "__main__":
    exit_main(main, "vgpu demo")
