/*
 * mpi_progress: a collective waited for while the program's own message
 * still needs this rank.  For each collective libsharp_mpi offloads
 * (MPI_Allreduce, MPI_Reduce, MPI_Bcast, MPI_Barrier, MPI_Iallreduce +
 * MPI_Wait) and for several pairs of ranks: the sender MPI_Isend's a large
 * message (rendezvous: over TCP it moves only while the sender is in MPI)
 * and calls the collective; the receiver MPI_Recv's it first, then calls
 * the collective; the sender then waits for its send.  Valid MPI, and MPI's
 * own collectives complete it (they progress everything); a collective
 * waited for in sharp or in a node step without giving MPI a turn never
 * would (the sender waits for the receiver, which waits for the send).
 *
 * Checks every collective's result and every message's bytes; prints
 * "mpi_progress: every call completed, N rounds" on rank 0 and exits 0, or
 * names what was wrong and exits 1.  A hang is the caller's timeout.
 *
 *   mpi_progress [BYTES]   (default 4 MiB)
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_BARRIER, C_IALLREDUCE, C_N };
static const char *names[C_N] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Bcast",
                                 "MPI_Barrier", "MPI_Iallreduce"};

/* the collective c; 0 if its result is right */
static int collective(int c, int rank, int size, int round)
{
    long x = rank + 1 + round, y = -1, want = 0;
    for (int r = 0; r < size; r++) {
        want += r + 1 + round;
    }
    MPI_Request q;
    switch (c) {
    case C_ALLREDUCE:
        MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        return y != want;
    case C_REDUCE:
        MPI_Reduce(&x, &y, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        return rank == 0 && y != want;
    case C_BCAST:
        y = rank == size - 1 ? 1000 + round : -1;
        MPI_Bcast(&y, 1, MPI_LONG, size - 1, MPI_COMM_WORLD);
        return y != 1000 + round;
    case C_BARRIER: MPI_Barrier(MPI_COMM_WORLD); return 0;
    default:
        MPI_Iallreduce(&x, &y, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        return y != want;
    }
}

int main(int argc, char **argv)
{
    int rank, size, bad = 0, rounds = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : 4u << 20;
    if (size < 2 || bytes == 0 || bytes > (1u << 30)) {
        if (rank == 0) {
            fprintf(stderr, "mpi_progress: 2 ranks or more, 1 B to 1 GiB\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *buf = malloc(bytes);
    if (buf == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* the pairs: neighbours (on one host with two ranks a host), the
     * second to the third (a node's second rank sending to another node),
     * the last to the first */
    const int pairs[][2] = {{0, 1}, {1, 2 % size}, {size - 1, 0}};
    for (int c = 0; c < C_N; c++) {
        for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
            int src = pairs[p][0], dst = pairs[p][1];
            if (src == dst) {
                continue;
            }
            unsigned char v = (unsigned char)(rounds * 7 + 1);
            MPI_Request rq = MPI_REQUEST_NULL;
            if (rank == src) {
                memset(buf, v, bytes);
                MPI_Isend(buf, (int)bytes, MPI_BYTE, dst, 7, MPI_COMM_WORLD,
                          &rq);
            } else if (rank == dst) {
                memset(buf, 0, bytes);
                MPI_Recv(buf, (int)bytes, MPI_BYTE, src, 7, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                for (size_t i = 0; i < bytes; i++) {
                    if (buf[i] != v) {
                        fprintf(stderr,
                                "mpi_progress: rank %d: byte %zu of the "
                                "message from %d is %u, not %u\n",
                                rank, i, src, buf[i], v);
                        bad = 1;
                        break;
                    }
                }
            }
            if (collective(c, rank, size, rounds)) {
                fprintf(stderr,
                        "mpi_progress: rank %d: %s after %d's send to %d: "
                        "wrong result\n",
                        rank, names[c], src, dst);
                bad = 1;
            }
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            rounds++;
        }
    }
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !anybad) {
        printf("mpi_progress: every call completed, %d rounds\n", rounds);
    }
    free(buf);
    MPI_Finalize();
    return anybad;
}
