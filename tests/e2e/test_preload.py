"""The preload library and `vgpu run`: unmodified C programs on libdrm against a mount.

Each test runs a small C program (compiled here against the system's libdrm) as its
own process through `vgpu run`, the way a user would (docs/libdrm.md). The library
itself is built by `make build`; without it these tests are skipped, saying so.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, vgpu_cli
from vgpu.paths import PCI_PORT_PATH, PCI_SLOT

LIBRARY = Path(ROOT) / "preload" / "libvgpu_preload.so"
SAMPLES = Path(ROOT) / "samples" / "c"

pytestmark = pytest.mark.skipif(not LIBRARY.is_file(),
                                reason=f"{LIBRARY} is not built (make build compiles it)")

PRELUDE = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <xf86drm.h>
#include <amdgpu_drm.h>
#define CHECK(what, failed) do { if (failed) { printf("FAIL %s: %s\n", what, strerror(errno)); return 1; } \
                                 printf("ok %s\n", what); } while (0)
static inline uint32_t gem_create(int fd, uint64_t size)
{
	union drm_amdgpu_gem_create c = {.in = {.bo_size = size, .alignment = 4096,
						.domains = AMDGPU_GEM_DOMAIN_GTT}};
	return drmIoctl(fd, DRM_IOCTL_AMDGPU_GEM_CREATE, &c) ? 0 : c.out.handle;
}
static inline uint64_t gem_mmap_offset(int fd, uint32_t handle)
{
	union drm_amdgpu_gem_mmap m = {.in = {.handle = handle}};
	return drmIoctl(fd, DRM_IOCTL_AMDGPU_GEM_MMAP, &m) ? 0 : m.out.addr_ptr;
}
"""

PROGRAMS = {
    # The nodes look like DRM character devices, by path and by fd.
    "nodes": r"""
int main(void)
{
	struct stat st;
	const char *nodes[] = {"/dev/dri/card0", "/dev/dri/renderD128"};
	for (int i = 0; i < 2; i++) {
		CHECK(nodes[i], stat(nodes[i], &st) != 0);
		printf("%s chr=%d rdev=%u:%u\n", nodes[i], S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev));
	}
	int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	CHECK("open", fd < 0);
	CHECK("fstat", fstat(fd, &st) != 0);
	printf("fstat chr=%d rdev=%u:%u\n", S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev));
	CHECK("stat /dev/dri", stat("/dev/dri", &st) != 0 || !S_ISDIR(st.st_mode));
	return 0;
}
""",
    # drmGetVersion: VERSION twice (lengths, then the strings through three pointers).
    "version": r"""
int main(void)
{
	int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	CHECK("open", fd < 0);
	drmVersionPtr v = drmGetVersion(fd);
	CHECK("drmGetVersion", !v);
	printf("name=%s major=%d date=%s desc_len=%d desc=%s\n", v->name, v->version_major, v->date,
	       v->desc_len, v->desc);
	drmFreeVersion(v);
	return 0;
}
""",
    # GEM_CREATE + GEM_MMAP + mmap: two mappings (one through a dup) share the pages.
    "gem": r"""
int main(void)
{
	int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	CHECK("open", fd < 0);
	uint32_t h = gem_create(fd, 8192);
	CHECK("GEM_CREATE", !h);
	uint64_t off = gem_mmap_offset(fd, h);
	CHECK("GEM_MMAP", !off);
	uint8_t *a = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	int fd2 = dup(fd);
	uint8_t *b = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd2, off);
	CHECK("mmap twice", a == MAP_FAILED || b == MAP_FAILED);
	memcpy(a + 4096, "written through the first mapping", 34);
	CHECK("the second mapping sees the write", memcmp(b + 4096, "written through the first mapping", 34));
	errno = 0;
	void *bad = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, off + 0x1000000);
	CHECK("mmap of an unknown offset fails", bad != MAP_FAILED);
	munmap(a, 8192);
	munmap(b, 8192);
	struct drm_gem_close c = {.handle = h};
	CHECK("GEM_CLOSE", drmIoctl(fd, DRM_IOCTL_GEM_CLOSE, &c));
	return 0;
}
""",
    # The device fd is tracked across dup2/fcntl/close; a reused number is not.
    "dups": r"""
int main(void)
{
	int fd = open("/dev/dri/renderD128", O_RDWR);
	CHECK("open", fd < 0);
	CHECK("dup2", dup2(fd, 100) != 100);
	close(fd);
	drmVersionPtr v = drmGetVersion(100);
	CHECK("drmGetVersion on the dup2 copy after close of the original", !v);
	drmFreeVersion(v);
	int fd3 = fcntl(100, F_DUPFD_CLOEXEC, 200);
	CHECK("F_DUPFD_CLOEXEC", fd3 < 200);
	close(100);
	CHECK("GEM_CREATE on the F_DUPFD copy", !gem_create(fd3, 4096));
	struct stat st;
	CHECK("fstat of the copy says char device", fstat(fd3, &st) || !S_ISCHR(st.st_mode));
	close(fd3);
	int plain = open("/proc/self/cmdline", O_RDONLY);
	CHECK("dup2 a plain file onto the old number", dup2(plain, 100) != 100);
	CHECK("fstat of the reused number is a regular file", fstat(100, &st) || !S_ISREG(st.st_mode));
	struct drm_version ver = {0};
	errno = 0;
	CHECK("VERSION on the reused number is the real ioctl (ENOTTY)",
	      drmIoctl(100, DRM_IOCTL_VERSION, &ver) != -1 || errno != ENOTTY);
	return 0;
}
""",
    # Requests the device does not know fail cleanly and leave the file usable.
    "unknown": r"""
#include <sys/ioctl.h>
#include <termios.h>
int main(void)
{
	int fd = open("/dev/dri/renderD128", O_RDWR);
	CHECK("open", fd < 0);
	struct termios t;
	errno = 0;
	CHECK("TCGETS (not a DRM request) reaches the file: ENOTTY", ioctl(fd, TCGETS, &t) != -1 || errno != ENOTTY);
	char arg[16] = {0};
	errno = 0;
	CHECK("an unknown DRM request: ENOTTY from the KMD",
	      ioctl(fd, DRM_IOWR(0x9f, char[16]), arg) != -1 || errno != ENOTTY);
	struct drm_gem_close c = {.handle = 12345};
	errno = 0;
	CHECK("GEM_CLOSE of a bad handle: ENOENT", drmIoctl(fd, DRM_IOCTL_GEM_CLOSE, &c) != -1 || errno != ENOENT);
	drmVersionPtr v = drmGetVersion(fd);
	CHECK("the file still answers", !v);
	drmFreeVersion(v);
	return 0;
}
""",
    # Threads share one fd: each tags its requests with its thread id (no lock).
    "threads": r"""
#include <pthread.h>
static int fd;
static void *worker(void *arg)
{
	for (int i = 0; i < 150; i++) {
		uint32_t h = gem_create(fd, 4096);
		uint64_t off = h ? gem_mmap_offset(fd, h) : 0;
		drmVersionPtr v = drmGetVersion(fd);
		struct drm_gem_close c = {.handle = h};
		if (!h || !off || !v || drmIoctl(fd, DRM_IOCTL_GEM_CLOSE, &c)) {
			printf("FAIL thread %ld iteration %d: %s\n", (long)(intptr_t)arg, i, strerror(errno));
			exit(1);
		}
		drmFreeVersion(v);
	}
	return NULL;
}
int main(void)
{
	pthread_t t[4];
	fd = open("/dev/dri/renderD128", O_RDWR);
	CHECK("open", fd < 0);
	for (intptr_t i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("ok 4 threads x 150 rounds\n");
	return 0;
}
""",
    # PRIME through the library: the dma-buf fd is MOUNT/prime/<token-hex>; a child
    # that inherits it across exec imports it (the token read back from the fd's path),
    # lseek gives the size, mmap of the fd maps the BO's pages.
    "prime": r"""
#include <sys/wait.h>
int main(int argc, char **argv)
{
	int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	CHECK("open", fd < 0);
	if (argc > 1) { /* the child: its own DRM file, the inherited dma-buf fd */
		int dmabuf = atoi(argv[1]);
		uint32_t h = 0;
		CHECK("child: drmPrimeFDToHandle", drmPrimeFDToHandle(fd, dmabuf, &h));
		CHECK("child: lseek SEEK_END is the size", lseek(dmabuf, 0, SEEK_END) != 16384);
		uint64_t off = gem_mmap_offset(fd, h);
		char *p = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
		CHECK("child: GEM_MMAP + mmap", !off || p == MAP_FAILED);
		CHECK("child: sees the parent's bytes", memcmp(p + 100, "parent", 6) != 0);
		memcpy(p + 200, "child", 5);
		return 0;
	}
	uint32_t h = gem_create(fd, 16384);
	uint64_t off = gem_mmap_offset(fd, h);
	char *p = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	CHECK("GEM_CREATE + mmap", !h || p == MAP_FAILED);
	memcpy(p + 100, "parent", 6);
	int dmabuf = -1;
	CHECK("drmPrimeHandleToFD", drmPrimeHandleToFD(fd, h, DRM_RDWR, &dmabuf));
	char path[64], target[256] = "";
	snprintf(path, sizeof(path), "/proc/self/fd/%d", dmabuf);
	CHECK("readlink of the dma-buf fd", readlink(path, target, sizeof(target) - 1) < 0);
	printf("dma-buf %s\n", strstr(target, "/prime/") ? "is a prime file" : target);
	uint32_t again = 0;
	CHECK("drmPrimeFDToHandle in the exporter's own file gives its handle",
	      drmPrimeFDToHandle(fd, dmabuf, &again) || again != h);
	char *q = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, dmabuf, 0);
	CHECK("mmap of the dma-buf fd", q == MAP_FAILED);
	CHECK("the dma-buf mapping shares the BO's pages", memcmp(q + 100, "parent", 6) != 0);
	char arg[16];
	snprintf(arg, sizeof(arg), "%d", dmabuf);
	pid_t pid = fork();
	if (pid == 0) {
		execl(argv[0], argv[0], arg, (char *)NULL);
		_exit(127);
	}
	int status;
	waitpid(pid, &status, 0);
	CHECK("child passed", !WIFEXITED(status) || WEXITSTATUS(status) != 0);
	CHECK("the child's write shows in both mappings", memcmp(p + 200, "child", 5) || memcmp(q + 200, "child", 5));
	struct drm_gem_close c = {.handle = h};
	CHECK("GEM_CLOSE", drmIoctl(fd, DRM_IOCTL_GEM_CLOSE, &c));
	char buf[6] = "";
	CHECK("pread of the dma-buf after the handle is gone", pread(dmabuf, buf, 6, 100) != 6 || memcmp(buf, "parent", 6));
	return 0;
}
""",
    # libdrm's device discovery: sysfs through the mount.
    "devices": r"""
int main(void)
{
	drmDevicePtr devs[8];
	int n = drmGetDevices2(0, devs, 8);
	printf("devices=%d\n", n);
	for (int i = 0; i < n; i++) {
		drmDevicePtr d = devs[i];
		printf("bus=%d nodes=%#x", d->bustype, d->available_nodes);
		if (d->bustype == DRM_BUS_PCI)
			printf(" slot=%04x:%02x:%02x.%u id=%04x:%04x", d->businfo.pci->domain, d->businfo.pci->bus,
			       d->businfo.pci->dev, d->businfo.pci->func, d->deviceinfo.pci->vendor_id,
			       d->deviceinfo.pci->device_id);
		for (int t = 0; t < DRM_NODE_MAX; t++)
			if (d->available_nodes & (1 << t))
				printf(" %s", d->nodes[t]);
		printf("\n");
	}
	if (n > 0)
		drmFreeDevices(devs, n);
	int fd = open("/dev/dri/renderD128", O_RDWR);
	char *p = drmGetPrimaryDeviceNameFromFd(fd), *r = drmGetDeviceNameFromFd2(fd);
	drmDevicePtr dev = NULL;
	printf("node_type=%d\nprimary=%s\nname=%s\n", drmGetNodeTypeFromFd(fd), p ? p : "-", r ? r : "-");
	printf("drmGetDevice2=%d\n", drmGetDevice2(fd, 0, &dev));
	return 0;
}
""",
}


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    """The programs above, compiled against the system's libdrm."""
    out = tmp_path_factory.mktemp("preload-progs")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdrm"], capture_output=True,
                           text=True, check=True).stdout.split()
    built = {}
    for name, body in PROGRAMS.items():
        src = out / f"{name}.c"
        src.write_text(PRELUDE + body)
        exe = out / name
        r = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(src), *flags, "-lpthread"],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{name}.c does not compile:\n{r.stderr}"
        built[name] = str(exe)
    return built


def run(mount, *argv, timeout=120):
    return vgpu_cli("run", "--mount", mount, "--", *map(str, argv), timeout=timeout)


def test_run_refuses_when_nothing_is_mounted(tmp_path):
    r = vgpu_cli("run", "--mount", tmp_path, "--", "true")
    assert r.returncode == 1
    assert f"nothing is mounted at {os.path.realpath(tmp_path)}" in r.stderr
    assert "vgpu mount" in r.stderr


def test_run_without_a_command(vgpu_mount):
    r = vgpu_cli("run", "--mount", vgpu_mount)
    assert r.returncode == 2 and "no command given" in r.stderr


def test_run_sets_the_environment_and_returns_the_exit_status(vgpu_mount):
    r = run(vgpu_mount, "sh", "-c", 'echo "$VGPU_MOUNT|$LD_PRELOAD"; exit 7')
    assert r.returncode == 7, r.stderr
    assert r.stdout.strip() == f"{os.path.realpath(vgpu_mount)}|{LIBRARY}"
    assert run(vgpu_mount, "no-such-command-here").returncode == 127


def test_debugfs_tracing_and_drm_parameters_lead_to_the_mount(vgpu_mount):
    """What tools and their shells read beside the nodes: debugfs (amdgpu_pm_info,
    the rings), the tracepoints, drm.debug; writes go there too."""
    script = ("cat /sys/kernel/debug/dri/0/name; head -1 /sys/kernel/debug/dri/0/amdgpu_pm_info; "
              "cat /sys/module/drm/parameters/debug; ls /sys/kernel/debug/tracing/events; "
              "echo 1 > /sys/kernel/debug/tracing/tracing_on && cat /sys/kernel/debug/tracing/tracing_on")
    r = run(vgpu_mount, "sh", "-c", script)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("amdgpu dev=") and lines[1] == "GFX Clocks and Power:", r.stdout
    assert lines[2] == "0" and "amdgpu" in lines[3:-1] and lines[-1] == "1", r.stdout
    knob = os.path.join(vgpu_mount, "sys/kernel/debug/tracing/tracing_on")
    with open(knob) as f:
        assert f.read().strip() == "1"   # the write reached the mount, not the host's tracefs
    with open(knob, "w") as f:
        f.write("0\n")


def test_nodes_look_like_drm_character_devices(vgpu_mount, progs):
    r = run(vgpu_mount, progs["nodes"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "/dev/dri/card0 chr=1 rdev=226:0" in r.stdout
    assert "/dev/dri/renderD128 chr=1 rdev=226:128" in r.stdout
    assert "fstat chr=1 rdev=226:128" in r.stdout
    ls = run(vgpu_mount, "ls", "-l", "/dev/dri")
    assert ls.returncode == 0 and ls.stderr == "", ls.stderr
    assert "crw-rw-rw-" in ls.stdout and "226, 128" in ls.stdout and "renderD128" in ls.stdout


def test_drm_get_version(vgpu_mount, progs):
    r = run(vgpu_mount, progs["version"])
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("name="))
    fields = dict(kv.split("=", 1) for kv in line.split(" ", 4))
    assert fields["name"] in ("vgpu", "amdgpu") and fields["major"] == "3"
    assert len(fields["date"]) == 8 and len(fields["desc"]) == int(fields["desc_len"]) > 0


def test_gem_mmap_through_two_mappings(vgpu_mount, progs):
    r = run(vgpu_mount, progs["gem"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok the second mapping sees the write" in r.stdout


def test_device_fd_is_tracked_across_dup_and_close(vgpu_mount, progs):
    r = run(vgpu_mount, progs["dups"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_requests_fail_cleanly(vgpu_mount, progs):
    r = run(vgpu_mount, progs["unknown"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_threads_on_one_fd(vgpu_mount, progs):
    r = run(vgpu_mount, progs["threads"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_amdgpu_ioctls_with_pointers(vgpu_mount, tmp_path):
    """Every flattening rule the KMD answers today, from C: INFO's return pointer,
    GEM_OP's value pointer, BO_LIST entries, CS chunk pointers (IB, BO_HANDLES,
    SYNCOBJ_OUT), WAIT_FENCES, the syncobj arrays and points, tokens as real fds."""
    exe = tmp_path / "raw"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdrm"], capture_output=True,
                           text=True, check=True).stdout.split()
    src = tmp_path / "raw.c"
    src.write_text(RAW_PROGRAM)
    c = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(src), *flags], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    r = run(vgpu_mount, exe)
    assert r.returncode == 0 and r.stdout.endswith("PASS\n"), r.stdout + r.stderr


def test_python_clients_are_unaffected(vgpu_mount):
    """A libvgpu program runs under the preload unchanged: its ioctls are system calls
    of its own, which the preload's ioctl() wrapper does not see."""
    r = run(vgpu_mount, sys.executable, Path(ROOT, "samples", "sdma_write_linear.py"), "--device", vgpu_mount)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


def test_libvgpu_keeps_its_prime_tokens_under_the_preload(vgpu_mount):
    """libvgpu turns the daemon's tokens into files itself: had its ioctl gone through
    the preload's ioctl(), PRIME_HANDLE_TO_FD would have come back as an fd (4), not a
    token, and another process could not import it."""
    code = ("import sys, libvgpu; from vgpu import uapi\n"
            "dev = libvgpu.device_initialize(sys.argv[1])\n"
            "bo = libvgpu.bo_alloc(dev, 4096, domain=uapi.AMDGPU_GEM_DOMAIN_GTT)\n"
            "t = libvgpu.bo_export(bo)\n"
            "import os; print(t, os.path.exists(os.path.join(sys.argv[1], 'prime', format(t, 'x'))))\n")
    r = run(vgpu_mount, sys.executable, "-c", code, vgpu_mount)
    assert r.returncode == 0, r.stderr
    token, exists = r.stdout.split()
    assert int(token) > 1024 and exists == "True", r.stdout


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_trace_decodes_a_preloaded_program(vgpu_mount, progs):
    r = vgpu_cli("trace", "--", sys.executable, "-m", "vgpu_tools", "run", "--mount", vgpu_mount,
                 "--", progs["gem"])
    assert r.returncode == 0, r.stderr
    assert "renderD128: AMDGPU_GEM_CREATE {bo_size=8192" in r.stdout
    assert "renderD128: AMDGPU_GEM_MMAP {handle=1}" in r.stdout


def test_prime_through_the_library(vgpu_mount, progs):
    r = run(vgpu_mount, progs["prime"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dma-buf is a prime file\n" in r.stdout and "ok child passed" in r.stdout


USERPTR_PROGRAM = r"""#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <amdgpu.h>
#include <amdgpu_drm.h>

#define CHECK(what, r) do { int r_ = (r); if (r_) { printf("FAIL %s: %d (%s)\n", what, r_, strerror(r_ < 0 ? -r_ : errno)); \
                            return 1; } printf("ok %s\n", what); } while (0)
#define SIZE 65536

/* amdgpu_create_bo_from_user_mem on the program's own anonymous memory; an SDMA
 * CONSTANT_FILL of the middle half; the program reads the GPU's bytes in its buffer. */
int main(void)
{
	int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	uint32_t major, minor;
	amdgpu_device_handle dev;
	CHECK("amdgpu_device_initialize", fd < 0 || amdgpu_device_initialize(fd, &major, &minor, &dev));
	uint32_t *user = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (int i = 0; i < SIZE / 4; i++)
		user[i] = 0x11111111;
	amdgpu_bo_handle ubo, ib;
	CHECK("amdgpu_create_bo_from_user_mem", amdgpu_create_bo_from_user_mem(dev, user, SIZE, &ubo));
	struct amdgpu_bo_alloc_request req = {.alloc_size = 4096, .phys_alignment = 4096,
					      .preferred_heap = AMDGPU_GEM_DOMAIN_GTT};
	uint32_t *ib_cpu;
	CHECK("IB", amdgpu_bo_alloc(dev, &req, &ib) || amdgpu_bo_cpu_map(ib, (void **)&ib_cpu));
	uint64_t va_user, va_ib;
	amdgpu_va_handle vh_user, vh_ib;
	CHECK("VA", amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, SIZE, 4096, 0, &va_user, &vh_user, 0) ||
		    amdgpu_va_range_alloc(dev, amdgpu_gpu_va_range_general, 4096, 4096, 0, &va_ib, &vh_ib, 0) ||
		    amdgpu_bo_va_op(ubo, 0, SIZE, va_user, 0, AMDGPU_VA_OP_MAP) ||
		    amdgpu_bo_va_op(ib, 0, 4096, va_ib, 0, AMDGPU_VA_OP_MAP));
	uint64_t dst = va_user + SIZE / 4;
	uint32_t packet[] = {11 | (2u << 30), (uint32_t)dst, (uint32_t)(dst >> 32), 0xc0ffee11, SIZE / 2 - 1};
	memcpy(ib_cpu, packet, sizeof(packet));
	amdgpu_context_handle ctx;
	amdgpu_bo_list_handle list;
	amdgpu_bo_handle bos[] = {ubo, ib};
	CHECK("context and BO list", amdgpu_cs_ctx_create(dev, &ctx) || amdgpu_bo_list_create(dev, 2, bos, NULL, &list));
	struct amdgpu_cs_ib_info ib_info = {.ib_mc_address = va_ib, .size = 5};
	struct amdgpu_cs_request cs = {.ip_type = AMDGPU_HW_IP_DMA, .resources = list, .number_of_ibs = 1,
				       .ibs = &ib_info};
	CHECK("amdgpu_cs_submit", amdgpu_cs_submit(ctx, 0, &cs, 1));
	struct amdgpu_cs_fence fence = {.context = ctx, .ip_type = AMDGPU_HW_IP_DMA, .fence = cs.seq_no};
	uint32_t expired = 0;
	CHECK("fence", amdgpu_cs_query_fence_status(&fence, AMDGPU_TIMEOUT_INFINITE, 0, &expired) || !expired);
	int bad = 0;
	for (int i = 0; i < SIZE / 4; i++)
		bad += user[i] != (i >= SIZE / 16 && i < 3 * SIZE / 16 ? 0xc0ffee11u : 0x11111111u);
	CHECK("the GPU's bytes are in the program's own buffer, the others are untouched", bad);
	CHECK("cleanup", amdgpu_bo_list_destroy(list) || amdgpu_cs_ctx_free(ctx) ||
			 amdgpu_bo_va_op(ubo, 0, SIZE, va_user, 0, AMDGPU_VA_OP_UNMAP) || amdgpu_bo_free(ubo) ||
			 amdgpu_bo_va_op(ib, 0, 4096, va_ib, 0, AMDGPU_VA_OP_UNMAP) || amdgpu_bo_free(ib) ||
			 amdgpu_va_range_free(vh_user) || amdgpu_va_range_free(vh_ib) || amdgpu_device_deinitialize(dev));
	return 0;
}
"""


def test_userptr_through_libdrm_amdgpu(vgpu_mount, tmp_path):
    """GEM_USERPTR the libdrm way: the struct carries the program's pointer as a value,
    the daemon reaches the program's pages (docs/kmd.md, "GEM_USERPTR")."""
    src, exe = tmp_path / "userptr.c", tmp_path / "userptr"
    src.write_text(USERPTR_PROGRAM)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdrm_amdgpu", "libdrm"], capture_output=True,
                           text=True, check=True).stdout.split()
    r = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(src), *flags], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = run(vgpu_mount, exe)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok the GPU's bytes are in the program's own buffer, the others are untouched" in r.stdout


def linux_shaped_sysfs(root: Path) -> None:
    """The tree a vgpu mount should show under sys/ (as Linux does for an amdgpu at
    PCI_SLOT behind a root port), here as plain files and symlinks."""
    pci = root / f"sys/devices/{PCI_PORT_PATH}/{PCI_SLOT}"
    (root / "dev/dri").mkdir(parents=True)
    (root / "sys/bus/pci").mkdir(parents=True)
    (root / "sys/class/drm").mkdir(parents=True)
    (root / "sys/dev/char").mkdir(parents=True)
    pci.mkdir(parents=True)
    for name, text in (("vendor", "0x1002"), ("device", "0x687f"), ("subsystem_vendor", "0x1002"),
                       ("subsystem_device", "0x0c34"), ("revision", "0xc1"),
                       ("uevent", "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID=1002:687F\n"
                                  f"PCI_SLOT_NAME={PCI_SLOT}\n")):
        (pci / name).write_text(text + ("" if text.endswith("\n") else "\n"))
    (pci / "subsystem").symlink_to("../../../../bus/pci")
    for name, minor in (("card0", 0), ("renderD128", 128)):
        (root / "dev/dri" / name).touch()
        node = pci / "drm" / name
        node.mkdir(parents=True)
        (node / "uevent").write_text(f"MAJOR=226\nMINOR={minor}\nDEVNAME=dri/{name}\n")
        (node / "device").symlink_to(f"../../../{PCI_SLOT}")
        (root / "sys/class/drm" / name).symlink_to(f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/{name}")
        (root / f"sys/dev/char/226:{minor}").symlink_to(f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/{name}")


def test_drm_device_discovery_reads_sysfs_under_the_mount(tmp_path, progs):
    """drmGetDevices2, drmGetNodeTypeFromFd, drmGetPrimaryDeviceNameFromFd,
    drmGetDeviceNameFromFd2 and drmGetDevice2 find the device through MOUNT/sys when
    it has Linux's shape (a plain directory stands in for the mount: no ioctl here)."""
    linux_shaped_sysfs(tmp_path)
    env = dict(os.environ, VGPU_MOUNT=str(tmp_path), LD_PRELOAD=str(LIBRARY))
    r = subprocess.run([progs["devices"]], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "devices=1\n" in r.stdout
    assert f"bus=0 nodes=0x5 slot={PCI_SLOT} id=1002:687f /dev/dri/card0 /dev/dri/renderD128" in r.stdout
    assert "node_type=2\nprimary=/dev/dri/card0\nname=/dev/dri/renderD128\ndrmGetDevice2=0" in r.stdout


def test_drm_device_discovery_on_a_mount(vgpu_mount, progs):
    """The mount's own sys/ (vdev/fs.py) has Linux's shape: drmGetDevices2 finds one
    PCI device, vendor 0x1002 and the device id of DEV_INFO, with both nodes."""
    device = int(Path(vgpu_mount, "sys/class/drm/card0/device/device").read_text(), 16)
    r = run(vgpu_mount, progs["devices"])
    assert r.returncode == 0, r.stderr
    assert "devices=1\n" in r.stdout, r.stdout
    assert (f"bus=0 nodes=0x5 slot={PCI_SLOT} id=1002:{device:04x} /dev/dri/card0 /dev/dri/renderD128"
            in r.stdout), r.stdout
    assert "node_type=2\nprimary=/dev/dri/card0\nname=/dev/dri/renderD128\ndrmGetDevice2=0" in r.stdout


@pytest.mark.skipif(shutil.which("drmdevice") is None, reason="needs drmdevice (Debian libdrm-tests)")
def test_drmdevice_lists_the_device(vgpu_mount):
    device = Path(vgpu_mount, "sys/class/drm/card0/device/device").read_text().strip()[2:]
    r = run(vgpu_mount, "drmdevice")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--- Devices reported 1 ---" in r.stdout
    assert "vendor_id     1002" in r.stdout and f"device_id     {device}" in r.stdout
    for node in ("/dev/dri/card0", "/dev/dri/renderD128"):
        assert f"--- Retrieving device info, for node {node} ---" in r.stdout
    assert "revision_id   " in r.stdout and "Failed" not in r.stdout


def test_c_sample_sdma_exercise(vgpu_mount):
    exe = SAMPLES / "sdma_exercise"
    assert exe.is_file(), f"{exe} is not built (make build)"
    r = run(vgpu_mount, exe, timeout=300)
    assert r.returncode == 0 and r.stdout.endswith("PASS\n"), r.stdout + r.stderr


def test_c_sample_dmabuf_share(vgpu_mount):
    exe = SAMPLES / "dmabuf_share"
    assert exe.is_file(), f"{exe} is not built (make build)"
    r = run(vgpu_mount, exe, timeout=300)
    assert r.returncode == 0 and r.stdout.endswith("PASS\n"), r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_strace_sees_the_programs_own_ioctls(vgpu_mount, tmp_path):
    """The library passes DRM requests to the kernel as the program made them
    (docs/libdrm.md): strace names each one on the device fd, and no request frame is
    written to a control file (neither pwrite64 nor a write() of the VGPU magic)."""
    exe = SAMPLES / "sdma_exercise"
    assert exe.is_file(), f"{exe} is not built (make build)"
    log = tmp_path / "strace.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=ioctl,write,pwrite64", "-xx", "-s", "4",
                        sys.executable, "-m", "vgpu_tools", "run", "--mount", vgpu_mount, "--", str(exe)],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.endswith("PASS\n"), r.stdout + r.stderr
    trace = log.read_text()
    # strace may add the other drivers' requests of the same code ("DRM_IOCTL_AMDGPU_INFO or
    # DRM_IOCTL_SIS_FB_FREE"). libdrm 2.4.114's amdgpu_bo_va_op sends GEM_VA with
    # drmCommandWriteRead, as IOWR (0xc0286448), where amdgpu_drm.h defines it IOW
    # (0x40286448): strace's table names that code after v3d's request of the same
    # number and size only.
    names = {"VERSION": "VERSION", "AMDGPU_INFO": "AMDGPU_INFO", "AMDGPU_CTX": "AMDGPU_CTX",
             "AMDGPU_GEM_CREATE": "AMDGPU_GEM_CREATE", "AMDGPU_GEM_VA": "(?:AMDGPU_GEM_VA|V3D_PERFMON_CREATE)",
             "AMDGPU_BO_LIST": "AMDGPU_BO_LIST", "AMDGPU_CS": "AMDGPU_CS", "AMDGPU_WAIT_CS": "AMDGPU_WAIT_CS"}
    for name, spelled in names.items():
        assert re.search(rf"ioctl\(\d+, DRM_IOCTL_{spelled}[, ]", trace), f"no DRM_IOCTL_{name} in:\n{trace[-3000:]}"
    assert "pwrite64(" not in trace, "a request frame was written"
    assert "\\x56\\x47\\x50\\x55" not in trace, "a request frame (VGPU magic) was written"


RAW_PROGRAM = r"""#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xf86drm.h>
#include <amdgpu_drm.h>

#define CHECK(what, r) do { if ((r) != 0) { fprintf(stderr, "FAIL %s: %s\n", what, strerror(errno)); return 1; } \
                            printf("ok %s\n", what); } while (0)

static int fd;

static uint32_t gem_create(uint64_t size, uint64_t domain)
{
	union drm_amdgpu_gem_create c = {.in = {.bo_size = size, .alignment = 4096, .domains = domain}};
	return drmCommandWriteRead(fd, DRM_AMDGPU_GEM_CREATE, &c, sizeof(c)) ? 0 : c.out.handle;
}

static void *gem_map(uint32_t handle, size_t size)
{
	union drm_amdgpu_gem_mmap m = {.in = {.handle = handle}};
	if (drmCommandWriteRead(fd, DRM_AMDGPU_GEM_MMAP, &m, sizeof(m)))
		return MAP_FAILED;
	return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, m.out.addr_ptr);
}

static int va_op(uint32_t handle, uint64_t va, uint32_t op)
{
	struct drm_amdgpu_gem_va v = {.handle = handle, .operation = op, .va_address = va, .map_size = 4096,
				      .flags = AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE};
	if (op == AMDGPU_VA_OP_UNMAP)
		v.flags = 0;
	return drmCommandWrite(fd, DRM_AMDGPU_GEM_VA, &v, sizeof(v));
}

int main(void)
{
	fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
	if (fd < 0) { perror("open"); return 1; }

	struct drm_amdgpu_info_device dev = {0};
	struct drm_amdgpu_info info = {.return_pointer = (uintptr_t)&dev, .return_size = sizeof(dev),
				       .query = AMDGPU_INFO_DEV_INFO};
	CHECK("INFO DEV_INFO", drmCommandWrite(fd, DRM_AMDGPU_INFO, &info, sizeof(info)));
	if (!dev.virtual_address_alignment || !dev.family) { fprintf(stderr, "FAIL DEV_INFO empty\n"); return 1; }

	union drm_amdgpu_ctx ctx = {.in = {.op = AMDGPU_CTX_OP_ALLOC_CTX}};
	CHECK("CTX ALLOC", drmCommandWriteRead(fd, DRM_AMDGPU_CTX, &ctx, sizeof(ctx)));
	uint32_t ctx_id = ctx.out.alloc.ctx_id;

	uint32_t dst = gem_create(4096, AMDGPU_GEM_DOMAIN_GTT), ib = gem_create(4096, AMDGPU_GEM_DOMAIN_GTT);
	CHECK("GEM_CREATE", !dst || !ib);
	uint32_t *dst_cpu = gem_map(dst, 4096), *ib_cpu = gem_map(ib, 4096);
	CHECK("GEM_MMAP + mmap", dst_cpu == MAP_FAILED || ib_cpu == MAP_FAILED);
	uint64_t va_dst = dev.virtual_address_offset + (1 << 20), va_ib = va_dst + 4096;
	CHECK("GEM_VA MAP", va_op(dst, va_dst, AMDGPU_VA_OP_MAP) || va_op(ib, va_ib, AMDGPU_VA_OP_MAP));

	struct drm_amdgpu_gem_create_in created = {0};
	struct drm_amdgpu_gem_op op = {.handle = dst, .op = AMDGPU_GEM_OP_GET_GEM_CREATE_INFO,
				       .value = (uintptr_t)&created};
	CHECK("GEM_OP GET_GEM_CREATE_INFO", drmCommandWriteRead(fd, DRM_AMDGPU_GEM_OP, &op, sizeof(op)));
	CHECK("GEM_OP value pointer filled", created.bo_size != 4096 || created.domains != AMDGPU_GEM_DOMAIN_GTT);

	/* CS 1: WRITE_LINEAR of 4 dwords, BOs by a BO list */
	uint32_t pkt[] = {2, (uint32_t)va_dst, (uint32_t)(va_dst >> 32), 3, 0x11111111, 0x22222222, 0x33333333, 0x44444444};
	memcpy(ib_cpu, pkt, sizeof(pkt));
	struct drm_amdgpu_bo_list_entry entries[2] = {{dst, 0}, {ib, 0}};
	union drm_amdgpu_bo_list list = {.in = {.operation = AMDGPU_BO_LIST_OP_CREATE, .bo_number = 2,
						.bo_info_size = sizeof(entries[0]), .bo_info_ptr = (uintptr_t)entries}};
	CHECK("BO_LIST CREATE", drmCommandWriteRead(fd, DRM_AMDGPU_BO_LIST, &list, sizeof(list)));
	uint32_t list_handle = list.out.list_handle;

	struct drm_amdgpu_cs_chunk_ib ib_data = {.va_start = va_ib, .ib_bytes = sizeof(pkt), .ip_type = AMDGPU_HW_IP_DMA};
	struct drm_amdgpu_cs_chunk chunks[3] = {{AMDGPU_CHUNK_ID_IB, sizeof(ib_data) / 4, (uintptr_t)&ib_data}};
	uint64_t chunk_ptrs[3] = {(uintptr_t)&chunks[0], (uintptr_t)&chunks[1], (uintptr_t)&chunks[2]};
	union drm_amdgpu_cs cs = {.in = {.ctx_id = ctx_id, .bo_list_handle = list_handle, .num_chunks = 1,
					 .chunks = (uintptr_t)chunk_ptrs}};
	CHECK("CS (IB chunk, BO list)", drmCommandWriteRead(fd, DRM_AMDGPU_CS, &cs, sizeof(cs)));
	union drm_amdgpu_wait_cs wait = {.in = {.handle = cs.out.handle, .timeout = ~0ull, .ip_type = AMDGPU_HW_IP_DMA,
						.ctx_id = ctx_id}};
	CHECK("WAIT_CS", drmCommandWriteRead(fd, DRM_AMDGPU_WAIT_CS, &wait, sizeof(wait)));
	CHECK("WRITE_LINEAR result", dst_cpu[0] != 0x11111111 || dst_cpu[3] != 0x44444444);

	/* CS 2: BOs by a BO_HANDLES chunk (a pointer inside chunk data), then SYNCOBJ_OUT */
	uint32_t syncobj;
	CHECK("drmSyncobjCreate", drmSyncobjCreate(fd, 0, &syncobj));
	pkt[4] = 0x55555555;
	memcpy(ib_cpu, pkt, sizeof(pkt));
	struct drm_amdgpu_bo_list_in handles = {.bo_number = 2, .bo_info_size = sizeof(entries[0]),
						 .bo_info_ptr = (uintptr_t)entries};
	chunks[1] = (struct drm_amdgpu_cs_chunk){AMDGPU_CHUNK_ID_BO_HANDLES, sizeof(handles) / 4, (uintptr_t)&handles};
	struct drm_amdgpu_cs_chunk_sem sem = {syncobj};
	chunks[2] = (struct drm_amdgpu_cs_chunk){AMDGPU_CHUNK_ID_SYNCOBJ_OUT, sizeof(sem) / 4, (uintptr_t)&sem};
	cs = (union drm_amdgpu_cs){.in = {.ctx_id = ctx_id, .num_chunks = 3, .chunks = (uintptr_t)chunk_ptrs}};
	CHECK("CS (IB, BO_HANDLES, SYNCOBJ_OUT chunks)", drmCommandWriteRead(fd, DRM_AMDGPU_CS, &cs, sizeof(cs)));
	CHECK("drmSyncobjWait", drmSyncobjWait(fd, &syncobj, 1, INT64_MAX, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, NULL));
	CHECK("GPU wrote before the syncobj signalled", dst_cpu[0] != 0x55555555);
	struct drm_amdgpu_fence fence = {.ctx_id = ctx_id, .ip_type = AMDGPU_HW_IP_DMA, .seq_no = cs.out.handle};
	union drm_amdgpu_wait_fences wf = {.in = {.fences = (uintptr_t)&fence, .fence_count = 1, .wait_all = 1,
						  .timeout_ns = ~0ull}};
	CHECK("WAIT_FENCES", drmCommandWriteRead(fd, DRM_AMDGPU_WAIT_FENCES, &wf, sizeof(wf)));

	/* Timeline syncobjs: handle and point arrays out, points back */
	uint32_t tl;
	uint64_t point = 5, got = 0;
	CHECK("drmSyncobjCreate (timeline)", drmSyncobjCreate(fd, 0, &tl));
	CHECK("drmSyncobjTimelineSignal", drmSyncobjTimelineSignal(fd, &tl, &point, 1));
	CHECK("drmSyncobjQuery", drmSyncobjQuery(fd, &tl, &got, 1));
	CHECK("SYNCOBJ_QUERY point came back", got != 5);
	CHECK("drmSyncobjTimelineWait", drmSyncobjTimelineWait(fd, &tl, &point, 1, INT64_MAX, 0, NULL));

	/* Tokens become fds and back */
	int obj_fd = -1, sync_fd = -1;
	uint32_t imported = 0;
	struct stat st;
	CHECK("drmSyncobjHandleToFD", drmSyncobjHandleToFD(fd, syncobj, &obj_fd));
	CHECK("the syncobj fd is a real fd", obj_fd < 0 || fstat(obj_fd, &st) || !S_ISREG(st.st_mode));
	CHECK("drmSyncobjFDToHandle", drmSyncobjFDToHandle(fd, obj_fd, &imported));
	CHECK("drmSyncobjWait (imported)", drmSyncobjWait(fd, &imported, 1, 0, 0, NULL));
	CHECK("drmSyncobjExportSyncFile", drmSyncobjExportSyncFile(fd, syncobj, &sync_fd));
	struct pollfd pfd = {.fd = sync_fd, .events = POLLIN};
	CHECK("poll(sync file) POLLIN", poll(&pfd, 1, 5000) != 1);
	CHECK("drmSyncobjImportSyncFile", drmSyncobjImportSyncFile(fd, tl, sync_fd));
	uint32_t bad;
	errno = 0;
	CHECK("drmSyncobjFDToHandle(non-token fd) fails EINVAL", drmSyncobjFDToHandle(fd, 1, &bad) == 0 || errno != EINVAL);
	close(obj_fd);
	close(sync_fd);

	uint32_t objs[3] = {syncobj, imported, tl};
	for (int i = 0; i < 3; i++)
		CHECK("drmSyncobjDestroy", drmSyncobjDestroy(fd, objs[i]));
	list = (union drm_amdgpu_bo_list){.in = {.operation = AMDGPU_BO_LIST_OP_DESTROY, .list_handle = list_handle}};
	CHECK("BO_LIST DESTROY", drmCommandWriteRead(fd, DRM_AMDGPU_BO_LIST, &list, sizeof(list)));
	CHECK("GEM_VA UNMAP", va_op(dst, va_dst, AMDGPU_VA_OP_UNMAP) || va_op(ib, va_ib, AMDGPU_VA_OP_UNMAP));
	munmap(dst_cpu, 4096);
	munmap(ib_cpu, 4096);
	CHECK("GEM_CLOSE", drmCloseBufferHandle(fd, dst) || drmCloseBufferHandle(fd, ib));
	ctx = (union drm_amdgpu_ctx){.in = {.op = AMDGPU_CTX_OP_FREE_CTX, .ctx_id = ctx_id}};
	CHECK("CTX FREE", drmCommandWriteRead(fd, DRM_AMDGPU_CTX, &ctx, sizeof(ctx)));
	close(fd);
	printf("PASS\n");
	return 0;
}
"""
