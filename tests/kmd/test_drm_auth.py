"""DRM master and authentication as Linux has them (kmd/drm_auth.py, after drm_auth.c,
drm_file.c and drm_ioctl.c), through the dispatch: who becomes master, who is
authenticated, GET_MAGIC / AUTH_MAGIC / SET_MASTER / DROP_MASTER and their errno on
each node, and DRM_AUTH / DRM_MASTER enforced as drm_ioctl_permit does."""
import ctypes
import errno

import pytest

from kmd.errors import KmdError
from vgpu import uapi

from .conftest import call, fails, gem_create


def card(dev, uid=1000, pid=None):
    return dev.open_file(pid=pid or 2000 + uid, uid=uid, comm="card", render=False)


def render(dev, uid=1000):
    return dev.open_file(pid=3000 + uid, uid=uid, comm="render", render=True)


def magic(dev, f) -> int:
    return call(dev, f, "GET_MAGIC", uapi.drm_auth())[0].magic


def auth_magic(dev, master, m) -> None:
    call(dev, master, "AUTH_MAGIC", uapi.drm_auth(magic=m))


def get_client_auth(dev, f) -> int:
    return call(dev, f, "GET_CLIENT", uapi.drm_client(idx=0))[0].auth


def info_ok(dev, f) -> bool:
    """An AMDGPU_INFO (DRM_AUTH) call: True if it was allowed."""
    a = uapi.drm_amdgpu_info(query=uapi.AMDGPU_INFO_DEV_INFO,
                             return_size=ctypes.sizeof(uapi.drm_amdgpu_info_device))
    try:
        call(dev, f, "AMDGPU_INFO", a)
        return True
    except KmdError as e:
        assert e.errno == errno.EACCES, e
        return False


def no_arg():
    """The argument of SET_MASTER / DROP_MASTER, DRM_IO requests: nothing."""
    return uapi.IOCTLS[uapi._IOC_NR(uapi.DRM_IOCTL_SET_MASTER)].struct()


def sched_args():
    a = uapi.drm_amdgpu_sched()
    a.in_.op = uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE
    a.in_.priority = uapi.AMDGPU_CTX_PRIORITY_NORMAL
    return a


# -- who is master, who is authenticated (drm_open_helper, drm_master_open) -----------------

def test_first_card0_open_is_master_and_authenticated(dev):
    first, second = card(dev, 1000), card(dev, 1001)
    assert first.master and first.authenticated
    assert not second.master and not second.authenticated
    assert (get_client_auth(dev, first), get_client_auth(dev, second)) == (1, 0)
    assert "client %d became the DRM master" % first.id in dev.kmsg.text()


def test_root_is_always_authenticated(dev):
    card(dev, 1000)                                   # the master
    root_card, root_render = card(dev, 0), render(dev, 0)
    assert root_card.authenticated and not root_card.master
    assert root_render.authenticated and not root_render.master
    assert get_client_auth(dev, root_card) == 1 and info_ok(dev, root_card)


def test_render_files_are_never_master_and_drm_auth_does_not_apply(dev):
    r = render(dev, 1000)                             # no master yet: still not one
    assert not r.master and not r.authenticated
    assert info_ok(dev, r)                            # DRM_AUTH|DRM_RENDER_ALLOW
    gem_create(dev, r)
    first = card(dev, 1000)
    assert first.master                               # the render open did not take it


def test_unauthenticated_card0_is_refused_drm_auth_ioctls(dev):
    card(dev, 1000)
    other = card(dev, 1001)
    assert not info_ok(dev, other)
    e = fails(errno.EACCES, dev, other, "AMDGPU_GEM_CREATE", uapi.drm_amdgpu_gem_create(
        in_=uapi.drm_amdgpu_gem_create_in(bo_size=4096, domains=uapi.AMDGPU_GEM_DOMAIN_GTT)))
    assert "DRM_AUTH" in e.reason
    # ioctls without DRM_AUTH stay allowed
    call(dev, other, "GET_CAP", uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ))
    call(dev, other, "VERSION", uapi.drm_version())


def test_master_close_leaves_the_device_without_master(dev):
    first = card(dev, 1000)
    dev.close_file(first)
    assert dev.drm_master is None
    nxt = card(dev, 1001)
    assert nxt.master and nxt.authenticated


# -- GET_MAGIC and AUTH_MAGIC (drm_getmagic, drm_authmagic) ---------------------------------

def test_get_magic_is_stable_and_unique(dev):
    master, a, b = card(dev, 1000), card(dev, 1001), card(dev, 1002)
    ma, mb = magic(dev, a), magic(dev, b)
    assert ma >= 1 and mb >= 1 and ma != mb
    assert magic(dev, a) == ma                        # the same magic again
    assert magic(dev, master) not in (ma, mb)


def test_auth_magic_authenticates_the_file(dev):
    master, other = card(dev, 1000), card(dev, 1001)
    auth_magic(dev, master, magic(dev, other))
    assert other.authenticated and get_client_auth(dev, other) == 1
    assert info_ok(dev, other)
    assert not other.master


def test_auth_magic_of_an_unknown_magic_is_einval(dev):
    master, other = card(dev, 1000), card(dev, 1001)
    fails(errno.EINVAL, dev, master, "AUTH_MAGIC", uapi.drm_auth(magic=12345))
    fails(errno.EINVAL, dev, master, "AUTH_MAGIC", uapi.drm_auth(magic=0))
    m = magic(dev, other)
    auth_magic(dev, master, m)
    # drm_authmagic replaces the entry with NULL: the magic is spent
    fails(errno.EINVAL, dev, master, "AUTH_MAGIC", uapi.drm_auth(magic=m))


def test_auth_magic_needs_the_master(dev):
    card(dev, 1000)
    root_other, user = card(dev, 0), card(dev, 1001)
    e = fails(errno.EACCES, dev, root_other, "AUTH_MAGIC", uapi.drm_auth(magic=magic(dev, user)))
    assert "DRM_MASTER" in e.reason
    assert not user.authenticated


def test_a_new_master_cannot_authenticate_files_of_the_old_one(dev):
    """Each file belongs to the master that was current when it opened (its
    drm_master, file_priv->master); AUTH_MAGIC looks in the caller's own map."""
    old = card(dev, 1000)
    orphan = card(dev, 1001)
    m = magic(dev, orphan)
    dev.close_file(old)
    new = card(dev, 1002)                             # a new master, its own map
    assert new.master
    fails(errno.EINVAL, dev, new, "AUTH_MAGIC", uapi.drm_auth(magic=m))
    later = card(dev, 1003)
    auth_magic(dev, new, magic(dev, later))
    assert later.authenticated and not orphan.authenticated


@pytest.mark.parametrize("name,args", [
    ("GET_MAGIC", uapi.drm_auth()), ("AUTH_MAGIC", uapi.drm_auth(magic=1)),
    ("SET_MASTER", None), ("DROP_MASTER", None)])
def test_master_ioctls_are_eacces_on_the_render_node(dev, name, args):
    """drm_ioctls[] gives none of them DRM_RENDER_ALLOW; root's render file too."""
    for r in (render(dev, 1000), render(dev, 0)):
        e = fails(errno.EACCES, dev, r, name, args if args is not None else no_arg())
        assert "DRM_RENDER_ALLOW" in e.reason or "DRM_MASTER" in e.reason


# -- SET_MASTER and DROP_MASTER (drm_setmaster_ioctl, drm_dropmaster_ioctl) -----------------

def set_master(dev, f):
    call(dev, f, "SET_MASTER", no_arg())


def drop_master(dev, f):
    call(dev, f, "DROP_MASTER", no_arg())


def test_set_master_on_the_master_is_a_no_op(dev):
    master = card(dev, 1000)
    set_master(dev, master)
    assert master.master


def test_set_master_while_another_is_master_is_ebusy(dev):
    card(dev, 1000)
    root_other = card(dev, 0)
    fails(errno.EBUSY, dev, root_other, "SET_MASTER", no_arg())
    assert not root_other.master


def test_set_master_by_a_user_never_master_is_eacces(dev):
    """drm_master_check_perm: a file that was never master needs CAP_SYS_ADMIN."""
    first = card(dev, 1000)
    user = card(dev, 1001)
    drop_master(dev, first)
    fails(errno.EACCES, dev, user, "SET_MASTER", no_arg())
    fails(errno.EACCES, dev, user, "DROP_MASTER", no_arg())
    assert dev.drm_master is None


def test_drop_then_set_master_again(dev):
    """The file that was master may take it back without root (was_master, as
    drm_master_check_perm allows); it stays authenticated meanwhile."""
    first = card(dev, 1000)
    drop_master(dev, first)
    assert not first.master and dev.drm_master is None
    assert first.authenticated                         # it keeps its authentication
    set_master(dev, first)
    assert first.master


def test_open_while_no_master_becomes_master(dev):
    first = card(dev, 1000)
    drop_master(dev, first)
    nxt = card(dev, 1001)
    assert nxt.master
    fails(errno.EBUSY, dev, first, "SET_MASTER", no_arg())


def test_root_takes_master_after_it_is_dropped(dev):
    first, root_card = card(dev, 1000), card(dev, 0)
    drop_master(dev, first)
    set_master(dev, root_card)
    assert root_card.master and not first.master
    user = card(dev, 1001)
    auth_magic(dev, root_card, magic(dev, user))
    assert user.authenticated


def test_drop_master_by_a_file_not_master_is_einval(dev):
    card(dev, 1000)
    root_other = card(dev, 0)
    fails(errno.EINVAL, dev, root_other, "DROP_MASTER", no_arg())


def test_drop_master_twice_is_einval(dev):
    first = card(dev, 1000)
    drop_master(dev, first)
    fails(errno.EINVAL, dev, first, "DROP_MASTER", no_arg())


# -- DRM_MASTER enforced: AMDGPU_SCHED -------------------------------------------------------

def test_sched_needs_the_current_master(dev):
    master = card(dev, 0, pid=1)
    root_other = card(dev, 0, pid=2)
    call(dev, master, "AMDGPU_SCHED", sched_args())
    e = fails(errno.EACCES, dev, root_other, "AMDGPU_SCHED", sched_args())
    assert "DRM_MASTER" in e.reason
    drop_master(dev, master)
    fails(errno.EACCES, dev, master, "AMDGPU_SCHED", sched_args())
    set_master(dev, root_other)
    call(dev, root_other, "AMDGPU_SCHED", sched_args())


def test_check_permission_refuses_as_dispatch_does_before_the_handler(dev):
    """Device.check_permission: the errno dispatch gives before a handler runs (the
    ioctl transport asks it when a copy from the caller fails), or nothing."""
    card(dev, 1000)                                   # master
    other = card(dev, 1001)                           # unauthenticated
    r = render(dev)
    with pytest.raises(KmdError) as e:
        dev.check_permission(other, uapi.DRM_IOCTL_AMDGPU_CS)
    assert e.value.errno == errno.EACCES
    dev.check_permission(other, uapi.DRM_IOCTL_VERSION)   # no DRM_AUTH: allowed
    dev.check_permission(r, uapi.DRM_IOCTL_AMDGPU_CS)
    with pytest.raises(KmdError) as e:
        dev.check_permission(r, uapi.DRM_IOCTL_SET_MASTER)  # not RENDER_ALLOW
    assert e.value.errno == errno.EACCES
    with pytest.raises(KmdError) as e:
        dev.check_permission(r, (3 << 30) | (8 << 16) | (ord("d") << 8) | 0x7F)   # no such ioctl
    assert e.value.errno == errno.ENOTTY
    dev.close_file(other)
    with pytest.raises(KmdError) as e:
        dev.check_permission(other, uapi.DRM_IOCTL_VERSION)
    assert e.value.errno == errno.EBADF
