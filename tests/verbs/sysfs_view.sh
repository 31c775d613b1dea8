#!/bin/bash
# sysfs_view.sh UIWARP_RUN: `uiwarp-run --sysfs` in a namespace of our own
# (a veth pair, 198.51.100.1/24 on one end, 198.51.100.2/24 on the other):
# the program sees /sys/class/infiniband/<dev> with the kernel's file
# formats and the values ibv_devinfo reports (node type, GUID, port state),
# device/net/ naming the GID's interface (GID 0 = its MAC; its address is
# what `ip -j addr show` gives, as rdma-core's tests/base.py looks it up),
# the real /sys/class/net still readable, and nothing left behind: no
# /sys/class/infiniband outside, no staging directory in /tmp. Not root:
# --sysfs refuses (exit 1 with a message), the test then skips (77).
set -u
run=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cleanup.sh
. "$here/../cleanup.sh"
fail() {
	echo "FAIL: $*"
	exit 1
}
if [ "$(id -u)" != 0 ]; then
	out=$("$run" --sysfs true 2>&1) && fail "--sysfs ran without root"
	echo "$out" | grep -q 'needs root' || fail "no reason given: $out"
	echo "SKIP: needs root (private mount and network namespaces)"
	exit 77
fi
command -v ip >/dev/null || {
	echo "SKIP: iproute2 is not installed"
	exit 77
}
ns="uiwv-sysfs-$$"
trap 'uiw_del_netns "$ns"' EXIT
ip netns add "$ns" || fail "ip netns add"
ip -n "$ns" link set lo up
ip -n "$ns" link add sv0 type veth peer name sv1 || fail veth
ip -n "$ns" addr add 198.51.100.1/24 dev sv0
ip -n "$ns" addr add 198.51.100.2/24 dev sv1
ip -n "$ns" link set sv0 up
ip -n "$ns" link set sv1 up
before=$(ls -d /tmp/uiwarp-sysfs.* 2>/dev/null | wc -l)

# what the verbs say (ibv_devinfo -v on our library), to compare with
info=$(ip netns exec "$ns" timeout 20 "$run" ibv_devinfo -v 2>&1) || fail "ibv_devinfo: $info"
dev=$(echo "$info" | sed -n 's/^hca_id:[[:space:]]*//p')
guid=$(echo "$info" | sed -n 's/^[[:space:]]*node_guid:[[:space:]]*//p')
[ -n "$dev" ] && [ -n "$guid" ] || fail "ibv_devinfo output: $info"

view=$(ip netns exec "$ns" timeout 20 "$run" --sysfs sh -c '
	d=/sys/class/infiniband/'"$dev"'
	for f in node_type node_guid sys_image_guid fw_ver ports/1/state ports/1/phys_state \
		ports/1/link_layer ports/1/gids/0 ports/1/pkeys/0; do
		printf "%s=%s\n" "$f" "$(cat "$d/$f")"
	done
	printf "net=%s\n" "$(ls "$d/device/net/")"
	printf "ibdev=%s\n" "$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)"
	printf "lo_mtu=%s\n" "$(cat /sys/class/net/lo/mtu)"
	printf "if_link=%s\n" "$(readlink -f "$d/device/net/$(ls "$d/device/net/")")"
' 2>&1) || fail "uiwarp-run --sysfs: $view"
echo "$view"
val() { echo "$view" | sed -n "s|^$1=||p"; }
[ "$(val node_type)" = "4: RNIC" ] || fail "node_type"
[ "$(val node_guid)" = "$guid" ] || fail "node_guid $(val node_guid) != ibv_devinfo's $guid"
[ "$(val ports/1/state)" = "4: ACTIVE" ] || fail "port state"
[ "$(val ports/1/phys_state)" = "5: LinkUp" ] || fail "phys_state"
[ "$(val ports/1/link_layer)" = "Ethernet" ] || fail "link_layer"
[ "$(val ibdev)" = "$dev" ] || fail "infiniband_verbs/uverbs0/ibdev"
[ "$(val lo_mtu)" = 65536 ] || fail "/sys/class/net/lo/mtu unreadable in the view"
netif=$(val net)
case "$netif" in
sv0 | sv1) ;;
*) fail "device/net/ names '$netif', not one of the veths" ;;
esac
[ "$(val if_link)" = "/sys/devices/virtual/net/$netif" ] || fail "device/net/$netif -> $(val if_link)"
# the GID is that interface's MAC (bytes 0..5, the rest zero), as
# ibv_query_gid says (docs/verbs.md) and siw and iw_cxgb4 make it
mac=$(ip -n "$ns" -o link show "$netif" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
m=$(echo "$mac" | tr -d :)
[ "$(val ports/1/gids/0)" = "${m:0:4}:${m:4:4}:${m:8:4}:0000:0000:0000:0000:0000" ] ||
	fail "GID $(val ports/1/gids/0) is not the MAC $mac of $netif"
# rdma-core's tests/base.py: `ip -j addr show <if>` gives the address
ip -n "$ns" -j addr show "$netif" | grep -q '"local":"198.51.100.[12]"' || fail "no address on $netif"
# nothing outside
[ ! -e /sys/class/infiniband/"$dev" ] || ! grep -q uiwarp /sys/class/infiniband/"$dev"/fw_ver 2>/dev/null ||
	fail "the view leaked out of its mount namespace"
after=$(ls -d /tmp/uiwarp-sysfs.* 2>/dev/null | wc -l)
[ "$after" = "$before" ] || fail "staging directory left in /tmp"
echo PASS
