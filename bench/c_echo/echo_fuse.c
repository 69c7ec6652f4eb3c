/*
 * The floor of FUSE itself: a minimal libfuse3 (low-level API) control-file echo.
 *
 *     echo_fuse -f -s MOUNT
 *
 * Two files, opened direct_io like vgpu's control files:
 *
 * - MOUNT/ctl, the frame echo: write() stores the frame; read() returns it with the
 *   request header {magic, request, arg_size, extra_size} replaced by a reply header
 *   {result 0, arg_size, extra_size, 0}, so a VERSION request comes back exactly as
 *   long as vgpu's reply.
 * - MOUNT/ioctl, the ioctl echo: FUSE_IOCTL in restricted mode (the only one a FUSE
 *   file gets): the kernel has copied _IOC_SIZE(cmd) bytes of the caller's struct in
 *   (in_buf, for _IOC_WRITE) and takes out_bufsz bytes back (for _IOC_READ); the
 *   handler answers result 0 with the input struct copied back, one FUSE request per
 *   ioctl as on vgpu's renderD128.
 *
 * Same behaviour as bench/echo_pyfuse3.py; run single-threaded (-s) like pyfuse3's
 * one trio loop (and like its one ioctl reader thread).
 *
 * Built by `make bench`: gcc -O2 echo_fuse.c $(pkg-config --cflags --libs fuse3)
 */
#define FUSE_USE_VERSION 35   /* 35: ioctl's cmd is unsigned int */
#include <fuse_lowlevel.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define CTL_INODE 2
#define IOCTL_INODE 3
#define MAX_FRAME (128 * 1024)

struct frame {
	size_t len;
	uint8_t data[MAX_FRAME];
};

static void fill_attr(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = ino == FUSE_ROOT_ID ? (S_IFDIR | 0755) : (S_IFREG | 0666);
	st->st_nlink = 1;
}

static void echo_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID || (strcmp(name, "ctl") != 0 && strcmp(name, "ioctl") != 0)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = strcmp(name, "ctl") == 0 ? CTL_INODE : IOCTL_INODE;
	e.attr_timeout = e.entry_timeout = 3600.0;
	fill_attr(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void echo_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (ino != FUSE_ROOT_ID && ino != CTL_INODE && ino != IOCTL_INODE) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_attr(ino, &st);
	fuse_reply_attr(req, &st, 3600.0);
}

static void echo_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct frame *f;

	if (ino != CTL_INODE && ino != IOCTL_INODE) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (ino == IOCTL_INODE) {   /* no frame to keep: the ioctl's data is in the request */
		fi->fh = 0;
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

static void echo_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		       off_t off, struct fuse_file_info *fi)
{
	struct frame *f = (struct frame *)(uintptr_t)fi->fh;

	(void)off;
	if (ino != CTL_INODE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (size > MAX_FRAME) {
		fuse_reply_err(req, E2BIG);
		return;
	}
	memcpy(f->data, buf, size);
	f->len = size;
	fuse_reply_write(req, size);
}

static void echo_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct frame *f = (struct frame *)(uintptr_t)fi->fh;
	const uint32_t *in = (const uint32_t *)f->data;
	uint32_t reply[4];
	struct iovec iov[2];

	(void)off;
	if (ino != CTL_INODE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (f->len < sizeof(reply) || size < f->len) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* {magic, request, arg_size, extra_size} -> {result 0, arg_size, extra_size, 0} */
	reply[0] = 0;
	reply[1] = in[2];
	reply[2] = in[3];
	reply[3] = 0;
	iov[0].iov_base = reply;
	iov[0].iov_len = sizeof(reply);
	iov[1].iov_base = f->data + sizeof(reply);
	iov[1].iov_len = f->len - sizeof(reply);
	fuse_reply_iov(req, iov, 2);
}

/* The ioctl echo: the caller's struct back, result 0 (restricted mode: no retry). */
static void echo_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		       struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		       size_t in_bufsz, size_t out_bufsz)
{
	(void)cmd;
	(void)arg;
	(void)fi;
	if (flags & FUSE_IOCTL_COMPAT) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (ino != IOCTL_INODE) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	fuse_reply_ioctl(req, 0, in_buf, in_bufsz < out_bufsz ? in_bufsz : out_bufsz);
}

static void echo_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	free((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops echo_ops = {
	.lookup = echo_lookup,
	.getattr = echo_getattr,
	.open = echo_open,
	.write = echo_write,
	.read = echo_read,
	.ioctl = echo_ioctl,
	.release = echo_release,
};

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts;
	struct fuse_session *se;
	int ret = 1;

	if (fuse_parse_cmdline(&args, &opts) != 0 || !opts.mountpoint) {
		fprintf(stderr, "usage: %s -f -s MOUNT\n", argv[0]);
		return 1;
	}
	/* as vdev.daemon mounts: allow_other when root */
	if (getuid() == 0)
		fuse_opt_add_arg(&args, "-oallow_other");
	fuse_opt_add_arg(&args, "-ofsname=echo_fuse");
	se = fuse_session_new(&args, &echo_ops, sizeof(echo_ops), NULL);
	if (!se)
		goto out_args;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(opts.foreground);
	ret = fuse_session_loop(se);
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_args:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	return ret ? 1 : 0;
}
