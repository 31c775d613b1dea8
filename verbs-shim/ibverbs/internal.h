/* Internal to libibverbs.so.1 (ours): helpers shared by its source files.
 * Nothing here is exported (the version script makes everything not listed
 * local).
 */
#ifndef UIWARP_IBVERBS_INTERNAL_H
#define UIWARP_IBVERBS_INTERNAL_H

#include <errno.h>
#include <stdint.h>

#include "verbs-shim/shim.h"

/* Device identity, reported by ibv_query_device / ibv_query_port. */
#define SHIM_PORT_NUM 1
#define SHIM_FW_VER "uiwarp 0.1.0"
/* Engine limits rdmap.h does not state; our own choices, reported as-is. */
#define SHIM_MAX_QP 16384 /* the default; UIWARP_MAX_QP lowers it */
#define SHIM_MAX_CQ 16384
#define SHIM_MAX_PD 16384
/* Memory windows and MRs share the engine's STag table (2^18 - 1 entries,
 * rdmap/mem.c): windows get 65536 of them, MRs the rest, so both limits
 * can be reached whatever the mix. */
#define SHIM_MAX_MW 65536
#define SHIM_MAX_MR ((1 << 18) - 1 - SHIM_MAX_MW)
/* Largest message: 2^31 bytes, the InfiniBand/verbs max_msg_sz convention. */
#define SHIM_MAX_MSG_SZ 0x80000000u

/* Engine functions that arrive with the engine's SRQ and RFC 7306 work
 * (rdmap/rdmap.h): weak references, so this library still links and loads
 * against an engine without them and then reports EOPNOTSUPP / "not
 * supported" for SRQs, immediate data and atomics. */
#pragma weak uiw_srq_create
#pragma weak uiw_srq_destroy
#pragma weak uiw_srq_post_recv
#pragma weak uiw_srq_count
#pragma weak uiw_srq_set_limit
#pragma weak uiw_qp_caps
#pragma weak uiw_rfc7306_enabled

/* True if the engine has SRQs / offers RFC 7306 on new connections. */
static inline bool shim_have_srq(void)
{
	return uiw_srq_create != NULL && uiw_srq_post_recv != NULL && uiw_srq_destroy != NULL;
}
static inline bool shim_rfc7306_offered(void)
{
	return uiw_rfc7306_enabled != NULL && uiw_qp_caps != NULL && uiw_rfc7306_enabled();
}
#define SHIM_MAX_SRQ 16384

/* Objects of each kind alive in the process (one device), against the
 * limits ibv_query_device reports: creating one more past its limit fails
 * with ENOMEM, as siw's per-device counts do (siw_create_qp, _cq,
 * _alloc_pd, _reg_user_mr, _create_srq, _alloc_mw: "too many ...",
 * -ENOMEM). */
enum shim_kind {
	SHIM_KIND_QP,
	SHIM_KIND_CQ,
	SHIM_KIND_PD,
	SHIM_KIND_MR,
	SHIM_KIND_MW,
	SHIM_KIND_SRQ,
	SHIM_KIND_N
};
/* The limit of kind (max_qp is UIWARP_MAX_QP when set, 1..SHIM_MAX_QP). */
uint32_t shim_kind_max(enum shim_kind k);
/* Counts one more object of kind: true, or false with errno ENOMEM when
 * the limit is reached. */
bool shim_kind_get(enum shim_kind k);
/* One object of kind is gone (destroyed, or its creation failed after
 * shim_kind_get). errno unchanged. */
void shim_kind_put(enum shim_kind k);

/* Work requests and completions are converted on the stack in chunks of
 * this many. */
#define SHIM_POST_CHUNK 32

/* Use counts of PDs, CQs and SRQs (atomic): the objects that use one take
 * a reference; destroying it is EBUSY while any is held. */
static inline void shim_get(int *users)
{
	__atomic_add_fetch(users, 1, __ATOMIC_ACQ_REL);
}

static inline void shim_put(int *users)
{
	__atomic_sub_fetch(users, 1, __ATOMIC_ACQ_REL);
}

static inline bool shim_busy(int *users)
{
	return __atomic_load_n(users, __ATOMIC_ACQUIRE) > 0;
}

/* The PD behind pd with one more user (shim_put(&p->users) drops it), or
 * NULL with errno EINVAL if pd is NULL or not a live PD (freed, or a
 * stray pointer): checked against the set of live PDs without touching
 * *pd, so such a PD gets an error instead of a crash. pd_mr.c. */
struct shim_pd *shim_pd_acquire(struct ibv_pd *pd);

/* The one device. Returns it (initialised once, thread-safe). */
struct ibv_device *shim_device(void);
/* GID[0]: the MAC of the first non-loopback interface in bytes 0..5 (as
 * iWARP drivers report it), rest 0. ifindex may be NULL. */
void shim_device_gid(union ibv_gid *gid, int *ifindex);
/* node GUID (big-endian), an EUI-64 made from the same MAC. */
__be64 shim_device_guid(void);

/* Queues an async event on ctx's async_fd (thread-safe; called from engine
 * threads). Dropped silently if 1024 events are already queued. */
void shim_async_push(struct shim_context *ctx, const struct ibv_async_event *ev);
/* Removes queued, not yet returned, events about obj (a QP, CQ or SRQ) on
 * destruction, as the kernel does (ib_uverbs_release_uevent). */
void shim_async_purge(struct shim_context *ctx, void *obj);

/* The verbs_context ops our context installs. */
int shim_op_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr, size_t port_attr_len);
int shim_op_query_device_ex(struct ibv_context *context,
			    const struct ibv_query_device_ex_input *input,
			    struct ibv_device_attr_ex *attr, size_t attr_size);
int shim_op_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int shim_op_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int shim_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int shim_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int shim_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
struct ibv_mw *shim_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int shim_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
int shim_op_dealloc_mw(struct ibv_mw *mw);
struct ibv_qp *shim_op_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_cq_ex *shim_op_create_cq_ex(struct ibv_context *context,
				       struct ibv_cq_init_attr_ex *attr);
struct ibv_srq *shim_op_create_srq_ex(struct ibv_context *context,
				      struct ibv_srq_init_attr_ex *attr);
/* ibv_wr_* API (wr.c): installs the ibv_qp_ex ops on q; frees its state. */
void shim_qp_ex_init(struct shim_qp *q);
void shim_qp_ex_fini(struct shim_qp *q);
/* One ibv_send_wr-like request into the engine's form (post.c); shared
 * with wr.c. */
int shim_check_rfc7306(struct shim_qp *q);
/* The window part of a Bind MW WR (post.c; see its comment). */
int shim_bind_wr(struct uiw_send_wr *u, struct ibv_mw *mw, uint32_t rkey,
		 const struct ibv_mw_bind_info *info);

/* The async event of a Terminate (qp.c; see its comment). */
enum ibv_event_type shim_term_event(const struct uiw_term_info *t);

/* Sets errno to e and returns NULL: the verbs convention for failing
 * pointer-returning calls. */
static inline void *shim_fail_null(int e)
{
	errno = e;
	return NULL;
}

#endif
