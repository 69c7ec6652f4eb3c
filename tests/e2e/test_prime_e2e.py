"""End to end: a BO shared between processes through PRIME (docs/kmd.md, "PRIME").

One process exports a BO (PRIME_HANDLE_TO_FD gives a token), others import it into
their own DRM files (PRIME_FD_TO_HANDLE), as the same uid and as uid 65534, map it
through bo/<offset-hex> and see each other's writes and the GPU's; the export
outlives the exporter's handle; MOUNT/prime/<token-hex> has the BO's size and bytes.
"""
import os

import pytest

from tests.helpers import NOBODY, read_text, run_client, start_client, wait_for

SIZE = 65536

PRELUDE = """
import os, struct, sys
import libvgpu
from vgpu import uapi
M = sys.argv[1]

def gpu_fill(dev, bo, offset, value, size):
    # CONSTANT_FILL of bo[offset:offset+size] on sdma0, waited for.
    with libvgpu.cs_ctx_create(dev) as ctx, libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) as ib, \\
            libvgpu.va_range_alloc(dev, bo.size) as va, libvgpu.va_range_alloc(dev, 4096) as va_ib:
        libvgpu.bo_va_op(bo, 0, bo.size, va.address)
        libvgpu.bo_va_op(ib, 0, 4096, va_ib.address)
        packets = libvgpu.SdmaIb().constant_fill(va.address + offset, value, size)
        ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
        with libvgpu.bo_list_create(dev, [bo, ib]) as bos:
            req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ib.address, len(packets))],
                                    resources=bos)
            libvgpu.cs_submit(ctx, req)
            assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
        libvgpu.bo_va_op(bo, 0, bo.size, va.address, op=uapi.AMDGPU_VA_OP_UNMAP)
        ib.cpu_unmap()
"""

# Exports a GTT BO, writes into it, prints the token; then follows commands on stdin:
# "check OFF TEXT" (prints the bytes there), "fill OFF VALUE SIZE" (a GPU fill),
# "close" (frees its handle, keeps its DRM file), "exit".
EXPORTER = PRELUDE + """
dev = libvgpu.device_initialize(M)
bo = libvgpu.bo_alloc(dev, int(sys.argv[2]), 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
view = bo.cpu_map()
view[0:13] = b"from exporter"
print(libvgpu.bo_export(bo), flush=True)
for line in sys.stdin:
    cmd, *a = line.split()
    if cmd == "check":
        off, n = int(a[0]), int(a[1])
        print(bytes(view[off:off + n]).hex(), flush=True)
    elif cmd == "fill":
        gpu_fill(dev, bo, int(a[0]), int(a[1], 16), int(a[2]))
        print("filled", flush=True)
    elif cmd == "close":
        del view
        bo.cpu_unmap()
        bo.free()
        print("closed", flush=True)
    elif cmd == "exit":
        break
"""

# Imports the token, checks and writes through its own mapping; optionally fills with the GPU.
IMPORTER = PRELUDE + """
token, tag = int(sys.argv[2]), sys.argv[3].encode()
with libvgpu.device_initialize(M) as dev:
    bo = libvgpu.bo_import(dev, token)
    view = bo.cpu_map()
    print("size", bo.size)
    print("exporter", bytes(view[0:13]))
    print("gpu", bytes(view[8192:8200]).hex())
    view[4096:4096 + len(tag)] = tag
    if len(sys.argv) > 4:
        gpu_fill(dev, bo, 12288, int(sys.argv[4], 16), 4096)
    st = os.stat(f"{M}/prime/{token:x}")
    print("prime size", st.st_size)
    with open(f"{M}/prime/{token:x}", "rb") as f:
        f.seek(0, os.SEEK_END)
        print("lseek end", f.tell())
        f.seek(4096)
        print("prime read", f.read(len(tag)))
    del view
    bo.cpu_unmap()
"""


def ask(proc, line: str) -> str:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


@pytest.fixture
def exporter(vgpu_mount):
    p = start_client(EXPORTER, vgpu_mount, SIZE)
    token = int(p.stdout.readline())
    yield p, token
    if p.poll() is None:
        p.stdin.write("exit\n")
        p.stdin.flush()
        p.wait(30)


@pytest.mark.parametrize("uid", [None, NOBODY], ids=["same-uid", "uid-65534"])
def test_a_bo_shared_between_processes(vgpu_mount, exporter, uid):
    if uid is not None and os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    p, token = exporter
    assert 0 < token < 1 << 31
    assert ask(p, "fill 8192 c0ffee11 4096") == "filled"          # the exporter's GPU job
    r = run_client(IMPORTER, vgpu_mount, token, "importer", "5a5a5a5a", uid=uid, check=True)
    assert f"size {SIZE}\n" in r.stdout
    assert "exporter b'from exporter'\n" in r.stdout                # the exporter's CPU write
    assert "gpu " + "11eeffc0" * 2 + "\n" in r.stdout                 # the exporter's GPU write
    assert f"prime size {SIZE}\nlseek end {SIZE}\nprime read b'importer'\n" in r.stdout
    assert ask(p, "check 4096 8") == b"importer".hex()              # the importer's CPU write
    assert ask(p, "check 12288 8") == "5a" * 8                      # the importer's GPU write
    assert "access by uid" not in read_text(f"{vgpu_mount}/dev/kmsg")


def test_the_export_outlives_the_exporters_handle(vgpu_mount, exporter):
    p, token = exporter
    assert ask(p, "close") == "closed"
    uid = NOBODY if os.geteuid() == 0 else None
    r = run_client(IMPORTER, vgpu_mount, token, "second", uid=uid, check=True)
    assert "exporter b'from exporter'\n" in r.stdout and "prime read b'second'\n" in r.stdout
    gtt = int(read_text(f"{vgpu_mount}/sys/class/drm/card0/device/mem_info_gtt_used"))
    assert gtt >= SIZE  # still held by the export
    p.stdin.write("exit\n")
    p.stdin.flush()
    p.wait(30)
    # The exporter's DRM file is gone and nothing else holds the export: the BO goes.
    wait_for(lambda: int(read_text(f"{vgpu_mount}/sys/class/drm/card0/device/mem_info_gtt_used")) == 0,
             "the shared BO to be freed")
    r = run_client(IMPORTER, vgpu_mount, token, "late", check=False)
    assert r.returncode != 0 and "VgpuNoSuchObject" in r.stderr
    assert not os.path.exists(f"{vgpu_mount}/prime/{token:x}")
