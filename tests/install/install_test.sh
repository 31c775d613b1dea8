#!/bin/bash
# install_test.sh SRCDIR BUILDDIR: `cmake --install` into a temporary prefix,
# then from there only (nothing of BUILDDIR on any path):
#  - the layout: libuiwarp.so.0 (soname) and the -dev files in LIBDIR, the
#    shim libraries alone in LIBDIR/uiwarp, uiwarp-run / -replicate / -stat,
#    the man pages, the docs;
#  - the installed uiwarp-run resolves a program's libibverbs.so.1 /
#    librdmacm.so.1 to LIBDIR/uiwarp and libuiwarp.so.0 to LIBDIR (ldd), and
#    runs rping (loopback, -v data check);
#  - the installed uiwarp-replicate copies a file (recv + send on loopback)
#    over the installed libraries (its RUNPATH, no LD_LIBRARY_PATH);
#  - tiny.c builds against the installed package with pkg-config and with
#    CMake's find_package(uiwarp), and runs a Send between two QPs;
#  - the prefix moved elsewhere still works (relative RUNPATHs, uiwarp-run).
# Bounded: every run has a timeout.
set -u
src=$1
build=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../port.sh"
T=$(mktemp -d /tmp/uiwi.XXXXXX)
trap 'for p in $(jobs -p); do kill $p 2>/dev/null; done; rm -rf "$T"' EXIT
P=$T/prefix
rc=0
# a sanitized tree's libuiwarp needs the sanitizer runtimes first: build
# tiny.c the same way
san=""
grep -q '^UIWARP_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && san="-fsanitize=address,undefined"
fail() {
	echo "FAIL: $*"
	rc=1
}
ok() { echo "ok: $*"; }

cmake --install "$build" --prefix "$P" >"$T/install.log" || {
	cat "$T/install.log"
	echo "FAIL: cmake --install"
	exit 1
}
pcdir=$(dirname "$(find "$P" -name uiwarp.pc | head -1)")
libdir=$(readlink -f "$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir uiwarp)")
[ -d "$libdir" ] || fail "uiwarp.pc libdir $libdir"
for f in bin/uiwarp-run bin/uiwarp-replicate bin/uiwarp-stat include/uiwarp/rdmap.h \
	share/man/man1/uiwarp-run.1 share/man/man1/uiwarp-replicate.1 share/man/man1/uiwarp-stat.1 \
	share/man/man7/uiwarp.7 share/doc/uiwarp/README.md share/doc/uiwarp/configuration.md; do
	[ -e "$P/$f" ] || fail "$f not installed"
done
[ "$(readelf -d "$libdir/libuiwarp.so.0" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')" = libuiwarp.so.0 ] ||
	fail "libuiwarp.so.0's soname"
[ -L "$libdir/libuiwarp.so" ] || fail "libuiwarp.so (for -luiwarp)"
for l in libibverbs.so.1 librdmacm.so.1 libmlx5.so.1 libefa.so.1; do
	[ -e "$libdir/uiwarp/$l" ] || fail "$l not in LIBDIR/uiwarp"
	[ -e "$libdir/$l" ] && fail "$l in LIBDIR itself: it would shadow rdma-core"
done
ls "$libdir"/uiwarp/*.so 2>/dev/null && fail "link-time .so symlinks in LIBDIR/uiwarp"
[ $rc = 0 ] && ok "layout"

# nothing from the build tree may be used from here on
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset LD_LIBRARY_PATH
check_ldd() { # check_ldd PREFIX_LIBDIR CMD...: ldd output of CMD's libs
	local ld=$1
	shift
	local out where
	out=$("$@")
	where() { readlink -f "$(echo "$out" | sed -n "s/^[[:space:]]*$1 => \([^ ]*\) .*/\1/p")"; }
	echo "$out" | grep -E 'libibverbs|librdmacm|libuiwarp'
	[ "$(where libibverbs.so.1)" = "$ld/uiwarp/libibverbs.so.1" ] || return 1
	[ "$(where librdmacm.so.1)" = "$(readlink -f "$ld/uiwarp/librdmacm.so.1")" ] || return 1
	[ "$(where libuiwarp.so.0)" = "$(readlink -f "$ld/libuiwarp.so.0")" ] || return 1
}
if command -v rping >/dev/null; then
	check_ldd "$libdir" "$P/bin/uiwarp-run" ldd "$(command -v rping)" ||
		fail "uiwarp-run rping does not resolve to the installed libraries"
	port=$(uiw_free_port)
	timeout 20 "$P/bin/uiwarp-run" rping -s -a 127.0.0.1 -p $port -C 50 -v >"$T/rs" 2>&1 &
	s=$!
	sleep 0.3
	timeout 20 "$P/bin/uiwarp-run" rping -c -a 127.0.0.1 -p $port -C 50 -v >"$T/rc" 2>&1
	c=$?
	wait $s
	sv=$?
	if [ $c = 0 ] && [ $sv = 0 ] && [ "$(grep -c 'ping data' "$T/rc")" = 50 ]; then
		ok "installed uiwarp-run rping: 50 pings verified"
	else
		tail -5 "$T/rc" "$T/rs"
		fail "installed uiwarp-run rping (client $c server $sv)"
	fi
else
	echo "rping not installed: that part is not run"
fi

# uiwarp-replicate: RUNPATH to LIBDIR/uiwarp
check_ldd "$libdir" ldd "$P/bin/uiwarp-replicate" || fail "uiwarp-replicate's RUNPATH"
head -c 3000000 /dev/urandom >"$T/src.bin"
port=$(uiw_free_port 1)
timeout 30 "$P/bin/uiwarp-replicate" recv --bind 127.0.0.1 --port $port "$T/dst.bin" >"$T/rr" 2>&1 &
r=$!
sleep 0.3
timeout 30 "$P/bin/uiwarp-replicate" send --port $port "$T/src.bin" 127.0.0.1 >"$T/rsend" 2>&1
sc=$?
wait $r
rr=$?
if [ $sc = 0 ] && [ $rr = 0 ] && cmp -s "$T/src.bin" "$T/dst.bin"; then
	ok "installed uiwarp-replicate copied 3000000 bytes"
else
	cat "$T/rr" "$T/rsend"
	fail "installed uiwarp-replicate (send $sc recv $rr)"
fi

# a program built against the installed package: pkg-config
cflags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags uiwarp)
libs=$(PKG_CONFIG_PATH=$pcdir pkg-config --libs uiwarp)
echo "pkg-config: cflags '$cflags' libs '$libs'"
# shellcheck disable=SC2086
if cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $san -o "$T/tiny-pc" "$here/tiny.c" $cflags $libs \
	-pthread -Wl,-rpath,"$libdir" && timeout 30 "$T/tiny-pc"; then
	[ "$(readlink -f "$(ldd "$T/tiny-pc" | sed -n 's/.*libuiwarp.so.0 => \([^ ]*\) .*/\1/p')")" = \
		"$(readlink -f "$libdir/libuiwarp.so.0")" ] ||
		fail "tiny (pkg-config) did not load the installed libuiwarp.so.0"
	ok "tiny built with pkg-config ran"
else
	fail "tiny with pkg-config"
fi
# ... and CMake's find_package(uiwarp)
mkdir -p "$T/cm"
cp "$here/tiny.c" "$T/cm/" && cp "$here/CMakeLists.tiny.txt" "$T/cm/CMakeLists.txt"
if cmake -S "$T/cm" -B "$T/cm/build" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS="$san" \
	>"$T/cm.log" 2>&1 &&
	cmake --build "$T/cm/build" >>"$T/cm.log" 2>&1 && timeout 30 "$T/cm/build/tiny"; then
	grep 'uiwarp 0' "$T/cm.log"
	grep -q "shim libraries in $libdir/uiwarp" "$T/cm.log" || fail "uiwarp_SHIM_LIBRARY_DIR"
	ok "tiny built with find_package(uiwarp) ran"
else
	cat "$T/cm.log"
	fail "tiny with find_package(uiwarp)"
fi

# the prefix moved: relative RUNPATHs and uiwarp-run still find everything
mv "$P" "$T/moved"
mlib=$(readlink -f "${libdir/#$P/$T/moved}")
check_ldd "$mlib" "$T/moved/bin/uiwarp-run" ldd "$T/moved/bin/uiwarp-replicate" ||
	fail "moved prefix: uiwarp-run / RUNPATH"
check_ldd "$mlib" ldd "$T/moved/bin/uiwarp-replicate" || fail "moved prefix: RUNPATH"
"$T/moved/bin/uiwarp-stat" --help >/dev/null || fail "moved prefix: uiwarp-stat"
[ $rc = 0 ] && ok "moved prefix" && echo PASS
exit $rc
