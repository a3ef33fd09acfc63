/* pidfds, one way for morid (a client's process, the owner of memory it reaches by cross-memory
 * attach) and libmori (that owner, from the open reply): unlike a pid, a pidfd never comes to
 * name another process once its own has exited. */
#ifndef MORI_PIDFD_H
#define MORI_PIDFD_H
#include <errno.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* pidfd_open(pid, 0): a close-on-exec pidfd of pid, or -1 with errno (ESRCH: no such process;
 * ENOSYS: no pidfd_open, Linux < 5.3, or a libc that does not name it). */
static inline int pidfd_open_pid(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Has the process of pidfd fd exited? A pidfd polls readable from its exit on; a failed poll
 * counts as exited too (never copy on a doubt). */
static inline int pidfd_exited(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) != 0;
}
#endif
