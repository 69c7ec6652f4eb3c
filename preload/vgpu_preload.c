/* vgpu_preload.c -- run unmodified libdrm programs on a vgpu mount (LD_PRELOAD).
 *
 *     VGPU_MOUNT=/tmp/vgpu LD_PRELOAD=preload/libvgpu_preload.so ./prog
 *     vgpu run --mount /tmp/vgpu -- ./prog                 (the same, checked)
 *
 * A vgpu device is a FUSE file system, and FUSE cannot carry an ioctl(), so on vgpu an
 * ioctl is one write() of a request frame and one read() of the reply frame on the
 * device file (docs/design.md section 3). A program linked against the system's libdrm
 * knows nothing of that: it opens /dev/dri/renderD128, checks with stat() that it is
 * a DRM character device, reads sysfs to identify it, calls ioctl() and mmap(). This
 * library sits between the program and libc and makes each of those lead to the mount:
 *
 *   paths      /dev/dri/..., /sys/dev/char/226:N/..., /sys/class/drm/...  ->  MOUNT/<same path>
 *              (open*, fopen, opendir, stat*, access, readlink, realpath)
 *   stat       a control file (MOUNT/dev/dri/card0, renderD128) looks like the DRM
 *              character device it stands for: S_IFCHR, st_rdev = makedev(226, minor)
 *   ioctl()    on a control file: the frame write + read, with the pointed-to data
 *              flattened into the frame and scattered back from the reply
 *   mmap()     of a GEM_MMAP offset on a control file: mmap of MOUNT/bo/<offset-hex>
 *   fds        control files are tracked across dup/dup2/dup3/F_DUPFD/close/exec/
 *              SCM_RIGHTS; sync and prime tokens become real fds and back
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
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_drm.h" /* the frame headers; it includes <drm.h> and <amdgpu_drm.h> */

#define DRM_MAJOR 226
/* fds tracked in a flat table indexed by fd number; a device file opened at a higher
 * number is not translated (the debug log says so). 64 Ki entries are 1 MiB of
 * zero pages that are touched only where fds live. */
#define FD_SLOTS 65536
#define MIN(a, b) ((a) < (b) ? (a) : (b))

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
};

static int is_redirected(const char *path)
{
	for (size_t i = 0; i < sizeof(redirected_prefixes) / sizeof(*redirected_prefixes); i++) {
		const char *p = redirected_prefixes[i];
		size_t n = strlen(p);
		if (strncmp(path, p, n) == 0 && (p[n - 1] == ':' || path[n] == '\0' || path[n] == '/'))
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
 * Tracked fds. A control file's open file description (shared by its dups) is one DRM
 * file on the daemon, which keeps one pending reply per request tag (design section
 * 3): each thread tags its requests with its thread id (frame_call), so the threads
 * of a program, and of its forks, share it without a lock and never wait for each
 * other's replies. Token fds (sync files, dma-bufs) remember their token for
 * FD_TO_HANDLE.
 * ---------------------------------------------------------------------------------- */
struct vfile {
	int refs; /* fds naming it, plus calls in progress */
	int minor;
};

static struct fdent {
	struct vfile *vf;
	uint32_t token;
	char kind; /* 's' sync file or syncobj, 'p' dma-buf, 0 */
} fdtab[FD_SLOTS];
static pthread_mutex_t fdtab_lock = PTHREAD_MUTEX_INITIALIZER;

static int fd_ok(int fd) { return fd >= 0 && fd < FD_SLOTS; }

static void vf_put_locked(struct vfile *vf)
{
	if (vf && --vf->refs == 0)
		free(vf);
}

/* Forget whatever `fd` was: called before it is closed and after the kernel hands the
 * number out again (an entry there can only be stale: closed behind our back). */
static void untrack(int fd)
{
	if (!fd_ok(fd))
		return;
	pthread_mutex_lock(&fdtab_lock);
	vf_put_locked(fdtab[fd].vf);
	fdtab[fd] = (struct fdent){0};
	pthread_mutex_unlock(&fdtab_lock);
}

static void track_control(int fd, int minor)
{
	struct vfile *vf;
	if (!fd_ok(fd)) {
		DBG("fd %d of a control file is past the table (%d): not translated", fd, FD_SLOTS);
		return;
	}
	if (!(vf = calloc(1, sizeof(*vf))))
		return;
	vf->refs = 1;
	vf->minor = minor;
	pthread_mutex_lock(&fdtab_lock);
	vf_put_locked(fdtab[fd].vf);
	fdtab[fd] = (struct fdent){.vf = vf};
	pthread_mutex_unlock(&fdtab_lock);
	DBG("fd %d is DRM minor %d", fd, minor);
}

static void track_token(int fd, char kind, uint32_t token)
{
	if (!fd_ok(fd))
		return;
	pthread_mutex_lock(&fdtab_lock);
	vf_put_locked(fdtab[fd].vf);
	fdtab[fd] = (struct fdent){.kind = kind, .token = token};
	pthread_mutex_unlock(&fdtab_lock);
}

/* newfd now names what oldfd names (dup family). */
static void track_dup(int oldfd, int newfd)
{
	if (!fd_ok(newfd))
		return;
	pthread_mutex_lock(&fdtab_lock);
	vf_put_locked(fdtab[newfd].vf);
	fdtab[newfd] = fd_ok(oldfd) ? fdtab[oldfd] : (struct fdent){0};
	if (fdtab[newfd].vf)
		fdtab[newfd].vf->refs++;
	pthread_mutex_unlock(&fdtab_lock);
}

/* The vfile of `fd` with a reference held for the caller (vf_release), or NULL. */
static struct vfile *vf_get(int fd)
{
	struct vfile *vf = NULL;
	if (!fd_ok(fd))
		return NULL;
	pthread_mutex_lock(&fdtab_lock);
	if ((vf = fdtab[fd].vf))
		vf->refs++;
	pthread_mutex_unlock(&fdtab_lock);
	return vf;
}

static void vf_release(struct vfile *vf)
{
	pthread_mutex_lock(&fdtab_lock);
	vf_put_locked(vf);
	pthread_mutex_unlock(&fdtab_lock);
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
 * have held, is made anew. The child shares the parent's open files; its requests carry
 * its own thread ids as tags, so they never take the parent's replies. */
static void atfork_prepare(void) { pthread_mutex_lock(&fdtab_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&fdtab_lock); }
static void atfork_child(void) { pthread_mutex_init(&fdtab_lock, NULL); }

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
	int minor = -1;
	if (!fd_ok(fd))
		return -1;
	pthread_mutex_lock(&fdtab_lock);
	if (fdtab[fd].vf)
		minor = fdtab[fd].vf->minor;
	pthread_mutex_unlock(&fdtab_lock);
	return minor;
}

/* The minor to patch into a fstatat/statx answer: by path, or by fd for AT_EMPTY_PATH. */
static int at_minor(int dirfd, const char *mapped, int flags)
{
	if (mapped && mapped[0] == '\0' && (flags & AT_EMPTY_PATH))
		return fd_minor(dirfd);
	return control_minor(mapped);
}

/* One body for the struct stat and struct stat64 flavours of each call. */
#define STAT_PATH(real, path, st)                                              \
	char buf_[PATH_MAX];                                                   \
	const char *p_ = map_path(path, buf_);                                 \
	int r_ = real;                                                         \
	int m_ = r_ == 0 ? control_minor(p_) : -1;                             \
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
	char buf_[PATH_MAX];                                                   \
	const char *p_ = map_path(path, buf_);                                 \
	int r_ = real;                                                         \
	int m_ = r_ == 0 ? at_minor(dirfd, p_, flags) : -1;                    \
	if (m_ >= 0)                                                           \
		PATCH_STAT(st, m_);                                            \
	return r_

int stat(const char *path, struct stat *st) { STAT_PATH(REAL(stat)(p_, st), path, st); }
int stat64(const char *path, struct stat64 *st) { STAT_PATH(REAL(stat64)(p_, st), path, st); }
int lstat(const char *path, struct stat *st) { STAT_PATH(REAL(lstat)(p_, st), path, st); }
int lstat64(const char *path, struct stat64 *st) { STAT_PATH(REAL(lstat64)(p_, st), path, st); }
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
int __xstat(int ver, const char *path, struct stat *st) { STAT_PATH(REAL(__xstat)(ver, p_, st), path, st); }
int __xstat64(int ver, const char *path, struct stat64 *st) { STAT_PATH(REAL(__xstat64)(ver, p_, st), path, st); }
int __lxstat(int ver, const char *path, struct stat *st) { STAT_PATH(REAL(__lxstat)(ver, p_, st), path, st); }
int __lxstat64(int ver, const char *path, struct stat64 *st) { STAT_PATH(REAL(__lxstat64)(ver, p_, st), path, st); }
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
	char buf[PATH_MAX];
	const char *p = map_path(path, buf);
	int r = REAL(statx)(dirfd, p, flags, mask, stx);
	int minor = r == 0 ? at_minor(dirfd, p, flags) : -1;
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
	return REAL(opendir)(map_path(path, buf));
}

int access(const char *path, int mode)
{
	char buf[PATH_MAX];
	return REAL(access)(map_path(path, buf), mode);
}

int faccessat(int dirfd, const char *path, int mode, int flags)
{
	char buf[PATH_MAX];
	return REAL(faccessat)(dirfd, map_path(path, buf), mode, flags);
}

ssize_t readlink(const char *path, char *out, size_t size)
{
	char buf[PATH_MAX];
	return REAL(readlink)(map_path(path, buf), out, size);
}

ssize_t readlinkat(int dirfd, const char *path, char *out, size_t size)
{
	char buf[PATH_MAX];
	return REAL(readlinkat)(dirfd, map_path(path, buf), out, size);
}

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
	char buf[PATH_MAX];
	const char *p = map_path(path, buf);
	int fd = REAL(openat64)(dirfd, p, flags, mode);
	if (fd < 0 || !mount_len)
		return fd;
	int saved = errno;
	untrack(fd); /* a new fd: whatever the table said about this number is stale */
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
		if (fdtab[fd].vf || fdtab[fd].kind)
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

/* One request on a DRM file of our own (prime_mmap's): the struct alone, no extra. */
static int raw_call(int fd, unsigned long request, void *arg, size_t size)
{
	char req[sizeof(struct vgpu_request_header) + 64], rep[sizeof(struct vgpu_reply_header) + 64];
	struct vgpu_request_header h = {VGPU_MAGIC, (uint32_t)request, (uint32_t)size, 0};
	struct vgpu_reply_header rh;
	ssize_t n;
	if (size > 64)
		return EINVAL;
	memcpy(req, &h, sizeof(h));
	memcpy(req + sizeof(h), arg, size);
	if (write(fd, req, sizeof(h) + size) < 0)
		return errno;
	while ((n = read(fd, rep, sizeof(rep))) < 0 && errno == EINTR)
		;
	if (n < 0)
		return errno;
	if ((size_t)n < sizeof(rh))
		return EIO;
	memcpy(&rh, rep, sizeof(rh));
	if (rh.result)
		return rh.result < 0 ? -rh.result : rh.result;
	memcpy(arg, rep + sizeof(rh), MIN(size, (size_t)n - sizeof(rh)));
	return 0;
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
	struct drm_prime_handle import = {.fd = (int32_t)token};
	union drm_amdgpu_gem_mmap m = {0};
	if (!(err = raw_call(dfd, DRM_IOCTL_PRIME_FD_TO_HANDLE, &import, sizeof(import)))) {
		m.in.handle = import.handle;
		err = raw_call(dfd, DRM_IOCTL_AMDGPU_GEM_MMAP, &m, sizeof(m));
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

/* The dma-buf token a tracked fd stands for (0 for any other fd): a table lookup only,
 * so that mmap of ordinary files costs nothing more. */
static uint32_t tracked_prime_token(int fd)
{
	uint32_t token = 0;
	if (!fd_ok(fd))
		return 0;
	pthread_mutex_lock(&fdtab_lock);
	if (fdtab[fd].kind == 'p')
		token = fdtab[fd].token;
	pthread_mutex_unlock(&fdtab_lock);
	return token;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset)
{
	uint32_t token;
	if (fd >= 0 && !(flags & MAP_ANONYMOUS) && fd_minor(fd) >= 0)
		return bo_mmap(addr, len, prot, flags, offset);
	if (fd >= 0 && !(flags & MAP_ANONYMOUS) && mount_len && (token = tracked_prime_token(fd)))
		return prime_mmap(addr, len, prot, flags, token, offset);
	return REAL(mmap)(addr, len, prot, flags, fd, offset);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t offset)
{
	return mmap(addr, len, prot, flags, fd, offset);
}

/* ------------------------------------------------------------------------------------
 * ioctl -> frame. The request frame is the header, the ioctl struct as the program
 * passed it (pointer values included: the daemon ignores them), then `extra`: the data
 * the struct's pointers point to, in field order (design section 3, "flattening").
 * The reply is the header, the updated struct, then out-data that belongs behind the
 * struct's output pointers.
 * ---------------------------------------------------------------------------------- */
struct frame {
	char *buf;
	size_t len, cap;
};

/* Append n bytes from p (NULL: zeros). E2BIG past the protocol's 128 KiB frame. */
static int put(struct frame *f, const void *p, uint64_t n)
{
	if (n > f->cap - f->len)
		return E2BIG;
	if (p)
		memcpy(f->buf + f->len, p, n);
	else
		memset(f->buf + f->len, 0, n);
	f->len += n;
	return 0;
}

/* Append n bytes a user pointer (a __u64 field) points to; EFAULT for NULL. */
static int put_user(struct frame *f, uint64_t ptr, uint64_t n)
{
	if (n && !ptr)
		return EFAULT;
	return n ? put(f, (const void *)(uintptr_t)ptr, n) : 0;
}

/* Copy out-data to a user pointer: at most `want` bytes, as many as the reply has. */
static void scatter(uint64_t ptr, const char **out, size_t *left, uint64_t want)
{
	size_t n = MIN((uint64_t)*left, want);
	if (ptr && n)
		memcpy((void *)(uintptr_t)ptr, *out, n);
	*out += n;
	*left -= n;
}

/* The ioctl structs with pointers, read from a zero-extended copy of the program's
 * struct (a shorter struct reads as zero-extended, as in Linux drm_ioctl). */
union args {
	struct drm_version version;
	struct drm_prime_handle prime;
	struct drm_syncobj_handle sync_handle;
	struct drm_syncobj_wait sync_wait;
	struct drm_syncobj_timeline_wait sync_twait;
	struct drm_syncobj_array sync_array;
	struct drm_syncobj_timeline_array sync_tarray;
	union drm_amdgpu_bo_list bo_list;
	union drm_amdgpu_cs cs;
	struct drm_amdgpu_info info;
	union drm_amdgpu_wait_fences wait_fences;
	struct drm_amdgpu_gem_op gem_op;
	union drm_amdgpu_fence_to_handle fence_to_handle;
};

#define NR(ioctl) _IOC_NR(DRM_IOCTL_##ioctl)

/* CS: in.chunks points to num_chunks pointers, each to a drm_amdgpu_cs_chunk whose
 * chunk_data points to length_dw dwords. Flattened: each chunk header followed by its
 * data. A BO_HANDLES chunk's data is a drm_amdgpu_bo_list_in whose bo_info_ptr points
 * to the entries: they follow it, and its length_dw counts both (the KMD reads them
 * there, kmd/cs.py). */
static int gather_cs(const union drm_amdgpu_cs *cs, struct frame *f)
{
	const uint64_t *chunks = (const uint64_t *)(uintptr_t)cs->in.chunks;
	int err = 0;
	if (cs->in.num_chunks && !chunks)
		return EFAULT;
	for (uint32_t i = 0; i < cs->in.num_chunks && !err; i++) {
		if (!chunks[i])
			return EFAULT;
		struct drm_amdgpu_cs_chunk h = *(const struct drm_amdgpu_cs_chunk *)(uintptr_t)chunks[i];
		uint64_t bytes = (uint64_t)h.length_dw * 4;
		if (h.chunk_id == AMDGPU_CHUNK_ID_BO_HANDLES) {
			struct drm_amdgpu_bo_list_in bl = {0};
			if (bytes && !h.chunk_data)
				return EFAULT;
			memcpy(&bl, (const void *)(uintptr_t)h.chunk_data, MIN(bytes, sizeof(bl)));
			uint64_t entries = (uint64_t)bl.bo_number * bl.bo_info_size;
			uint64_t padded = (entries + 3) & ~3ull;
			if (padded > f->cap)
				return E2BIG;
			h.length_dw = (uint32_t)((sizeof(bl) + padded) / 4);
			if (!(err = put(f, &h, sizeof(h))) && !(err = put(f, &bl, sizeof(bl))) &&
			    !(err = put_user(f, bl.bo_info_ptr, entries)))
				err = put(f, NULL, padded - entries);
		} else if (!(err = put(f, &h, sizeof(h)))) {
			err = put_user(f, h.chunk_data, bytes);
		}
	}
	return err;
}

/* The extra of each request that has pointers: what they point to, in field order. */
static int gather(unsigned nr, const union args *a, struct frame *f)
{
	if (nr == NR(SYNCOBJ_WAIT))
		return put_user(f, a->sync_wait.handles, 4ull * a->sync_wait.count_handles);
	if (nr == NR(SYNCOBJ_RESET) || nr == NR(SYNCOBJ_SIGNAL))
		return put_user(f, a->sync_array.handles, 4ull * a->sync_array.count_handles);
	if (nr == NR(SYNCOBJ_TIMELINE_WAIT)) {
		uint64_t n = a->sync_twait.count_handles;
		int err = put_user(f, a->sync_twait.handles, 4 * n);
		return err ? err : put_user(f, a->sync_twait.points, 8 * n);
	}
	if (nr == NR(SYNCOBJ_QUERY) || nr == NR(SYNCOBJ_TIMELINE_SIGNAL)) {
		uint64_t n = a->sync_tarray.count_handles;
		int err = put_user(f, a->sync_tarray.handles, 4 * n);
		if (err)
			return err;
		/* QUERY's points are its output: zeros go out, the points come back */
		return nr == NR(SYNCOBJ_QUERY) ? put(f, NULL, 8 * n) : put_user(f, a->sync_tarray.points, 8 * n);
	}
	if (nr == NR(AMDGPU_BO_LIST))
		return put_user(f, a->bo_list.in.bo_info_ptr,
				(uint64_t)a->bo_list.in.bo_number * a->bo_list.in.bo_info_size);
	if (nr == NR(AMDGPU_CS))
		return gather_cs(&a->cs, f);
	if (nr == NR(AMDGPU_WAIT_FENCES))
		return put_user(f, a->wait_fences.in.fences,
				(uint64_t)a->wait_fences.in.fence_count * sizeof(struct drm_amdgpu_fence));
	return 0; /* no pointers (or none the daemon reads): the struct alone */
}

/* The reply's out-data, to where the struct's output pointers point. */
static void scatter_out(unsigned nr, const union args *a, const char *out, size_t left)
{
	if (nr == NR(VERSION)) { /* each string as long as the program asked for */
		scatter((uintptr_t)a->version.name, &out, &left, a->version.name_len);
		scatter((uintptr_t)a->version.date, &out, &left, a->version.date_len);
		scatter((uintptr_t)a->version.desc, &out, &left, a->version.desc_len);
	} else if (nr == NR(SYNCOBJ_QUERY)) {
		scatter(a->sync_tarray.points, &out, &left, 8ull * a->sync_tarray.count_handles);
	} else if (nr == NR(AMDGPU_INFO)) {
		scatter(a->info.return_pointer, &out, &left, a->info.return_size);
	} else if (nr == NR(AMDGPU_GEM_OP) && a->gem_op.op == AMDGPU_GEM_OP_GET_GEM_CREATE_INFO) {
		scatter(a->gem_op.value, &out, &left, sizeof(struct drm_amdgpu_gem_create_in));
	}
}

/* ---- tokens: where Linux passes an fd, the daemon passes a token (design section 3) */

/* The token a sync/dma-buf fd stands for; 0 and errno set if it stands for none. */
static uint32_t token_of_fd(int fd, char want)
{
	char kind = 0;
	uint32_t token = 0;
	if (fd_ok(fd)) {
		pthread_mutex_lock(&fdtab_lock);
		kind = fdtab[fd].kind, token = fdtab[fd].token;
		pthread_mutex_unlock(&fdtab_lock);
	}
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

/* ---- per-thread frame buffers: a request and a reply of up to VGPU_MAX_FRAME each */
struct tbuf {
	char req[VGPU_MAX_FRAME];
	char rep[VGPU_MAX_FRAME];
};
static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;
static void tbuf_key_init(void) { pthread_key_create(&tbuf_key, free); }

static struct tbuf *tbuf(void)
{
	pthread_once(&tbuf_once, tbuf_key_init);
	struct tbuf *b = pthread_getspecific(tbuf_key);
	if (!b && (b = malloc(sizeof(*b))))
		pthread_setspecific(tbuf_key, b);
	return b;
}

/* One request on the wire: write the frame, read the reply. `tag` is the protocol's
 * request tag (design section 3): a nonzero tag (drm_ioctl passes the calling thread's
 * id) is pwrite()/pread() at offset `tag`, and the daemon gives the reply of tag T only
 * to a read at offset T, so threads sharing the fd need no lock; 0 is plain
 * write()/read(), which one thread must not interleave with another's. Returns 0 or an
 * errno: the write's (the request was refused) or the read's (it failed while
 * completing: ETIME, EFAULT...). */
static int frame_call(int fd, uint64_t tag, const char *req, size_t len, char *rep, size_t cap,
		      size_t *replen)
{
	ssize_t n = tag ? pwrite(fd, req, len, (off_t)tag) : write(fd, req, len);
	if (n < 0)
		return errno; /* nothing was sent: EINTR here makes drmIoctl send again */
	if ((size_t)n != len)
		return EIO;
	for (;;) {
		n = tag ? pread(fd, rep, cap, (off_t)tag) : read(fd, rep, cap);
		if (n >= 0)
			break;
		if (errno == EINTR) /* the reply stays queued: sending again would run it twice */
			continue;
		if (errno == EAGAIN) { /* a non-blocking fd whose reply is not ready yet */
			nanosleep(&(struct timespec){0, 1000000}, NULL);
			continue;
		}
		return errno;
	}
	*replen = (size_t)n;
	return 0;
}

/* ioctl(fd, request, arg) on a control file. Returns 0 or an errno. */
static int drm_ioctl(int fd, unsigned long request, void *arg)
{
	const unsigned nr = _IOC_NR(request);
	const size_t size = _IOC_SIZE(request);
	const size_t hdr = sizeof(struct vgpu_request_header);
	union args a;
	struct tbuf *b;
	int err;

	if (size && !arg)
		return EFAULT;
	if (!(b = tbuf()))
		return ENOMEM;
	memset(&a, 0, sizeof(a));
	if (size)
		memcpy(&a, arg, MIN(size, sizeof(a)));

	struct frame f = {b->req, hdr, VGPU_MAX_FRAME};
	if ((err = put(&f, arg, size)))
		return err;
	/* FD_TO_HANDLE: the daemon takes the token the fd stands for, in the fd field */
	if (nr == NR(PRIME_FD_TO_HANDLE) || nr == NR(SYNCOBJ_FD_TO_HANDLE)) {
		int is_prime = nr == NR(PRIME_FD_TO_HANDLE);
		size_t off = is_prime ? offsetof(struct drm_prime_handle, fd)
				      : offsetof(struct drm_syncobj_handle, fd);
		int32_t token = (int32_t)token_of_fd(is_prime ? a.prime.fd : a.sync_handle.fd,
						     is_prime ? 'p' : 's');
		if (!token)
			return errno;
		if (off + sizeof(token) <= size)
			memcpy(f.buf + hdr + off, &token, sizeof(token));
	}
	if ((err = gather(nr, &a, &f)))
		return err;
	struct vgpu_request_header h = {VGPU_MAGIC, (uint32_t)request, (uint32_t)size,
					(uint32_t)(f.len - hdr - size)};
	memcpy(f.buf, &h, hdr);

	size_t replen = 0;
	err = frame_call(fd, (uint64_t)syscall(SYS_gettid), f.buf, f.len, b->rep, sizeof(b->rep), &replen);
	DBG("ioctl fd %d %#lx (nr %#x) struct %zu extra %zu -> %s", fd, request, nr, size,
	    f.len - hdr - size, err ? strerror(err) : "0");
	if (err)
		return err;

	struct vgpu_reply_header rh;
	if (replen < sizeof(rh))
		return EIO;
	memcpy(&rh, b->rep, sizeof(rh));
	if ((uint64_t)sizeof(rh) + rh.arg_size + rh.extra_size != replen)
		return EIO;
	if (rh.result)
		return rh.result < 0 ? -rh.result : rh.result;
	/* The struct goes back only where Linux copies it back: _IOC_READ requests. */
	if (_IOC_DIR(request) & _IOC_READ)
		memcpy(arg, b->rep + sizeof(rh), MIN(size, rh.arg_size));
	scatter_out(nr, &a, b->rep + sizeof(rh) + rh.arg_size, rh.extra_size);

	/* Tokens out: the fd the program expects, opened on MOUNT/sync or MOUNT/prime. */
	int out_fd = -1;
	if (nr == NR(PRIME_FD_TO_HANDLE) || nr == NR(SYNCOBJ_FD_TO_HANDLE)) {
		struct drm_prime_handle *p = arg; /* put the program's fd back */
		struct drm_syncobj_handle *s = arg;
		if (nr == NR(PRIME_FD_TO_HANDLE))
			p->fd = a.prime.fd;
		else
			s->fd = a.sync_handle.fd;
	} else if (nr == NR(PRIME_HANDLE_TO_FD)) {
		struct drm_prime_handle *p = arg;
		int mode = (a.prime.flags & DRM_RDWR) ? O_RDWR : O_RDONLY;
		if ((out_fd = fd_of_token('p', (uint32_t)p->fd,
					  mode | ((a.prime.flags & DRM_CLOEXEC) ? O_CLOEXEC : 0))) < 0)
			return errno;
		p->fd = out_fd;
	} else if (nr == NR(SYNCOBJ_HANDLE_TO_FD)) {
		struct drm_syncobj_handle *s = arg;
		if ((out_fd = fd_of_token('s', (uint32_t)s->fd, O_RDONLY | O_CLOEXEC)) < 0)
			return errno;
		s->fd = out_fd;
	} else if (nr == NR(AMDGPU_FENCE_TO_HANDLE) &&
		   (a.fence_to_handle.in.what == AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ_FD ||
		    a.fence_to_handle.in.what == AMDGPU_FENCE_TO_HANDLE_GET_SYNC_FILE_FD)) {
		union drm_amdgpu_fence_to_handle *t = arg;
		if ((out_fd = fd_of_token('s', t->out.handle, O_RDONLY | O_CLOEXEC)) < 0)
			return errno;
		t->out.handle = (uint32_t)out_fd;
	}
	return 0;
}

/* A control file we did not see being opened (relative path, inherited, received):
 * recognised by its path at its first DRM ioctl. */
static struct vfile *adopt(int fd)
{
	char path[PATH_MAX];
	int minor;
	if (fd_path(fd, path) < 0 || (minor = control_minor(path)) < 0)
		return NULL;
	track_control(fd, minor);
	return vf_get(fd);
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	va_start(ap, request);
	void *arg = va_arg(ap, void *);
	va_end(ap);

	struct vfile *vf = NULL;
	/* Only DRM requests ('d') are translated; others (TCGETS...) reach the file as they
	 * are, and FUSE answers them (ENOTTY). */
	if (mount_len && _IOC_TYPE(request) == DRM_IOCTL_BASE && !(vf = vf_get(fd)))
		vf = adopt(fd);
	if (!vf)
		return REAL(ioctl)(fd, request, arg);
	int err = drm_ioctl(fd, request, arg);
	vf_release(vf);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
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
