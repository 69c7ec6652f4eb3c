/* sdma_exercise.c -- the classic libdrm_amdgpu SDMA exercise, in C.
 *
 * The flow of a driver tutorial (and of libdrm's tests/amdgpu/basic_tests.c):
 * open the render node, amdgpu_device_initialize, a context, buffer objects in GTT
 * and VRAM mapped for the CPU and into the GPU's virtual memory, SDMA packets in an
 * indirect buffer (IB), amdgpu_cs_submit on the DMA ring, wait on the fence, check
 * every byte; then the same with a syncobj as the completion signal; then free it all.
 *
 * Nothing in it knows vgpu: on vgpu it runs through the preload library,
 *
 *     make build && vgpu mount /tmp/vgpu
 *     vgpu run --mount /tmp/vgpu -- samples/c/sdma_exercise [--size BYTES] [--ring N]
 *
 * and on a machine with an AMD GPU it runs as it is. Build (make build does it):
 *     gcc -O2 -Wall -o sdma_exercise sdma_exercise.c $(pkg-config --cflags --libs libdrm_amdgpu libdrm)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <amdgpu.h>
#include <amdgpu_drm.h>
#include <xf86drm.h>

/* libdrm_amdgpu returns 0 or a negative errno, or -1 with errno set where it passes
 * drmIoctl's result through: say which call failed, and why, and stop. */
#define CHECK(call)                                                                   \
	do {                                                                          \
		int r_ = (call);                                                      \
		if (r_) {                                                             \
			fprintf(stderr, "%s failed: %d (%s)\n", #call, r_, strerror(r_ < -1 ? -r_ : errno)); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* SDMA v4 packets (GFX9; Linux drivers/gpu/drm/amd/amdgpu/vega10_sdma_pkt_open.h).
 * Header dword: op[7:0] | sub_op[15:8] | extra[31:16]. */
#define SDMA_OP_COPY 1            /* sub_op 0: COPY_LINEAR */
#define SDMA_OP_WRITE 2           /* sub_op 0: WRITE_LINEAR (untiled) */
#define SDMA_OP_CONST_FILL 11
#define SDMA_FILL_DWORD (2 << 30) /* CONSTANT_FILL header: fill size 4 bytes */
#define SDMA_MAX_COPY (1u << 22)  /* COPY_LINEAR's byte count is 22 bits */
#define SDMA_MAX_FILL (1u << 22)  /* so is CONSTANT_FILL's */

static amdgpu_device_handle dev;
static amdgpu_context_handle ctx;
static unsigned ring;

/* A buffer object the CPU and the GPU both use. */
struct buffer {
	const char *name;
	amdgpu_bo_handle bo;
	amdgpu_va_handle va_handle;
	uint64_t va;   /* its address in the GPU's virtual memory */
	void *cpu;     /* its CPU mapping */
	uint64_t size;
};

static struct buffer buffer_alloc(const char *name, uint64_t size, uint32_t domain)
{
	struct buffer b = {.name = name, .size = size};
	struct amdgpu_bo_alloc_request req = {
		.alloc_size = size,
		.phys_alignment = 4096,
		.preferred_heap = domain,
		.flags = domain == AMDGPU_GEM_DOMAIN_VRAM ? AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED : 0,
	};
	CHECK(amdgpu_bo_alloc(dev, &req, &b.bo));
	CHECK(amdgpu_bo_cpu_map(b.bo, &b.cpu));
	/* libdrm keeps the VA allocator in user space, inside the range the kernel gave
	 * (DEV_INFO's virtual_address_offset/max); GEM_VA maps the BO there. */
	CHECK(amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, size, 4096, 0, &b.va, &b.va_handle, 0));
	CHECK(amdgpu_bo_va_op(b.bo, 0, size, b.va, 0, AMDGPU_VA_OP_MAP));
	printf("  %s: %" PRIu64 " bytes in %s, GPU VA %#" PRIx64 "\n", name, size,
	       domain == AMDGPU_GEM_DOMAIN_VRAM ? "VRAM" : "GTT", b.va);
	return b;
}

static void buffer_free(struct buffer *b)
{
	CHECK(amdgpu_bo_va_op(b->bo, 0, b->size, b->va, 0, AMDGPU_VA_OP_UNMAP));
	CHECK(amdgpu_va_range_free(b->va_handle));
	CHECK(amdgpu_bo_cpu_unmap(b->bo));
	CHECK(amdgpu_bo_free(b->bo));
}

/* An IB being written: packets go into a GTT buffer the GPU reads from. */
struct ib {
	struct buffer buf;
	uint32_t *dw;
	uint32_t n;
};

static void emit(struct ib *ib, uint32_t dw)
{
	if ((uint64_t)(ib->n + 1) * 4 > ib->buf.size) {
		fprintf(stderr, "IB full (%u dwords)\n", ib->n);
		exit(1);
	}
	ib->dw[ib->n++] = dw;
}

static void write_linear(struct ib *ib, uint64_t dst, const uint32_t *data, uint32_t count)
{
	emit(ib, SDMA_OP_WRITE);
	emit(ib, (uint32_t)dst);
	emit(ib, (uint32_t)(dst >> 32));
	emit(ib, count - 1);
	for (uint32_t i = 0; i < count; i++)
		emit(ib, data[i]);
}

static void constant_fill(struct ib *ib, uint64_t dst, uint32_t value, uint64_t bytes)
{
	for (uint64_t off = 0; off < bytes; off += SDMA_MAX_FILL) {
		uint64_t n = bytes - off < SDMA_MAX_FILL ? bytes - off : SDMA_MAX_FILL;
		emit(ib, SDMA_OP_CONST_FILL | SDMA_FILL_DWORD);
		emit(ib, (uint32_t)(dst + off));
		emit(ib, (uint32_t)((dst + off) >> 32));
		emit(ib, value);
		emit(ib, (uint32_t)(n - 1));
	}
}

static void copy_linear(struct ib *ib, uint64_t dst, uint64_t src, uint64_t bytes)
{
	for (uint64_t off = 0; off < bytes; off += SDMA_MAX_COPY) {
		uint64_t n = bytes - off < SDMA_MAX_COPY ? bytes - off : SDMA_MAX_COPY;
		emit(ib, SDMA_OP_COPY);
		emit(ib, (uint32_t)(n - 1));
		emit(ib, 0); /* parameters: no swap */
		emit(ib, (uint32_t)(src + off));
		emit(ib, (uint32_t)((src + off) >> 32));
		emit(ib, (uint32_t)(dst + off));
		emit(ib, (uint32_t)((dst + off) >> 32));
	}
}

/* Submit the IB on the DMA ring with the buffers it touches, wait for its fence. */
static void submit_and_wait(struct ib *ib, struct buffer **bufs, int nbufs)
{
	amdgpu_bo_handle bos[8];
	amdgpu_bo_list_handle bo_list;
	int i;

	for (i = 0; i < nbufs; i++)
		bos[i] = bufs[i]->bo;
	bos[i++] = ib->buf.bo;
	CHECK(amdgpu_bo_list_create(dev, i, bos, NULL, &bo_list));

	struct amdgpu_cs_ib_info ib_info = {.ib_mc_address = ib->buf.va, .size = ib->n};
	struct amdgpu_cs_request req = {
		.ip_type = AMDGPU_HW_IP_DMA,
		.ring = ring,
		.resources = bo_list,
		.number_of_ibs = 1,
		.ibs = &ib_info,
	};
	CHECK(amdgpu_cs_submit(ctx, 0, &req, 1));
	printf("  submitted %u dwords on DMA ring %u: seq %" PRIu64 "\n", ib->n, ring, req.seq_no);

	struct amdgpu_cs_fence fence = {
		.context = ctx, .ip_type = AMDGPU_HW_IP_DMA, .ring = ring, .fence = req.seq_no,
	};
	uint32_t expired = 0;
	CHECK(amdgpu_cs_query_fence_status(&fence, AMDGPU_TIMEOUT_INFINITE, 0, &expired));
	printf("  fence seq %" PRIu64 ": %s\n", req.seq_no, expired ? "signaled" : "BUSY");
	if (!expired)
		exit(1);
	CHECK(amdgpu_bo_list_destroy(bo_list));
	ib->n = 0;
}

static int failures;

/* Compare every byte the CPU sees with what the GPU was asked to produce. */
static void check(const char *what, const void *got, const void *want, uint64_t size)
{
	const uint8_t *g = got, *w = want;
	for (uint64_t i = 0; i < size; i++) {
		if (g[i] != w[i]) {
			printf("  check %s: MISMATCH at byte %" PRIu64 ": got %#04x, want %#04x\n", what, i, g[i], w[i]);
			failures++;
			return;
		}
	}
	printf("  check %s: all %" PRIu64 " bytes match\n", what, size);
}

int main(int argc, char **argv)
{
	const char *node = "/dev/dri/renderD128";
	uint64_t size = 64 * 1024;
	uint32_t major, minor;

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress and errors in order, also in a pipe */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ring") && i + 1 < argc)
			ring = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			node = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--device /dev/dri/renderD128] [--size BYTES] [--ring N]\n", argv[0]);
			return 2;
		}
	}
	if (!size || size % 4) {
		fprintf(stderr, "--size must be a positive multiple of 4\n");
		return 2;
	}

	/* 1. The device: a render node, checked to be amdgpu, then libdrm_amdgpu's handle. */
	int fd = open(node, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", node, strerror(errno));
		return 1;
	}
	drmVersionPtr version = drmGetVersion(fd);
	if (!version) {
		fprintf(stderr, "drmGetVersion: %s\n", strerror(errno));
		return 1;
	}
	printf("opened %s: %s %d.%d.%d (%s)\n", node, version->name, version->version_major,
	       version->version_minor, version->version_patchlevel, version->desc);
	if (strcmp(version->name, "amdgpu") != 0) {
		fprintf(stderr, "%s is driven by \"%s\", not amdgpu\n", node, version->name);
		return 1;
	}
	drmFreeVersion(version);
	CHECK(amdgpu_device_initialize(fd, &major, &minor, &dev));
	struct amdgpu_gpu_info gpu;
	CHECK(amdgpu_query_gpu_info(dev, &gpu));
	struct drm_amdgpu_info_hw_ip dma;
	CHECK(amdgpu_query_hw_ip_info(dev, AMDGPU_HW_IP_DMA, 0, &dma));
	printf("amdgpu %u.%u: %s, family %u, asic %#x, SDMA %u.%u with rings %#x\n", major, minor,
	       amdgpu_get_marketing_name(dev), gpu.family_id, gpu.asic_id, dma.hw_ip_version_major,
	       dma.hw_ip_version_minor, dma.available_rings);
	if (!(dma.available_rings & (1u << ring))) {
		fprintf(stderr, "no DMA ring %u\n", ring);
		return 1;
	}
	CHECK(amdgpu_cs_ctx_create(dev, &ctx));

	/* 2. Buffers: a source and a destination in GTT (system memory), one in VRAM, an IB. */
	printf("buffers:\n");
	struct buffer src = buffer_alloc("source", size, AMDGPU_GEM_DOMAIN_GTT);
	struct buffer dst = buffer_alloc("destination", size, AMDGPU_GEM_DOMAIN_GTT);
	struct buffer vram = buffer_alloc("VRAM buffer", size, AMDGPU_GEM_DOMAIN_VRAM);
	struct ib ib = {.buf = buffer_alloc("IB", 4096, AMDGPU_GEM_DOMAIN_GTT)};
	ib.dw = ib.buf.cpu;
	uint8_t *want = malloc(size);
	if (!want)
		return 1;

	/* 3. WRITE_LINEAR: the packet carries the data; the engine stores it. */
	uint32_t words[256], n = size / 4 < 256 ? (uint32_t)(size / 4) : 256;
	for (uint32_t i = 0; i < n; i++)
		words[i] = 0xA5000000u | i;
	memset(dst.cpu, 0, size);
	printf("WRITE_LINEAR of %u dwords into GTT:\n", n);
	write_linear(&ib, dst.va, words, n);
	submit_and_wait(&ib, (struct buffer *[]){&dst}, 1);
	check("WRITE_LINEAR", dst.cpu, words, n * 4);

	/* 4. CONSTANT_FILL of VRAM, then COPY_LINEAR VRAM -> GTT to see it. */
	printf("CONSTANT_FILL of %" PRIu64 " bytes of VRAM with 0xdeadbeef, COPY_LINEAR to GTT:\n", size);
	memset(dst.cpu, 0, size);
	constant_fill(&ib, vram.va, 0xdeadbeef, size);
	copy_linear(&ib, dst.va, vram.va, size);
	submit_and_wait(&ib, (struct buffer *[]){&vram, &dst}, 2);
	for (uint64_t i = 0; i < size; i += 4)
		memcpy(want + i, &(uint32_t){0xdeadbeef}, 4);
	check("CONSTANT_FILL", dst.cpu, want, size);

	/* 5. COPY_LINEAR GTT -> VRAM -> GTT of data the CPU wrote. */
	printf("COPY_LINEAR of %" PRIu64 " bytes GTT -> VRAM -> GTT:\n", size);
	for (uint64_t i = 0; i < size; i++)
		want[i] = (uint8_t)(i * 7 + (i >> 12));
	memcpy(src.cpu, want, size); /* a CPU store is visible to the GPU: no flush */
	memset(dst.cpu, 0, size);
	copy_linear(&ib, vram.va, src.va, size);
	copy_linear(&ib, dst.va, vram.va, size);
	submit_and_wait(&ib, (struct buffer *[]){&src, &vram, &dst}, 3);
	check("COPY_LINEAR", dst.cpu, want, size);

	/* 6. A syncobj as the completion signal: the raw CS interface takes chunks, one
	 *    of them SYNCOBJ_OUT, and the CPU waits on the syncobj instead of the fence. */
	printf("CONSTANT_FILL with a SYNCOBJ_OUT chunk, amdgpu_cs_syncobj_wait:\n");
	uint32_t syncobj, bo_list;
	CHECK(amdgpu_cs_create_syncobj(dev, &syncobj));
	struct drm_amdgpu_bo_list_entry entries[] = {
		{.bo_handle = 0}, {.bo_handle = 0},
	};
	CHECK(amdgpu_bo_export(dst.bo, amdgpu_bo_handle_type_kms, &entries[0].bo_handle));
	CHECK(amdgpu_bo_export(ib.buf.bo, amdgpu_bo_handle_type_kms, &entries[1].bo_handle));
	CHECK(amdgpu_bo_list_create_raw(dev, 2, entries, &bo_list));
	constant_fill(&ib, dst.va, 0x600df00d, size);
	struct drm_amdgpu_cs_chunk_ib ib_chunk = {
		.va_start = ib.buf.va, .ib_bytes = ib.n * 4, .ip_type = AMDGPU_HW_IP_DMA, .ring = ring,
	};
	struct drm_amdgpu_cs_chunk_sem out = {.handle = syncobj};
	struct drm_amdgpu_cs_chunk chunks[] = {
		{AMDGPU_CHUNK_ID_IB, sizeof(ib_chunk) / 4, (uintptr_t)&ib_chunk},
		{AMDGPU_CHUNK_ID_SYNCOBJ_OUT, sizeof(out) / 4, (uintptr_t)&out},
	};
	uint64_t seq;
	CHECK(amdgpu_cs_submit_raw2(dev, ctx, bo_list, 2, chunks, &seq));
	printf("  submitted %u dwords: seq %" PRIu64 ", syncobj %u\n", ib.n, seq, syncobj);
	CHECK(amdgpu_cs_syncobj_wait(dev, &syncobj, 1, INT64_MAX, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, NULL));
	printf("  syncobj %u: signaled\n", syncobj);
	for (uint64_t i = 0; i < size; i += 4)
		memcpy(want + i, &(uint32_t){0x600df00d}, 4);
	check("syncobj-signalled CONSTANT_FILL", dst.cpu, want, size);
	ib.n = 0;

	/* 7. Free everything, in reverse order. */
	CHECK(amdgpu_bo_list_destroy_raw(dev, bo_list));
	CHECK(amdgpu_cs_destroy_syncobj(dev, syncobj));
	buffer_free(&ib.buf);
	buffer_free(&vram);
	buffer_free(&dst);
	buffer_free(&src);
	free(want);
	CHECK(amdgpu_cs_ctx_free(ctx));
	CHECK(amdgpu_device_deinitialize(dev));
	close(fd);
	printf(failures ? "FAIL\n" : "PASS\n");
	return failures ? 1 : 0;
}
