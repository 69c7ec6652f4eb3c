"""KMS as amdgpu answers it on an MI100 (kmd/kms.py), through the dispatch: an empty
mode config on card0, EACCES for each KMS ioctl on renderD128, ENOENT for every
mode object, SET_CLIENT_CAP's errnos, dumb buffers, and the KMS capabilities."""
import errno

import pytest

from vgpu import uapi

from .conftest import call, fails


@pytest.fixture
def card(dev):
    f = dev.open_file(pid=1001, uid=1000, comm="drm_info", render=False)
    yield f
    if not f.closed:
        dev.close_file(f)


def test_getresources_is_an_empty_mode_config(dev, card):
    a = uapi.drm_mode_card_res(count_fbs=5, count_crtcs=5, count_connectors=5, count_encoders=5,
                               max_width=123, fb_id_ptr=0x1000)
    out, extra = call(dev, card, "MODE_GETRESOURCES", a)
    assert (out.count_fbs, out.count_crtcs, out.count_connectors, out.count_encoders) == (0, 0, 0, 0)
    assert (out.min_width, out.max_width, out.min_height, out.max_height) == (0, 0, 0, 0)
    assert extra == b""


def test_getplaneresources_has_no_planes(dev, card):
    out, _ = call(dev, card, "MODE_GETPLANERESOURCES", uapi.drm_mode_get_plane_res(count_planes=3))
    assert out.count_planes == 0


@pytest.mark.parametrize("name,struct,field", [
    ("MODE_GETCRTC", uapi.drm_mode_crtc, "crtc_id"),
    ("MODE_GETENCODER", uapi.drm_mode_get_encoder, "encoder_id"),
    ("MODE_GETCONNECTOR", uapi.drm_mode_get_connector, "connector_id"),
    ("MODE_GETPLANE", uapi.drm_mode_get_plane, "plane_id"),
    ("MODE_GETPROPERTY", uapi.drm_mode_get_property, "prop_id"),
    ("MODE_GETPROPBLOB", uapi.drm_mode_get_blob, "blob_id"),
    ("MODE_OBJ_GETPROPERTIES", uapi.drm_mode_obj_get_properties, "obj_id"),
])
def test_mode_objects_do_not_exist(dev, card, client, name, struct, field):
    for obj_id in (0, 1, 31, 0xFFFFFFFF):
        fails(errno.ENOENT, dev, card, name, struct(**{field: obj_id}))
    fails(errno.EACCES, dev, client, name, struct(**{field: 1}))   # flags 0: not on renderD128


@pytest.mark.parametrize("name,struct", [
    ("MODE_GETRESOURCES", uapi.drm_mode_card_res),
    ("MODE_GETPLANERESOURCES", uapi.drm_mode_get_plane_res),
    ("SET_CLIENT_CAP", uapi.drm_set_client_cap),
    ("MODE_CREATE_DUMB", uapi.drm_mode_create_dumb),
    ("MODE_MAP_DUMB", uapi.drm_mode_map_dumb),
    ("MODE_DESTROY_DUMB", uapi.drm_mode_destroy_dumb),
])
def test_kms_ioctls_are_refused_on_the_render_node(dev, client, name, struct):
    fails(errno.EACCES, dev, client, name, struct())


@pytest.mark.parametrize("cap,value,err", [
    (uapi.DRM_CLIENT_CAP_STEREO_3D, 1, 0),
    (uapi.DRM_CLIENT_CAP_STEREO_3D, 0, 0),
    (uapi.DRM_CLIENT_CAP_STEREO_3D, 2, errno.EINVAL),
    (uapi.DRM_CLIENT_CAP_UNIVERSAL_PLANES, 1, 0),
    (uapi.DRM_CLIENT_CAP_ASPECT_RATIO, 1, 0),
    (uapi.DRM_CLIENT_CAP_ATOMIC, 1, errno.EOPNOTSUPP),
    (uapi.DRM_CLIENT_CAP_WRITEBACK_CONNECTORS, 1, errno.EINVAL),
    (uapi.DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT, 1, errno.EINVAL),
    (99, 1, errno.EINVAL),
])
def test_set_client_cap(dev, card, cap, value, err):
    a = uapi.drm_set_client_cap(capability=cap, value=value)
    if err:
        fails(err, dev, card, "SET_CLIENT_CAP", a)
    else:
        call(dev, card, "SET_CLIENT_CAP", a)


@pytest.mark.parametrize("width,bpp,pitch", [(1, 32, 256), (64, 32, 256), (65, 32, 512), (1920, 32, 7680),
                                             (100, 8, 256), (100, 16, 256), (129, 16, 512), (10, 24, 192)])
def test_create_dumb_pitch_as_amdgpu(dev, card, width, bpp, pitch):
    out, _ = call(dev, card, "MODE_CREATE_DUMB", uapi.drm_mode_create_dumb(width=width, height=3, bpp=bpp))
    assert out.pitch == pitch
    assert out.size == -(-pitch * 3 // 4096) * 4096
    bo = card.bos[out.handle]
    assert bo.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM and bo.size == out.size


def test_dumb_buffer_maps_and_destroys(dev, card):
    out, _ = call(dev, card, "MODE_CREATE_DUMB", uapi.drm_mode_create_dumb(width=640, height=480, bpp=32))
    m, _ = call(dev, card, "MODE_MAP_DUMB", uapi.drm_mode_map_dumb(handle=out.handle))
    g, _ = call(dev, card, "AMDGPU_GEM_MMAP", uapi.drm_amdgpu_gem_mmap(in_=uapi.drm_amdgpu_gem_mmap_in(handle=out.handle)))
    assert m.offset == g.out.addr_ptr != 0
    fails(errno.EINVAL, dev, card, "MODE_MAP_DUMB", uapi.drm_mode_map_dumb(handle=out.handle, pad=1))
    fails(errno.ENOENT, dev, card, "MODE_MAP_DUMB", uapi.drm_mode_map_dumb(handle=999))
    call(dev, card, "MODE_DESTROY_DUMB", uapi.drm_mode_destroy_dumb(handle=out.handle))
    assert out.handle not in card.bos
    fails(errno.EINVAL, dev, card, "MODE_DESTROY_DUMB", uapi.drm_mode_destroy_dumb(handle=out.handle))


@pytest.mark.parametrize("width,height,bpp", [(0, 1, 32), (1, 0, 32), (1, 1, 0), (1, 1, 0xFFFFFFFF),
                                              (0x40000000, 1, 32), (65536, 65536, 32)])
def test_create_dumb_refuses_bad_sizes(dev, card, width, height, bpp):
    fails(errno.EINVAL, dev, card, "MODE_CREATE_DUMB", uapi.drm_mode_create_dumb(width=width, height=height, bpp=bpp))
    assert not card.bos


@pytest.mark.parametrize("cap,value", [(uapi.DRM_CAP_DUMB_BUFFER, 1), (uapi.DRM_CAP_VBLANK_HIGH_CRTC, 1),
                                       (uapi.DRM_CAP_DUMB_PREFERRED_DEPTH, 0), (uapi.DRM_CAP_CURSOR_WIDTH, 64),
                                       (uapi.DRM_CAP_CURSOR_HEIGHT, 64), (uapi.DRM_CAP_ADDFB2_MODIFIERS, 1),
                                       (uapi.DRM_CAP_PAGE_FLIP_TARGET, 1), (uapi.DRM_CAP_CRTC_IN_VBLANK_EVENT, 1),
                                       (uapi.DRM_CAP_ASYNC_PAGE_FLIP, 0), (uapi.DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP, 0)])
def test_kms_caps_as_drm_getcap(dev, card, client, cap, value):
    for f in (card, client):   # GET_CAP is DRM_RENDER_ALLOW
        out, _ = call(dev, f, "GET_CAP", uapi.drm_get_cap(capability=cap))
        assert out.value == value
