/* uiwarp-sysfs DIR: writes the sysfs view of uiwarp's verbs device into DIR,
 * for `uiwarp-run --sysfs` to mount over /sys/class/infiniband and
 * /sys/class/infiniband_verbs in a private mount namespace:
 *
 *   DIR/infiniband/<dev>/{node_type,node_guid,sys_image_guid,fw_ver,node_desc}
 *   DIR/infiniband/<dev>/ports/1/{state,phys_state,link_layer,lid,sm_lid,
 *       lid_mask_count,sm_sl,cap_mask,rate,gids/0,pkeys/0}
 *   DIR/infiniband/<dev>/device/net/<ifname> -> /sys/class/net/<ifname>
 *   DIR/infiniband_verbs/abi_version, DIR/infiniband_verbs/uverbs0/{ibdev,abi_version}
 *
 * Every value comes from our libibverbs (ibv_query_device, ibv_query_port,
 * ibv_query_gid_ex): the view says what the verbs say, no more. <ifname> is
 * the GID's interface (ndev_ifindex), the one whose addresses programs such
 * as rdma-core's tests take as the device's (tests/base.py lists
 * device/net/). File formats are the kernel's (drivers/infiniband/core/
 * sysfs.c: "4: RNIC", GUIDs as four %04x groups, "4: ACTIVE", "5: LinkUp",
 * GIDs as eight %04x groups). A snapshot: taken once, when the program
 * starts.
 *
 * Exit status 0, or 1 with a message on stderr (no device, a query or a
 * file that failed): uiwarp-run then does not start the program, so a
 * broken view never passes for a working one.
 */
#include <errno.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <endian.h>
#include <infiniband/verbs.h>

static const char *root;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "uiwarp-sysfs: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* mkdir -p of root/rel. */
static void mkdirs(const char *rel)
{
	char p[4096];

	if ((size_t)snprintf(p, sizeof(p), "%s/%s", root, rel) >= sizeof(p))
		die("path too long: %s", rel);
	for (char *s = p + strlen(root) + 1;; s++) {
		if (*s == '/' || !*s) {
			char c = *s;

			*s = 0;
			if (mkdir(p, 0755) && errno != EEXIST)
				die("mkdir %s: %s", p, strerror(errno));
			*s = c;
			if (!c)
				break;
		}
	}
}

/* Writes printf(fmt, ...) and a newline into root/rel (its directory made
 * first). */
static void put(const char *rel, const char *fmt, ...)
{
	char p[4096], dir[4096];
	va_list ap;
	FILE *f;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", rel);
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		mkdirs(dir);
	}
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", root, rel) >= sizeof(p))
		die("path too long: %s", rel);
	f = fopen(p, "w");
	if (!f)
		die("%s: %s", p, strerror(errno));
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	if (fclose(f))
		die("%s: %s", p, strerror(errno));
}

/* A GUID (network order) as the kernel prints it: four %04x groups. */
static void guid_str(char *out, size_t n, __be64 g)
{
	uint64_t v = be64toh(g);

	snprintf(out, n, "%04x:%04x:%04x:%04x", (unsigned)(v >> 48) & 0xffff,
		 (unsigned)(v >> 32) & 0xffff, (unsigned)(v >> 16) & 0xffff, (unsigned)v & 0xffff);
}

static const char *port_state_name(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_DOWN:
		return "DOWN";
	case IBV_PORT_INIT:
		return "INIT";
	case IBV_PORT_ARMED:
		return "ARMED";
	case IBV_PORT_ACTIVE:
		return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER:
		return "ACTIVE_DEFER";
	default:
		return "NOP";
	}
}

static const char *phys_state_name(uint8_t s)
{
	static const char *const n[] = {"<unknown>",
					"Sleep",
					"Polling",
					"Disabled",
					"PortConfigurationTraining",
					"LinkUp",
					"LinkErrorRecovery",
					"Phy Test"};

	return s < sizeof(n) / sizeof(n[0]) ? n[s] : "<unknown>";
}

/* The rate line of the kernel ("%d%s Gb/sec (%dX%s)"), from the port's
 * width and speed codes (ibv_query_port(3)). */
static void rate_str(char *out, size_t n, uint8_t width, uint8_t speed)
{
	int lanes = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : 1;
	const char *name = "SDR";
	int tenths = 25; /* Gb/s per lane, times 10 */

	switch (speed) {
	case 2:
		name = "DDR", tenths = 50;
		break;
	case 4:
	case 8:
		name = "QDR", tenths = 100;
		break;
	case 16:
		name = "FDR", tenths = 140;
		break;
	case 32:
		name = "EDR", tenths = 250;
		break;
	case 64:
		name = "HDR", tenths = 500;
		break;
	case 128:
		name = "NDR", tenths = 1000;
		break;
	}
	tenths *= lanes;
	if (tenths % 10)
		snprintf(out, n, "%d.%d Gb/sec (%dX %s)", tenths / 10, tenths % 10, lanes, name);
	else
		snprintf(out, n, "%d Gb/sec (%dX %s)", tenths / 10, lanes, name);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_gid_entry ge;
	char dev[IBV_SYSFS_NAME_MAX], s[128], ifname[IF_NAMESIZE] = "";
	char base[256], link[4096];
	const uint8_t *g;
	int n = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: uiwarp-sysfs DIR\n");
		return 2;
	}
	root = argv[1];
	if (mkdir(root, 0755) && errno != EEXIST)
		die("mkdir %s: %s", root, strerror(errno));
	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no verbs device");
	snprintf(dev, sizeof(dev), "%s", ibv_get_device_name(list[0]));
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device(%s): %s", dev, strerror(errno));
	if (ibv_query_device(ctx, &da))
		die("ibv_query_device: failed");
	if (ibv_query_port(ctx, 1, &pa))
		die("ibv_query_port: failed");
	if (ibv_query_gid_ex(ctx, 1, 0, &ge, 0))
		die("ibv_query_gid_ex: %s", strerror(errno));
	if (ge.ndev_ifindex && !if_indextoname(ge.ndev_ifindex, ifname))
		die("interface %u: %s", ge.ndev_ifindex, strerror(errno));

	snprintf(base, sizeof(base), "infiniband/%s", dev);
#define P(rel, ...)                                                                                \
	do {                                                                                       \
		char r_[512];                                                                      \
		snprintf(r_, sizeof(r_), "%s/%s", base, rel);                                      \
		put(r_, __VA_ARGS__);                                                              \
	} while (0)
	P("node_type", "%d: %s", (int)list[0]->node_type,
	  list[0]->node_type == IBV_NODE_RNIC ? "RNIC" : "CA");
	guid_str(s, sizeof(s), da.node_guid);
	P("node_guid", "%s", s);
	guid_str(s, sizeof(s), da.sys_image_guid);
	P("sys_image_guid", "%s", s);
	P("fw_ver", "%s", da.fw_ver);
	P("node_desc", "%s", dev);
	P("ports/1/state", "%d: %s", (int)pa.state, port_state_name(pa.state));
	P("ports/1/phys_state", "%d: %s", (int)pa.phys_state, phys_state_name(pa.phys_state));
	P("ports/1/link_layer", "%s",
	  pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
	P("ports/1/lid", "0x%x", (unsigned)pa.lid);
	P("ports/1/sm_lid", "0x%x", (unsigned)pa.sm_lid);
	P("ports/1/lid_mask_count", "%d", (int)pa.lmc);
	P("ports/1/sm_sl", "%d", (int)pa.sm_sl);
	P("ports/1/cap_mask", "0x%08x", (unsigned)pa.port_cap_flags);
	rate_str(s, sizeof(s), pa.active_width, pa.active_speed);
	P("ports/1/rate", "%s", s);
	g = ge.gid.raw;
	P("ports/1/gids/0",
	  "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1],
	  g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
	P("ports/1/pkeys/0", "0x%04x", 0xffff);
	if (*ifname) {
		char rel[512], p[4096];

		snprintf(rel, sizeof(rel), "%s/device/net", base);
		mkdirs(rel);
		snprintf(p, sizeof(p), "%s/%s/%s", root, rel, ifname);
		snprintf(link, sizeof(link), "/sys/class/net/%s", ifname);
		if (symlink(link, p))
			die("symlink %s: %s", p, strerror(errno));
	}
#undef P
	put("infiniband_verbs/abi_version", "%d", 6);
	put("infiniband_verbs/uverbs0/ibdev", "%s", dev);
	put("infiniband_verbs/uverbs0/abi_version", "%d", 1);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%s %s\n", dev, *ifname ? ifname : "-");
	return 0;
}
