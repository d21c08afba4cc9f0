/*
 * mpi_mixed: the shape of a non-blocking latency benchmark, for the fault
 * matrix (tests/mpi-coll/test_fault_matrix.sh).  An ordinary MPI program:
 * it knows nothing of sharp and passes on plain Open MPI and MPICH.
 *
 * Each phase of the stream:
 *   - posts WINDOW non-blocking float-sum allreduces (8 B to 4 KiB) on the
 *     world, and with them a ring exchange of MPI's own (Isend/Irecv);
 *   - "computes", calling the phase's completion form now and then:
 *     MPI_Test on each request, MPI_Testsome, MPI_Waitall, or MPI_Wait on
 *     each (the form is drawn from the seed, per phase, the same on every
 *     rank: --complete F fixes it);
 *   - checks every result (the values are small integers: float sums are
 *     exact whatever the order);
 *   - then the calls between phases: MPI_Barrier on the world, an
 *     MPI_Ibcast and an MPI_Ibarrier on it waited for together, an
 *     MPI_Allreduce and an MPI_Bcast on a duplicate, and a persistent
 *     allreduce (MPI_Allreduce_init, started and waited) where the MPI has
 *     it.
 * --mode blocking: every allreduce of the window blocking, no requests.
 * --mode persistent: the window's allreduces are persistent requests made
 * once, started every phase.
 *
 *   mpi_mixed [--phases N] [--seed S] [--mode nb|blocking|persistent]
 *             [--complete test|testsome|waitall|wait] [--window W]
 *             [--signal-at P FILE] [--stall-at P FILE] [--thread-multiple]
 *
 * --signal-at P FILE: rank 0 creates FILE after phase P (the test kills a
 * daemon then: every rank is posting, testing or waiting).
 * --stall-at P FILE: at phase P (nb), rank 1 tests its window until all
 * but the last allreduce completed (so the last one is in the network),
 * writes its pid to FILE and stops itself (SIGSTOP): the others complete
 * that one and go into the barrier, where the test kills the AN; when the
 * test continues rank 1, it learns of the failure late, inside a
 * non-blocking operation, while the others learnt it in a blocking one.  Prints
 * "mpi_mixed: N phases (seed S), every result right" and exits 0, or the
 * number of wrong results.
 */
#include <mpi.h>
#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define ALLREDUCE_INIT MPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define ALLREDUCE_INIT MPIX_Allreduce_init
#endif

#define WINDOW 4  /* the most: --window W posts W */
#define MAXN 1024 /* floats: 4 KiB */

enum { C_TEST, C_TESTSOME, C_WAITALL, C_WAIT, C_FORMS };
static const char *forms[] = {"test", "testsome", "waitall", "wait"};

static int rank, size, errors, nwin = WINDOW;
static long stall_at = -1;
static const char *stall_file;
static uint64_t rng;

#define FAIL(...)                                                              \
    do {                                                                       \
        if (errors++ < 20) {                                                   \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

static unsigned draw(unsigned n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rng >> 33) % n;
}

static float val(long phase, int slot, int r, int i)
{
    return (float)((phase * 7 + slot * 13 + r * 3 + i) % 97);
}

typedef struct {
    float in[WINDOW][MAXN], out[WINDOW][MAXN];
    int n[WINDOW];
    MPI_Request req[WINDOW + 2]; /* the window, then the ring's two */
    int sendv, recvv;
} phase_t;

static void fill(phase_t *p, long phase, int slot)
{
    for (int i = 0; i < p->n[slot]; i++) {
        p->in[slot][i] = val(phase, slot, rank, i);
        p->out[slot][i] = -1;
    }
}

static void check(phase_t *p, long phase, int slot, const char *what)
{
    for (int i = 0; i < p->n[slot]; i++) {
        float want = 0;
        for (int r = 0; r < size; r++) {
            want += val(phase, slot, r, i);
        }
        if (p->out[slot][i] != want) {
            FAIL("phase %ld: %s %d of %d floats: [%d] = %g, want %g", phase,
                 what, slot, p->n[slot], i, (double)p->out[slot][i],
                 (double)want);
            return;
        }
    }
}

/* a little work between tests, as a benchmark's compute phase */
static void compute(void)
{
    volatile double x = 0;
    for (int i = 0; i < 2000; i++) {
        x += i * 0.5;
    }
}

static void complete(MPI_Request *req, int n, int form)
{
    int done = 0, flag, out, idx[WINDOW + 2];
    MPI_Status st[WINDOW + 2];
    switch (form) {
    case C_WAITALL:
        compute();
        MPI_Waitall(n, req, st);
        return;
    case C_WAIT:
        for (int i = 0; i < n; i++) {
            compute();
            MPI_Wait(&req[i], MPI_STATUS_IGNORE);
        }
        return;
    case C_TESTSOME:
        while (done < n) {
            compute();
            MPI_Testsome(n, req, &out, idx, st);
            done += out == MPI_UNDEFINED ? n : out;
        }
        return;
    default:
        while (done < n) {
            compute();
            done = 0;
            for (int i = 0; i < n; i++) {
                MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
                done += req[i] == MPI_REQUEST_NULL || flag;
            }
        }
    }
}

/* --stall-at: rank 1's window until its last allreduce is in flight,
 * then stopped (the test continues it) */
static void stall(MPI_Request *req)
{
    int flag, done = 0;
    while (done < nwin - 1) {
        done = 0;
        for (int i = 0; i < nwin; i++) {
            if (req[i] != MPI_REQUEST_NULL) {
                MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
            }
            done += req[i] == MPI_REQUEST_NULL;
        }
    }
    FILE *fp = fopen(stall_file, "w");
    if (fp != NULL) {
        fprintf(fp, "%d\n", (int)getpid());
        fclose(fp);
    }
    raise(SIGSTOP);
}

static void ring_post(phase_t *p, long phase, MPI_Request *r)
{
    p->sendv = (int)phase * 1000 + rank;
    p->recvv = -1;
    MPI_Irecv(&p->recvv, 1, MPI_INT, (rank + size - 1) % size, 7,
              MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&p->sendv, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD,
              &r[1]);
}

static void ring_check(phase_t *p, long phase)
{
    int want = (int)phase * 1000 + (rank + size - 1) % size;
    if (p->recvv != want) {
        FAIL("phase %ld: ring received %d, want %d", phase, p->recvv, want);
    }
}

static const int pers_n[WINDOW] = {2, 16, 128, MAXN};

/* the window of one phase: posted, completed with MPI's own ring, checked */
static void window(phase_t *p, long phase, const char *mode, int form,
                   MPI_Request *pers)
{
    int nb = strcmp(mode, "blocking") != 0;
    int persist = !strcmp(mode, "persistent");
    for (int s = 0; s < nwin; s++) {
        p->n[s] = persist ? pers_n[s] : 2 + (int)draw(MAXN - 1);
        fill(p, phase, s);
        if (!nb) {
            MPI_Allreduce(p->in[s], p->out[s], p->n[s], MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
        } else if (persist) {
            p->req[s] = pers[s];
            MPI_Start(&p->req[s]);
        } else {
            MPI_Iallreduce(p->in[s], p->out[s], p->n[s], MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, &p->req[s]);
        }
    }
    ring_post(p, phase, &p->req[nwin]);
    if (nb && !persist && phase == stall_at && rank == 1) {
        stall(p->req);
    }
    if (nb) {
        complete(p->req, nwin + 2, form);
    } else {
        MPI_Status st[2];
        MPI_Waitall(2, &p->req[nwin], st);
    }
    if (persist) {
        for (int s = 0; s < nwin; s++) {
            if (p->req[s] != pers[s]) {
                FAIL("phase %ld: persistent request %d not given back", phase,
                     s);
            }
        }
    }
    for (int s = 0; s < nwin; s++) {
        check(p, phase, s, nb ? "iallreduce" : "allreduce");
    }
    ring_check(p, phase);
}

/* an MPI_Ibcast and an MPI_Ibarrier on the world, waited for together */
static void nb_bcast_barrier(long phase)
{
    MPI_Request r[2];
    MPI_Status st[2];
    int root = (int)((phase * 3) % size);
    char b[16];
    memset(b, rank == root ? (int)(phase & 0x3f) : 0x7f, sizeof(b));
    MPI_Ibcast(b, sizeof(b), MPI_CHAR, root, MPI_COMM_WORLD, &r[0]);
    MPI_Ibarrier(MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, st);
    for (size_t i = 0; i < sizeof(b); i++) {
        if (b[i] != (char)(phase & 0x3f)) {
            FAIL("phase %ld: ibcast from %d: byte %zu wrong", phase, root, i);
            break;
        }
    }
}

/* the blocking calls between phases (and an MPI_Ibcast, an MPI_Ibarrier) */
static void between(long phase, MPI_Comm dup, MPI_Request *pa, int64_t *pin,
                    int64_t *pout)
{
    int64_t x = phase + rank, sum = -1, want = 0;
    char b[64];

    MPI_Barrier(MPI_COMM_WORLD);
    nb_bcast_barrier(phase);
    MPI_Allreduce(&x, &sum, 1, MPI_INT64_T, MPI_SUM, dup);
    for (int r = 0; r < size; r++) {
        want += phase + r;
    }
    if (sum != want) {
        FAIL("phase %ld: allreduce on the duplicate = %lld, want %lld", phase,
             (long long)sum, (long long)want);
    }
    int root = (int)(phase % size);
    memset(b, rank == root ? (int)(phase & 0x7f) : 0xff, sizeof(b));
    MPI_Bcast(b, sizeof(b), MPI_CHAR, root, dup);
    for (size_t i = 0; i < sizeof(b); i++) {
        if (b[i] != (char)(phase & 0x7f)) {
            FAIL("phase %ld: bcast from %d: byte %zu wrong", phase, root, i);
            break;
        }
    }
    if (*pa != MPI_REQUEST_NULL) {
        *pin = phase * 3 + rank;
        *pout = -1;
        MPI_Start(pa);
        MPI_Wait(pa, MPI_STATUS_IGNORE);
        want = 0;
        for (int r = 0; r < size; r++) {
            want += phase * 3 + r;
        }
        if (*pout != want) {
            FAIL("phase %ld: persistent allreduce = %lld, want %lld", phase,
                 (long long)*pout, (long long)want);
        }
    }
}

static void touch(const char *f)
{
    FILE *fp = fopen(f, "w");
    if (fp != NULL) {
        fclose(fp);
    }
}

static void usage(const char *arg)
{
    if (rank == 0) {
        fprintf(stderr, "mpi_mixed: bad argument %s\n", arg);
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    long phases = 600, signal_at = -1;
    unsigned long seed = 1;
    const char *signal_file = NULL, *mode = "nb";
    int form = -1, provided, threads = 0;

    for (int i = 1; i < argc; i++) {
        threads |= !strcmp(argv[i], "--thread-multiple");
    }
    if (threads) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--phases") && i + 1 < argc) {
            phases = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--window") && i + 1 < argc) {
            nwin = atoi(argv[++i]);
            if (nwin < 1 || nwin > WINDOW) {
                usage(argv[i]);
            }
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            mode = argv[++i];
            if (strcmp(mode, "nb") && strcmp(mode, "blocking") &&
                strcmp(mode, "persistent")) {
                usage(mode);
            }
        } else if (!strcmp(argv[i], "--complete") && i + 1 < argc) {
            for (form = C_FORMS - 1; form >= 0; form--) {
                if (!strcmp(argv[i + 1], forms[form])) {
                    break;
                }
            }
            if (form < 0) {
                usage(argv[i + 1]);
            }
            i++;
        } else if (!strcmp(argv[i], "--stall-at") && i + 2 < argc) {
            stall_at = atol(argv[++i]);
            stall_file = argv[++i];
        } else if (!strcmp(argv[i], "--signal-at") && i + 2 < argc) {
            signal_at = atol(argv[++i]);
            signal_file = argv[++i];
        } else if (strcmp(argv[i], "--thread-multiple")) {
            usage(argv[i]);
        }
    }
    rng = seed * 2654435761ULL + 1;

    static phase_t ph;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Request pers[WINDOW], pa = MPI_REQUEST_NULL;
    int64_t pin = 0, pout = 0;
#ifdef HAVE_PCOLL
    ALLREDUCE_INIT(&pin, &pout, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD,
                   MPI_INFO_NULL, &pa);
    for (int s = 0; s < WINDOW; s++) {
        ALLREDUCE_INIT(ph.in[s], ph.out[s], pers_n[s], MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, MPI_INFO_NULL, &pers[s]);
    }
#else
    if (!strcmp(mode, "persistent")) {
        if (rank == 0) {
            printf("mpi_mixed: no persistent collectives in this MPI\n");
        }
        MPI_Finalize();
        return 77;
    }
#endif
    for (long p = 0; p < phases; p++) {
        int f = form >= 0 ? form : (int)draw(C_FORMS);
        window(&ph, p, mode, f, pers);
        between(p, dup, &pa, &pin, &pout);
        if (p == signal_at && rank == 0) {
            touch(signal_file);
        }
    }

    int all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0) {
            printf("mpi_mixed: %ld phases (seed %lu, mode %s), every result "
                   "right\n",
                   phases, seed, mode);
        } else {
            printf("mpi_mixed: %d results WRONG (seed %lu)\n", all, seed);
        }
        fflush(stdout);
    }
#ifdef HAVE_PCOLL
    MPI_Request_free(&pa);
    for (int s = 0; s < WINDOW; s++) {
        MPI_Request_free(&pers[s]);
    }
#endif
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return all > 255 ? 255 : all;
}
