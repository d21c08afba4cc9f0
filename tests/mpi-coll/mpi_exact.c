/*
 * An application allreducing random doubles and floats (MPI_SUM), run by
 * tests/mpi-coll/test_exact_mpi.sh under libsharp_mpi on different placements
 * (8 ranks on 8 hosts, 8 ranks on 4 hosts x 2).  It prints one line per
 * type with a hash of the result's bits, which the script compares between
 * placements; with --check, rank 0 also gathers every rank's data (plain
 * MPI_Gather, not offloaded) and checks every element against the
 * correctly rounded exact sum computed with MPFR.  Each sum is also
 * made with MPI_Iallreduce + MPI_Wait (the non-blocking path: with two
 * ranks a host, the node step's non-blocking form), and rank 0 prints how
 * many of those results differ from the blocking ones' bits ("mpi_exact:
 * non-blocking: K of M results differ from the blocking ones").
 */
#include <mpi.h>
#include <mpfr.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"

#define N 4096

/* values of many magnitudes and both signs: plain sums depend on order */
static double value(int rank, int i)
{
    uint64_t r = mix(((uint64_t)rank << 32) ^ (uint64_t)i ^ 0x5eed);
    double m = (double)(r >> 11) / 9007199254740992.0; /* [0, 1) */
    int e = (int)((r >> 3) % 61) - 30;
    return ldexp(r & 1 ? -m : m, e);
}

/* the correctly rounded sum of v[0..n) (doubles, or floats if prec 24) */
static double ref(const double *v, int n, int prec)
{
    mpfr_t acc, x;
    mpfr_inits2(4400, acc, x, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    for (int k = 0; k < n; k++) {
        mpfr_set_d(x, v[k], MPFR_RNDN);
        mpfr_add(acc, acc, x, MPFR_RNDN); /* exact at 4400 bits */
    }
    /* no subnormal or overflow with these values: one rounding */
    double d = prec == 24 ? (double)mpfr_get_flt(acc, MPFR_RNDN)
                          : mpfr_get_d(acc, MPFR_RNDN);
    mpfr_clears(acc, x, (mpfr_ptr)0);
    return d;
}

int main(int argc, char **argv)
{
    int rank, size, check = argc > 1 && !strcmp(argv[1], "--check");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    static double d[N], dr[N];
    static float f[N], fr[N];
    for (int i = 0; i < N; i++) {
        d[i] = value(rank, i);
        f[i] = (float)value(rank, i + N);
    }
    int bad = 0;
    /* a few sizes: 8 B to 32 KiB */
    static const int counts[] = {1, 7, 64, 512, N};
    uint64_t hd = 0, hf = 0;
    int nbdiff = 0, nbn = 0;
    for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        int n = counts[c];
        static double dn[N];
        static float fn[N];
        MPI_Request rq[2];
        MPI_Allreduce(d, dr, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(f, fr, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Iallreduce(d, dn, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq[0]);
        MPI_Iallreduce(f, fn, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        nbdiff += memcmp(dn, dr, sizeof(double) * (size_t)n) != 0;
        nbdiff += memcmp(fn, fr, sizeof(float) * (size_t)n) != 0;
        nbn += 2;
        hd = hd * 31 + fnv(dr, sizeof(double) * (size_t)n);
        hf = hf * 31 + fnv(fr, sizeof(float) * (size_t)n);
    }
    /* every rank has the same bits */
    uint64_t mine[2] = {hd, hf}, lo[2], hi[2];
    PMPI_Allreduce(mine, lo, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(mine, hi, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (memcmp(lo, hi, sizeof(lo)) != 0) {
        if (rank == 0) {
            printf("mpi_exact: ranks got different bits\n");
        }
        bad = 1;
    }
    if (check) {
        double *all =
            rank == 0 ? malloc(sizeof(double) * N * (size_t)size) : NULL;
        double *allf =
            rank == 0 ? malloc(sizeof(double) * N * (size_t)size) : NULL;
        static double fd[N];
        for (int i = 0; i < N; i++) {
            fd[i] = f[i];
        }
        MPI_Gather(d, N, MPI_DOUBLE, all, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        MPI_Gather(fd, N, MPI_DOUBLE, allf, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double *v = malloc(sizeof(double) * (size_t)size);
            int wrong = 0;
            for (int i = 0; i < N; i++) {
                for (int k = 0; k < size; k++) {
                    v[k] = all[(size_t)k * N + i];
                }
                double want = ref(v, size, 53);
                wrong += memcmp(&want, &dr[i], 8) != 0;
                for (int k = 0; k < size; k++) {
                    v[k] = allf[(size_t)k * N + i];
                }
                float wf = (float)ref(v, size, 24);
                wrong += memcmp(&wf, &fr[i], 4) != 0;
            }
            printf("mpi_exact: %d of %d elements differ from the correctly "
                   "rounded sum\n",
                   wrong, 2 * N);
            bad |= wrong != 0;
            free(v);
        }
        free(all);
        free(allf);
    }
    int nbd = 0;
    PMPI_Reduce(&nbdiff, &nbd, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_exact: non-blocking: %d of %d results differ from the "
               "blocking ones\n",
               nbd, nbn * size);
    }
    if (rank == 0) {
        printf("mpi_exact: %d ranks double %016llx float %016llx\n", size,
               (unsigned long long)hd, (unsigned long long)hf);
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return bad;
}
