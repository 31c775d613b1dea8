/* libibverbs.so.1 (ours): the device, its context, queries, async events,
 * fork support and the string / rate helpers.
 *
 * There is one device for every interface (rdma_cm resolves any local
 * address to it), named "uiw0" unless UIWARP_DEV_NAME says otherwise. No
 * sysfs, no netlink RDMA, no /dev/infiniband: everything is answered here,
 * the interface facts (GID, GUID, MTU, port state) from rtnetlink.
 * Sources: the rdma-core 44 verbs man pages (ibv_get_device_list(3),
 * ibv_open_device(3), ibv_query_device(3), ibv_query_port(3),
 * ibv_query_gid(3), ibv_get_async_event(3), ibv_fork_init(3)); Linux's
 * siw (drivers/infiniband/sw/siw: siw_query_port, siw_device_create) for
 * what a software iWARP device derives from its netdev.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netlink/uiw_netlink.h"
#include "util/thread.h"
#include "verbs-shim/ibverbs/internal.h"

/* Vendor identity: Chelsio (PCI vendor 0x1425) with a T6 part ID
 * (0x6000: part_id >> 12 == 6), the iWARP adapter family uiwarp interoperates
 * with (docs/verbs.md). perftest keys behaviour off these IDs (ib_dev_name()
 * in perftest's perftest_parameters.c): Chelsio T4/T5/T6 is an iWARP device
 * it knows, so it keeps the inline sizes it is given (-I; an unknown vendor
 * gets "Device not recognized to implement inline feature") and still uses
 * plain ibv_post_send (use_old_post_send: only mlx5, EFA and HNS get the
 * ibv_wr_* / mlx5dv / efadv paths). UIWARP_VENDOR_ID and
 * UIWARP_VENDOR_PART_ID override both (e.g. 0x756977 to look unknown). */
#define SHIM_VENDOR_ID 0x1425
#define SHIM_VENDOR_PART_ID 0x6000
#define SHIM_HW_VER 1

static struct ibv_device shim_dev;
static pthread_once_t shim_dev_once = PTHREAD_ONCE_INIT;

/* What the device reports from the network interfaces, asked of the kernel
 * over rtnetlink (netlink/uiw_netlink.h) on every query that needs it:
 * nothing is cached, so a changed MTU, MAC or link state shows up on the
 * next ibv_query_port / ibv_query_gid, and nothing runs before the first
 * call (a library constructor would run in every process qperf forks).
 *
 * The port's interface, as siw and iw_cxgb4 have one netdev per port, is the
 * first up, non-loopback Ethernet interface in ifindex order, or the
 * loopback interface when there is none (a namespace with only lo): GID[0]
 * is its MAC (all zero for lo), the node GUID the EUI-64 of that MAC, and
 * active_mtu / max_mtu its MTU (siw_query_port: ib_mtu_int_to_enum of the
 * netdev's MTU). The port state follows the operational state, as siw's
 * does, but of every interface the one device serves (rdma_cm resolves any
 * local address, loopback included, to it): ACTIVE while at least one
 * interface is up and running (IFF_UP and IFF_RUNNING, i.e. oper up), so
 * rdma_cm over lo keeps working when no Ethernet link has a carrier; DOWN
 * (phys_state Disabled) when none is, e.g. a fresh namespace whose lo is
 * still down, where no connection could be made anyway. Should netlink
 * itself fail, the device still opens: zero GID, IBV_MTU_1024, ACTIVE. */
struct shim_netdev {
	int ifindex;	   /* the port's interface; 0 if unknown */
	uint8_t mac[6];	   /* its MAC; zero for lo or unknown */
	unsigned int mtu;  /* its MTU in bytes; 0 if unknown */
	bool some_running; /* some interface is up and running */
};

static bool shim_is_port_ether(const struct uiw_nl_link *l)
{
	static const uint8_t zero[6];

	return (l->flags & IFF_UP) && !(l->flags & IFF_LOOPBACK) && l->type == ARPHRD_ETHER &&
	       l->hwaddr_len == 6 && memcmp(l->hwaddr, zero, 6) != 0;
}

static void shim_netdev_get(struct shim_netdev *nd)
{
	struct uiw_nl_link *v;
	const struct uiw_nl_link *port = NULL, *lo = NULL;
	size_t n;

	memset(nd, 0, sizeof(*nd));
	/* (uiw_nl_links dumps again when a concurrent interface change
	 * interrupted the dump, so a GID, GUID or MTU never flips for one
	 * query because of other programs creating veths.) */
	if (uiw_nl_links(&v, &n) != 0) {
		nd->some_running = true; /* unknown: stay usable, as before netlink */
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if ((v[i].flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING))
			nd->some_running = true;
		if (!port && shim_is_port_ether(&v[i]))
			port = &v[i];
		if (!lo && (v[i].flags & IFF_LOOPBACK))
			lo = &v[i];
	}
	if (port) {
		nd->ifindex = port->ifindex;
		memcpy(nd->mac, port->hwaddr, 6);
		nd->mtu = port->mtu;
	} else if (lo) {
		nd->ifindex = lo->ifindex;
		nd->mtu = lo->mtu;
	}
	uiw_nl_links_free(v, n);
}

/* An interface MTU as the largest IBV_MTU_256..4096 not above it (256 for
 * less), as the kernel's ib_mtu_int_to_enum; IBV_MTU_1024 when unknown. */
static enum ibv_mtu shim_mtu_enum(unsigned int mtu)
{
	if (mtu == 0)
		return IBV_MTU_1024;
	if (mtu >= 4096)
		return IBV_MTU_4096;
	if (mtu >= 2048)
		return IBV_MTU_2048;
	if (mtu >= 1024)
		return IBV_MTU_1024;
	if (mtu >= 512)
		return IBV_MTU_512;
	return IBV_MTU_256;
}

static void shim_dev_init(void)
{
	const char *name = getenv("UIWARP_DEV_NAME");

	if (!name || !*name)
		name = "uiw0";
	memset(&shim_dev, 0, sizeof(shim_dev));
	shim_dev.node_type = IBV_NODE_RNIC;
	shim_dev.transport_type = IBV_TRANSPORT_IWARP;
	snprintf(shim_dev.name, sizeof(shim_dev.name), "%s", name);
	snprintf(shim_dev.dev_name, sizeof(shim_dev.dev_name), "uverbs0");
	/* dev_path / ibdev_path stay empty: there is no sysfs node. */
}

struct ibv_device *shim_device(void)
{
	pthread_once(&shim_dev_once, shim_dev_init);
	return &shim_dev;
}

void shim_device_gid(union ibv_gid *gid, int *ifindex)
{
	struct shim_netdev nd;

	shim_netdev_get(&nd);
	memset(gid, 0, sizeof(*gid));
	memcpy(gid->raw, nd.mac, 6);
	if (ifindex)
		*ifindex = nd.ifindex;
}

/* The EUI-64 of a MAC (universal/local bit flipped, ff:fe inserted), in
 * network order: what siw makes its node GUID from (addrconf_addr_eui48). */
static __be64 shim_eui64(const uint8_t mac[6])
{
	uint8_t e[8] = {mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
	uint64_t g;

	memcpy(&g, e, 8);
	return (__be64)g;
}

__be64 shim_device_guid(void)
{
	struct shim_netdev nd;

	shim_netdev_get(&nd);
	return shim_eui64(nd.mac);
}

static bool shim_is_our_device(struct ibv_device *device)
{
	return device == shim_device();
}

/* ---------------------------------------------------------- device list */

/* ibv_get_device_list(3): a NULL-terminated array holding the one device;
 * *num_devices (optional) gets 1. Returns NULL with errno ENOMEM. */
struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **l = calloc(2, sizeof(*l));

	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = shim_device();
	if (num_devices)
		*num_devices = 1;
	return l;
}

/* ibv_get_device_list(3): frees an array from ibv_get_device_list (the
 * devices themselves are static). */
void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

/* ibv_get_device_name(3): the device's name ("uiw0" or $UIWARP_DEV_NAME). */
const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

/* ibv_get_device_guid(3): the node GUID, big-endian (EUI-64 of GID[0]'s
 * MAC). */
__be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	return shim_device_guid();
}

/* ibv_get_device_index(3): the device index (0), or -1 for a device that is
 * not ours. */
int ibv_get_device_index(struct ibv_device *device)
{
	return shim_is_our_device(device) ? 0 : -1;
}

/* ------------------------------------------------------------ context */

/* ibv_open_device(3): a context on the device. async_fd is a real pipe
 * (see ibv_get_async_event); cmd_fd, the kernel command channel on rdma-core,
 * is a descriptor of /dev/null (-1 if it cannot be opened): there are no
 * commands, but programs that dup(2) it to share the context
 * (ibv_import_device(3); rdma-core's test_shared_pd.py) get a descriptor and
 * then ibv_import_device's EOPNOTSUPP, not EBADF. Returns NULL with errno
 * ENODEV (not our device), ENOMEM, or the pipe's errno (EMFILE, ENFILE). */
struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct shim_context *c;
	struct ibv_context *ctx;
	int fds[2];

	if (!shim_is_our_device(device))
		return shim_fail_null(ENODEV);
	c = calloc(1, sizeof(*c));
	if (!c)
		return shim_fail_null(ENOMEM);
	if (pipe2(fds, O_CLOEXEC) != 0) {
		int e = errno;

		free(c);
		return shim_fail_null(e);
	}
	(void)fcntl(fds[1], F_SETFL, O_NONBLOCK);
	pthread_mutex_init(&c->ev_lock, NULL);
	c->ev_wfd = fds[1];

	c->vctx.sz = sizeof(struct verbs_context);
	c->vctx.query_port = shim_op_query_port;
	c->vctx.query_device_ex = shim_op_query_device_ex;
	c->vctx.create_qp_ex = shim_op_create_qp_ex;
	c->vctx.create_cq_ex = shim_op_create_cq_ex;
	c->vctx.create_srq_ex = shim_op_create_srq_ex;

	ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* no commands: see above */
	ctx->async_fd = fds[0];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->ops._compat_query_device = ibv_query_device;
	ctx->ops._compat_query_port = ibv_query_port;
	ctx->ops.alloc_mw = shim_op_alloc_mw;
	ctx->ops.bind_mw = shim_op_bind_mw;
	ctx->ops.dealloc_mw = shim_op_dealloc_mw;
	ctx->ops.poll_cq = shim_op_poll_cq;
	ctx->ops.req_notify_cq = shim_op_req_notify_cq;
	ctx->ops.post_srq_recv = shim_op_post_srq_recv;
	ctx->ops.post_send = shim_op_post_send;
	ctx->ops.post_recv = shim_op_post_recv;
	return ctx;
}

struct shim_async_ev {
	struct shim_async_ev *next;
	struct ibv_async_event ev;
};

/* ibv_open_device(3): closes the context. The caller has destroyed its
 * objects first (verbs rule). Returns 0. */
int ibv_close_device(struct ibv_context *context)
{
	struct shim_context *c;
	struct shim_async_ev *e;

	if (!context)
		return EINVAL;
	c = shim_ctx(context);
	while ((e = c->ev_head)) {
		c->ev_head = e->next;
		free(e);
	}
	close(context->async_fd);
	close(c->ev_wfd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	pthread_mutex_destroy(&c->ev_lock);
	pthread_mutex_destroy(&context->mutex);
	free(c);
	return 0;
}

/* ------------------------------------------------------------- queries */

static uint32_t shim_env_u32(const char *name, uint32_t def);

static _Atomic uint32_t shim_kind_n[SHIM_KIND_N];

/* See internal.h. */
uint32_t shim_kind_max(enum shim_kind k)
{
	static const uint32_t max[SHIM_KIND_N] = {
	    [SHIM_KIND_QP] = SHIM_MAX_QP, [SHIM_KIND_CQ] = SHIM_MAX_CQ,
	    [SHIM_KIND_PD] = SHIM_MAX_PD, [SHIM_KIND_MR] = SHIM_MAX_MR,
	    [SHIM_KIND_MW] = SHIM_MAX_MW, [SHIM_KIND_SRQ] = SHIM_MAX_SRQ,
	};
	if (k == SHIM_KIND_QP) {
		uint32_t n = shim_env_u32("UIWARP_MAX_QP", SHIM_MAX_QP);

		return n >= 1 && n <= SHIM_MAX_QP ? n : SHIM_MAX_QP;
	}
	return max[k];
}

/* See internal.h. */
bool shim_kind_get(enum shim_kind k)
{
	uint32_t max = shim_kind_max(k);
	uint32_t n = atomic_load(&shim_kind_n[k]);

	do {
		if (n >= max) {
			errno = ENOMEM;
			return false;
		}
	} while (!atomic_compare_exchange_weak(&shim_kind_n[k], &n, n + 1));
	return true;
}

/* See internal.h. */
void shim_kind_put(enum shim_kind k)
{
	atomic_fetch_sub(&shim_kind_n[k], 1);
}

/* $name as an unsigned number (0x.. allowed), or def if unset/invalid. */
static uint32_t shim_env_u32(const char *name, uint32_t def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	errno = 0;
	n = strtoul(v, &end, 0);
	if (errno || *end || n > UINT32_MAX)
		return def;
	return (uint32_t)n;
}

static void shim_fill_device_attr(struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", SHIM_FW_VER);
	a->node_guid = shim_device_guid();
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = ~(uint64_t)4095; /* any multiple of 4 KiB */
	a->vendor_id = shim_env_u32("UIWARP_VENDOR_ID", SHIM_VENDOR_ID);
	a->vendor_part_id = shim_env_u32("UIWARP_VENDOR_PART_ID", SHIM_VENDOR_PART_ID);
	a->hw_ver = SHIM_HW_VER;
	a->max_qp = (int)shim_kind_max(SHIM_KIND_QP);
	a->max_qp_wr = UIW_MAX_QP_WR;
	/* Memory windows of type 1 and 2 (pd_mr.c). Not 2A/2B: the engine
	 * validates a window's PD, not the QP it was bound through. */
	a->device_cap_flags = IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_WINDOW;
	a->max_mw = SHIM_MAX_MW;
	a->max_sge = UIW_MAX_SGE;
	a->max_sge_rd = UIW_MAX_SGE;
	a->max_cq = SHIM_MAX_CQ;
	a->max_cqe = UIW_MAX_CQE;
	a->max_mr = SHIM_MAX_MR;
	a->max_pd = SHIM_MAX_PD;
	a->max_qp_rd_atom = UIW_MAX_IRD;
	a->max_qp_init_rd_atom = UIW_MAX_ORD;
	a->max_res_rd_atom = UIW_MAX_IRD * SHIM_MAX_QP;
	/* RFC 7306 atomics are global to the device (one engine, one STag
	 * table); offered only when UIWARP_RFC7306=1, and each connection
	 * uses them only if the peer agrees. */
	a->atomic_cap = shim_rfc7306_offered() ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
	if (shim_have_srq()) {
		a->max_srq = SHIM_MAX_SRQ;
		a->max_srq_wr = UIW_MAX_QP_WR;
		a->max_srq_sge = UIW_MAX_SGE;
	}
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
}

/* ibv_query_device(3): device attributes, from rdmap.h's UIW_MAX_* and the
 * SHIM_MAX_* choices. Returns 0, or EINVAL for NULL arguments. */
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	shim_fill_device_attr(device_attr);
	return 0;
}

/* verbs_context.query_device_ex (ibv_query_device_ex(3)): fills the first
 * attr_size bytes of an ibv_device_attr_ex (callers built against older or
 * newer headers pass their own size); phys_port_cnt_ex is phys_port_cnt,
 * the other extended fields are zero (no ODP, TSO, RSS, DM ...). input must
 * be NULL or comp_mask 0. Returns 0 or EINVAL. */
int shim_op_query_device_ex(struct ibv_context *context,
			    const struct ibv_query_device_ex_input *input,
			    struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;

	(void)context;
	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(a.orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	shim_fill_device_attr(&a.orig_attr);
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
	a.max_dm_size = 0;
	/* the port count without the uint8 limit (rdma-core 36+); equal to
	 * phys_port_cnt below 256 (rdma-core's test_device.py
	 * test_phys_port_cnt_ex) */
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	if (attr_size > sizeof(a)) {
		memset(attr, 0, attr_size);
		attr_size = sizeof(a);
	}
	memcpy(attr, &a, attr_size);
	return 0;
}

static void shim_fill_port_attr(struct ibv_port_attr *p)
{
	struct shim_netdev nd;

	shim_netdev_get(&nd);
	memset(p, 0, sizeof(*p));
	p->state = nd.some_running ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	/* siw: the interface's MTU for both */
	p->active_mtu = shim_mtu_enum(nd.mtu);
	p->max_mtu = p->active_mtu;
	p->gid_tbl_len = 1;
	p->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP;
	p->max_msg_sz = SHIM_MAX_MSG_SZ;
	p->pkey_tbl_len = 1;
	p->max_vl_num = 1;
	/* TCP has no link rate; report 4X EDR (100 Gb/s). */
	p->active_width = 2;  /* 4X */
	p->active_speed = 32; /* EDR */
	p->phys_state = nd.some_running ? 5 /* LinkUp */ : 3 /* Disabled */;
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
}

/* verbs_context.query_port (the ibv_query_port(3) macro path): fills
 * port_attr_len bytes of an ibv_port_attr. Port 1 only. Returns 0 or
 * EINVAL (bad port, NULL). */
int shim_op_query_port(struct ibv_context *context, uint8_t port_num,
		       struct ibv_port_attr *port_attr, size_t port_attr_len)
{
	struct ibv_port_attr p;

	(void)context;
	if (port_num != SHIM_PORT_NUM || !port_attr)
		return EINVAL;
	shim_fill_port_attr(&p);
	if (port_attr_len > sizeof(p)) {
		memset(port_attr, 0, port_attr_len);
		port_attr_len = sizeof(p);
	}
	memcpy(port_attr, &p, port_attr_len);
	return 0;
}

#undef ibv_query_port
/* ibv_query_port(3), the exported IBVERBS_1.1 symbol: old callers pass the
 * 48-byte struct without port_cap_flags2, so exactly that much is written
 * (verbs-abi.md section 6). Returns 0 or EINVAL. */
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	return shim_op_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
				  offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* ibv_query_gid(3): GID[0] of port 1 (the port interface's MAC in bytes
 * 0..5, zero when that is lo; read now, see struct shim_netdev). Returns 0, or
 * -1 with errno EINVAL for another port or index. */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (!context || port_num != SHIM_PORT_NUM || index != 0 || !gid) {
		errno = EINVAL;
		return -1;
	}
	shim_device_gid(gid, NULL);
	return 0;
}

/* ibv_query_gid_ex(3) (entry_size: the caller's struct size): GID[0] with
 * type IB (what iWARP kernel drivers report) and the port interface's index
 * (0 if unknown).
 * Returns 0, EINVAL (bad port/index/flags/size), ENODATA never. */
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	int ifindex;

	(void)context;
	if (port_num != SHIM_PORT_NUM || gid_index != 0 || flags || !entry ||
	    entry_size < sizeof(e))
		return EINVAL;
	memset(&e, 0, sizeof(e));
	shim_device_gid(&e.gid, &ifindex);
	e.gid_index = 0;
	e.port_num = SHIM_PORT_NUM;
	e.gid_type = IBV_GID_TYPE_IB;
	e.ndev_ifindex = (uint32_t)ifindex;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

/* ibv_query_gid_table(3): the one GID entry. Returns the count (1), or
 * -EINVAL (flags, entry_size too small, max_entries 0). */
ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	int ret;

	if (max_entries < 1)
		return -EINVAL;
	ret = _ibv_query_gid_ex(context, SHIM_PORT_NUM, 0, entries, flags, entry_size);
	return ret ? -ret : 1;
}

/* The IBVERBS_PRIVATE_34 symbol ibv_devinfo uses: the sysfs GID type of
 * GID[index] (0 = "IB/RoCE v1"). Returns 0, or -1 with errno EINVAL. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type)
{
	(void)context;
	if (port_num != SHIM_PORT_NUM || index != 0 || !type) {
		errno = EINVAL;
		return -1;
	}
	*type = 0;
	return 0;
}

/* ibv_query_pkey(3): P_Key[0] = 0xffff (the default, meaningless on
 * iWARP). Returns 0, or -1 with errno EINVAL. */
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || port_num != SHIM_PORT_NUM || index != 0 || !pkey) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

/* ibv_get_pkey_index(3): the index of pkey (0 for 0xffff), or -1 with errno
 * ENOENT. */
int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	(void)context;
	if (port_num == SHIM_PORT_NUM && be16toh(pkey) == 0xffff)
		return 0;
	errno = ENOENT;
	return -1;
}

/* --------------------------------------------------------- async events */

#define SHIM_ASYNC_MAX 1024

void shim_async_push(struct shim_context *c, const struct ibv_async_event *ev)
{
	struct shim_async_ev *e;
	char b = 0;
	int cs = uiw_nocancel_begin(); /* write() under ev_lock */

	pthread_mutex_lock(&c->ev_lock);
	if (c->ev_count >= SHIM_ASYNC_MAX) {
		pthread_mutex_unlock(&c->ev_lock);
		uiw_nocancel_end(cs);
		return;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&c->ev_lock);
		uiw_nocancel_end(cs);
		return;
	}
	e->ev = *ev;
	if (c->ev_tail)
		c->ev_tail->next = e;
	else
		c->ev_head = e;
	c->ev_tail = e;
	c->ev_count++;
	/* One wake-up byte per event; the pipe holds 64 KiB, > SHIM_ASYNC_MAX. */
	if (write(c->ev_wfd, &b, 1) != 1) {
		/* cannot happen while the queue is bounded; the event stays queued */
	}
	pthread_mutex_unlock(&c->ev_lock);
	uiw_nocancel_end(cs);
}

static void *shim_async_obj(const struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_CQ_ERR:
		return ev->element.cq;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return ev->element.srq;
	case IBV_EVENT_WQ_FATAL:
		return ev->element.wq;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return ev->element.qp;
	default:
		return NULL;
	}
}

void shim_async_purge(struct shim_context *c, void *obj)
{
	struct shim_async_ev **pp, *e;

	pthread_mutex_lock(&c->ev_lock);
	pp = &c->ev_head;
	c->ev_tail = NULL;
	while ((e = *pp)) {
		if (shim_async_obj(&e->ev) == obj) {
			*pp = e->next;
			c->ev_count--;
			free(e);
			/* its wake-up byte stays in the pipe; ibv_get_async_event
			 * skips such stale bytes */
			continue;
		}
		c->ev_tail = e;
		pp = &e->next;
	}
	pthread_mutex_unlock(&c->ev_lock);
}

/* Counts ev as returned to the application on its object. */
static void shim_async_reported(const struct ibv_async_event *ev)
{
	if (ev->event_type == IBV_EVENT_CQ_ERR) {
		struct shim_cq *cq = shim_cq(ev->element.cq);

		pthread_mutex_lock(&cq->ibv.mutex);
		cq->async_events_reported++;
		pthread_mutex_unlock(&cq->ibv.mutex);
	} else if (ev->event_type == IBV_EVENT_SRQ_ERR ||
		   ev->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
		struct shim_srq *srq = shim_srq(ev->element.srq);

		pthread_mutex_lock(&srq->ibv.mutex);
		srq->async_events_reported++;
		pthread_mutex_unlock(&srq->ibv.mutex);
	} else if (ev->element.qp && shim_async_obj(ev) == ev->element.qp) {
		struct shim_qp *qp = shim_qp(ev->element.qp);

		pthread_mutex_lock(&qp->ibv.mutex);
		qp->async_events_reported++;
		pthread_mutex_unlock(&qp->ibv.mutex);
	}
}

/* ibv_get_async_event(3): the next async event of context. Blocks unless
 * the application set O_NONBLOCK on context->async_fd; then returns -1 with
 * errno EAGAIN when none is queued. Each returned event must be acked with
 * ibv_ack_async_event. Returns 0 or -1 (errno from read()). */
int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct shim_context *c;
	struct shim_async_ev *e;
	char b;

	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	c = shim_ctx(context);
	for (;;) {
		ssize_t n = read(context->async_fd, &b, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n != 1) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		pthread_mutex_lock(&c->ev_lock);
		e = c->ev_head;
		if (e) {
			c->ev_head = e->next;
			if (!c->ev_head)
				c->ev_tail = NULL;
			c->ev_count--;
			/* Count it as reported before ev_lock drops, so a destroy
			 * (which purges under ev_lock) waits for its ack. */
			shim_async_reported(&e->ev);
		}
		pthread_mutex_unlock(&c->ev_lock);
		if (e)
			break;
		/* a stale byte from a purged event: read the next one */
	}
	*event = e->ev;
	free(e);
	return 0;
}

/* ibv_get_async_event(3): acknowledges an event; the destroy of the
 * object it names waits until all its returned events are acked. */
void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (!event)
		return;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;

		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		return;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;

		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		return;
	}
	case IBV_EVENT_WQ_FATAL:
		return; /* no WQ objects exist */
	default:
		break;
	}
	if (shim_async_obj(event) == event->element.qp && event->element.qp) {
		struct ibv_qp *qp = event->element.qp;

		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
	}
}

/* ------------------------------------------------------------------ fork */

/* ibv_fork_init(3): nothing is pinned (the engine uses ordinary TCP
 * sockets), so fork is always safe. RDMAV_FORK_SAFE is accepted as a
 * no-op. Returns 0. */
int ibv_fork_init(void)
{
	return 0;
}

/* ibv_is_fork_initialized(3): IBV_FORK_UNNEEDED (see ibv_fork_init). */
enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

/* Private since rdma-core 1.1: mark a range (not) inherited by fork.
 * Nothing is pinned, so no-op. Returns 0. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

/* --------------------------------------------------------------- strings */

/* ibv_wc_status_str(3): a constant string for a work completion status. */
const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
	    [IBV_WC_SUCCESS] = "success",
	    [IBV_WC_LOC_LEN_ERR] = "local length error",
	    [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
	    [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
	    [IBV_WC_LOC_PROT_ERR] = "local protection error",
	    [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
	    [IBV_WC_MW_BIND_ERR] = "memory management operation error",
	    [IBV_WC_BAD_RESP_ERR] = "bad response error",
	    [IBV_WC_LOC_ACCESS_ERR] = "local access error",
	    [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
	    [IBV_WC_REM_ACCESS_ERR] = "remote access error",
	    [IBV_WC_REM_OP_ERR] = "remote operation error",
	    [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
	    [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
	    [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
	    [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
	    [IBV_WC_REM_ABORT_ERR] = "aborted error",
	    [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
	    [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
	    [IBV_WC_FATAL_ERR] = "fatal error",
	    [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
	    [IBV_WC_GENERAL_ERR] = "general error",
	    [IBV_WC_TM_ERR] = "TM error",
	    [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	if ((unsigned)status >= sizeof(s) / sizeof(s[0]) || !s[status])
		return "unknown";
	return s[status];
}

/* ibv_event_type_str(3): a constant string for an async event type. */
const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const s[] = {
	    [IBV_EVENT_CQ_ERR] = "CQ error",
	    [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
	    [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
	    [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
	    [IBV_EVENT_COMM_EST] = "communication established",
	    [IBV_EVENT_SQ_DRAINED] = "send queue drained",
	    [IBV_EVENT_PATH_MIG] = "path migrated",
	    [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
	    [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
	    [IBV_EVENT_PORT_ACTIVE] = "port active",
	    [IBV_EVENT_PORT_ERR] = "port error",
	    [IBV_EVENT_LID_CHANGE] = "LID change",
	    [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
	    [IBV_EVENT_SM_CHANGE] = "SM change",
	    [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
	    [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
	    [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
	    [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
	    [IBV_EVENT_GID_CHANGE] = "GID table change",
	    [IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	if ((unsigned)event >= sizeof(s) / sizeof(s[0]) || !s[event])
		return "unknown";
	return s[event];
}

/* ibv_node_type_str(3). */
const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	switch (node_type) {
	case IBV_NODE_CA:
		return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH:
		return "InfiniBand switch";
	case IBV_NODE_ROUTER:
		return "InfiniBand router";
	case IBV_NODE_RNIC:
		return "iWARP NIC";
	case IBV_NODE_USNIC:
		return "usNIC";
	case IBV_NODE_USNIC_UDP:
		return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED:
		return "unspecified";
	default:
		return "unknown";
	}
}

/* ibv_port_state_str(3). */
const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	switch (port_state) {
	case IBV_PORT_NOP:
		return "PORT_NOP";
	case IBV_PORT_DOWN:
		return "PORT_DOWN";
	case IBV_PORT_INIT:
		return "PORT_INIT";
	case IBV_PORT_ARMED:
		return "PORT_ARMED";
	case IBV_PORT_ACTIVE:
		return "PORT_ACTIVE";
	case IBV_PORT_ACTIVE_DEFER:
		return "PORT_ACTIVE_DEFER";
	default:
		return "invalid state";
	}
}

/* ----------------------------------------------------------------- rates */

/* enum ibv_rate value → rate in Mb/s (line rates for FDR and faster). */
static const struct {
	enum ibv_rate rate;
	int mbps;
} shim_rates[] = {
    {IBV_RATE_2_5_GBPS, 2500},	 {IBV_RATE_5_GBPS, 5000},	{IBV_RATE_10_GBPS, 10000},
    {IBV_RATE_20_GBPS, 20000},	 {IBV_RATE_30_GBPS, 30000},	{IBV_RATE_40_GBPS, 40000},
    {IBV_RATE_60_GBPS, 60000},	 {IBV_RATE_80_GBPS, 80000},	{IBV_RATE_120_GBPS, 120000},
    {IBV_RATE_14_GBPS, 14062},	 {IBV_RATE_56_GBPS, 56250},	{IBV_RATE_112_GBPS, 112500},
    {IBV_RATE_168_GBPS, 168750}, {IBV_RATE_25_GBPS, 25781},	{IBV_RATE_100_GBPS, 103125},
    {IBV_RATE_200_GBPS, 206250}, {IBV_RATE_300_GBPS, 309375},	{IBV_RATE_28_GBPS, 28125},
    {IBV_RATE_50_GBPS, 53125},	 {IBV_RATE_400_GBPS, 425000},	{IBV_RATE_600_GBPS, 637500},
    {IBV_RATE_800_GBPS, 850000}, {IBV_RATE_1200_GBPS, 1275000},
};

/* enum ibv_rate value → nominal Gb/s × 10 (2.5 → 25). */
static const struct {
	enum ibv_rate rate;
	int dgbps;
} shim_nominal[] = {
    {IBV_RATE_2_5_GBPS, 25},   {IBV_RATE_5_GBPS, 50},	  {IBV_RATE_10_GBPS, 100},
    {IBV_RATE_20_GBPS, 200},   {IBV_RATE_30_GBPS, 300},	  {IBV_RATE_40_GBPS, 400},
    {IBV_RATE_60_GBPS, 600},   {IBV_RATE_80_GBPS, 800},	  {IBV_RATE_120_GBPS, 1200},
    {IBV_RATE_25_GBPS, 250},   {IBV_RATE_100_GBPS, 1000}, {IBV_RATE_200_GBPS, 2000},
    {IBV_RATE_300_GBPS, 3000}, {IBV_RATE_50_GBPS, 500},	  {IBV_RATE_400_GBPS, 4000},
    {IBV_RATE_600_GBPS, 6000}, {IBV_RATE_800_GBPS, 8000}, {IBV_RATE_1200_GBPS, 12000},
};

#define SHIM_NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ibv_rate_to_mult(3): the rate as a multiple of 2.5 Gb/s, or -1 for
 * IBV_RATE_MAX or a rate that is not such a multiple. */
int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < SHIM_NELEM(shim_nominal); i++)
		if (shim_nominal[i].rate == rate)
			return shim_nominal[i].dgbps / 25;
	return -1;
}

/* ibv_rate_to_mult(3): the inverse; IBV_RATE_MAX if mult matches none. */
enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < SHIM_NELEM(shim_nominal); i++)
		if (shim_nominal[i].dgbps == mult * 25)
			return shim_nominal[i].rate;
	return IBV_RATE_MAX;
}

/* ibv_rate_to_mbps(3): the rate in Mb/s, or -1 for IBV_RATE_MAX/unknown. */
int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < SHIM_NELEM(shim_rates); i++)
		if (shim_rates[i].rate == rate)
			return shim_rates[i].mbps;
	return -1;
}

/* ibv_rate_to_mbps(3): the inverse; IBV_RATE_MAX if mbps matches none. */
enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < SHIM_NELEM(shim_rates); i++)
		if (shim_rates[i].mbps == mbps)
			return shim_rates[i].rate;
	return IBV_RATE_MAX;
}
