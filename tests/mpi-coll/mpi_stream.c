/*
 * mpi_stream: a stream of 8-byte MPI_Allreduce calls on MPI_COMM_WORLD,
 * every result checked, each call timed; for what a failure in the network
 * costs a running job (bench/mpi_failover.sh: the AN carrying the group is
 * killed during the stream).  It knows nothing of sharp.
 *
 *   mpi_stream [--calls N] [--signal-at K FILE] [--hold FILE] [--nb]
 *              [--window W]
 *
 *   --signal-at K FILE   rank 0 creates FILE after call K (the bench kills
 *                        then), and the stream goes on
 *   --hold FILE          after the first call (the group is made), rank 0
 *                        creates FILE.ready and the stream waits (outside
 *                        the timed calls) until FILE exists: the bench finds
 *                        the group's AN meanwhile
 *   --nb                 MPI_Iallreduce + MPI_Wait instead of MPI_Allreduce
 *   --window W           calls whose medians are compared (1000)
 *
 * Each call's time is the longest any rank saw (MPI_MAX over the ranks,
 * after the stream).  The call across the failure is taken to be the
 * longest of the W calls after K (the bench kills within milliseconds of
 * K; a later long call, such as a new group made 1000 calls after a
 * fallback, is not the failure's).  Rank 0 prints, for the stream after
 * call K:
 *
 *   mpi_stream: N calls, every result right
 *   mpi_stream: longest X us at call F; median us before B (W calls up to
 *   K), after A (W calls after F); after/before R
 *
 * and exits 0, or the number of wrong results.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the median of t[from, to) (clipped to [0, n)); 0 if empty */
static double median(const double *t, long n, long from, long to)
{
    from = from < 0 ? 0 : from;
    to = to > n ? n : to;
    if (to <= from) {
        return 0;
    }
    long k = to - from;
    double *c = malloc((size_t)k * sizeof(*c));
    if (c == NULL) {
        return 0;
    }
    memcpy(c, t + from, (size_t)k * sizeof(*c));
    qsort(c, (size_t)k, sizeof(*c), cmp_double);
    double m = k % 2 ? c[k / 2] : (c[k / 2 - 1] + c[k / 2]) / 2;
    free(c);
    return m;
}

/* one checked call: every rank gives (call * size + rank), as a double
 * (exact: the sums stay far below 2^53) */
static int one_call(long call, int rank, int size, int nb, double *us)
{
    double in = (double)(call * size + rank), out = -1;
    double want = (double)call * size * size + (double)size * (size - 1) / 2;
    double t0 = MPI_Wtime();
    if (nb) {
        MPI_Request r;
        MPI_Iallreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    *us = (MPI_Wtime() - t0) * 1e6;
    if (out != want) {
        fprintf(stderr, "mpi_stream: rank %d call %ld: %.17g, not %.17g\n",
                rank, call, out, want);
        return 1;
    }
    return 0;
}

/* creates the file path + suffix (empty) */
static void touch(const char *path, const char *suffix)
{
    char name[4096];
    snprintf(name, sizeof(name), "%s%s", path, suffix);
    FILE *fp = fopen(name, "w");
    if (fp != NULL) {
        fclose(fp);
    }
}

static void report(const double *t, long calls, long signal_at, long window)
{
    long from = signal_at < 0 ? 0 : signal_at + 1, f = from;
    for (long c = from; c < calls && c < from + window; c++) {
        f = t[c] > t[f] ? c : f;
    }
    double before = median(t, calls, from - window, from);
    double after = median(t, calls, f + 1, f + 1 + window);
    printf("mpi_stream: longest %.0f us at call %ld of the %ld after the "
           "signal; median us before %.1f "
           "(%ld calls up to %ld), after %.1f (%ld calls after %ld); "
           "after/before %.2f\n",
           f < calls ? t[f] : 0.0, f, window, before, window, from, after,
           window, f, before > 0 ? after / before : 0.0);
}

int main(int argc, char **argv)
{
    long calls = 6000, signal_at = -1, window = 1000;
    const char *signal_file = NULL, *hold = NULL;
    int rank, size, nb = 0, errors = 0, all = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) {
            calls = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--signal-at") && i + 2 < argc) {
            signal_at = atol(argv[++i]);
            signal_file = argv[++i];
        } else if (!strcmp(argv[i], "--hold") && i + 1 < argc) {
            hold = argv[++i];
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc) {
            window = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--nb")) {
            nb = 1;
        } else {
            if (rank == 0) {
                fprintf(stderr, "mpi_stream: bad argument %s\n", argv[i]);
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    double *t = calloc((size_t)(calls > 0 ? calls : 1), sizeof(*t));
    double *tmax = calloc((size_t)(calls > 0 ? calls : 1), sizeof(*tmax));
    if (t == NULL || tmax == NULL || calls <= 0) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (long call = 0; call < calls; call++) {
        errors += one_call(call, rank, size, nb, &t[call]);
        if (call == signal_at && rank == 0) {
            touch(signal_file, "");
        }
        if (call == 0 && hold != NULL) {
            if (rank == 0) {
                touch(hold, ".ready");
                for (struct stat st; stat(hold, &st) != 0;) {
                    usleep(10000);
                }
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    MPI_Reduce(t, tmax, (int)calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0) {
            printf("mpi_stream: %ld calls, every result right\n", calls);
        } else {
            printf("mpi_stream: %d results WRONG\n", all);
        }
        report(tmax, calls, signal_at, window);
        fflush(stdout);
    }
    free(t);
    free(tmax);
    MPI_Finalize();
    return all > 255 ? 255 : all;
}
