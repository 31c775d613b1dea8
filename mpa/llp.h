/* The lower-layer protocol (LLP) under MPA: one reliable, ordered byte stream.
 *
 * Nothing above MPA knows the stream is a socket. Today it is a kernel TCP
 * socket (llp_tcp.c); a TLS stream or another transport implements the same
 * ops. RFC 5044 §2 calls this the LLP.
 */
#ifndef UIWARP_MPA_LLP_H
#define UIWARP_MPA_LLP_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uiw_llp;

struct uiw_llp_ops {
	/* Sends every byte of iov[0..n). Blocks until all are handed to the
	 * stream (partial writes are retried inside). Returns the byte count,
	 * or -errno (-EPIPE, -ECONNRESET, ...). */
	ssize_t (*sendv)(struct uiw_llp *llp, const struct iovec *iov, int n);
	/* Receives up to the sum of iov[0..n) bytes, blocking until at least
	 * one byte is there (or, with timeout_ms >= 0, until it expires:
	 * -ETIMEDOUT). Returns the count, 0 on orderly end of stream, or
	 * -errno. */
	ssize_t (*recvv)(struct uiw_llp *llp, const struct iovec *iov, int n, int timeout_ms);
	/* Effective maximum segment size of the stream in bytes (TCP_MAXSEG). */
	int (*emss)(struct uiw_llp *llp);
	/* Half-closes the send direction (graceful close: TCP FIN). */
	void (*shutdown_send)(struct uiw_llp *llp);
	/* Aborts both directions; wakes a thread blocked in recvv. */
	void (*abort)(struct uiw_llp *llp);
	/* Releases the stream (closes the socket). */
	void (*destroy)(struct uiw_llp *llp);
};

struct uiw_llp {
	const struct uiw_llp_ops *ops;
	int fd; /* pollable descriptor, -1 if the transport has none */
};

/* Wraps a connected TCP socket (blocking mode is set). Sets TCP_NODELAY.
 * Returns NULL with errno ENOMEM. The llp owns fd from then on. */
struct uiw_llp *uiw_llp_tcp_wrap(int fd);

static inline ssize_t uiw_llp_sendv(struct uiw_llp *l, const struct iovec *iov, int n)
{
	return l->ops->sendv(l, iov, n);
}
static inline ssize_t uiw_llp_recvv(struct uiw_llp *l, const struct iovec *iov, int n, int tmo)
{
	return l->ops->recvv(l, iov, n, tmo);
}

/* Reads exactly len bytes into buf; -ECONNRESET on end of stream first,
 * -ETIMEDOUT when timeout_ms (>= 0) passes. Used by the MPA handshake. */
int uiw_llp_recv_exact(struct uiw_llp *llp, void *buf, size_t len, int timeout_ms);

#endif
