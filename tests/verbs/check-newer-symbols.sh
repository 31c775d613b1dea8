#!/bin/sh
# The version nodes of rdma-core newer than the 44 we are built against must
# be exported, each symbol as name@@NODE with NODE chained to its
# predecessor, so binaries linked against a newer libibverbs load. The list
# is rdma-core's libibverbs/libibverbs.map.in at v59.0 (IBVERBS_1.15), v62.0
# (IBVERBS_1.16) and v64.0 (IBVERBS_1.17).
# usage: check-newer-symbols.sh OUR_LIB
set -eu
lib=$1
want="ibv_alloc_dmah@@IBVERBS_1.15
ibv_dealloc_dmah@@IBVERBS_1.15
ibv_reg_mr_ex@@IBVERBS_1.15
ibv_dm_export_dmabuf_fd@@IBVERBS_1.16
ibv_query_port_speed@@IBVERBS_1.16
ibv_alloc_buf@@IBVERBS_1.17
ibv_free_buf@@IBVERBS_1.17
ibv_reg_buf_mr@@IBVERBS_1.17"
have=$(readelf --dyn-syms -W "$lib" | awk '$7 != "UND" && $5 != "LOCAL" {print $8}')
status=0
for s in $want; do
	if ! printf '%s\n' "$have" | grep -qx "$s"; then
		echo "missing: $s"
		status=1
	fi
done
# the node chain: 1.15 <- 1.14, 1.16 <- 1.15, 1.17 <- 1.16
vdef=$(readelf -V -W "$lib" | awk '/Version definition/,/Version needs/')
for pair in "IBVERBS_1.15 IBVERBS_1.14" "IBVERBS_1.16 IBVERBS_1.15" "IBVERBS_1.17 IBVERBS_1.16"; do
	set -- $pair
	if ! printf '%s\n' "$vdef" | grep -A1 "Name: $1\$" | grep -q "Parent 1: $2\$"; then
		echo "node $1 is not chained to $2"
		status=1
	fi
done
[ $status = 0 ] && echo "IBVERBS_1.15 .. IBVERBS_1.17: $(printf '%s\n' "$want" | wc -l) symbols present"
exit $status
