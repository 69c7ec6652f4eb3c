"""The dispatch and the ioctl table: unknown requests, struct size rules, permission
flags (drm_ioctl_permit), ioctls listed as not implemented, logging."""
import ctypes
import errno
from types import SimpleNamespace

import pytest

from kmd.errors import KmdError
from kmd.ioctl import (DRM_AUTH, DRM_IOCTL_DEF, DRM_MASTER, DRM_RENDER_ALLOW, DRM_ROOT_ONLY, dispatch,
                       drm_ioctl_permit, index, not_implemented)
from kmd.ioctl_table import AMDGPU_IOCTLS_KMS, DRM_IOCTLS, TABLE
from vgpu import uapi

from .conftest import call, fails


def test_unknown_request_is_enotty_and_logged(dev, client):
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x3F, 8), bytes(8))
    assert e.value.errno == errno.ENOTTY
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, ord("x"), 0, 8), bytes(8))
    assert e.value.errno == errno.ENOTTY
    assert "refused" in dev.kmsg.text()


def test_display_ioctls_beyond_the_kms_queries_are_eopnotsupp(dev, client):
    # SETCRTC, GETFB2, WAIT_VBLANK on a part without display (kmd/kms.py answers the
    # queries and dumb buffers; tests/kmd/test_kms.py)
    for nr, size in ((0xA2, 104), (0xCE, 104), (0x3A, 24)):
        with pytest.raises(KmdError) as e:
            dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, nr, size), bytes(size))
        assert e.value.errno == errno.EOPNOTSUPP, hex(nr)
    assert "has no display" in dev.kmsg.text()


def test_ioc_size_must_match_arg(dev, client):
    req = uapi.DRM_IOCTL_GET_CAP
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, req, bytes(8))
    assert e.value.errno == errno.EINVAL


def test_shorter_and_longer_structs(dev, client):
    """Like drm_ioctl: a shorter struct is zero-extended, a longer one needs a zero tail."""
    cap = uapi.drm_get_cap()
    cap.capability = uapi.DRM_CAP_PRIME
    full = bytes(cap)
    longer = full + bytes(8)
    r = dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, len(longer)), longer)
    assert len(r.arg) == len(longer)
    assert uapi.drm_get_cap.from_buffer_copy(r.arg).value == 3
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, len(longer)), full + b"\1" + bytes(7))
    assert e.value.errno == errno.EINVAL
    short = full[:8]  # capability only; value reads as 0
    r = dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, 8), short)
    assert len(r.arg) == 8


def test_closed_file_is_ebadf(dev):
    f = dev.open_file(pid=2, uid=0)
    dev.close_file(f)
    with pytest.raises(KmdError) as e:
        call(dev, f, "GET_CAP", uapi.drm_get_cap())
    assert e.value.errno == errno.EBADF


def test_struct_sizes_follow_request_numbers():
    for d in uapi.IOCTLS.values():
        assert uapi._IOC_SIZE(d.request) == ctypes.sizeof(d.struct), d.name


# -- the ioctl table (kmd/ioctl_table.py) and its permission flags ------------------------

def sched_args():
    a = uapi.drm_amdgpu_sched()
    a.in_.op = uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE
    a.in_.priority = uapi.AMDGPU_CTX_PRIORITY_NORMAL
    return a


def test_table_covers_every_uapi_ioctl():
    assert set(TABLE) == set(uapi.IOCTLS)
    for nr, desc in TABLE.items():
        d = uapi.IOCTLS[nr]
        assert (desc.name, desc.request, desc.struct) == (d.name, d.request, d.struct)
        assert desc.implemented == callable(desc.func), desc.name
    assert [d.name for d in DRM_IOCTLS + AMDGPU_IOCTLS_KMS if not d.implemented] == []


def test_flags_are_linuxs():
    """drm_ioctls[] gives the core ioctls vgpu has DRM_RENDER_ALLOW only, but GET_CLIENT,
    SET_CLIENT_CAP, GET_MAGIC, SET/DROP_MASTER and the KMS ones (MODE_*) no flag at
    all, AUTH_MAGIC DRM_MASTER, GEM_FLINK and GEM_OPEN DRM_AUTH; amdgpu_ioctls_kms[]
    gives its ioctls DRM_AUTH|DRM_RENDER_ALLOW, but SCHED DRM_MASTER."""
    special = {"AUTH_MAGIC": DRM_MASTER, "GEM_FLINK": DRM_AUTH, "GEM_OPEN": DRM_AUTH}
    for d in DRM_IOCTLS:
        no_flags = (d.name in ("GET_CLIENT", "SET_CLIENT_CAP", "GET_MAGIC", "SET_MASTER", "DROP_MASTER")
                    or d.name.startswith("MODE_"))
        assert d.flags == special.get(d.name, 0 if no_flags else DRM_RENDER_ALLOW), d.name
    for d in AMDGPU_IOCTLS_KMS:
        want = DRM_MASTER if d.name == "AMDGPU_SCHED" else DRM_AUTH | DRM_RENDER_ALLOW
        assert d.flags == want, d.name
    assert TABLE[uapi._IOC_NR(uapi.DRM_IOCTL_AMDGPU_SCHED)].describe_flags() == "DRM_MASTER"


def test_uapi_ioctl_list_is_explicit_and_in_header_order():
    codes = [k[len("DRM_IOCTL_"):] for k in vars(uapi) if k.startswith("DRM_IOCTL_") and k != "DRM_IOCTL_BASE"]
    assert [d.name for d in uapi.IOCTL_LIST] == codes
    assert list(uapi.IOCTLS.values()) == uapi.IOCTL_LIST


def test_render_file_is_refused_an_ioctl_without_render_allow(dev, client, root_client):
    """AMDGPU_SCHED is DRM_MASTER (no DRM_RENDER_ALLOW): EACCES on renderD128, even for
    root, before the handler runs; card0 keeps what it had (root may call it)."""
    root_render = dev.open_file(pid=3, uid=0, comm="rootr", render=True)
    for f in (client, root_render):
        e = fails(errno.EACCES, dev, f, "AMDGPU_SCHED", sched_args())
        assert "DRM_MASTER" in e.reason
    log = dev.kmsg.text()
    assert f"AMDGPU_SCHED refused for client {root_render.id} (pid 3): EACCES" in log
    call(dev, root_client, "AMDGPU_SCHED", sched_args())
    fails(errno.EACCES, dev, dev.open_file(pid=4, uid=1000, render=False), "AMDGPU_SCHED", sched_args())
    # Everything a render client needs stays allowed.
    call(dev, client, "GET_CAP", uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ))
    dev.close_file(root_render)


def test_not_implemented_entry_is_enotty_and_says_so(dev, client):
    """Every ioctl of uapi has a handler now; the not_implemented() mechanism stays for
    the next one: dispatch answers ENOTTY and says why."""
    table = index([DRM_IOCTL_DEF("GET_CAP", not_implemented("kept for the test"), DRM_RENDER_ALLOW)])
    with pytest.raises(KmdError) as e:
        dispatch(table, dev, client, uapi.DRM_IOCTL_GET_CAP, bytes(uapi.drm_get_cap()), b"")
    assert e.value.errno == errno.ENOTTY and e.value.reason == "not implemented: kept for the test"


def test_permit_follows_drm_ioctl_permit(dev):
    """ROOT_ONLY needs uid 0; AUTH passes render and authenticated files; a table with
    a ROOT_ONLY entry is enforced by dispatch, and the refusal is logged."""
    user_card = SimpleNamespace(uid=1000, render=False, authenticated=True, master=True, node="card0")
    user_render = SimpleNamespace(uid=1000, render=True, authenticated=False, master=False, node="renderD128")
    unauth = SimpleNamespace(uid=1000, render=False, authenticated=False, master=False, node="card0")
    root_card = SimpleNamespace(uid=0, render=False, authenticated=True, master=True, node="card0")
    for flags, f in [(DRM_ROOT_ONLY, user_card), (DRM_AUTH, unauth), (DRM_MASTER, unauth),
                     (DRM_MASTER, user_render), (DRM_AUTH, user_render)]:
        with pytest.raises(KmdError) as e:
            drm_ioctl_permit(flags, f)
        assert e.value.errno == errno.EACCES
    drm_ioctl_permit(DRM_ROOT_ONLY | DRM_AUTH | DRM_MASTER, root_card)
    drm_ioctl_permit(DRM_AUTH | DRM_RENDER_ALLOW, user_render)
    drm_ioctl_permit(DRM_AUTH, user_card)

    table = index([DRM_IOCTL_DEF("GET_CAP", TABLE[0x0C].func, DRM_ROOT_ONLY)])
    req = uapi.DRM_IOCTL_GET_CAP
    arg = bytes(uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ))
    user = dev.open_file(pid=5, uid=1000, render=False)
    with pytest.raises(KmdError) as e:
        dispatch(table, dev, user, req, arg, b"")
    assert e.value.errno == errno.EACCES and "DRM_ROOT_ONLY" in e.value.reason
    root = dev.open_file(pid=6, uid=0, render=False)
    assert uapi.drm_get_cap.from_buffer_copy(dispatch(table, dev, root, req, arg, b"").arg).value == 1
