/*
 * mpi_stress: non-blocking collectives under stress, every result compared
 * with a reference computed in the program.  An ordinary MPI program: it
 * knows nothing of sharp, and passes on plain Open MPI and MPICH.
 *
 *   - 4 communicators made with MPI_Comm_dup(MPI_COMM_WORLD)
 *   - a window of 16 non-blocking collectives in flight at once, of every
 *     kind: MPI_Iallreduce, MPI_Ireduce, MPI_Ibcast, MPI_Ibarrier (which
 *     libsharp_mpi offloads) mixed with MPI_Igather, MPI_Iscan,
 *     MPI_Ialltoall, MPI_Ireduce_scatter, MPI_Iallgather (which MPI runs)
 *     and persistent allreduces (MPI_Allreduce_init / MPIX_ in Open MPI
 *     4.1), each on a randomly chosen communicator
 *   - the array also holds MPI_REQUEST_NULL entries and an inactive
 *     persistent request at fixed places, and a persistent one that
 *     completed stays inactive in its slot for a while
 *   - completed by randomly chosen MPI_Waitall, MPI_Testall, MPI_Waitany,
 *     MPI_Testany, MPI_Waitsome, MPI_Testsome, MPI_Wait, MPI_Test (some
 *     with MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE); each completed slot
 *     is reposted at once with the next operation
 *   - now and then the completion calls on an array with nothing active
 *     (MPI_UNDEFINED, empty statuses) while operations are in flight
 *
 * The operations are one sequence drawn from the seed, the same on every
 * rank, posted in order (MPI's rule for collectives); which slot each goes
 * to and how it is completed is each rank's own draw.  After every
 * completion call: each index reported complete was active, its handle is
 * MPI_REQUEST_NULL (a persistent one: its handle, inactive), every other
 * handle unchanged, statuses as MPI defines them; then the result against
 * the reference (receive buffers carry a guard pattern behind the data).
 *
 * mpi_stress [--seed S] [--seeds N] [--ops K] [--ppn P (said: the layout)]
 * [--signal-at N FILE]: seeds S..S+N-1, K operations each; rank 0 creates FILE after its
 * N-th completion (of the first seed: the test kills a daemon then);
 * --thread-multiple: MPI_Init_thread(MPI_THREAD_MULTIPLE) (offloaded as
 * at any level; with SHARP_MPI_THREAD_MULTIPLE=0 in the environment
 * nothing is expected offloaded).  Rank 0 prints "mpi_stress: expect offloaded
 * MPI_Iallreduce A MPI_Ireduce R MPI_Ibcast B MPI_Ibarrier C" (summed over
 * ranks, as libsharp_mpi's report counts them; persistent starts count as
 * MPI_Iallreduce) and "every result right" or the failing seed.
 */
#include <mpi.h>
#ifdef OMPI_MAJOR_VERSION
#include <mpi-ext.h>
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if MPI_VERSION >= 4
#define HAVE_PCOLL 1
#define PCOLL(name) MPI_##name##_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define HAVE_PCOLL 1
#define PCOLL(name) MPIX_##name##_init
#endif

#define WINDOW 16
#define NCOMM 4
#define NULLS 2                    /* MPI_REQUEST_NULL entries in the array */
#define ASIZE (WINDOW + NULLS + 1) /* + an inactive persistent request */
#define GUARD 16
#define PAT 0x5A

static int rank, size, errors, ppn = 1, last_rc;
static const char *last_call = "";
/* --signal-at N FILE: rank 0 creates FILE after N completions (a test
 * kills a daemon then: operations are in flight on every communicator) */
static unsigned long signal_at;
static const char *signal_file;
static unsigned long seed;
static MPI_Comm comms[NCOMM];

/* the sequence's draw (the same on every rank) and the rank's own */
static uint64_t seq_rng, own_rng;
static unsigned draw(uint64_t *s, unsigned n)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (unsigned)((*s >> 11) % n);
}

/* the input of element i of rank r in operation k */
static uint32_t hash(unsigned long k, int r, long i)
{
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)k * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)r * 0x165667B19E3779F9ull ^ (uint64_t)i;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

enum {
    K_IALLREDUCE,
    K_IREDUCE,
    K_IBCAST,
    K_IBARRIER,
    K_IGATHER,
    K_ISCAN,
    K_IALLTOALL,
    K_IREDUCE_SCATTER,
    K_IALLGATHER,
    K_PALLREDUCE,
    K_N
};
static const char *const kname[K_N] = {"MPI_Iallreduce", "MPI_Ireduce",
                                       "MPI_Ibcast",     "MPI_Ibarrier",
                                       "MPI_Igather",    "MPI_Iscan",
                                       "MPI_Ialltoall",  "MPI_Ireduce_scatter",
                                       "MPI_Iallgather", "MPI_Allreduce_init"};

/* element types and ops: int SUM, int MAX, int BXOR, double SUM (values
 * whose sums are exact) */
enum { T_ISUM, T_IMAX, T_IXOR, T_DSUM, T_N };

typedef struct {
    unsigned long k; /* index in the sequence */
    int kind, c, count, root, t, inplace;
} op_t;

static int elsize(int t)
{
    return t == T_DSUM ? (int)sizeof(double) : (int)sizeof(int);
}

static MPI_Datatype dtype(int t)
{
    return t == T_DSUM ? MPI_DOUBLE : MPI_INT;
}

static MPI_Op mop(int t)
{
    return t == T_IMAX ? MPI_MAX : t == T_IXOR ? MPI_BXOR : MPI_SUM;
}

static void val(const op_t *o, int r, long i, void *p)
{
    uint32_t h = hash(o->k, r, i);
    if (o->t == T_DSUM) {
        *(double *)p = (double)((int)(h % 2001) - 1000) / 8.0;
    } else if (o->t == T_ISUM) {
        *(int *)p = (int)(h % 200001) - 100000;
    } else {
        *(int *)p = (int)h;
    }
}

/* the fold of ranks lo..hi-1's element i */
static void fold(const op_t *o, int lo, int hi, long i, void *out)
{
    if (o->t == T_DSUM) {
        double s = 0, v;
        for (int r = lo; r < hi; r++) {
            val(o, r, i, &v);
            s += v;
        }
        *(double *)out = s;
        return;
    }
    int s = 0, v;
    union { /* val's room for either type (gcc's bounds check, under ASan) */
        int i;
        double d;
    } u;
    for (int r = lo; r < hi; r++) {
        val(o, r, i, &u);
        v = u.i;
        if (r == lo) {
            s = v;
        } else if (o->t == T_ISUM) {
            s = (int)((unsigned)s + (unsigned)v);
        } else if (o->t == T_IMAX) {
            s = v > s ? v : s;
        } else {
            s ^= v;
        }
    }
    *(int *)out = s;
}

/* the next operation of the sequence */
static void next_op(op_t *o, unsigned long k)
{
    memset(o, 0, sizeof(*o));
    o->k = k;
    unsigned w = draw(&seq_rng, 100);
    /* offloaded kinds about half of the time */
    static const int table[] = {
        K_IALLREDUCE, K_IALLREDUCE, K_IALLREDUCE, K_IREDUCE,
        K_IREDUCE,    K_IBCAST,     K_IBCAST,     K_IBARRIER,
        K_IGATHER,    K_ISCAN,      K_IALLTOALL,  K_IREDUCE_SCATTER,
        K_IALLGATHER, K_PALLREDUCE, K_IALLREDUCE, K_IBARRIER};
    o->kind = table[w % (sizeof(table) / sizeof(table[0]))];
#ifndef HAVE_PCOLL
    if (o->kind == K_PALLREDUCE) {
        o->kind = K_IALLREDUCE;
    }
#endif
    o->c = (int)draw(&seq_rng, NCOMM);
    o->root = (int)draw(&seq_rng, (unsigned)size);
    o->t = (int)draw(&seq_rng, T_N);
    o->inplace = draw(&seq_rng, 4) == 0;
    unsigned z = draw(&seq_rng, 100);
    int big = o->kind == K_IALLREDUCE || o->kind == K_IREDUCE ||
              o->kind == K_IBCAST || o->kind == K_PALLREDUCE;
    o->count = z < 70   ? 1 + (int)draw(&seq_rng, 8)
               : z < 95 ? 9 + (int)draw(&seq_rng, 500)
               : big    ? 1000 + (int)draw(&seq_rng, 3000)
                        : 500;
    if (o->kind == K_IBCAST || o->kind == K_IGATHER || o->kind == K_IALLTOALL ||
        o->kind == K_IALLGATHER) {
        o->inplace = 0;
    }
}

/* an offloaded-eligible operation (what libsharp_mpi's report counts) */
static int offload_kind(const op_t *o)
{
    switch (o->kind) {
    case K_IALLREDUCE:
    case K_PALLREDUCE: return 0;
    case K_IREDUCE: return 1;
    case K_IBCAST: return 2;
    case K_IBARRIER: return 3;
    }
    return -1;
}

/* One slot of the window */
enum { S_FREE, S_ACTIVE, S_PINACTIVE };
typedef struct {
    int state;
    op_t op;
    char *s, *r;
    size_t rlen;     /* bytes of r before the guard */
    MPI_Request req; /* what the array must hold */
    int persistent;
    int counts[64]; /* MPI_Ireduce_scatter's */
} slot_t;

static slot_t slots[WINDOW];
static int pos[WINDOW];    /* slot -> place in the array */
static int slot_at[ASIZE]; /* place -> slot, or -1 */
static MPI_Request reqs[ASIZE];
static MPI_Request idle_persistent; /* never started */
static int idle_at;
static unsigned long posted, completed, expect[4], nops;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "mpi_stress: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void die(const char *what, int i)
{
    int sl = i >= 0 && i < ASIZE ? slot_at[i] : -1;
    fprintf(stderr,
            "mpi_stress[%d]: FAIL seed %lu after %lu completions: %s (array "
            "index %d: %s)\n",
            rank, seed, completed, what, i,
            sl >= 0        ? kname[slots[sl].op.kind]
            : i == idle_at ? "the inactive persistent request"
                           : "MPI_REQUEST_NULL");
    if (last_rc != MPI_SUCCESS) {
        char es[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(last_rc, es, &len);
        fprintf(stderr, "mpi_stress[%d]: the call returned %d: %s\n", rank,
                last_rc, es);
    }
    for (int j = 0; j < ASIZE && getenv("MPI_STRESS_TRACE") != NULL; j++) {
        int t = slot_at[j];
        int fl = -1,
            grc = reqs[j] == MPI_REQUEST_NULL
                      ? -2
                      : MPI_Request_get_status(reqs[j], &fl, MPI_STATUS_IGNORE);
        fprintf(stderr, "  [%d] %s state %d get_status %d flag %d c%d n%d\n", j,
                t >= 0 ? kname[slots[t].op.kind] : "-",
                t >= 0 ? slots[t].state : -1, grc, fl,
                t >= 0 ? slots[t].op.c : -1, t >= 0 ? slots[t].op.count : -1);
    }
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void post(int sl)
{
    slot_t *s = &slots[sl];
    op_t *o = &s->op;
    next_op(o, posted++);
    MPI_Comm comm = comms[o->c];
    int es = elsize(o->t), n = o->count;
    MPI_Datatype dt = dtype(o->t);
    size_t sl_len = 0;
    s->rlen = 0;
    s->persistent = 0;
    switch (o->kind) {
    case K_IALLTOALL:
    case K_IREDUCE_SCATTER:
        sl_len = (size_t)n * (size_t)size * (size_t)es;
        s->rlen = (size_t)n * (size_t)es;
        if (o->kind == K_IALLTOALL) {
            s->rlen *= (size_t)size;
        }
        break;
    case K_IGATHER:
    case K_IALLGATHER:
        sl_len = (size_t)n * (size_t)es;
        s->rlen = sl_len * (size_t)size;
        break;
    case K_IBARRIER: break;
    default: sl_len = s->rlen = (size_t)n * (size_t)es;
    }
    /* MPI_Ireduce_scatter in place: the whole input in r */
    size_t ralloc =
        (o->kind == K_IREDUCE_SCATTER && o->inplace ? sl_len : s->rlen) + GUARD;
    s->s = xmalloc(sl_len);
    s->r = xmalloc(ralloc);
    memset(s->r, PAT, ralloc);
    for (long i = 0; i < (long)(sl_len / (size_t)es); i++) {
        val(o, rank, i, s->s + i * es);
    }
    if (o->kind == K_IBCAST && rank == o->root) {
        memcpy(s->r, s->s, s->rlen);
    }
    const void *sb = s->s;
    if (o->inplace && (o->kind != K_IREDUCE || rank == o->root)) {
        memcpy(s->r, s->s, sl_len);
        sb = MPI_IN_PLACE;
    }
    int rc = MPI_SUCCESS, *rcounts = NULL;
    MPI_Request *rq = &s->req;
    *rq = MPI_REQUEST_NULL;
    switch (o->kind) {
    case K_IALLREDUCE:
        rc = MPI_Iallreduce(sb, s->r, n, dt, mop(o->t), comm, rq);
        break;
    case K_IREDUCE:
        rc = MPI_Ireduce(sb, s->r, n, dt, mop(o->t), o->root, comm, rq);
        break;
    case K_IBCAST: rc = MPI_Ibcast(s->r, n, dt, o->root, comm, rq); break;
    case K_IBARRIER: rc = MPI_Ibarrier(comm, rq); break;
    case K_IGATHER:
        rc = MPI_Igather(s->s, n, dt, s->r, n, dt, o->root, comm, rq);
        break;
    case K_IALLGATHER:
        rc = MPI_Iallgather(s->s, n, dt, s->r, n, dt, comm, rq);
        break;
    case K_ISCAN: rc = MPI_Iscan(sb, s->r, n, dt, mop(o->t), comm, rq); break;
    case K_IALLTOALL:
        rc = MPI_Ialltoall(s->s, n, dt, s->r, n, dt, comm, rq);
        break;
    case K_IREDUCE_SCATTER:
        /* the counts must live until completion: the slot's */
        for (int j = 0; j < size; j++) {
            s->counts[j] = n;
        }
        rcounts = s->counts;
        rc = MPI_Ireduce_scatter(sb, s->r, rcounts, dt, mop(o->t), comm, rq);
        break;
    case K_PALLREDUCE:
#ifdef HAVE_PCOLL
        rc = PCOLL(Allreduce)(sb, s->r, n, dt, mop(o->t), comm, MPI_INFO_NULL,
                              rq);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Start(rq);
        }
        s->persistent = 1;
#endif
        break;
    }
    if (rc != MPI_SUCCESS) {
        die("a post returned an error", pos[sl]);
    }
    if (*rq == MPI_REQUEST_NULL) {
        die("a post returned MPI_REQUEST_NULL", pos[sl]);
    }
    int ok = offload_kind(o);
    if (ok >= 0) { /* (ppn > 1: the node step on shared memory or PMPI) */
        expect[ok]++;
    }
    s->state = S_ACTIVE;
    reqs[pos[sl]] = s->req;
}

/* element i of what rank's receive buffer must hold; 0 if not defined */
static int want(const op_t *o, long i, void *out)
{
    int n = o->count;
    switch (o->kind) {
    case K_IALLREDUCE:
    case K_PALLREDUCE: fold(o, 0, size, i, out); return 1;
    case K_IREDUCE:
        if (rank != o->root) {
            return 0;
        }
        fold(o, 0, size, i, out);
        return 1;
    case K_IBCAST: val(o, o->root, i, out); return 1;
    case K_IGATHER:
        if (rank != o->root) {
            return 0;
        }
        val(o, (int)(i / n), i % n, out);
        return 1;
    case K_IALLGATHER: val(o, (int)(i / n), i % n, out); return 1;
    case K_ISCAN: fold(o, 0, rank + 1, i, out); return 1;
    case K_IALLTOALL:
        val(o, (int)(i / n), (long)rank * n + i % n, out);
        return 1;
    case K_IREDUCE_SCATTER: fold(o, 0, size, (long)rank * n + i, out); return 1;
    }
    return 0;
}

static void check_result(slot_t *s)
{
    op_t *o = &s->op;
    int es = elsize(o->t);
    long n = (long)(s->rlen / (size_t)es);
    char w[8];
    int untouched = 0;
    if (o->kind == K_IREDUCE && rank != o->root) {
        untouched = 1; /* in place only at the root */
    }
    if (o->kind == K_IGATHER && rank != o->root) {
        untouched = 1;
    }
    for (long i = 0; i < n && !untouched && o->kind != K_IBARRIER; i++) {
        if (!want(o, i, w)) {
            break;
        }
        if (memcmp(s->r + i * es, w, (size_t)es) != 0) {
            if (errors++ < 10) {
                fprintf(stderr,
                        "mpi_stress[%d]: FAIL seed %lu op %lu %s comm %d "
                        "count %d root %d type %d%s: element %ld wrong\n",
                        rank, seed, o->k, kname[o->kind], o->c, o->count,
                        o->root, o->t, o->inplace ? " in place" : "", i);
            }
            return;
        }
    }
    size_t from = untouched ? 0 : s->rlen;
    if (o->kind == K_IREDUCE_SCATTER && o->inplace) {
        from = (size_t)o->count * (size_t)es * (size_t)size;
    }
    for (size_t b = from; b < s->rlen + GUARD; b++) {
        if ((unsigned char)s->r[b] != PAT) {
            if (errors++ < 10) {
                fprintf(stderr,
                        "mpi_stress[%d]: FAIL seed %lu op %lu %s comm %d "
                        "count %d: byte %zu written (past the data or at a "
                        "non-root)\n",
                        rank, seed, o->k, kname[o->kind], o->c, o->count, b);
            }
            return;
        }
    }
}

/* an empty status (MPI 4.0, 3.7.3): MPI_ANY_SOURCE, MPI_ANY_TAG, count 0,
 * not cancelled; MPI_ERROR is set only by the calls that return several
 * statuses, and only when they return MPI_ERR_IN_STATUS (3.2.5) */
static int status_empty(const MPI_Status *st)
{
    int cnt = -1, c = 1;
    MPI_Get_count(st, MPI_BYTE, &cnt);
    MPI_Test_cancelled(st, &c);
    return st->MPI_SOURCE == MPI_ANY_SOURCE && st->MPI_TAG == MPI_ANY_TAG &&
           cnt == 0 && c == 0;
}

static int status_sane(const MPI_Status *st)
{
    int c = 1;
    MPI_Test_cancelled(st, &c);
    return c == 0;
}

/* array index i reported complete (st: its status or NULL) */
static void completed_at(int i, const MPI_Status *st)
{
    int sl = slot_at[i];
    if (sl < 0) {
        die("a null or inactive entry reported complete", i);
    }
    slot_t *s = &slots[sl];
    if (s->state != S_ACTIVE) {
        fprintf(stderr, "mpi_stress[%d]: by %s\n", rank, last_call);
        die("an index reported complete twice", i);
    }
    if (s->persistent) {
        if (reqs[i] != s->req || reqs[i] == MPI_REQUEST_NULL) {
            die("a completed persistent request's handle changed", i);
        }
    } else if (reqs[i] != MPI_REQUEST_NULL) {
        die("a completed request is not MPI_REQUEST_NULL", i);
    }
    if (st != NULL && !status_sane(st)) {
        die("a completed collective's status says cancelled", i);
    }
    check_result(s);
    completed++;
    if (signal_file != NULL && rank == 0 && completed == signal_at) {
        FILE *f = fopen(signal_file, "w");
        if (f != NULL) {
            fclose(f);
        }
    }
    s->state = s->persistent ? S_PINACTIVE : S_FREE;
}

/* a handle that was not completed by the call must be unchanged */
static void unchanged(int done[ASIZE])
{
    for (int i = 0; i < ASIZE; i++) {
        if (done[i]) {
            continue;
        }
        int sl = slot_at[i];
        MPI_Request want_r =
            sl < 0 ? (i == idle_at ? idle_persistent : MPI_REQUEST_NULL)
            : slots[sl].state == S_FREE ? MPI_REQUEST_NULL
                                        : slots[sl].req;
        if (reqs[i] != want_r) {
            die("a handle not reported complete changed", i);
        }
    }
}

/* slots completed by the last call: freed (persistent: now or later) and
 * reposted */
static void repost(void)
{
    for (int sl = 0; sl < WINDOW; sl++) {
        slot_t *s = &slots[sl];
        if (s->state == S_ACTIVE) {
            continue;
        }
        if (s->state == S_PINACTIVE) {
#ifndef MPICH_VERSION
            /* MPICH 4.0.2 reports its own inactive persistent collective
             * complete again (MPI_Testsome, MPI_Waitany): freed at once
             * there */
            if (draw(&own_rng, 2) == 0) {
                continue; /* stays inactive in the array for a while */
            }
#endif
            MPI_Request_free(&reqs[pos[sl]]);
            if (reqs[pos[sl]] != MPI_REQUEST_NULL) {
                die("MPI_Request_free left a handle", pos[sl]);
            }
            s->state = S_FREE;
            check_result(s); /* still right after the free */
        }
        if (nops == 0) {
            continue;
        }
        free(s->s);
        free(s->r);
        s->s = s->r = NULL;
        nops--;
        post(sl);
    }
}

static MPI_Status *statuses_arg(MPI_Status *sts, int ignore)
{
    /* through a volatile: MPICH's MPI_STATUSES_IGNORE is (MPI_Status *)1,
     * which trips gcc's bounds checks when inlined */
    MPI_Status *volatile ig = MPI_STATUSES_IGNORE;
    return ignore ? ig : sts;
}

static int any_active(void)
{
    for (int sl = 0; sl < WINDOW; sl++) {
        if (slots[sl].state == S_ACTIVE) {
            return 1;
        }
    }
    return 0;
}

#ifdef MPICH_VERSION
static int persistent_active(void)
{
    for (int sl = 0; sl < WINDOW; sl++) {
        if (slots[sl].state == S_ACTIVE && slots[sl].persistent) {
            return 1;
        }
    }
    return 0;
}

#endif

/* one completion call chosen at random; checks what it reports */
static void complete_some(void)
{
    MPI_Status sts[ASIZE];
    int done[ASIZE] = {0};
    int ignore = draw(&own_rng, 3) == 0;
    MPI_Status *sa = statuses_arg(sts, ignore);
    MPI_Status one, *so = ignore ? MPI_STATUS_IGNORE : &one;
    int how = (int)draw(&own_rng, 8), rc, flag = 0, idx, cnt;
    int idxs[ASIZE];
    static const char *const hn[] = {
        "MPI_Waitall",  "MPI_Testall",  "MPI_Waitany", "MPI_Testany",
        "MPI_Waitsome", "MPI_Testsome", "MPI_Wait",    "MPI_Test"};
#ifdef MPICH_VERSION
    /* MPICH 4.0.2's own persistent collectives fail under MPI_Testall
     * (MPI_ERR_IN_STATUS with pending statuses, then a hang): not used
     * while one is in the array */
    if (how == 1 && persistent_active()) {
        how = 0;
    }
#endif
    for (int i = 0; i < ASIZE; i++) {
        sts[i].MPI_SOURCE = -77;
        sts[i].MPI_TAG = -77;
        sts[i].MPI_ERROR = -77;
    }
    last_call = hn[how];
    switch (how) {
    case 0:
    case 1:
        if (how == 0) {
            rc = MPI_Waitall(ASIZE, reqs, sa);
            flag = 1;
        } else {
            do {
                rc = MPI_Testall(ASIZE, reqs, &flag, sa);
            } while (rc == MPI_SUCCESS && !flag);
        }
        if (rc != MPI_SUCCESS) {
            last_rc = rc;
            die(hn[how], -1);
        }
        for (int i = 0; i < ASIZE; i++) {
            int sl = slot_at[i];
            if (sl >= 0 && slots[sl].state == S_ACTIVE) {
                done[i] = 1;
                completed_at(i, ignore ? NULL : &sts[i]);
            } else if (!ignore && !status_empty(&sts[i])) {
                fprintf(
                    stderr,
                    "mpi_stress[%d]: %s: status source %d tag %d error %d\n",
                    rank, hn[how], sts[i].MPI_SOURCE, sts[i].MPI_TAG,
                    sts[i].MPI_ERROR);
                die("a null or inactive entry's status is not empty", i);
            }
        }
        break;
    case 2:
    case 3:
        do {
            if (how == 2) {
                rc = MPI_Waitany(ASIZE, reqs, &idx, so);
                flag = 1;
            } else {
                rc = MPI_Testany(ASIZE, reqs, &idx, &flag, so);
            }
        } while (rc == MPI_SUCCESS && !flag);
        if (rc != MPI_SUCCESS) {
            last_rc = rc;
            die(hn[how], -1);
        }
        if (idx == MPI_UNDEFINED || idx < 0 || idx >= ASIZE) {
            die("MPI_Wait/Testany gave no index with requests active", idx);
        }
        done[idx] = 1;
        completed_at(idx, ignore ? NULL : &one);
        break;
    case 4:
    case 5:
        do {
            if (how == 4) {
                rc = MPI_Waitsome(ASIZE, reqs, &cnt, idxs, sa);
            } else {
                rc = MPI_Testsome(ASIZE, reqs, &cnt, idxs, sa);
            }
        } while (rc == MPI_SUCCESS && cnt == 0);
        if (rc != MPI_SUCCESS) {
            last_rc = rc;
            die(hn[how], -1);
        }
        if (cnt == MPI_UNDEFINED || cnt < 1 || cnt > ASIZE) {
            die("MPI_Wait/Testsome: a wrong outcount with requests active",
                cnt);
        }
        for (int j = 0; j < cnt; j++) {
            if (idxs[j] < 0 || idxs[j] >= ASIZE || done[idxs[j]]) {
                die("MPI_Wait/Testsome: an index out of range or twice",
                    idxs[j]);
            }
            done[idxs[j]] = 1;
            completed_at(idxs[j], ignore ? NULL : &sts[j]);
        }
        break;
    default: {
        /* MPI_Wait / MPI_Test on one active slot */
        int sl;
        do {
            sl = (int)draw(&own_rng, WINDOW);
        } while (slots[sl].state != S_ACTIVE);
        idx = pos[sl];
        do {
            if (how == 6) {
                rc = MPI_Wait(&reqs[idx], so);
                flag = 1;
            } else {
                rc = MPI_Test(&reqs[idx], &flag, so);
            }
        } while (rc == MPI_SUCCESS && !flag);
        if (rc != MPI_SUCCESS) {
            die(hn[how], idx);
        }
        done[idx] = 1;
        completed_at(idx, ignore ? NULL : &one);
    }
    }
    unchanged(done);
}

static MPI_Status *garbage(MPI_Status *st)
{
    memset(st, 0x77, sizeof(*st));
    return st;
}

/* MPICH 4.0.2's own MPI_Testany of more than one request, none active,
 * leaves the status as it was (its MPI_Waitany writes an empty one) */
static int testany_empty(const MPI_Status *st)
{
#ifdef MPICH_VERSION
    (void)st;
    return 1;
#else
    return status_empty(st);
#endif
}

/* the completion calls on an array with nothing active in it (nulls and an
 * inactive persistent request) while operations are in flight elsewhere */
static void nothing_active(void)
{
    MPI_Request a[3] = {MPI_REQUEST_NULL, idle_persistent, MPI_REQUEST_NULL};
    MPI_Status sts[3], one;
    int idx = -5, flag = 0, cnt = -5, idxs[3];
    const char *what = NULL;
    for (int i = 0; i < 3; i++) {
        sts[i].MPI_ERROR = -77;
    }
    if (MPI_Waitany(3, a, &idx, garbage(&one)) != MPI_SUCCESS ||
        idx != MPI_UNDEFINED || !status_empty(&one)) {
        what = "MPI_Waitany with nothing active: not MPI_UNDEFINED and an "
               "empty status";
    } else if (MPI_Testany(3, a, &idx, &flag, garbage(&one)) != MPI_SUCCESS ||
               !flag || idx != MPI_UNDEFINED || !testany_empty(&one)) {
        what = "MPI_Testany with nothing active: not flag, MPI_UNDEFINED, "
               "an empty status";
    } else if (MPI_Waitsome(3, a, &cnt, idxs, sts) != MPI_SUCCESS ||
               cnt != MPI_UNDEFINED) {
        what = "MPI_Waitsome with nothing active: not MPI_UNDEFINED";
    } else if (MPI_Testsome(3, a, &cnt, idxs, sts) != MPI_SUCCESS ||
               cnt != MPI_UNDEFINED) {
        what = "MPI_Testsome with nothing active: not MPI_UNDEFINED";
    } else if (MPI_Waitall(3, a, sts) != MPI_SUCCESS ||
               !status_empty(&sts[0]) || !status_empty(&sts[1]) ||
               !status_empty(&sts[2])) {
        what = "MPI_Waitall with nothing active: not empty statuses";
    } else if (MPI_Testall(3, a, &flag, sts) != MPI_SUCCESS || !flag ||
               !status_empty(&sts[1])) {
        what = "MPI_Testall with nothing active: not flag and empty statuses";
    } else if (MPI_Wait(&a[1], garbage(&one)) != MPI_SUCCESS ||
               !status_empty(&one)) {
        what = "MPI_Wait on an inactive persistent request: not empty";
    } else if (MPI_Test(&a[0], &flag, garbage(&one)) != MPI_SUCCESS || !flag ||
               !status_empty(&one)) {
        what = "MPI_Test on MPI_REQUEST_NULL: not flag and empty status";
    } else if (MPI_Request_get_status(a[1], &flag, garbage(&one)) !=
                   MPI_SUCCESS ||
               !flag || !status_empty(&one)) {
        what = "MPI_Request_get_status of an inactive request: not empty";
    } else if (a[0] != MPI_REQUEST_NULL || a[1] != idle_persistent ||
               a[2] != MPI_REQUEST_NULL) {
        what = "a completion call with nothing active changed a handle";
    }
    if (what != NULL) {
        int cnt = -1;
        MPI_Get_count(&one, MPI_BYTE, &cnt);
        fprintf(stderr,
                "mpi_stress[%d]: index %d flag %d outcount %d; status source "
                "%d tag %d count %d\n",
                rank, idx, flag, cnt, one.MPI_SOURCE, one.MPI_TAG, cnt);
        die(what, -1);
    }
}

static void run(unsigned long s, unsigned long ops)
{
    seed = s;
    seq_rng = 0x243F6A8885A308D3ull ^ (s * 0x9E3779B97F4A7C15ull);
    own_rng = 0x13198A2E03707344ull ^ (s * 0x9E3779B97F4A7C15ull) ^
              ((uint64_t)(rank + 1) << 40);
    draw(&seq_rng, 2);
    draw(&own_rng, 2);
    /* the places of the slots, the nulls and the idle persistent request
     * in the array: the rank's own */
    int perm[ASIZE];
    for (int i = 0; i < ASIZE; i++) {
        perm[i] = i;
    }
    for (int i = ASIZE - 1; i > 0; i--) {
        int j = (int)draw(&own_rng, (unsigned)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < ASIZE; i++) {
        slot_at[i] = -1;
        reqs[i] = MPI_REQUEST_NULL;
    }
    for (int sl = 0; sl < WINDOW; sl++) {
        pos[sl] = perm[sl];
        slot_at[perm[sl]] = sl;
        slots[sl].state = S_FREE;
    }
    idle_at = perm[WINDOW + NULLS];
    reqs[idle_at] = idle_persistent;
    posted = completed = 0;
    nops = ops;
    for (int sl = 0; sl < WINDOW && nops > 0; sl++) {
        nops--;
        post(sl);
    }
    while (any_active()) {
        if (draw(&own_rng, 50) == 0) {
            nothing_active();
        }
        complete_some();
        repost();
    }
    for (int sl = 0; sl < WINDOW; sl++) {
        if (slots[sl].state == S_PINACTIVE) {
            MPI_Request_free(&reqs[pos[sl]]);
        }
        free(slots[sl].s);
        free(slots[sl].r);
        slots[sl].s = slots[sl].r = NULL;
        slots[sl].state = S_FREE;
    }
    nothing_active();
}

int main(int argc, char **argv)
{
    unsigned long s0 = 1, nseeds = 1, ops = 2000;
    int provided = MPI_THREAD_SINGLE, multiple = 0;
    for (int i = 1; i < argc; i++) {
        multiple |= strcmp(argv[i], "--thread-multiple") == 0;
    }
    if (multiple) {
        /* MPI_THREAD_MULTIPLE: the mpi4py case (one thread calls MPI) */
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seed") == 0) {
            s0 = strtoul(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--seeds") == 0) {
            nseeds = strtoul(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--ops") == 0) {
            ops = strtoul(argv[i + 1], NULL, 0);
        } else if (strcmp(argv[i], "--ppn") == 0) {
            ppn = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--signal-at") == 0 && i + 2 < argc) {
            signal_at = strtoul(argv[i + 1], NULL, 0);
            signal_file = argv[i + 2];
            i++;
        } else if (strcmp(argv[i], "--thread-multiple") == 0) {
            i--; /* no value */
        }
    }
    if (size > 64) {
        if (rank == 0) {
            fprintf(stderr, "mpi_stress: at most 64 ranks\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* errors reported here (with the seed), not by MPI's abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int c = 0; c < NCOMM; c++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
    }
    /* an inactive persistent request of MPI's own, never started */
    static int dummy;
    MPI_Recv_init(&dummy, 1, MPI_INT, MPI_ANY_SOURCE, 99, comms[0],
                  &idle_persistent);
    double t0 = MPI_Wtime();
    for (unsigned long s = s0; s < s0 + nseeds; s++) {
        run(s, ops);
        int all = 0;
        MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (all != 0) {
            if (rank == 0) {
                printf("mpi_stress: FAILED seed %lu: %d wrong results\n", s,
                       all);
            }
            MPI_Finalize();
            return 1;
        }
    }
    double t = MPI_Wtime() - t0;
    MPI_Request_free(&idle_persistent);
    for (int c = 0; c < NCOMM; c++) {
        MPI_Comm_free(&comms[c]);
    }
    if (rank == 0) {
        /* a communicator with two ranks on a host is hierarchical: its
         * non-blocking operations take the node step, on shared memory up
         * to one slot and on PMPI above (counted at posting) */
        const char *tm = getenv("SHARP_MPI_THREAD_MULTIPLE");
        unsigned long m =
            provided >= MPI_THREAD_MULTIPLE && tm != NULL && !strcmp(tm, "0")
                ? 0
                : (unsigned long)size;
        printf("mpi_stress: expect offloaded MPI_Iallreduce %lu MPI_Ireduce "
               "%lu MPI_Ibcast %lu MPI_Ibarrier %lu\n",
               expect[0] * m, expect[1] * m, expect[2] * m, expect[3] * m);
        printf("mpi_stress: seeds %lu-%lu, %lu operations each, %d ranks "
               "(%d a host): every result right (%.1f s)\n",
               s0, s0 + nseeds - 1, ops, size, ppn, t);
    }
    MPI_Finalize();
    return 0;
}
