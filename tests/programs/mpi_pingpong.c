/* mpi_pingpong: a two-rank MPI ping-pong of our own, built with Debian's
 * Open MPI (libopenmpi-dev) and run by tests/programs/run.sh with the ofi
 * MTL over libfabric's "verbs;ofi_rxm", i.e. over uiwarp:
 *
 *   mpirun -np 2 --mca pml cm --mca mtl ofi \
 *          --mca mtl_ofi_provider_include "verbs;ofi_rxm" mpi_pingpong
 *
 *   mpi_pingpong [ROUNDS [MAX]]
 *
 * Rank 0 sends ROUNDS (default 50) messages of each size (1 B, 64 B,
 * 4 KiB, 64 KiB, 1 MiB, those up to MAX bytes; MPI_BYTE, a
 * pattern that depends on size and round), rank 1 checks every byte and
 * sends it back with each byte incremented, rank 0 checks the reply. A
 * barrier, then MPI_Allreduce of the bytes checked. Rank 0 prints
 * "mpi_pingpong: ok: 2 ranks, N bytes checked" and the job exits 0; a
 * mismatch prints what differed and calls MPI_Abort (exit 1). Sources: the
 * MPI 3.1 standard (MPI_Send / MPI_Recv, sections 3.2-3.4).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSG (1 << 20)

static const int sizes[] = {1, 64, 4096, 65536, MAX_MSG};

static uint8_t pattern(int i, int round, int size)
{
	return (uint8_t)(i * 11 + round * 5 + size);
}

static void check(const uint8_t *p, int len, int round, int add, int rank)
{
	for (int i = 0; i < len; i++)
		if (p[i] != (uint8_t)(pattern(i, round, len) + add)) {
			fprintf(stderr,
				"mpi_pingpong: rank %d: byte %d of %d (round %d) is 0x%02x, not "
				"0x%02x\n",
				rank, i, len, round, p[i], (uint8_t)(pattern(i, round, len) + add));
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
}

int main(int argc, char **argv)
{
	int rank, size;
	uint8_t *buf;
	long long checked = 0, total = 0;
	int rounds = 50, max = MAX_MSG;

	MPI_Init(&argc, &argv);
	if (argc > 1)
		rounds = atoi(argv[1]);
	if (argc > 2)
		max = atoi(argv[2]);
	if (rounds < 1 || max < 1 || max > MAX_MSG) {
		fprintf(stderr, "usage: mpi_pingpong [ROUNDS [MAX (1..%d)]]\n", MAX_MSG);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (!rank)
			fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, not %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	buf = malloc(MAX_MSG);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		int len = sizes[s];

		if (len <= 0 || len > max) /* sizes[] holds no 0: says so to -O3 */
			break;
		for (int r = 0; r < rounds; r++) {
			if (rank == 0) {
				for (int i = 0; i < len; i++)
					buf[i] = pattern(i, r, len);
				MPI_Send(buf, len, MPI_BYTE, 1, r, MPI_COMM_WORLD);
				memset(buf, 0, (size_t)len);
				MPI_Recv(buf, len, MPI_BYTE, 1, r, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				check(buf, len, r, 1, rank);
			} else {
				memset(buf, 0, (size_t)len);
				MPI_Recv(buf, len, MPI_BYTE, 0, r, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				check(buf, len, r, 0, rank);
				for (int i = 0; i < len; i++)
					buf[i]++;
				MPI_Send(buf, len, MPI_BYTE, 0, r, MPI_COMM_WORLD);
			}
			checked += len;
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Allreduce(&checked, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_pingpong: ok: %d ranks, %lld bytes checked\n", size, total);
	free(buf);
	MPI_Finalize();
	return 0;
}
