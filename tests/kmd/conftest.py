"""KMD tests call the dispatch directly: no FUSE, no processes."""
import ctypes
import errno

import pytest

from kmd.device import Device
from kmd.errors import KmdError
from vgpu import uapi

MiB = 1 << 20


@pytest.fixture
def dev():
    d = Device(vram_size=64 * MiB, gtt_size=64 * MiB, timeout=1.0)
    try:
        yield d
        d.check_invariants()
    finally:
        d.shutdown()


@pytest.fixture
def client(dev):
    f = dev.open_file(pid=1000, uid=1000, comm="test", render=True)
    yield f
    if not f.closed:
        dev.close_file(f)


@pytest.fixture
def root_client(dev):
    f = dev.open_file(pid=1, uid=0, comm="root", render=False)
    yield f
    if not f.closed:
        dev.close_file(f)


def call(dev, f, name: str, args, extra: bytes = b""):
    """Issue ioctl `name` with ctypes struct `args`; returns (updated struct, out-data)."""
    d = next(d for d in uapi.IOCTLS.values() if d.name == name)
    reply = dev.ioctl(f, d.request, bytes(args), extra)
    if hasattr(reply, "wait"):
        reply = reply.wait()
    return type(args).from_buffer_copy(reply.arg), reply.extra


def fails(err: int, dev, f, name, args, extra=b""):
    with pytest.raises(KmdError) as e:
        call(dev, f, name, args, extra)
    assert e.value.errno == err, f"expected {errno.errorcode[err]}, got {e.value}"
    return e.value


def gem_create(dev, f, size=4096, domains=None, flags=0, alignment=4096) -> int:
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size = size
    a.in_.alignment = alignment
    a.in_.domains = uapi.AMDGPU_GEM_DOMAIN_VRAM if domains is None else domains
    a.in_.domain_flags = flags
    out, _ = call(dev, f, "AMDGPU_GEM_CREATE", a)
    return out.out.handle


def gem_va(dev, f, handle, va, size, op=None, offset=0, flags=None):
    a = uapi.drm_amdgpu_gem_va()
    a.handle = handle
    a.operation = uapi.AMDGPU_VA_OP_MAP if op is None else op
    a.flags = (uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE) if flags is None else flags
    a.va_address = va
    a.offset_in_bo = offset
    a.map_size = size
    return a


def sizeof(s) -> int:
    return ctypes.sizeof(s)


def info(dev, f, query, size, **sub):
    """AMDGPU_INFO `query` with `return_size` `size`; `sub` sets union members as
    member__field=value. Returns the answer's bytes."""
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = query, size
    for k, v in sub.items():
        obj, field = k.split("__")
        setattr(getattr(a, obj), field, v)
    return call(dev, f, "AMDGPU_INFO", a)[1]
