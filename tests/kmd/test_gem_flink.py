"""GEM_FLINK and GEM_OPEN (kmd/gem_flink.py, after drm_gem.c's drm_gem_flink_ioctl and
drm_gem_open_ioctl), through the dispatch: device-global names from 1, valid while a
handle names the BO, a new handle to the same BO per open, and each errno."""
import errno

import pytest

from kmd.errors import KmdError
from vgpu import uapi

from .conftest import call, fails, gem_create

GTT, GDS = uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_GDS


@pytest.fixture
def master(dev):
    """The first card0 open: master and authenticated."""
    f = dev.open_file(pid=100, uid=1000, comm="master", render=False)
    yield f
    if not f.closed:
        dev.close_file(f)


@pytest.fixture
def peer(dev, master):
    """A second card0 file, authenticated by the master (drmAuthMagic)."""
    f = dev.open_file(pid=101, uid=1001, comm="peer", render=False)
    m = call(dev, f, "GET_MAGIC", uapi.drm_auth())[0].magic
    call(dev, master, "AUTH_MAGIC", uapi.drm_auth(magic=m))
    yield f
    if not f.closed:
        dev.close_file(f)


def flink(dev, f, handle) -> int:
    return call(dev, f, "GEM_FLINK", uapi.drm_gem_flink(handle=handle))[0].name


def gem_open(dev, f, name) -> uapi.drm_gem_open:
    return call(dev, f, "GEM_OPEN", uapi.drm_gem_open(name=name))[0]


def close(dev, f, handle):
    call(dev, f, "GEM_CLOSE", uapi.drm_gem_close(handle=handle))


def test_names_start_at_1_and_are_stable(dev, master):
    a, b = gem_create(dev, master, domains=GTT), gem_create(dev, master, domains=GTT)
    assert flink(dev, master, a) == 1
    assert flink(dev, master, b) == 2
    assert flink(dev, master, a) == 1                  # a BO has one name


def test_open_by_name_shares_the_bo(dev, master, peer):
    h = gem_create(dev, master, size=3 * 4096, domains=GTT)
    out = gem_open(dev, peer, flink(dev, master, h))
    assert out.handle >= 1 and out.size == 3 * 4096
    assert peer.bos[out.handle] is master.bos[h]
    assert master.bos[h].handle_count == 2
    master.bos[h].write(0, b"flink")
    assert peer.bos[out.handle].read(0, 5) == b"flink"
    assert master.bos[h].may_access(peer.uid)          # its BO file is the peer's to map too


def test_each_open_is_a_new_handle(dev, master):
    h = gem_create(dev, master, domains=GTT)
    name = flink(dev, master, h)
    h2, h3 = gem_open(dev, master, name).handle, gem_open(dev, master, name).handle
    assert len({h, h2, h3}) == 3 and master.bos[h2] is master.bos[h3] is master.bos[h]


def test_names_are_device_global(dev, master, peer):
    h = gem_create(dev, peer, domains=GTT)
    name = flink(dev, peer, h)
    assert gem_open(dev, master, name).size == 4096
    root = dev.open_file(pid=1, uid=0, comm="root", render=False)   # root is authenticated
    assert gem_open(dev, root, name).size == 4096
    dev.close_file(root)


def test_name_lives_while_a_handle_does(dev, master, peer):
    h = gem_create(dev, master, domains=GTT)
    name = flink(dev, master, h)
    h2 = gem_open(dev, peer, name).handle
    close(dev, master, h)                              # the peer's handle keeps the name
    assert gem_open(dev, peer, name).handle not in (0, h2)
    dev.close_file(master)
    assert gem_open(dev, peer, name).size == 4096


def test_closing_the_last_handle_frees_the_name(dev, master):
    h = gem_create(dev, master, domains=GTT)
    name = flink(dev, master, h)
    close(dev, master, h)
    fails(errno.ENOENT, dev, master, "GEM_OPEN", uapi.drm_gem_open(name=name))
    assert not dev.flink.names


def test_closing_the_file_frees_its_names(dev, master, peer):
    name = flink(dev, peer, gem_create(dev, peer, domains=GTT))
    dev.close_file(peer)
    fails(errno.ENOENT, dev, master, "GEM_OPEN", uapi.drm_gem_open(name=name))


def test_a_freed_name_is_given_again(dev, master):
    """idr_alloc(1, 0) hands out the lowest free name."""
    a, b = gem_create(dev, master, domains=GTT), gem_create(dev, master, domains=GTT)
    assert (flink(dev, master, a), flink(dev, master, b)) == (1, 2)
    close(dev, master, a)
    assert flink(dev, master, gem_create(dev, master, domains=GTT)) == 1


def test_exported_bo_loses_its_name_with_its_last_handle(dev, master):
    """drm_gem_object_handle_free drops the name when handle_count reaches 0, even
    if a PRIME export keeps the object."""
    h = gem_create(dev, master, domains=GTT)
    name = flink(dev, master, h)
    call(dev, master, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=h))
    close(dev, master, h)
    fails(errno.ENOENT, dev, master, "GEM_OPEN", uapi.drm_gem_open(name=name))


def test_flink_of_a_bad_handle_is_enoent(dev, master):
    fails(errno.ENOENT, dev, master, "GEM_FLINK", uapi.drm_gem_flink(handle=77))
    fails(errno.ENOENT, dev, master, "GEM_FLINK", uapi.drm_gem_flink(handle=0))


@pytest.mark.parametrize("name", [0, 1, 5, 0x80000000, 0xFFFFFFFF])
def test_open_of_a_bad_name_is_enoent(dev, master, name):
    """No name was given (0 never is); Linux reads the name as an int, so one past
    INT_MAX is a negative id idr_find does not find: ENOENT, not EINVAL."""
    fails(errno.ENOENT, dev, master, "GEM_OPEN", uapi.drm_gem_open(name=name))


@pytest.mark.parametrize("name,args", [("GEM_FLINK", uapi.drm_gem_flink(handle=1)),
                                       ("GEM_OPEN", uapi.drm_gem_open(name=1))])
def test_render_node_is_eacces(dev, master, name, args):
    """drm_ioctls[] gives both DRM_AUTH only, no DRM_RENDER_ALLOW: renderD128 is
    refused before the handler, even for root and even with a valid handle."""
    flink(dev, master, gem_create(dev, master, domains=GTT))
    for uid in (1000, 0):
        r = dev.open_file(pid=200 + uid, uid=uid, comm="render", render=True)
        gem_create(dev, r, domains=GTT)
        e = fails(errno.EACCES, dev, r, name, args)
        assert "DRM_RENDER_ALLOW" in e.reason
        dev.close_file(r)


@pytest.mark.parametrize("name,args", [("GEM_FLINK", uapi.drm_gem_flink(handle=1)),
                                       ("GEM_OPEN", uapi.drm_gem_open(name=1))])
def test_unauthenticated_card0_is_eacces(dev, master, name, args):
    flink(dev, master, gem_create(dev, master, domains=GTT))
    other = dev.open_file(pid=300, uid=1002, comm="stranger", render=False)
    e = fails(errno.EACCES, dev, other, name, args)
    assert "DRM_AUTH" in e.reason
    dev.close_file(other)


def test_wrong_size_is_einval(dev, master):
    """The handlers have no EINVAL of their own (no padding to check); a request
    whose _IOC_SIZE is not the struct's is refused by dispatch, as drm_ioctl does
    for a size that does not match the argument."""
    req = uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0B, 16)
    with pytest.raises(KmdError) as e:
        dev.ioctl(master, req, bytes(8))
    assert e.value.errno == errno.EINVAL


def test_gds_bo_opens_with_its_page_per_unit_size(dev, master, peer):
    """amdgpu_bo_create makes a GDS BO one page per unit: GEM_OPEN reports that size."""
    a = uapi.drm_amdgpu_gem_create(in_=uapi.drm_amdgpu_gem_create_in(bo_size=1024, domains=GDS))
    h = call(dev, master, "AMDGPU_GEM_CREATE", a)[0].out.handle
    assert gem_open(dev, peer, flink(dev, master, h)).size == 1024 << 12


def test_the_handle_cap_applies(dev, master):
    h = gem_create(dev, master, domains=GTT)
    name = flink(dev, master, h)
    master.limiter.limits.bos_per_file = len(master.bos)
    fails(errno.ENOSPC, dev, master, "GEM_OPEN", uapi.drm_gem_open(name=name))
