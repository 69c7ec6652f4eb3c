"""The vgpu uapi: every request number, struct and flag, in one place.

This module mirrors ``include/uapi/drm/drm.h`` and ``amdgpu_drm.h`` as shipped by
Debian's ``libdrm-dev`` (``/usr/include/libdrm/``): same names, same numbers, same
layouts (little-endian, natural C alignment, x86-64/LP64 sizes). A C field called
``in`` is ``in_`` here; every other name is the C name. Anonymous C structs get a
private Python class named ``_<parent>_<member>``; anonymous C unions are ctypes
``_anonymous_`` members, so ``info.query_hw_ip`` works as in C.
``tests/test_uapi.py`` compiles a C program against ``include/vgpu_drm.h`` and
checks every size, offset and number defined here against the real headers.

Order follows the headers: ioctl numbering helpers, command numbers, structs
(each with its flags right under it), then the ``DRM_IOCTL_*`` request codes and
the ``IOCTLS`` table. (The C headers put the codes before the structs; Python
needs a struct defined before ``sizeof`` can encode it into a code.)

Pointer fields (``_u64 ..._ptr``, ``char *``) are never dereferenced across the
vgpu control-file protocol: the client sends the pointed-to data inline after
the struct ("flattening", docs/design.md section 3) and the reply carries the data
the kernel writes back. Each ioctl's struct docstring states what goes where.

Framing of one ioctl on ``MOUNT/dev/dri/card0`` or ``renderD128``::

    write(fd, vgpu_request_header + arg struct + extra)   # errors: write() fails
    read(fd, buf)  -> vgpu_reply_header + arg struct + extra   # errors: read() fails
"""

from __future__ import annotations

import ctypes
from ctypes import c_char, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64
from typing import NamedTuple

# Fixed-width aliases named like the kernel's __u32..., so field lists read like the
# header (one underscore: class bodies would name-mangle two).
_u8 = c_uint8
_u16 = c_uint16
_u32 = c_uint32
_s32 = c_int32
_u64 = c_uint64
_s64 = c_int64


def _from_bytes(cls, data: bytes | bytearray | memoryview):
    """Build from ``data``; a short buffer is zero-extended, a long one cut.

    Like Linux ``drm_ioctl``, which copies ``min(user size, kernel size)``
    bytes and zero-fills the rest.
    """
    size = ctypes.sizeof(cls)
    raw = bytes(data[:size])
    return cls.from_buffer_copy(raw.ljust(size, b"\0"))


class _Struct(ctypes.LittleEndianStructure):
    """Base of every uapi struct: little-endian, natural alignment."""

    from_bytes = classmethod(_from_bytes)


class _Union(ctypes.LittleEndianUnion):
    """Base of every uapi union (see :class:`_Struct`)."""

    from_bytes = classmethod(_from_bytes)


# ---------------------------------------------------------------------------
# ioctl request numbering (include/uapi/asm-generic/ioctl.h)
# ---------------------------------------------------------------------------
_IOC_NRBITS = 8
_IOC_TYPEBITS = 8
_IOC_SIZEBITS = 14
_IOC_DIRBITS = 2

_IOC_NRMASK = (1 << _IOC_NRBITS) - 1
_IOC_TYPEMASK = (1 << _IOC_TYPEBITS) - 1
_IOC_SIZEMASK = (1 << _IOC_SIZEBITS) - 1
_IOC_DIRMASK = (1 << _IOC_DIRBITS) - 1

_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = _IOC_NRSHIFT + _IOC_NRBITS
_IOC_SIZESHIFT = _IOC_TYPESHIFT + _IOC_TYPEBITS
_IOC_DIRSHIFT = _IOC_SIZESHIFT + _IOC_SIZEBITS

_IOC_NONE = 0
_IOC_WRITE = 1
_IOC_READ = 2


def _IOC(direction: int, type_: int, nr: int, size: int) -> int:
    """Encode an ioctl request number exactly as Linux ``_IOC`` does."""
    if not 0 <= size <= _IOC_SIZEMASK:
        raise ValueError(f"ioctl argument size {size} does not fit in {_IOC_SIZEBITS} bits")
    return ((direction << _IOC_DIRSHIFT) | (type_ << _IOC_TYPESHIFT)
            | (nr << _IOC_NRSHIFT) | (size << _IOC_SIZESHIFT))


def _IO(type_: int, nr: int) -> int:
    return _IOC(_IOC_NONE, type_, nr, 0)


def _IOR(type_: int, nr: int, struct) -> int:
    return _IOC(_IOC_READ, type_, nr, ctypes.sizeof(struct))


def _IOW(type_: int, nr: int, struct) -> int:
    return _IOC(_IOC_WRITE, type_, nr, ctypes.sizeof(struct))


def _IOWR(type_: int, nr: int, struct) -> int:
    return _IOC(_IOC_READ | _IOC_WRITE, type_, nr, ctypes.sizeof(struct))


def _IOC_DIR(request: int) -> int:
    return (request >> _IOC_DIRSHIFT) & _IOC_DIRMASK


def _IOC_TYPE(request: int) -> int:
    return (request >> _IOC_TYPESHIFT) & _IOC_TYPEMASK


def _IOC_NR(request: int) -> int:
    return (request >> _IOC_NRSHIFT) & _IOC_NRMASK


def _IOC_SIZE(request: int) -> int:
    return (request >> _IOC_SIZESHIFT) & _IOC_SIZEMASK


DRM_IOCTL_BASE = ord("d")
DRM_COMMAND_BASE = 0x40
DRM_COMMAND_END = 0xA0
# drm.h's display ioctl numbers: WAIT_VBLANK, and the KMS range from
# DRM_IOCTL_MODE_GETRESOURCES (0xA0, = DRM_COMMAND_END) to DRM_IOCTL_MODE_GETFB2 (0xCE)
DRM_WAIT_VBLANK_NR = 0x3A
DRM_MODE_NR_FIRST, DRM_MODE_NR_LAST = 0xA0, 0xCE


def DRM_IO(nr: int) -> int:
    return _IO(DRM_IOCTL_BASE, nr)


def DRM_IOR(nr: int, struct) -> int:
    return _IOR(DRM_IOCTL_BASE, nr, struct)


def DRM_IOW(nr: int, struct) -> int:
    return _IOW(DRM_IOCTL_BASE, nr, struct)


def DRM_IOWR(nr: int, struct) -> int:
    return _IOWR(DRM_IOCTL_BASE, nr, struct)


# ---------------------------------------------------------------------------
# Command numbers
# ---------------------------------------------------------------------------
# Core DRM (drm.h) numbers appear only in the DRM_IOCTL_* codes, as in the header.

# amdgpu driver commands (amdgpu_drm.h), offsets from DRM_COMMAND_BASE.
DRM_AMDGPU_GEM_CREATE = 0x00
DRM_AMDGPU_GEM_MMAP = 0x01
DRM_AMDGPU_CTX = 0x02
DRM_AMDGPU_BO_LIST = 0x03
DRM_AMDGPU_CS = 0x04
DRM_AMDGPU_INFO = 0x05
DRM_AMDGPU_GEM_METADATA = 0x06
DRM_AMDGPU_GEM_WAIT_IDLE = 0x07
DRM_AMDGPU_GEM_VA = 0x08
DRM_AMDGPU_WAIT_CS = 0x09
DRM_AMDGPU_GEM_OP = 0x10
DRM_AMDGPU_GEM_USERPTR = 0x11
DRM_AMDGPU_WAIT_FENCES = 0x12
DRM_AMDGPU_VM = 0x13
DRM_AMDGPU_FENCE_TO_HANDLE = 0x14
DRM_AMDGPU_SCHED = 0x15
# User queues (Linux 6.16 amdgpu_drm.h; after libdrm 2.4.114, see include/vgpu_drm.h).
DRM_AMDGPU_USERQ = 0x16
DRM_AMDGPU_USERQ_SIGNAL = 0x17
DRM_AMDGPU_USERQ_WAIT = 0x18


# ===========================================================================
# Structs: core DRM (drm.h)
# ===========================================================================

class drm_version(_Struct):
    """DRM_IOCTL_VERSION: driver name and version.

    In: ``name_len``, ``date_len``, ``desc_len`` (buffer sizes; pointers ignored).
    Out, as Linux ``drm_copy_field``: each ``*_len`` set to the string's true
    length, and as reply extra data the name, date and desc strings in that
    order, each ``min(requested *_len, true length)`` bytes, no NUL. Clients
    (like libdrm's drmGetVersion) ask once with zero lengths, then again with
    the true lengths. Errors: none beyond framing.
    """
    _fields_ = [
        ("version_major", c_int32),
        ("version_minor", c_int32),
        ("version_patchlevel", c_int32),
        ("name_len", _u64),     # __kernel_size_t
        ("name", _u64),         # char *
        ("date_len", _u64),
        ("date", _u64),
        ("desc_len", _u64),
        ("desc", _u64),
    ]


class drm_client(_Struct):
    """DRM_IOCTL_GET_CLIENT: in ``idx``; out ``auth``, ``pid``, ``uid``,
    ``magic``, ``iocs``. As Linux drm_getclient (drm_ioctl.c), only ``idx`` 0
    (the caller) is answered: ``auth`` 1 for an authenticated (card0) file,
    ``pid`` the file's pid, ``uid`` the overflow uid 65534, ``magic`` and
    ``iocs`` 0. libdrm's amdgpu_get_auth asks it on a primary node.
    Errors: EINVAL (idx not 0), EACCES (render node: no DRM_RENDER_ALLOW).
    """
    _fields_ = [
        ("idx", c_int32),
        ("auth", c_int32),
        ("pid", _u64),          # unsigned long
        ("uid", _u64),
        ("magic", _u64),
        ("iocs", _u64),
    ]


class drm_auth(_Struct):
    """DRM_IOCTL_GET_MAGIC (out ``magic``, this file's, from 1) and
    DRM_IOCTL_AUTH_MAGIC (in ``magic``: the master authenticates the file that got
    it). Errors: EACCES (render node; AUTH_MAGIC by a file not the master),
    EINVAL (AUTH_MAGIC of a magic the master's map does not hold).
    """
    _fields_ = [("magic", _u32)]    # drm_magic_t: unsigned int


class _drm_no_arg(_Struct):
    """The argument of a DRM_IO request (SET_MASTER, DROP_MASTER): none, 0 bytes.
    Private: C has no such struct."""
    _fields_ = []


class drm_gem_close(_Struct):
    """DRM_IOCTL_GEM_CLOSE: drop a GEM handle. ``pad`` must be 0.

    Errors: EINVAL (nonzero pad, handle 0), ENOENT (unknown handle).
    """
    _fields_ = [("handle", _u32), ("pad", _u32)]


class drm_gem_flink(_Struct):
    """DRM_IOCTL_GEM_FLINK: in ``handle``; out ``name``, the BO's device-global name
    (from 1, the same on every call while a handle names the BO).
    Errors: ENOENT (unknown handle), EACCES (render node, unauthenticated file).
    """
    _fields_ = [("handle", _u32), ("name", _u32)]


class drm_gem_open(_Struct):
    """DRM_IOCTL_GEM_OPEN: in ``name``; out ``handle``, a new handle of this file to
    the named BO, and ``size``, the BO's size in bytes.
    Errors: ENOENT (no BO has this name), EACCES (render node, unauthenticated file),
    ENOSPC (the file's handle cap).
    """
    _fields_ = [("name", _u32), ("handle", _u32), ("size", _u64)]


class drm_get_cap(_Struct):
    """DRM_IOCTL_GET_CAP: in ``capability`` (DRM_CAP_*), out ``value``.

    Errors: EINVAL (unknown capability).
    """
    _fields_ = [("capability", _u64), ("value", _u64)]


DRM_CAP_DUMB_BUFFER = 0x1
DRM_CAP_VBLANK_HIGH_CRTC = 0x2
DRM_CAP_DUMB_PREFERRED_DEPTH = 0x3
DRM_CAP_DUMB_PREFER_SHADOW = 0x4
DRM_CAP_PRIME = 0x5
DRM_PRIME_CAP_IMPORT = 0x1
DRM_PRIME_CAP_EXPORT = 0x2
DRM_CAP_TIMESTAMP_MONOTONIC = 0x6
DRM_CAP_ASYNC_PAGE_FLIP = 0x7
DRM_CAP_CURSOR_WIDTH = 0x8
DRM_CAP_CURSOR_HEIGHT = 0x9
DRM_CAP_ADDFB2_MODIFIERS = 0x10
DRM_CAP_PAGE_FLIP_TARGET = 0x11
DRM_CAP_CRTC_IN_VBLANK_EVENT = 0x12
DRM_CAP_SYNCOBJ = 0x13
DRM_CAP_SYNCOBJ_TIMELINE = 0x14


DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP = 0x15

# drm.h's client capabilities (DRM_IOCTL_SET_CLIENT_CAP)
DRM_CLIENT_CAP_STEREO_3D = 1
DRM_CLIENT_CAP_UNIVERSAL_PLANES = 2
DRM_CLIENT_CAP_ATOMIC = 3
DRM_CLIENT_CAP_ASPECT_RATIO = 4
DRM_CLIENT_CAP_WRITEBACK_CONNECTORS = 5
DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT = 6


class drm_set_client_cap(_Struct):
    """DRM_IOCTL_SET_CLIENT_CAP: in ``capability`` (DRM_CLIENT_CAP_*) and ``value``."""
    _fields_ = [("capability", _u64), ("value", _u64)]


# ---------------------------------------------------------------------------
# drm_mode.h: the KMS queries a display-less device answers (kmd/kms.py)
# ---------------------------------------------------------------------------
class drm_mode_card_res(_Struct):
    """DRM_IOCTL_MODE_GETRESOURCES: id arrays (``*_ptr``, ``count_*`` entries each)
    and the framebuffer size limits."""
    _fields_ = [("fb_id_ptr", _u64), ("crtc_id_ptr", _u64), ("connector_id_ptr", _u64),
                ("encoder_id_ptr", _u64), ("count_fbs", _u32), ("count_crtcs", _u32),
                ("count_connectors", _u32), ("count_encoders", _u32), ("min_width", _u32),
                ("max_width", _u32), ("min_height", _u32), ("max_height", _u32)]


class drm_mode_get_plane_res(_Struct):
    """DRM_IOCTL_MODE_GETPLANERESOURCES: ``count_planes`` ids at ``plane_id_ptr``."""
    _fields_ = [("plane_id_ptr", _u64), ("count_planes", _u32)]   # (4 bytes of tail padding)


class drm_mode_modeinfo(_Struct):
    _fields_ = [("clock", _u32), ("hdisplay", c_uint16), ("hsync_start", c_uint16),
                ("hsync_end", c_uint16), ("htotal", c_uint16), ("hskew", c_uint16),
                ("vdisplay", c_uint16), ("vsync_start", c_uint16), ("vsync_end", c_uint16),
                ("vtotal", c_uint16), ("vscan", c_uint16), ("vrefresh", _u32), ("flags", _u32),
                ("type", _u32), ("name", c_char * 32)]


class drm_mode_crtc(_Struct):
    """DRM_IOCTL_MODE_GETCRTC (in ``crtc_id``)."""
    _fields_ = [("set_connectors_ptr", _u64), ("count_connectors", _u32), ("crtc_id", _u32),
                ("fb_id", _u32), ("x", _u32), ("y", _u32), ("gamma_size", _u32),
                ("mode_valid", _u32), ("mode", drm_mode_modeinfo)]


class drm_mode_get_encoder(_Struct):
    """DRM_IOCTL_MODE_GETENCODER (in ``encoder_id``)."""
    _fields_ = [("encoder_id", _u32), ("encoder_type", _u32), ("crtc_id", _u32),
                ("possible_crtcs", _u32), ("possible_clones", _u32)]


class drm_mode_get_connector(_Struct):
    """DRM_IOCTL_MODE_GETCONNECTOR (in ``connector_id``)."""
    _fields_ = [("encoders_ptr", _u64), ("modes_ptr", _u64), ("props_ptr", _u64),
                ("prop_values_ptr", _u64), ("count_modes", _u32), ("count_props", _u32),
                ("count_encoders", _u32), ("encoder_id", _u32), ("connector_id", _u32),
                ("connector_type", _u32), ("connector_type_id", _u32), ("connection", _u32),
                ("mm_width", _u32), ("mm_height", _u32), ("subpixel", _u32), ("pad", _u32)]


class drm_mode_get_property(_Struct):
    """DRM_IOCTL_MODE_GETPROPERTY (in ``prop_id``)."""
    _fields_ = [("values_ptr", _u64), ("enum_blob_ptr", _u64), ("prop_id", _u32), ("flags", _u32),
                ("name", c_char * 32), ("count_values", _u32), ("count_enum_blobs", _u32)]


class drm_mode_get_blob(_Struct):
    """DRM_IOCTL_MODE_GETPROPBLOB (in ``blob_id``)."""
    _fields_ = [("blob_id", _u32), ("length", _u32), ("data", _u64)]


class drm_mode_create_dumb(_Struct):
    """DRM_IOCTL_MODE_CREATE_DUMB: in ``height``, ``width``, ``bpp``, ``flags``; out
    ``handle``, ``pitch``, ``size``."""
    _fields_ = [("height", _u32), ("width", _u32), ("bpp", _u32), ("flags", _u32),
                ("handle", _u32), ("pitch", _u32), ("size", _u64)]


class drm_mode_map_dumb(_Struct):
    """DRM_IOCTL_MODE_MAP_DUMB: in ``handle``; out ``offset``, the fake mmap offset."""
    _fields_ = [("handle", _u32), ("pad", _u32), ("offset", _u64)]


class drm_mode_destroy_dumb(_Struct):
    """DRM_IOCTL_MODE_DESTROY_DUMB: in ``handle``."""
    _fields_ = [("handle", _u32)]


class drm_mode_get_plane(_Struct):
    """DRM_IOCTL_MODE_GETPLANE (in ``plane_id``)."""
    _fields_ = [("plane_id", _u32), ("crtc_id", _u32), ("fb_id", _u32), ("possible_crtcs", _u32),
                ("gamma_size", _u32), ("count_format_types", _u32), ("format_type_ptr", _u64)]


class drm_mode_obj_get_properties(_Struct):
    """DRM_IOCTL_MODE_OBJ_GETPROPERTIES (in ``obj_id``, ``obj_type``)."""
    _fields_ = [("props_ptr", _u64), ("prop_values_ptr", _u64), ("count_props", _u32),
                ("obj_id", _u32), ("obj_type", _u32)]   # (4 bytes of tail padding)


class drm_prime_handle(_Struct):
    """DRM_IOCTL_PRIME_HANDLE_TO_FD / PRIME_FD_TO_HANDLE: share a BO.

    HANDLE_TO_FD: in ``handle``, ``flags`` (DRM_CLOEXEC | DRM_RDWR); out ``fd``,
    on vgpu a positive 31-bit token naming ``MOUNT/prime/<token-hex>``.
    FD_TO_HANDLE: in ``fd`` (the token); out ``handle``.
    Errors: EINVAL (bad flags), ENOENT (unknown handle or token).
    """
    _fields_ = [("handle", _u32), ("flags", _u32), ("fd", _s32)]


DRM_RDWR = 0o2          # O_RDWR on Linux
DRM_CLOEXEC = 0o2000000  # O_CLOEXEC on Linux (x86, arm, generic)


class drm_syncobj_create(_Struct):
    """DRM_IOCTL_SYNCOBJ_CREATE: out ``handle``. Errors: EINVAL (bad flags)."""
    _fields_ = [("handle", _u32), ("flags", _u32)]


DRM_SYNCOBJ_CREATE_SIGNALED = 1 << 0


class drm_syncobj_destroy(_Struct):
    """DRM_IOCTL_SYNCOBJ_DESTROY. Errors: EINVAL (pad), ENOENT (handle)."""
    _fields_ = [("handle", _u32), ("pad", _u32)]


class drm_syncobj_handle(_Struct):
    """DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD / FD_TO_HANDLE.

    ``fd`` is a token naming ``MOUNT/sync/<token-hex>`` (a poll()-able sync
    file with EXPORT_SYNC_FILE, else the syncobj itself).
    Errors: EINVAL (bad flags, pad), ENOENT (unknown handle or token).
    """
    _fields_ = [("handle", _u32), ("flags", _u32), ("fd", _s32), ("pad", _u32)]


DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE = 1 << 0
DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE = 1 << 0


class drm_syncobj_transfer(_Struct):
    """DRM_IOCTL_SYNCOBJ_TRANSFER: copy the fence at ``src_point`` of one
    syncobj to ``dst_point`` of another (point 0: binary syncobj).
    Errors: EINVAL (flags, pad), ENOENT (handle)."""
    _fields_ = [
        ("src_handle", _u32),
        ("dst_handle", _u32),
        ("src_point", _u64),
        ("dst_point", _u64),
        ("flags", _u32),
        ("pad", _u32),
    ]


class drm_syncobj_wait(_Struct):
    """DRM_IOCTL_SYNCOBJ_WAIT: wait for ``count_handles`` binary syncobjs.

    Extra: the u32 handle array. ``timeout_nsec`` is absolute CLOCK_MONOTONIC.
    Out: ``first_signaled`` (wait-any). The read() fails with ETIME on timeout;
    the write() with EINVAL (flags, pad, count 0) or ENOENT (handle).
    """
    _fields_ = [
        ("handles", _u64),
        ("timeout_nsec", _s64),
        ("count_handles", _u32),
        ("flags", _u32),
        ("first_signaled", _u32),
        ("pad", _u32),
    ]


DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL = 1 << 0
DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT = 1 << 1
DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE = 1 << 2


class drm_syncobj_timeline_wait(_Struct):
    """DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT: as SYNCOBJ_WAIT with a point per handle.

    Extra: the u32 handle array, then the u64 point array.
    """
    _fields_ = [
        ("handles", _u64),
        ("points", _u64),
        ("timeout_nsec", _s64),
        ("count_handles", _u32),
        ("flags", _u32),
        ("first_signaled", _u32),
        ("pad", _u32),
    ]


class drm_syncobj_array(_Struct):
    """DRM_IOCTL_SYNCOBJ_RESET / SYNCOBJ_SIGNAL. Extra: the u32 handle array.
    Errors: EINVAL (pad, count 0), ENOENT (handle)."""
    _fields_ = [("handles", _u64), ("count_handles", _u32), ("pad", _u32)]


class drm_syncobj_timeline_array(_Struct):
    """DRM_IOCTL_SYNCOBJ_QUERY / SYNCOBJ_TIMELINE_SIGNAL.

    Extra: the u32 handle array, then the u64 point array (QUERY: zeros; its
    reply extra is the point array with the current points).
    """
    _fields_ = [
        ("handles", _u64),
        ("points", _u64),
        ("count_handles", _u32),
        ("flags", _u32),
    ]


DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED = 1 << 0


# ===========================================================================
# Structs: amdgpu (amdgpu_drm.h)
# ===========================================================================

# Memory domains.
AMDGPU_GEM_DOMAIN_CPU = 0x1
AMDGPU_GEM_DOMAIN_GTT = 0x2
AMDGPU_GEM_DOMAIN_VRAM = 0x4
AMDGPU_GEM_DOMAIN_GDS = 0x8
AMDGPU_GEM_DOMAIN_GWS = 0x10
AMDGPU_GEM_DOMAIN_OA = 0x20
AMDGPU_GEM_DOMAIN_MASK = (AMDGPU_GEM_DOMAIN_CPU | AMDGPU_GEM_DOMAIN_GTT
                          | AMDGPU_GEM_DOMAIN_VRAM | AMDGPU_GEM_DOMAIN_GDS
                          | AMDGPU_GEM_DOMAIN_GWS | AMDGPU_GEM_DOMAIN_OA)
# Doorbell pages of user queues (Linux 6.16; libdrm 2.4.114's mask predates it).
AMDGPU_GEM_DOMAIN_DOORBELL = 0x40


class drm_amdgpu_gem_create_in(_Struct):
    _fields_ = [
        ("bo_size", _u64),
        ("alignment", _u64),
        ("domains", _u64),
        ("domain_flags", _u64),
    ]


# domain_flags
AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED = 1 << 0
AMDGPU_GEM_CREATE_NO_CPU_ACCESS = 1 << 1
AMDGPU_GEM_CREATE_CPU_GTT_USWC = 1 << 2
AMDGPU_GEM_CREATE_VRAM_CLEARED = 1 << 3
AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS = 1 << 5
AMDGPU_GEM_CREATE_VM_ALWAYS_VALID = 1 << 6
AMDGPU_GEM_CREATE_EXPLICIT_SYNC = 1 << 7
AMDGPU_GEM_CREATE_CP_MQD_GFX9 = 1 << 8
AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE = 1 << 9
AMDGPU_GEM_CREATE_ENCRYPTED = 1 << 10
AMDGPU_GEM_CREATE_PREEMPTIBLE = 1 << 11


class drm_amdgpu_gem_create_out(_Struct):
    _fields_ = [("handle", _u32), ("_pad", _u32)]


class drm_amdgpu_gem_create(_Union):
    """DRM_IOCTL_AMDGPU_GEM_CREATE: allocate a BO, return a GEM handle.

    Domains VRAM, GTT, and the on-chip GDS (size in bytes), GWS and OA (size in
    entries); an on-chip BO is NO_CPU_ACCESS (amdgpu_gem_create_ioctl).
    Errors: EINVAL (size 0, alignment not a power of two, unknown domain or
    flags, an on-chip domain with VM_ALWAYS_VALID), ENOMEM (no space in the domain).
    """
    _fields_ = [("in_", drm_amdgpu_gem_create_in), ("out", drm_amdgpu_gem_create_out)]


AMDGPU_BO_LIST_OP_CREATE = 0
AMDGPU_BO_LIST_OP_DESTROY = 1
AMDGPU_BO_LIST_OP_UPDATE = 2


class drm_amdgpu_bo_list_in(_Struct):
    _fields_ = [
        ("operation", _u32),
        ("list_handle", _u32),
        ("bo_number", _u32),
        ("bo_info_size", _u32),
        ("bo_info_ptr", _u64),
    ]


class drm_amdgpu_bo_list_entry(_Struct):
    _fields_ = [("bo_handle", _u32), ("bo_priority", _u32)]


class drm_amdgpu_bo_list_out(_Struct):
    _fields_ = [("list_handle", _u32), ("_pad", _u32)]


class drm_amdgpu_bo_list(_Union):
    """DRM_IOCTL_AMDGPU_BO_LIST: create/update/destroy a residency list.

    Extra: ``bo_number`` entries of ``bo_info_size`` bytes
    (drm_amdgpu_bo_list_entry). Out: ``list_handle`` (CREATE).
    Errors: EINVAL (operation, entry size), ENOENT (list or BO handle).
    """
    _fields_ = [("in_", drm_amdgpu_bo_list_in), ("out", drm_amdgpu_bo_list_out)]


# Context operations.
AMDGPU_CTX_OP_ALLOC_CTX = 1
AMDGPU_CTX_OP_FREE_CTX = 2
AMDGPU_CTX_OP_QUERY_STATE = 3
AMDGPU_CTX_OP_QUERY_STATE2 = 4
AMDGPU_CTX_OP_GET_STABLE_PSTATE = 5
AMDGPU_CTX_OP_SET_STABLE_PSTATE = 6

# GPU reset status (QUERY_STATE reset_status).
AMDGPU_CTX_NO_RESET = 0
AMDGPU_CTX_GUILTY_RESET = 1
AMDGPU_CTX_INNOCENT_RESET = 2
AMDGPU_CTX_UNKNOWN_RESET = 3

# QUERY_STATE2 flags.
AMDGPU_CTX_QUERY2_FLAGS_RESET = 1 << 0
AMDGPU_CTX_QUERY2_FLAGS_VRAMLOST = 1 << 1
AMDGPU_CTX_QUERY2_FLAGS_GUILTY = 1 << 2
AMDGPU_CTX_QUERY2_FLAGS_RAS_CE = 1 << 3
AMDGPU_CTX_QUERY2_FLAGS_RAS_UE = 1 << 4

# Context priority; above NORMAL needs CAP_SYS_NICE or DRM master.
AMDGPU_CTX_PRIORITY_UNSET = -2048
AMDGPU_CTX_PRIORITY_VERY_LOW = -1023
AMDGPU_CTX_PRIORITY_LOW = -512
AMDGPU_CTX_PRIORITY_NORMAL = 0
AMDGPU_CTX_PRIORITY_HIGH = 512
AMDGPU_CTX_PRIORITY_VERY_HIGH = 1023

AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK = 0xF
AMDGPU_CTX_STABLE_PSTATE_NONE = 0
AMDGPU_CTX_STABLE_PSTATE_STANDARD = 1
AMDGPU_CTX_STABLE_PSTATE_MIN_SCLK = 2
AMDGPU_CTX_STABLE_PSTATE_MIN_MCLK = 3
AMDGPU_CTX_STABLE_PSTATE_PEAK = 4


class drm_amdgpu_ctx_in(_Struct):
    _fields_ = [
        ("op", _u32),
        ("flags", _u32),
        ("ctx_id", _u32),
        ("priority", _s32),
    ]


class _drm_amdgpu_ctx_out_alloc(_Struct):
    _fields_ = [("ctx_id", _u32), ("_pad", _u32)]


class _drm_amdgpu_ctx_out_state(_Struct):
    _fields_ = [("flags", _u64), ("hangs", _u32), ("reset_status", _u32)]


class _drm_amdgpu_ctx_out_pstate(_Struct):
    _fields_ = [("flags", _u32), ("_pad", _u32)]


class drm_amdgpu_ctx_out(_Union):
    _fields_ = [
        ("alloc", _drm_amdgpu_ctx_out_alloc),
        ("state", _drm_amdgpu_ctx_out_state),
        ("pstate", _drm_amdgpu_ctx_out_pstate),
    ]


class drm_amdgpu_ctx(_Union):
    """DRM_IOCTL_AMDGPU_CTX: ALLOC_CTX (``priority``) -> ``out.alloc.ctx_id``;
    FREE_CTX; QUERY_STATE/QUERY_STATE2 -> ``out.state`` (QUERY2 flags);
    GET_STABLE_PSTATE -> ``out.pstate.flags``; SET_STABLE_PSTATE (``in.flags``:
    AMDGPU_CTX_STABLE_PSTATE_*).

    Errors: EINVAL (op, priority, flags, a stable-pstate op on an unknown
    ctx_id), ENOENT (ctx_id of the other ops), EACCES (priority above NORMAL on
    an unprivileged file), EBUSY (SET_STABLE_PSTATE while another context holds
    the device's stable pstate).
    """
    _fields_ = [("in_", drm_amdgpu_ctx_in), ("out", drm_amdgpu_ctx_out)]


AMDGPU_VM_OP_RESERVE_VMID = 1
AMDGPU_VM_OP_UNRESERVE_VMID = 2


class drm_amdgpu_vm_in(_Struct):
    _fields_ = [("op", _u32), ("flags", _u32)]


class drm_amdgpu_vm_out(_Struct):
    _fields_ = [("flags", _u64)]


class drm_amdgpu_vm(_Union):
    """DRM_IOCTL_AMDGPU_VM: RESERVE_VMID / UNRESERVE_VMID (amdgpu_vm_ioctl): one
    file of the device at a time may hold the reserved VMID; reserving twice is
    a no-op, unreserving waits (at most 2 s) for the file's jobs. Errors: EINVAL
    (unknown op, nonzero flags, the VMID is reserved by another file)."""
    _fields_ = [("in_", drm_amdgpu_vm_in), ("out", drm_amdgpu_vm_out)]


AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE = 1
AMDGPU_SCHED_OP_CONTEXT_PRIORITY_OVERRIDE = 2


class drm_amdgpu_sched_in(_Struct):
    _fields_ = [
        ("op", _u32),
        ("fd", _u32),
        ("priority", _s32),
        ("ctx_id", _u32),
    ]


class drm_amdgpu_sched(_Union):
    """DRM_IOCTL_AMDGPU_SCHED: override a process's or context's priority
    (DRM master only). Errors: EINVAL (op, priority), EACCES."""
    _fields_ = [("in_", drm_amdgpu_sched_in)]


AMDGPU_GEM_USERPTR_READONLY = 1 << 0
AMDGPU_GEM_USERPTR_ANONONLY = 1 << 1
AMDGPU_GEM_USERPTR_VALIDATE = 1 << 2
AMDGPU_GEM_USERPTR_REGISTER = 1 << 3


class drm_amdgpu_gem_userptr(_Struct):
    """DRM_IOCTL_AMDGPU_GEM_USERPTR: not supported by vgpu (host memory of
    another process cannot back a BO through FUSE); fails with ENOTTY."""
    _fields_ = [
        ("addr", _u64),
        ("size", _u64),
        ("flags", _u32),
        ("handle", _u32),
    ]


AMDGPU_GEM_METADATA_OP_SET_METADATA = 1
AMDGPU_GEM_METADATA_OP_GET_METADATA = 2


class _drm_amdgpu_gem_metadata_data(_Struct):
    _fields_ = [
        ("flags", _u64),
        ("tiling_info", _u64),
        ("data_size_bytes", _u32),
        ("data", _u32 * 64),
    ]


class drm_amdgpu_gem_metadata(_Struct):
    """DRM_IOCTL_AMDGPU_GEM_METADATA: set/get a BO's tiling flags and opaque UMD
    metadata (amdgpu_gem_metadata_ioctl). SET_METADATA stores
    ``data.tiling_info`` and ``data.data_size_bytes`` (at most 256) bytes of
    ``data.data`` with ``data.flags``; GET_METADATA returns them (the rest of
    ``data.data`` comes back as sent). Errors: ENOENT (handle), EINVAL (SET with
    data_size_bytes over 256). Any other op does nothing and succeeds, as in Linux."""
    _fields_ = [
        ("handle", _u32),
        ("op", _u32),
        ("data", _drm_amdgpu_gem_metadata_data),
    ]


class drm_amdgpu_gem_mmap_in(_Struct):
    _fields_ = [("handle", _u32), ("_pad", _u32)]


class drm_amdgpu_gem_mmap_out(_Struct):
    _fields_ = [("addr_ptr", _u64)]


class drm_amdgpu_gem_mmap(_Union):
    """DRM_IOCTL_AMDGPU_GEM_MMAP: out ``addr_ptr``, the fake offset; the BO
    file is ``MOUNT/bo/<offset lowercase hex>``.
    Errors: EINVAL (pad), ENOENT (handle), EPERM (NO_CPU_ACCESS BO)."""
    _fields_ = [("in_", drm_amdgpu_gem_mmap_in), ("out", drm_amdgpu_gem_mmap_out)]


class drm_amdgpu_gem_wait_idle_in(_Struct):
    _fields_ = [("handle", _u32), ("flags", _u32), ("timeout", _u64)]


class drm_amdgpu_gem_wait_idle_out(_Struct):
    _fields_ = [("status", _u32), ("domain", _u32)]


class drm_amdgpu_gem_wait_idle(_Union):
    """DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE: wait until no job uses the BO.

    ``timeout`` is absolute CLOCK_MONOTONIC ns. Out: ``status`` 0 idle, 1 busy
    (timed out), ``domain``. Errors: EINVAL (flags), ENOENT (handle).
    """
    _fields_ = [("in_", drm_amdgpu_gem_wait_idle_in), ("out", drm_amdgpu_gem_wait_idle_out)]


class drm_amdgpu_wait_cs_in(_Struct):
    _fields_ = [
        ("handle", _u64),
        ("timeout", _u64),
        ("ip_type", _u32),
        ("ip_instance", _u32),
        ("ring", _u32),
        ("ctx_id", _u32),
    ]


class drm_amdgpu_wait_cs_out(_Struct):
    _fields_ = [("status", _u64)]


class drm_amdgpu_wait_cs(_Union):
    """DRM_IOCTL_AMDGPU_WAIT_CS: wait for sequence number ``handle`` of a
    (ctx, ip, ring). ``timeout`` absolute ns. Out: ``status`` 0 done, 1 busy.
    Errors: EINVAL (ip/ring), ENOENT (ctx), ECANCELED (context was reset)."""
    _fields_ = [("in_", drm_amdgpu_wait_cs_in), ("out", drm_amdgpu_wait_cs_out)]


class drm_amdgpu_fence(_Struct):
    _fields_ = [
        ("ctx_id", _u32),
        ("ip_type", _u32),
        ("ip_instance", _u32),
        ("ring", _u32),
        ("seq_no", _u64),
    ]


class drm_amdgpu_wait_fences_in(_Struct):
    _fields_ = [
        ("fences", _u64),
        ("fence_count", _u32),
        ("wait_all", _u32),
        ("timeout_ns", _u64),
    ]


class drm_amdgpu_wait_fences_out(_Struct):
    _fields_ = [("status", _u32), ("first_signaled", _u32)]


class drm_amdgpu_wait_fences(_Union):
    """DRM_IOCTL_AMDGPU_WAIT_FENCES: wait for all or any of ``fence_count``
    fences. Extra: the drm_amdgpu_fence array. Out: ``status`` (1 signalled),
    ``first_signaled``. Errors: EINVAL (count 0), ENOENT (ctx)."""
    _fields_ = [("in_", drm_amdgpu_wait_fences_in), ("out", drm_amdgpu_wait_fences_out)]


AMDGPU_GEM_OP_GET_GEM_CREATE_INFO = 0
AMDGPU_GEM_OP_SET_PLACEMENT = 1


class drm_amdgpu_gem_op(_Struct):
    """DRM_IOCTL_AMDGPU_GEM_OP: GET_GEM_CREATE_INFO answers the BO's
    drm_amdgpu_gem_create_in as reply extra data (``value`` is the user
    pointer, ignored); SET_PLACEMENT sets the preferred domain to ``value``.
    Errors: EINVAL (op, domain), ENOENT (handle)."""
    _fields_ = [("handle", _u32), ("op", _u32), ("value", _u64)]


AMDGPU_VA_OP_MAP = 1
AMDGPU_VA_OP_UNMAP = 2
AMDGPU_VA_OP_CLEAR = 3
AMDGPU_VA_OP_REPLACE = 4

# gem_va flags
AMDGPU_VM_DELAY_UPDATE = 1 << 0
AMDGPU_VM_PAGE_READABLE = 1 << 1
AMDGPU_VM_PAGE_WRITEABLE = 1 << 2
AMDGPU_VM_PAGE_EXECUTABLE = 1 << 3
AMDGPU_VM_PAGE_PRT = 1 << 4
AMDGPU_VM_MTYPE_MASK = 0xF << 5
AMDGPU_VM_MTYPE_DEFAULT = 0 << 5
AMDGPU_VM_MTYPE_NC = 1 << 5
AMDGPU_VM_MTYPE_WC = 2 << 5
AMDGPU_VM_MTYPE_CC = 3 << 5
AMDGPU_VM_MTYPE_UC = 4 << 5
AMDGPU_VM_MTYPE_RW = 5 << 5


class drm_amdgpu_gem_va(_Struct):
    """DRM_IOCTL_AMDGPU_GEM_VA: MAP / UNMAP / REPLACE a BO range at
    ``va_address`` in the file's VM; CLEAR unmaps everything in a range
    (``handle`` ignored). Addresses, offset and size page aligned.
    Errors: EINVAL (op, flags, alignment, range outside the VA space or the
    BO, overlap on MAP, pad), ENOENT (handle; UNMAP of an unmapped VA)."""
    _fields_ = [
        ("handle", _u32),
        ("_pad", _u32),
        ("operation", _u32),
        ("flags", _u32),
        ("va_address", _u64),
        ("offset_in_bo", _u64),
        ("map_size", _u64),
    ]


AMDGPU_HW_IP_GFX = 0
AMDGPU_HW_IP_COMPUTE = 1
AMDGPU_HW_IP_DMA = 2
AMDGPU_HW_IP_UVD = 3
AMDGPU_HW_IP_VCE = 4
AMDGPU_HW_IP_UVD_ENC = 5
AMDGPU_HW_IP_VCN_DEC = 6
AMDGPU_HW_IP_VCN_ENC = 7
AMDGPU_HW_IP_VCN_JPEG = 8
AMDGPU_HW_IP_NUM = 9
# Linux 6.7's amdgpu_drm.h adds VPE (and AMDGPU_HW_IP_NUM 10); Debian's libdrm-dev
# 2.4.114 stops at VCN_JPEG. Only INFO answers it (an IP block this part lacks).
AMDGPU_HW_IP_VPE = 9

AMDGPU_HW_IP_INSTANCE_MAX_COUNT = 1

AMDGPU_CHUNK_ID_IB = 0x01
AMDGPU_CHUNK_ID_FENCE = 0x02
AMDGPU_CHUNK_ID_DEPENDENCIES = 0x03
AMDGPU_CHUNK_ID_SYNCOBJ_IN = 0x04
AMDGPU_CHUNK_ID_SYNCOBJ_OUT = 0x05
AMDGPU_CHUNK_ID_BO_HANDLES = 0x06
AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES = 0x07
AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT = 0x08
AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL = 0x09


class drm_amdgpu_cs_chunk(_Struct):
    _fields_ = [("chunk_id", _u32), ("length_dw", _u32), ("chunk_data", _u64)]


class drm_amdgpu_cs_in(_Struct):
    _fields_ = [
        ("ctx_id", _u32),
        ("bo_list_handle", _u32),
        ("num_chunks", _u32),
        ("flags", _u32),
        ("chunks", _u64),
    ]


class drm_amdgpu_cs_out(_Struct):
    _fields_ = [("handle", _u64)]


class drm_amdgpu_cs(_Union):
    """DRM_IOCTL_AMDGPU_CS: submit a job. Out: ``handle``, the sequence number.

    Extra: for each of ``num_chunks`` chunks in order, its drm_amdgpu_cs_chunk
    header immediately followed by ``length_dw`` dwords of chunk data.
    Errors: EINVAL (chunk ids or sizes, IB outside the VM, ring), ENOENT (ctx,
    BO list, syncobj), ECANCELED (guilty context), ENOMEM.
    """
    _fields_ = [("in_", drm_amdgpu_cs_in), ("out", drm_amdgpu_cs_out)]


# drm_amdgpu_cs_chunk_ib flags
AMDGPU_IB_FLAG_CE = 1 << 0
AMDGPU_IB_FLAG_PREAMBLE = 1 << 1
AMDGPU_IB_FLAG_PREEMPT = 1 << 2
AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE = 1 << 3
AMDGPU_IB_FLAG_RESET_GDS_MAX_WAVE_ID = 1 << 4
AMDGPU_IB_FLAGS_SECURE = 1 << 5
AMDGPU_IB_FLAG_EMIT_MEM_SYNC = 1 << 6


class drm_amdgpu_cs_chunk_ib(_Struct):
    _fields_ = [
        ("_pad", _u32),
        ("flags", _u32),
        ("va_start", _u64),
        ("ib_bytes", _u32),
        ("ip_type", _u32),
        ("ip_instance", _u32),
        ("ring", _u32),
    ]


class drm_amdgpu_cs_chunk_dep(_Struct):
    _fields_ = [
        ("ip_type", _u32),
        ("ip_instance", _u32),
        ("ring", _u32),
        ("ctx_id", _u32),
        ("handle", _u64),
    ]


class drm_amdgpu_cs_chunk_fence(_Struct):
    _fields_ = [("handle", _u32), ("offset", _u32)]


class drm_amdgpu_cs_chunk_sem(_Struct):
    _fields_ = [("handle", _u32)]


class drm_amdgpu_cs_chunk_syncobj(_Struct):
    _fields_ = [("handle", _u32), ("flags", _u32), ("point", _u64)]


AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ = 0
AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ_FD = 1
AMDGPU_FENCE_TO_HANDLE_GET_SYNC_FILE_FD = 2


class _drm_amdgpu_fence_to_handle_in(_Struct):
    _fields_ = [("fence", drm_amdgpu_fence), ("what", _u32), ("pad", _u32)]


class _drm_amdgpu_fence_to_handle_out(_Struct):
    _fields_ = [("handle", _u32)]


class drm_amdgpu_fence_to_handle(_Union):
    """DRM_IOCTL_AMDGPU_FENCE_TO_HANDLE: turn a CS fence into a syncobj handle
    or an exported token (``what``). Errors: EINVAL (what, pad), ENOENT (ctx)."""
    _fields_ = [("in_", _drm_amdgpu_fence_to_handle_in), ("out", _drm_amdgpu_fence_to_handle_out)]


class _drm_amdgpu_cs_chunk_data_union(_Union):
    _fields_ = [
        ("ib_data", drm_amdgpu_cs_chunk_ib),
        ("fence_data", drm_amdgpu_cs_chunk_fence),
    ]


class drm_amdgpu_cs_chunk_data(_Struct):
    _anonymous_ = ("_u",)
    _fields_ = [("_u", _drm_amdgpu_cs_chunk_data_union)]


AMDGPU_IDS_FLAGS_FUSION = 0x1
AMDGPU_IDS_FLAGS_PREEMPTION = 0x2
AMDGPU_IDS_FLAGS_TMZ = 0x4

# INFO query ids
AMDGPU_INFO_ACCEL_WORKING = 0x00
AMDGPU_INFO_CRTC_FROM_ID = 0x01
AMDGPU_INFO_HW_IP_INFO = 0x02
AMDGPU_INFO_HW_IP_COUNT = 0x03
AMDGPU_INFO_TIMESTAMP = 0x05
AMDGPU_INFO_FW_VERSION = 0x0E
AMDGPU_INFO_FW_VCE = 0x1
AMDGPU_INFO_FW_UVD = 0x2
AMDGPU_INFO_FW_GMC = 0x03
AMDGPU_INFO_FW_GFX_ME = 0x04
AMDGPU_INFO_FW_GFX_PFP = 0x05
AMDGPU_INFO_FW_GFX_CE = 0x06
AMDGPU_INFO_FW_GFX_RLC = 0x07
AMDGPU_INFO_FW_GFX_MEC = 0x08
AMDGPU_INFO_FW_SMC = 0x0A
AMDGPU_INFO_FW_SDMA = 0x0B
AMDGPU_INFO_FW_SOS = 0x0C
AMDGPU_INFO_FW_ASD = 0x0D
AMDGPU_INFO_FW_VCN = 0x0E
AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL = 0x0F
AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM = 0x10
AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM = 0x11
AMDGPU_INFO_FW_DMCU = 0x12
AMDGPU_INFO_FW_TA = 0x13
AMDGPU_INFO_FW_DMCUB = 0x14
AMDGPU_INFO_FW_TOC = 0x15
AMDGPU_INFO_NUM_BYTES_MOVED = 0x0F
AMDGPU_INFO_VRAM_USAGE = 0x10
AMDGPU_INFO_GTT_USAGE = 0x11
AMDGPU_INFO_GDS_CONFIG = 0x13
AMDGPU_INFO_VRAM_GTT = 0x14
AMDGPU_INFO_READ_MMR_REG = 0x15
AMDGPU_INFO_DEV_INFO = 0x16
AMDGPU_INFO_VIS_VRAM_USAGE = 0x17
AMDGPU_INFO_NUM_EVICTIONS = 0x18
AMDGPU_INFO_MEMORY = 0x19
AMDGPU_INFO_VCE_CLOCK_TABLE = 0x1A
AMDGPU_INFO_VBIOS = 0x1B
AMDGPU_INFO_VBIOS_SIZE = 0x1
AMDGPU_INFO_VBIOS_IMAGE = 0x2
AMDGPU_INFO_VBIOS_INFO = 0x3
AMDGPU_INFO_NUM_HANDLES = 0x1C
AMDGPU_INFO_SENSOR = 0x1D
AMDGPU_INFO_SENSOR_GFX_SCLK = 0x1
AMDGPU_INFO_SENSOR_GFX_MCLK = 0x2
AMDGPU_INFO_SENSOR_GPU_TEMP = 0x3
AMDGPU_INFO_SENSOR_GPU_LOAD = 0x4
AMDGPU_INFO_SENSOR_GPU_AVG_POWER = 0x5
AMDGPU_INFO_SENSOR_VDDNB = 0x6
AMDGPU_INFO_SENSOR_VDDGFX = 0x7
AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK = 0x8
AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_MCLK = 0x9
# Linux 6.x's amdgpu_drm.h, after libdrm 2.4.114 (include/vgpu_drm.h)
AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_SCLK = 0xA
AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_MCLK = 0xB
AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS = 0x1E
AMDGPU_INFO_VRAM_LOST_COUNTER = 0x1F
AMDGPU_INFO_RAS_ENABLED_FEATURES = 0x20
AMDGPU_INFO_VIDEO_CAPS = 0x21
# Linux 6.6+ (after Debian's libdrm 2.4.114): the IBs one CS may carry, per HW IP
AMDGPU_INFO_MAX_IBS = 0x22
AMDGPU_INFO_VIDEO_CAPS_DECODE = 0
AMDGPU_INFO_VIDEO_CAPS_ENCODE = 1

AMDGPU_INFO_MMR_SE_INDEX_SHIFT = 0
AMDGPU_INFO_MMR_SE_INDEX_MASK = 0xFF
AMDGPU_INFO_MMR_SH_INDEX_SHIFT = 8
AMDGPU_INFO_MMR_SH_INDEX_MASK = 0xFF


class drm_amdgpu_query_fw(_Struct):
    _fields_ = [
        ("fw_type", _u32),
        ("ip_instance", _u32),
        ("index", _u32),
        ("_pad", _u32),
    ]


class _drm_amdgpu_info_mode_crtc(_Struct):
    _fields_ = [("id", _u32), ("_pad", _u32)]


class _drm_amdgpu_info_query_hw_ip(_Struct):
    _fields_ = [("type", _u32), ("ip_instance", _u32)]


class _drm_amdgpu_info_read_mmr_reg(_Struct):
    _fields_ = [
        ("dword_offset", _u32),
        ("count", _u32),
        ("instance", _u32),
        ("flags", _u32),
    ]


class _drm_amdgpu_info_vbios_info(_Struct):
    _fields_ = [("type", _u32), ("offset", _u32)]


class _drm_amdgpu_info_sensor_info(_Struct):
    _fields_ = [("type", _u32)]


class _drm_amdgpu_info_video_cap(_Struct):
    _fields_ = [("type", _u32)]


class _drm_amdgpu_info_union(_Union):
    _fields_ = [
        ("mode_crtc", _drm_amdgpu_info_mode_crtc),
        ("query_hw_ip", _drm_amdgpu_info_query_hw_ip),
        ("read_mmr_reg", _drm_amdgpu_info_read_mmr_reg),
        ("query_fw", drm_amdgpu_query_fw),
        ("vbios_info", _drm_amdgpu_info_vbios_info),
        ("sensor_info", _drm_amdgpu_info_sensor_info),
        ("video_cap", _drm_amdgpu_info_video_cap),
    ]


class drm_amdgpu_info(_Struct):
    """DRM_IOCTL_AMDGPU_INFO (declared IOW: the answer goes through a pointer).

    In: ``query`` (AMDGPU_INFO_*), ``return_size`` and the query's sub-struct.
    Out: the answer as reply extra data, at most ``return_size`` bytes (like
    snprintf: a short buffer gets the head of the answer).
    Errors: EINVAL (unknown query, bad ip type or instance, return_size 0).
    """
    _anonymous_ = ("_u",)
    _fields_ = [
        ("return_pointer", _u64),
        ("return_size", _u32),
        ("query", _u32),
        ("_u", _drm_amdgpu_info_union),
    ]


class drm_amdgpu_info_gds(_Struct):
    _fields_ = [
        ("gds_gfx_partition_size", _u32),
        ("compute_partition_size", _u32),
        ("gds_total_size", _u32),
        ("gws_per_gfx_partition", _u32),
        ("gws_per_compute_partition", _u32),
        ("oa_per_gfx_partition", _u32),
        ("oa_per_compute_partition", _u32),
        ("_pad", _u32),
    ]


class drm_amdgpu_info_vram_gtt(_Struct):
    """Answer to AMDGPU_INFO_VRAM_GTT."""
    _fields_ = [
        ("vram_size", _u64),
        ("vram_cpu_accessible_size", _u64),
        ("gtt_size", _u64),
    ]


class drm_amdgpu_heap_info(_Struct):
    _fields_ = [
        ("total_heap_size", _u64),
        ("usable_heap_size", _u64),
        ("heap_usage", _u64),
        ("max_allocation", _u64),
    ]


class drm_amdgpu_memory_info(_Struct):
    """Answer to AMDGPU_INFO_MEMORY."""
    _fields_ = [
        ("vram", drm_amdgpu_heap_info),
        ("cpu_accessible_vram", drm_amdgpu_heap_info),
        ("gtt", drm_amdgpu_heap_info),
    ]


class drm_amdgpu_info_firmware(_Struct):
    """Answer to AMDGPU_INFO_FW_VERSION."""
    _fields_ = [("ver", _u32), ("feature", _u32)]


class drm_amdgpu_info_vbios(_Struct):
    _fields_ = [
        ("name", _u8 * 64),
        ("vbios_pn", _u8 * 64),
        ("version", _u32),
        ("pad", _u32),
        ("vbios_ver_str", _u8 * 32),
        ("date", _u8 * 32),
    ]


AMDGPU_VRAM_TYPE_UNKNOWN = 0
AMDGPU_VRAM_TYPE_GDDR1 = 1
AMDGPU_VRAM_TYPE_DDR2 = 2
AMDGPU_VRAM_TYPE_GDDR3 = 3
AMDGPU_VRAM_TYPE_GDDR4 = 4
AMDGPU_VRAM_TYPE_GDDR5 = 5
AMDGPU_VRAM_TYPE_HBM = 6
AMDGPU_VRAM_TYPE_DDR3 = 7
AMDGPU_VRAM_TYPE_DDR4 = 8
AMDGPU_VRAM_TYPE_GDDR6 = 9
AMDGPU_VRAM_TYPE_DDR5 = 10


class drm_amdgpu_info_device(_Struct):
    """Answer to AMDGPU_INFO_DEV_INFO."""
    _fields_ = [
        ("device_id", _u32),
        ("chip_rev", _u32),
        ("external_rev", _u32),
        ("pci_rev", _u32),
        ("family", _u32),
        ("num_shader_engines", _u32),
        ("num_shader_arrays_per_engine", _u32),
        ("gpu_counter_freq", _u32),
        ("max_engine_clock", _u64),
        ("max_memory_clock", _u64),
        ("cu_active_number", _u32),
        ("cu_ao_mask", _u32),
        ("cu_bitmap", _u32 * 4 * 4),
        ("enabled_rb_pipes_mask", _u32),
        ("num_rb_pipes", _u32),
        ("num_hw_gfx_contexts", _u32),
        ("_pad", _u32),
        ("ids_flags", _u64),
        ("virtual_address_offset", _u64),
        ("virtual_address_max", _u64),
        ("virtual_address_alignment", _u32),
        ("pte_fragment_size", _u32),
        ("gart_page_size", _u32),
        ("ce_ram_size", _u32),
        ("vram_type", _u32),
        ("vram_bit_width", _u32),
        ("vce_harvest_config", _u32),
        ("gc_double_offchip_lds_buf", _u32),
        ("prim_buf_gpu_addr", _u64),
        ("pos_buf_gpu_addr", _u64),
        ("cntl_sb_buf_gpu_addr", _u64),
        ("param_buf_gpu_addr", _u64),
        ("prim_buf_size", _u32),
        ("pos_buf_size", _u32),
        ("cntl_sb_buf_size", _u32),
        ("param_buf_size", _u32),
        ("wave_front_size", _u32),
        ("num_shader_visible_vgprs", _u32),
        ("num_cu_per_sh", _u32),
        ("num_tcc_blocks", _u32),
        ("gs_vgt_table_depth", _u32),
        ("gs_prim_buffer_depth", _u32),
        ("max_gs_waves_per_vgt", _u32),
        ("_pad1", _u32),
        ("cu_ao_bitmap", _u32 * 4 * 4),
        ("high_va_offset", _u64),
        ("high_va_max", _u64),
        ("pa_sc_tile_steering_override", _u32),
        ("tcc_disabled_mask", _u64),
    ]


class drm_amdgpu_info_hw_ip(_Struct):
    """Answer to AMDGPU_INFO_HW_IP_INFO."""
    _fields_ = [
        ("hw_ip_version_major", _u32),
        ("hw_ip_version_minor", _u32),
        ("capabilities_flags", _u64),
        ("ib_start_alignment", _u32),
        ("ib_size_alignment", _u32),
        ("available_rings", _u32),
        ("_pad", _u32),
    ]


class drm_amdgpu_info_num_handles(_Struct):
    _fields_ = [("uvd_max_handles", _u32), ("uvd_used_handles", _u32)]


AMDGPU_VCE_CLOCK_TABLE_ENTRIES = 6


class drm_amdgpu_info_vce_clock_table_entry(_Struct):
    _fields_ = [("sclk", _u32), ("mclk", _u32), ("eclk", _u32), ("pad", _u32)]


class drm_amdgpu_info_vce_clock_table(_Struct):
    _fields_ = [
        ("entries", drm_amdgpu_info_vce_clock_table_entry * AMDGPU_VCE_CLOCK_TABLE_ENTRIES),
        ("num_valid_entries", _u32),
        ("pad", _u32),
    ]


AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG2 = 0
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4 = 1
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VC1 = 2
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4_AVC = 3
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_HEVC = 4
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_JPEG = 5
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VP9 = 6
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_AV1 = 7
AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_COUNT = 8


class drm_amdgpu_info_video_codec_info(_Struct):
    _fields_ = [
        ("valid", _u32),
        ("max_width", _u32),
        ("max_height", _u32),
        ("max_pixels_per_frame", _u32),
        ("max_level", _u32),
        ("pad", _u32),
    ]


class drm_amdgpu_info_video_caps(_Struct):
    _fields_ = [
        ("codec_info", drm_amdgpu_info_video_codec_info * AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_COUNT),
    ]


# GPU families (drm_amdgpu_info_device.family)
AMDGPU_FAMILY_UNKNOWN = 0
AMDGPU_FAMILY_SI = 110
AMDGPU_FAMILY_CI = 120
AMDGPU_FAMILY_KV = 125
AMDGPU_FAMILY_VI = 130
AMDGPU_FAMILY_CZ = 135
AMDGPU_FAMILY_AI = 141
AMDGPU_FAMILY_RV = 142
AMDGPU_FAMILY_NV = 143
AMDGPU_FAMILY_VGH = 144
AMDGPU_FAMILY_YC = 146


# ===========================================================================
# vgpu control-file framing (docs/design.md section 3; include/vgpu_drm.h)
# ===========================================================================
VGPU_MAGIC = 0x55504756  # "VGPU" little-endian
# Largest request or reply frame, headers included. FUSE hands a daemon at most
# max_write (128 KiB) per write(); a bigger write() would arrive split and be
# refused, so clients must keep a frame (header + struct + extra) within this.
VGPU_MAX_FRAME = 128 * 1024


class vgpu_request_header(_Struct):
    """Starts every write() to a control file; then ``arg_size`` bytes of the
    ioctl struct and ``extra_size`` bytes of flattened pointer data.
    ``_IOC_SIZE(request)`` must equal ``arg_size``.
    Errors (write fails): EINVAL (bad magic, sizes disagree with the write
    length or with the request, frame over VGPU_MAX_FRAME), ENOTTY (unknown
    request) and whatever the ioctl refuses."""
    _fields_ = [
        ("magic", _u32),
        ("request", _u32),
        ("arg_size", _u32),
        ("extra_size", _u32),
    ]


class vgpu_reply_header(_Struct):
    """Starts every read() reply: ``result`` (0; errors fail the read()
    itself), then ``arg_size`` bytes of the updated struct and ``extra_size``
    bytes of out-data. A read() with too small a buffer fails with EINVAL and
    keeps the reply; a read() with no request pending fails with EINVAL."""
    _fields_ = [
        ("result", _s32),
        ("arg_size", _u32),
        ("extra_size", _u32),
        ("reserved", _u32),
    ]


# ===========================================================================
# User-mode queues (Linux 6.16 amdgpu_drm.h: DRM_AMDGPU_USERQ, USERQ_SIGNAL,
# USERQ_WAIT, the DEV_INFO and HW_IP_INFO fields after libdrm 2.4.114, and
# AMDGPU_INFO_UQ_FW_AREAS; include/vgpu_drm.h defines them when the system header
# does not). docs/userq.md says what vgpu's MI100 does with them.
# ===========================================================================
AMDGPU_USERQ_OP_CREATE = 1
AMDGPU_USERQ_OP_FREE = 2

AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_MASK = 0x3
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_SHIFT = 0
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW = 0
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW = 1
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH = 2
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH = 3   # admin only
AMDGPU_USERQ_CREATE_FLAGS_QUEUE_SECURE = 1 << 2


class drm_amdgpu_userq_in(_Struct):
    """In-struct of DRM_IOCTL_AMDGPU_USERQ. CREATE: every field but ``queue_id``;
    ``mqd`` points to ``mqd_size`` bytes of the IP's MQD struct. FREE: ``queue_id``
    only (the rest is ignored)."""
    _fields_ = [
        ("op", _u32),
        ("queue_id", _u32),
        ("ip_type", _u32),
        ("doorbell_handle", _u32),
        ("doorbell_offset", _u32),
        ("flags", _u32),
        ("queue_va", _u64),
        ("queue_size", _u64),
        ("rptr_va", _u64),
        ("wptr_va", _u64),
        ("mqd", _u64),
        ("mqd_size", _u64),
    ]


class drm_amdgpu_userq_out(_Struct):
    _fields_ = [("queue_id", _u32), ("_pad", _u32)]


class drm_amdgpu_userq(_Union):
    """DRM_IOCTL_AMDGPU_USERQ: create or free a user-mode queue (kmd/userq.py).
    Errors: EINVAL (op, ip, sizes, alignment, flags, MQD size, a VA not mapped),
    ENOENT (doorbell handle, queue id), EACCES (HIGH priority from non-root),
    ENOSPC (no free queue slot), EFAULT (mqd pointer)."""
    _fields_ = [("in_", drm_amdgpu_userq_in), ("out", drm_amdgpu_userq_out)]


class drm_amdgpu_userq_mqd_gfx11(_Struct):
    _fields_ = [("shadow_va", _u64), ("csa_va", _u64)]


class drm_amdgpu_userq_mqd_sdma_gfx11(_Struct):
    """The MQD of an SDMA (AMDGPU_HW_IP_DMA) queue: the context save area."""
    _fields_ = [("csa_va", _u64)]


class drm_amdgpu_userq_mqd_compute_gfx11(_Struct):
    """The MQD of a compute queue: the end-of-pipe buffer."""
    _fields_ = [("eop_va", _u64)]


class drm_amdgpu_userq_signal(_Struct):
    """DRM_IOCTL_AMDGPU_USERQ_SIGNAL: a fence that signals once queue ``queue_id``
    has read past the packets written so far (its WPTR now) replaces the fence of
    each syncobj of ``syncobj_handles``, and joins the BOs' reservations. Errors:
    ENOENT (queue, syncobj or BO handle), EINVAL (pad, counts), EFAULT."""
    _fields_ = [
        ("queue_id", _u32),
        ("pad", _u32),
        ("syncobj_handles", _u64),
        ("num_syncobj_handles", _u64),
        ("bo_read_handles", _u64),
        ("bo_write_handles", _u64),
        ("num_bo_read_handles", _u32),
        ("num_bo_write_handles", _u32),
    ]


class drm_amdgpu_userq_fence_info(_Struct):
    """One fence a queue waits for: wait until the u64 at GPU VA ``va`` is at least
    ``value`` (a 32-bit WAIT_REG_MEM/POLL_REGMEM on its low word does it)."""
    _fields_ = [("va", _u64), ("value", _u64)]


class drm_amdgpu_userq_wait(_Struct):
    """DRM_IOCTL_AMDGPU_USERQ_WAIT: the (va, value) pairs behind the fences of the
    syncobjs (binary and timeline points) and BOs named, for queue ``waitq_id`` to
    wait on in memory. ``num_fences`` 0: only count them (num_fences out). Errors:
    ENOENT (queue, syncobj or BO handle), EINVAL (pad, a timeline point never
    submitted), ENOSPC (more fences than num_fences), EFAULT."""
    _fields_ = [
        ("waitq_id", _u32),
        ("pad", _u32),
        ("syncobj_handles", _u64),
        ("syncobj_timeline_handles", _u64),
        ("syncobj_timeline_points", _u64),
        ("bo_read_handles", _u64),
        ("bo_write_handles", _u64),
        ("num_syncobj_timeline_handles", _u16),
        ("num_fences", _u16),
        ("num_syncobj_handles", _u32),
        ("num_bo_read_handles", _u32),
        ("num_bo_write_handles", _u32),
        ("out_fences", _u64),
    ]


class drm_amdgpu_info_device_userq(_Struct):
    """AMDGPU_INFO_DEV_INFO as Linux 6.16 answers it: libdrm 2.4.114's
    drm_amdgpu_info_device, then the fields added since (the kernel's struct is flat;
    the offsets are the same). ``userq_ip_mask``: 1 << AMDGPU_HW_IP_* of the IPs
    with user queues."""
    _fields_ = [
        ("base", drm_amdgpu_info_device),
        ("min_engine_clock", _u64),
        ("min_memory_clock", _u64),
        ("tcp_cache_size", _u32),
        ("num_sqc_per_wgp", _u32),
        ("sqc_data_cache_size", _u32),
        ("sqc_inst_cache_size", _u32),
        ("gl1c_cache_size", _u32),
        ("gl2c_cache_size", _u32),
        ("mall_size", _u64),
        ("enabled_rb_pipes_mask_hi", _u32),
        ("shadow_size", _u32),
        ("shadow_alignment", _u32),
        ("csa_size", _u32),
        ("csa_alignment", _u32),
        ("userq_ip_mask", _u32),
        ("pad", _u32),
    ]


class drm_amdgpu_info_hw_ip_userq(_Struct):
    """AMDGPU_INFO_HW_IP_INFO as Linux 6.16 answers it: libdrm 2.4.114's struct
    (whose ``_pad`` is now ``ip_discovery_version``), then ``userq_num_slots``."""
    _fields_ = [("base", drm_amdgpu_info_hw_ip), ("userq_num_slots", _u32)]


AMDGPU_INFO_UQ_FW_AREAS = 0x24


class drm_amdgpu_info_uq_metadata_compute(_Struct):
    _fields_ = [("eop_size", _u32), ("eop_alignment", _u32)]


class drm_amdgpu_info_uq_metadata_sdma(_Struct):
    _fields_ = [("csa_size", _u32), ("csa_alignment", _u32)]


class drm_amdgpu_info_uq_metadata_gfx(_Struct):
    _fields_ = [("shadow_size", _u32), ("shadow_alignment", _u32), ("csa_size", _u32),
                ("csa_alignment", _u32)]


class drm_amdgpu_info_uq_metadata(_Union):
    """Answer to AMDGPU_INFO_UQ_FW_AREAS for the IP of ``query_hw_ip.type``: the
    size and alignment of the areas its MQD names."""
    _fields_ = [("gfx", drm_amdgpu_info_uq_metadata_gfx),
                ("compute", drm_amdgpu_info_uq_metadata_compute),
                ("sdma", drm_amdgpu_info_uq_metadata_sdma)]


# ===========================================================================
# Request codes (direction bits as the headers declare them)
# ===========================================================================
DRM_IOCTL_VERSION = DRM_IOWR(0x00, drm_version)
DRM_IOCTL_GET_MAGIC = DRM_IOR(0x02, drm_auth)
DRM_IOCTL_GET_CLIENT = DRM_IOWR(0x05, drm_client)
DRM_IOCTL_GEM_CLOSE = DRM_IOW(0x09, drm_gem_close)
DRM_IOCTL_GEM_FLINK = DRM_IOWR(0x0A, drm_gem_flink)
DRM_IOCTL_GEM_OPEN = DRM_IOWR(0x0B, drm_gem_open)
DRM_IOCTL_GET_CAP = DRM_IOWR(0x0C, drm_get_cap)
DRM_IOCTL_SET_CLIENT_CAP = DRM_IOW(0x0D, drm_set_client_cap)
DRM_IOCTL_AUTH_MAGIC = DRM_IOW(0x11, drm_auth)
DRM_IOCTL_SET_MASTER = DRM_IO(0x1E)
DRM_IOCTL_DROP_MASTER = DRM_IO(0x1F)
DRM_IOCTL_PRIME_HANDLE_TO_FD = DRM_IOWR(0x2D, drm_prime_handle)
DRM_IOCTL_PRIME_FD_TO_HANDLE = DRM_IOWR(0x2E, drm_prime_handle)
DRM_IOCTL_MODE_GETRESOURCES = DRM_IOWR(0xA0, drm_mode_card_res)
DRM_IOCTL_MODE_GETCRTC = DRM_IOWR(0xA1, drm_mode_crtc)
DRM_IOCTL_MODE_GETENCODER = DRM_IOWR(0xA6, drm_mode_get_encoder)
DRM_IOCTL_MODE_GETCONNECTOR = DRM_IOWR(0xA7, drm_mode_get_connector)
DRM_IOCTL_MODE_GETPROPERTY = DRM_IOWR(0xAA, drm_mode_get_property)
DRM_IOCTL_MODE_GETPROPBLOB = DRM_IOWR(0xAC, drm_mode_get_blob)
DRM_IOCTL_MODE_CREATE_DUMB = DRM_IOWR(0xB2, drm_mode_create_dumb)
DRM_IOCTL_MODE_MAP_DUMB = DRM_IOWR(0xB3, drm_mode_map_dumb)
DRM_IOCTL_MODE_DESTROY_DUMB = DRM_IOWR(0xB4, drm_mode_destroy_dumb)
DRM_IOCTL_MODE_GETPLANERESOURCES = DRM_IOWR(0xB5, drm_mode_get_plane_res)
DRM_IOCTL_MODE_GETPLANE = DRM_IOWR(0xB6, drm_mode_get_plane)
DRM_IOCTL_MODE_OBJ_GETPROPERTIES = DRM_IOWR(0xB9, drm_mode_obj_get_properties)
DRM_IOCTL_SYNCOBJ_CREATE = DRM_IOWR(0xBF, drm_syncobj_create)
DRM_IOCTL_SYNCOBJ_DESTROY = DRM_IOWR(0xC0, drm_syncobj_destroy)
DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD = DRM_IOWR(0xC1, drm_syncobj_handle)
DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE = DRM_IOWR(0xC2, drm_syncobj_handle)
DRM_IOCTL_SYNCOBJ_WAIT = DRM_IOWR(0xC3, drm_syncobj_wait)
DRM_IOCTL_SYNCOBJ_RESET = DRM_IOWR(0xC4, drm_syncobj_array)
DRM_IOCTL_SYNCOBJ_SIGNAL = DRM_IOWR(0xC5, drm_syncobj_array)
DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT = DRM_IOWR(0xCA, drm_syncobj_timeline_wait)
DRM_IOCTL_SYNCOBJ_QUERY = DRM_IOWR(0xCB, drm_syncobj_timeline_array)
DRM_IOCTL_SYNCOBJ_TRANSFER = DRM_IOWR(0xCC, drm_syncobj_transfer)
DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL = DRM_IOWR(0xCD, drm_syncobj_timeline_array)

DRM_IOCTL_AMDGPU_GEM_CREATE = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_CREATE, drm_amdgpu_gem_create)
DRM_IOCTL_AMDGPU_GEM_MMAP = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_MMAP, drm_amdgpu_gem_mmap)
DRM_IOCTL_AMDGPU_CTX = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_CTX, drm_amdgpu_ctx)
DRM_IOCTL_AMDGPU_BO_LIST = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_BO_LIST, drm_amdgpu_bo_list)
DRM_IOCTL_AMDGPU_CS = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_CS, drm_amdgpu_cs)
DRM_IOCTL_AMDGPU_INFO = DRM_IOW(DRM_COMMAND_BASE + DRM_AMDGPU_INFO, drm_amdgpu_info)
DRM_IOCTL_AMDGPU_GEM_METADATA = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_METADATA, drm_amdgpu_gem_metadata)
DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_WAIT_IDLE, drm_amdgpu_gem_wait_idle)
DRM_IOCTL_AMDGPU_GEM_VA = DRM_IOW(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_VA, drm_amdgpu_gem_va)
DRM_IOCTL_AMDGPU_WAIT_CS = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_WAIT_CS, drm_amdgpu_wait_cs)
DRM_IOCTL_AMDGPU_GEM_OP = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_OP, drm_amdgpu_gem_op)
DRM_IOCTL_AMDGPU_GEM_USERPTR = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_GEM_USERPTR, drm_amdgpu_gem_userptr)
DRM_IOCTL_AMDGPU_WAIT_FENCES = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_WAIT_FENCES, drm_amdgpu_wait_fences)
DRM_IOCTL_AMDGPU_VM = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_VM, drm_amdgpu_vm)
DRM_IOCTL_AMDGPU_FENCE_TO_HANDLE = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_FENCE_TO_HANDLE, drm_amdgpu_fence_to_handle)
DRM_IOCTL_AMDGPU_SCHED = DRM_IOW(DRM_COMMAND_BASE + DRM_AMDGPU_SCHED, drm_amdgpu_sched)
DRM_IOCTL_AMDGPU_USERQ = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ, drm_amdgpu_userq)
DRM_IOCTL_AMDGPU_USERQ_SIGNAL = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ_SIGNAL, drm_amdgpu_userq_signal)
DRM_IOCTL_AMDGPU_USERQ_WAIT = DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ_WAIT, drm_amdgpu_userq_wait)


class IoctlDef(NamedTuple):
    """One known request: name without ``DRM_IOCTL_``, full request code, struct."""
    name: str
    request: int
    struct: type


def _build_ioctl_table(defs: list[IoctlDef]) -> dict[int, IoctlDef]:
    """Index ``defs`` by ``_IOC_NR``; a number used twice, or a struct whose size
    disagrees with its request code, is a bug in the list."""
    table: dict[int, IoctlDef] = {}
    for d in defs:
        nr = _IOC_NR(d.request)
        assert nr not in table, f"ioctl number {nr:#x} used twice ({d.name}, {table[nr].name})"
        assert _IOC_SIZE(d.request) == ctypes.sizeof(d.struct), d.name
        table[nr] = d
    return table


#: Every request vgpu knows, in header order: drm.h's, then amdgpu_drm.h's. Written
#: out, not gathered from the module's names, so that adding a ``DRM_IOCTL_*`` code
#: is a decision about this list (and about the KMD's table, kmd/ioctl_table.py).
IOCTL_LIST: list[IoctlDef] = [
    IoctlDef("VERSION", DRM_IOCTL_VERSION, drm_version),
    IoctlDef("GET_MAGIC", DRM_IOCTL_GET_MAGIC, drm_auth),
    IoctlDef("GET_CLIENT", DRM_IOCTL_GET_CLIENT, drm_client),
    IoctlDef("GEM_CLOSE", DRM_IOCTL_GEM_CLOSE, drm_gem_close),
    IoctlDef("GEM_FLINK", DRM_IOCTL_GEM_FLINK, drm_gem_flink),
    IoctlDef("GEM_OPEN", DRM_IOCTL_GEM_OPEN, drm_gem_open),
    IoctlDef("GET_CAP", DRM_IOCTL_GET_CAP, drm_get_cap),
    IoctlDef("SET_CLIENT_CAP", DRM_IOCTL_SET_CLIENT_CAP, drm_set_client_cap),
    IoctlDef("AUTH_MAGIC", DRM_IOCTL_AUTH_MAGIC, drm_auth),
    IoctlDef("SET_MASTER", DRM_IOCTL_SET_MASTER, _drm_no_arg),
    IoctlDef("DROP_MASTER", DRM_IOCTL_DROP_MASTER, _drm_no_arg),
    IoctlDef("PRIME_HANDLE_TO_FD", DRM_IOCTL_PRIME_HANDLE_TO_FD, drm_prime_handle),
    IoctlDef("PRIME_FD_TO_HANDLE", DRM_IOCTL_PRIME_FD_TO_HANDLE, drm_prime_handle),
    IoctlDef("MODE_GETRESOURCES", DRM_IOCTL_MODE_GETRESOURCES, drm_mode_card_res),
    IoctlDef("MODE_GETCRTC", DRM_IOCTL_MODE_GETCRTC, drm_mode_crtc),
    IoctlDef("MODE_GETENCODER", DRM_IOCTL_MODE_GETENCODER, drm_mode_get_encoder),
    IoctlDef("MODE_GETCONNECTOR", DRM_IOCTL_MODE_GETCONNECTOR, drm_mode_get_connector),
    IoctlDef("MODE_GETPROPERTY", DRM_IOCTL_MODE_GETPROPERTY, drm_mode_get_property),
    IoctlDef("MODE_GETPROPBLOB", DRM_IOCTL_MODE_GETPROPBLOB, drm_mode_get_blob),
    IoctlDef("MODE_CREATE_DUMB", DRM_IOCTL_MODE_CREATE_DUMB, drm_mode_create_dumb),
    IoctlDef("MODE_MAP_DUMB", DRM_IOCTL_MODE_MAP_DUMB, drm_mode_map_dumb),
    IoctlDef("MODE_DESTROY_DUMB", DRM_IOCTL_MODE_DESTROY_DUMB, drm_mode_destroy_dumb),
    IoctlDef("MODE_GETPLANERESOURCES", DRM_IOCTL_MODE_GETPLANERESOURCES, drm_mode_get_plane_res),
    IoctlDef("MODE_GETPLANE", DRM_IOCTL_MODE_GETPLANE, drm_mode_get_plane),
    IoctlDef("MODE_OBJ_GETPROPERTIES", DRM_IOCTL_MODE_OBJ_GETPROPERTIES, drm_mode_obj_get_properties),
    IoctlDef("SYNCOBJ_CREATE", DRM_IOCTL_SYNCOBJ_CREATE, drm_syncobj_create),
    IoctlDef("SYNCOBJ_DESTROY", DRM_IOCTL_SYNCOBJ_DESTROY, drm_syncobj_destroy),
    IoctlDef("SYNCOBJ_HANDLE_TO_FD", DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, drm_syncobj_handle),
    IoctlDef("SYNCOBJ_FD_TO_HANDLE", DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE, drm_syncobj_handle),
    IoctlDef("SYNCOBJ_WAIT", DRM_IOCTL_SYNCOBJ_WAIT, drm_syncobj_wait),
    IoctlDef("SYNCOBJ_RESET", DRM_IOCTL_SYNCOBJ_RESET, drm_syncobj_array),
    IoctlDef("SYNCOBJ_SIGNAL", DRM_IOCTL_SYNCOBJ_SIGNAL, drm_syncobj_array),
    IoctlDef("SYNCOBJ_TIMELINE_WAIT", DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, drm_syncobj_timeline_wait),
    IoctlDef("SYNCOBJ_QUERY", DRM_IOCTL_SYNCOBJ_QUERY, drm_syncobj_timeline_array),
    IoctlDef("SYNCOBJ_TRANSFER", DRM_IOCTL_SYNCOBJ_TRANSFER, drm_syncobj_transfer),
    IoctlDef("SYNCOBJ_TIMELINE_SIGNAL", DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, drm_syncobj_timeline_array),
    IoctlDef("AMDGPU_GEM_CREATE", DRM_IOCTL_AMDGPU_GEM_CREATE, drm_amdgpu_gem_create),
    IoctlDef("AMDGPU_GEM_MMAP", DRM_IOCTL_AMDGPU_GEM_MMAP, drm_amdgpu_gem_mmap),
    IoctlDef("AMDGPU_CTX", DRM_IOCTL_AMDGPU_CTX, drm_amdgpu_ctx),
    IoctlDef("AMDGPU_BO_LIST", DRM_IOCTL_AMDGPU_BO_LIST, drm_amdgpu_bo_list),
    IoctlDef("AMDGPU_CS", DRM_IOCTL_AMDGPU_CS, drm_amdgpu_cs),
    IoctlDef("AMDGPU_INFO", DRM_IOCTL_AMDGPU_INFO, drm_amdgpu_info),
    IoctlDef("AMDGPU_GEM_METADATA", DRM_IOCTL_AMDGPU_GEM_METADATA, drm_amdgpu_gem_metadata),
    IoctlDef("AMDGPU_GEM_WAIT_IDLE", DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE, drm_amdgpu_gem_wait_idle),
    IoctlDef("AMDGPU_GEM_VA", DRM_IOCTL_AMDGPU_GEM_VA, drm_amdgpu_gem_va),
    IoctlDef("AMDGPU_WAIT_CS", DRM_IOCTL_AMDGPU_WAIT_CS, drm_amdgpu_wait_cs),
    IoctlDef("AMDGPU_GEM_OP", DRM_IOCTL_AMDGPU_GEM_OP, drm_amdgpu_gem_op),
    IoctlDef("AMDGPU_GEM_USERPTR", DRM_IOCTL_AMDGPU_GEM_USERPTR, drm_amdgpu_gem_userptr),
    IoctlDef("AMDGPU_WAIT_FENCES", DRM_IOCTL_AMDGPU_WAIT_FENCES, drm_amdgpu_wait_fences),
    IoctlDef("AMDGPU_VM", DRM_IOCTL_AMDGPU_VM, drm_amdgpu_vm),
    IoctlDef("AMDGPU_FENCE_TO_HANDLE", DRM_IOCTL_AMDGPU_FENCE_TO_HANDLE, drm_amdgpu_fence_to_handle),
    IoctlDef("AMDGPU_SCHED", DRM_IOCTL_AMDGPU_SCHED, drm_amdgpu_sched),
    IoctlDef("AMDGPU_USERQ", DRM_IOCTL_AMDGPU_USERQ, drm_amdgpu_userq),
    IoctlDef("AMDGPU_USERQ_SIGNAL", DRM_IOCTL_AMDGPU_USERQ_SIGNAL, drm_amdgpu_userq_signal),
    IoctlDef("AMDGPU_USERQ_WAIT", DRM_IOCTL_AMDGPU_USERQ_WAIT, drm_amdgpu_userq_wait),
]

#: The same requests keyed by ``_IOC_NR`` (the KMD ignores direction bits).
IOCTLS: dict[int, IoctlDef] = _build_ioctl_table(IOCTL_LIST)


def ioctl_name(request: int) -> str:
    """Name of a request for logs and traces (``"AMDGPU_CS"``), or its hex code."""
    known = IOCTLS.get(_IOC_NR(request)) if _IOC_TYPE(request) == DRM_IOCTL_BASE else None
    return known.name if known else f"{request:#010x}"


# ===========================================================================
# AMDGPU_INFO_GPUVM_FAULT (Linux 6.x amdgpu_drm.h; Debian's libdrm-dev 2.4.114
# header predates it, so include/vgpu_drm.h defines it when the system header
# does not), and vgpu's own INFO query for the crash dump of a file's last fault
# ===========================================================================
AMDGPU_INFO_GPUVM_FAULT = 0x23  # the last page fault of the file's VM

AMDGPU_VMHUB_TYPE_MASK = 0xFF
AMDGPU_VMHUB_TYPE_SHIFT = 0
AMDGPU_VMHUB_TYPE_GFX = 0
AMDGPU_VMHUB_TYPE_MM0 = 1
AMDGPU_VMHUB_TYPE_MM1 = 2
AMDGPU_VMHUB_IDX_MASK = 0xFF00
AMDGPU_VMHUB_IDX_SHIFT = 8


class drm_amdgpu_info_gpuvm_fault(_Struct):
    """Answer to AMDGPU_INFO_GPUVM_FAULT: the last GPU page fault of the calling
    file's VM (amdgpu_vm_update_fault_cache), all zero if it has had none.

    ``addr``: the faulting VA; ``vmhub``: AMDGPU_VMHUB_TYPE_* | index <<
    AMDGPU_VMHUB_IDX_SHIFT (always GFX, index 0: vgpu models one hub); ``status``:
    VM_L2_PROTECTION_FAULT_STATUS as a GFX9 part reports it. vgpu sets the fields
    below (VGPU_FAULT_STATUS_*) and nothing else, so status is nonzero for every
    recorded fault.
    """
    _fields_ = [("addr", _u64), ("status", _u32), ("vmhub", _u32)]


# The fields of VM_L2_PROTECTION_FAULT_STATUS that vgpu fills (layout of
# gc_9_0_sh_mask.h). PERMISSION_FAULTS: bit 0 the PTE was not valid (no mapping),
# bits 1..3 the permission the access needed (the AMDGPU_VM_PAGE_READABLE /
# WRITEABLE / EXECUTABLE bit); RW: set for a write.
VGPU_FAULT_STATUS_PERMISSION_FAULTS_SHIFT = 4
VGPU_FAULT_STATUS_PERMISSION_FAULTS_MASK = 0xF0
VGPU_FAULT_STATUS_RW = 1 << 18

# vgpu's own INFO queries start at 0x80, far above amdgpu's (0x00..0x24 in Linux 6.x).
VGPU_INFO_LAST_FAULT = 0x80


class vgpu_info_last_fault(_Struct):
    """Answer to VGPU_INFO_LAST_FAULT (vgpu's addition to AMDGPU_INFO): the calling
    file's last job that failed with a crash dump (a page fault, a bad packet or
    instruction, a hang), all zero if none has.

    ``seq_no``, ``ctx_id``, ``ip_type``, ``ip_instance``, ``ring``: the job, as its
    drm_amdgpu_fence names it (seq_no 0: no failed job); ``error``: the errno its
    fence carries (EFAULT, EINVAL, ETIME); ``devcd``: N of its crash dump,
    MOUNT/sys/class/devcoredump/devcd<N>/data (kept while it is among the device's
    last 16 dumps). A UMD whose fence failed asks this instead of reading kmsg.
    """
    _fields_ = [
        ("seq_no", _u64),
        ("ctx_id", _u32),
        ("ip_type", _u32),
        ("ip_instance", _u32),
        ("ring", _u32),
        ("error", _s32),
        ("devcd", _u32),
    ]


VGPU_INFO_JOB_COUNTERS = 0x81


class vgpu_info_job_query(_Struct):
    """In-struct of VGPU_INFO_JOB_COUNTERS: it takes the 16 bytes of
    drm_amdgpu_info's query union (as query_hw_ip or read_mmr_reg do). The job is
    named as its drm_amdgpu_fence names it: ``ip_type`` (AMDGPU_HW_IP_*), ``ring``,
    ``seq_no`` (the CS handle)."""
    _fields_ = [("ip_type", _u32), ("ring", _u32), ("seq_no", _u64)]


class vgpu_info_job_counters(_Struct):
    """Answer to VGPU_INFO_JOB_COUNTERS (vgpu's addition to AMDGPU_INFO): the
    performance counters of one finished job of the calling file, summed over its
    IBs (docs/observability.md). A profiler asks it after the job's fence signaled.

    ``error``: the errno its fence carries (0: ok). ``started_ns`` / ``ended_ns``:
    when the engine ran it, on the device clock of AMDGPU_INFO_TIMESTAMP;
    ``busy_ns``: their difference. ``packets``: packets completed; ``bytes_read``
    / ``bytes_written``: SDMA or CP DMA traffic; ``page_faults``: 1 if it stopped
    on one. Compute (summed over its dispatches): ``dispatches``, ``waves``,
    ``instructions`` (wave instructions issued), ``lane_instructions`` (sum of
    popcount(EXEC) at issue), ``valu`` / ``salu`` / ``smem`` / ``vmem`` / ``lds``
    (instructions by class), ``bytes_loaded`` / ``bytes_stored`` (global and
    scalar memory), ``atomics`` (lane operations), ``barriers`` (s_barrier issues),
    ``tlb_hits`` / ``tlb_misses`` / ``pt_walks`` (the compute units' translations).
    Errors: EINVAL (unknown ip or ring, a seq never emitted), EBUSY (the job has not
    finished), ENOENT (not the caller's job, or one among more than the ring's last
    4096).
    """
    _fields_ = [
        ("seq_no", _u64),
        ("ip_type", _u32),
        ("ring", _u32),
        ("error", _s32),
        ("_pad", _u32),
        ("started_ns", _u64),
        ("ended_ns", _u64),
        ("busy_ns", _u64),
        ("packets", _u64),
        ("bytes_read", _u64),
        ("bytes_written", _u64),
        ("page_faults", _u64),
        ("dispatches", _u64),
        ("waves", _u64),
        ("instructions", _u64),
        ("lane_instructions", _u64),
        ("valu", _u64),
        ("salu", _u64),
        ("smem", _u64),
        ("vmem", _u64),
        ("lds", _u64),
        ("bytes_loaded", _u64),
        ("bytes_stored", _u64),
        ("atomics", _u64),
        ("barriers", _u64),
        ("tlb_hits", _u64),
        ("tlb_misses", _u64),
        ("pt_walks", _u64),
    ]


VGPU_INFO_USERQ_STATE = 0x82
VGPU_USERQ_STATE_ACTIVE = 0
VGPU_USERQ_STATE_HUNG = 1
VGPU_USERQ_STATE_FAULTED = 2
VGPU_USERQ_NO_DEVCD = 0xFFFFFFFF


class vgpu_info_userq_state(_Struct):
    """Answer to VGPU_INFO_USERQ_STATE (vgpu's addition to AMDGPU_INFO): the state of
    the calling file's user queue ``query_hw_ip.type`` (the queue id goes in the
    query union's first u32). ``state``: VGPU_USERQ_STATE_*; ``error``: the errno
    its fences failed with (EFAULT: a page fault, EINVAL: a bad packet, ETIME: a
    hang; 0 while active); ``devcd``: N of its crash dump devcd<N> (VGPU_USERQ_NO_DEVCD: none); ``rptr``: its
    read pointer. A client whose wait makes no progress asks this (libvgpu's
    UserQueue.wait does) instead of reading kmsg. Errors: ENOENT (no such queue)."""
    _fields_ = [
        ("rptr", _u64),
        ("state", _u32),
        ("error", _s32),
        ("devcd", _u32),
        ("_pad", _u32),
    ]

