/*
 * mpi_nb: MPI_Iallreduce, MPI_Ireduce, MPI_Ibcast, MPI_Ibarrier and their
 * persistent forms (MPI 4's MPI_*_init, Open MPI 4.1's MPIX_*_init), each
 * result compared byte for byte with the same blocking call made through
 * PMPI (which libsharp_mpi does not wrap) on the same inputs.  An ordinary
 * MPI program; it knows nothing of sharp.
 *
 *   - several operations outstanding at once on three communicators (the
 *     world, a duplicate, the even and odd halves), completed in an order
 *     of each rank's own with, in turn, MPI_Wait one by one, MPI_Waitall,
 *     MPI_Waitany, MPI_Waitsome, MPI_Test, MPI_Testall, MPI_Testany,
 *     MPI_Testsome loops, and with point-to-point requests in the array
 *   - types sharp carries (with holes: MPI_DOUBLE_INT, MPI_SHORT_INT), a
 *     user op and count 0 (PMPI's), in place and not, every root
 *   - persistent operations started three times with new data, through
 *     MPI_Start and MPI_Startall, then freed; MPI_Request_free of an
 *     operation in flight
 *   - overlap: an 8-byte MPI_Iallreduce, 2 ms of computing without MPI
 *     calls, then MPI_Wait, against the MPI library's own MPI_Iallreduce
 *     (PMPI): the time left to wait is printed
 *
 * Buffers carry a byte pattern around the data, so a write into a hole,
 * past the data or into a non-root's receive buffer shows.  Rank 0
 * prints "mpi_nb: expect offloaded MPI_Iallreduce A MPI_Ireduce R
 * MPI_Ibcast B MPI_Ibarrier C" (summed over ranks, persistent starts
 * included: what libsharp_mpi's report counts; with several ranks a host
 * every one of them is offloaded, the node step on shared memory up to a
 * slot and on PMPI above) and
 * "every result matches PMPI" or "FAILURES".
 */
#include <mpi.h>
#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define PCOLL(name) MPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define PCOLL(name) MPIX_##name##_init
#endif

#define GUARD 32
#define PAT 0xA5

static int rank, size, errors;
/* real statuses (MPICH's MPI_STATUSES_IGNORE trips gcc's bounds checks) */
static MPI_Status sts[64];
static long checks;
static unsigned long long expect[4]; /* iallreduce ireduce ibcast ibarrier */
static unsigned rng_state;

static unsigned rnd(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return rng_state >> 8;
}

typedef struct {
    const char *name;
    MPI_Datatype dt;
    MPI_Op op;
    int offload; /* sharp carries it (count > 0) */
} tcase_t;

static MPI_Op user_sum;
static void user_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++) { /* wraps, as MPI_SUM does: no UB */
        ((int *)inout)[i] =
            (int)((unsigned)((int *)inout)[i] + (unsigned)((int *)in)[i]);
    }
}

/* the data of element i of a rank's input, written into its place */
static void put(const tcase_t *t, char *p, int r, long i, unsigned salt)
{
    unsigned v = (unsigned)(r * 7919 + i * 31) ^ salt;
    if (t->dt == MPI_INT) {
        *(int *)p = (int)(v * 2654435761u);
    } else if (t->dt == MPI_UINT8_T) {
        *(uint8_t *)p = (uint8_t)(v * 13);
    } else if (t->dt == MPI_DOUBLE) {
        *(double *)p = (double)((int)(v % 201) - 100);
    } else if (t->dt == MPI_C_BOOL) {
        *(_Bool *)p = (v % 5) == 0;
    } else if (t->dt == MPI_DOUBLE_INT) {
        struct {
            double d;
            int i;
        } *e = (void *)p;
        e->d = (double)(v % 4); /* many ties */
        e->i = r;
    } else if (t->dt == MPI_SHORT_INT) {
        struct {
            short s;
            int i;
        } *e = (void *)p;
        e->s = (short)(v % 3);
        e->i = r;
    }
}

/* a buffer of count elements with GUARD pattern bytes around; data of
 * rank r (or only the pattern if r < 0) */
static char *mkbuf(const tcase_t *t, long count, int r, unsigned salt)
{
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t->dt, &lb, &ext);
    size_t len = (size_t)(count * ext) + 2 * GUARD;
    char *b = malloc(len);
    memset(b, PAT, len);
    if (r >= 0) {
        for (long i = 0; i < count; i++) {
            put(t, b + GUARD + i * ext, r, i, salt);
        }
    }
    return b;
}

static size_t buflen(const tcase_t *t, long count)
{
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t->dt, &lb, &ext);
    return (size_t)(count * ext) + 2 * GUARD;
}

static void check(const char *what, const char *got, const char *want,
                  size_t len)
{
    checks++;
    if (memcmp(got, want, len) != 0) {
        size_t k = 0;
        while (got[k] == want[k]) {
            k++;
        }
        if (errors++ < 20) {
            fprintf(stderr,
                    "mpi_nb[%d]: %s differs from PMPI at byte %zu (of %zu): "
                    "0x%02x, PMPI 0x%02x\n",
                    rank, what, k, len, (unsigned char)got[k],
                    (unsigned char)want[k]);
        }
    }
}

/* One operation: its buffers, what PMPI gives, a description */
enum { K_AR, K_AR_IN, K_RED, K_BC, K_BAR };
typedef struct {
    int kind, root;
    const tcase_t *t;
    long count;
    MPI_Comm comm;
    int csize, crank;
    char *s, *r, *s0; /* send (kept copy s0), receive */
    char desc[96];
} op_t;

static void op_init(op_t *o, int kind, const tcase_t *t, long count,
                    MPI_Comm comm, int root, unsigned salt)
{
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->t = t;
    o->count = count;
    o->comm = comm;
    o->root = root;
    PMPI_Comm_size(comm, &o->csize);
    PMPI_Comm_rank(comm, &o->crank);
    static const char *const kn[] = {"Iallreduce", "Iallreduce in place",
                                     "Ireduce", "Ibcast", "Ibarrier"};
    snprintf(o->desc, sizeof(o->desc), "%s %s x%ld root %d comm of %d",
             kn[kind], t ? t->name : "", count, root, o->csize);
    if (kind == K_BAR) {
        return;
    }
    size_t len = buflen(t, count);
    if (kind == K_BC) {
        o->r = mkbuf(t, count, o->crank == root ? o->crank : -1, salt);
        return;
    }
    o->s = mkbuf(t, count, o->crank, salt);
    o->s0 = malloc(len);
    memcpy(o->s0, o->s, len);
    o->r = kind == K_AR_IN ? mkbuf(t, count, o->crank, salt)
                           : mkbuf(t, count, -1, salt);
}

/* what libsharp_mpi offloads on a communicator with one member per
 * process: barriers; bcasts of any type; reductions sharp carries */
static int eligible(const op_t *o)
{
    return (o->kind == K_BAR || (o->kind == K_BC && o->count > 0) ||
            (o->t->offload && o->count > 0));
}

static void op_count(const op_t *o)
{
    static const int idx[] = {0, 0, 1, 2, 3};
    if (eligible(o)) {
        expect[idx[o->kind]]++;
    }
}

static void op_post(op_t *o, MPI_Request *req)
{
    char *sd = o->s ? o->s + GUARD : NULL, *rd = o->r ? o->r + GUARD : NULL;
    op_count(o);
    switch (o->kind) {
    case K_AR:
        MPI_Iallreduce(sd, rd, (int)o->count, o->t->dt, o->t->op, o->comm, req);
        break;
    case K_AR_IN:
        MPI_Iallreduce(MPI_IN_PLACE, rd, (int)o->count, o->t->dt, o->t->op,
                       o->comm, req);
        break;
    case K_RED:
        MPI_Ireduce(sd, rd, (int)o->count, o->t->dt, o->t->op, o->root, o->comm,
                    req);
        break;
    case K_BC:
        MPI_Ibcast(rd, (int)o->count, o->t->dt, o->root, o->comm, req);
        break;
    case K_BAR: MPI_Ibarrier(o->comm, req); break;
    }
}

/* the same call, blocking, through PMPI, on fresh buffers of the same
 * inputs; then compare */
static void op_verify(op_t *o, unsigned salt)
{
    if (o->kind == K_BAR) {
        return;
    }
    size_t len = buflen(o->t, o->count);
    op_t ref;
    op_init(&ref, o->kind, o->t, o->count, o->comm, o->root, salt);
    char *sd = ref.s + GUARD, *rd = ref.r + GUARD;
    switch (o->kind) {
    case K_AR:
        PMPI_Allreduce(sd, rd, (int)o->count, o->t->dt, o->t->op, o->comm);
        break;
    case K_AR_IN:
        PMPI_Allreduce(MPI_IN_PLACE, rd, (int)o->count, o->t->dt, o->t->op,
                       o->comm);
        break;
    case K_RED:
        PMPI_Reduce(sd, rd, (int)o->count, o->t->dt, o->t->op, o->root,
                    o->comm);
        break;
    case K_BC: PMPI_Bcast(rd, (int)o->count, o->t->dt, o->root, o->comm); break;
    }
    check(o->desc, o->r, ref.r, len);
    if (o->s0 != NULL) {
        char d[128];
        snprintf(d, sizeof(d), "%s: the send buffer", o->desc);
        check(d, o->s, o->s0, len);
    }
    free(ref.s);
    free(ref.s0);
    free(ref.r);
}

static void op_fini(op_t *o)
{
    free(o->s);
    free(o->s0);
    free(o->r);
}

/* between two tests of a loop: the machine is shared (the test's ranks
 * and a fabric's daemons on few cores) */
static void pause_a_bit(void)
{
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/* Completing n requests (some may be MPI_REQUEST_NULL) one of 8 ways, in
 * an order of this rank's own */
static const char *const how_names[] = {"Wait",     "Waitall", "Waitany",
                                        "Waitsome", "Test",    "Testall",
                                        "Testany",  "Testsome"};

static void complete(MPI_Request *reqs, int n, int how)
{
    int *perm = malloc(sizeof(int) * (size_t)n),
        *idx = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        perm[i] = i;
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (unsigned)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    int left = n, flag, k, out;
    switch (how) {
    case 0:
        for (int i = 0; i < n; i++) {
            MPI_Wait(&reqs[perm[i]], MPI_STATUS_IGNORE);
        }
        break;
    case 1: MPI_Waitall(n, reqs, sts); break;
    case 2:
        while (left-- > 0) {
            MPI_Waitany(n, reqs, &k, MPI_STATUS_IGNORE);
        }
        break;
    case 3:
        for (;;) {
            MPI_Waitsome(n, reqs, &out, idx, sts);
            if (out == MPI_UNDEFINED) {
                break;
            }
        }
        break;
    case 4:
        for (int i = 0; i < n; i++) {
            do {
                MPI_Test(&reqs[perm[i]], &flag, MPI_STATUS_IGNORE);
            } while (!flag && (pause_a_bit(), 1));
        }
        break;
    case 5: do { MPI_Testall(n, reqs, &flag, sts);
        } while (!flag && (pause_a_bit(), 1));
        break;
    case 6:
        for (;;) {
            MPI_Testany(n, reqs, &k, &flag, MPI_STATUS_IGNORE);
            if (flag && k == MPI_UNDEFINED) {
                break;
            }
            pause_a_bit();
        }
        break;
    case 7:
        for (;;) {
            MPI_Testsome(n, reqs, &out, idx, sts);
            if (out == MPI_UNDEFINED) {
                break;
            }
            pause_a_bit();
        }
        break;
    }
    for (int i = 0; i < n; i++) {
        if (reqs[i] != MPI_REQUEST_NULL) {
            errors++;
            fprintf(stderr, "mpi_nb[%d]: %s left request %d active\n", rank,
                    how_names[how], i);
        }
    }
    free(perm);
    free(idx);
}

static const tcase_t *types;
static int ntypes;

/* A round: on every communicator, every kind of operation on type t and
 * count, posted together (with a ring of point-to-point messages when
 * p2p), completed one way, then verified. */
static void round_of(const tcase_t *t, long count, MPI_Comm *comms, int nc,
                     int how, int p2p, unsigned salt)
{
    enum { PER = 5 };
    op_t ops[3 * PER];
    MPI_Request reqs[3 * PER + 2];
    int n = 0;
    for (int c = 0; c < nc; c++) {
        int cs;
        PMPI_Comm_size(comms[c], &cs);
        int root = (int)((salt + (unsigned)c) % (unsigned)cs);
        op_init(&ops[n++], K_AR, t, count, comms[c], -1, salt);
        op_init(&ops[n++], K_AR_IN, t, count, comms[c], -1, salt + 1);
        op_init(&ops[n++], K_RED, t, count, comms[c], root, salt + 2);
        op_init(&ops[n++], K_BC, t, count, comms[c], (root + 1) % cs, salt + 3);
        op_init(&ops[n++], K_BAR, NULL, 0, comms[c], -1, salt);
    }
    for (int i = 0; i < n; i++) {
        op_post(&ops[i], &reqs[i]);
    }
    int m = n, sv = rank * 100 + (int)salt, rv = -1;
    if (p2p) {
        MPI_Irecv(&rv, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD,
                  &reqs[m++]);
        MPI_Isend(&sv, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD,
                  &reqs[m++]);
    }
    complete(reqs, m, how);
    if (p2p && rv != ((rank + size - 1) % size) * 100 + (int)salt) {
        errors++;
        fprintf(stderr, "mpi_nb[%d]: the ring's message is wrong\n", rank);
    }
    for (int i = 0; i < n; i++) {
        op_verify(&ops[i], i % PER == 0   ? salt
                           : i % PER == 1 ? salt + 1
                           : i % PER == 2 ? salt + 2
                                          : salt + 3);
        op_fini(&ops[i]);
    }
}

#ifdef HAVE_PCOLL
/* persistent operations on two communicators, started three times with
 * new data */
static void persistent(const tcase_t *t, long count, MPI_Comm *comms, int nc)
{
    enum { PER = 4 };
    op_t ops[2 * PER];
    MPI_Request reqs[2 * PER];
    int n = 0;
    for (int c = 0; c < nc && c < 2; c++) {
        int cs;
        PMPI_Comm_size(comms[c], &cs);
        op_init(&ops[n], K_AR, t, count, comms[c], -1, 0);
        PCOLL(Allreduce)
        (ops[n].s + GUARD, ops[n].r + GUARD, (int)count, t->dt, t->op, comms[c],
         MPI_INFO_NULL, &reqs[n]);
        n++;
        op_init(&ops[n], K_RED, t, count, comms[c], cs - 1, 0);
        PCOLL(Reduce)
        (ops[n].s + GUARD, ops[n].r + GUARD, (int)count, t->dt, t->op, cs - 1,
         comms[c], MPI_INFO_NULL, &reqs[n]);
        n++;
        op_init(&ops[n], K_BC, t, count, comms[c], 0, 0);
        PCOLL(Bcast)
        (ops[n].r + GUARD, (int)count, t->dt, 0, comms[c], MPI_INFO_NULL,
         &reqs[n]);
        n++;
        op_init(&ops[n], K_BAR, NULL, 0, comms[c], -1, 0);
        PCOLL(Barrier)(comms[c], MPI_INFO_NULL, &reqs[n]);
        n++;
    }
    for (unsigned pass = 1; pass <= 3; pass++) {
        /* new data in the same buffers */
        for (int i = 0; i < n; i++) {
            op_t *o = &ops[i];
            op_count(o);
            if (o->kind == K_BAR) {
                continue;
            }
            size_t len = buflen(t, count);
            char *fresh_s = NULL, *fresh_r;
            if (o->kind == K_BC) {
                fresh_r = mkbuf(t, count, o->crank == o->root ? o->crank : -1,
                                pass * 11);
            } else {
                fresh_s = mkbuf(t, count, o->crank, pass * 11);
                fresh_r = mkbuf(t, count, -1, pass * 11);
                memcpy(o->s, fresh_s, len);
                memcpy(o->s0, fresh_s, len);
            }
            memcpy(o->r, fresh_r, len);
            free(fresh_s);
            free(fresh_r);
        }
        if (pass == 2) {
            MPI_Startall(n, reqs);
        } else {
            for (int i = 0; i < n; i++) {
                MPI_Start(&reqs[i]);
            }
        }
        /* completion: Waitall, Test loops, Wait one by one */
        int flag = 0;
        if (pass == 1) {
            MPI_Waitall(n, reqs, sts);
        } else if (pass == 2) {
            /* MPI_Test one by one (MPICH 4.0.2's MPI_Testall fails with
             * MPI_ERR_IN_STATUS, then hangs, while a persistent collective
             * of its own is pending: not used on them) */
            for (int i = 0; i < n; i++) {
                do {
                    MPI_Test(&reqs[i], &flag, &sts[0]);
                } while (!flag && (pause_a_bit(), 1));
            }
        } else {
            for (int i = n - 1; i >= 0; i--) {
                MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
            }
        }
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) {
                errors++;
                fprintf(stderr,
                        "mpi_nb[%d]: a persistent request was freed "
                        "by its completion\n",
                        rank);
            }
            op_verify(&ops[i], pass * 11);
        }
    }
    for (int i = 0; i < n; i++) {
        MPI_Request_free(&reqs[i]);
        if (reqs[i] != MPI_REQUEST_NULL) {
            errors++;
        }
        op_fini(&ops[i]);
    }
}
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile double sink;
static void compute(double secs)
{
    double t0 = now(), x = 1.0;
    while (now() - t0 < secs) {
        for (int i = 0; i < 1000; i++) {
            x = x * 1.0000001 + 1e-9;
        }
    }
    sink = x;
}

/* the time left to wait after computing, ours and the MPI library's */
static void overlap(void)
{
    enum { N = 20 };
    double w_ours = 0, w_mpi = 0, blk = 0, in = 1, out;
    MPI_Request r;
    for (int i = 0; i < N; i++) {
        double t0 = now();
        MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        blk += now() - t0;
        expect[0]++;
        MPI_Iallreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
        compute(0.002);
        t0 = now();
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        w_ours += now() - t0;
        if (out != size) {
            errors++;
        }
        PMPI_Iallreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
        compute(0.002);
        t0 = now();
        PMPI_Wait(&r, MPI_STATUS_IGNORE);
        w_mpi += now() - t0;
    }
    double v[3] = {w_ours / N, w_mpi / N, blk / N}, mx[3];
    PMPI_Reduce(v, mx, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_nb: overlap: 8-byte MPI_Iallreduce, 2 ms of computing, "
               "then MPI_Wait: %.0f us left to wait (the MPI library's own "
               "MPI_Iallreduce: %.0f us; a blocking MPI_Allreduce: %.0f us; "
               "max over ranks, mean of %d)\n",
               mx[0] * 1e6, mx[1] * 1e6, mx[2] * 1e6, N);
    }
}

/* --stuck R MS: one MPI_Iallreduce on the world (its group made), then
 * rank R stays away MS ms (outside MPI) before it posts the second, which
 * the others post and wait for at once.  With several ranks per node and
 * SHARP_MPI_NODE_SHM_TIMEOUT below MS the job must abort naming R's node
 * rank (the node step's timeout), not wait; "completed" if it does not. */
static int stuck(int who, int ms)
{
    int in = 1, out = 0;
    MPI_Request r;
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (rank == who) {
        printf("mpi_nb: rank %d away for %d ms\n", rank, ms);
        fflush(stdout);
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (rank == 0) {
        printf("mpi_nb: the operation with a rank away completed (%s)\n",
               out == size ? "right" : "WRONG");
    }
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv)
{
    long frag = 4096;
    int stuck_rank = -1, stuck_ms = 0;
    MPI_Init(&argc, &argv);
    for (int a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--frag")) {
            frag = atol(argv[a + 1]);
        } else if (!strcmp(argv[a], "--stuck") && a + 2 < argc) {
            stuck_rank = atoi(argv[a + 1]);
            stuck_ms = atoi(argv[a + 2]);
            a++;
        }
    }
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    rng_state = 77u + (unsigned)rank * 1000003u;
    if (stuck_rank >= 0) {
        return stuck(stuck_rank, stuck_ms);
    }
    MPI_Op_create(user_sum_fn, 1, &user_sum);
    const tcase_t tc[] = {
        {"MPI_INT SUM", MPI_INT, MPI_SUM, 1},
        {"MPI_UINT8_T BXOR", MPI_UINT8_T, MPI_BXOR, 1},
        {"MPI_DOUBLE SUM", MPI_DOUBLE, MPI_SUM, 1},
        {"MPI_C_BOOL LOR", MPI_C_BOOL, MPI_LOR, 1},
        {"MPI_DOUBLE_INT MAXLOC", MPI_DOUBLE_INT, MPI_MAXLOC, 1},
        {"MPI_SHORT_INT MINLOC", MPI_SHORT_INT, MPI_MINLOC, 1},
        {"MPI_INT user op", MPI_INT, user_sum, 0},
    };
    types = tc;
    ntypes = (int)(sizeof(tc) / sizeof(tc[0]));

    MPI_Comm comms[3];
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comms[2]);
    comms[0] = MPI_COMM_WORLD;
    int nc = size >= 4 ? 3 : 2;

    unsigned salt = 1;
    int how = 0;
    for (int t = 0; t < ntypes; t++) {
        int tsize;
        MPI_Type_size(tc[t].dt, &tsize);
        long counts[] = {0, 1, 7, 1000, frag / tsize + 1};
        for (int c = 0; c < 5; c++) {
            int h = how++ % 8;
            round_of(&tc[t], counts[c], comms, nc, h, c == 2, salt);
            salt += 5;
        }
    }
#ifdef HAVE_PCOLL
    for (int t = 0; t < ntypes; t++) {
        persistent(&tc[t], 7, comms, nc);
        persistent(&tc[t], 1000, comms, nc);
    }
#endif
    /* an operation freed in flight: the program may not look at its
     * buffers before some later synchronization; a barrier's wait then */
    {
        static int in, out; /* written when the operation completes */
        MPI_Request r, b;
        in = rank;
        MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_SUM, comms[1], &r);
        expect[0]++;
        /* Open MPI 4.1.4 and MPICH 4.0.2 refuse to free their own
         * non-blocking collectives in flight (MPI_ERR_REQUEST): where the
         * operation went to PMPI, it is waited for instead */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        if (MPI_Request_free(&r) != MPI_SUCCESS) {
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else if (r != MPI_REQUEST_NULL) {
            errors++;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
        MPI_Ibarrier(comms[1], &b);
        expect[3]++;
        MPI_Wait(&b, MPI_STATUS_IGNORE);
        MPI_Barrier(comms[1]);
    }
    overlap();

    unsigned long long ex[4];
    int errs = 0;
    long nchecks = 0;
    PMPI_Reduce(expect, ex, 4, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(&errors, &errs, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    PMPI_Reduce(&checks, &nchecks, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_nb: expect offloaded MPI_Iallreduce %llu MPI_Ireduce %llu "
               "MPI_Ibcast %llu MPI_Ibarrier %llu\n",
               ex[0], ex[1], ex[2], ex[3]);
#ifdef HAVE_PCOLL
        printf("mpi_nb: persistent collectives tested\n");
#endif
        printf("mpi_nb: %d ranks, %ld comparisons: %s\n", size, nchecks,
               errs ? "FAILURES" : "every result matches PMPI");
    }
    PMPI_Comm_free(&comms[1]);
    PMPI_Comm_free(&comms[2]);
    MPI_Op_free(&user_sum);
    MPI_Finalize();
    return errs != 0;
}
