/*
 * mpi_conform nbc_window: a window of non-blocking collectives in flight
 * over several communicators, as a program that overlaps many of them
 * does.  Kinds the layer offloads (allreduce, bcast, barrier and reduce
 * with MPI_SUM) are mixed with kinds that stay on MPI (a reduce with a
 * user-defined op freed right after the call, scan, allgather, alltoall),
 * and completed by each completion call in turn (MPI_Wait, _Waitall,
 * _Waitany, _Waitsome, and loops of the test forms).  Every rank posts the
 * same sequence (one seed), each operation into whichever slot is free,
 * so each communicator sees its calls in one order everywhere while the
 * slots complete in orders that differ between ranks; now and then a rank
 * naps 2 ms so that the ranks drift apart.  Every result is checked.
 *
 * A layer whose wait for one of its own operations stops MPI's progress
 * (while a rank's scan or alltoall needs this rank) makes this slow, not
 * wrong: MPI_CONFORM_WINDOW_OPS (default 3000) operations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conform.h"

enum { NCOMM = 4, W = 16, NEL = 6, NKIND = 8, NFORM = 8 };
enum {
    K_ALLRED,
    K_BCAST,
    K_BARRIER,
    K_REDUCE,
    K_UOP,
    K_SCAN,
    K_AGATHER,
    K_ALLTOALL
};

typedef struct {
    int kind, seq; /* -1: the slot is free */
    int *x, *y;    /* size * NEL ints each */
    MPI_Request q;
} slot_t;

static void uop_sum(void *in, void *io, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int j = 0; j < *len; j++) {
        ((int *)io)[j] += ((const int *)in)[j];
    }
}

/* the same numbers on every rank from the same state */
static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

static void post(slot_t *sl, int seq, MPI_Comm c, unsigned r)
{
    int n = size * NEL, root = seq % size;
    sl->seq = seq;
    sl->kind = (int)(r % NKIND);
    for (int j = 0; j < n; j++) {
        sl->x[j] = rank * 100 + j % NEL + seq % 50;
        sl->y[j] = -1;
    }
    if (sl->kind == K_BCAST && rank != root) {
        memset(sl->x, 0xff, sizeof(int) * NEL);
    }
    for (int d = 0; sl->kind == K_ALLTOALL && d < size; d++) {
        for (int j = 0; j < NEL; j++) {
            sl->x[d * NEL + j] = rank * 1000 + d * 10 + j;
        }
    }
    switch (sl->kind) {
    case K_ALLRED:
        CK(MPI_Iallreduce(sl->x, sl->y, NEL, MPI_INT, MPI_SUM, c, &sl->q));
        break;
    case K_BCAST: CK(MPI_Ibcast(sl->x, NEL, MPI_INT, root, c, &sl->q)); break;
    case K_BARRIER: CK(MPI_Ibarrier(c, &sl->q)); break;
    case K_REDUCE:
        CK(MPI_Ireduce(sl->x, sl->y, NEL, MPI_INT, MPI_SUM, root, c, &sl->q));
        break;
    case K_UOP: {
        MPI_Op op;
        CK(MPI_Op_create(uop_sum, 1, &op));
        CK(MPI_Ireduce(sl->x, sl->y, NEL, MPI_INT, op, root, c, &sl->q));
        CK(MPI_Op_free(&op)); /* MPI keeps it while the reduce needs it */
        break;
    }
    case K_SCAN:
        CK(MPI_Iscan(sl->x, sl->y, NEL, MPI_INT, MPI_SUM, c, &sl->q));
        break;
    case K_AGATHER:
        CK(MPI_Iallgather(sl->x, NEL, MPI_INT, sl->y, NEL, MPI_INT, c, &sl->q));
        break;
    default:
        CK(MPI_Ialltoall(sl->x, NEL, MPI_INT, sl->y, NEL, MPI_INT, c, &sl->q));
    }
}

/* the sum over ranks r < upto of (r * 100 + j + seq % 50) */
static long sum_upto(int upto, int j, int seq)
{
    return 100L * upto * (upto - 1) / 2 + (long)upto * (j + seq % 50);
}

static void check(slot_t *sl)
{
    int root = sl->seq % size;
    for (int j = 0; j < NEL; j++) {
        switch (sl->kind) {
        case K_ALLRED:
            expect(sl->y[j], sum_upto(size, j, sl->seq), "allreduce", j);
            break;
        case K_BCAST:
            expect(sl->x[j], root * 100 + j + sl->seq % 50, "bcast", j);
            break;
        case K_REDUCE:
        case K_UOP:
            if (rank == root) {
                expect(sl->y[j], sum_upto(size, j, sl->seq), "reduce", j);
            }
            break;
        case K_SCAN:
            expect(sl->y[j], sum_upto(rank + 1, j, sl->seq), "scan", j);
            break;
        default: break;
        }
        for (int r = 0; r < size; r++) {
            if (sl->kind == K_AGATHER) {
                expect(sl->y[r * NEL + j], r * 100 + j + sl->seq % 50,
                       "allgather", r * NEL + j);
            } else if (sl->kind == K_ALLTOALL) {
                expect(sl->y[r * NEL + j], r * 1000 + rank * 10 + j, "alltoall",
                       r * NEL + j);
            }
        }
    }
    sl->kind = -1;
}

/* complete some of the window's requests by completion form f; returns
 * the indices completed in idx */
static int complete(int f, MPI_Request q[], int first, int idx[])
{
    int n = 0, flag = 0, i = MPI_UNDEFINED;
    switch (f) {
    case 0:
        CK(MPI_Wait(&q[first], MPI_STATUS_IGNORE));
        idx[n++] = first;
        break;
    case 1:
        CK(MPI_Waitall(W, q, sts));
        for (i = 0; i < W; i++) {
            idx[n++] = i;
        }
        break;
    case 2:
        CK(MPI_Waitany(W, q, &i, MPI_STATUS_IGNORE));
        idx[n] = i;
        n += i != MPI_UNDEFINED;
        break;
    case 3: CK(MPI_Waitsome(W, q, &n, idx, sts)); break;
    case 4:
        while (!flag) {
            CK(MPI_Test(&q[first], &flag, MPI_STATUS_IGNORE));
        }
        idx[n++] = first;
        break;
    case 5:
        while (!flag) {
            CK(MPI_Testall(W, q, &flag, sts));
        }
        for (i = 0; i < W; i++) {
            idx[n++] = i;
        }
        break;
    case 6:
        while (!flag) {
            CK(MPI_Testany(W, q, &i, &flag, MPI_STATUS_IGNORE));
        }
        idx[n] = i;
        n += i != MPI_UNDEFINED;
        break;
    default:
        while (n == 0) {
            CK(MPI_Testsome(W, q, &n, idx, sts));
            n = n == MPI_UNDEFINED ? 0 : n;
        }
    }
    return n;
}

/* post into every free slot while operations remain */
static void fill(slot_t sl[], MPI_Request q[], MPI_Comm c[], int *posted,
                 int total, unsigned *seed)
{
    for (int i = 0; i < W && *posted < total; i++) {
        if (sl[i].kind < 0) {
            unsigned r = next_rand(seed);
            post(&sl[i], *posted, c[r % NCOMM], r / NCOMM);
            q[i] = sl[i].q;
            ++*posted;
        }
    }
}

void case_nbc_window(void)
{
    const char *e = getenv("MPI_CONFORM_WINDOW_OPS");
    int total = e != NULL ? atoi(e) : 3000, posted = 0, done = 0;
    unsigned seed = 0x5eed, cseed = 0xc0de, nap = 0x9a7u + (unsigned)rank;
    MPI_Comm c[NCOMM];
    slot_t sl[W];
    MPI_Request q[W];
    int idx[W];
    for (int k = 0; k < NCOMM; k++) {
        c[k] = dup_world();
    }
    for (int i = 0; i < W; i++) {
        sl[i].kind = -1;
        sl[i].x = malloc(sizeof(int) * (size_t)(size * NEL));
        sl[i].y = malloc(sizeof(int) * (size_t)(size * NEL));
        q[i] = MPI_REQUEST_NULL;
        if (sl[i].x == NULL || sl[i].y == NULL) {
            die("out of memory");
        }
    }
    fill(sl, q, c, &posted, total, &seed);
    while (done < total) {
        unsigned r = next_rand(&cseed);
        int first = (int)(r / NFORM % W);
        while (q[first] == MPI_REQUEST_NULL) { /* a slot in flight */
            first = (first + 1) % W;
        }
        int n = complete((int)(r % NFORM), q, first, idx);
        for (int i = 0; i < n; i++) {
            if (sl[idx[i]].kind >= 0) {
                check(&sl[idx[i]]);
                done++;
            }
        }
        fill(sl, q, c, &posted, total, &seed);
        if (next_rand(&nap) % 300 == 0) {
            usleep(2000);
        }
    }
    for (int i = 0; i < W; i++) {
        free(sl[i].x);
        free(sl[i].y);
    }
    for (int k = 0; k < NCOMM; k++) {
        CK(MPI_Comm_free(&c[k]));
    }
}
