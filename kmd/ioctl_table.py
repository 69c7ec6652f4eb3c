"""Every ioctl vgpu knows: its handler and its permission flags, in one literal table.

Two lists, as Linux has them: DRM_IOCTLS, the core ioctls vgpu answers (a subset of
drm_ioctls[] in drm_ioctl.c), and AMDGPU_IOCTLS_KMS, the driver's (amdgpu_ioctls_kms[]
in amdgpu_drv.c, in that file's order). Each entry carries the flags Linux gives the
same ioctl; dispatch (kmd/ioctl.py) enforces them as drm_ioctl_permit() does, so the
render node renderD128 refuses an ioctl without DRM_RENDER_ALLOW (GET_CLIENT and
AMDGPU_SCHED among vgpu's) with EACCES.

Master and authentication are Linux's (kmd/drm_auth.py): the first card0 open while
the device has no master becomes master and is authenticated; root is always
authenticated; another card0 file is not until the master AUTH_MAGICs its magic, so
it gets EACCES for every DRM_AUTH ioctl (GEM_CREATE, CS, INFO...) and DRM_MASTER
needs the current master (AMDGPU_SCHED, AUTH_MAGIC). DRM_AUTH does not apply to a
render file. Handlers still apply their own uid checks (SCHED, priorities above
NORMAL: root).

An ioctl that vgpu/uapi.py defines but vgpu does not implement yet is listed with
`not_implemented(why)`: dispatch answers ENOTTY and logs "not implemented", and the
table says what is intended. tests/kmd/test_dispatch.py checks that the table covers
every request of uapi.IOCTLS.
"""
from . import bo_list, cs, ctx, drm_auth, gem, gem_flink, info, kms, prime, sched, syncobj, userptr, vm
from . import userq_ioctl, userq_sync
from .ioctl import (DRM_AUTH, DRM_IOCTL_DEF, DRM_IOCTL_DEF_DRV, DRM_MASTER, DRM_RENDER_ALLOW, IoctlDesc,
                    index, not_implemented)

# drm_ioctl.c, drm_ioctls[]: the core ioctls of vgpu's uapi, in number order.
DRM_IOCTLS: list[IoctlDesc] = [
    DRM_IOCTL_DEF("VERSION", info.version, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("GET_MAGIC", drm_auth.get_magic, 0),
    DRM_IOCTL_DEF("GET_CLIENT", info.get_client, 0),
    DRM_IOCTL_DEF("GEM_CLOSE", gem.gem_close, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("GEM_FLINK", gem_flink.gem_flink, DRM_AUTH),
    DRM_IOCTL_DEF("GEM_OPEN", gem_flink.gem_open, DRM_AUTH),
    DRM_IOCTL_DEF("GET_CAP", info.get_cap, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SET_CLIENT_CAP", kms.set_client_cap, 0),
    DRM_IOCTL_DEF("AUTH_MAGIC", drm_auth.auth_magic, DRM_MASTER),
    DRM_IOCTL_DEF("SET_MASTER", drm_auth.set_master, 0),
    DRM_IOCTL_DEF("DROP_MASTER", drm_auth.drop_master, 0),
    DRM_IOCTL_DEF("PRIME_HANDLE_TO_FD", prime.prime_handle_to_fd, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("PRIME_FD_TO_HANDLE", prime.prime_fd_to_handle, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("MODE_GETRESOURCES", kms.get_resources, 0),
    DRM_IOCTL_DEF("MODE_GETCRTC", kms.get_crtc, 0),
    DRM_IOCTL_DEF("MODE_GETENCODER", kms.get_encoder, 0),
    DRM_IOCTL_DEF("MODE_GETCONNECTOR", kms.get_connector, 0),
    DRM_IOCTL_DEF("MODE_GETPROPERTY", kms.get_property, 0),
    DRM_IOCTL_DEF("MODE_GETPROPBLOB", kms.get_blob, 0),
    DRM_IOCTL_DEF("MODE_CREATE_DUMB", kms.create_dumb, 0),
    DRM_IOCTL_DEF("MODE_MAP_DUMB", kms.map_dumb, 0),
    DRM_IOCTL_DEF("MODE_DESTROY_DUMB", kms.destroy_dumb, 0),
    DRM_IOCTL_DEF("MODE_GETPLANERESOURCES", kms.get_plane_resources, 0),
    DRM_IOCTL_DEF("MODE_GETPLANE", kms.get_plane, 0),
    DRM_IOCTL_DEF("MODE_OBJ_GETPROPERTIES", kms.obj_get_properties, 0),
    DRM_IOCTL_DEF("SYNCOBJ_CREATE", syncobj.syncobj_create, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_DESTROY", syncobj.syncobj_destroy, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_HANDLE_TO_FD", syncobj.syncobj_handle_to_fd, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_FD_TO_HANDLE", syncobj.syncobj_fd_to_handle, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_WAIT", syncobj.syncobj_wait, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_RESET", syncobj.syncobj_reset, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_SIGNAL", syncobj.syncobj_signal, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_TIMELINE_WAIT", syncobj.syncobj_timeline_wait, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_QUERY", syncobj.syncobj_query, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_TRANSFER", syncobj.syncobj_transfer, DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF("SYNCOBJ_TIMELINE_SIGNAL", syncobj.syncobj_timeline_signal, DRM_RENDER_ALLOW),
]

# amdgpu_drv.c, amdgpu_ioctls_kms[], in that file's order.
AMDGPU_IOCTLS_KMS: list[IoctlDesc] = [
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_CREATE", gem.gem_create, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_CTX", ctx.ctx_ioctl, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_VM", vm.vm_ioctl, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_SCHED", sched.sched_ioctl, DRM_MASTER),
    DRM_IOCTL_DEF_DRV("AMDGPU_BO_LIST", bo_list.bo_list, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_FENCE_TO_HANDLE", cs.fence_to_handle, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_MMAP", gem.gem_mmap, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_WAIT_IDLE", gem.gem_wait_idle, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_CS", cs.cs, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_INFO", info.info, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_WAIT_CS", cs.wait_cs, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_WAIT_FENCES", cs.wait_fences, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_METADATA", gem.gem_metadata, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_VA", vm.gem_va, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_OP", gem.gem_op, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_GEM_USERPTR", userptr.gem_userptr, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_USERQ", userq_ioctl.userq_ioctl, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_USERQ_SIGNAL", userq_sync.userq_signal, DRM_AUTH | DRM_RENDER_ALLOW),
    DRM_IOCTL_DEF_DRV("AMDGPU_USERQ_WAIT", userq_sync.userq_wait, DRM_AUTH | DRM_RENDER_ALLOW),
]

#: `_IOC_NR` -> entry, what kmd.ioctl.dispatch reads (drm_ioctl's two array lookups in one).
TABLE: dict[int, IoctlDesc] = index(DRM_IOCTLS, AMDGPU_IOCTLS_KMS)
