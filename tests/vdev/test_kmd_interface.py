"""kmd.device.Device keeps the contract vdev relies on (vdev/kmd_interface.py): every
member of KmdDevice and of the objects it hands out exists, and each method accepts
the arguments vdev passes, by the names vdev passes them."""
import inspect

import pytest

from kmd.device import Device
from vdev import kmd_interface as K

MiB = 1 << 20


@pytest.fixture
def dev():
    d = Device(vram_size=4 * MiB, gtt_size=4 * MiB)
    yield d
    d.shutdown()


def members(proto) -> dict[str, object]:
    """The attributes and methods a Protocol class declares (not object's)."""
    names = set(getattr(proto, "__annotations__", {}))
    names |= {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
    return {n: vars(proto).get(n) for n in sorted(names)}


def check(obj, proto) -> None:
    assert isinstance(obj, proto), f"{type(obj).__name__} is not a {proto.__name__}"
    for name, declared in members(proto).items():
        assert hasattr(obj, name), f"{type(obj).__name__} has no {name} ({proto.__name__})"
        if not callable(declared):
            continue
        want = list(inspect.signature(declared).parameters.values())[1:]  # without self
        have = inspect.signature(getattr(obj, name)).parameters
        for p in want:
            assert p.name in have, f"{type(obj).__name__}.{name} lacks parameter {p.name}"
            if p.default is not inspect.Parameter.empty:
                assert have[p.name].default is not inspect.Parameter.empty, \
                    f"{type(obj).__name__}.{name}: {p.name} must stay optional"
        extra = [q for n, q in have.items() if n not in {p.name for p in want}
                 and q.default is inspect.Parameter.empty
                 and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]
        assert not extra, f"{type(obj).__name__}.{name} needs {[q.name for q in extra]}, vdev passes none"


def test_device_keeps_the_vdev_contract(dev):
    check(dev, K.KmdDevice)
    check(dev, K.KmdGpu)
    check(dev.partition, K.PartitionShare)
    check(dev.kmsg, K.KernelLog)


def test_a_partitioned_gpu_keeps_the_vdev_contract():
    from kmd.gpu import PartitionedGpu

    gpu = PartitionedGpu(2, vram_size=4 * MiB, gtt_size=4 * MiB)
    try:
        check(gpu, K.KmdGpu)
        check(gpu.kmsg, K.KernelLog)
        for part in gpu.partitions:
            check(part, K.KmdDevice)
    finally:
        gpu.shutdown()


def test_objects_handed_to_vdev_keep_the_contract(dev):
    from tests.kmd.conftest import call, gem_create
    from vgpu import uapi

    f = dev.open_file(pid=10, uid=1000, comm="t", render=True)
    try:
        m = uapi.drm_amdgpu_gem_mmap()
        m.in_.handle = gem_create(dev, f)
        bo = dev.bo_by_offset(call(dev, f, "AMDGPU_GEM_MMAP", m)[0].out.addr_ptr)
        check(bo, K.BufferObject)
        create = uapi.drm_syncobj_create()
        handle = call(dev, f, "SYNCOBJ_CREATE", create)[0].handle
        export = uapi.drm_syncobj_handle()
        export.handle = handle
        token = call(dev, f, "SYNCOBJ_HANDLE_TO_FD", export)[0].fd
        check(dev.sync_file_by_token(token), K.SyncExport)
        prime = call(dev, f, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=m.in_.handle))[0].fd
        check(dev.prime_by_token(prime), K.PrimeExport)
    finally:
        dev.close_file(f)
