#!/bin/bash
# Two network namespaces joined by a veth pair, for running uiwarp between
# "hosts" on one machine. Used by scripts/quickstart.sh; reusable for tests.
#
# usage: netns-pair.sh up   NS_A NS_B ADDR_A/PREFIX ADDR_B/PREFIX
#        netns-pair.sh down NS_A NS_B
# up: creates NS_A and NS_B (removing leftovers of the same names first), a
# veth pair NS_A0 (in NS_A) <-> NS_B0 (in NS_B), the addresses, and brings
# lo and the veths up; waits (at most 5 s) until both ends are UP.
# down: deletes both namespaces (their veth ends go with them); no error if
# they do not exist. Needs root. Exit status 0 on success.
set -u

die() { echo "netns-pair: $*" >&2; exit 1; }

cmd=${1:-}
case "$cmd" in
up) [ $# = 5 ] || die "usage: $0 up NS_A NS_B ADDR_A/PREFIX ADDR_B/PREFIX" ;;
down) [ $# = 3 ] || die "usage: $0 down NS_A NS_B" ;;
*) die "usage: $0 up|down ..." ;;
esac
a=$2 b=$3

ip netns del "$a" 2>/dev/null
ip netns del "$b" 2>/dev/null
[ "$cmd" = down ] && exit 0

addr_a=$4 addr_b=$5
ip netns add "$a" || die "cannot create namespace $a"
ip netns add "$b" || die "cannot create namespace $b"
ip link add "${a}0" netns "$a" type veth peer name "${b}0" netns "$b" ||
	die "cannot create the veth pair ${a}0 <-> ${b}0"
ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
	ip -n "$a" addr add "$addr_a" dev "${a}0" && ip -n "$b" addr add "$addr_b" dev "${b}0" &&
	ip -n "$a" link set "${a}0" up && ip -n "$b" link set "${b}0" up ||
	die "cannot configure the veth pair"
for _ in $(seq 50); do
	if ip -n "$a" link show "${a}0" | grep -q "state UP" &&
		ip -n "$b" link show "${b}0" | grep -q "state UP"; then
		exit 0
	fi
	sleep 0.1
done
die "the veth pair did not come up"
