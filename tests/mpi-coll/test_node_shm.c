/*
 * The node-local step on shared memory (mpi-coll/node_shm.c) with real
 * processes: the test forks the leader, which creates the segment and hands
 * the handle back, then the other node ranks, which attach by it; all meet
 * in a barrier, the leader unlinks, and each runs the case's body.  A
 * rank's exit code is its verdict (0 right).
 *
 * Results are checked against references the test computes itself: every
 * rank's input regenerated from its seed and folded with shp_reduce_fold
 * over the whole message in node-rank order (every dtype and op the engine
 * takes, sizes across the chunk boundary), or plain loops.  Failures: a rank
 * that is slow, killed (SIGKILL; left a zombie while the others run), or
 * stuck past the timeout; segments that must be refused; nothing left in
 * /dev/shm.
 */
#include "mpi-coll/node_shm.h"
#include "reduce/reduce.h"
#include "tests/support/test_util.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 8
#define SLOT 1024 /* small slots: chunking is cheap to reach */

typedef int (*body_t)(smn_node_t *nd, unsigned rank, void *arg);

static char seg_name[64]; /* the last run's segment */

static smn_opts_t test_opts(void)
{
    smn_opts_t o;
    smn_opts_default(&o);
    o.slot_bytes = SLOT;
    o.timeout_ms = 5000;
    o.period_ms = 20;
    return o;
}

static uint64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int shm_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return access(path, F_OK) == 0;
}

/* a rank's life: attach (or create), barrier, unlink, body, destroy */
static int rank_main(unsigned rank, unsigned n, const smn_opts_t *o,
                     smn_handle_t *h, int pipefd, body_t body, void *arg)
{
    smn_node_t *nd = NULL;
    shp_status_t st =
        rank == 0 ? smn_create(n, o, &nd, h) : smn_attach(h, rank, o, &nd);
    if (rank == 0) {
        smn_handle_t none = {{0}, 0, 0, 0, 0};
        if (write(pipefd, st == SHP_OK ? h : &none, sizeof(*h)) !=
            (ssize_t)sizeof(*h)) {
            return 90;
        }
    }
    if (st != SHP_OK) {
        fprintf(stderr, "rank %u: setup: %s\n", rank, shp_status_str(st));
        return 91;
    }
    int rc = 0;
    st = smn_barrier(nd, NULL, NULL, NULL);
    if (st == SHP_OK && rank == 0) {
        st = smn_unlink(nd);
        if (st == SHP_OK && shm_exists(h->name)) {
            rc = 93; /* unlinked, still there */
        }
    }
    if (st != SHP_OK) {
        rc = 92;
    }
    if (rc == 0) {
        rc = body(nd, rank, arg);
    }
    smn_destroy(nd);
    return rc;
}

/* n ranks run body; codes[i]: exit code, or 128 + signal */
static void run_node(unsigned n, const smn_opts_t *o, body_t body, void *arg,
                     int *codes)
{
    int p[2];
    pid_t pid[MAXN];
    smn_handle_t h;
    assert_int_equal(pipe(p), 0);
    for (unsigned i = 0; i < n; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            alarm(60);
            close(p[0]);
            _exit(rank_main(i, n, o, &h, p[1], body, arg));
        }
        if (i == 0) {
            assert_int_equal(read(p[0], &h, sizeof(h)), sizeof(h));
            snprintf(seg_name, sizeof(seg_name), "%s", h.name);
        }
    }
    close(p[0]);
    close(p[1]);
    /* in rank order: a rank killed early stays a zombie meanwhile */
    for (unsigned i = 0; i < n; i++) {
        int ws;
        assert_int_equal(waitpid(pid[i], &ws, 0), pid[i]);
        codes[i] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
}

static void expect_all(unsigned n, const int *codes, int want)
{
    for (unsigned i = 0; i < n; i++) {
        if (codes[i] != want) {
            fail_msg("rank %u exited %d, expected %d", i, codes[i], want);
        }
    }
    assert_false(shm_exists(seg_name));
}

/* Inputs ------------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* rank r's input for a case: random bytes (NaNs, -0, anything) */
static void fill(void *buf, size_t bytes, uint64_t seed, unsigned r)
{
    uint64_t s = mix(seed * 131 + r);
    unsigned char *b = buf;
    for (size_t i = 0; i < bytes; i++) {
        if (i % 8 == 0) {
            s = mix(s);
        }
        b[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
}

/* the reference: every rank's input folded over the whole message, in
 * node-rank order */
static int reference(const shp_reduce_desc_t *d, size_t count, uint64_t seed,
                     unsigned n, void *out)
{
    size_t bytes = count * shp_reduce_elem_size(d);
    char *in = malloc(bytes * n + 1);
    const void *srcs[MAXN];
    for (unsigned r = 0; r < n; r++) {
        fill(in + r * bytes, bytes, seed, r);
        srcs[r] = in + r * bytes;
    }
    int ok = shp_reduce_fold(d, out, srcs, n, count) == SHP_OK;
    free(in);
    return ok;
}

/* Every dtype and op ------------------------------------------------------ */

static int one_allreduce(smn_node_t *nd, unsigned rank,
                         const shp_reduce_desc_t *d, size_t count,
                         uint64_t seed)
{
    size_t bytes = count * shp_reduce_elem_size(d);
    char *src = malloc(bytes + 1), *dst = malloc(bytes + 1),
         *ref = malloc(bytes + 1);
    int rc = 0, code = -1;
    fill(src, bytes, seed, rank);
    shp_status_t st = smn_allreduce(nd, d, src, dst, count, NULL, NULL, &code);
    if (st != SHP_OK || code != 0) {
        fprintf(stderr, "rank %u: %s %s x%zu: %s\n", rank,
                shp_dtype_name(d->dtype), shp_op_name(d->op), count,
                shp_status_str(st));
        rc = 10;
    } else if (!reference(d, count, seed, smn_size(nd), ref)) {
        rc = 11;
    } else if (memcmp(dst, ref, bytes) != 0) {
        fprintf(stderr, "rank %u: %s %s x%zu: result differs\n", rank,
                shp_dtype_name(d->dtype), shp_op_name(d->op), count);
        rc = 12;
    }
    free(src);
    free(dst);
    free(ref);
    return rc;
}

static int types_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    static const shp_dtype_t tags[] = {SHP_DTYPE_NULL, SHP_DTYPE_I32,
                                       SHP_DTYPE_U8};
    uint64_t seed = 1;
    int cases = 0;
    for (int dt = 0; dt < SHP_DTYPE_LAST; dt++) {
        for (int op = 0; op < SHP_OP_LAST; op++) {
            for (unsigned t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
                shp_reduce_desc_t d = {(shp_dtype_t)dt, (shp_op_t)op, tags[t]};
                if (shp_reduce_desc_check(&d, NULL) != SHP_OK) {
                    continue;
                }
                size_t c = smn_chunk_count(nd, &d);
                size_t counts[] = {1, c - 1, c, c + 1, 2 * c + 3};
                for (unsigned k = 0; k < 5; k++) {
                    int rc = one_allreduce(nd, rank, &d, counts[k], seed++);
                    if (rc != 0) {
                        return rc;
                    }
                }
                cases++;
            }
        }
    }
    return cases >= 96 ? 0 : 13; /* the table was walked */
}

static void test_types_8(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(8, &o, types_body, NULL, codes);
    expect_all(8, codes, 0);
}

/* a few descriptors at every node size 1..8 */
static int sizes_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    static const shp_reduce_desc_t ds[] = {
        {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL},
        {SHP_DTYPE_I8, SHP_OP_PROD, SHP_DTYPE_NULL},
        {SHP_DTYPE_BF16, SHP_OP_MAX, SHP_DTYPE_NULL},
        {SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_I32},
    };
    for (unsigned i = 0; i < 4; i++) {
        size_t c = smn_chunk_count(nd, &ds[i]);
        for (size_t count = 1; count <= 3 * c + 1; count += c / 3 + 1) {
            int rc = one_allreduce(nd, rank, &ds[i], count, 1000 + count);
            if (rc != 0) {
                return rc;
            }
        }
    }
    return 0;
}

static void test_node_sizes(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    for (unsigned n = 1; n <= MAXN; n++) {
        run_node(n, &o, sizes_body, NULL, codes);
        expect_all(n, codes, 0);
    }
}

/* The fold's order, against a plain loop ----------------------------------- */

/* rank r's j-th value: 2^(60 - 10r) style magnitudes, so that a sum's
 * rounding depends on the order */
static double ordered_value(unsigned r, size_t j)
{
    static const double mags[] = {1e16, 1.0, -1e16, 3.0, 0.5, 1e-3, 7.0, 2.5};
    return mags[(r + j) % MAXN] * (1.0 + (double)(j % 7) / 8.0);
}

static int order_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_F64, SHP_OP_SUM, SHP_DTYPE_NULL};
    size_t count = 3 * smn_chunk_count(nd, &d) + 5;
    double *src = malloc(count * 8), *dst = malloc(count * 8);
    unsigned n = smn_size(nd);
    int rc = 0, order_matters = 0;
    for (size_t j = 0; j < count; j++) {
        src[j] = ordered_value(rank, j);
    }
    if (smn_allreduce(nd, &d, src, dst, count, NULL, NULL, NULL) != SHP_OK) {
        rc = 20;
    }
    for (size_t j = 0; j < count && rc == 0; j++) {
        double fwd = ordered_value(0, j), bwd = ordered_value(n - 1, j);
        for (unsigned r = 1; r < n; r++) {
            fwd += ordered_value(r, j);
            bwd += ordered_value(n - 1 - r, j);
        }
        order_matters |= memcmp(&fwd, &bwd, 8) != 0;
        if (memcmp(&fwd, &dst[j], 8) != 0) {
            fprintf(stderr, "rank %u: element %zu: %a, loop %a\n", rank, j,
                    dst[j], fwd);
            rc = 21;
        }
    }
    free(src);
    free(dst);
    return rc != 0 ? rc : order_matters ? 0 : 22;
}

static void test_fold_order(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(8, &o, order_body, NULL, codes);
    expect_all(8, codes, 0);
}

/* Many operations of every kind, one after the other ------------------------ */

#define MANY_OPS 2000

static uint64_t val(unsigned r, unsigned it, size_t j)
{
    return mix((uint64_t)it << 32 ^ (uint64_t)j << 8 ^ r);
}

/* the leader's hook: the sharp call's stand-in, adds the iteration */
static int add_it(void *arg, void *buf, size_t count, size_t offset)
{
    unsigned it = *(unsigned *)arg;
    uint64_t *v = buf;
    for (size_t j = 0; j < count; j++) {
        v[j] += it + offset + j;
    }
    return 0;
}

static int barrier_code(void *arg, void *buf, size_t count, size_t offset)
{
    (void)buf, (void)count, (void)offset;
    return (int)*(unsigned *)arg + 1;
}

static int many_allreduce(smn_node_t *nd, unsigned rank, unsigned it,
                          uint64_t *src, uint64_t *dst)
{
    shp_reduce_desc_t d = {SHP_DTYPE_U64, SHP_OP_SUM, SHP_DTYPE_NULL};
    size_t count = 1 + (size_t)mix(it) % (3 * (SLOT / 8));
    for (size_t j = 0; j < count; j++) {
        src[j] = val(rank, it, j);
    }
    if (smn_allreduce(nd, &d, src, dst, count, add_it, &it, NULL) != SHP_OK) {
        return 30;
    }
    for (size_t j = 0; j < count; j++) {
        uint64_t want = it + j;
        for (unsigned r = 0; r < smn_size(nd); r++) {
            want += val(r, it, j);
        }
        if (dst[j] != want) {
            fprintf(stderr, "rank %u op %u: [%zu] %llu != %llu\n", rank, it, j,
                    (unsigned long long)dst[j], (unsigned long long)want);
            return 31;
        }
    }
    return 0;
}

static int many_gather(smn_node_t *nd, unsigned rank, unsigned it,
                       uint64_t *src)
{
    size_t count = 1 + it % (SLOT / 8);
    const void *srcs[MAXN];
    uint64_t sum = 0, got = 0;
    for (size_t j = 0; j < count; j++) {
        src[j] = val(rank, it, j);
    }
    if (smn_gather(nd, src, count * 8, srcs) != SHP_OK) {
        return 40;
    }
    if (rank == 0) { /* each contribution apart, as its rank sent it */
        for (unsigned r = 0; r < smn_size(nd); r++) {
            for (size_t j = 0; j < count; j++) {
                uint64_t v;
                memcpy(&v, (const char *)srcs[r] + j * 8, 8);
                if (v != val(r, it, j)) {
                    return 41;
                }
                sum += v * (r + 1);
            }
        }
    }
    if (smn_result(nd, &sum, 8, NULL) != SHP_OK) {
        return 42;
    }
    for (unsigned r = 0; r < smn_size(nd); r++) {
        for (size_t j = 0; j < count; j++) {
            got += val(r, it, j) * (r + 1);
        }
    }
    return sum == got ? 0 : 43;
}

static int many_bcast(smn_node_t *nd, unsigned rank, unsigned it, uint64_t *buf)
{
    unsigned root = it % smn_size(nd);
    size_t count = 1 + (size_t)mix(it + 7) % (3 * (SLOT / 8));
    for (size_t j = 0; j < count; j++) {
        buf[j] = rank == root ? val(root, it, j) : 0;
    }
    if (smn_bcast(nd, buf, count * 8, root) != SHP_OK) {
        return 50;
    }
    for (size_t j = 0; j < count; j++) {
        if (buf[j] != val(root, it, j)) {
            return 51;
        }
    }
    return 0;
}

static int many_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    uint64_t *a = malloc(3 * SLOT + 8), *b = malloc(3 * SLOT + 8);
    int rc = 0;
    for (unsigned it = 0; it < MANY_OPS && rc == 0; it++) {
        int code = -1;
        switch (it % 4) {
        case 0: rc = many_allreduce(nd, rank, it, a, b); break;
        case 1: rc = many_bcast(nd, rank, it, a); break;
        case 2: rc = many_gather(nd, rank, it, a); break;
        default:
            if (smn_barrier(nd, barrier_code, &it, &code) != SHP_OK ||
                code != (int)it + 1) {
                rc = 60;
            }
        }
    }
    smn_stats_t st;
    smn_get_stats(nd, &st);
    if (rc == 0 && st.ops < MANY_OPS) {
        rc = 61;
    }
    free(a);
    free(b);
    return rc;
}

static void test_many_ops(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(8, &o, many_body, NULL, codes);
    expect_all(8, codes, 0);
}

/* The per-chunk calls the integration makes ------------------------------ */

/* the leader's hook fails on the second chunk */
static int fail_second(void *arg, void *buf, size_t count, size_t offset)
{
    (void)arg, (void)buf, (void)count;
    return offset == 0 ? 0 : 7;
}

static int chunk_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_U32, SHP_OP_BXOR, SHP_DTYPE_NULL};
    size_t c = smn_chunk_count(nd, &d), n = smn_size(nd);
    uint32_t src[3 * SLOT / 4 + 1], dst[3 * SLOT / 4 + 1];
    for (size_t j = 0; j < 3 * c + 1; j++) {
        src[j] = (uint32_t)val(rank, 1, j);
        dst[j] = 0xdeadbeef;
    }
    if (smn_reduce(nd, &d, src, c + 1, dst) != SHP_ERR_TOO_LARGE) {
        return 100;
    }
    /* the fold straight into the result area, published from it */
    uint32_t *area = smn_result_area(nd);
    if (smn_reduce(nd, &d, src, c, rank == 0 ? area : NULL) != SHP_OK ||
        smn_result(nd, rank == 0 ? area : dst, c * 4, NULL) != SHP_OK) {
        return 101;
    }
    if (rank == 0) {
        memcpy(dst, area, c * 4);
    }
    for (size_t j = 0; j < c; j++) {
        uint32_t want = 0;
        for (unsigned r = 0; r < n; r++) {
            want ^= (uint32_t)val(r, 1, j);
        }
        if (dst[j] != want) {
            return 102;
        }
    }
    /* a hook's code stops the chunks after the one it came with, on every
     * rank: the chunk before written; the chunk that came with the code
     * carries no data (the leader's holds its fold), the rest untouched */
    int code = 0;
    for (size_t j = 0; j < 3 * c + 1; j++) {
        dst[j] = 0xdeadbeef;
    }
    if (smn_allreduce(nd, &d, src, dst, 3 * c + 1, fail_second, NULL, &code) !=
            SHP_OK ||
        code != 7) {
        return 103;
    }
    for (size_t j = 0; j < 3 * c + 1; j++) {
        uint32_t want = 0;
        for (unsigned r = 0; r < n; r++) {
            want ^= (uint32_t)val(r, 1, j);
        }
        int lead = smn_rank(nd) == 0;
        if ((j < c && dst[j] != want) ||
            (j >= c && j < 2 * c && dst[j] != (lead ? want : 0xdeadbeef)) ||
            (j >= 2 * c && dst[j] != 0xdeadbeef)) {
            return 104;
        }
    }
    /* a result call without its reduce is refused, the segment unharmed */
    if (smn_result(nd, dst, 4, NULL) != SHP_ERR_INVALID_PARAM) {
        return 105;
    }
    /* the callers disagree on the result's length: an error, not a copy */
    const void *srcs[MAXN];
    uint32_t one = 1;
    if (smn_gather(nd, &one, 4, srcs) != SHP_OK) {
        return 106;
    }
    shp_status_t st = smn_result(nd, &one, rank == 0 ? 4 : 8, NULL);
    if (st != (rank == 0 ? SHP_OK : SHP_ERR_MISMATCH)) {
        return 107;
    }
    return smn_barrier(nd, NULL, NULL, NULL) == SHP_OK ? 0 : 108;
}

static void test_chunk_calls(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(3, &o, chunk_body, NULL, codes);
    expect_all(3, codes, 0);
}

/* A slow rank ----------------------------------------------------------------- */

static int slow_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL};
    uint64_t t0 = ms_now();
    for (unsigned it = 0; it < 20; it++) {
        if (rank == 2 && it % 4 == 1) {
            usleep(50000);
        }
        int rc = one_allreduce(nd, rank, &d, 300 + it, 500 + it);
        if (rc != 0) {
            return rc;
        }
    }
    smn_stats_t st;
    smn_get_stats(nd, &st);
    /* the leader slept while rank 2 was slow, and was woken: not left to
     * the end of its 2 s slice (5 x 50 ms of delays in all) */
    if (rank == 0 && st.sleeps == 0) {
        return 70;
    }
    if (rank == 2 && st.wakes == 0) {
        return 71;
    }
    return ms_now() - t0 < 1500 ? 0 : 72;
}

static void test_slow_rank(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.period_ms = 2000;
    run_node(4, &o, slow_body, NULL, codes);
    expect_all(4, codes, 0);
}

/* Ranks that arrive one after another, in node-rank order (the order that
 * made a leader waiting on each rank's word in turn wake once per rank):
 * the leader sleeps once an operation, woken by the last rank only. */
#define STAGGER_OPS 30

static int stagger_body(smn_node_t *nd, unsigned rank, void *arg)
{
    shp_reduce_desc_t d = {SHP_DTYPE_I64, SHP_OP_MAX, SHP_DTYPE_NULL};
    smn_stats_t a, b;
    smn_get_stats(nd, &a);
    for (unsigned it = 0; it < STAGGER_OPS; it++) {
        usleep(400 * rank); /* rank 0 first, then 1, 2, ... */
        int rc = one_allreduce(nd, rank, &d, 40, 900 + it);
        if (rc != 0) {
            return rc;
        }
    }
    smn_get_stats(nd, &b);
    uint64_t sleeps = b.sleeps - a.sleeps, wakes = b.wakes - a.wakes;
    if (rank == 0 && (sleeps < STAGGER_OPS / 2 || sleeps > STAGGER_OPS + 5)) {
        fprintf(stderr, "leader: %llu sleeps in %d operations\n",
                (unsigned long long)sleeps, STAGGER_OPS);
        return 20;
    }
    _Atomic uint64_t *woke = arg; /* shared with the test */
    if (rank != 0) {              /* (the leader's wake its publication) */
        atomic_fetch_add(woke, wakes);
    }
    return 0;
}

static void test_staggered_arrivals(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.yield_ns = 0; /* the leader sleeps at once: its wakes are counted */
    _Atomic uint64_t *woke = mmap(NULL, sizeof(*woke), PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(woke != MAP_FAILED);
    atomic_store(woke, 0);
    run_node(MAXN, &o, stagger_body, (void *)woke, codes);
    expect_all(MAXN, codes, 0);
    /* the other ranks' wakes: at most one an operation (the last rank's),
     * whichever rank that was */
    uint64_t total = atomic_load(woke);
    munmap((void *)woke, sizeof(*woke));
    if (total > STAGGER_OPS) {
        fail_msg("%llu wakes in %d operations", (unsigned long long)total,
                 STAGGER_OPS);
    }
}

/* Waits look between sched_yield calls for yield_ns before they sleep:
 * ranks 3 ms late are met without a sleep with a long yield_ns, and with
 * none the leader sleeps for them. */
static int yield_body(smn_node_t *nd, unsigned rank, void *arg)
{
    const unsigned *yield_ms = arg;
    shp_reduce_desc_t d = {SHP_DTYPE_U32, SHP_OP_BOR, SHP_DTYPE_NULL};
    smn_stats_t a, b;
    smn_get_stats(nd, &a);
    for (unsigned it = 0; it < 10; it++) {
        if (rank != 0) {
            usleep(3000);
        }
        int rc = one_allreduce(nd, rank, &d, 16, 70 + it);
        if (rc != 0) {
            return rc;
        }
    }
    smn_get_stats(nd, &b);
    uint64_t sleeps = b.sleeps - a.sleeps;
    if (rank == 0 && (*yield_ms != 0 ? sleeps != 0 : sleeps < 5)) {
        fprintf(stderr, "leader, yield %u ms: %llu sleeps in 10 operations\n",
                *yield_ms, (unsigned long long)sleeps);
        return 30;
    }
    return 0;
}

static void test_yield_wait(void **state)
{
    (void)state;
    static const unsigned yields_ms[] = {500, 0};
    for (unsigned k = 0; k < 2; k++) {
        smn_opts_t o = test_opts();
        int codes[MAXN];
        o.yield_ns = yields_ms[k] * 1000000u;
        run_node(4, &o, yield_body, (void *)&yields_ms[k], codes);
        expect_all(4, codes, 0);
    }
}

/* A rank killed while a rank before it in the node is slow to arrive: the
 * leader names the dead one at once, not the slow one at the timeout. */
static int dead_behind_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t src[64] = {0}, dst[64];
    for (unsigned it = 0;; it++) {
        uint64_t t0 = ms_now();
        if (it == 5 && rank == 3) {
            raise(SIGKILL);
        }
        if (it == 5 && rank == 1) {
            usleep(2500 * 1000);
        }
        shp_status_t st = smn_allreduce(nd, &d, src, dst, 64, NULL, NULL, NULL);
        if (it < 5) {
            if (st != SHP_OK) {
                return 80;
            }
            continue;
        }
        if (st != SHP_ERR_GROUP_FAILED || smn_failed_rank(nd) != 3) {
            fprintf(stderr, "rank %u: %s, rank %d\n", rank, shp_status_str(st),
                    smn_failed_rank(nd));
            return 81;
        }
        /* rank 1 comes back to a segment failed meanwhile */
        return rank == 1 || ms_now() - t0 < 1000 ? 0 : 82;
    }
}

static void test_dead_behind_slow(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(4, &o, dead_behind_body, NULL, codes);
    for (unsigned i = 0; i < 4; i++) {
        int want = i == 3 ? 128 + SIGKILL : 0;
        if (codes[i] != want) {
            fail_msg("rank %u exited %d, expected %d", i, codes[i], want);
        }
    }
    assert_false(shm_exists(seg_name));
}

/* A rank killed, a rank stuck ------------------------------------------------ */

typedef struct fault {
    unsigned victim;
    int kind;          /* 0 SIGKILL in an allreduce, 1 in a bcast it roots,
                          2 stuck (sleeps past the timeout) */
    shp_status_t want; /* what the others get */
    unsigned max_ms;   /* and how soon */
} fault_t;

#define FAULT_AT 50

static int fault_body(smn_node_t *nd, unsigned rank, void *arg)
{
    const fault_t *f = arg;
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t src[600], dst[600];
    for (unsigned it = 0; it < FAULT_AT + 10; it++) {
        uint64_t t0 = ms_now();
        if (rank == f->victim && it == FAULT_AT) {
            if (f->kind == 2) {
                usleep(1500 * 1000);
            } else {
                raise(SIGKILL);
            }
        }
        for (unsigned j = 0; j < 600; j++) {
            src[j] = (int32_t)(rank * 1000 + j + it);
        }
        shp_status_t st =
            f->kind == 1 && it == FAULT_AT
                ? smn_bcast(nd, src, sizeof(src), f->victim)
                : smn_allreduce(nd, &d, src, dst, 600, NULL, NULL, NULL);
        if (it < FAULT_AT) {
            if (st != SHP_OK) {
                return 80;
            }
            continue;
        }
        if (rank == f->victim) { /* back from a stall: failed for it too */
            return st == SHP_ERR_TIMED_OUT ? 0 : 81;
        }
        if (st == SHP_OK) {
            return 82; /* a result without the victim: wrong */
        }
        if (st != f->want || smn_failed_rank(nd) != (int)f->victim) {
            fprintf(stderr, "rank %u: %s, rank %d\n", rank, shp_status_str(st),
                    smn_failed_rank(nd));
            return 83;
        }
        if (ms_now() - t0 > f->max_ms) {
            fprintf(stderr, "rank %u: failed after %llu ms\n", rank,
                    (unsigned long long)(ms_now() - t0));
            return 84;
        }
        /* the segment stays failed */
        return smn_barrier(nd, NULL, NULL, NULL) == f->want ? 0 : 85;
    }
    return 86;
}

static void run_fault(unsigned n, const fault_t *f, unsigned timeout_ms)
{
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.timeout_ms = timeout_ms;
    run_node(n, &o, fault_body, (void *)f, codes);
    for (unsigned i = 0; i < n; i++) {
        int want = i == f->victim && f->kind != 2 ? 128 + SIGKILL : 0;
        if (codes[i] != want) {
            fail_msg("rank %u exited %d, expected %d", i, codes[i], want);
        }
    }
    assert_false(shm_exists(seg_name));
}

/* killed: found dead (its pidfd), well before the 5 s timeout */
static void test_killed_member(void **state)
{
    (void)state;
    fault_t f = {2, 0, SHP_ERR_GROUP_FAILED, 1000};
    run_fault(4, &f, 5000);
}

static void test_killed_leader(void **state)
{
    (void)state;
    fault_t f = {0, 0, SHP_ERR_GROUP_FAILED, 1000};
    run_fault(4, &f, 5000);
}

static void test_killed_bcast_root(void **state)
{
    (void)state;
    fault_t f = {3, 1, SHP_ERR_GROUP_FAILED, 1000};
    run_fault(5, &f, 5000);
}

/* alive but late: the timeout (300 ms), then the segment is failed */
static void test_stuck_member(void **state)
{
    (void)state;
    fault_t f = {1, 2, SHP_ERR_TIMED_OUT, 1200};
    run_fault(3, &f, 300);
}

/* no timeout (what MPI programs get: a rank may come to a collective as
 * late as it likes): a rank 1.5 s late is waited for, the results right;
 * a dead one is still found at once */
static int late_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t src = (int32_t)rank + 1, dst = 0;
    for (unsigned it = 0; it < 3; it++) {
        if (rank == 1 && it == 1) {
            usleep(1500 * 1000);
        }
        if (smn_allreduce(nd, &d, &src, &dst, 1, NULL, NULL, NULL) != SHP_OK) {
            return 90;
        }
        if (dst != (int32_t)(smn_size(nd) * (smn_size(nd) + 1) / 2)) {
            return 91;
        }
    }
    return 0;
}

static void test_no_timeout(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.timeout_ms = 0;
    run_node(3, &o, late_body, NULL, codes);
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(codes[i], 0);
    }
    fault_t f = {2, 0, SHP_ERR_GROUP_FAILED, 1000};
    run_fault(4, &f, 0);
}

/* a rank killed before the first barrier (found dead), the leader killed
 * before it unlinked, a rank that never came (the timeout): destroy leaves
 * nothing behind */
static void test_killed_before_unlink(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    smn_node_t *nd;
    smn_handle_t h;
    o.timeout_ms = 300;
    assert_int_equal(smn_create(3, &o, &nd, &h), SHP_OK);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        smn_node_t *m;
        alarm(20);
        if (smn_attach(&h, 1, &o, &m) != SHP_OK) {
            _exit(1);
        }
        raise(SIGKILL);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws));
    uint64_t t0 = ms_now();
    assert_int_equal(smn_barrier(nd, NULL, NULL, NULL), SHP_ERR_GROUP_FAILED);
    assert_int_equal(smn_failed_rank(nd), 1);
    assert_true(ms_now() - t0 < 250); /* found dead, not timed out */
    assert_int_equal(smn_unlink(nd), SHP_ERR_BUSY); /* 2 never came */
    assert_true(shm_exists(h.name));
    smn_destroy(nd);
    assert_false(shm_exists(h.name));

    /* the leader killed before it unlinked: a member's destroy does */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        if (smn_create(2, &o, &nd, &h) != SHP_OK ||
            write(p[1], &h, sizeof(h)) != (ssize_t)sizeof(h)) {
            _exit(1);
        }
        raise(SIGKILL);
    }
    assert_int_equal(read(p[0], &h, sizeof(h)), sizeof(h));
    close(p[0]);
    close(p[1]);
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_int_equal(smn_attach(&h, 1, &o, &nd), SHP_OK);
    t0 = ms_now();
    assert_int_equal(smn_barrier(nd, NULL, NULL, NULL), SHP_ERR_GROUP_FAILED);
    assert_int_equal(smn_failed_rank(nd), 0);
    assert_true(ms_now() - t0 < 250);
    assert_true(shm_exists(h.name));
    smn_destroy(nd);
    assert_false(shm_exists(h.name));

    assert_int_equal(smn_create(2, &o, &nd, &h), SHP_OK);
    t0 = ms_now();
    assert_int_equal(smn_barrier(nd, NULL, NULL, NULL), SHP_ERR_TIMED_OUT);
    assert_int_equal(smn_failed_rank(nd), 1);
    assert_true(ms_now() - t0 >= 300);
    smn_destroy(nd);
    assert_false(shm_exists(h.name));
}

/* Segments refused ------------------------------------------------------------ */

static char *map_seg(const smn_handle_t *h)
{
    int fd = shm_open(h->name, O_RDWR, 0);
    assert_true(fd >= 0);
    char *p =
        mmap(NULL, h->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    return p;
}

static void expect_refused(const smn_handle_t *h, unsigned rank,
                           shp_status_t want)
{
    smn_opts_t o = test_opts();
    smn_node_t *nd = NULL;
    assert_int_equal(smn_attach(h, rank, &o, &nd), want);
    assert_null(nd);
}

static void test_refused(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    smn_node_t *l, *l2, *m;
    smn_handle_t h, h2, bad;
    assert_int_equal(smn_create(3, &o, &l, &h), SHP_OK);
    o.slot_bytes = 2 * SLOT;
    assert_int_equal(smn_create(3, &o, &l2, &h2), SHP_OK);
    o = test_opts();
    /* the handle itself */
    expect_refused(&h, 0, SHP_ERR_INVALID_PARAM);
    expect_refused(&h, 3, SHP_ERR_INVALID_PARAM);
    bad = h;
    bad.seg_bytes += 64;
    expect_refused(&bad, 1, SHP_ERR_INVALID_PARAM);
    bad = h;
    memset(bad.name, 'x', sizeof(bad.name));
    expect_refused(&bad, 1, SHP_ERR_INVALID_PARAM);
    bad = h;
    memcpy(bad.name, "/etc/passwd", 12);
    expect_refused(&bad, 1, SHP_ERR_INVALID_PARAM);
    /* the other segment's name: its size is not the handle's */
    bad = h;
    memcpy(bad.name, h2.name, sizeof(bad.name));
    expect_refused(&bad, 1, SHP_ERR_MISMATCH);
    bad = h;
    bad.cookie ^= 1;
    expect_refused(&bad, 1, SHP_ERR_MISMATCH);
    /* what is mapped: magic, version */
    char *p = map_seg(&h);
    uint64_t magic;
    uint32_t version;
    memcpy(&magic, p, 8);
    memcpy(&version, p + 8, 4);
    p[0] ^= 0x55;
    expect_refused(&h, 1, SHP_ERR_PROTO);
    memcpy(p, &magic, 8);
    uint32_t v2 = version + 1;
    memcpy(p + 8, &v2, 4);
    expect_refused(&h, 1, SHP_ERR_VERSION);
    memcpy(p + 8, &version, 4);
    munmap(p, h.seg_bytes);
    /* a file others may read */
    int fd = shm_open(h.name, O_RDWR, 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    expect_refused(&h, 1, SHP_ERR_PERM);
    assert_int_equal(fchmod(fd, 0600), 0);
    close(fd);
    /* right: once per rank */
    assert_int_equal(smn_attach(&h, 1, &o, &m), SHP_OK);
    expect_refused(&h, 1, SHP_ERR_EXISTS);
    assert_int_equal(smn_unlink(l), SHP_ERR_BUSY);
    assert_true(shm_exists(h.name));
    smn_destroy(m);
    smn_destroy(l);
    smn_destroy(l2);
    assert_false(shm_exists(h.name));
    assert_false(shm_exists(h2.name));
    expect_refused(&h, 2, SHP_ERR_NOT_FOUND);
}

/* Non-blocking steps (smn_nb_*) -------------------------------------------- *
 *
 * A test-side operation made of them, as libsharp_mpi's MPI_Iallreduce
 * drives them: an allreduce of count elements in chunks of one slot, each
 * chunk one step; step() advances it without waiting and says whether it
 * is done.  The leader publishes the fold as it is (a node-only
 * allreduce: no network part), so the reference is the fold over the
 * whole message in node-rank order. */

typedef struct nbop {
    smn_node_t *nd;
    shp_reduce_desc_t d;
    size_t count, off, m;
    const char *src;
    char *dst;
    int arrived, done;
} nbop_t;

static void nbop_init(nbop_t *o, smn_node_t *nd, const shp_reduce_desc_t *d,
                      size_t count, const void *src, void *dst)
{
    memset(o, 0, sizeof(*o));
    o->nd = nd;
    o->d = *d;
    o->count = count;
    o->src = src;
    o->dst = dst;
}

/* 1 done, 0 not yet, < 0 a status */
static int nbop_step(nbop_t *o)
{
    size_t es = shp_reduce_elem_size(&o->d);
    for (;;) {
        if (o->done) {
            return 1;
        }
        shp_status_t st;
        if (!o->arrived) {
            size_t c = smn_chunk_count(o->nd, &o->d);
            o->m = o->count - o->off < c ? o->count - o->off : c;
            st = smn_nb_arrive(o->nd, o->src + o->off * es, o->m * es);
            if (st != SHP_OK) {
                return st;
            }
            o->arrived = 1;
        }
        char *d = o->dst + o->off * es;
        if (smn_rank(o->nd) == 0) {
            st = smn_nb_test_in(o->nd);
            if (st == SHP_OK) {
                st = smn_nb_fold(o->nd, &o->d, o->m, d);
            }
            if (st == SHP_OK) {
                st = smn_nb_publish(o->nd, d, o->m * es, 0);
            }
        } else {
            int code = -1;
            st = smn_nb_test_out(o->nd, d, o->m * es, &code);
            if (st == SHP_OK && code != 0) {
                return -1000;
            }
        }
        if (st == SHP_INPROGRESS) {
            return 0;
        }
        if (st != SHP_OK) {
            return st;
        }
        o->arrived = 0;
        o->off += o->m;
        o->done = o->off >= o->count;
    }
}

/* a non-blocking step's sleep, as the layer's idle turn makes it: what it
 * waits for taken first, then the sleep on it, then counted */
static void nb_sleep(smn_node_t *nd, uint64_t max_ns)
{
    smn_nb_await_t a;
    if (smn_nb_await(nd, &a) && smn_nb_sleep(&a, max_ns)) {
        smn_nb_slept(nd);
    }
}

/* wait for o, asleep on the segment between looks */
static int nbop_wait(nbop_t *o)
{
    int r;
    while ((r = nbop_step(o)) == 0) {
        nb_sleep(o->nd, 50 * 1000 * 1000);
    }
    return r;
}

static int nb_check(const nbop_t *o, uint64_t seed, unsigned rank)
{
    size_t bytes = o->count * shp_reduce_elem_size(&o->d);
    char *ref = malloc(bytes + 1);
    int rc = reference(&o->d, o->count, seed, smn_size(o->nd), ref) &&
                     memcmp(ref, o->dst, bytes) == 0
                 ? 0
                 : 1;
    if (rc != 0) {
        fprintf(stderr, "rank %u: nb %s %s x%zu: result differs\n", rank,
                shp_dtype_name(o->d.dtype), shp_op_name(o->d.op), o->count);
    }
    free(ref);
    return rc;
}

/* A second segment for the same ranks, its handle sent through the first
 * (a second communicator on the node). */
static int second_segment(smn_node_t *nd, unsigned rank, smn_node_t **out)
{
    smn_opts_t o = test_opts();
    smn_handle_t h;
    memset(&h, 0, sizeof(h));
    if (rank == 0 && smn_create(smn_size(nd), &o, out, &h) != SHP_OK) {
        memset(&h, 0, sizeof(h));
    }
    if (smn_bcast(nd, &h, sizeof(h), 0) != SHP_OK || h.name[0] == '\0') {
        return 1;
    }
    if (rank != 0 && smn_attach(&h, rank, &o, out) != SHP_OK) {
        return 2;
    }
    if (smn_barrier(*out, NULL, NULL, NULL) != SHP_OK) {
        return 3;
    }
    return rank == 0 && smn_unlink(*out) != SHP_OK ? 4 : 0;
}

/* Ranks post out of step (each rank's own delays between its posts and
 * its tests), on two segments interleaved (each rank progresses them in
 * its own order), messages of several chunks: every result is the fold in
 * node-rank order, bitwise; a blocking call between steps shares the
 * sequence, and is refused while a step is pending. */
static int nb_steps_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    static const shp_reduce_desc_t ds[] = {
        {SHP_DTYPE_F64, SHP_OP_SUM, SHP_DTYPE_NULL},
        {SHP_DTYPE_F32, SHP_OP_MAX, SHP_DTYPE_NULL},
        {SHP_DTYPE_I64, SHP_OP_PROD, SHP_DTYPE_NULL},
        {SHP_DTYPE_F16, SHP_OP_SUM, SHP_DTYPE_NULL},
        {SHP_DTYPE_F32, SHP_OP_MINLOC, SHP_DTYPE_I32},
    };
    smn_node_t *nd2 = NULL;
    int rc = second_segment(nd, rank, &nd2);
    if (rc != 0) {
        smn_destroy(nd2);
        return 110 + rc;
    }
    size_t bytes = 4 * SLOT + 64;
    char *src[2], *dst[2];
    for (int k = 0; k < 2; k++) {
        src[k] = malloc(bytes);
        dst[k] = malloc(bytes);
    }
    for (unsigned it = 0; it < 40 && rc == 0; it++) {
        nbop_t a, b;
        const shp_reduce_desc_t *da = &ds[it % 5], *db = &ds[(it + 2) % 5];
        /* 1 element, one chunk exactly, and across chunk boundaries */
        size_t ca = it % 4 == 0   ? 1
                    : it % 4 == 1 ? smn_chunk_count(nd, da)
                                  : (bytes / shp_reduce_elem_size(da)) - it % 7;
        size_t cb = 1 + (it * 37) % (bytes / shp_reduce_elem_size(db));
        fill(src[0], ca * shp_reduce_elem_size(da), 700 + it, rank);
        fill(src[1], cb * shp_reduce_elem_size(db), 900 + it, rank);
        nbop_init(&a, nd, da, ca, src[0], dst[0]);
        nbop_init(&b, nd2, db, cb, src[1], dst[1]);
        /* out of step: rank r posts late on some iterations */
        if ((it + rank) % 3 == 0) {
            usleep(2000 * (rank + 1));
        }
        int ra = nbop_step(&a);
        if (rank % 2 == 1) {
            usleep(1000);
        }
        int rb = nbop_step(&b);
        while (rc == 0 && (ra == 0 || rb == 0)) {
            /* odd ranks look at the second first */
            if (rank % 2 == 1 && rb == 0) {
                rb = nbop_step(&b);
            }
            if (ra == 0) {
                ra = nbop_step(&a);
            }
            if (rb == 0) {
                rb = nbop_step(&b);
            }
            if (ra == 0) {
                nb_sleep(nd, 1000 * 1000);
            } else if (rb == 0) {
                nb_sleep(nd2, 1000 * 1000);
            }
        }
        if (ra != 1 || rb != 1) {
            fprintf(stderr, "rank %u it %u: %d %d\n", rank, it, ra, rb);
            rc = 120;
        } else if (nb_check(&a, 700 + it, rank) != 0 ||
                   nb_check(&b, 900 + it, rank) != 0) {
            rc = 121;
        }
        if (rc == 0 && it % 10 == 9) {
            /* a blocking step between non-blocking ones */
            if (one_allreduce(nd, rank, da, 5, 40 + it) != 0) {
                rc = 122;
            }
            /* refused while a step is pending */
            uint32_t x = 1;
            if (smn_nb_arrive(nd2, &x, 4) != SHP_OK ||
                smn_barrier(nd2, NULL, NULL, NULL) != SHP_ERR_INVALID_PARAM ||
                smn_nb_arrive(nd2, &x, 4) != SHP_ERR_INVALID_PARAM) {
                rc = 123;
            }
            nbop_t o;
            shp_reduce_desc_t du = {SHP_DTYPE_U32, SHP_OP_SUM, SHP_DTYPE_NULL};
            nbop_init(&o, nd2, &du, 1, &x, &x);
            o.arrived = 1; /* (the step just begun) */
            o.m = 1;
            if (rc == 0 && (nbop_wait(&o) != 1 || x != smn_size(nd))) {
                rc = 124;
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        free(src[k]);
        free(dst[k]);
    }
    if (rc == 0 && smn_barrier(nd2, NULL, NULL, NULL) != SHP_OK) {
        rc = 125;
    }
    smn_destroy(nd2);
    return rc;
}

static void test_nb_steps(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(4, &o, nb_steps_body, NULL, codes);
    expect_all(4, codes, 0);
    run_node(2, &o, nb_steps_body, NULL, codes);
    expect_all(2, codes, 0);
}

/* The leader's part: each contribution apart (an exact sum's), the code
 * it publishes reaches every rank, and with a non-zero one nothing is
 * copied (the buffer may be the rank's input, for a redo). */
static int nb_gather_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    uint64_t mine[8], got[8];
    for (unsigned j = 0; j < 8; j++) {
        mine[j] = val(rank, 3, j);
        got[j] = 0xdead;
    }
    for (int code = 0; code < 2; code++) {
        if (code == 1) {
            memset(got, 0x11, sizeof(got));
        }
        if (smn_nb_arrive(nd, mine, sizeof(mine)) != SHP_OK) {
            return 130;
        }
        shp_status_t st;
        if (rank == 0) {
            const void *srcs[MAXN];
            uint64_t sum[8] = {0};
            while ((st = smn_nb_test_in(nd)) == SHP_INPROGRESS) {
                nb_sleep(nd, 50 * 1000 * 1000);
            }
            if (st != SHP_OK || smn_nb_srcs(nd, srcs) != SHP_OK) {
                return 131;
            }
            for (unsigned r = 0; r < smn_size(nd); r++) {
                if (memcmp(srcs[r],
                           (uint64_t[8]){val(r, 3, 0), val(r, 3, 1),
                                         val(r, 3, 2), val(r, 3, 3),
                                         val(r, 3, 4), val(r, 3, 5),
                                         val(r, 3, 6), val(r, 3, 7)},
                           sizeof(mine)) != 0) {
                    return 132;
                }
                for (unsigned j = 0; j < 8; j++) {
                    sum[j] += ((const uint64_t *)srcs[r])[j];
                }
            }
            if (smn_nb_publish(nd, sum, sizeof(sum), code * 5) != SHP_OK) {
                return 133;
            }
            continue;
        }
        int c = -1;
        while ((st = smn_nb_test_out(nd, got, sizeof(got), &c)) ==
               SHP_INPROGRESS) {
            nb_sleep(nd, 50 * 1000 * 1000);
        }
        if (st != SHP_OK || c != code * 5) {
            return 134;
        }
        for (unsigned j = 0; j < 8 && code == 0; j++) {
            uint64_t want = 0;
            for (unsigned r = 0; r < smn_size(nd); r++) {
                want += val(r, 3, j);
            }
            if (got[j] != want) {
                return 135;
            }
        }
        for (unsigned j = 0; j < 8 && code == 1; j++) {
            if (got[j] != 0x1111111111111111ull) {
                return 136; /* a code, and data copied */
            }
        }
    }
    return smn_barrier(nd, NULL, NULL, NULL) == SHP_OK ? 0 : 137;
}

static void test_nb_gather_code(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    run_node(3, &o, nb_gather_body, NULL, codes);
    expect_all(3, codes, 0);
}

/* A slow rank: the others' steps stay pending (never a result without
 * it), they sleep on the segment meanwhile and are woken by its arrival
 * (and by the leader's publication) */
static int nb_slow_body(smn_node_t *nd, unsigned rank, void *arg)
{
    (void)arg;
    shp_reduce_desc_t d = {SHP_DTYPE_I64, SHP_OP_SUM, SHP_DTYPE_NULL};
    for (unsigned it = 0; it < 6; it++) {
        int64_t src[300], dst[300];
        for (unsigned j = 0; j < 300; j++) {
            src[j] = (int64_t)val(rank, it, j) >> 4;
        }
        if (rank == 2 && it % 2 == 1) {
            usleep(100 * 1000);
        }
        nbop_t o;
        nbop_init(&o, nd, &d, 300, src, dst);
        int r = nbop_step(&o);
        if (r == 1 && rank != 2 && it % 2 == 1) {
            return 140; /* done without the slow rank */
        }
        if (r == 0 && nbop_wait(&o) != 1) {
            return 141;
        }
        for (unsigned j = 0; j < 300; j++) {
            int64_t want = 0;
            for (unsigned q = 0; q < smn_size(nd); q++) {
                want += (int64_t)val(q, it, j) >> 4;
            }
            if (dst[j] != want) {
                return 142;
            }
        }
    }
    smn_stats_t st;
    smn_get_stats(nd, &st);
    if (rank != 2 && st.sleeps == 0) {
        return 143; /* slept on the segment while rank 2 was late */
    }
    if (rank == 2 && st.wakes == 0) {
        return 144; /* and rank 2's arrival woke the leader */
    }
    return 0;
}

static void test_nb_slow_rank(void **state)
{
    (void)state;
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.period_ms = 2000; /* a sleeper is woken, not left to its slice */
    o.timeout_ms = 0;
    run_node(4, &o, nb_slow_body, NULL, codes);
    expect_all(4, codes, 0);
}

/* A rank killed (or stuck past the timeout) while the others' steps are
 * pending: every other rank's test fails with the segment's failure and
 * names it; no timeout is needed for a dead one (its pidfd) */
static int nb_fault_body(smn_node_t *nd, unsigned rank, void *arg)
{
    const fault_t *f = arg;
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t src[600], dst[600];
    for (unsigned it = 0; it < FAULT_AT + 10; it++) {
        for (unsigned j = 0; j < 600; j++) {
            src[j] = (int32_t)(rank * 1000 + j + it);
        }
        nbop_t o; /* 600 elements: three steps (a slot of 256) */
        nbop_init(&o, nd, &d, 600, src, dst);
        if (rank == f->victim && it == FAULT_AT) {
            if (f->kind == 2) {
                usleep(1500 * 1000);
            } else if (f->kind == 0) {
                raise(SIGKILL); /* before arriving */
            } else if (smn_nb_arrive(nd, src, 4) == SHP_OK) {
                raise(SIGKILL); /* the leader arrived, never publishes */
            }
        }
        int r = nbop_wait(&o);
        if (it < FAULT_AT) {
            if (r != 1) {
                return 150;
            }
            continue;
        }
        if (rank == f->victim) { /* back from a stall: failed for it too */
            return r == SHP_ERR_TIMED_OUT ? 0 : 151;
        }
        if (r == 1) {
            return 152; /* a result without the victim: wrong */
        }
        if (r != f->want || smn_failed_rank(nd) != (int)f->victim) {
            fprintf(stderr, "rank %u: %d, rank %d\n", rank, r,
                    smn_failed_rank(nd));
            return 153;
        }
        /* the segment stays failed, for either form */
        if (smn_nb_arrive(nd, src, 4) != f->want ||
            smn_barrier(nd, NULL, NULL, NULL) != f->want) {
            return 154;
        }
        return 0;
    }
    return 155;
}

static void run_nb_fault(unsigned n, const fault_t *f, unsigned timeout_ms)
{
    smn_opts_t o = test_opts();
    int codes[MAXN];
    o.timeout_ms = timeout_ms;
    run_node(n, &o, nb_fault_body, (void *)f, codes);
    for (unsigned i = 0; i < n; i++) {
        int want = i == f->victim && f->kind != 2 ? 128 + SIGKILL : 0;
        if (codes[i] != want) {
            fail_msg("rank %u exited %d, expected %d", i, codes[i], want);
        }
    }
    assert_false(shm_exists(seg_name));
}

static void test_nb_killed(void **state)
{
    (void)state;
    /* no timeout: only the pidfd can tell */
    fault_t member = {2, 0, SHP_ERR_GROUP_FAILED, 0};
    run_nb_fault(4, &member, 0);
    fault_t leader = {0, 1, SHP_ERR_GROUP_FAILED, 0};
    run_nb_fault(4, &leader, 0);
}

static void test_nb_stuck(void **state)
{
    (void)state;
    fault_t f = {1, 2, SHP_ERR_TIMED_OUT, 0};
    run_nb_fault(3, &f, 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_8),
        cmocka_unit_test(test_node_sizes),
        cmocka_unit_test(test_fold_order),
        cmocka_unit_test(test_many_ops),
        cmocka_unit_test(test_chunk_calls),
        cmocka_unit_test(test_slow_rank),
        cmocka_unit_test(test_staggered_arrivals),
        cmocka_unit_test(test_yield_wait),
        cmocka_unit_test(test_dead_behind_slow),
        cmocka_unit_test(test_killed_member),
        cmocka_unit_test(test_killed_leader),
        cmocka_unit_test(test_killed_bcast_root),
        cmocka_unit_test(test_stuck_member),
        cmocka_unit_test(test_no_timeout),
        cmocka_unit_test(test_killed_before_unlink),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_nb_steps),
        cmocka_unit_test(test_nb_gather_code),
        cmocka_unit_test(test_nb_slow_rank),
        cmocka_unit_test(test_nb_killed),
        cmocka_unit_test(test_nb_stuck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
