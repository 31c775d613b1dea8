#!/bin/bash
# deb_test.sh DEBDIR: installs the Debian packages built by
# dpkg-buildpackage (uiwarp, libuiwarp0, libuiwarp-dev *.deb in DEBDIR) with
# dpkg -i, as a user would, and checks from the system paths only: the
# installed uiwarp-run runs rping (loopback, -v data check) on the packaged
# libraries, `man -w uiwarp-run` finds the page, `pkg-config --libs uiwarp`
# and find_package(uiwarp) build tiny.c, which runs. Purges the packages on
# exit (they were not installed before: a machine that has them is left
# alone, exit 77). Root only (else 77). Bounded (timeouts).
set -u
debdir=$1
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || {
	echo "SKIP: dpkg -i needs root"
	exit 77
}
if dpkg-query -W -f='${Status}' uiwarp 2>/dev/null | grep -q "ok installed"; then
	echo "SKIP: uiwarp is installed on this machine already: not touching it"
	exit 77
fi
debs=$(ls "$debdir"/uiwarp_*.deb "$debdir"/libuiwarp0_*.deb "$debdir"/libuiwarp-dev_*.deb 2>/dev/null)
[ "$(echo "$debs" | wc -w)" = 3 ] || {
	echo "FAIL: want the three .deb files in $debdir, have: $debs"
	exit 1
}
T=$(mktemp -d /tmp/uiwd.XXXXXX)
cleanup() {
	for p in $(jobs -p); do kill "$p" 2>/dev/null; done
	dpkg --purge uiwarp libuiwarp-dev libuiwarp0 >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT
rc=0
fail() {
	echo "FAIL: $*"
	rc=1
}
# shellcheck disable=SC2086
dpkg -i $debs || {
	echo "FAIL: dpkg -i"
	exit 1
}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH
[ "$(command -v uiwarp-run)" = /usr/bin/uiwarp-run ] || fail "uiwarp-run not in /usr/bin"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
uiwarp-run ldd "$(command -v rping || echo /usr/bin/rping)" | grep -E 'ibverbs|rdmacm|uiwarp'
uiwarp-run ldd "$(command -v rping || echo /usr/bin/rping)" |
	grep -q "libibverbs.so.1 => /usr/lib/$multi/uiwarp/libibverbs.so.1" ||
	fail "uiwarp-run's libibverbs is not the packaged one"
ldconfig -p | grep -q "/usr/lib/$multi/uiwarp/" && fail "the private directory is in ld.so.cache"
if command -v rping >/dev/null; then
	. "$here/../port.sh"
	port=$(uiw_free_port)
	timeout 20 uiwarp-run rping -s -a 127.0.0.1 -p $port -C 50 -v >"$T/rs" 2>&1 &
	s=$!
	sleep 0.3
	timeout 20 uiwarp-run rping -c -a 127.0.0.1 -p $port -C 50 -v >"$T/rc" 2>&1
	c=$?
	wait $s
	if [ $c = 0 ] && [ "$(grep -c 'ping data' "$T/rc")" = 50 ]; then
		echo "ok: packaged uiwarp-run rping: 50 pings verified"
	else
		tail -5 "$T/rc" "$T/rs"
		fail "packaged uiwarp-run rping"
	fi
else
	echo "rping (rdmacm-utils) not installed: that part is not run"
fi
if command -v man >/dev/null; then
	[ "$(man -w uiwarp-run 2>/dev/null)" = /usr/share/man/man1/uiwarp-run.1.gz ] ||
		fail "man -w uiwarp-run: $(man -w uiwarp-run 2>&1)"
	man -w 7 uiwarp >/dev/null 2>&1 || fail "man 7 uiwarp"
	echo "ok: man finds the pages"
else
	[ -f /usr/share/man/man1/uiwarp-run.1.gz ] || fail "no /usr/share/man/man1/uiwarp-run.1.gz"
fi
libs=$(pkg-config --libs uiwarp) || fail "pkg-config --libs uiwarp"
echo "pkg-config --libs uiwarp: $libs"
# shellcheck disable=SC2046
cc -std=c11 -D_GNU_SOURCE -Wall -Werror -o "$T/tiny" "$here/tiny.c" $(pkg-config --cflags uiwarp) \
	$libs -pthread && timeout 30 "$T/tiny" || fail "tiny with pkg-config"
mkdir -p "$T/cm" && cp "$here/tiny.c" "$T/cm/" && cp "$here/CMakeLists.tiny.txt" "$T/cm/CMakeLists.txt"
if cmake -S "$T/cm" -B "$T/cm/b" >"$T/cm.log" 2>&1 && cmake --build "$T/cm/b" >>"$T/cm.log" 2>&1 &&
	timeout 30 "$T/cm/b/tiny"; then
	grep "uiwarp 0" "$T/cm.log"
else
	cat "$T/cm.log"
	fail "tiny with find_package(uiwarp)"
fi
[ $rc = 0 ] && echo PASS
exit $rc
