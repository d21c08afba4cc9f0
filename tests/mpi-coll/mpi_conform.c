/*
 * mpi_conform CASE... ("all": every case): correct MPI programs whose
 * behaviour a PMPI layer such as libsharp_mpi must not change (run through
 * it by test_conform.sh; each passes under plain Open MPI 4.1 and MPICH
 * 4.0).  Rank 0 prints "mpi_conform CASE: ok in T s" once all passed CASE;
 * a wrong result prints "mpi_conform CASE: rank R: FAIL: ..." and aborts.
 * MPI_CONFORM_CASE_TIMEOUT=S: a rank still in a case after S s says
 * "FAIL: still running after S s (hung?)" and exits 3.
 */
#include <mpi.h>
#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conform.h"

/* persistent collectives: MPI 4.0 (MPICH 4), or Open MPI 4.1's MPIX_ */
#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define PCOLL(name) MPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define PCOLL(name) MPIX_##name##_init
#endif

#define HOLE 0x5a000000      /* the untouched ints of a receive buffer */
#define SEND_HOLE 0x3c000000 /* the ints a send buffer's type skips */
#define UNSET (-12345)       /* a status's MPI_ERROR before the call */

int rank, size;
long tri; /* 0 + 1 + ... + size-1 */
static const char *cur = "?";
static const char *note; /* said after a case's "ok" */
static int skip;         /* the case is not in this MPI */
static char alarm_msg[256];
MPI_Status sts[4000]; /* (MPICH's MPI_STATUSES_IGNORE: gcc warns) */

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpi_conform %s: rank %d: FAIL: ", cur, rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void expect(long got, long want, const char *what, int i)
{
    if (got != want) {
        die("%s [%d] = %ld, expected %ld", what, i, got, want);
    }
}

/* buf[j] == base + mul * j for j < n */
void expect_seq(const int *buf, int n, long base, long mul, const char *what)
{
    for (int j = 0; j < n; j++) {
        expect(buf[j], base + mul * j, what, j);
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t n = write(2, alarm_msg, strlen(alarm_msg));
    (void)n;
    _exit(3);
}

MPI_Comm dup_world(void)
{
    MPI_Comm c;
    CK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    return c;
}

/* Buffers of elements laid out as MPI_Type_vector(count, blen, stride,
 * MPI_INT): int p is data, of index d, or a hole (-1) */
typedef struct {
    int count, blen, stride;
} vec_t;

static int vec_ext(vec_t v)
{
    return (v.count - 1) * v.stride + v.blen;
}

static int vec_index(vec_t v, int p)
{
    int e = p / vec_ext(v), q = p % vec_ext(v);
    if (q % v.stride >= v.blen) {
        return -1;
    }
    return (e * v.count + q / v.stride) * v.blen + q % v.stride;
}

static MPI_Datatype vec_type(vec_t v)
{
    MPI_Datatype t;
    CK(MPI_Type_vector(v.count, v.blen, v.stride, MPI_INT, &t));
    CK(MPI_Type_commit(&t));
    return t;
}

/* data index d: base + mul * d, the hole at int p: hole + p.  Written
 * (into a new buffer if buf is NULL) or, with WHAT, checked */
static int *vec_buf(vec_t v, int *buf, int nel, int base, int mul, int hole,
                    const char *what)
{
    int n = nel * vec_ext(v);
    if (!buf && !(buf = malloc(sizeof(int) * (size_t)n))) {
        die("out of memory");
    }
    for (int p = 0, d; p < n; p++) {
        int want = (d = vec_index(v, p)) < 0 ? hole + p : base + mul * d;
        if (what && buf[p] != want) {
            die("%s: int %d (%s) = %d, expected %d", what, p,
                d < 0 ? "a hole" : "data", buf[p], want);
        }
        buf[p] = want;
    }
    return buf;
}

/* MPI defines MPI_SUM ... on predefined datatypes only; both plain MPIs
 * refuse it on derived ones (Open MPI 4.1: MPI_ERR_OP; MPICH 4.0.2:
 * "Invalid MPI_Op").  Derived types are summed by these user-defined ops,
 * blind to the datatype (it may be freed): 4 doubles an element, or ints
 * laid out as op_layout (its data only). */
static vec_t op_layout;

static void op_d4(void *in, void *io, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len * 4; i++) {
        ((double *)io)[i] += ((const double *)in)[i];
    }
}

static void op_vec(void *in, void *io, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int p = 0; p < *len * vec_ext(op_layout); p++) {
        if (vec_index(op_layout, p) >= 0) {
            ((int *)io)[p] += ((const int *)in)[p];
        }
    }
}

/* nbx: the NBX sparse exchange (Hoefler et al. 2010; PETSc's
 * PetscCommBuildTwoSided with -build_twosided ibarrier), each round on a
 * fresh communicator; from round 20 on, rank 0 (even rounds) sleeps 200 ms
 * before its sends, or the last rank (odd) before its MPI_Ibarrier */
static void case_nbx(void)
{
    const int off[2] = {1, 3};
    for (int round = 0; round < 24; round++) {
        MPI_Comm c = dup_world();
        int out[2][4], in[4], got[2] = {0, 0}, posted = 0, done = 0, flag, k;
        int late = round < 20 ? -1 : round % 2 ? size - 1 : 0;
        MPI_Request sreq[2], breq = MPI_REQUEST_NULL;
        MPI_Status st;
        if (late == rank && round % 2 == 0) {
            usleep(200000);
        }
        for (k = 0; k < 2; k++) {
            int dst = (rank + off[k]) % size;
            out[k][0] = rank, out[k][1] = dst, out[k][2] = k;
            out[k][3] = round;
            CK(MPI_Issend(out[k], 4, MPI_INT, dst, 42, c, &sreq[k]));
        }
        while (!done) {
            CK(MPI_Iprobe(MPI_ANY_SOURCE, 42, c, &flag, &st));
            if (flag) {
                int src = st.MPI_SOURCE;
                CK(MPI_Recv(in, 4, MPI_INT, src, 42, c, &st));
                k = in[2] & 1;
                expect(in[0] == src && in[1] == rank && in[2] == k &&
                           in[3] == round && (src + off[k]) % size == rank,
                       1, "a right message {src, dst, k, round}, round", round);
                got[k]++;
            }
            if (posted) {
                CK(MPI_Test(&breq, &done, &st));
                continue;
            }
            CK(MPI_Testall(2, sreq, &flag, sts));
            if (flag) { /* my messages are all received: the barrier */
                if (late == rank && round % 2) {
                    usleep(200000);
                }
                CK(MPI_Ibarrier(c, &breq));
                posted = 1;
            }
        }
        expect(got[0], 1, "messages received from rank - 1, round", round);
        expect(got[1], 1, "messages received from rank - 3, round", round);
        CK(MPI_Comm_free(&c));
    }
}

/* ibcast_freed_type: an MPI_Ibcast's vector type freed before the wait,
 * the next type made meanwhile (MPICH gives it the freed one's handle) */
static void ibcast_freed_round(MPI_Comm c, int root)
{
    const vec_t v = {100, 3, 5}, w = {7, 2, 9};
    const int nel = 50, base = 1000 + 100 * root, me = rank == root;
    int *buf = vec_buf(v, NULL, nel, me ? base : -1, me, HOLE, NULL);
    int *b2 = vec_buf(w, NULL, 3, me ? base : -1, me, HOLE, NULL);
    MPI_Datatype t = vec_type(v), t2;
    MPI_Request r;
    CK(MPI_Ibcast(buf, nel, t, root, c, &r));
    CK(MPI_Type_free(&t));
    t2 = vec_type(w);
    CK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    vec_buf(v, buf, nel, base, 1, HOLE, "MPI_Ibcast, its type freed");
    CK(MPI_Bcast(b2, 3, t2, root, c)); /* the next type is itself */
    vec_buf(w, b2, 3, base, 1, HOLE, "MPI_Bcast with the next type");
    CK(MPI_Type_free(&t2));
    free(buf);
    free(b2);
}

/* MPI_Iallreduce of 8 x 4 doubles, its type and op freed before the wait */
static void iallred_freed_round(MPI_Comm c, int round)
{
    enum { N = 8, K = 4 };
    double in[N * K], out[N * K];
    MPI_Datatype t, t2;
    MPI_Op op;
    MPI_Request r;
    for (int i = 0; i < N * K; i++) {
        in[i] = rank * 1000.0 + i + round;
        out[i] = -1.0;
    }
    CK(MPI_Op_create(op_d4, 1, &op));
    CK(MPI_Type_contiguous(K, MPI_DOUBLE, &t));
    CK(MPI_Type_commit(&t));
    CK(MPI_Iallreduce(in, out, N, t, op, c, &r));
    CK(MPI_Type_free(&t));
    CK(MPI_Op_free(&op));
    CK(MPI_Type_contiguous(2, MPI_DOUBLE, &t2)); /* the next type */
    CK(MPI_Type_commit(&t2));
    CK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CK(MPI_Type_free(&t2));
    for (int i = 0; i < N * K; i++) {
        double want = 1000.0 * (double)tri + (double)size * (i + round);
        if (out[i] != want) {
            die("MPI_Iallreduce, type and op freed: [%d] = %.1f, not %.1f", i,
                out[i], want);
        }
    }
}

static void case_ibcast_freed_type(void)
{
    MPI_Comm c = dup_world();
    const int roots[4] = {0, size - 1, 1, 0};
    for (int k = 0; k < 4; k++) {
        ibcast_freed_round(c, roots[k]);
        iallred_freed_round(c, k);
    }
    CK(MPI_Comm_free(&c));
}

#ifdef HAVE_PCOLL
/* Open MPI 4.1.4's MPIX_Bcast_init does not keep its datatype: freed after
 * the init, the start reads freed memory (a crash, or wrong data once the
 * next type takes its place).  There the type is freed after the request */
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
#define PCOLL_KEEPS_TYPE 0
#else
#define PCOLL_KEEPS_TYPE 1
#endif

static void persist_bcast(void)
{
    const vec_t v = {10, 2, 3}, w = {4, 3, 7};
    const int nel = 4, root = 1 % size, me = rank == root;
    int *buf = vec_buf(v, NULL, nel, -1, 0, HOLE, NULL);
    MPI_Comm c = dup_world();
    MPI_Datatype t = vec_type(v), t2;
    MPI_Request r;
    CK(PCOLL(Bcast)(buf, nel, t, root, c, MPI_INFO_NULL, &r));
    if (PCOLL_KEEPS_TYPE) {
        CK(MPI_Type_free(&t));
    }
    t2 = vec_type(w);
    for (int it = 0; it < 5; it++) {
        int base = 10000 * (it + 1);
        vec_buf(v, buf, nel, me ? base : -1, me, HOLE, NULL);
        CK(MPI_Start(&r));
        CK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        vec_buf(v, buf, nel, base, 1, HOLE, "persistent bcast, type freed");
    }
    CK(MPI_Request_free(&r));
    if (!PCOLL_KEEPS_TYPE) {
        CK(MPI_Type_free(&t));
        note = "the persistent bcast's type freed after its request: Open "
               "MPI 4.1 does not keep it";
    }
    CK(MPI_Type_free(&t2));
    CK(MPI_Comm_free(&c));
    free(buf);
}
#endif

/* persist_freed_comm: a persistent allreduce whose communicator, and a
 * persistent bcast whose datatype, is freed after the init; the next
 * communicator or type made meanwhile */
static void case_persist_freed_comm(void)
{
#ifdef HAVE_PCOLL
    enum { N = 16 };
    int in[N], out[N];
    MPI_Comm c = dup_world(), d;
    MPI_Request r;
    CK(PCOLL(Allreduce)(in, out, N, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &r));
    CK(MPI_Comm_free(&c));
    d = dup_world(); /* given the freed communicator's handle */
    for (int it = 0; it < 5; it++) {
        int x = rank, y = -1;
        for (int j = 0; j < N; j++) {
            in[j] = rank * 100 + it * 7 + j;
            out[j] = -1;
        }
        CK(MPI_Start(&r));
        CK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        expect_seq(out, N, 100 * tri + (long)size * it * 7, size,
                   "persistent allreduce, its communicator freed");
        CK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, d));
        expect(y, tri, "allreduce on the next communicator", it);
    }
    CK(MPI_Request_free(&r));
    expect(r != MPI_REQUEST_NULL, 0, "handle set after MPI_Request_free", 0);
    CK(MPI_Comm_free(&d));
    persist_bcast();
#else
    skip = 1;
#endif
}

/* request_free: MPI allows MPI_Request_free of a collective's request,
 * done or active; Open MPI 4.1.4 refuses an active one, MPICH 4.0.2 any
 * ("invalid (kind=10)").  Asked of PMPI (beneath any layer), what the MPI
 * refuses is done by MPI_Wait instead. */
static int mpi_frees_nbc(int active)
{
    MPI_Request r;
    int x = 1, y, flag = 0, ok;
    CK(PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CK(PMPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    while (!active && !flag) {
        CK(PMPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE));
    }
    if (!(ok = PMPI_Request_free(&r) == MPI_SUCCESS)) {
        CK(PMPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    CK(PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    return ok;
}

static void case_request_free(void)
{
    MPI_Comm c = dup_world();
    MPI_Request r;
    int free_done = mpi_frees_nbc(0), free_active = mpi_frees_nbc(1);
    for (int it = 0; it < 1000; it++) { /* freed once seen complete */
        int x = rank + it, y = -1, flag = 0;
        CK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, c, &r));
        while (!flag) { /* (8 ranks on 2 cores: MPICH polls) */
            CK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE));
            sched_yield();
        }
        CK(free_done ? MPI_Request_free(&r) : MPI_Wait(&r, MPI_STATUS_IGNORE));
        expect(r != MPI_REQUEST_NULL, 0, "handle set after free/wait", it);
        expect(y, tri + (long)size * it, "allreduce freed once complete", it);
    }
    for (int it = 0; it < 100; it++) { /* freed at once, active */
        CK(MPI_Ibarrier(c, &r));
        CK(free_active ? MPI_Request_free(&r)
                       : MPI_Wait(&r, MPI_STATUS_IGNORE));
        expect(r != MPI_REQUEST_NULL, 0, "handle set after free/wait", it);
        CK(MPI_Barrier(c));
        if (it % 10 == 9) {
            int x = rank * it, y = -1;
            CK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c));
            expect(y, tri * it, "allreduce after freed ibarriers", it);
        }
    }
    CK(MPI_Comm_free(&c));
    note = free_active ? NULL
           : free_done ? "this MPI refuses MPI_Request_free of an active "
                         "collective: MPI_Wait instead"
                       : "this MPI refuses MPI_Request_free of a collective: "
                         "MPI_Wait instead";
}

/* p_order: a persistent bcast (A) and barrier (B); rank 0 starts A then
 * B, the others B then A; then MPI_Startall, the array reversed on odd
 * ranks */
static void case_p_order(void)
{
#ifdef HAVE_PCOLL
    enum { N = 8 };
    int buf[N];
    MPI_Comm c = dup_world();
    MPI_Request q[2], a[2];
    CK(PCOLL(Bcast)(buf, N, MPI_INT, 0, c, MPI_INFO_NULL, &q[0]));
    CK(PCOLL(Barrier)(c, MPI_INFO_NULL, &q[1]));
    for (int round = 0; round < 40; round++) {
        for (int j = 0; j < N; j++) {
            buf[j] = rank == 0 ? round * 100 + j : -1;
        }
        if (round < 20) {
            CK(MPI_Start(&q[rank == 0 ? 0 : 1]));
            CK(MPI_Start(&q[rank == 0 ? 1 : 0]));
        } else {
            a[0] = q[rank % 2], a[1] = q[1 - rank % 2];
            CK(MPI_Startall(2, a));
        }
        CK(MPI_Waitall(2, q, sts));
        expect_seq(buf, N, round * 100, 1, "persistent bcast");
    }
    CK(MPI_Request_free(&q[0]));
    CK(MPI_Request_free(&q[1]));
    CK(MPI_Comm_free(&c));
#else
    skip = 1;
#endif
}

/* two_fresh: allreduces on two fresh communicators, even ranks posting on
 * c[0] first, odd ranks on c[1] */
static void case_two_fresh(void)
{
    MPI_Comm c[2];
    for (int round = 0; round < 50; round++) {
        int x[2], y[2] = {-1, -1};
        MPI_Request q[2];
        if (round % 10 == 0) {
            c[0] = dup_world();
            c[1] = dup_world();
        }
        for (int i = 0; i < 2; i++) {
            int k = rank % 2 ? 1 - i : i;
            x[k] = rank * 10 + round + 1000 * k;
            CK(MPI_Iallreduce(&x[k], &y[k], 1, MPI_INT, MPI_SUM, c[k], &q[k]));
        }
        CK(MPI_Waitall(2, q, sts));
        expect(y[0], 10 * tri + (long)size * round, "allreduce on c[0]", 0);
        expect(y[1], 10 * tri + (long)size * (round + 1000),
               "allreduce on c[1]", 1);
        if (round % 10 == 9) {
            CK(MPI_Comm_free(&c[0]));
            CK(MPI_Comm_free(&c[1]));
        }
    }
}

/* many_outstanding: 4000 allreduces in flight; rank 0 posts its last 2000
 * only once rank 1 has posted all 4000 */
static void case_many_outstanding(void)
{
    enum { M = 4000 };
    static int x[M], y[M];
    static MPI_Request q[M];
    MPI_Comm c = dup_world();
    int tok = 7;
    for (int i = 0; i < M; i++) {
        x[i] = rank + i;
        y[i] = -1;
        if (rank == 0 && i == M / 2) {
            CK(MPI_Recv(&tok, 1, MPI_INT, 1, 43, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
        }
        CK(MPI_Iallreduce(&x[i], &y[i], 1, MPI_INT, MPI_SUM, c, &q[i]));
    }
    if (rank == 1) {
        CK(MPI_Send(&tok, 1, MPI_INT, 0, 43, MPI_COMM_WORLD));
    }
    CK(MPI_Waitall(M, q, sts));
    expect_seq(y, M, tri, size, "outstanding allreduce");
    CK(MPI_Comm_free(&c));
}

/* idup_pending: A's allreduce pending across MPI_Comm_idup(A, B) and an
 * allreduce and a barrier on B */
static void case_idup_pending(void)
{
    for (int round = 0; round < 5; round++) {
        MPI_Comm a = dup_world(), b;
        MPI_Request q[3], d;
        int x[2] = {rank + round, 2 * rank}, y[2] = {-1, -1}, z = -1;
        CK(MPI_Iallreduce(&x[0], &y[0], 1, MPI_INT, MPI_SUM, a, &q[0]));
        CK(MPI_Comm_idup(a, &b, &d));
        CK(MPI_Wait(&d, MPI_STATUS_IGNORE));
        CK(MPI_Iallreduce(&x[1], &y[1], 1, MPI_INT, MPI_SUM, b, &q[1]));
        CK(MPI_Ibarrier(b, &q[2]));
        CK(MPI_Waitall(3, q, sts));
        expect(y[0], tri + (long)size * round, "allreduce on A", round);
        expect(y[1], 2 * tri, "allreduce on B, idup'd from A", round);
        CK(MPI_Allreduce(&x[0], &z, 1, MPI_INT, MPI_SUM, b));
        expect(z, tri + (long)size * round, "blocking allreduce on B", round);
        CK(MPI_Comm_free(&b));
        CK(MPI_Comm_free(&a));
    }
}

/* intercomm: group 0 the world's ranks [0, half), group 1 the rest; each
 * rank contributes rank + 1 + j */
enum { IN = 6 };
static int half, color;

/* the sum of r + 1 over the world ranks r of group g */
static long group_sum(int g)
{
    long lo = g ? half : 0, hi = g ? size : half;
    return (hi * (hi + 1) - lo * (lo + 1)) / 2;
}

/* bcast and reduce, their root at local rank lr of group g: MPI_ROOT
 * there, MPI_PROC_NULL at the others of its group (their buffers
 * untouched), lr (its rank in the remote group) in the other group */
static void inter_rooted(MPI_Comm ic, int g, int lr)
{
    int buf[IN], in[IN], out[IN], lrank, val = 500 + 10 * g + lr;
    long n = g ? half : size - half; /* the size of the other group */
    CK(MPI_Comm_rank(ic, &lrank));
    int root = color != g ? lr : lrank == lr ? MPI_ROOT : MPI_PROC_NULL;
    for (int j = 0; j < IN; j++) {
        buf[j] = root == MPI_ROOT ? val + j : -1 - j;
        in[j] = rank + 1 + j;
        out[j] = -1;
    }
    CK(MPI_Bcast(buf, IN, MPI_INT, root, ic));
    CK(MPI_Reduce(in, out, IN, MPI_INT, MPI_SUM, root, ic));
    expect_seq(buf, IN, root == MPI_PROC_NULL ? -1 : val,
               root == MPI_PROC_NULL ? -1 : 1, "intercommunicator bcast");
    expect_seq(out, IN, root == MPI_ROOT ? group_sum(1 - g) : -1,
               root == MPI_ROOT ? n : 0, "intercommunicator reduce");
}

/* allreduce, blocking and not: each group gets the OTHER group's sum; then
 * the merged communicator (group 0 low: the world's order) */
static void case_intercomm(void)
{
    MPI_Comm local, ic, merged;
    int in[IN], out[IN], out2[IN], mrank, x = rank + 1, y = -1;
    MPI_Request q[2];
    half = size / 2;
    color = rank >= half;
    CK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local));
    CK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color ? 0 : half, 77,
                            &ic));
    CK(MPI_Barrier(ic));
    for (int g = 0; g < 2; g++) {
        for (int lr = 0; lr < 2 && lr < (g ? size - half : half); lr++) {
            inter_rooted(ic, g, lr);
        }
    }
    for (int j = 0; j < IN; j++) {
        in[j] = rank + 1 + j;
        out[j] = out2[j] = -1;
    }
    CK(MPI_Allreduce(in, out, IN, MPI_INT, MPI_SUM, ic));
    CK(MPI_Ibarrier(ic, &q[0]));
    CK(MPI_Iallreduce(in, out2, IN, MPI_INT, MPI_SUM, ic, &q[1]));
    CK(MPI_Waitall(2, q, sts));
    long n = color ? half : size - half;
    expect_seq(out, IN, group_sum(1 - color), n, "intercomm allreduce");
    expect_seq(out2, IN, group_sum(1 - color), n, "intercomm iallreduce");
    CK(MPI_Intercomm_merge(ic, color, &merged));
    CK(MPI_Comm_rank(merged, &mrank));
    expect(mrank, rank, "rank in the merged communicator", 0);
    CK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, merged));
    expect(y, (long)size * (size + 1) / 2, "allreduce on the merged", 0);
    CK(MPI_Comm_free(&merged));
    CK(MPI_Comm_free(&ic));
    CK(MPI_Comm_free(&local));
}

/* allred_derived: MPI_Allreduce of nel elements of T (laid out as v; freed
 * here) with the user-defined sum; the receive buffer's holes untouched,
 * the send buffer's unread */
static void allred_layout(MPI_Comm c, vec_t v, MPI_Datatype t, int nel,
                          int in_place, const char *what)
{
    int *sv = vec_buf(v, NULL, nel, rank * 100000, 1, SEND_HOLE, NULL);
    int *rv = vec_buf(v, NULL, nel, in_place ? rank * 100000 : -1, in_place,
                      HOLE, NULL);
    MPI_Op op;
    op_layout = v;
    CK(MPI_Op_create(op_vec, 1, &op));
    CK(MPI_Allreduce(in_place ? MPI_IN_PLACE : sv, rv, nel, t, op, c));
    vec_buf(v, rv, nel, (int)(100000 * tri), size, HOLE, what);
    CK(MPI_Op_free(&op));
    CK(MPI_Type_free(&t));
    free(sv);
    free(rv);
}

static void case_allred_derived(void)
{
    const vec_t three = {1, 3, 3}, v = {4, 2, 3};
    MPI_Comm c = dup_world();
    MPI_Datatype t3;
    CK(MPI_Type_contiguous(3, MPI_INT, &t3));
    CK(MPI_Type_commit(&t3));
    allred_layout(c, three, t3, 10, 0, "contiguous type of 3 MPI_INT");
    allred_layout(c, v, vec_type(v), 5, 0, "vector type");
    allred_layout(c, v, vec_type(v), 5, 1, "vector type, MPI_IN_PLACE");
    CK(MPI_Comm_free(&c));
}

/* waitall_errors: even rank r sends 8 ints to r + 1, which receives into 4
 * (MPI_ERR_TRUNCATE), with an MPI_Iallreduce in the array.  Both plain MPIs
 * return MPI_ERR_IN_STATUS, the receive's MPI_ERROR of that class, and the
 * allreduce's MPI_SUCCESS or, as MPI allows, MPI_ERR_PENDING (left active;
 * Open MPI 4.1.4's MPI_Waitall, MPICH 4.0.2's MPI_Testall).  MPICH raises
 * the errors on MPI_COMM_WORLD: it is MPI_ERRORS_RETURN here too. */
static const char *const w_names[3] = {"MPI_Waitall", "MPI_Testall",
                                       "MPI_Waitsome"};

/* complete q[] by w_names[how]: the return code (MPI_Waitsome's: any
 * MPI_ERR_IN_STATUS) and each request's MPI_ERROR where given, else UNSET */
static int err_complete(int how, MPI_Request q[2], int err[2])
{
    int rc, r, flag = 0, n = 0, idx[2];
    sts[0].MPI_ERROR = sts[1].MPI_ERROR = err[0] = err[1] = UNSET;
    while (how < 2) {
        rc = how ? MPI_Testall(2, q, &flag, sts) : MPI_Waitall(2, q, sts);
        if (how == 1 && !flag && rc == MPI_SUCCESS) {
            continue;
        }
        if (rc == MPI_ERR_IN_STATUS) {
            err[0] = sts[0].MPI_ERROR, err[1] = sts[1].MPI_ERROR;
        }
        return rc;
    }
    while ((r = MPI_Waitsome(2, q, &n, idx, sts)) == MPI_SUCCESS ||
           r == MPI_ERR_IN_STATUS) {
        if (n == MPI_UNDEFINED) {
            return rc;
        }
        for (int i = 0; i < n; i++) {
            err[idx[i]] = r == MPI_SUCCESS ? MPI_SUCCESS : sts[i].MPI_ERROR;
        }
        rc = r == MPI_SUCCESS ? rc : r;
    }
    return r;
}

/* one round; 1, and a line on stderr, if something is wrong */
static int err_round(MPI_Comm c, int how, int round)
{
    int x = rank + round, y = -1, rb[4], sb[8] = {0}, err[2], cls = -1, rc;
    int recv = rank % 2, want = recv ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
    MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int bad = 0;
    CK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, c, &q[0]));
    if (recv) {
        CK(MPI_Irecv(rb, 4, MPI_INT, rank - 1, 44, c, &q[1]));
    } else if (rank + 1 < size) {
        CK(MPI_Isend(sb, 8, MPI_INT, rank + 1, 44, c, &q[1]));
    }
    rc = err_complete(how, q, err);
    if (err[1] != UNSET) {
        MPI_Error_class(err[1], &cls);
    }
    if (rc != want || q[1] != MPI_REQUEST_NULL ||
        (recv ? cls != MPI_ERR_TRUNCATE ||
                    (err[0] != MPI_SUCCESS && err[0] != MPI_ERR_PENDING) ||
                    (err[0] == MPI_SUCCESS) != (q[0] == MPI_REQUEST_NULL)
              : q[0] != MPI_REQUEST_NULL)) {
        bad = fprintf(stderr,
                      "mpi_conform %s: rank %d: FAIL: %s: MPI_ERROR of the "
                      "receive %d%s, class %d (expected MPI_ERR_TRUNCATE, "
                      "%d), of the allreduce %d; returned %d (expected %d); "
                      "handles left set: %d %d\n",
                      cur, rank, w_names[how], err[1],
                      err[1] == UNSET ? " (not written)" : "", cls,
                      MPI_ERR_TRUNCATE, err[0], rc, want,
                      q[0] != MPI_REQUEST_NULL, q[1] != MPI_REQUEST_NULL);
    }
    for (int k = 0; k < 2; k++) { /* what is left: completed here */
        if (q[k] != MPI_REQUEST_NULL) {
            MPI_Wait(&q[k], MPI_STATUS_IGNORE);
        }
    }
    if (!bad && y != tri + (long)size * round) {
        bad = fprintf(stderr,
                      "mpi_conform %s: rank %d: FAIL: %s: the "
                      "allreduce gave %d, expected %ld\n",
                      cur, rank, w_names[how], y, tri + (long)size * round);
    }
    return bad > 0;
}

static void case_waitall_errors(void)
{
    MPI_Comm c = dup_world();
    int bad = 0;
    CK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    CK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    for (int round = 0; round < 9; round++) {
        bad += err_round(c, round % 3, round);
    }
    CK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    CK(MPI_Comm_free(&c));
    if (bad) {
        die("%d of 9 rounds wrong (above)", bad);
    }
}

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {{"nbx", case_nbx},
             {"ibcast_freed_type", case_ibcast_freed_type},
             {"persist_freed_comm", case_persist_freed_comm},
             {"request_free", case_request_free},
             {"p_order", case_p_order},
             {"two_fresh", case_two_fresh},
             {"many_outstanding", case_many_outstanding},
             {"idup_pending", case_idup_pending},
             {"intercomm", case_intercomm},
             {"allred_derived", case_allred_derived},
             {"waitall_errors", case_waitall_errors},
             {"nbc_window", case_nbc_window}};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static void run_case(int k, int timeout)
{
    double t0 = MPI_Wtime();
    cur = cases[k].name;
    skip = 0;
    note = NULL;
    snprintf(alarm_msg, sizeof(alarm_msg),
             "mpi_conform %s: rank %d: FAIL: still running after %d s "
             "(hung?)\n",
             cur, rank, timeout);
    alarm((unsigned)timeout);
    cases[k].run();
    CK(MPI_Barrier(MPI_COMM_WORLD));
    alarm(0);
    if (rank == 0) {
        printf("mpi_conform %s: %s in %.1f s%s%s%s\n", cur,
               skip ? "skip (no persistent collectives)" : "ok",
               MPI_Wtime() - t0, note ? " (" : "", note ? note : "",
               note ? ")" : "");
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    const char *t = getenv("MPI_CONFORM_CASE_TIMEOUT");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tri = (long)size * (size - 1) / 2;
    signal(SIGALRM, on_alarm);
    if (argc < 2 || size < 2) {
        die("usage: mpi_conform CASE... (all, or a case of " __FILE__ ")");
    }
    for (int a = 1; a < argc; a++) {
        int found = 0;
        for (int i = 0; i < NCASES; i++) {
            if (!strcmp(argv[a], "all") || !strcmp(argv[a], cases[i].name)) {
                run_case(i, t ? atoi(t) : 0);
                found = 1;
            }
        }
        if (!found) {
            cur = argv[a];
            die("no such case");
        }
    }
    MPI_Finalize();
    return 0;
}
