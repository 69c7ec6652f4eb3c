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

/* The display ioctls' numbers in drm.h (_IOC_NR of DRM_IOCTL_WAIT_VBLANK and of the
 * KMS range DRM_IOCTL_MODE_GETRESOURCES .. DRM_IOCTL_MODE_GETFB2): vgpu, a device
 * without a display, answers them EOPNOTSUPP as Linux does without DRIVER_MODESET.
 */
#define DRM_WAIT_VBLANK_NR		0x3A
#define DRM_MODE_NR_FIRST		0xA0
#define DRM_MODE_NR_LAST		0xCE

/* drm.h after libdrm 2.4.114 (Linux 6.8, 6.6) */
#ifndef DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT
#define DRM_CLIENT_CAP_CURSOR_PLANE_HOTSPOT	6
#endif
#ifndef DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP
#define DRM_CAP_ATOMIC_ASYNC_PAGE_FLIP		0x15
#endif

/* amdgpu_drm.h after libdrm 2.4.114 (Linux 6.6) */
#ifndef AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_SCLK
#define AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_SCLK	0xa
#define AMDGPU_INFO_SENSOR_PEAK_PSTATE_GFX_MCLK	0xb
#endif

/* AMDGPU_HW_IP_VPE, as Linux 6.7's amdgpu_drm.h defines it; Debian's libdrm-dev
 * (2.4.114) stops at VCN_JPEG. HW_IP_INFO and HW_IP_COUNT answer it (no such block). */
#ifndef AMDGPU_HW_IP_VPE
#define AMDGPU_HW_IP_VPE		9
#endif

/* AMDGPU_INFO_GPUVM_FAULT, as Linux 6.x's amdgpu_drm.h defines it; Debian's
 * libdrm-dev (2.4.114) predates it. The answer is the last page fault of the
 * calling file's VM, all zero if none. status: the VM_L2_PROTECTION_FAULT_STATUS
 * fields below (GFX9 layout); vmhub: always AMDGPU_VMHUB_TYPE_GFX, index 0.
 */
#ifndef AMDGPU_INFO_GPUVM_FAULT
#define AMDGPU_INFO_GPUVM_FAULT		0x23

#define AMDGPU_VMHUB_TYPE_MASK		0xff
#define AMDGPU_VMHUB_TYPE_SHIFT		0
#define AMDGPU_VMHUB_TYPE_GFX		0
#define AMDGPU_VMHUB_TYPE_MM0		1
#define AMDGPU_VMHUB_TYPE_MM1		2
#define AMDGPU_VMHUB_IDX_MASK		0xff00
#define AMDGPU_VMHUB_IDX_SHIFT		8

struct drm_amdgpu_info_gpuvm_fault {
	__u64 addr;
	__u32 status;
	__u32 vmhub;
};
#endif

/* The status fields vgpu fills. PERMISSION_FAULTS: bit 0 no valid PTE, bits 1..3
 * the permission the access needed (AMDGPU_VM_PAGE_READABLE/WRITEABLE/EXECUTABLE);
 * RW: a write.
 */
#define VGPU_FAULT_STATUS_PERMISSION_FAULTS_SHIFT	4
#define VGPU_FAULT_STATUS_PERMISSION_FAULTS_MASK	0xf0
#define VGPU_FAULT_STATUS_RW				(1 << 18)

/* vgpu's own AMDGPU_INFO query: the calling file's last job that failed with a
 * crash dump (page fault, bad packet or instruction, hang), all zero if none.
 * seq_no 0 means no failed job; devcd is N of
 * MOUNT/sys/class/devcoredump/devcd<N>/data; error is the fence's errno.
 */
#define VGPU_INFO_LAST_FAULT		0x80

struct vgpu_info_last_fault {
	__u64 seq_no;		/* CS sequence number of the job */
	__u32 ctx_id;
	__u32 ip_type;		/* AMDGPU_HW_IP_* */
	__u32 ip_instance;
	__u32 ring;
	__s32 error;		/* EFAULT, EINVAL, ETIME */
	__u32 devcd;		/* its crash dump */
};

/* vgpu's own AMDGPU_INFO query: the performance counters of one finished job of the
 * calling file (docs/observability.md). The job is named in the 16 bytes of
 * drm_amdgpu_info's query union, read as struct vgpu_info_job_query. Errors: EINVAL
 * (unknown ip or ring, seq never emitted), EBUSY (not finished), ENOENT (not the
 * caller's job, or older than the ring's last 4096).
 */
#define VGPU_INFO_JOB_COUNTERS		0x81

struct vgpu_info_job_query {
	__u32 ip_type;		/* AMDGPU_HW_IP_* */
	__u32 ring;
	__u64 seq_no;		/* CS sequence number of the job */
};

struct vgpu_info_job_counters {
	__u64 seq_no;
	__u32 ip_type;
	__u32 ring;
	__s32 error;		/* the errno its fence carries, 0 if none */
	__u32 _pad;
	__u64 started_ns;	/* device clock, as AMDGPU_INFO_TIMESTAMP */
	__u64 ended_ns;
	__u64 busy_ns;
	__u64 packets;		/* packets completed */
	__u64 bytes_read;	/* SDMA / CP DMA traffic */
	__u64 bytes_written;
	__u64 page_faults;
	__u64 dispatches;	/* compute, summed over the job's dispatches */
	__u64 waves;
	__u64 instructions;	/* wave instructions issued */
	__u64 lane_instructions;	/* sum of popcount(EXEC) at issue */
	__u64 valu;
	__u64 salu;
	__u64 smem;
	__u64 vmem;
	__u64 lds;
	__u64 bytes_loaded;	/* global and scalar memory, per lane */
	__u64 bytes_stored;
	__u64 atomics;		/* lane operations */
	__u64 barriers;
	__u64 tlb_hits;
	__u64 tlb_misses;
	__u64 pt_walks;
};

/* User-mode queues, as Linux 6.16's amdgpu_drm.h defines them (Debian's libdrm-dev
 * 2.4.114 predates them). docs/userq.md: what vgpu's MI100 does with them. The
 * DEV_INFO and HW_IP_INFO fields added since 2.4.114 come as the structs
 * drm_amdgpu_info_device_userq / drm_amdgpu_info_hw_ip_userq: the old struct, then
 * the new fields, at the offsets of the kernel's flat struct.
 */
#ifndef DRM_AMDGPU_USERQ
#define DRM_AMDGPU_USERQ		0x16
#define DRM_AMDGPU_USERQ_SIGNAL		0x17
#define DRM_AMDGPU_USERQ_WAIT		0x18

#define AMDGPU_GEM_DOMAIN_DOORBELL	0x40

#define AMDGPU_USERQ_OP_CREATE	1
#define AMDGPU_USERQ_OP_FREE	2

#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_MASK  0x3
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_SHIFT 0
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW 0
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW 1
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH 2
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH 3 /* admin only */
#define AMDGPU_USERQ_CREATE_FLAGS_QUEUE_SECURE  (1 << 2)

struct drm_amdgpu_userq_in {
	__u32	op;
	__u32	queue_id;
	__u32	ip_type;
	__u32	doorbell_handle;
	__u32	doorbell_offset;
	__u32	flags;
	__u64	queue_va;
	__u64	queue_size;
	__u64	rptr_va;
	__u64	wptr_va;
	__u64	mqd;
	__u64	mqd_size;
};

struct drm_amdgpu_userq_out {
	__u32	queue_id;
	__u32	_pad;
};

union drm_amdgpu_userq {
	struct drm_amdgpu_userq_in in;
	struct drm_amdgpu_userq_out out;
};

struct drm_amdgpu_userq_mqd_gfx11 {
	__u64	shadow_va;
	__u64	csa_va;
};

struct drm_amdgpu_userq_mqd_sdma_gfx11 {
	__u64	csa_va;
};

struct drm_amdgpu_userq_mqd_compute_gfx11 {
	__u64	eop_va;
};

struct drm_amdgpu_userq_signal {
	__u32	queue_id;
	__u32	pad;
	__u64	syncobj_handles;
	__u64	num_syncobj_handles;
	__u64	bo_read_handles;
	__u64	bo_write_handles;
	__u32	num_bo_read_handles;
	__u32	num_bo_write_handles;
};

struct drm_amdgpu_userq_fence_info {
	__u64	va;
	__u64	value;
};

struct drm_amdgpu_userq_wait {
	__u32	waitq_id;
	__u32	pad;
	__u64	syncobj_handles;
	__u64	syncobj_timeline_handles;
	__u64	syncobj_timeline_points;
	__u64	bo_read_handles;
	__u64	bo_write_handles;
	__u16	num_syncobj_timeline_handles;
	__u16	num_fences;
	__u32	num_syncobj_handles;
	__u32	num_bo_read_handles;
	__u32	num_bo_write_handles;
	__u64	out_fences;
};

#define DRM_IOCTL_AMDGPU_USERQ		DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ, union drm_amdgpu_userq)
#define DRM_IOCTL_AMDGPU_USERQ_SIGNAL	DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ_SIGNAL, struct drm_amdgpu_userq_signal)
#define DRM_IOCTL_AMDGPU_USERQ_WAIT	DRM_IOWR(DRM_COMMAND_BASE + DRM_AMDGPU_USERQ_WAIT, struct drm_amdgpu_userq_wait)

/* Linux 6.6+: the IBs one CS may carry, a __u32 per HW IP (amdgpu_ring_max_ibs) */
#define AMDGPU_INFO_MAX_IBS		0x22
#define AMDGPU_INFO_UQ_FW_AREAS		0x24

struct drm_amdgpu_info_uq_metadata_gfx {
	__u32 shadow_size;
	__u32 shadow_alignment;
	__u32 csa_size;
	__u32 csa_alignment;
};

struct drm_amdgpu_info_uq_metadata_compute {
	__u32 eop_size;
	__u32 eop_alignment;
};

struct drm_amdgpu_info_uq_metadata_sdma {
	__u32 csa_size;
	__u32 csa_alignment;
};

union drm_amdgpu_info_uq_metadata {
	struct drm_amdgpu_info_uq_metadata_gfx gfx;
	struct drm_amdgpu_info_uq_metadata_compute compute;
	struct drm_amdgpu_info_uq_metadata_sdma sdma;
};
#endif

struct drm_amdgpu_info_device_userq {
	struct drm_amdgpu_info_device base;
	__u64 min_engine_clock;
	__u64 min_memory_clock;
	__u32 tcp_cache_size;
	__u32 num_sqc_per_wgp;
	__u32 sqc_data_cache_size;
	__u32 sqc_inst_cache_size;
	__u32 gl1c_cache_size;
	__u32 gl2c_cache_size;
	__u64 mall_size;
	__u32 enabled_rb_pipes_mask_hi;
	__u32 shadow_size;
	__u32 shadow_alignment;
	__u32 csa_size;
	__u32 csa_alignment;
	__u32 userq_ip_mask;
	__u32 pad;
};

struct drm_amdgpu_info_hw_ip_userq {
	struct drm_amdgpu_info_hw_ip base;
	__u32 userq_num_slots;
};

/* vgpu's own AMDGPU_INFO query: the state of one of the calling file's user queues
 * (its id in the query union's first u32). state: VGPU_USERQ_STATE_*; error: the
 * errno its fences failed with (EFAULT, EINVAL, ETIME), 0 while active; devcd: N of
 * its crash dump devcd<N>, VGPU_USERQ_NO_DEVCD if none. ENOENT: no such queue.
 */
#define VGPU_INFO_USERQ_STATE		0x82
#define VGPU_USERQ_STATE_ACTIVE		0
#define VGPU_USERQ_STATE_HUNG		1
#define VGPU_USERQ_STATE_FAULTED	2
#define VGPU_USERQ_NO_DEVCD		0xffffffff

struct vgpu_info_userq_state {
	__u64 rptr;
	__u32 state;
	__s32 error;
	__u32 devcd;
	__u32 _pad;
};

#if defined(__cplusplus)
}
#endif

#endif /* __VGPU_DRM_H__ */
