/* The parts of the librdmacm 44 ABI that uiwarp does not implement. They
 * exist because every rdma-core binary is linked BIND_NOW (all imports
 * must resolve at load time); calling them fails cleanly, never aborts.
 *
 * - rsocket family (rdma/rsocket.h, rsocket(7)): rsocket() fails with
 *   ENOSYS, so no rsocket descriptor can exist; the calls taking one fail
 *   with -1 / errno ENOSYS. rpoll / rselect act on ordinary descriptors
 *   (what the real ones do for non-rsockets), so programs that poll a CM
 *   channel fd through them work; so do repoll_* (RDMACM_1.5) with epoll.
 * - multicast (rdma_join_multicast(3), rdma_leave_multicast(3)): UD only;
 *   -1 / ENOSYS.
 * - SRQ through rdma_cm (rdma_create_srq(3)): -1 / ENOSYS.
 * - ECE (rdma_set_local_ece(3), rdma_get_remote_ece(3)): -1 / EOPNOTSUPP.
 */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include "cm_priv.h"

#define FAIL(err)                                                                                  \
	do {                                                                                       \
		errno = (err);                                                                     \
		return -1;                                                                         \
	} while (0)

/* rsocket(7): -1, errno ENOSYS. */
CM_EXPORT int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	FAIL(ENOSYS);
}

/* rsocket(7) calls on an rsocket: -1, errno ENOSYS (none can exist). */
CM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rlisten(int socket, int backlog)
{
	(void)socket, (void)backlog;
	FAIL(ENOSYS);
}

CM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rshutdown(int socket, int how)
{
	(void)socket, (void)how;
	FAIL(ENOSYS);
}

CM_EXPORT int rclose(int socket)
{
	(void)socket;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	(void)socket, (void)buf, (void)len, (void)flags;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
			    socklen_t *addrlen)
{
	(void)socket, (void)buf, (void)len, (void)flags, (void)src_addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	(void)socket, (void)msg, (void)flags;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	(void)socket, (void)buf, (void)len, (void)flags;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	(void)socket, (void)buf, (void)len, (void)flags, (void)dest_addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	(void)socket, (void)msg, (void)flags;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
	(void)socket, (void)buf, (void)count;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket, (void)iov, (void)iovcnt;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
	(void)socket, (void)buf, (void)count;
	FAIL(ENOSYS);
}

CM_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	(void)socket, (void)iov, (void)iovcnt;
	FAIL(ENOSYS);
}

/* rpoll: poll(2) on ordinary descriptors (there are no rsockets). */
CM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

/* repoll_create / repoll_ctl / repoll_wait (RDMACM_1.5, rdma-core after
 * v64: epoll(7) over rsockets): epoll_create1(2), epoll_ctl(2) and
 * epoll_wait(2) on ordinary descriptors, as rpoll is poll(2) (there are
 * no rsockets). Return values and errno are those of the epoll calls. */
CM_EXPORT int repoll_create(int flags);
CM_EXPORT int repoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
CM_EXPORT int repoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);

CM_EXPORT int repoll_create(int flags)
{
	return epoll_create1(flags);
}

CM_EXPORT int repoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	return epoll_ctl(epfd, op, fd, event);
}

CM_EXPORT int repoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return epoll_wait(epfd, events, maxevents, timeout);
}

/* rselect: select(2) on ordinary descriptors (there are no rsockets). */
CM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		      struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

CM_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)socket, (void)addr, (void)addrlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	(void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
	FAIL(ENOSYS);
}

CM_EXPORT int rfcntl(int socket, int cmd, ...)
{
	(void)socket, (void)cmd;
	FAIL(ENOSYS);
}

/* riomap / riounmap / riowrite (rsocket(7) direct data placement): -1 /
 * (size_t)-1 for riowrite, errno ENOSYS. */
CM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)socket, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
	FAIL(ENOSYS);
}

CM_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	(void)socket, (void)buf, (void)len;
	FAIL(ENOSYS);
}

CM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	(void)socket, (void)buf, (void)count, (void)offset, (void)flags;
	errno = ENOSYS;
	return (size_t)-1;
}

/* rdma_join_multicast(3) / rdma_join_multicast_ex / rdma_leave_multicast(3):
 * -1, errno ENOSYS (UD multicast is not implemented). */
CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)id, (void)addr, (void)context;
	FAIL(ENOSYS);
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				     struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	(void)id, (void)mc_join_attr, (void)context;
	FAIL(ENOSYS);
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id, (void)addr;
	FAIL(ENOSYS);
}

/* rdma_create_srq(3) / rdma_create_srq_ex: -1, errno ENOSYS. */
CM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	(void)id, (void)pd, (void)attr;
	FAIL(ENOSYS);
}

CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	(void)id, (void)attr;
	FAIL(ENOSYS);
}

/* rdma_destroy_srq(3): nothing to destroy (rdma_create_srq never succeeds). */
CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	(void)id;
}

/* rdma_set_local_ece(3) / rdma_get_remote_ece(3): -1, errno EOPNOTSUPP. */
CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	FAIL(EOPNOTSUPP);
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	FAIL(EOPNOTSUPP);
}
