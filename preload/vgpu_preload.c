/* vgpu_preload.c -- run unmodified libdrm programs on a vgpu mount (LD_PRELOAD).
 *
 *     VGPU_MOUNT=/tmp/vgpu LD_PRELOAD=preload/libvgpu_preload.so ./prog
 *     vgpu run --mount /tmp/vgpu -- ./prog                 (the same, checked)
 *
 * A vgpu device is a FUSE file system whose MOUNT/dev/dri/card0 and renderD128 answer
 * real ioctl()s (FUSE_IOCTL; docs/design.md section 3): the kernel copies the struct in
 * and out, the daemon reads and writes what its pointers point to in the caller's
 * memory. A program linked against the system's libdrm opens /dev/dri/renderD128,
 * checks with stat() that it is a DRM character device, reads sysfs to identify it,
 * calls ioctl() and mmap(). This library sits between the program and libc and makes
 * each of those lead to the mount:
 *
 *   paths      /dev/dri/..., /sys/dev/char/226:N/..., /sys/class/drm/...,
 *              /sys/kernel/debug/{dri,tracing}/..., /sys/module/drm/..., /sys/bus/pci/rescan, and the mount's
 *              own entries of /sys/bus/pci/devices and /sys/devices  ->  MOUNT/<same path>
 *              (open*, fopen, opendir, stat*, access, readlink, realpath), absolute or
 *              relative to a directory fd whose path is remembered
 *   /proc      /proc/<pid>/fd/<n> of a control file reads and stats as the node;
 *              /proc/<pid>/fdinfo/<n> adds the daemon's drm-usage-stats of its DRM file
 *   stat       a control file (MOUNT/dev/dri/card0, renderD128) looks like the DRM
 *              character device it stands for: S_IFCHR, st_rdev = makedev(226, minor)
 *   ioctl()    goes to the kernel as the program made it (strace and gdb see it), except
 *              where Linux takes or returns a file descriptor: the daemon cannot make an
 *              fd in another process, so it deals in tokens, and the library turns the
 *              token it returns into an fd (open MOUNT/prime/<hex>, MOUNT/sync/<hex>)
 *              and a program's fd into the token it stands for
 *   mmap()     of a GEM_MMAP offset on a control file: mmap of MOUNT/bo/<offset-hex>;
 *              of a dma-buf fd: the BO's own file, found through the token
 *   fds        control files are tracked across dup/dup2/dup3/F_DUPFD/close/exec/
 *              SCM_RIGHTS, token fds remember their token
 *   exec       a child started with an environment of the program's own (execve,
 *              execvpe, execle, fexecve, execveat, posix_spawn[p], envp NULL
 *              included; sudo's env_reset) gets LD_PRELOAD and VGPU_MOUNT back
 *   Yama       where ptrace_scope >= 1, a process that opens a control file declares the
 *              daemon its tracer (PR_SET_PTRACER), so the daemon may reach its memory
 *
 * Everything else goes to the real libc (dlsym(RTLD_NEXT)). Nothing here knows a
 * particular program. Without VGPU_MOUNT the library does nothing at all.
 * VGPU_PRELOAD_DEBUG=1 logs what it redirects and translates to stderr.
 * Limits (static binaries, direct syscalls, io_uring...): docs/libdrm.md.
 *
 * Build: gcc -O2 -fPIC -shared -Iinclude $(pkg-config --cflags libdrm) -o libvgpu_preload.so
 *        vgpu_preload.c -ldl -lpthread            (make build does it)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <linux/kcmp.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "vgpu_drm.h" /* <drm.h>, <amdgpu_drm.h> and what vgpu adds to them */

#define DRM_MAJOR 226
/* fds tracked in a flat table indexed by fd number; a device file opened at a higher
 * number is not tracked (the debug log says so): its ioctls still reach the kernel, but
 * no token or mmap is translated there. 64 Ki entries are 512 KiB of zero pages that
 * are touched only where fds live. */
#define FD_SLOTS 65536

/* ------------------------------------------------------------------------------------
 * The real libc functions, looked up on first use: a call can come before our
 * constructor has run (another library's constructor), so every wrapper asks REAL().
 * ---------------------------------------------------------------------------------- */
static void *resolve(void **slot, const char *name)
{
	if (!*slot)
		*slot = dlsym(RTLD_NEXT, name);
	return *slot;
}
#define REAL(name) ((__typeof__(real_##name))resolve((void **)&real_##name, #name))
#define DECLARE_REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__)

DECLARE_REAL(int, openat64, int, const char *, int, ...);
DECLARE_REAL(FILE *, fopen, const char *, const char *);
DECLARE_REAL(FILE *, fopen64, const char *, const char *);
DECLARE_REAL(DIR *, opendir, const char *);
DECLARE_REAL(int, closedir, DIR *);
DECLARE_REAL(int, statfs, const char *, struct statfs *);
DECLARE_REAL(int, fstatfs, int, struct statfs *);
DECLARE_REAL(int, stat, const char *, struct stat *);
DECLARE_REAL(int, stat64, const char *, struct stat64 *);
DECLARE_REAL(int, lstat, const char *, struct stat *);
DECLARE_REAL(int, lstat64, const char *, struct stat64 *);
DECLARE_REAL(int, fstat, int, struct stat *);
DECLARE_REAL(int, fstat64, int, struct stat64 *);
DECLARE_REAL(int, fstatat, int, const char *, struct stat *, int);
DECLARE_REAL(int, fstatat64, int, const char *, struct stat64 *, int);
DECLARE_REAL(int, statx, int, const char *, int, unsigned int, struct statx *);
DECLARE_REAL(int, __xstat, int, const char *, struct stat *);
DECLARE_REAL(int, __xstat64, int, const char *, struct stat64 *);
DECLARE_REAL(int, __lxstat, int, const char *, struct stat *);
DECLARE_REAL(int, __lxstat64, int, const char *, struct stat64 *);
DECLARE_REAL(int, __fxstat, int, int, struct stat *);
DECLARE_REAL(int, __fxstat64, int, int, struct stat64 *);
DECLARE_REAL(int, __fxstatat, int, int, const char *, struct stat *, int);
DECLARE_REAL(int, __fxstatat64, int, int, const char *, struct stat64 *, int);
DECLARE_REAL(int, access, const char *, int);
DECLARE_REAL(int, faccessat, int, const char *, int, int);
DECLARE_REAL(ssize_t, readlink, const char *, char *, size_t);
DECLARE_REAL(ssize_t, readlinkat, int, const char *, char *, size_t);
DECLARE_REAL(char *, realpath, const char *, char *);
DECLARE_REAL(ssize_t, getxattr, const char *, const char *, void *, size_t);
DECLARE_REAL(ssize_t, lgetxattr, const char *, const char *, void *, size_t);
DECLARE_REAL(ssize_t, listxattr, const char *, char *, size_t);
DECLARE_REAL(ssize_t, llistxattr, const char *, char *, size_t);
DECLARE_REAL(int, ioctl, int, unsigned long, ...);
DECLARE_REAL(void *, mmap, void *, size_t, int, int, int, off_t);
DECLARE_REAL(int, close, int);
DECLARE_REAL(int, close_range, unsigned int, unsigned int, int);
DECLARE_REAL(void, closefrom, int);
DECLARE_REAL(int, dup, int);
DECLARE_REAL(int, dup2, int, int);
DECLARE_REAL(int, dup3, int, int, int);
DECLARE_REAL(int, fcntl, int, int, ...);
DECLARE_REAL(int, fcntl64, int, int, ...);
DECLARE_REAL(ssize_t, recvmsg, int, struct msghdr *, int);
DECLARE_REAL(int, execve, const char *, char *const[], char *const[]);
DECLARE_REAL(int, execvpe, const char *, char *const[], char *const[]);
DECLARE_REAL(int, fexecve, int, char *const[], char *const[]);
DECLARE_REAL(int, execveat, int, const char *, char *const[], char *const[], int);
DECLARE_REAL(int, posix_spawn, pid_t *, const char *, const posix_spawn_file_actions_t *,
	     const posix_spawnattr_t *, char *const[], char *const[]);
DECLARE_REAL(int, posix_spawnp, pid_t *, const char *, const posix_spawn_file_actions_t *,
	     const posix_spawnattr_t *, char *const[], char *const[]);

/* glibc before 2.33 compiled stat() into calls of these; old binaries still make them. */
int __xstat(int, const char *, struct stat *);
int __xstat64(int, const char *, struct stat64 *);
int __lxstat(int, const char *, struct stat *);
int __lxstat64(int, const char *, struct stat64 *);
int __fxstat(int, int, struct stat *);
int __fxstat64(int, int, struct stat64 *);
int __fxstatat(int, int, const char *, struct stat *, int);
int __fxstatat64(int, int, const char *, struct stat64 *, int);
char *__realpath_chk(const char *, char *, size_t);

/* ------------------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------------------- */
/* VGPU_MOUNT without trailing slashes ("" = off); short enough that MOUNT + a path fits */
static char mount_path[PATH_MAX / 2];
static size_t mount_len;
static int debug;

#define DBG(fmt, ...)                                                                    \
	do {                                                                             \
		if (debug)                                                               \
			dprintf(2, "vgpu-preload[%d]: " fmt "\n", (int)getpid(), ##__VA_ARGS__); \
	} while (0)

/* ------------------------------------------------------------------------------------
 * Paths. libdrm finds and identifies a device by these paths (xf86drm.c: drmGetDevices2
 * lists /dev/dri and stats each node; drmNodeIsDRM stats /sys/dev/char/M:m/device/drm;
 * drmParseSubsystemType reads the device/subsystem link; drmParsePciBusInfo and
 * drmParsePciDeviceInfo read device/uevent, vendor, device, subsystem_*, revision;
 * drmGetMinorNameForFD lists device/drm; drmGetDeviceNameFromFd2 reads uevent).
 * Each leads to MOUNT + the same path, so MOUNT/sys mirrors the part of /sys that
 * describes the device. Only absolute paths are rewritten.
 * ---------------------------------------------------------------------------------- */
static const char *const redirected_prefixes[] = {
	"/dev/dri",            /* the nodes, and the directory drmGetDevices2 lists */
	"/sys/dev/char/226:",  /* ends inside a component: 226:0, 226:128... */
	"/sys/class/drm",
	/* what the kernel's DRM core and amdgpu show beside it: debugfs (amdgpu_pm_info,
	 * the rings, gem_info...), the tracepoints, and drm's parameters (drm.debug);
	 * a shell the program starts inherits the library and sees the same */
	"/sys/kernel/debug/dri",
	"/sys/kernel/debug/tracing",
	"/sys/module/drm",
	/* the PCI bus's rescan, which brings back a device removed with its remove
	 * file (IGT's amd_pci_unplug): the mount's bus, not the host's */
	"/sys/bus/pci/rescan",
};

/* Directories of the host's sysfs in which only the entries the mount also has are
 * vgpu's: /sys/bus/pci/devices/<slot> and /sys/devices/pci<domain>:<bus> (host bridges
 * only: /sys/devices/system and the like are not looked up in the mount) (the PCI
 * address, vgpu/paths.py, docs/vdev.md "The PCI address"; no host device has it), so
 * that the host's other devices stay visible there. Nothing here names the address. */
static const char *const shared_dirs[] = {"/sys/bus/pci/devices/", "/sys/devices/pci"};

static int is_redirected(const char *path)
{
	for (size_t i = 0; i < sizeof(redirected_prefixes) / sizeof(*redirected_prefixes); i++) {
		const char *p = redirected_prefixes[i];
		size_t n = strlen(p);
		if (strncmp(path, p, n) == 0 && (p[n - 1] == ':' || path[n] == '\0' || path[n] == '/'))
			return 1;
	}
	for (size_t i = 0; mount_len && i < sizeof(shared_dirs) / sizeof(*shared_dirs); i++) {
		size_t n = strlen(shared_dirs[i]), len;
		char entry[PATH_MAX];
		if (strncmp(path, shared_dirs[i], n) != 0 || !path[n] || path[n] == '.')
			continue;
		/* the entry: what follows the prefix's last '/' up to the next one */
		while (n > 0 && path[n - 1] != '/')
			n--;
		len = strcspn(path + n, "/");
		if (len > NAME_MAX || snprintf(entry, sizeof(entry), "%s%.*s", mount_path, (int)(n + len), path) >= PATH_MAX)
			continue;
		struct stat st;
		if (REAL(lstat)(entry, &st) == 0)
			return 1;
	}
	return 0;
}

/* The path to use instead of `path`: `path` itself, or MOUNT + path written into buf. */
static const char *map_path(const char *path, char *buf)
{
	if (!mount_len || !path || path[0] != '/' || !is_redirected(path))
		return path;
	if (snprintf(buf, PATH_MAX, "%s%s", mount_path, path) >= PATH_MAX)
		return path;
	DBG("path %s -> %s", path, buf);
	return buf;
}

/* `path` relative to the mount ("/dev/dri/card0"), or NULL if it is not inside. */
static const char *in_mount(const char *path)
{
	if (!mount_len || strncmp(path, mount_path, mount_len) != 0 || path[mount_len] != '/')
		return NULL;
	return path + mount_len;
}

/* The DRM minor a control file stands for (MOUNT/dev/dri/card0 -> 0, renderD128 -> 128),
 * or -1 for any other path. */
static int control_minor(const char *path)
{
	const char *rel = path ? in_mount(path) : NULL, *num;
	char *end;
	if (!rel || strncmp(rel, "/dev/dri/", 9) != 0)
		return -1;
	rel += 9;
	if (strncmp(rel, "card", 4) == 0)
		num = rel + 4;
	else if (strncmp(rel, "renderD", 7) == 0)
		num = rel + 7;
	else
		return -1;
	long minor = strtol(num, &end, 10);
	return (*num && !*end && minor >= 0 && minor < 256) ? (int)minor : -1;
}

/* The token of MOUNT/sync/<hex> ('s') or MOUNT/prime/<hex> ('p'): 0 if `path` is neither. */
static uint32_t token_of_path(const char *path, char *kind)
{
	const char *rel = in_mount(path), *hex;
	char *end;
	if (!rel)
		return 0;
	if (strncmp(rel, "/sync/", 6) == 0)
		*kind = 's', hex = rel + 6;
	else if (strncmp(rel, "/prime/", 7) == 0)
		*kind = 'p', hex = rel + 7;
	else
		return 0;
	unsigned long token = strtoul(hex, &end, 16);
	return (*hex && !*end && token <= 0x7fffffff) ? (uint32_t)token : 0;
}

/* ------------------------------------------------------------------------------------
 * Tracked fds: what each number names, as far as this library cares. A control file
 * needs its minor (stat, and mmap goes to MOUNT/bo); a token fd (sync file or syncobj,
 * dma-buf) its token, for FD_TO_HANDLE and for mmap of a dma-buf. The ioctls
 * themselves go to the kernel, which keeps the DRM file behind the open file
 * description: nothing else about it lives here.
 * ---------------------------------------------------------------------------------- */
static struct fdent {
	uint32_t token; /* 's', 'p': the token the file stands for */
	char kind;      /* 'c' control file, 's' sync file or syncobj, 'p' dma-buf, 0 */
	uint8_t minor;  /* 'c': the DRM minor (0 card0, 128 renderD128) */
} fdtab[FD_SLOTS];
static pthread_mutex_t fdtab_lock = PTHREAD_MUTEX_INITIALIZER;
static char *dirpath[FD_SLOTS]; /* directory fds' paths ("Directory fds" below), under fdtab_lock */

static int fd_ok(int fd) { return fd >= 0 && fd < FD_SLOTS; }

static void set_entry(int fd, struct fdent e)
{
	pthread_mutex_lock(&fdtab_lock);
	fdtab[fd] = e;
	pthread_mutex_unlock(&fdtab_lock);
}

/* Forget whatever `fd` was: called before it is closed and after the kernel hands the
 * number out again (an entry there can only be stale: closed behind our back). */
static void set_dirpath(int fd, const char *v);
static void untrack(int fd)
{
	if (fd_ok(fd)) {
		set_entry(fd, (struct fdent){0});
		set_dirpath(fd, NULL);
	}
}

/* ---- Yama. The daemon reads and writes the data behind an ioctl's pointers with
 * process_vm_readv/writev, which Yama's ptrace_scope 1 allows only to an ancestor or a
 * declared tracer. So the first open of a control file declares the daemon the
 * process's tracer (its pid is MOUNT/sys/module/vgpu/daemon_pid); a forked child, a
 * new process that shares the open files, declares it again (atfork_child). Scope 2
 * and 3 admit no declaration: the daemon's reads fail there (docs/libdrm.md). */
static long ptracer_pid;    /* the pid declared, 0 none */
static int ptracer_checked; /* this process has looked */

/* The first bytes of a small file as a string; -1 if it cannot be read. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = REAL(openat64)(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, cap - 1);
	if (fd >= 0)
		REAL(close)(fd);
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

static void declare_ptracer(void)
{
	char scope[16], buf[32], path[PATH_MAX];
	int saved = errno;
	if (__atomic_exchange_n(&ptracer_checked, 1, __ATOMIC_ACQ_REL))
		return;
	if (read_small("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) > 0 && atoi(scope) >= 1) {
		snprintf(path, sizeof(path), "%s/sys/module/vgpu/daemon_pid", mount_path);
		long pid = read_small(path, buf, sizeof(buf)) > 0 ? strtol(buf, NULL, 10) : 0;
		if (pid > 0 && prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0) == 0)
			ptracer_pid = pid;
		DBG("Yama ptrace_scope %d: PR_SET_PTRACER of daemon pid %ld: %s", atoi(scope), pid,
		    ptracer_pid ? "ok" : pid > 0 ? strerror(errno) : "no daemon_pid");
	}
	errno = saved; /* a failure here is not the caller's */
}

static void track_control(int fd, int minor)
{
	declare_ptracer();
	if (!fd_ok(fd)) {
		DBG("fd %d of a control file is past the table (%d): not tracked", fd, FD_SLOTS);
		return;
	}
	set_entry(fd, (struct fdent){.kind = 'c', .minor = (uint8_t)minor});
	DBG("fd %d is DRM minor %d", fd, minor);
}

static void track_token(int fd, char kind, uint32_t token)
{
	if (fd_ok(fd))
		set_entry(fd, (struct fdent){.kind = kind, .token = token});
}

/* newfd now names what oldfd names (dup family). */
static void track_dup(int oldfd, int newfd)
{
	if (!fd_ok(newfd))
		return;
	pthread_mutex_lock(&fdtab_lock);
	fdtab[newfd] = fd_ok(oldfd) ? fdtab[oldfd] : (struct fdent){0};
	char *copy = fd_ok(oldfd) && dirpath[oldfd] ? strdup(dirpath[oldfd]) : NULL;
	free(dirpath[newfd]);
	dirpath[newfd] = copy;
	pthread_mutex_unlock(&fdtab_lock);
}

/* The entry of `fd` (all zero for an untracked or out-of-table fd). */
static struct fdent entry_of(int fd)
{
	struct fdent e = {0};
	if (!fd_ok(fd))
		return e;
	pthread_mutex_lock(&fdtab_lock);
	e = fdtab[fd];
	pthread_mutex_unlock(&fdtab_lock);
	return e;
}

/* ------------------------------------------------------------------------------------
 * Directory fds and the paths they stand for. Tools walk sysfs and /proc one component
 * at a time relative to directory fds (libsystemd's sd-device, behind nvtop, opens "/"
 * and then openat(fd, "sys"), openat(fd, "bus")...; nvtop's process list does
 * openat(pid_dir, "fdinfo") and fstatat(fd_dir, "5")). So the path a directory fd was
 * opened as ("virtual": the program's view, before redirection) is remembered for
 * directories in the trees this library redirects or answers (/, /sys, /proc, /dev),
 * and a path relative to such an fd is redirected as the absolute path it names.
 * ---------------------------------------------------------------------------------- */
/* dirpath[fd] (declared with fdtab): the strdup'd virtual path of a directory fd, or NULL */

static int worth_a_dirpath(const char *v)
{
	return strcmp(v, "/") == 0 || strncmp(v, "/sys", 4) == 0 || strncmp(v, "/proc", 5) == 0 ||
	       strncmp(v, "/dev", 4) == 0;
}

static void set_dirpath(int fd, const char *v)
{
	if (!fd_ok(fd))
		return;
	char *copy = v && worth_a_dirpath(v) ? strdup(v) : NULL;
	pthread_mutex_lock(&fdtab_lock);
	free(dirpath[fd]);
	dirpath[fd] = copy;
	pthread_mutex_unlock(&fdtab_lock);
}

/* `dir` + "/" + `rel` into out, with "." and ".." taken lexically; 0, or -1 if too long. */
static int join_path(const char *dir, const char *rel, char *out)
{
	size_t n = strlen(dir);
	if (n >= PATH_MAX)
		return -1;
	memcpy(out, dir, n + 1);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	while (*rel) {
		size_t len = strcspn(rel, "/");
		if (len == 0 || (len == 1 && rel[0] == '.')) {
			/* nothing */
		} else if (len == 2 && rel[0] == '.' && rel[1] == '.') {
			char *slash = strrchr(out, '/');
			n = slash && slash != out ? (size_t)(slash - out) : 1;
			out[n] = '\0';
		} else {
			if (n + 1 + len >= PATH_MAX)
				return -1;
			if (n > 1)
				out[n++] = '/';
			memcpy(out + n, rel, len);
			out[n += len] = '\0';
		}
		rel += len;
		while (*rel == '/')
			rel++;
	}
	return 0;
}

/* The absolute virtual path `path` names relative to `dirfd` (written into out), or
 * NULL when it is relative to a directory whose path is not known (the cwd, say). */
static const char *virtual_at(int dirfd, const char *path, char *out)
{
	if (!path)
		return NULL;
	if (path[0] == '/')
		return path;
	if (dirfd == AT_FDCWD || !fd_ok(dirfd))
		return NULL;
	int ok = 0;
	pthread_mutex_lock(&fdtab_lock);
	if (dirpath[dirfd])
		ok = join_path(dirpath[dirfd], path, out) == 0;
	pthread_mutex_unlock(&fdtab_lock);
	return ok ? out : NULL;
}

/* The path to hand the kernel for (dirfd, path): MOUNT + the virtual path if that is
 * redirected, else `path` as it is. *virt is the virtual path (NULL if unknown). */
static const char *map_at(int dirfd, const char *path, char *vbuf, char *mbuf, const char **virt)
{
	const char *v = virtual_at(dirfd, path, vbuf);
	*virt = v;
	if (v && v != path) {
		const char *m = map_path(v, mbuf);
		return m == v ? path : m;
	}
	return map_path(path, mbuf);
}

/* ------------------------------------------------------------------------------------
 * /proc as a tool sees it under the library: /proc/<pid>/fd/<n> of a control file
 * reads as the node's path (/dev/dri/renderD128) and stats as the character device,
 * and /proc/<pid>/fdinfo/<n> carries the daemon's drm-usage-stats for the DRM file
 * behind it (docs/libdrm.md, "fdinfo").
 * ---------------------------------------------------------------------------------- */

/* "/proc/<pid>/<what>/<n>" -> pid string and n; 0 if `v` is not such a path. */
static int proc_fd_path(const char *v, const char *what, char *pid, size_t pidcap, int *n)
{
	size_t wl = strlen(what);
	if (!v || strncmp(v, "/proc/", 6) != 0)
		return 0;
	const char *p = v + 6, *slash = strchr(p, '/');
	if (!slash || (size_t)(slash - p) >= pidcap || strncmp(slash + 1, what, wl) != 0 || slash[1 + wl] != '/')
		return 0;
	const char *num = slash + 2 + wl;
	char *end;
	long fd = strtol(num, &end, 10);
	if (!*num || *end || fd < 0 || fd > INT_MAX)
		return 0;
	memcpy(pid, p, (size_t)(slash - p));
	pid[slash - p] = '\0';
	*n = (int)fd;
	return 1;
}

/* The minor of the control file /proc/<pid>/fd/<n> leads to, or -1. */
static int proc_fd_minor(const char *pid, int n)
{
	char link[PATH_MAX], target[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/%s/fd/%d", pid, n);
	ssize_t len = REAL(readlink)(link, target, sizeof(target) - 1);
	if (len < 0)
		return -1;
	target[len] = '\0';
	return control_minor(target);
}

/* The minor to patch into a stat of virtual path `v` that follows links: a
 * /proc/<pid>/fd/<n> of a control file is that file. */
static int followed_minor(const char *v)
{
	char pid[32];
	int n;
	return proc_fd_path(v, "fd", pid, sizeof(pid), &n) ? proc_fd_minor(pid, n) : -1;
}

/* A readlink answer: a path in the mount that stands for a redirected one reads as
 * that one (MOUNT/dev/dri/renderD128 -> /dev/dri/renderD128). */
static ssize_t unmap_link(char *out, ssize_t len)
{
	if (len <= 0 || !mount_len || (size_t)len <= mount_len || strncmp(out, mount_path, mount_len) != 0 ||
	    out[mount_len] != '/')
		return len;
	char rest[PATH_MAX];
	size_t n = (size_t)len - mount_len;
	if (n >= sizeof(rest))
		return len;
	memcpy(rest, out + mount_len, n);
	rest[n] = '\0';
	if (!is_redirected(rest))
		return len;
	memcpy(out, rest, n);
	return (ssize_t)n;
}

static char *slurp(const char *path, size_t *len)
{
	int fd = REAL(openat64)(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ssize_t r;
	while (buf && (r = read(fd, buf + n, cap - n - 1)) > 0)
		if ((n += (size_t)r) + 1 == cap)
			buf = realloc(buf, cap *= 2);
	REAL(close)(fd);
	if (buf)
		buf[n] = '\0', *len = n;
	return buf;
}

static int by_number(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Which of the daemon's DRM files of `pid` (MOUNT/proc/<pid>/fdinfo/<client-id>) fd `n`
 * is. The daemon names them by client id, in the order they were opened, and knows
 * each one's node; it never sees fd numbers. So the DRM files of the same kind of node
 * (card or render) the process holds are put in order of their lowest fd number,
 * dups of one open file description counted once (kcmp KCMP_FILE, as nvtop does), and
 * the k-th of them is the k-th client id of that node. Returns the client id, or -1. */
static long client_of_fd(const char *pid, int n, int minor, char *numeric_pid, size_t cap)
{
	char path[PATH_MAX];
	long pidnum = strcmp(pid, "self") == 0 ? (long)getpid() : strtol(pid, NULL, 10);
	if (pidnum <= 0)
		return -1;
	snprintf(numeric_pid, cap, "%ld", pidnum);
	int fds[256], nfds = 0, mine = -1;
	snprintf(path, sizeof(path), "/proc/%ld/fd", pidnum);
	DIR *d = REAL(opendir)(path);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d)) && nfds < 256;) {
		int fd = atoi(e->d_name), m;
		if (e->d_name[0] != '.' && (m = proc_fd_minor(numeric_pid, fd)) >= 0 && (m >= 128) == (minor >= 128))
			fds[nfds++] = fd;
	}
	REAL(closedir)(d);
	qsort(fds, (size_t)nfds, sizeof(*fds), by_number);
	int rank_of[256], distinct = 0;
	for (int i = 0; i < nfds; i++) {
		int first = i;
		for (int j = 0; j < i && first == i; j++)
			if (syscall(SYS_kcmp, pidnum, pidnum, KCMP_FILE, fds[i], fds[j]) == 0)
				first = j;
		rank_of[i] = first == i ? distinct++ : rank_of[first];
		if (fds[i] == n)
			mine = rank_of[i];
	}
	if (mine < 0)
		return -1;
	/* the daemon's clients of that pid on that kind of node, in client-id order */
	long ids[256];
	int nids = 0;
	snprintf(path, sizeof(path), "%s/proc/%ld/fdinfo", mount_path, pidnum);
	if (!(d = REAL(opendir)(path)))
		return -1;
	for (struct dirent *e; (e = readdir(d)) && nids < 256;) {
		char file[PATH_MAX];
		size_t len;
		if (e->d_name[0] == '.')
			continue;
		if (snprintf(file, sizeof(file), "%s/%s", path, e->d_name) >= (int)sizeof(file))
			continue;
		char *text = slurp(file, &len), *node = text ? strstr(text, "vgpu-node:\t") : NULL;
		if (node && (strncmp(node + 11, "renderD", 7) == 0) == (minor >= 128))
			ids[nids++] = strtol(e->d_name, NULL, 10);
		free(text);
	}
	REAL(closedir)(d);
	for (int i = 1; i < nids; i++) /* insertion sort: a handful of ids */
		for (int j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
			long t = ids[j];
			ids[j] = ids[j - 1], ids[j - 1] = t;
		}
	return mine < nids ? ids[mine] : -1;
}

/* Append the daemon's fdinfo lines in amdgpu's form: memory in KiB (amdgpu_fdinfo.c;
 * the mount's own file counts bytes), vgpu's own keys left out. */
static void append_drm_lines(FILE *out, const char *text)
{
	for (const char *line = text; *line;) {
		size_t len = strcspn(line, "\n");
		unsigned long long bytes;
		char key[64];
		if (strncmp(line, "drm-memory-", 11) == 0 && sscanf(line, "%63[^:]:\t%llu", key, &bytes) == 2)
			fprintf(out, "%s:\t%llu KiB\n", key, bytes / 1024);
		else if (strncmp(line, "drm-", 4) == 0)
			fprintf(out, "%.*s\n", (int)len, line);
		line += len + (line[len] == '\n');
	}
}

/* open() of /proc/<pid>/fdinfo/<n> where fd n of pid is a control file: a memfd with
 * the kernel's own lines (pos, flags, mnt_id, ino) and the daemon's drm-* lines for
 * that DRM file. -2: not such a path (or the daemon has no answer), open as it is. */
static int open_fdinfo(const char *v, int flags)
{
	char pid[32], numeric[32], path[PATH_MAX];
	int n, minor;
	if (!proc_fd_path(v, "fdinfo", pid, sizeof(pid), &n) || (minor = proc_fd_minor(pid, n)) < 0)
		return -2;
	long client = client_of_fd(pid, n, minor, numeric, sizeof(numeric));
	size_t klen = 0, dlen = 0;
	char *kernel = slurp(v, &klen), *daemon = NULL;
	if (client >= 0) {
		snprintf(path, sizeof(path), "%s/proc/%s/fdinfo/%ld", mount_path, numeric, client);
		daemon = slurp(path, &dlen);
	}
	DBG("fdinfo %s: DRM minor %d, client %ld%s", v, minor, client, daemon ? "" : " (no answer)");
	int fd = kernel && daemon ? memfd_create("fdinfo", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0) : -1;
	if (fd >= 0) {
		FILE *out = fdopen(REAL(dup)(fd), "w");
		if (out) {
			fputs(kernel, out);
			append_drm_lines(out, daemon);
			fclose(out);
		}
		lseek(fd, 0, SEEK_SET);
	}
	free(kernel);
	free(daemon);
	return fd >= 0 ? fd : -2;
}

/* What the kernel says `fd` is: /proc/self/fd/N. For fds we did not see being made:
 * inherited across exec, received over a socket, opened by a relative path. */
static ssize_t fd_path(int fd, char *buf)
{
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ssize_t n = REAL(readlink)(proc, buf, PATH_MAX - 1);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* Track `fd` if its path says it is a control file or a token file. */
static void classify(int fd)
{
	char path[PATH_MAX], kind = 0;
	int minor;
	uint32_t token;
	if (fd_path(fd, path) < 0)
		return;
	if ((minor = control_minor(path)) >= 0)
		track_control(fd, minor);
	else if ((token = token_of_path(path, &kind)))
		track_token(fd, kind, token);
}

/* After fork() the child has one thread: the table's lock, which another thread may
 * have held, is made anew. The child shares the parent's open files, and so their DRM
 * files, as on Linux; Yama does not pass a tracer declaration on to it. */
static void atfork_prepare(void) { pthread_mutex_lock(&fdtab_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&fdtab_lock); }
static void atfork_child(void)
{
	pthread_mutex_init(&fdtab_lock, NULL);
	if (ptracer_pid)
		prctl(PR_SET_PTRACER, (unsigned long)ptracer_pid, 0, 0, 0);
}

/* ------------------------------------------------------------------------------------
 * stat: a control file is a regular FUSE file; libdrm insists on a character device
 * with DRM's major (drmGetNodeTypeFromFd, drmGetDevice2, process_device), so the
 * answer is patched for control files and only for them.
 * ---------------------------------------------------------------------------------- */
#define PATCH_STAT(st, minor)                                                  \
	do {                                                                   \
		(st)->st_mode = S_IFCHR | ((st)->st_mode & 07777);             \
		(st)->st_rdev = makedev(DRM_MAJOR, (minor));                   \
		(st)->st_size = 0;                                             \
	} while (0)

static int fd_minor(int fd)
{
	struct fdent e = entry_of(fd);
	return e.kind == 'c' ? e.minor : -1;
}

/* The minor to patch into a fstatat/statx answer: by path, or by fd for AT_EMPTY_PATH. */
static int at_minor(int dirfd, const char *mapped, int flags)
{
	if (mapped && mapped[0] == '\0' && (flags & AT_EMPTY_PATH))
		return fd_minor(dirfd);
	return control_minor(mapped);
}

/* One body for the struct stat and struct stat64 flavours of each call. */
#define STAT_PATH(real, path, st, follow)                                      \
	char buf_[PATH_MAX];                                                   \
	const char *p_ = map_path(path, buf_);                                 \
	int r_ = real;                                                         \
	int m_ = r_ == 0 ? control_minor(p_) : -1;                             \
	if (r_ == 0 && m_ < 0 && (follow))                                     \
		m_ = followed_minor(path);                                     \
	if (m_ >= 0)                                                           \
		PATCH_STAT(st, m_);                                            \
	return r_

#define STAT_FD(real, fd, st)                                                  \
	int r_ = real;                                                         \
	int m_ = r_ == 0 ? fd_minor(fd) : -1;                                  \
	if (m_ >= 0)                                                           \
		PATCH_STAT(st, m_);                                            \
	return r_

#define STAT_AT(real, dirfd, path, st, flags)                                  \
	char buf_[PATH_MAX], vbuf_[PATH_MAX];                                  \
	const char *v_, *p_ = map_at(dirfd, path, vbuf_, buf_, &v_);           \
	int r_ = real;                                                         \
	int m_ = r_ == 0 ? at_minor(dirfd, p_, flags) : -1;                    \
	if (r_ == 0 && m_ < 0 && !((flags) & AT_SYMLINK_NOFOLLOW))             \
		m_ = followed_minor(v_);                                       \
	if (m_ >= 0)                                                           \
		PATCH_STAT(st, m_);                                            \
	return r_

int stat(const char *path, struct stat *st) { STAT_PATH(REAL(stat)(p_, st), path, st, 1); }
int stat64(const char *path, struct stat64 *st) { STAT_PATH(REAL(stat64)(p_, st), path, st, 1); }
int lstat(const char *path, struct stat *st) { STAT_PATH(REAL(lstat)(p_, st), path, st, 0); }
int lstat64(const char *path, struct stat64 *st) { STAT_PATH(REAL(lstat64)(p_, st), path, st, 0); }
int fstat(int fd, struct stat *st) { STAT_FD(REAL(fstat)(fd, st), fd, st); }
int fstat64(int fd, struct stat64 *st) { STAT_FD(REAL(fstat64)(fd, st), fd, st); }
int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	STAT_AT(REAL(fstatat)(dirfd, p_, st, flags), dirfd, path, st, flags);
}
int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	STAT_AT(REAL(fstatat64)(dirfd, p_, st, flags), dirfd, path, st, flags);
}
int __xstat(int ver, const char *path, struct stat *st) { STAT_PATH(REAL(__xstat)(ver, p_, st), path, st, 1); }
int __xstat64(int ver, const char *path, struct stat64 *st) { STAT_PATH(REAL(__xstat64)(ver, p_, st), path, st, 1); }
int __lxstat(int ver, const char *path, struct stat *st) { STAT_PATH(REAL(__lxstat)(ver, p_, st), path, st, 0); }
int __lxstat64(int ver, const char *path, struct stat64 *st) { STAT_PATH(REAL(__lxstat64)(ver, p_, st), path, st, 0); }
int __fxstat(int ver, int fd, struct stat *st) { STAT_FD(REAL(__fxstat)(ver, fd, st), fd, st); }
int __fxstat64(int ver, int fd, struct stat64 *st) { STAT_FD(REAL(__fxstat64)(ver, fd, st), fd, st); }
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	STAT_AT(REAL(__fxstatat)(ver, dirfd, p_, st, flags), dirfd, path, st, flags);
}
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	STAT_AT(REAL(__fxstatat64)(ver, dirfd, p_, st, flags), dirfd, path, st, flags);
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
	char buf[PATH_MAX], vbuf[PATH_MAX];
	const char *v, *p = map_at(dirfd, path, vbuf, buf, &v);
	int r = REAL(statx)(dirfd, p, flags, mask, stx);
	int minor = r == 0 ? at_minor(dirfd, p, flags) : -1;
	if (r == 0 && minor < 0 && !(flags & AT_SYMLINK_NOFOLLOW))
		minor = followed_minor(v);
	if (minor >= 0) {
		stx->stx_mode = S_IFCHR | (stx->stx_mode & 07777);
		stx->stx_rdev_major = DRM_MAJOR;
		stx->stx_rdev_minor = minor;
		stx->stx_size = 0;
	}
	return r;
}

/* ------------------------------------------------------------------------------------
 * Other path calls: redirected, nothing else.
 * ---------------------------------------------------------------------------------- */
FILE *fopen(const char *path, const char *mode)
{
	char buf[PATH_MAX];
	return REAL(fopen)(map_path(path, buf), mode);
}

FILE *fopen64(const char *path, const char *mode)
{
	char buf[PATH_MAX];
	return REAL(fopen64)(map_path(path, buf), mode);
}

DIR *opendir(const char *path)
{
	char buf[PATH_MAX];
	DIR *d = REAL(opendir)(map_path(path, buf));
	if (d && mount_len && path[0] == '/')
		set_dirpath(dirfd(d), path);
	return d;
}

int closedir(DIR *d)
{
	untrack(dirfd(d)); /* glibc closes the fd itself, past our close() */
	return REAL(closedir)(d);
}

int access(const char *path, int mode)
{
	char buf[PATH_MAX];
	return REAL(access)(map_path(path, buf), mode);
}

int faccessat(int dirfd, const char *path, int mode, int flags)
{
	char buf[PATH_MAX], vbuf[PATH_MAX];
	const char *v;
	return REAL(faccessat)(dirfd, map_at(dirfd, path, vbuf, buf, &v), mode, flags);
}

/* A link that leads into the mount where the program's path was redirected reads as
 * the redirected path: readlink /proc/self/fd/3 of a control file is /dev/dri/renderD128
 * (the library's own lookups use the real readlink). */
ssize_t readlink(const char *path, char *out, size_t size)
{
	char buf[PATH_MAX];
	ssize_t n = REAL(readlink)(map_path(path, buf), out, size);
	return (size_t)n < size ? unmap_link(out, n) : n;
}

ssize_t readlinkat(int dirfd, const char *path, char *out, size_t size)
{
	char buf[PATH_MAX], vbuf[PATH_MAX];
	const char *v;
	ssize_t n = REAL(readlinkat)(dirfd, map_at(dirfd, path, vbuf, buf, &v), out, size);
	return (size_t)n < size ? unmap_link(out, n) : n;
}

/* sysfs as libsystemd checks it (sd-device refuses a syspath not on a file system of
 * SYSFS_MAGIC): MOUNT/sys is the sysfs the program is shown. */
#define SYSFS_MAGIC_ 0x62656572
static int in_mount_sys(const char *real_path)
{
	const char *rel = real_path ? in_mount(real_path) : NULL;
	return rel && strncmp(rel, "/sys", 4) == 0 && (rel[4] == '/' || rel[4] == '\0');
}

int statfs(const char *path, struct statfs *st)
{
	char buf[PATH_MAX];
	const char *p = map_path(path, buf);
	int r = REAL(statfs)(p, st);
	if (r == 0 && p && p[0] == '/' && in_mount_sys(p))
		st->f_type = SYSFS_MAGIC_;
	return r;
}

int fstatfs(int fd, struct statfs *st)
{
	char path[PATH_MAX];
	int r = REAL(fstatfs)(fd, st);
	if (r == 0 && mount_len && fd_path(fd, path) >= 0 && in_mount_sys(path))
		st->f_type = SYSFS_MAGIC_;
	return r;
}

/* x86-64 has one struct statfs: the 64 forms (what _FILE_OFFSET_BITS=64 code calls,
 * libsystemd's among them) are the same calls. */
int statfs64(const char *path, struct statfs64 *st) { return statfs(path, (struct statfs *)st); }
int fstatfs64(int fd, struct statfs64 *st) { return fstatfs(fd, (struct statfs *)st); }

/* ls -l asks for ACLs and SELinux labels by path */
ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
	char buf[PATH_MAX];
	return REAL(getxattr)(map_path(path, buf), name, value, size);
}

ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
	char buf[PATH_MAX];
	return REAL(lgetxattr)(map_path(path, buf), name, value, size);
}

ssize_t listxattr(const char *path, char *list, size_t size)
{
	char buf[PATH_MAX];
	return REAL(listxattr)(map_path(path, buf), list, size);
}

ssize_t llistxattr(const char *path, char *list, size_t size)
{
	char buf[PATH_MAX];
	return REAL(llistxattr)(map_path(path, buf), list, size);
}

/* realpath of a redirected path resolves inside the mount (MOUNT/sys/devices/...):
 * libdrm's get_pci_path then reads the device's files there directly. */
char *realpath(const char *path, char *resolved)
{
	char buf[PATH_MAX];
	return REAL(realpath)(map_path(path, buf), resolved);
}

char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen)
{
	(void)resolvedlen; /* glibc checks resolvedlen >= PATH_MAX; callers pass PATH_MAX + 1 */
	return realpath(path, resolved);
}

/* ------------------------------------------------------------------------------------
 * open: every flavour funnels into openat64 (open(p) is openat(AT_FDCWD, p) in glibc).
 * ---------------------------------------------------------------------------------- */
static int needs_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

static int do_open(int dirfd, const char *path, int flags, mode_t mode)
{
	char buf[PATH_MAX], vbuf[PATH_MAX];
	const char *v, *p = map_at(dirfd, path, vbuf, buf, &v);
	int fd;
	if (mount_len && v && (fd = open_fdinfo(v, flags)) != -2)
		return fd;
	fd = REAL(openat64)(dirfd, p, flags, mode);
	if (fd < 0 || !mount_len)
		return fd;
	int saved = errno;
	untrack(fd); /* a new fd: whatever the table said about this number is stale */
	if (v && (flags & (O_DIRECTORY | O_PATH)))
		set_dirpath(fd, v);
	if (p && p[0] == '/') {
		int minor = control_minor(p);
		char kind = 0;
		uint32_t token;
		if (minor >= 0)
			track_control(fd, minor);
		else if ((token = token_of_path(p, &kind)))
			track_token(fd, kind, token);
	} /* a relative path is classified at its first DRM ioctl (adopt()) */
	errno = saved;
	return fd;
}

#define OPEN_MODE(flags)                                                       \
	mode_t mode = 0;                                                       \
	if (needs_mode(flags)) {                                               \
		va_list ap;                                                    \
		va_start(ap, flags);                                           \
		mode = va_arg(ap, mode_t);                                     \
		va_end(ap);                                                    \
	}

int open(const char *path, int flags, ...) { OPEN_MODE(flags); return do_open(AT_FDCWD, path, flags, mode); }
int open64(const char *path, int flags, ...) { OPEN_MODE(flags); return do_open(AT_FDCWD, path, flags, mode); }
int openat(int dirfd, const char *path, int flags, ...) { OPEN_MODE(flags); return do_open(dirfd, path, flags, mode); }
int openat64(int dirfd, const char *path, int flags, ...) { OPEN_MODE(flags); return do_open(dirfd, path, flags, mode); }
/* The _FORTIFY_SOURCE entry points (no mode: O_CREAT is not allowed there). */
int __open_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return do_open(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return do_open(dirfd, path, flags, 0); }

/* ------------------------------------------------------------------------------------
 * fd life cycle: dup, close, exec (constructor), sockets.
 * ---------------------------------------------------------------------------------- */
int close(int fd)
{
	untrack(fd); /* first: once closed, another thread may be given the same number */
	return REAL(close)(fd);
}

int close_range(unsigned int first, unsigned int last, int flags)
{
	int r = REAL(close_range)(first, last, flags);
	if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
		for (unsigned int fd = first; fd <= last && fd < FD_SLOTS; fd++)
			untrack((int)fd);
	return r;
}

void closefrom(int lowfd)
{
	for (int fd = lowfd < 0 ? 0 : lowfd; fd < FD_SLOTS; fd++)
		if (fdtab[fd].kind)
			untrack(fd);
	REAL(closefrom)(lowfd);
}

int dup(int oldfd)
{
	int fd = REAL(dup)(oldfd);
	if (fd >= 0)
		track_dup(oldfd, fd);
	return fd;
}

int dup2(int oldfd, int newfd)
{
	int fd = REAL(dup2)(oldfd, newfd);
	if (fd >= 0 && oldfd != newfd)
		track_dup(oldfd, fd); /* newfd's old file, if any, was closed by dup2 */
	return fd;
}

int dup3(int oldfd, int newfd, int flags)
{
	int fd = REAL(dup3)(oldfd, newfd, flags);
	if (fd >= 0)
		track_dup(oldfd, fd);
	return fd;
}

/* fcntl's third argument is an int or a pointer; glibc itself reads it as a pointer. */
static int do_fcntl(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	int r = real(fd, cmd, arg);
	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		track_dup(fd, r);
	return r;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(REAL(fcntl), fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(REAL(fcntl64), fd, cmd, arg);
}

/* A device fd passed over a Unix socket (SCM_RIGHTS) is tracked like one we opened. */
ssize_t recvmsg(int sockfd, struct msghdr *msg, int flags)
{
	ssize_t n = REAL(recvmsg)(sockfd, msg, flags);
	if (n < 0 || !mount_len || !msg)
		return n;
	int saved = errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < count; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			untrack(fd);
			classify(fd);
		}
	}
	errno = saved;
	return n;
}

/* ------------------------------------------------------------------------------------
 * mmap: GEM_MMAP's offset names MOUNT/bo/<offset-hex>, a symlink to the BO's shared
 * memory file (docs/memory.md); mapping that file at offset 0 gives the same pages the
 * GPU uses. A mapping must start at the BO's offset, as libdrm's always do.
 * ---------------------------------------------------------------------------------- */
static void *bo_mmap(void *addr, size_t len, int prot, int flags, off_t offset)
{
	char path[PATH_MAX];
	int mode = (prot & PROT_WRITE) && (flags & MAP_SHARED) ? O_RDWR : O_RDONLY;
	snprintf(path, sizeof(path), "%s/bo/%llx", mount_path, (unsigned long long)offset);
	int bofd = REAL(openat64)(AT_FDCWD, path, mode | O_CLOEXEC, 0);
	if (bofd < 0) {
		DBG("mmap offset %#llx: open %s: %s", (unsigned long long)offset, path, strerror(errno));
		return MAP_FAILED;
	}
	void *p = REAL(mmap)(addr, len, prot, flags, bofd, 0);
	int saved = errno;
	REAL(close)(bofd); /* the mapping keeps the file */
	DBG("mmap %s size %zu -> %p", path, len, p);
	errno = saved;
	return p;
}

/* mmap of a dma-buf fd (MOUNT/prime/<token-hex>). vdev serves that file direct_io,
 * which FUSE cannot map, so the library maps the BO's own file instead: a DRM file of
 * its own on the render node, PRIME_FD_TO_HANDLE of the token, GEM_MMAP, mmap of
 * MOUNT/bo/<offset-hex> at the requested offset, then that DRM file is closed again
 * (the program's dma-buf fd holds the export, the mapping holds the pages). */
static void *prime_mmap(void *addr, size_t len, int prot, int flags, uint32_t token, off_t offset)
{
	char path[PATH_MAX];
	void *p = MAP_FAILED;
	int err;
	snprintf(path, sizeof(path), "%s/dev/dri/renderD128", mount_path);
	int dfd = REAL(openat64)(AT_FDCWD, path, O_RDWR | O_CLOEXEC, 0);
	if (dfd < 0)
		return MAP_FAILED;
	/* the file is ours, not the program's: the token goes in as it is */
	struct drm_prime_handle import = {.fd = (int32_t)token};
	union drm_amdgpu_gem_mmap m = {0};
	err = REAL(ioctl)(dfd, DRM_IOCTL_PRIME_FD_TO_HANDLE, &import) ? errno : 0;
	if (!err) {
		m.in.handle = import.handle;
		err = REAL(ioctl)(dfd, DRM_IOCTL_AMDGPU_GEM_MMAP, &m) ? errno : 0;
	}
	if (!err) {
		int mode = (prot & PROT_WRITE) && (flags & MAP_SHARED) ? O_RDWR : O_RDONLY;
		snprintf(path, sizeof(path), "%s/bo/%llx", mount_path, (unsigned long long)m.out.addr_ptr);
		int bofd = REAL(openat64)(AT_FDCWD, path, mode | O_CLOEXEC, 0);
		if (bofd < 0 || (p = REAL(mmap)(addr, len, prot, flags, bofd, offset)) == MAP_FAILED)
			err = errno;
		if (bofd >= 0)
			REAL(close)(bofd);
	}
	REAL(close)(dfd);
	DBG("mmap of dma-buf %x size %zu offset %lld -> %p (%s)", token, len, (long long)offset, p,
	    err ? strerror(err) : "ok");
	errno = err;
	return p;
}

/* One table lookup decides: mmap of ordinary files costs nothing more. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset)
{
	struct fdent e = fd >= 0 && !(flags & MAP_ANONYMOUS) && mount_len ? entry_of(fd) : (struct fdent){0};
	if (e.kind == 'c')
		return bo_mmap(addr, len, prot, flags, offset);
	if (e.kind == 'p' && e.token)
		return prime_mmap(addr, len, prot, flags, e.token, offset);
	return REAL(mmap)(addr, len, prot, flags, fd, offset);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t offset)
{
	return mmap(addr, len, prot, flags, fd, offset);
}

/* ------------------------------------------------------------------------------------
 * ioctl: a real ioctl() on the control file. FUSE hands it to the daemon, the kernel
 * copies _IOC_SIZE bytes of the struct in and out by the direction bits and the daemon
 * reaches the data behind the struct's pointers in this process's memory (design
 * section 3), so the library passes the call on as the program made it. The one
 * exception is the file descriptors of Linux's uapi: the daemon cannot make an fd in
 * this process, so where Linux returns one it returns a positive token, which the
 * library opens as MOUNT/prime/<token-hex> (dma-buf) or MOUNT/sync/<token-hex> (syncobj,
 * sync file), and where Linux takes one it takes the token that fd stands for.
 * ---------------------------------------------------------------------------------- */
#define NR(ioctl) _IOC_NR(DRM_IOCTL_##ioctl)

/* The token a sync/dma-buf fd stands for; 0 and errno set if it stands for none. */
static uint32_t token_of_fd(int fd, char want)
{
	struct fdent e = entry_of(fd);
	char kind = e.kind;
	uint32_t token = e.token;
	if (!token) { /* not made here: ask the kernel what file it is */
		char path[PATH_MAX];
		if (fd_path(fd, path) >= 0)
			token = token_of_path(path, &kind);
	}
	if (token && kind == want)
		return token;
	errno = REAL(fcntl)(fd, F_GETFD) < 0 ? EBADF : EINVAL;
	return 0;
}

/* Open MOUNT/<dir>/<token-hex>: the fd the program gets for an exported object. */
static int fd_of_token(char kind, uint32_t token, int flags)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/%x", mount_path, kind == 'p' ? "prime" : "sync", token);
	int fd = REAL(openat64)(AT_FDCWD, path, flags, 0);
	if (fd >= 0)
		track_token(fd, kind, token);
	DBG("token %x -> %s fd %d", token, path, fd);
	return fd;
}

/* PRIME_FD_TO_HANDLE, SYNCOBJ_FD_TO_HANDLE: the kernel gets a copy of the struct with
 * the token the program's fd stands for in its fd field; the handle comes back into
 * the program's struct, its fd stays. An fd that stands for no token fails as on Linux
 * (EINVAL, EBADF if it is not open) without reaching the daemon. */
static int fd_to_handle(int fd, unsigned long request, void *arg)
{
	const int prime = _IOC_NR(request) == NR(PRIME_FD_TO_HANDLE);
	const size_t size = _IOC_SIZE(request);
	const size_t off = prime ? offsetof(struct drm_prime_handle, fd) : offsetof(struct drm_syncobj_handle, fd);
	char copy[64];
	int32_t user_fd, token;
	if (!arg || size < off + sizeof(user_fd) || size > sizeof(copy))
		return REAL(ioctl)(fd, request, arg); /* no fd field to rewrite: EFAULT, EINVAL... */
	memcpy(copy, arg, size);
	memcpy(&user_fd, copy + off, sizeof(user_fd));
	if (!(token = (int32_t)token_of_fd(user_fd, prime ? 'p' : 's')))
		return -1;
	memcpy(copy + off, &token, sizeof(token));
	int r = REAL(ioctl)(fd, request, copy), err = errno;
	DBG("ioctl fd %d %#lx: fd %d as token %x -> %s", fd, request, user_fd, token, r ? strerror(err) : "0");
	if (r == 0 && (_IOC_DIR(request) & _IOC_READ)) {
		memcpy(copy + off, &user_fd, sizeof(user_fd));
		memcpy(arg, copy, size);
	}
	errno = err;
	return r;
}

/* PRIME_HANDLE_TO_FD, SYNCOBJ_HANDLE_TO_FD, AMDGPU_FENCE_TO_HANDLE (GET_SYNCOBJ_FD,
 * GET_SYNC_FILE_FD): the call goes through as it is, and the token in the answer
 * becomes the fd the program expects. A dma-buf is opened read-write with DRM_RDWR,
 * close-on-exec with DRM_CLOEXEC; a syncobj or sync file read-only, close-on-exec. */
static int handle_to_fd(int fd, unsigned long request, void *arg)
{
	const unsigned nr = _IOC_NR(request);
	const size_t size = _IOC_SIZE(request);
	struct drm_prime_handle *prime = arg;
	struct drm_syncobj_handle *sync = arg;
	union drm_amdgpu_fence_to_handle *fence = arg;
	uint32_t *out, flags = 0;
	char kind = 's';
	if (nr == NR(PRIME_HANDLE_TO_FD) && arg && size >= sizeof(*prime)) {
		uint32_t f = prime->flags;
		kind = 'p', out = (uint32_t *)&prime->fd;
		flags = ((f & DRM_RDWR) ? O_RDWR : O_RDONLY) | ((f & DRM_CLOEXEC) ? O_CLOEXEC : 0);
	} else if (nr == NR(SYNCOBJ_HANDLE_TO_FD) && arg && size >= sizeof(*sync)) {
		out = (uint32_t *)&sync->fd, flags = O_RDONLY | O_CLOEXEC;
	} else if (nr == NR(AMDGPU_FENCE_TO_HANDLE) && arg && size >= sizeof(*fence) &&
		   (fence->in.what == AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ_FD ||
		    fence->in.what == AMDGPU_FENCE_TO_HANDLE_GET_SYNC_FILE_FD)) {
		out = &fence->out.handle, flags = O_RDONLY | O_CLOEXEC;
	} else {
		return REAL(ioctl)(fd, request, arg); /* a handle, not an fd (or no struct) */
	}
	if (REAL(ioctl)(fd, request, arg) != 0)
		return -1;
	int new_fd = fd_of_token(kind, *out, flags);
	if (new_fd < 0)
		return -1;
	*out = (uint32_t)new_fd;
	return 0;
}

/* A control file we did not see being opened (relative path, inherited, received):
 * recognised by its path at its first DRM ioctl, so that its mmap and fstat are
 * translated too. Returns its minor, or -1. */
static int adopt(int fd)
{
	char path[PATH_MAX];
	int minor;
	if (fd_path(fd, path) < 0 || (minor = control_minor(path)) < 0)
		return -1;
	track_control(fd, minor);
	return fd_minor(fd);
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	va_start(ap, request);
	void *arg = va_arg(ap, void *);
	va_end(ap);

	/* Only DRM requests ('d') on a control file are looked at; the others (TCGETS...)
	 * reach the file as they are, and FUSE answers them (ENOTTY). */
	if (!mount_len || _IOC_TYPE(request) != DRM_IOCTL_BASE || (fd_minor(fd) < 0 && adopt(fd) < 0))
		return REAL(ioctl)(fd, request, arg);
	switch (_IOC_NR(request)) {
	case NR(PRIME_FD_TO_HANDLE):
	case NR(SYNCOBJ_FD_TO_HANDLE):
		return fd_to_handle(fd, request, arg);
	case NR(PRIME_HANDLE_TO_FD):
	case NR(SYNCOBJ_HANDLE_TO_FD):
	case NR(AMDGPU_FENCE_TO_HANDLE):
		return handle_to_fd(fd, request, arg);
	default:
		return REAL(ioctl)(fd, request, arg);
	}
}

/* ------------------------------------------------------------------------------------
 * exec: the library stays in the child's environment.
 *
 * A child that inherits `environ` keeps LD_PRELOAD and VGPU_MOUNT by itself. One
 * started with an environment of its own loses them: IGT's amd_queue_reset
 * posix_spawn()s its background half with envp NULL (an empty environment), sudo's
 * env_reset drops LD_* and everything not kept (IGT runs `sudo cat
 * /sys/kernel/debug/dri/...` through popen). So the calls that take an envp put
 * the two variables back when they are missing: our library first in LD_PRELOAD
 * (as `vgpu run` does), VGPU_MOUNT as this process has it. An envp that has both
 * is passed on untouched.
 * ---------------------------------------------------------------------------------- */
static char preload_entry[PATH_MAX + 16]; /* "LD_PRELOAD=<this library>" */
static char mount_entry[PATH_MAX / 2 + 16]; /* "VGPU_MOUNT=<mount>" */

static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == ':') && (p[n] == '\0' || p[n] == ' ' || p[n] == ':'))
			return 1;
	return 0;
}

/* envp with the library's two variables, or envp itself when it has them already
 * (or the library is inactive). A new array is malloc'ed, with the one string it may
 * allocate kept after its terminating NULL; the caller frees both with free_env()
 * once the exec has failed (or the spawn returned). */
static char **env_with_library(char *const envp[])
{
	if (!mount_len || !preload_entry[0])
		return (char **)envp;
	const char *lib = preload_entry + strlen("LD_PRELOAD=");
	size_t n = 0;
	int have_mount = 0, preload_at = -1, have_lib = 0;
	for (; envp && envp[n]; n++) {
		if (!strncmp(envp[n], "VGPU_MOUNT=", 11))
			have_mount = 1;
		else if (!strncmp(envp[n], "LD_PRELOAD=", 11)) {
			preload_at = (int)n;
			have_lib = has_word(envp[n] + 11, lib);
		}
	}
	if (have_mount && have_lib)
		return (char **)envp;
	char **out = calloc(n + 4, sizeof(char *));
	if (!out)
		return (char **)envp;
	size_t k = 0;
	char *made = NULL;
	for (size_t i = 0; i < n; i++) {
		if ((int)i == preload_at && !have_lib) {
			/* keep the program's own preloads, after ours */
			size_t len = strlen(preload_entry) + 1 + strlen(envp[i] + 11) + 1;
			char *e = malloc(len);
			if (!e) {
				free(out);
				return (char **)envp;
			}
			snprintf(e, len, "%s %s", preload_entry, envp[i] + 11);
			out[k++] = made = e;
		} else
			out[k++] = envp[i];
	}
	if (preload_at < 0)
		out[k++] = preload_entry;
	if (!have_mount)
		out[k++] = mount_entry;
	out[k] = NULL;
	out[k + 1] = made;
	DBG("exec: LD_PRELOAD and VGPU_MOUNT put back into the child's environment");
	return out;
}

static void free_env(char **env, char *const envp[])
{
	if (env == (char **)envp)
		return;
	size_t k = 0;
	while (env[k])
		k++;
	free(env[k + 1]);
	free(env);
}

int execve(const char *path, char *const argv[], char *const envp[])
{
	char **env = env_with_library(envp);
	int r = REAL(execve)(path, argv, env);
	int saved = errno;
	free_env(env, envp);
	errno = saved;
	return r;
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
	char **env = env_with_library(envp);
	int r = REAL(execvpe)(file, argv, env);
	int saved = errno;
	free_env(env, envp);
	errno = saved;
	return r;
}

int fexecve(int fd, char *const argv[], char *const envp[])
{
	char **env = env_with_library(envp);
	int r = REAL(fexecve)(fd, argv, env);
	int saved = errno;
	free_env(env, envp);
	errno = saved;
	return r;
}

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	char **env = env_with_library(envp);
	int r = REAL(execveat)(dirfd, path, argv, env, flags);
	int saved = errno;
	free_env(env, envp);
	errno = saved;
	return r;
}

/* execle(path, arg0, ..., NULL, envp): glibc's calls its internal execve, which a
 * wrapper of execve does not see. */
int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	size_t argc = 1;
	va_start(ap, arg);
	while (va_arg(ap, const char *))
		argc++;
	va_end(ap);
	const char **argv = malloc((argc + 1) * sizeof(char *));
	if (!argv) {
		errno = ENOMEM;
		return -1;
	}
	va_start(ap, arg);
	argv[0] = arg;
	for (size_t i = 1; i <= argc; i++)
		argv[i] = va_arg(ap, const char *); /* the last is the terminating NULL */
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	int r = execve(path, (char *const *)argv, envp);
	int saved = errno;
	free(argv);
	errno = saved;
	return r;
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
		const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	char **env = env_with_library(envp);
	int r = REAL(posix_spawn)(pid, path, actions, attr, argv, env);
	free_env(env, envp);
	return r;
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
		 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	char **env = env_with_library(envp);
	int r = REAL(posix_spawnp)(pid, file, actions, attr, argv, env);
	free_env(env, envp);
	return r;
}

/* ------------------------------------------------------------------------------------
 * Start: read the configuration, take over the device fds inherited across exec.
 * ---------------------------------------------------------------------------------- */
__attribute__((constructor)) static void vgpu_preload_init(void)
{
	const char *m = getenv("VGPU_MOUNT"), *d = getenv("VGPU_PRELOAD_DEBUG");
	debug = d && *d && strcmp(d, "0") != 0;
	if (!m || m[0] != '/' || strlen(m) >= sizeof(mount_path)) {
		if (m && *m)
			DBG("VGPU_MOUNT=%s is not an absolute path: doing nothing", m);
		return;
	}
	strcpy(mount_path, m);
	mount_len = strlen(mount_path);
	while (mount_len > 1 && mount_path[mount_len - 1] == '/')
		mount_path[--mount_len] = '\0';
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	snprintf(mount_entry, sizeof(mount_entry), "VGPU_MOUNT=%s", mount_path);
	Dl_info self_info;
	if (dladdr((void *)vgpu_preload_init, &self_info) && self_info.dli_fname &&
	    self_info.dli_fname[0] == '/')
		snprintf(preload_entry, sizeof(preload_entry), "LD_PRELOAD=%s", self_info.dli_fname);

	DIR *dir = REAL(opendir)("/proc/self/fd");
	if (!dir)
		return;
	int self = dirfd(dir);
	for (struct dirent *e; (e = readdir(dir));) {
		int fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd != self)
			classify(fd);
	}
	closedir(dir);
	DBG("mount %s", mount_path);
}
