/* dmabuf_share.c -- one buffer object, two processes, through a dma-buf fd.
 *
 * The exporter allocates a GTT BO, fills it from the CPU and exports it as a dma-buf
 * fd (amdgpu_bo_export, PRIME_HANDLE_TO_FD). It starts a second process (fork, then
 * exec of this program, so the importer has its own libdrm state and its own DRM
 * file) and hands it the fd. The importer opens the device itself, imports the fd
 * (amdgpu_bo_import, PRIME_FD_TO_HANDLE), checks the exporter's bytes through its own
 * CPU mapping, then has its GPU fill the first half with SDMA CONSTANT_FILL. The
 * exporter, once the importer is done, sees the GPU's bytes through its mapping:
 * both processes and the engine share the same pages.
 *
 *     vgpu run --mount /tmp/vgpu -- samples/c/dmabuf_share [--size BYTES]
 *
 * Build (make build does it):
 *     gcc -O2 -Wall -o dmabuf_share dmabuf_share.c $(pkg-config --cflags --libs libdrm_amdgpu libdrm)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <amdgpu.h>
#include <amdgpu_drm.h>
#include <xf86drm.h>

/* As in sdma_exercise.c: 0, a negative errno, or -1 with errno set. */
#define CHECK(call)                                                                   \
	do {                                                                          \
		int r_ = (call);                                                      \
		if (r_) {                                                             \
			fprintf(stderr, "[%s] %s failed: %d (%s)\n", role, #call, r_, strerror(r_ < -1 ? -r_ : errno)); \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

#define FILL_VALUE 0xc0ffee00u

static const char *role = "exporter";
static const char *node = "/dev/dri/renderD128";

static uint8_t pattern(uint64_t i) { return (uint8_t)(i * 13 + 1); }

static amdgpu_device_handle open_device(int *fd)
{
	amdgpu_device_handle dev;
	uint32_t major, minor;
	*fd = open(node, O_RDWR | O_CLOEXEC);
	if (*fd < 0) {
		fprintf(stderr, "[%s] open %s: %s\n", role, node, strerror(errno));
		exit(1);
	}
	CHECK(amdgpu_device_initialize(*fd, &major, &minor, &dev));
	return dev;
}

/* The importer: its own device, the imported BO, a CPU check, a GPU fill. */
static int importer(int dmabuf_fd, uint64_t size)
{
	role = "importer";
	int fd;
	amdgpu_device_handle dev = open_device(&fd);
	struct amdgpu_bo_import_result imported;
	CHECK(amdgpu_bo_import(dev, amdgpu_bo_handle_type_dma_buf_fd, (uint32_t)dmabuf_fd, &imported));
	printf("[importer] pid %d imported dma-buf fd %d: %" PRIu64 " bytes\n", getpid(), dmabuf_fd,
	       imported.alloc_size);
	if (imported.alloc_size < size) {
		fprintf(stderr, "[importer] the BO is %" PRIu64 " bytes, expected %" PRIu64 "\n",
			imported.alloc_size, size);
		return 1;
	}
	close(dmabuf_fd); /* the GEM handle keeps the BO */

	uint8_t *cpu;
	CHECK(amdgpu_bo_cpu_map(imported.buf_handle, (void **)&cpu));
	for (uint64_t i = 0; i < size; i++) {
		if (cpu[i] != pattern(i)) {
			printf("[importer] MISMATCH at byte %" PRIu64 ": got %#04x, want %#04x\n", i, cpu[i], pattern(i));
			return 1;
		}
	}
	printf("[importer] all %" PRIu64 " bytes the exporter wrote are there\n", size);

	/* The GPU of this process fills the first half (SDMA CONSTANT_FILL, dword fill). */
	amdgpu_context_handle ctx;
	amdgpu_bo_handle ib_bo;
	amdgpu_va_handle va_bo, va_ib;
	uint64_t bo_va, ib_va;
	uint32_t *ib;
	struct amdgpu_bo_alloc_request req = {.alloc_size = 4096, .phys_alignment = 4096,
					      .preferred_heap = AMDGPU_GEM_DOMAIN_GTT};
	CHECK(amdgpu_cs_ctx_create(dev, &ctx));
	CHECK(amdgpu_bo_alloc(dev, &req, &ib_bo));
	CHECK(amdgpu_bo_cpu_map(ib_bo, (void **)&ib));
	CHECK(amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, size, 4096, 0, &bo_va, &va_bo, 0));
	CHECK(amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, 4096, 4096, 0, &ib_va, &va_ib, 0));
	CHECK(amdgpu_bo_va_op(imported.buf_handle, 0, size, bo_va, 0, AMDGPU_VA_OP_MAP));
	CHECK(amdgpu_bo_va_op(ib_bo, 0, 4096, ib_va, 0, AMDGPU_VA_OP_MAP));
	ib[0] = 11 | (2u << 30); /* CONSTANT_FILL, fill size dword */
	ib[1] = (uint32_t)bo_va;
	ib[2] = (uint32_t)(bo_va >> 32);
	ib[3] = FILL_VALUE;
	ib[4] = (uint32_t)(size / 2 - 1);

	amdgpu_bo_list_handle list;
	CHECK(amdgpu_bo_list_create(dev, 2, (amdgpu_bo_handle[]){imported.buf_handle, ib_bo}, NULL, &list));
	struct amdgpu_cs_ib_info ib_info = {.ib_mc_address = ib_va, .size = 5};
	struct amdgpu_cs_request cs = {.ip_type = AMDGPU_HW_IP_DMA, .resources = list,
				       .number_of_ibs = 1, .ibs = &ib_info};
	CHECK(amdgpu_cs_submit(ctx, 0, &cs, 1));
	struct amdgpu_cs_fence fence = {.context = ctx, .ip_type = AMDGPU_HW_IP_DMA, .fence = cs.seq_no};
	uint32_t expired = 0;
	CHECK(amdgpu_cs_query_fence_status(&fence, AMDGPU_TIMEOUT_INFINITE, 0, &expired));
	printf("[importer] SDMA filled the first %" PRIu64 " bytes with %#x (seq %" PRIu64 " %s)\n",
	       size / 2, FILL_VALUE, cs.seq_no, expired ? "signaled" : "BUSY");

	CHECK(amdgpu_bo_list_destroy(list));
	CHECK(amdgpu_bo_va_op(ib_bo, 0, 4096, ib_va, 0, AMDGPU_VA_OP_UNMAP));
	CHECK(amdgpu_bo_va_op(imported.buf_handle, 0, size, bo_va, 0, AMDGPU_VA_OP_UNMAP));
	CHECK(amdgpu_va_range_free(va_ib));
	CHECK(amdgpu_va_range_free(va_bo));
	CHECK(amdgpu_bo_cpu_unmap(ib_bo));
	CHECK(amdgpu_bo_free(ib_bo));
	CHECK(amdgpu_bo_cpu_unmap(imported.buf_handle));
	CHECK(amdgpu_bo_free(imported.buf_handle));
	CHECK(amdgpu_cs_ctx_free(ctx));
	CHECK(amdgpu_device_deinitialize(dev));
	close(fd);
	return expired ? 0 : 1;
}

int main(int argc, char **argv)
{
	uint64_t size = 64 * 1024;
	int child_fd = -1;

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress and errors in order, also in a pipe */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			node = argv[++i];
		else if (!strcmp(argv[i], "--import-fd") && i + 1 < argc) /* set by the exporter */
			child_fd = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--device /dev/dri/renderD128] [--size BYTES]\n", argv[0]);
			return 2;
		}
	}
	if (!size || size % 8) {
		fprintf(stderr, "--size must be a positive multiple of 8\n");
		return 2;
	}
	if (child_fd >= 0)
		return importer(child_fd, size);

	/* The exporter: a BO filled by the CPU, exported as a dma-buf fd. */
	int fd;
	amdgpu_device_handle dev = open_device(&fd);
	amdgpu_bo_handle bo;
	uint8_t *cpu;
	uint32_t dmabuf_fd;
	struct amdgpu_bo_alloc_request req = {.alloc_size = size, .phys_alignment = 4096,
					      .preferred_heap = AMDGPU_GEM_DOMAIN_GTT};
	CHECK(amdgpu_bo_alloc(dev, &req, &bo));
	CHECK(amdgpu_bo_cpu_map(bo, (void **)&cpu));
	for (uint64_t i = 0; i < size; i++)
		cpu[i] = pattern(i);
	CHECK(amdgpu_bo_export(bo, amdgpu_bo_handle_type_dma_buf_fd, &dmabuf_fd));
	printf("[exporter] pid %d: %" PRIu64 "-byte GTT BO filled, exported as dma-buf fd %u\n",
	       getpid(), size, dmabuf_fd);

	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) { /* a new program image: its own libdrm_amdgpu state and DRM file */
		char fd_arg[16], size_arg[32];
		fcntl((int)dmabuf_fd, F_SETFD, 0); /* amdgpu_bo_export made it close-on-exec */
		snprintf(fd_arg, sizeof(fd_arg), "%u", dmabuf_fd);
		snprintf(size_arg, sizeof(size_arg), "%" PRIu64, size);
		execl("/proc/self/exe", argv[0], "--device", node, "--size", size_arg, "--import-fd", fd_arg,
		      (char *)NULL);
		perror("exec");
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "[exporter] the importer failed\n");
		return 1;
	}

	int bad = 0;
	for (uint64_t i = 0; i < size && !bad; i += 4) {
		uint32_t got, want = FILL_VALUE;
		memcpy(&got, cpu + i, 4);
		if (i >= size / 2)
			want = pattern(i) | pattern(i + 1) << 8 | pattern(i + 2) << 16 | (uint32_t)pattern(i + 3) << 24;
		if (got != want) {
			printf("[exporter] MISMATCH at byte %" PRIu64 ": got %#010x, want %#010x\n", i, got, want);
			bad = 1;
		}
	}
	if (!bad)
		printf("[exporter] sees the importer's GPU fill in the first half and its own bytes after\n");
	close((int)dmabuf_fd);
	CHECK(amdgpu_bo_cpu_unmap(bo));
	CHECK(amdgpu_bo_free(bo));
	CHECK(amdgpu_device_deinitialize(dev));
	close(fd);
	printf(bad ? "FAIL\n" : "PASS\n");
	return bad;
}
