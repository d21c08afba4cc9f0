/*
 * An MPI program whose calls go to MPI for known reasons, for
 * tests/mpi-coll/test_why.sh (libsharp_mpi's "why a call went to MPI"):
 * on the world (8 ranks) one MPI_INT allreduce and one MPI_Iallreduce
 * (offloaded when sharp is up, the latter with one rank a host), 3
 * MPI_LONG_DOUBLE allreduces (a type sharp has not), one
 * MPI_C_DOUBLE_COMPLEX MPI_PROD (an op sharp does not compute on it), 2
 * bcasts of 8192 bytes (above the script's SHARP_MPI_MAX_BYTES); on each
 * of 4 communicators of 2 ranks 5 MPI_INT allreduces (below the script's
 * SHARP_MPI_MIN_RANKS).  Every result is checked here; no other
 * collective is called, so the library's counts are exactly these.
 */
#include <complex.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int bad;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "mpi_why: wrong result: %s\n", what);
        bad = 1;
    }
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int v[4] = {rank, 1, 2, 3}, s[4];
    MPI_Allreduce(v, s, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(s[0] == size * (size - 1) / 2 && s[1] == size, "MPI_INT");

    MPI_Request req;
    MPI_Iallreduce(v, s, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    check(s[0] == size * (size - 1) / 2 && s[1] == size, "MPI_Iallreduce");

    for (int i = 0; i < 3; i++) {
        long double x[2] = {rank, 0.5L}, y[2];
        MPI_Allreduce(x, y, 2, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        check(y[0] == size * (size - 1) / 2 && y[1] == size * 0.5L,
              "MPI_LONG_DOUBLE");
    }

    double complex c = rank == 0 ? 2.0 : 1.0, p;
    MPI_Allreduce(&c, &p, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    check(creal(p) == 2.0 && cimag(p) == 0.0, "complex MPI_PROD");

    for (int i = 0; i < 2; i++) {
        char b[8192];
        memset(b, rank == 1 ? 'a' + i : 0, sizeof(b));
        MPI_Bcast(b, (int)sizeof(b), MPI_BYTE, 1, MPI_COMM_WORLD);
        check(b[0] == 'a' + i && b[8191] == 'a' + i, "MPI_Bcast");
    }

    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pair);
    for (int i = 0; i < 5; i++) {
        int t[4];
        MPI_Allreduce(v, t, 4, MPI_INT, MPI_SUM, pair);
        check(t[0] == (rank / 2) * 4 + 1 && t[1] == 2, "pair MPI_INT");
    }
    MPI_Comm_free(&pair);

    if (rank == 0 && !bad) {
        printf("mpi_why: every result right\n");
    }
    MPI_Finalize();
    return bad;
}
