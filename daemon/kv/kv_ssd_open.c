/* Opening the SSD tier (kv_ssd.h): the directory's checks, its lock file (also the probe of
 * O_DIRECT and of write access), the scan of its segments, the ring and its eventfd on the loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "mori_types.h"
#include "kv/kv_ssd_int.h"

#define SSD_LOCK_FILE "kv.lock"

static int open_fail(int rc, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int open_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* The lock file: taken exclusively for the tier's life, and the probe of O_DIRECT and of write
 * access. */
static int open_lock(struct kv_ssd *s, char *err, size_t errlen)
{
	s->odirect = 1;
	s->lockfd = openat(s->dfd, SSD_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
	if (s->lockfd < 0 && errno == EINVAL) {
		s->odirect = 0;
		s->lockfd = openat(s->dfd, SSD_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (s->lockfd >= 0)
			mlog_warn("kv", "%s: the filesystem refuses O_DIRECT: the SSD tier uses buffered I/O (the page "
				  "cache holds spilled values twice)", s->dir);
	}
	if (s->lockfd < 0) {
		int e = errno;
		if (e == EACCES || e == EPERM || e == EROFS)
			return open_fail(MORI_EPERM, err, errlen, "kv_ssd_dir %s is not writable (%s)", s->dir, strerror(e));
		return open_fail(MORI_ESYS, err, errlen, "kv_ssd_dir %s: cannot create %s: %s", s->dir, SSD_LOCK_FILE,
				 strerror(e));
	}
	if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0)
		return open_fail(errno == EWOULDBLOCK ? MORI_EBUSY : MORI_ESYS, err, errlen,
				 "kv_ssd_dir %s: %s", s->dir,
				 errno == EWOULDBLOCK ? "another process has it open (its kv.lock is locked)" : strerror(errno));
	return MORI_OK;
}

static int open_ring(struct kv_ssd *s, char *err, size_t errlen)
{
	int r = io_uring_queue_init(SSD_RING, &s->ring, 0);
	if (r < 0)
		return open_fail(MORI_ESYS, err, errlen, "io_uring_queue_init: %s (the SSD tier needs io_uring: Linux "
				 ">= 5.6, not disabled by kernel.io_uring_disabled or a seccomp filter)", strerror(-r));
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->efd < 0 || (r = io_uring_register_eventfd(&s->ring, s->efd)) < 0) {
		int e = s->efd < 0 ? errno : -r;
		io_uring_queue_exit(&s->ring);
		if (s->efd >= 0)
			close(s->efd);
		return open_fail(MORI_ESYS, err, errlen, "io_uring eventfd: %s", strerror(e));
	}
	if ((r = uv_poll_init(s->loop, &s->poll, s->efd)) == 0)
		r = uv_poll_start(&s->poll, UV_READABLE, ssd_on_poll);
	s->poll.data = s;
	if (r) {
		io_uring_queue_exit(&s->ring);
		uv_close((uv_handle_t *)&s->poll, ssd_on_closed); /* closes efd, frees s */
		return open_fail(MORI_ESYS, err, errlen, "uv_poll on the io_uring eventfd: %s", uv_strerror(r));
	}
	return MORI_OK;
}

int kv_ssd_open(uv_loop_t *loop, const char *dir, uint64_t bytes, kv_ssd_found_cb found,
		kv_ssd_moved_cb moved, void *arg, struct kv_ssd **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!loop || !dir || !dir[0] || strlen(dir) >= sizeof(((struct kv_ssd *)0)->dir))
		return open_fail(MORI_EINVAL, err, errlen, "kv_ssd_dir: empty or longer than 255 bytes");
	struct stat sb;
	if (stat(dir, &sb) != 0)
		return open_fail(errno == ENOENT ? MORI_ENOENT : errno == EACCES ? MORI_EPERM : MORI_ESYS, err, errlen,
				 "kv_ssd_dir %s: %s%s", dir, strerror(errno),
				 errno == ENOENT ? " (create it, owned by morid's user)" : "");
	if (!S_ISDIR(sb.st_mode))
		return open_fail(MORI_EINVAL, err, errlen, "kv_ssd_dir %s is not a directory", dir);
	struct kv_ssd *s = calloc(1, sizeof(*s));
	if (!s)
		return open_fail(MORI_ENOMEM, err, errlen, "out of memory");
	s->loop = loop;
	s->moved = moved;
	s->arg = arg;
	s->lockfd = -1;
	snprintf(s->dir, sizeof(s->dir), "%s", dir);
	int rc;
	s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dfd < 0) {
		rc = open_fail(errno == EACCES ? MORI_EPERM : MORI_ESYS, err, errlen, "kv_ssd_dir %s: %s", dir,
			       strerror(errno));
		free(s);
		return rc;
	}
	if (faccessat(s->dfd, ".", W_OK | X_OK, AT_EACCESS) != 0 && (errno == EACCES || errno == EROFS)) {
		rc = open_fail(MORI_EPERM, err, errlen, "kv_ssd_dir %s is not writable (%s)", dir, strerror(errno));
		goto fail;
	}
	if ((rc = open_lock(s, err, errlen)))
		goto fail;
	uint32_t max_no = 0;
	rc = ssd_scan(s->dfd, dir, s->odirect ? O_DIRECT : 0, &s->segs, &s->st, found, arg, &max_no, err, errlen);
	if (rc)
		goto fail;
	for (uint32_t i = 0; i < s->segs.n; i++)
		s->used += s->segs.v[i]->end;
	s->next_no = max_no + 1;
	if (!bytes) {
		struct statvfs vf;
		if (fstatvfs(s->dfd, &vf) != 0) {
			rc = open_fail(MORI_ESYS, err, errlen, "kv_ssd_dir %s: statvfs: %s", dir, strerror(errno));
			goto fail;
		}
		bytes = (uint64_t)vf.f_bavail * vf.f_frsize / 10 * 9 + s->used;
	}
	s->capacity = bytes;
	s->seg_max = bytes / 16;
	s->seg_max = s->seg_max < SSD_SEG_MIN ? SSD_SEG_MIN : s->seg_max > SSD_SEG_MAX ? SSD_SEG_MAX : s->seg_max;
	s->seg_max &= ~(uint64_t)(SSD_ALIGN - 1);
	s->reserve = s->seg_max < bytes / 4 ? s->seg_max : bytes / 4; /* room for compaction to move records */
	if ((rc = open_ring(s, err, errlen))) {
		while (s->segs.n)
			ssd_seg_release(s, s->segs.v[s->segs.n - 1]);
		free(s->segs.v);
		close(s->lockfd);
		close(s->dfd);
		return rc; /* s is freed by the poll handle's close */
	}
	mlog_info("kv", "%s: SSD tier of %llu bytes, %u segments, %llu bytes used%s", dir, (unsigned long long)bytes,
		  s->segs.n, (unsigned long long)s->used, s->odirect ? "" : ", buffered I/O");
	*out = s;
	ssd_compact_maybe(s, 0);
	return MORI_OK;
fail:
	while (s->segs.n)
		ssd_seg_release(s, s->segs.v[s->segs.n - 1]);
	free(s->segs.v);
	if (s->lockfd >= 0)
		close(s->lockfd);
	close(s->dfd);
	free(s);
	return rc;
}
