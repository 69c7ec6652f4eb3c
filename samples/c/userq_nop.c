/* userq_nop.c -- a user-mode queue in C: the raw flow, no helper library.
 *
 * Setup is ioctls: buffer objects for the ring, the read/write pointers and the MQD
 * area (libdrm_amdgpu), a DOORBELL-domain BO, and DRM_IOCTL_AMDGPU_USERQ (raw, with
 * the Linux 6.16 structs from include/vgpu_drm.h). Then every submission is stores
 * and one FUTEX_WAKE: packets into the ring, the write pointer, the doorbell; and
 * completion is FUTEX_WAIT on the read pointer the engine writes. strace shows it:
 *
 *     make build && vgpu mount /tmp/vgpu
 *     vgpu run --mount /tmp/vgpu -- strace -f -e trace=ioctl,futex samples/c/userq_nop
 *
 * docs/userq.md has the rules (pointers count dwords and never wrap; the doorbell
 * slot takes the write pointer; a packet does not straddle the ring's end).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <amdgpu.h>
#include <amdgpu_drm.h>
#include <xf86drm.h>

#include "vgpu_drm.h"

#define CHECK(call)                                                                   \
	do {                                                                          \
		int r_ = (call);                                                      \
		if (r_) {                                                             \
			fprintf(stderr, "%s failed: %d (%s)\n", #call, r_, strerror(r_ < -1 ? -r_ : errno)); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

#define SDMA_OP_NOP 0
#define SDMA_OP_FENCE 5
#define RING_BYTES 4096

static amdgpu_device_handle dev;

struct buffer {
	amdgpu_bo_handle bo;
	amdgpu_va_handle va_handle;
	uint64_t va;
	void *cpu;
};

static struct buffer buffer_alloc(uint64_t size, uint32_t domain, int gpu_mapped)
{
	struct buffer b = {0};
	struct amdgpu_bo_alloc_request req = {.alloc_size = size, .phys_alignment = 4096, .preferred_heap = domain};
	CHECK(amdgpu_bo_alloc(dev, &req, &b.bo));
	CHECK(amdgpu_bo_cpu_map(b.bo, &b.cpu));
	if (gpu_mapped) {
		CHECK(amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, size, 4096, 0, &b.va, &b.va_handle, 0));
		CHECK(amdgpu_bo_va_op(b.bo, 0, size, b.va, 0, AMDGPU_VA_OP_MAP));
	}
	return b;
}

static void buffer_free(struct buffer *b)
{
	if (b->va_handle) {
		amdgpu_bo_va_op(b->bo, 0, 4096, b->va, 0, AMDGPU_VA_OP_UNMAP);
		amdgpu_va_range_free(b->va_handle);
	}
	amdgpu_bo_cpu_unmap(b->bo);
	amdgpu_bo_free(b->bo);
}

/* The shared futex operations: the words are in BO files both processes map. */
static void futex_wake(volatile void *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void futex_wait(volatile void *addr, uint32_t seen)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
	syscall(SYS_futex, addr, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Wait until the engine has read past `w`: poll for up to SPIN_US first, as CUDA's
 * default spin-wait does, then FUTEX_WAIT. A CPU that sleeps at once may be let idle
 * by the hypervisor, and waking it costs more than a small job takes. */
#define SPIN_US 100
static void wait_rptr(volatile uint64_t *rptr, uint64_t w)
{
	double end = now() + SPIN_US * 1e-6;
	while (__atomic_load_n(rptr, __ATOMIC_ACQUIRE) < w && now() < end) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		sched_yield();   /* the queue's worker may have been woken onto this CPU */
	}
	while (__atomic_load_n(rptr, __ATOMIC_ACQUIRE) < w)
		futex_wait(rptr, (uint32_t)*rptr);
}

int main(int argc, char **argv)
{
	const char *node = "/dev/dri/renderD128";
	int count = 1000;
	uint32_t major, minor;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--device") && i + 1 < argc)
			node = argv[++i];
		else if (!strcmp(argv[i], "--count") && i + 1 < argc)
			count = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--device /dev/dri/renderD128] [--count N]\n", argv[0]);
			return 2;
		}
	}
	int fd = open(node, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", node, strerror(errno));
		return 1;
	}
	CHECK(amdgpu_device_initialize(fd, &major, &minor, &dev));

	struct drm_amdgpu_info_device_userq info = {0};
	CHECK(amdgpu_query_info(dev, AMDGPU_INFO_DEV_INFO, sizeof(info), &info));
	if (!(info.userq_ip_mask & (1u << AMDGPU_HW_IP_DMA))) {
		fprintf(stderr, "%s has no SDMA user queues (DEV_INFO userq_ip_mask %#x)\n", node, info.userq_ip_mask);
		return 1;
	}

	/* 1. The queue's memory: ring, pointers (rptr at 0, wptr at 8), the MQD's CSA
	 * area, a fence word to watch, and the doorbell page (not GPU-mapped). */
	struct buffer ring = buffer_alloc(RING_BYTES, AMDGPU_GEM_DOMAIN_GTT, 1);
	struct buffer ptrs = buffer_alloc(4096, AMDGPU_GEM_DOMAIN_GTT, 1);
	struct buffer csa = buffer_alloc(4096, AMDGPU_GEM_DOMAIN_GTT, 1);
	struct buffer fence = buffer_alloc(4096, AMDGPU_GEM_DOMAIN_GTT, 1);
	struct buffer doorbell = buffer_alloc(4096, AMDGPU_GEM_DOMAIN_DOORBELL, 0);
	uint32_t doorbell_handle;
	CHECK(amdgpu_bo_export(doorbell.bo, amdgpu_bo_handle_type_kms, &doorbell_handle));

	/* 2. DRM_IOCTL_AMDGPU_USERQ: create. */
	struct drm_amdgpu_userq_mqd_sdma_gfx11 mqd = {.csa_va = csa.va};
	union drm_amdgpu_userq args = {0};
	args.in.op = AMDGPU_USERQ_OP_CREATE;
	args.in.ip_type = AMDGPU_HW_IP_DMA;
	args.in.doorbell_handle = doorbell_handle;
	args.in.doorbell_offset = 0;
	args.in.queue_va = ring.va;
	args.in.queue_size = RING_BYTES;
	args.in.rptr_va = ptrs.va;
	args.in.wptr_va = ptrs.va + 8;
	args.in.mqd = (uintptr_t)&mqd;
	args.in.mqd_size = sizeof(mqd);
	CHECK(drmCommandWriteRead(fd, DRM_AMDGPU_USERQ, &args, sizeof(args)));
	uint32_t queue_id = args.out.queue_id;
	printf("created user queue %u: ring %#" PRIx64 ", rptr %#" PRIx64 ", wptr %#" PRIx64 "\n",
	       queue_id, ring.va, ptrs.va, ptrs.va + 8);

	volatile uint32_t *rb = ring.cpu;
	volatile uint64_t *rptr = ptrs.cpu, *wptr = (volatile uint64_t *)ptrs.cpu + 1, *db = doorbell.cpu;
	volatile uint32_t *fence_word = fence.cpu;
	uint64_t w = 0;

	/* 3. Submit: a FENCE packet, then wptr and the doorbell, then FUTEX_WAKE. */
	rb[w++ % (RING_BYTES / 4)] = SDMA_OP_FENCE;
	rb[w++ % (RING_BYTES / 4)] = (uint32_t)fence.va;
	rb[w++ % (RING_BYTES / 4)] = (uint32_t)(fence.va >> 32);
	rb[w++ % (RING_BYTES / 4)] = 0xC0FFEE;
	__atomic_store_n(wptr, w, __ATOMIC_RELEASE);
	__atomic_store_n(db, w, __ATOMIC_RELEASE);
	futex_wake(db);
	/* 4. Wait: poll, then FUTEX_WAIT on the read pointer, until the engine has read past it. */
	wait_rptr(rptr, w);
	printf("fence written by the queue: %#x (rptr %" PRIu64 ")\n", *fence_word, *rptr);
	if (*fence_word != 0xC0FFEE)
		return 1;

	/* 5. NOPs, one at a time: stores and futex calls only. */
	double t0 = now();
	for (int i = 0; i < count; i++) {
		rb[w++ % (RING_BYTES / 4)] = SDMA_OP_NOP;
		__atomic_store_n(wptr, w, __ATOMIC_RELEASE);
		__atomic_store_n(db, w, __ATOMIC_RELEASE);
		futex_wake(db);
		wait_rptr(rptr, w);
	}
	printf("%d NOPs: %.1f us each (submit -> rptr observed)\n", count, (now() - t0) / count * 1e6);

	/* 6. Free: the queue, then its memory. */
	memset(&args, 0, sizeof(args));
	args.in.op = AMDGPU_USERQ_OP_FREE;
	args.in.queue_id = queue_id;
	CHECK(drmCommandWriteRead(fd, DRM_AMDGPU_USERQ, &args, sizeof(args)));
	buffer_free(&doorbell);
	buffer_free(&fence);
	buffer_free(&csa);
	buffer_free(&ptrs);
	buffer_free(&ring);
	amdgpu_device_deinitialize(dev);
	close(fd);
	printf("queue %u freed\n", queue_id);
	return 0;
}
