/* vgpu_drm.h -- C view of the vgpu control-file protocol.
 *
 * vgpu speaks the amdgpu/DRM uapi: request numbers and structs are those of
 * <drm.h> and <amdgpu_drm.h> (Debian libdrm-dev, /usr/include/libdrm). Because
 * FUSE cannot carry ioctl(), one ioctl is one write() of a request frame followed
 * by one read() of the reply frame on the same open file of
 * MOUNT/dev/dri/card0 or MOUNT/dev/dri/renderD128 (see docs/design.md section 3).
 *
 * vgpu/uapi.py is the Python twin of this header; tests/test_uapi.py compiles
 * against this file and checks every number, size and offset.
 *
 * Build: gcc -I/usr/include/libdrm -Iinclude prog.c
 */
#ifndef __VGPU_DRM_H__
#define __VGPU_DRM_H__

#include <drm.h>
#include <amdgpu_drm.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* First word of every request frame: "VGPU" read as a little-endian __u32. */
#define VGPU_MAGIC		0x55504756

/* Largest request or reply frame, headers included. FUSE hands the daemon at
 * most max_write (128 KiB) per write(); a larger write() would arrive split and
 * be refused, so a client keeps header + struct + extra within this.
 */
#define VGPU_MAX_FRAME		(128 * 1024)

/* Starts every write() to a control file. Followed by arg_size bytes of the
 * ioctl struct, then extra_size bytes of "flattened" pointer data: what a
 * pointer field of the struct points to, in the order the pointer fields
 * appear (CS: each drm_amdgpu_cs_chunk header followed by its length_dw
 * dwords; BO_LIST: bo_number entries of bo_info_size bytes; SYNCOBJ waits and
 * arrays: the __u32 handles, then the __u64 points; WAIT_FENCES: the
 * drm_amdgpu_fence array). Pointer values themselves are ignored.
 *
 * request is the full DRM request code (e.g. DRM_IOCTL_AMDGPU_CS), and
 * _IOC_SIZE(request) must equal arg_size. Direction bits are ignored.
 *
 * Errors (the write() fails): EINVAL (bad magic, sizes disagree with the write
 * length or the request, frame larger than VGPU_MAX_FRAME), ENOTTY (unknown
 * request), and every errno the ioctl itself refuses with before it works.
 */
struct vgpu_request_header {
	__u32 magic;		/* VGPU_MAGIC */
	__u32 request;		/* DRM_IOCTL_* */
	__u32 arg_size;		/* bytes of ioctl struct that follow */
	__u32 extra_size;	/* bytes of inline data after the struct */
};

/* Starts every read() reply. Followed by arg_size bytes of the updated ioctl
 * struct, then extra_size bytes of out-data (INFO: the answer, at most
 * return_size bytes; VERSION: name, date, desc, each *_len bytes; SYNCOBJ_QUERY:
 * the __u64 point array).
 *
 * Errors (the read() fails): EINVAL (buffer too small: the reply is kept for a
 * retry; no request pending), and errors that arise while the request
 * completes (ETIME from a wait, ECANCELED...). result is 0 on success.
 */
struct vgpu_reply_header {
	__s32 result;		/* 0 */
	__u32 arg_size;		/* bytes of ioctl struct that follow */
	__u32 extra_size;	/* bytes of out-data after the struct */
	__u32 reserved;		/* 0 */
};

#if defined(__cplusplus)
}
#endif

#endif /* __VGPU_DRM_H__ */
