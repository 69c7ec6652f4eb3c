"""KMS on a part without display, as amdgpu answers it on an MI100 (Arcturus).

amdgpu registers every device with DRIVER_MODESET and always initialises a mode
config (amdgpu_device_init calls drm_mode_config_init before the IP blocks), but
Arcturus has no display engine: amdgpu_device_asic_has_dc_support() is false for
it, so amdgpu_pci_probe drops DRIVER_ATOMIC, and no IP block adds a CRTC, encoder,
connector or plane. What the DRM core then answers (drm_mode_config.c,
drm_crtc.c, drm_encoder.c, drm_connector.c, drm_plane.c, drm_property.c,
drm_mode_object.c, drm_ioctl.c, drm_dumb_buffers.c):

- MODE_GETRESOURCES: every count 0, framebuffer sizes 0 (no display IP set them);
- MODE_GETPLANERESOURCES: no planes;
- MODE_GETCRTC, GETENCODER, GETCONNECTOR, GETPLANE, GETPROPERTY, GETPROPBLOB and
  OBJ_GETPROPERTIES: ENOENT, there is no object of any id;
- SET_CLIENT_CAP: STEREO_3D, UNIVERSAL_PLANES and ASPECT_RATIO are accepted (0 or
  1), ATOMIC is EOPNOTSUPP (no DRIVER_ATOMIC), WRITEBACK_CONNECTORS and
  CURSOR_PLANE_HOTSPOT are EINVAL (they need ATOMIC first), others EINVAL;
- dumb buffers work (amdgpu_mode_dumb_create): a VRAM BO with amdgpu's pitch
  alignment, mapped through the same fake offsets as GEM_MMAP;
- the KMS capabilities of GET_CAP have drm_getcap's values for an empty mode
  config (kmd/info.py, CAPS).

Every one of these has flags 0 in drm_ioctls[], so renderD128 refuses it with
EACCES (kmd/ioctl.py, drm_ioctl_permit). The KMS ioctls not listed here (SETCRTC,
ADDFB, PAGE_FLIP, ATOMIC...) still get EOPNOTSUPP (kmd/ioctl.py, NO_DISPLAY_NRS).
"""
from __future__ import annotations

import errno

from vgpu import uapi

from .errors import KmdError, check
from .gem import gem_mmap_offset
from .vram import PAGE_SIZE

U32_MAX = 0xFFFFFFFF

# drm_getcap's answers for the mode config amdgpu leaves an Arcturus with: amdgpu
# has dumb_create; preferred_depth, prefer_shadow and async_page_flip stay 0; the
# cursor size defaults to 64x64; modifiers are supported (fb_modifiers_not_supported
# false); no CRTC lacks page_flip_target; no DRIVER_ATOMIC for atomic async flips.
KMS_CAPS = {
    uapi.DRM_CAP_DUMB_BUFFER: 1,
    uapi.DRM_CAP_VBLANK_HIGH_CRTC: 1,
    uapi.DRM_CAP_DUMB_PREFERRED_DEPTH: 0,
    uapi.DRM_CAP_DUMB_PREFER_SHADOW: 0,
    uapi.DRM_CAP_ASYNC_PAGE_FLIP: 0,
    uapi.DRM_CAP_CURSOR_WIDTH: 64,
    uapi.DRM_CAP_CURSOR_HEIGHT: 64,
    uapi.DRM_CAP_ADDFB2_MODIFIERS: 1,
    uapi.DRM_CAP_PAGE_FLIP_TARGET: 1,
    uapi.DRM_CAP_CRTC_IN_VBLANK_EVENT: 1,
    uapi.DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP: 0,
}

_ON_OFF_CAPS = {uapi.DRM_CLIENT_CAP_STEREO_3D: "stereo_3d",
                uapi.DRM_CLIENT_CAP_UNIVERSAL_PLANES: "universal_planes",
                uapi.DRM_CLIENT_CAP_ASPECT_RATIO: "aspect_ratio"}


def get_resources(dev, file, args, extra):
    """drm_mode_getresources: no framebuffers, CRTCs, connectors or encoders, and the
    size limits of a mode config no display IP filled in (all 0)."""
    for name in ("count_fbs", "count_crtcs", "count_connectors", "count_encoders",
                 "min_width", "max_width", "min_height", "max_height"):
        setattr(args, name, 0)


def get_plane_resources(dev, file, args, extra):
    """drm_mode_getplane_res: no planes."""
    args.count_planes = 0


def no_object(kind: str, id_field: str):
    """The handler of a query about one mode object: ENOENT, there are none."""
    def handler(dev, file, args, extra):
        raise KmdError(errno.ENOENT, f"no {kind} {getattr(args, id_field)}: this part has no display")
    handler.__name__ = f"get_{kind.replace(' ', '_')}"
    handler.__doc__ = f"ENOENT for every {kind} id (a part without display has none)."
    return handler


get_crtc = no_object("CRTC", "crtc_id")
get_encoder = no_object("encoder", "encoder_id")
get_connector = no_object("connector", "connector_id")
get_plane = no_object("plane", "plane_id")
get_property = no_object("property", "prop_id")
get_blob = no_object("property blob", "blob_id")
obj_get_properties = no_object("mode object", "obj_id")


def set_client_cap(dev, file, args, extra):
    """drm_setclientcap on a DRIVER_MODESET driver without DRIVER_ATOMIC.
    EINVAL: an unknown capability, a value over 1, WRITEBACK_CONNECTORS or
    CURSOR_PLANE_HOTSPOT (they need ATOMIC). EOPNOTSUPP: ATOMIC."""
    cap, value = args.capability, args.value
    if cap in _ON_OFF_CAPS:
        check(value <= 1, errno.EINVAL, f"client cap {cap}: value {value} is not 0 or 1")
        file.client_caps[_ON_OFF_CAPS[cap]] = bool(value)
        return
    if cap == uapi.DRM_CLIENT_CAP_ATOMIC:
        raise KmdError(errno.EOPNOTSUPP, "no atomic modesetting: this part has no display (no DRIVER_ATOMIC)")
    if cap in (uapi.DRM_CLIENT_CAP_WRITEBACK_CONNECTORS, uapi.DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT):
        raise KmdError(errno.EINVAL, f"client cap {cap} needs DRM_CLIENT_CAP_ATOMIC")
    raise KmdError(errno.EINVAL, f"unknown client cap {cap}")


def _pitch(width: int, cpp: int) -> int:
    """amdgpu_gem_align_pitch: the width rounded up to 256, 128 or 64 pixels."""
    align = {1: 255, 2: 127}.get(cpp, 63)
    return ((width + align) & ~align) * cpp


def create_dumb(dev, file, args, extra):
    """drm_mode_create_dumb's checks, then amdgpu_mode_dumb_create: a VRAM BO of
    pitch * height bytes (page-aligned). EINVAL: a zero or overflowing width,
    height or bpp. ENOMEM: VRAM and GTT are full."""
    check(args.width and args.height and args.bpp, errno.EINVAL, "dumb buffer: width, height and bpp must be nonzero")
    check(args.bpp <= U32_MAX - 8, errno.EINVAL, f"dumb buffer: bpp {args.bpp} overflows")
    cpp = -(-args.bpp // 8)
    check(cpp <= U32_MAX // args.width, errno.EINVAL, "dumb buffer: width * cpp overflows")
    stride = cpp * args.width
    check(args.height <= U32_MAX // stride, errno.EINVAL, "dumb buffer: height * stride overflows")
    check(-(-args.height * stride // PAGE_SIZE) * PAGE_SIZE <= U32_MAX, errno.EINVAL, "dumb buffer: size overflows")
    pitch = _pitch(args.width, cpp)
    size = -(-pitch * args.height // PAGE_SIZE) * PAGE_SIZE
    bo = dev.create_bo(file, size, PAGE_SIZE, uapi.AMDGPU_GEM_DOMAIN_VRAM,
                       uapi.AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED | uapi.AMDGPU_GEM_CREATE_VRAM_CLEARED)
    args.handle = file.add_bo(bo)
    args.pitch, args.size = pitch, size


def map_dumb(dev, file, args, extra):
    """drm_mode_mmap_dumb_ioctl: the fake offset to mmap the BO at, as GEM_MMAP's.
    EINVAL: nonzero pad. ENOENT: bad handle. EPERM: as GEM_MMAP."""
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    args.offset = gem_mmap_offset(file, args.handle)


def destroy_dumb(dev, file, args, extra):
    """drm_gem_handle_delete: EINVAL for a handle the file does not have."""
    check(args.handle in file.bos, errno.EINVAL, f"no GEM handle {args.handle}")
    dev.close_handle(file, args.handle)
