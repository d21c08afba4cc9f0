/*
 * sharp_mpi_demo: an ordinary MPI program (it knows nothing of sharp) that
 * checks the collectives libsharp_mpi offloads and times a few of them.
 * Every result is compared with a reference computed here, never with
 * another MPI call (Open MPI 4.1.4's own 8-bit sums are wrong on overflow).
 * Exit 0 when every result is right.
 *
 *   mpirun -np 8 -x LD_PRELOAD=libsharp_mpi_ompi.so sharp_mpi_demo [--quiet]
 *          [--loop SECONDS]   (repeat the checks that long: fault tests)
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, errors, quiet;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            errors++;                                                          \
        }                                                                      \
    } while (0)

/* element i of rank r: small integers, exact in every type */
static long v(int r, long i)
{
    return (long)((r * 7 + i * 13) % 31) - 15;
}

#define SUM_CHECK(T, MT, n, inplace)                                           \
    do {                                                                       \
        T *s = malloc((n) * sizeof(T)), *d = malloc((n) * sizeof(T));          \
        for (long i = 0; i < (n); i++)                                         \
            s[i] = (T)v(rank, i);                                              \
        MPI_Allreduce((inplace) ? MPI_IN_PLACE : s, (inplace) ? s : d, (n),    \
                      MT, MPI_SUM, MPI_COMM_WORLD);                            \
        T *res = (inplace) ? s : d;                                            \
        for (long i = 0; i < (n); i++) {                                       \
            T want = 0;                                                        \
            for (int r = 0; r < size; r++)                                     \
                want = (T)(want + (T)v(r, i));                                 \
            if (res[i] != want) {                                              \
                CHECK(0, "allreduce " #MT " sum n=%ld [%ld] wrong", (long)(n), \
                      i);                                                      \
                break;                                                         \
            }                                                                  \
        }                                                                      \
        free(s);                                                               \
        free(d);                                                               \
    } while (0)

/* sums of every common type, small and pipelined (several fragments) */
static void check_sums(void)
{
    long ns[] = {1, 1000, 100000};
    for (int k = 0; k < 3; k++) {
        SUM_CHECK(int, MPI_INT, ns[k], 0);
        SUM_CHECK(double, MPI_DOUBLE, ns[k], k == 1);
        SUM_CHECK(float, MPI_FLOAT, ns[k], 0);
        SUM_CHECK(long, MPI_LONG, ns[k], 0);
        SUM_CHECK(unsigned, MPI_UNSIGNED, ns[k], 0);
        SUM_CHECK(short, MPI_SHORT, ns[k], 0);
        SUM_CHECK(int8_t, MPI_INT8_T, ns[k], 0);
        SUM_CHECK(uint64_t, MPI_UINT64_T, ns[k], 1);
    }
}

/* max / min / bitwise */
static void check_max_min_bor(void)
{
    int s[64], mx[64], mn[64], bo[64];
    for (int i = 0; i < 64; i++)
        s[i] = (int)v(rank, i) * 100 + rank;
    MPI_Allreduce(s, mx, 64, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(s, mn, 64, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    for (int i = 0; i < 64; i++)
        s[i] = 1 << (rank % 31);
    MPI_Allreduce(s, bo, 64, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    for (int i = 0; i < 64; i++) {
        int wmx = -(1 << 30), wmn = 1 << 30, wbo = 0;
        for (int r = 0; r < size; r++) {
            int x = (int)v(r, i) * 100 + r;
            wmx = x > wmx ? x : wmx;
            wmn = x < wmn ? x : wmn;
            wbo |= 1 << (r % 31);
        }
        CHECK(mx[i] == wmx && mn[i] == wmn && bo[i] == wbo, "max/min/bor [%d]",
              i);
    }
}

/* MINLOC / MAXLOC on MPI_DOUBLE_INT (a padded struct) */
static void check_loc(void)
{
    struct {
        double v;
        int i;
    } s[10], mn[10], mx[10];
    for (int k = 0; k < 10; k++) {
        s[k].v = (double)((rank * 3 + k) % 5);
        s[k].i = rank;
    }
    MPI_Allreduce(s, mn, 10, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    MPI_Allreduce(s, mx, 10, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    for (int k = 0; k < 10; k++) {
        double bmn = 1e9, bmx = -1e9;
        int imn = 0, imx = 0;
        for (int r = 0; r < size; r++) {
            double x = (double)((r * 3 + k) % 5);
            if (x < bmn)
                bmn = x, imn = r;
            if (x > bmx)
                bmx = x, imx = r;
        }
        CHECK(mn[k].v == bmn && mn[k].i == imn, "minloc [%d]", k);
        CHECK(mx[k].v == bmx && mx[k].i == imx, "maxloc [%d]", k);
    }
}

/* reduce to the last rank, bcast from rank 1 */
static void check_reduce_bcast(void)
{
    long s = rank + 1, r = -1;
    MPI_Reduce(&s, &r, 1, MPI_LONG, MPI_SUM, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1)
        CHECK(r == (long)size * (size + 1) / 2, "reduce %ld", r);
    else
        CHECK(r == -1, "reduce touched a non-root");
    char b[5000];
    for (int i = 0; i < 5000; i++)
        b[i] = rank == 1 % size ? (char)(i * 3) : 0;
    MPI_Bcast(b, 5000, MPI_CHAR, 1 % size, MPI_COMM_WORLD);
    for (int i = 0; i < 5000; i++)
        if (b[i] != (char)(i * 3)) {
            CHECK(0, "bcast [%d]", i);
            break;
        }
}

/* communicators: split in halves, dup, free */
static void check_comms(void)
{
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int x = rank, sum = 0, all = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, half);
    MPI_Allreduce(&x, &all, 1, MPI_INT, MPI_SUM, dup);
    int want = 0;
    for (int r = rank % 2; r < size; r += 2)
        want += r;
    CHECK(sum == want, "split sum %d want %d", sum, want);
    CHECK(all == size * (size - 1) / 2, "dup sum");
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
}

#define ITERS 500
static const int sizes[] = {8, 64, 1024, 8192, 65536, 1 << 20};

/* latency: 8-byte allreduce and barrier (t[0], t[1]), and MPI_Allreduce
 * (double sum) by message size (lat) */
static void time_calls(double t[2], double lat[6])
{
    double x = 1.0, y, t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < ITERS; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[0] = (MPI_Wtime() - t0) / ITERS;
    CHECK(y == (double)size, "latency loop result");
    t0 = MPI_Wtime();
    for (int i = 0; i < ITERS; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    t[1] = (MPI_Wtime() - t0) / ITERS;
    for (int s = 0; s < 6; s++) {
        int n = sizes[s] / 8, it = sizes[s] >= 65536 ? 40 : 100;
        double *a = calloc((size_t)n, 8), *b = calloc((size_t)n, 8);
        /* warm: buffers touched, every layer's buffers grown to the size */
        for (int w = 0; w < 3; w++)
            MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int i = 0; i < it; i++)
            MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        lat[s] = (MPI_Wtime() - t0) / it;
        free(a);
        free(b);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double loop_s = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quiet"))
            quiet = 1;
        else if (!strcmp(argv[a], "--loop") && a + 1 < argc)
            loop_s = atof(argv[++a]);
    }
    double start = MPI_Wtime();
    int more;
    do {
        check_sums();
        check_max_min_bor();
        check_loc();
        check_reduce_bcast();
        check_comms();
        /* everyone decides alike whether to go round again */
        more = MPI_Wtime() - start < loop_s;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    } while (more && !errors);
    double t[2], lat[6];
    time_calls(t, lat);

    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && !quiet) {
        printf("sharp_mpi_demo: %d ranks: %s\n", size,
               total ? "WRONG RESULTS" : "every result right");
        printf("sharp_mpi_demo: 8-byte MPI_Allreduce %.1f us, MPI_Barrier "
               "%.1f us (mean of %d, this machine, oversubscribed)\n",
               t[0] * 1e6, t[1] * 1e6, ITERS);
        printf("sharp_mpi_demo: MPI_Allreduce latency, double sum, %d ranks\n"
               "    bytes      us\n",
               size);
        for (int s = 0; s < 6; s++)
            printf("  %7d %9.1f\n", sizes[s], lat[s] * 1e6);
    }
    MPI_Finalize();
    return total ? 1 : 0;
}
