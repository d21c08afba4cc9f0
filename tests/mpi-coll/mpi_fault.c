/*
 * mpi_fault: a stream of mixed collectives on several communicators, every
 * result checked against a reference computed here, for the fault tests
 * of libsharp_mpi (tests/mpi-coll/test_fault.sh): a daemon of the fabric is
 * killed while it runs, and the job must finish with every result right.
 * It knows nothing of sharp.
 *
 *   mpi_fault [--calls N] [--signal-at K FILE] [--pause-at K FILE]
 *             [--finalize FILE] [--bcasts]
 *
 *   --signal-at K FILE   rank 0 creates FILE after call K (the test kills
 *                        then), and the stream goes on
 *   --pause-at K FILE    after call K every rank waits (outside MPI) until
 *                        FILE exists (rank 0 creates FILE.paused first): a
 *                        fault between collectives
 *   --finalize FILE      rank 0 creates FILE just before MPI_Finalize
 *   --bcasts             every call a bcast of 1 to 64 bytes on the world
 *                        from a rotating root, rank 1 slower than the
 *                        others (200 us before each call, and a second
 *                        after call K of --signal-at)
 *
 * Calls rotate over MPI_COMM_WORLD, a duplicate, halves from a split and a
 * communicator of every other rank; each is an allreduce (int64 sum, in
 * place or not, double sum of exact values, int max; 1 to 9000 elements,
 * so some span several fragments), a reduce to a rotating root, a bcast
 * from a rotating root (up to 40000 bytes) or a barrier.  Values depend
 * only on (call, rank, element), so every rank knows every result.
 *
 * Prints "mpi_fault: N calls, every result right" and exits 0, or the
 * number of wrong results.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int wrank, wsize, errors;

#define FAIL(...)                                                              \
    do {                                                                       \
        if (errors++ < 20) {                                                   \
            fprintf(stderr, "rank %d: ", wrank);                               \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

static int64_t val(long call, int r, long i)
{
    return (int64_t)((call * 131 + r * 17 + i * 7) % 1001) - 500;
}

static void touch(const char *f)
{
    FILE *fp = fopen(f, "w");
    if (fp != NULL) {
        fclose(fp);
    }
}

static int exists(const char *f)
{
    struct stat st;
    return stat(f, &st) == 0;
}

typedef struct {
    MPI_Comm comm;
    int rank, size;
    int *world_of; /* [size] world rank of each rank */
} comm_t;

static void comm_init(comm_t *c, MPI_Comm comm)
{
    MPI_Group g, wg;
    c->comm = comm;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    c->world_of = malloc(sizeof(int) * (size_t)c->size);
    int *in = malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++) {
        in[i] = i;
    }
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, c->size, in, wg, c->world_of);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(in);
}

/* a bcast of len bytes from rank call % size, checked */
static void one_bcast(comm_t *c, long call, long len)
{
    int root = (int)(call % c->size), rme = c->world_of[root];
    unsigned char *p = malloc((size_t)len);
    for (long i = 0; i < len; i++) {
        p[i] =
            c->rank == root ? (unsigned char)(val(call, rme, i) & 0xff) : 0xee;
    }
    MPI_Bcast(p, (int)len, MPI_BYTE, root, c->comm);
    for (long i = 0; i < len; i++) {
        if (p[i] != (unsigned char)(val(call, rme, i) & 0xff)) {
            FAIL("call %ld: bcast of %ld from %d: byte %ld wrong", call, len,
                 root, i);
            break;
        }
    }
    free(p);
}

static void one_call(comm_t *c, long call)
{
    int kind = (int)(call % 7);
    long n = 1 + (call * 37) % 9000;
    if (call % 5 != 0) {
        n = 1 + n % 16; /* mostly small */
    }
    int64_t *a = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *b = malloc(sizeof(int64_t) * (size_t)n);
    double *d = malloc(sizeof(double) * (size_t)n);
    double *e = malloc(sizeof(double) * (size_t)n);
    int root = (int)(call % c->size);
    int me = c->world_of[c->rank];

    for (long i = 0; i < n; i++) {
        a[i] = val(call, me, i);
        d[i] = (double)val(call, me, i) * 0.25; /* exact sums */
    }
    switch (kind) {
    case 0: /* allreduce int64 sum */
    case 1: /* in place */
        if (kind == 0) {
            MPI_Allreduce(a, b, (int)n, MPI_INT64_T, MPI_SUM, c->comm);
        } else {
            memcpy(b, a, sizeof(int64_t) * (size_t)n);
            MPI_Allreduce(MPI_IN_PLACE, b, (int)n, MPI_INT64_T, MPI_SUM,
                          c->comm);
        }
        for (long i = 0; i < n; i++) {
            int64_t want = 0;
            for (int r = 0; r < c->size; r++) {
                want += val(call, c->world_of[r], i);
            }
            if (b[i] != want) {
                FAIL("call %ld: allreduce%s [%ld] = %lld, want %lld", call,
                     kind ? " in place" : "", i, (long long)b[i],
                     (long long)want);
                break;
            }
        }
        break;
    case 2: /* allreduce double sum */
        MPI_Allreduce(d, e, (int)n, MPI_DOUBLE, MPI_SUM, c->comm);
        for (long i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < c->size; r++) {
                want += (double)val(call, c->world_of[r], i) * 0.25;
            }
            if (e[i] != want) {
                FAIL("call %ld: double allreduce [%ld] = %g, want %g", call, i,
                     e[i], want);
                break;
            }
        }
        break;
    case 3: { /* reduce int max to a root */
        int x = (int)val(call, me, 0), y = -1, want = -1000;
        MPI_Reduce(&x, &y, 1, MPI_INT, MPI_MAX, root, c->comm);
        for (int r = 0; r < c->size; r++) {
            int v = (int)val(call, c->world_of[r], 0);
            want = v > want ? v : want;
        }
        if (c->rank == root && y != want) {
            FAIL("call %ld: reduce max = %d, want %d", call, y, want);
        }
        break;
    }
    case 4: /* bcast from a root, 1 to 40000 bytes */
    case 5:
        one_bcast(c, call,
                  kind == 4 ? 1 + (call * 53) % 64 : 1 + (call * 997) % 40000);
        break;
    default: MPI_Barrier(c->comm); break;
    }
    free(a);
    free(b);
    free(d);
    free(e);
}

int main(int argc, char **argv)
{
    long calls = 10000, signal_at = -1, pause_at = -1;
    int bcasts = 0;
    const char *signal_file = NULL, *pause_file = NULL, *fin_file = NULL;
    char paused[4096];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) {
            calls = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--signal-at") && i + 2 < argc) {
            signal_at = atol(argv[++i]);
            signal_file = argv[++i];
        } else if (!strcmp(argv[i], "--pause-at") && i + 2 < argc) {
            pause_at = atol(argv[++i]);
            pause_file = argv[++i];
        } else if (!strcmp(argv[i], "--finalize") && i + 1 < argc) {
            fin_file = argv[++i];
        } else if (!strcmp(argv[i], "--bcasts")) {
            bcasts = 1;
        } else {
            if (wrank == 0) {
                fprintf(stderr, "mpi_fault: bad argument %s\n", argv[i]);
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }

    /* the communicators: the world, a duplicate, halves, every other */
    comm_t cs[4];
    MPI_Comm dup, half, odd;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, wrank < wsize / 2, wrank, &half);
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wsize - wrank, &odd);
    comm_init(&cs[0], MPI_COMM_WORLD);
    comm_init(&cs[1], dup);
    comm_init(&cs[2], half);
    comm_init(&cs[3], odd);

    for (long call = 0; call < calls; call++) {
        if (bcasts) {
            /* small bcasts on the world, rank 1 behind the others: the
             * roots run ahead of it (free bcasts) */
            if (wrank == 1) {
                usleep(200);
            }
            one_bcast(&cs[0], call, 1 + (call * 53) % 64);
        } else {
            one_call(&cs[(call / 3) % 4], call);
        }
        if (call == signal_at && wrank == 0) {
            touch(signal_file);
        }
        if (bcasts && call == signal_at && wrank == 1) {
            /* out of MPI while the fault comes and the others decide:
             * the results it missed are fetched when it goes on */
            usleep(1000000);
        }
        if (call == pause_at) {
            /* every rank out of MPI, then the fault, then on */
            snprintf(paused, sizeof(paused), "%s.paused", pause_file);
            if (wrank == 0) {
                touch(paused);
            }
            for (int t = 0; t < 600 && !exists(pause_file); t++) {
                usleep(100000);
            }
        }
    }

    int all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0) {
        if (all == 0) {
            printf("mpi_fault: %ld calls, every result right\n", calls);
        } else {
            printf("mpi_fault: %d results WRONG\n", all);
        }
        fflush(stdout);
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    MPI_Comm_free(&odd);
    for (int i = 0; i < 4; i++) {
        free(cs[i].world_of);
    }
    if (fin_file != NULL && wrank == 0) {
        touch(fin_file);
    }
    MPI_Finalize();
    return all > 255 ? 255 : all;
}
