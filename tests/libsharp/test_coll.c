/*
 * libsharp_coll end to end: `sharp-fabric up` brings a 2-level fat-tree of
 * 6 switches and 8 hosts up on 127.12.x.y (sharp_am, 6 sharp_an, 8 sharpd);
 * members are forked processes, each the process of one host, using the
 * installed API (<sharp/api/sharp.h>, libsharp_coll.so) with out-of-band
 * collectives served by the test driver (oob_hub.h).
 *
 * Members check every result themselves against a local reference (data
 * chosen so that every order of folding gives the same bits, except in the
 * repeatability test, which compares members and runs with each other).
 */
#include "tests/support/test_util.h"

#include <sharp/api/sharp.h>

#include "reduce/reduce.h"
#include "protocol/wire.h"
#include "tests/support/fabric.h"
#include "tests/support/oob_hub.h"
#include "tests/support/coll_desc.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define NHOST 8

/* the fabric on loopback (its directory also holds the topology), and the
 * one in network namespaces (root only) */
static test_fabric_t fab, nsfab;
static char hosts[NHOST][16];
static int in_netns; /* the tests of the second group */
/* SHARP_TEST_NET: the fabric's addresses (A.B.x.y); the verbs run in the
 * soft-RoCE guest puts them on the rxe device's interface */
static const char *net = "127.12";

/* the rank's process: its host's sharpd and address */
static void become_host(int host)
{
    test_fabric_become_host(in_netns ? &nsfab : &fab, host);
}

static hub_oob_t world_oob;
static int init_threads; /* enable_thread_support of member_init */
static struct sharp_coll_context *ctx;
static struct sharp_coll_comm *world;

/* The first failed check of rank 0's process also shows the manager's
 * last warnings (an AN lost, a job or group refused, and why) */
static void say_am_warnings(void)
{
    static int said;
    if (world_oob.rank == 0 && !said) {
        said = 1;
        fprintf(stderr, "rank 0: the manager's last warnings:\n");
        test_fabric_sh("grep -E ' (WARN|ERR) ' %s/logs/am.log | tail -n 12 "
                       "| sed 's/^/  am: /' >&2",
                       in_netns ? nsfab.dir : fab.dir);
    }
}

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: line %d: ", world_oob.rank, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            say_am_warnings();                                                 \
            return 1;                                                          \
        }                                                                      \
    } while (0)

/* sharp_coll_init as rank of size in job, out-of-band set `tag` */
static int member_init_tag(int tag, int rank, int size, uint64_t job)
{
    struct sharp_coll_init_spec s = {0};
    world_oob = (hub_oob_t){tag, rank, size};
    s.job_id = job;
    s.world_rank = rank;
    s.world_size = size;
    s.world_local_rank = 0;
    s.enable_thread_support = init_threads;
    s.config = sharp_coll_default_config;
    s.config.coll_timeout = 20000;
    s.oob_colls.bcast = hub_bcast;
    s.oob_colls.barrier = hub_barrier;
    s.oob_colls.gather = hub_gather;
    s.oob_ctx = &world_oob;
    return sharp_coll_init(&s, &ctx);
}

static int member_init(int rank, int size, uint64_t job)
{
    return member_init_tag(1, rank, size, job);
}

static int comm_of(hub_oob_t *oob, struct sharp_coll_comm **c)
{
    struct sharp_coll_comm_init_spec cs = {
        .rank = oob->rank, .size = oob->size, .oob_ctx = oob};
    return sharp_coll_comm_init(ctx, &cs, c);
}

/* value i of rank r in an exact-arithmetic test */
static int64_t val(int r, size_t i, uint64_t salt)
{
    uint64_t s = (salt + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)r << 32) ^ i;
    return (int64_t)(test_rand(&s) % 64) - 16;
}

static void store(enum sharp_datatype dt, void *buf, size_t i, int64_t v)
{
    switch (dt) {
    case SHARP_DTYPE_UNSIGNED: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case SHARP_DTYPE_INT: ((int32_t *)buf)[i] = (int32_t)v; break;
    case SHARP_DTYPE_UNSIGNED_LONG: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case SHARP_DTYPE_LONG: ((int64_t *)buf)[i] = v; break;
    case SHARP_DTYPE_FLOAT: ((float *)buf)[i] = (float)v; break;
    case SHARP_DTYPE_DOUBLE: ((double *)buf)[i] = (double)v; break;
    case SHARP_DTYPE_UNSIGNED_SHORT: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case SHARP_DTYPE_SHORT: ((int16_t *)buf)[i] = (int16_t)v; break;
    case SHARP_DTYPE_FLOAT_SHORT:
        ((uint16_t *)buf)[i] = shp_f32_to_f16((float)v);
        break;
    case SHARP_DTYPE_BFLOAT16:
        ((uint16_t *)buf)[i] = shp_f32_to_bf16((float)v);
        break;
    case SHARP_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: ((int8_t *)buf)[i] = (int8_t)v; break;
    }
}

/* rank's data in an exact-arithmetic test (small integers; products of
 * -1, 1 and 2; MINLOC/MAXLOC tags are the rank, in the tag's type) */
static void my_data(shp_reduce_desc_t *d, size_t n, int rank, uint64_t salt,
                    void *buf)
{
    size_t es = shp_reduce_elem_size(d), vs = shp_dtype_size(d->dtype);
    for (size_t i = 0; i < n; i++) {
        int64_t v = val(rank, i, salt);
        if (d->op == SHP_OP_PROD) {
            v = v % 2 ? -1 : (v % 3 ? 1 : 2);
        }
        uint8_t tmp[16];
        store((enum sharp_datatype)d->dtype, tmp, 0, v);
        memcpy((uint8_t *)buf + i * es, tmp, vs);
        if (shp_op_is_loc(d->op)) { /* the tag, in its type */
            store((enum sharp_datatype)d->tag_dtype, tmp, 0, rank);
            memcpy((uint8_t *)buf + i * es + vs, tmp,
                   shp_dtype_size(d->tag_dtype));
        }
    }
}

/* reference: fold every rank's data in rank order with the engine (the
 * data are small integers: every order gives the same bits) */
static int reference(shp_reduce_desc_t *d, size_t n, int size, uint64_t salt,
                     void *out)
{
    size_t es = shp_reduce_elem_size(d);
    uint8_t *all = calloc((size_t)size, n * es + 1);
    const void *src[64];
    for (int r = 0; r < size; r++) {
        my_data(d, n, r, salt, all + (size_t)r * n * es);
        src[r] = all + (size_t)r * n * es;
    }
    shp_status_t st = shp_reduce_fold(d, out, src, (unsigned)size, n);
    free(all);
    return st == SHP_OK ? 0 : -1;
}

/* flags of allreduce_check */
#define AR_IN_PLACE 1
#define AR_REDUCE 2 /* sharp_coll_do_reduce, root salt % size */
#define AR_IOV 4    /* buffers as 3-entry IOVs */

/* a buffer as an IOV of 3 uneven pieces (the vector outlives the call) */
static struct sharp_coll_data_desc iov_desc(void *p, size_t len,
                                            struct sharp_data_iov v[3])
{
    struct sharp_coll_data_desc d;
    size_t a = len / 3, b = len / 2;
    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_IOV;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    v[0] = (struct sharp_data_iov){p, a, NULL};
    v[1] = (struct sharp_data_iov){(uint8_t *)p + a, b - a, NULL};
    v[2] = (struct sharp_data_iov){(uint8_t *)p + b, len - b, NULL};
    d.iov.count = 3;
    d.iov.vector = v;
    return d;
}

static int allreduce_check(struct sharp_coll_comm *c, int rank, int size,
                           enum sharp_datatype dt, enum sharp_reduce_op op,
                           size_t n, uint64_t salt, int flags)
{
    int in_place = flags & AR_IN_PLACE, root = (int)(salt % (uint64_t)size);
    int keep = !(flags & AR_REDUCE) || rank == root;
    struct sharp_data_iov sv[3], rv[3];
    shp_reduce_desc_t d = {(shp_dtype_t)dt, (shp_op_t)op,
                           shp_op_is_loc((shp_op_t)op) ? SHP_DTYPE_I32
                                                       : SHP_DTYPE_NULL};
    size_t es = shp_reduce_elem_size(&d);
    uint8_t *s = calloc(1, n * es + 1), *r = calloc(1, n * es + 1),
            *want = calloc(1, n * es + 1);
    struct sharp_coll_reduce_spec sp;
    memset(&sp, 0x5a, sizeof(sp)); /* fields allreduce does not read */
    my_data(&d, n, rank, salt, s);
    if (reference(&d, n, size, salt, want) != 0) {
        return -1;
    }
    if (flags & AR_IOV) {
        sp.sbuf_desc = iov_desc(s, n * es, sv);
        sp.rbuf_desc = iov_desc(in_place ? s : r, n * es, rv);
    } else {
        sp.sbuf_desc = test_host_desc(s, n * es);
        sp.rbuf_desc = test_host_desc(in_place ? s : r, n * es);
    }
    sp.dtype = dt;
    sp.op = op;
    sp.length = n;
    sp.tag_dtype = SHARP_DTYPE_INT;
    sp.aggr_mode = SHARP_AGGREGATION_NONE;
    sp.root = root;
    int rc = flags & AR_REDUCE ? sharp_coll_do_reduce(c, &sp)
                               : sharp_coll_do_allreduce(c, &sp);
    int bad = rc != SHARP_COLL_SUCCESS ||
              (keep && memcmp(in_place ? s : r, want, n * es) != 0) ||
              (!keep && !in_place && n > 0 && r[0] != 0);
    if (bad) {
        fprintf(stderr, "rank %d: allreduce dtype %d op %d n %zu: %s\n", rank,
                dt, op, n, rc ? sharp_coll_strerror(rc) : "wrong result");
    }
    free(s);
    free(r);
    free(want);
    return bad;
}

/* Scenarios ------------------------------------------------------------------ */

/* every collective of the API on the world and on a sub-communicator */
static int m_collectives(int rank, void *arg)
{
    int size = NHOST;
    (void)arg;
    become_host(rank);
    CHECK(member_init(rank, size, 1001) == SHARP_COLL_SUCCESS, "init");

    struct sharp_coll_caps caps;
    CHECK(sharp_coll_caps_query(ctx, &caps) == 0, "caps");
    CHECK(caps.support_mask.dtypes & (1 << SHARP_DTYPE_INT8), "int8 cap");
    CHECK(caps.support_mask.dtypes & (1 << SHARP_DTYPE_BFLOAT16), "bf16 cap");
    CHECK(caps.support_mask.reduce_ops & (1 << SHARP_OP_MINLOC), "minloc");
    CHECK(caps.support_mask.feature_mask & SHARP_FEATURE_SAT, "SAT");
    CHECK(caps.resources.user_data_per_ost > 0 && caps.resources.max_osts > 0,
          "quotas %d %d", caps.resources.user_data_per_ost,
          caps.resources.max_osts);
    size_t payload = (size_t)caps.resources.user_data_per_ost;

    CHECK(comm_of(&world_oob, &world) == SHARP_COLL_SUCCESS, "comm_init");

    /* every dtype x op: small, exactly one fragment, several fragments */
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        for (int op = 0; op < SHARP_OP_NULL; op++) {
            shp_reduce_desc_t d = {
                (shp_dtype_t)dt, (shp_op_t)op,
                shp_op_is_loc((shp_op_t)op) ? SHP_DTYPE_I32 : SHP_DTYPE_NULL};
            if (shp_reduce_desc_check(&d, NULL) != SHP_OK) {
                continue;
            }
            size_t per = payload / shp_reduce_elem_size(&d);
            size_t ns[] = {1, 7, per, 3 * per + 5};
            for (int k = 0; k < 4; k++) {
                CHECK(allreduce_check(world, rank, size, dt, op, ns[k],
                                      (uint64_t)(dt * 100 + op * 7 + k),
                                      k == 1 ? AR_IN_PLACE : 0) == 0,
                      "allreduce");
            }
            /* reduce (every dtype x op, the root moving), and IOVs */
            CHECK(allreduce_check(world, rank, size, dt, op, 2 * per + 3,
                                  (uint64_t)(dt * 13 + op), AR_REDUCE) == 0,
                  "reduce");
            CHECK(allreduce_check(world, rank, size, dt, op, 101,
                                  (uint64_t)(dt * 17 + op), AR_IOV) == 0,
                  "allreduce over IOVs");
        }
    }
    /* a large pipelined allreduce (1 MiB of int32) and a zero-length one */
    CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_INT, SHARP_OP_SUM,
                          1 << 18, 77, 0) == 0,
          "1 MiB");
    CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_INT, SHARP_OP_SUM, 0,
                          78, 0) == 0,
          "zero length");
    /* 16 MiB: thousands of fragments through the pipeline */
    CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_FLOAT, SHARP_OP_MAX,
                          4 << 20, 79, 0) == 0,
          "16 MiB");
    CHECK(sharp_coll_do_barrier(world) == SHARP_COLL_SUCCESS, "barrier");

    /* reduce: the result only at the root; others' rbuf untouched */
    {
        int32_t s[100], r[100], want[100];
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        for (int i = 0; i < 100; i++) {
            s[i] = rank * 1000 + i;
            r[i] = -7;
            want[i] = 0;
            for (int k = 0; k < size; k++) {
                want[i] += k * 1000 + i;
            }
        }
        sp.root = 3;
        sp.sbuf_desc = test_host_desc(s, sizeof(s));
        sp.rbuf_desc = test_host_desc(r, sizeof(r));
        sp.dtype = SHARP_DTYPE_INT;
        sp.op = SHARP_OP_SUM;
        sp.length = 100;
        CHECK(sharp_coll_do_reduce(world, &sp) == 0, "reduce");
        if (rank == 3) {
            CHECK(!memcmp(r, want, sizeof(r)), "reduce result");
        } else {
            CHECK(r[0] == -7 && r[99] == -7, "reduce wrote a non-root");
        }
    }
    /* bcast from rank 5, 10000 bytes (several fragments) */
    {
        uint8_t b[10000];
        for (int i = 0; i < 10000; i++) {
            b[i] = rank == 5 ? (uint8_t)(i * 7 + 1) : 0xee;
        }
        struct sharp_coll_bcast_spec bs = {.root = 5,
                                           .buf_desc =
                                               test_host_desc(b, sizeof(b)),
                                           .size = sizeof(b)};
        CHECK(sharp_coll_do_bcast(world, &bs) == 0, "bcast");
        for (int i = 0; i < 10000; i++) {
            CHECK(b[i] == (uint8_t)(i * 7 + 1), "bcast byte %d", i);
        }
    }
    /* bcast and allgather with 3-entry IOVs */
    {
        uint8_t b[3000], g[100], all[100 * NHOST];
        struct sharp_data_iov v1[3], v2[3], v3[3];
        for (int i = 0; i < 3000; i++) {
            b[i] = rank == 2 ? (uint8_t)(i * 11 + 3) : 0;
        }
        struct sharp_coll_bcast_spec bs = {.root = 2, .size = sizeof(b)};
        bs.buf_desc = iov_desc(b, sizeof(b), v1);
        CHECK(sharp_coll_do_bcast(world, &bs) == 0, "bcast iov");
        for (int i = 0; i < 3000; i++) {
            CHECK(b[i] == (uint8_t)(i * 11 + 3), "bcast iov [%d]", i);
        }
        for (int i = 0; i < 100; i++) {
            g[i] = (uint8_t)(rank * 7 + i);
        }
        struct sharp_coll_gather_spec gs;
        memset(&gs, 0, sizeof(gs));
        gs.sbuf_desc = iov_desc(g, sizeof(g), v2);
        gs.rbuf_desc = iov_desc(all, sizeof(all), v3);
        CHECK(sharp_coll_do_allgather(world, &gs) == 0, "allgather iov");
        for (int k = 0; k < size; k++) {
            for (int i = 0; i < 100; i++) {
                CHECK(all[k * 100 + i] == (uint8_t)(k * 7 + i),
                      "allgather iov %d/%d", k, i);
            }
        }
    }
    /* reduce-scatter: 300 int64 per rank */
    {
        size_t n = 300;
        int64_t *s = calloc(n * size, 8), *r = calloc(n, 8);
        for (size_t i = 0; i < n * size; i++) {
            s[i] = (int64_t)(i * 3) - rank;
        }
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(s, n * size * 8);
        sp.rbuf_desc = test_host_desc(r, n * 8);
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = n;
        CHECK(sharp_coll_do_reduce_scatter(world, &sp) == 0, "reduce_scatter");
        for (size_t i = 0; i < n; i++) {
            int64_t g =
                (int64_t)((rank * n + i) * 3) * size - size * (size - 1) / 2;
            CHECK(r[i] == g, "reduce_scatter %zu: %lld want %lld", i,
                  (long long)r[i], (long long)g);
        }
        free(s);
        free(r);
    }
    /* allgather: 333 bytes per rank (size comes from the send buffer) */
    {
        uint8_t s[333], r[333 * NHOST];
        for (int i = 0; i < 333; i++) {
            s[i] = (uint8_t)(rank * 31 + i);
        }
        struct sharp_coll_gather_spec gs;
        memset(&gs, 0x77, sizeof(gs));
        gs.offset = 0;
        gs.sbuf_desc = test_host_desc(s, sizeof(s));
        gs.rbuf_desc = test_host_desc(r, sizeof(r));
        gs.dtype = SHARP_DTYPE_INT8;
        CHECK(sharp_coll_do_allgather(world, &gs) == 0, "allgather");
        for (int k = 0; k < size; k++) {
            for (int i = 0; i < 333; i++) {
                CHECK(r[k * 333 + i] == (uint8_t)(k * 31 + i),
                      "allgather %d/%d", k, i);
            }
        }
    }
    /* non-blocking: 6 allreduces and a barrier outstanding at once,
     * registered buffers, completed out of order */
    {
        int32_t s[6][2000], r[6][2000];
        void *h[7], *mr;
        CHECK(sharp_coll_reg_mr(ctx, s, sizeof(s), &mr) == 0, "reg_mr");
        for (int k = 0; k < 6; k++) {
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            for (int i = 0; i < 2000; i++) {
                s[k][i] = (rank + 1) * (k + 1) + i;
            }
            sp.sbuf_desc = test_host_desc(s[k], sizeof(s[k]));
            sp.sbuf_desc.buffer.mem_handle = mr;
            sp.rbuf_desc = test_host_desc(r[k], sizeof(r[k]));
            sp.dtype = SHARP_DTYPE_INT;
            sp.op = k % 2 ? SHARP_OP_MAX : SHARP_OP_SUM;
            sp.length = 2000;
            CHECK(sharp_coll_do_allreduce_nb(world, &sp, &h[k]) == 0, "nb");
        }
        CHECK(sharp_coll_do_barrier_nb(world, &h[6]) == 0, "barrier_nb");
        CHECK(sharp_coll_req_wait(h[6]) == 0, "wait barrier");
        for (int k = 5; k >= 0; k--) {
            while (!sharp_coll_req_test(h[k])) {
            }
            CHECK(sharp_coll_req_wait(h[k]) == 0, "wait %d", k);
            for (int i = 0; i < 2000; i++) {
                int32_t w = k % 2 ? size * (k + 1) + i
                                  : (k + 1) * size * (size + 1) / 2 + size * i;
                CHECK(r[k][i] == w, "nb %d[%d]: %d want %d", k, i, r[k][i], w);
            }
        }
        CHECK(sharp_coll_dereg_mr(ctx, mr) == 0, "dereg_mr");
    }
    /* 64 operations outstanding at once (4x the OST quota), completed in
     * reverse order */
    {
        enum { NB = 64 };
        static int64_t s[NB][100], r[NB][100];
        void *h[NB];
        for (int k = 0; k < NB; k++) {
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            for (int i = 0; i < 100; i++) {
                s[k][i] = (int64_t)(rank + 1) * (k + 1) + i;
            }
            sp.sbuf_desc = test_host_desc(s[k], sizeof(s[k]));
            sp.rbuf_desc = test_host_desc(r[k], sizeof(r[k]));
            sp.dtype = SHARP_DTYPE_LONG;
            sp.op = SHARP_OP_SUM;
            sp.length = 100;
            CHECK(sharp_coll_do_allreduce_nb(world, &sp, &h[k]) == 0, "nb %d",
                  k);
        }
        for (int k = NB - 1; k >= 0; k--) {
            CHECK(sharp_coll_req_wait(h[k]) == 0, "wait %d", k);
            for (int i = 0; i < 100; i++) {
                int64_t w = (int64_t)(k + 1) * size * (size + 1) / 2 +
                            (int64_t)size * i;
                CHECK(r[k][i] == w, "nb64 %d[%d]", k, i);
            }
        }
    }
    /* a sub-communicator of the odd ranks, used alongside the world */
    {
        hub_oob_t odd = {2, rank / 2, size / 2};
        struct sharp_coll_comm *c = NULL;
        if (rank % 2) {
            CHECK(comm_of(&odd, &c) == 0, "odd comm_init");
            int64_t v = rank, out = 0;
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(&v, 8);
            sp.rbuf_desc = test_host_desc(&out, 8);
            sp.dtype = SHARP_DTYPE_LONG;
            sp.op = SHARP_OP_SUM;
            sp.length = 1;
            CHECK(sharp_coll_do_allreduce(c, &sp) == 0, "odd allreduce");
            CHECK(out == 1 + 3 + 5 + 7, "odd sum %lld", (long long)out);
        }
        CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_DOUBLE,
                              SHARP_OP_MIN, 50, 5, 0) == 0,
              "world after sub");
        if (c != NULL) {
            CHECK(sharp_coll_comm_destroy(c) == 0, "odd destroy");
        }
    }
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    /* a second communicator after the first is gone */
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init again");
    CHECK(sharp_coll_do_barrier(world) == 0, "barrier again");
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy again");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void run_members(int (*fn)(int, void *), void *arg, int n, int want_ok)
{
    hub_t h = {0};
    for (int r = 0; r < n; r++) {
        assert_true(hub_spawn(&h, fn, r, arg) >= 0);
    }
    assert_int_equal(hub_run(&h, 100), want_ok);
}

static void test_collectives(void **state)
{
    (void)state;
    run_members(m_collectives, NULL, NHOST, NHOST);
}

/* floating-point sums are bitwise repeatable: every member gets the same
 * bits, and the same bits on every repetition, whatever the arrival order */
/* The event loop's polls, counted: libev's epoll_wait resolves to this one
 * (the program exports it: tests/module.mk). */
static unsigned long polls, sleeps; /* sleeps: polls that may wait */

__attribute__((visibility("default"))) int
epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
    polls++;
    sleeps += timeout != 0;
    return epoll_pwait(epfd, ev, max, timeout, NULL);
}

static long dumped_stat(const char *key);

/* the passes one more allreduce of len dense bytes made (the counters of
 * sharp_coll_dump_stats): its result written into the caller's buffer
 * once, checked under a tag once if it came by multicast, each fragment
 * large enough to go sparse scanned once */
static int passes_check(void *s, void *r, size_t len, int n)
{
    long w0 = dumped_stat("written "), t0 = dumped_stat("checked tag "),
         m0 = dumped_stat("by multicast "), c0 = dumped_stat(" by RC "),
         s0 = dumped_stat("(at most) ");
    struct sharp_coll_reduce_spec sp =
        test_host_spec(s, len, r, len, SHARP_DTYPE_DOUBLE, SHARP_OP_SUM, n);
    CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
    long w = dumped_stat("written ") - w0, t = dumped_stat("checked tag ") - t0,
         m = dumped_stat("by multicast ") - m0, c = dumped_stat(" by RC ") - c0,
         sc = dumped_stat("(at most) ") - s0;
    CHECK(w == (long)len, "wrote %ld of %zu result bytes", w, len);
    CHECK(m + c >= 1 && (c > 0 || t == (long)len) && t <= (long)len,
          "%ld bytes under a tag, %ld results by multicast, %ld by RC", t, m,
          c);
    CHECK(sc == 0 || sc == (long)len, "scanned %ld of %zu bytes", sc, len);
    return 0;
}

static int m_repeatable(int rank, void *arg)
{
    int size = NHOST;
    (void)arg;
    become_host(rank);
    CHECK(member_init(rank, size, 1002) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    enum { N = 4096 };
    static double s[N], r[N], first[N];
    uint64_t seed = (uint64_t)rank * 7919 + 1;
    for (int i = 0; i < N; i++) {
        double m = (double)(test_rand(&seed) % 2000000) - 1e6;
        s[i] = m * (i % 3 ? 1e-8 : 1e12);
    }
    for (int round = 0; round < 20; round++) {
        struct sharp_coll_reduce_spec sp = test_host_spec(
            s, sizeof(s), r, sizeof(r), SHARP_DTYPE_DOUBLE, SHARP_OP_SUM, N);
        /* arrival order varies: members start at different times */
        usleep((useconds_t)((rank * 37 + round * 101) % 5) * 1000);
        CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
        if (round == 0) {
            memcpy(first, r, sizeof(r));
        } else {
            CHECK(!memcmp(first, r, sizeof(r)), "round %d differs", round);
        }
    }
    CHECK(passes_check(s, r, sizeof(r), N) == 0, "passes");
    /* a progress call with nothing arriving turns the loop once, not
     * poll_batch (16) times: each turn is a system call */
    unsigned long p0 = polls;
    for (int i = 0; i < 200; i++) {
        CHECK(sharp_coll_progress(ctx) == 0, "progress");
    }
    CHECK(polls - p0 >= 200 && polls - p0 <= 400,
          "200 idle progress calls polled %lu times", polls - p0);
    /* every member has the same bits: allgather a checksum and compare */
    uint64_t sum = 0, all[NHOST];
    for (int i = 0; i < N; i++) {
        uint64_t b;
        memcpy(&b, &first[i], 8);
        sum = sum * 1000003 ^ b;
    }
    struct sharp_coll_gather_spec gs;
    memset(&gs, 0, sizeof(gs));
    gs.sbuf_desc = test_host_desc(&sum, 8);
    gs.rbuf_desc = test_host_desc(all, sizeof(all));
    CHECK(sharp_coll_do_allgather(world, &gs) == 0, "allgather");
    for (int k = 0; k < size; k++) {
        CHECK(all[k] == sum, "member %d has other bits", k);
    }
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    if (getenv("SHARP_TEST_DUMP_STATS") != NULL) { /* the verbs run */
        sharp_coll_dump_stats(ctx);
    }
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_repeatable(void **state)
{
    (void)state;
    run_members(m_repeatable, NULL, NHOST, NHOST);
}

/* reduce-scatter of n elements per member, checked against the reference
 * of the whole buffer (block `rank` of it); streaming mode, non-blocking
 * when nb */
static int rs_check(struct sharp_coll_comm *c, int rank, int size,
                    enum sharp_datatype dt, enum sharp_reduce_op op,
                    enum sharp_datatype tag, size_t n, uint64_t salt, int nb)
{
    shp_reduce_desc_t d = {(shp_dtype_t)dt, (shp_op_t)op,
                           shp_op_is_loc((shp_op_t)op) ? (shp_dtype_t)tag
                                                       : SHP_DTYPE_NULL};
    size_t es = shp_reduce_elem_size(&d), all = n * (size_t)size;
    uint8_t *s = calloc(1, all * es + 1), *r = calloc(1, n * es + 1),
            *want = calloc(1, all * es + 1);
    struct sharp_coll_reduce_spec sp;
    memset(&sp, 0x5a, sizeof(sp)); /* root, stream_lock_batch_size: unread */
    my_data(&d, all, rank, salt, s);
    int bad = reference(&d, all, size, salt, want) != 0;
    sp.sbuf_desc = test_host_desc(s, all * es);
    sp.rbuf_desc = test_host_desc(r, n * es);
    sp.dtype = dt;
    sp.op = op;
    sp.tag_dtype = tag;
    sp.length = n;
    sp.offset = 0;
    sp.aggr_mode = SHARP_AGGREGATION_STREAMING;
    int rc;
    if (nb) {
        void *h = NULL;
        rc = sharp_coll_do_reduce_scatter_nb(c, &sp, &h);
        if (rc == SHARP_COLL_SUCCESS) {
            while (!sharp_coll_req_test(h)) {
                sharp_coll_progress(ctx);
            }
            rc = sharp_coll_req_wait(h);
        }
    } else {
        rc = sharp_coll_do_reduce_scatter(c, &sp);
    }
    bad = bad || rc != SHARP_COLL_SUCCESS ||
          memcmp(r, want + (size_t)rank * n * es, n * es) != 0;
    if (bad) {
        fprintf(stderr,
                "rank %d: reduce-scatter dtype %d op %d tag %d n %zu: %s\n",
                rank, dt, op, tag, n,
                rc ? sharp_coll_strerror(rc) : "wrong result");
    }
    free(s);
    free(r);
    free(want);
    return bad;
}

/*
 * What sharp_coll_caps_query claims, the calls do: every datatype claimed
 * reduces (with every claimed op that applies to it: logical and bitwise
 * ops are for integers), every op claimed reduces, every tag type claimed
 * works in MINLOC/MAXLOC, and what is not claimed is refused.  Features:
 * LLT (small operations, here 1 element), REPRODUCIBLE (the same bits on
 * every member and every repetition of a floating-point sum), SAT
 * (streaming aggregation: reduce-scatter and allgather, and allreduce in
 * streaming mode, of messages far beyond one operation's payload, every
 * claimed datatype included, blocking and not); no exclusive lock.
 */
static int m_caps(int rank, void *arg)
{
    int size = NHOST;
    (void)arg;
    become_host(rank);
    setenv("SHARP_COLL_ENABLE_SAT", "1", 1); /* as UCC and NCCL do */
    CHECK(member_init(rank, size, 1005) == SHARP_COLL_SUCCESS, "init");
    struct sharp_coll_caps caps;
    CHECK(sharp_coll_caps_query(ctx, &caps) == 0, "caps");
    CHECK(comm_of(&world_oob, &world) == SHARP_COLL_SUCCESS, "comm_init");
    uint64_t dts = caps.support_mask.dtypes, ops = caps.support_mask.reduce_ops,
             tags = caps.support_mask.tag_dtypes,
             feat = caps.support_mask.feature_mask;
    size_t payload = (size_t)caps.resources.user_data_per_ost;
    CHECK(payload > 0 && caps.resources.max_osts > 0 &&
              caps.resources.max_groups > 0 &&
              caps.resources.osts_per_group > 0,
          "resources");
    CHECK(dts != 0 && ops != 0 && tags != 0, "claims nothing");
    /* every bit claimed names a real datatype / op */
    CHECK(!(dts >> SHARP_DTYPE_NULL) && !(tags >> SHARP_DTYPE_NULL),
          "a datatype beyond the enum: %llx", (unsigned long long)dts);
    /* beyond the enum: only this implementation's extension */
    CHECK(!((ops & ~(1ull << SHARP_OP_SUM_EXACT)) >> SHARP_OP_NULL),
          "an op beyond the enum");
    CHECK(ops & (1ull << SHARP_OP_SUM_EXACT), "SUM_EXACT not claimed");
    CHECK(!(feat &
            ~(uint64_t)(SHARP_FEATURE_LLT | SHARP_FEATURE_REPRODUCIBLE |
                        SHARP_FEATURE_SAT | SHARP_FEATURE_SAT_EXCLUSIVE_LOCK |
                        SHARP_FEATURE_SPARSE)),
          "an unknown feature bit");
    CHECK(feat & SHARP_FEATURE_SAT, "SAT not claimed");
    /* sparse fragments: on unless SHARP_COLL_SPARSE_MIN=0 */
    const char *smin = getenv("SHARP_COLL_SPARSE_MIN");
    CHECK(!(feat & SHARP_FEATURE_SPARSE) == (smin && !strcmp(smin, "0")),
          "SPARSE claimed wrongly");
    /* there is no streaming lock to take */
    CHECK(!(feat & SHARP_FEATURE_SAT_EXCLUSIVE_LOCK), "exclusive lock");

    int salt = 0, op_works[SHARP_OP_NULL] = {0};
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        int dt_works = 0;
        for (int op = 0; op < SHARP_OP_NULL; op++) {
            if (!(ops & (1ull << op)) || op == SHARP_OP_MAXLOC ||
                op == SHARP_OP_MINLOC) {
                continue;
            }
            shp_reduce_desc_t d = {(shp_dtype_t)dt, (shp_op_t)op,
                                   SHP_DTYPE_NULL};
            int is_float = shp_dtype_is_float(d.dtype);
            int applies = !is_float || op < SHARP_OP_LAND;
            struct sharp_coll_reduce_spec sp;
            uint8_t b[16] = {0}, o[16];
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(b, sizeof(b));
            sp.rbuf_desc = test_host_desc(o, sizeof(o));
            sp.dtype = dt;
            sp.op = op;
            sp.length = 1;
            if (!(dts & (1ull << dt))) {
                CHECK(sharp_coll_do_allreduce(world, &sp) != 0,
                      "dtype %d not claimed but reduces", dt);
                continue;
            }
            if (!applies) { /* refused, not wrong, and the comm goes on */
                int rc = sharp_coll_do_allreduce(world, &sp);
                CHECK(rc == SHARP_COLL_ENOT_SUPP, "float dtype %d op %d: %d",
                      dt, op, rc);
                continue;
            }
            /* LLT: one element; then several operations' payload */
            size_t per = payload / shp_reduce_elem_size(&d);
            CHECK(allreduce_check(world, rank, size, dt, op, 1, salt++, 0) == 0,
                  "claimed dtype %d op %d, 1 element", dt, op);
            CHECK(rs_check(world, rank, size, dt, op, SHARP_DTYPE_INT,
                           2 * per + 3, salt++, dt % 2) == 0,
                  "claimed dtype %d op %d, reduce-scatter", dt, op);
            dt_works = 1;
            op_works[op] = 1;
        }
        /* MINLOC/MAXLOC with every claimed tag type */
        for (int op = SHARP_OP_MAXLOC; op <= SHARP_OP_MINLOC; op++) {
            if (!(ops & (1ull << op)) || !(dts & (1ull << dt))) {
                continue;
            }
            for (int tg = 0; tg < SHARP_DTYPE_NULL; tg++) {
                if (!(tags & (1ull << tg))) {
                    struct sharp_coll_reduce_spec sp;
                    uint8_t b[32] = {0}, o[32];
                    memset(&sp, 0, sizeof(sp));
                    sp.sbuf_desc = test_host_desc(b, sizeof(b));
                    sp.rbuf_desc = test_host_desc(o, sizeof(o));
                    sp.dtype = dt;
                    sp.op = op;
                    sp.tag_dtype = tg;
                    sp.length = 1;
                    CHECK(sharp_coll_do_allreduce(world, &sp) != 0,
                          "tag %d not claimed but works", tg);
                    continue;
                }
                CHECK(rs_check(world, rank, size, dt, op, tg, 257, salt++, 0) ==
                          0,
                      "claimed dtype %d op %d tag %d", dt, op, tg);
                dt_works = op_works[op] = 1;
            }
        }
        if (dts & (1ull << dt)) {
            CHECK(dt_works, "claimed dtype %d never used", dt);
        }
    }
    for (int op = 0; op < SHARP_OP_NULL; op++) {
        CHECK(!(ops & (1ull << op)) || op_works[op], "claimed op %d unused",
              op);
    }

    /* REPRODUCIBLE: a float sum whose value depends on the order of
     * folding gives every member, every time, the same bits */
    if (feat & SHARP_FEATURE_REPRODUCIBLE) {
        enum { N = 1000 };
        static double s[N], r[N], first[N];
        uint64_t seed = (uint64_t)rank * 104729 + 3, sum = 0, all[NHOST];
        for (int i = 0; i < N; i++) {
            s[i] = ((double)(test_rand(&seed) % 2000000) - 1e6) *
                   (i % 2 ? 1e-9 : 1e9);
        }
        for (int round = 0; round < 5; round++) {
            struct sharp_coll_reduce_spec sp =
                test_host_spec(s, sizeof(s), r, sizeof(r), SHARP_DTYPE_DOUBLE,
                               SHARP_OP_SUM, N);
            usleep((useconds_t)((rank * 3 + round) % 4) * 500);
            CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
            if (round == 0) {
                memcpy(first, r, sizeof(r));
            }
            CHECK(!memcmp(first, r, sizeof(r)), "round %d differs", round);
        }
        for (int i = 0; i < N; i++) {
            uint64_t b;
            memcpy(&b, &first[i], 8);
            sum = sum * 1000003 ^ b;
        }
        struct sharp_coll_gather_spec gs;
        memset(&gs, 0, sizeof(gs));
        gs.sbuf_desc = test_host_desc(&sum, 8);
        gs.rbuf_desc = test_host_desc(all, sizeof(all));
        CHECK(sharp_coll_do_allgather(world, &gs) == 0, "allgather");
        for (int k = 0; k < size; k++) {
            CHECK(all[k] == sum, "member %d has other bits", k);
        }
    }

    /* SAT: large messages, streaming mode */
    if (feat & SHARP_FEATURE_SAT) {
        /* reduce-scatter: 256 KiB per member (2 MiB in), float and bf16 */
        CHECK(rs_check(world, rank, size, SHARP_DTYPE_FLOAT, SHARP_OP_SUM,
                       SHARP_DTYPE_INT, 64 << 10, 901, 1) == 0,
              "SAT reduce-scatter f32");
        CHECK(rs_check(world, rank, size, SHARP_DTYPE_BFLOAT16, SHARP_OP_MAX,
                       SHARP_DTYPE_INT, 128 << 10, 902, 0) == 0,
              "SAT reduce-scatter bf16");
        /* allreduce in streaming mode, 1 MiB of int8 */
        {
            size_t n = 1 << 20;
            int8_t *s = malloc(n), *r = malloc(n);
            for (size_t i = 0; i < n; i++) {
                s[i] = (int8_t)((i + (size_t)rank) % 7) - 3;
            }
            struct sharp_coll_reduce_spec sp =
                test_host_spec(s, n, r, n, SHARP_DTYPE_INT8, SHARP_OP_SUM, n);
            sp.aggr_mode = SHARP_AGGREGATION_STREAMING;
            sp.stream_lock_batch_size = 4;
            CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "SAT allreduce");
            for (size_t i = 0; i < n; i++) {
                int w = 0;
                for (int k = 0; k < size; k++) {
                    w += (int)((i + (size_t)k) % 7) - 3;
                }
                CHECK(r[i] == (int8_t)w, "SAT allreduce [%zu]", i);
            }
            free(s);
            free(r);
        }
        /* allgather: 256 KiB per member (2 MiB out), blocking and not */
        for (int nb = 0; nb < 2; nb++) {
            size_t n = 256 << 10;
            uint8_t *s = malloc(n), *r = malloc(n * (size_t)size);
            for (size_t i = 0; i < n; i++) {
                s[i] = (uint8_t)(i * 13 + (size_t)rank * 101 + (size_t)nb);
            }
            memset(r, 0xee, n * (size_t)size);
            struct sharp_coll_gather_spec gs;
            memset(&gs, 0x77, sizeof(gs)); /* size, dtype: unread */
            gs.sbuf_desc = test_host_desc(s, n);
            gs.rbuf_desc = test_host_desc(r, n * (size_t)size);
            gs.offset = 0;
            int rc;
            if (nb) {
                void *h = NULL;
                rc = sharp_coll_do_allgather_nb(world, &gs, &h);
                if (rc == 0) {
                    rc = sharp_coll_req_wait(h);
                }
            } else {
                rc = sharp_coll_do_allgather(world, &gs);
            }
            CHECK(rc == 0, "SAT allgather: %s", sharp_coll_strerror(rc));
            for (int k = 0; k < size; k++) {
                for (size_t i = 0; i < n; i++) {
                    CHECK(r[(size_t)k * n + i] ==
                              (uint8_t)(i * 13 + (size_t)k * 101 + (size_t)nb),
                          "SAT allgather %d/%zu", k, i);
                }
            }
            free(s);
            free(r);
        }
    }
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

/* A blocking wait over a socket transport polls without sleeping for
 * SHARP_COLL_SOCK_SPIN_US after the last message (arg: the setting), and
 * sleeps at once with 0.  Over shm the rings' own spin applies instead. */
static int m_sock_spin(int rank, void *arg)
{
    const char *us = arg;
    const char *tp = getenv("SHARP_AN_TRANSPORT");
    int sockets = tp == NULL || strcmp(tp, "shm") != 0;
    enum { OPS = 100 };
    setenv("SHARP_COLL_SOCK_SPIN_US", us, 1);
    become_host(rank);
    CHECK(member_init(rank, NHOST, 1020 + (uint64_t)(atoi(us) > 0)) == 0,
          "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    float in = (float)rank, out = 0;
    struct sharp_coll_reduce_spec sp;
    memset(&sp, 0, sizeof(sp));
    sp.sbuf_desc = test_host_desc(&in, sizeof(in));
    sp.rbuf_desc = test_host_desc(&out, sizeof(out));
    sp.dtype = SHARP_DTYPE_FLOAT;
    sp.op = SHARP_OP_SUM;
    sp.length = 1;
    CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
    unsigned long s0 = sleeps;
    for (int i = 0; i < OPS; i++) {
        CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
        CHECK(out == (float)(NHOST * (NHOST - 1) / 2), "sum %g", out);
    }
    unsigned long slept = sleeps - s0;
    if (sockets && atoi(us) > 0) {
        /* 10 ms: far longer than an 8-byte allreduce takes here */
        CHECK(slept <= OPS / 2, "%d waits spinning slept %lu times", OPS,
              slept);
    } else if (sockets) {
        CHECK(slept >= OPS / 2, "%d waits not spinning slept only %lu times",
              OPS, slept);
    }
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_sock_spin(void **state)
{
    (void)state;
    run_members(m_sock_spin, "10000", NHOST, NHOST);
    run_members(m_sock_spin, "0", NHOST, NHOST);
}

static void test_caps(void **state)
{
    (void)state;
    run_members(m_caps, NULL, NHOST, NHOST);
}

/*
 * The buffer forms of the clients (include/sharp/api/sharp_coll.h,
 * "Buffers and lengths"), called exactly as each client calls them (the
 * same pointers, lengths and offset), on teams of several sizes and rank
 * orders; buffers are allocated to the byte so that AddressSanitizer sees
 * any access past a length; every result is compared with a reference,
 * and bytes outside the result must keep what they held.
 */
typedef struct team {
    int tag, size;
    int rank_of[NHOST]; /* world rank -> rank in the team, -1: not in it */
} team_t;

static const team_t teams[] = {
    {60, 8, {0, 1, 2, 3, 4, 5, 6, 7}},      /* world */
    {61, 8, {7, 6, 5, 4, 3, 2, 1, 0}},      /* reversed */
    {62, 4, {0, 1, 2, 3, -1, -1, -1, -1}},  /* half */
    {63, 4, {-1, 3, -1, 2, -1, 1, -1, 0}},  /* odd, descending */
    {64, 3, {2, -1, -1, 0, -1, -1, 1, -1}}, /* three, shuffled */
};

#define FORM_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            bad = 1;                                                           \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* a reduce-scatter, blocking or not */
static int do_rs(struct sharp_coll_comm *c, struct sharp_coll_reduce_spec *sp,
                 int nb)
{
    void *h = NULL;
    if (!nb) {
        return sharp_coll_do_reduce_scatter(c, sp);
    }
    int rc = sharp_coll_do_reduce_scatter_nb(c, sp, &h);
    return rc == SHARP_COLL_SUCCESS ? sharp_coll_req_wait(h) : rc;
}

static int do_ag(struct sharp_coll_comm *c, struct sharp_coll_gather_spec *gs,
                 int nb)
{
    void *h = NULL;
    if (!nb) {
        return sharp_coll_do_allgather(c, gs);
    }
    int rc = sharp_coll_do_allgather_nb(c, gs, &h);
    return rc == SHARP_COLL_SUCCESS ? sharp_coll_req_wait(h) : rc;
}

static struct sharp_coll_reduce_spec rs_spec(enum sharp_datatype dt,
                                             enum sharp_reduce_op op)
{
    struct sharp_coll_reduce_spec sp;
    memset(&sp, 0x5a, sizeof(sp)); /* root, stream_lock_batch_size: unread */
    sp.dtype = dt;
    sp.op = op;
    sp.tag_dtype = SHARP_DTYPE_INT;
    sp.aggr_mode = SHARP_AGGREGATION_NONE;
    return sp;
}

/*
 * UCC's in-place reduce-scatter (tl/sharp): the destination as source and
 * destination, source length count x size, destination length count,
 * length count, offset 0, where count is the whole vector's; the member's
 * block lands at rank x block of the buffer, the rest keeps its input.
 */
static int rs_ucc_in_place(struct sharp_coll_comm *c, int rank, int size,
                           shp_reduce_desc_t *d, size_t all, uint64_t salt,
                           int nb)
{
    size_t es = shp_reduce_elem_size(d), blk = all / (size_t)size * es;
    uint8_t *buf = malloc(all * es), *in = malloc(all * es),
            *want = malloc(all * es);
    int bad = 0;
    my_data(d, all, rank, salt, buf);
    memcpy(in, buf, all * es);
    FORM_CHECK(reference(d, all, size, salt, want) == 0, "reference");
    struct sharp_coll_reduce_spec sp =
        rs_spec((enum sharp_datatype)d->dtype, (enum sharp_reduce_op)d->op);
    sp.tag_dtype = (enum sharp_datatype)d->tag_dtype;
    sp.sbuf_desc = test_host_desc(buf, all * es * (size_t)size);
    sp.rbuf_desc = test_host_desc(buf, all * es);
    sp.length = all;
    sp.offset = 0;
    int rc = do_rs(c, &sp, nb);
    size_t at = (size_t)rank * blk;
    FORM_CHECK(rc == 0, "UCC in-place reduce-scatter: %s",
               sharp_coll_strerror(rc));
    FORM_CHECK(memcmp(buf + at, want + at, blk) == 0,
               "UCC in-place reduce-scatter dtype %d op %d n %zu: wrong block",
               d->dtype, d->op, all);
    FORM_CHECK(memcmp(buf, in, at) == 0 && memcmp(buf + at + blk, in + at + blk,
                                                  all * es - at - blk) == 0,
               "UCC in-place reduce-scatter: wrote outside the block");
out:
    free(buf);
    free(in);
    free(want);
    return bad;
}

/*
 * NCCL's CollNet plugin (ireducescatter): the vector cut into windows of
 * `wb` bytes; each call's send buffer is the window (length its elements,
 * offset its first byte), the receive length the block, and the receive
 * pointer the block's start moved by where the window starts in it.  In
 * place: the receive buffer is the member's block of the send buffer.
 */
static int rs_nccl(struct sharp_coll_comm *c, int rank, int size,
                   shp_reduce_desc_t *d, size_t all, size_t wb, uint64_t salt,
                   int in_place)
{
    size_t es = shp_reduce_elem_size(d), total = all * es;
    size_t blk = total / (size_t)size;
    uint8_t *g = malloc(total), *in = malloc(total), *want = malloc(total);
    uint8_t *own = in_place ? NULL : malloc(blk);
    uint8_t *recv = in_place ? g + (size_t)rank * blk : own;
    int bad = 0;
    my_data(d, all, rank, salt, g);
    memcpy(in, g, total);
    if (own != NULL) {
        memset(own, 0xee, blk);
    }
    FORM_CHECK(reference(d, all, size, salt, want) == 0, "reference");
    for (size_t wo = 0; wo < total; wo += wb) {
        size_t w = total - wo < wb ? total - wo : wb;
        struct sharp_coll_reduce_spec sp =
            rs_spec((enum sharp_datatype)d->dtype, (enum sharp_reduce_op)d->op);
        sp.tag_dtype = (enum sharp_datatype)d->tag_dtype;
        sp.sbuf_desc = test_host_desc(g + wo, w);
        sp.rbuf_desc = test_host_desc(
            recv + ((int)(wo / blk) == rank ? wo % blk : 0), blk);
        sp.length = w / es;
        sp.offset = wo;
        int rc = do_rs(c, &sp, (int)(wo / wb) % 2);
        FORM_CHECK(rc == 0, "NCCL reduce-scatter window %zu: %s", wo,
                   sharp_coll_strerror(rc));
    }
    size_t at = (size_t)rank * blk;
    FORM_CHECK(memcmp(recv, want + at, blk) == 0,
               "NCCL reduce-scatter%s dtype %d op %d n %zu window %zu: wrong "
               "block",
               in_place ? " in place" : "", d->dtype, d->op, all, wb);
    if (in_place) {
        FORM_CHECK(memcmp(g, in, at) == 0 && memcmp(g + at + blk, in + at + blk,
                                                    total - at - blk) == 0,
                   "NCCL in-place reduce-scatter: wrote outside the block");
    }
out:
    free(g);
    free(in);
    free(want);
    free(own);
    return bad;
}

static uint8_t ag_byte(int k, size_t i, uint64_t salt)
{
    return (uint8_t)(i * 29 + (size_t)k * 101 + salt * 7 + 1);
}

/*
 * Allgather as the clients call it: UCC (offset 0, the receive buffer the
 * whole vector; in place the send buffer is the member's block of it) and
 * NCCL's plugin (windows of `wb` bytes of the receive buffer at `offset`,
 * the send pointer moved by where the window starts in the member's
 * block, the send length the block; in place the send buffer is the
 * member's block of the receive buffer).  wb 0: UCC's form.
 */
static int ag_form(struct sharp_coll_comm *c, int rank, int size, size_t blk,
                   size_t wb, int in_place, uint64_t salt)
{
    size_t total = blk * (size_t)size;
    uint8_t *r = malloc(total), *own = in_place ? NULL : malloc(blk);
    uint8_t *s = in_place ? r + (size_t)rank * blk : own;
    int bad = 0;
    memset(r, 0xee, total);
    for (size_t i = 0; i < blk; i++) {
        s[i] = ag_byte(rank, i, salt);
    }
    if (wb == 0) {
        wb = total;
    }
    for (size_t wo = 0; wo < total; wo += wb) {
        size_t w = total - wo < wb ? total - wo : wb;
        struct sharp_coll_gather_spec gs;
        memset(&gs, 0x77, sizeof(gs)); /* dtype: unread */
        gs.sbuf_desc =
            test_host_desc(s + ((int)(wo / blk) == rank ? wo % blk : 0), blk);
        gs.rbuf_desc = test_host_desc(r + wo, w);
        gs.dtype = SHARP_DTYPE_INT8;
        if (w < total) { /* NCCL sets size to the window; UCC leaves it */
            gs.size = w;
        }
        gs.offset = wo;
        int rc = do_ag(c, &gs, (int)(wo / wb) % 2);
        FORM_CHECK(rc == 0, "allgather window %zu: %s", wo,
                   sharp_coll_strerror(rc));
    }
    for (int k = 0; k < size; k++) {
        for (size_t i = 0; i < blk; i++) {
            FORM_CHECK(r[(size_t)k * blk + i] == ag_byte(k, i, salt),
                       "allgather%s block %zu window %zu: member %d byte %zu",
                       in_place ? " in place" : "", blk, wb, k, i);
        }
    }
out:
    free(r);
    free(own);
    return bad;
}

/* overlaps that are not in place, and lengths too short: EINVAL, before
 * anything is sent, and nothing written */
static int forms_refused(struct sharp_coll_comm *c, int rank, int size)
{
    enum { N = 64 };
    int32_t buf[N * NHOST + 2], keep[N * NHOST + 2], out[N], out0[N];
    int bad = 0, rc;
    for (int i = 0; i < N * NHOST + 2; i++) {
        buf[i] = keep[i] = rank * 1000 + i;
    }
    for (int i = 0; i < N; i++) {
        out[i] = out0[i] = -i;
    }
    struct sharp_coll_reduce_spec sp = rs_spec(SHARP_DTYPE_INT, SHARP_OP_SUM);
    /* allreduce: the result one element past the input, and before it */
    for (int shift = -1; shift <= 1; shift += 2) {
        sp.sbuf_desc = test_host_desc(buf + 1, N * 4);
        sp.rbuf_desc = test_host_desc(buf + 1 + shift, N * 4);
        sp.length = N;
        rc = sharp_coll_do_allreduce(c, &sp);
        FORM_CHECK(rc == SHARP_COLL_EINVAL, "allreduce overlap %d: %d", shift,
                   rc);
    }
    /* allreduce: a receive buffer one byte short; a send buffer too */
    sp.sbuf_desc = test_host_desc(buf, N * 4);
    sp.rbuf_desc = test_host_desc(out, N * 4 - 1);
    rc = sharp_coll_do_allreduce(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "allreduce short rbuf: %d", rc);
    sp.sbuf_desc = test_host_desc(buf, N * 4 - 4);
    sp.rbuf_desc = test_host_desc(out, N * 4);
    rc = sharp_coll_do_allreduce(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "allreduce short sbuf: %d", rc);
    /* reduce-scatter: the block one element into the send buffer */
    sp.sbuf_desc = test_host_desc(buf, (size_t)N * 4 * (size_t)size);
    sp.rbuf_desc = test_host_desc(buf + 1, N * 4);
    sp.length = N;
    sp.offset = 0;
    rc = sharp_coll_do_reduce_scatter(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "reduce-scatter overlap: %d", rc);
    /* reduce-scatter: per-rank form with an offset; in place with a
     * length that does not divide by size; a window not on an element or
     * past the vector; a receive buffer short of the block */
    sp.rbuf_desc = test_host_desc(out, N * 4);
    sp.offset = 4;
    rc = sharp_coll_do_reduce_scatter(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "per-rank offset: %d", rc);
    sp.offset = 0;
    sp.sbuf_desc = test_host_desc(buf, (size_t)(N + 1) * 4 * (size_t)size);
    sp.rbuf_desc = test_host_desc(buf, (N + 1) * 4);
    sp.length = N + 1;
    rc = size > 1 && (N + 1) % size != 0 ? sharp_coll_do_reduce_scatter(c, &sp)
                                         : SHARP_COLL_EINVAL;
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "in place, length %% size: %d", rc);
    sp.sbuf_desc = test_host_desc(buf, 8 * 4);
    sp.rbuf_desc = test_host_desc(out, 8 * 4);
    sp.length = 8;
    sp.offset = 2;
    rc = sharp_coll_do_reduce_scatter(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "window off an element: %d", rc);
    sp.offset = (size_t)size * 8 * 4 - 4;
    rc = sharp_coll_do_reduce_scatter(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "window past the vector: %d", rc);
    sp.sbuf_desc = test_host_desc(buf, (size_t)N * 4 * (size_t)size);
    sp.rbuf_desc = test_host_desc(out, N * 4 - 4);
    sp.length = N;
    sp.offset = 0;
    rc = sharp_coll_do_reduce_scatter(c, &sp);
    FORM_CHECK(rc == SHARP_COLL_EINVAL || size == 1, "short block: %d", rc);
    /* allgather: the send buffer one byte off the member's block of the
     * receive buffer; an offset past the vector */
    struct sharp_coll_gather_spec gs;
    memset(&gs, 0, sizeof(gs));
    gs.sbuf_desc = test_host_desc((uint8_t *)buf + (size_t)rank * 16 + 1, 16);
    gs.rbuf_desc = test_host_desc(buf, 16 * (size_t)size);
    rc = sharp_coll_do_allgather(c, &gs);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "allgather overlap: %d", rc);
    gs.sbuf_desc = test_host_desc(buf + N * NHOST - 4, 16);
    gs.offset = 16 * (size_t)size;
    rc = sharp_coll_do_allgather(c, &gs);
    FORM_CHECK(rc == SHARP_COLL_EINVAL, "allgather offset: %d", rc);
    FORM_CHECK(memcmp(buf, keep, sizeof(buf)) == 0 &&
                   memcmp(out, out0, sizeof(out)) == 0,
               "a refused call wrote");
out:
    return bad;
}

static int m_forms(int rank, void *arg)
{
    (void)arg;
    become_host(rank);
    setenv("SHARP_COLL_ENABLE_SAT", "1", 1);
    CHECK(member_init(rank, NHOST, 1006) == SHARP_COLL_SUCCESS, "init");
    struct sharp_coll_caps caps;
    CHECK(sharp_coll_caps_query(ctx, &caps) == 0, "caps");
    uint64_t dts = caps.support_mask.dtypes, ops = caps.support_mask.reduce_ops;
    size_t payload = (size_t)caps.resources.user_data_per_ost;
    int bad = 0, combo = 0;
    for (unsigned t = 0; t < sizeof(teams) / sizeof(teams[0]); t++) {
        const team_t *tm = &teams[t];
        int r = tm->rank_of[rank], size = tm->size;
        if (r < 0) {
            continue;
        }
        hub_oob_t o = {tm->tag, r, size};
        struct sharp_coll_comm *c = NULL;
        int rc = comm_of(&o, &c);
        CHECK(rc == 0, "team %u comm_init: %s", t, sharp_coll_strerror(rc));
        combo = 0; /* the same rotation on every member of the team */
        /* every claimed dtype x op on the world, a rotation elsewhere */
        for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
            for (int op = 0; op < SHARP_OP_NULL; op++) {
                shp_reduce_desc_t d = {(shp_dtype_t)dt, (shp_op_t)op,
                                       shp_op_is_loc((shp_op_t)op)
                                           ? SHP_DTYPE_I32
                                           : SHP_DTYPE_NULL};
                if (!(dts & (1ull << dt)) || !(ops & (1ull << op)) ||
                    shp_reduce_desc_check(&d, NULL) != SHP_OK ||
                    (t > 0 && combo++ % 9 != (int)t)) {
                    continue;
                }
                size_t es = shp_reduce_elem_size(&d);
                /* a vector across the fragment boundary, whole blocks */
                size_t cnt = (2 * payload / es + 3) / (size_t)size + 1;
                size_t all = cnt * (size_t)size;
                uint64_t salt = (uint64_t)(t * 1000 + dt * 37 + op);
                bad |= rs_ucc_in_place(c, r, size, &d, all, salt, op % 2);
                bad |= rs_check(c, r, size, (enum sharp_datatype)dt,
                                (enum sharp_reduce_op)op, SHARP_DTYPE_INT, cnt,
                                salt + 1, dt % 2);
                /* windows of 1.5 blocks and one element, and of less
                 * than a block */
                bad |= rs_nccl(c, r, size, &d, all, (cnt + cnt / 2 + 1) * es,
                               salt + 2, 0);
                bad |= rs_nccl(c, r, size, &d, all, (cnt / 3 + 1) * es,
                               salt + 3, 1);
                CHECK(!bad, "team %u: dtype %d op %d", t, dt, op);
            }
        }
        /* allgather: blocks of 1, 333 and two fragments' bytes */
        size_t blks[] = {1, 333, 2 * payload + 5};
        for (int k = 0; k < 3; k++) {
            size_t blk = blks[k], wins[] = {0, blk * 3 / 2 + 1, blk / 2 + 1};
            for (int w = 0; w < 3; w++) {
                for (int ip = 0; ip < 2; ip++) {
                    bad |= ag_form(c, r, size, blk, wins[w], ip,
                                   (uint64_t)(t + k * 3 + w));
                }
            }
            CHECK(!bad, "team %u: allgather", t);
        }
        CHECK(forms_refused(c, r, size) == 0, "team %u: refused forms", t);
        /* the communicator goes on after the refused calls */
        CHECK(allreduce_check(c, r, size, SHARP_DTYPE_INT, SHARP_OP_SUM, 100, t,
                              AR_IN_PLACE) == 0,
              "team %u: after the refused calls", t);
        CHECK(sharp_coll_comm_destroy(c) == 0, "team %u: destroy", t);
    }
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_forms(void **state)
{
    (void)state;
    run_members(m_forms, NULL, NHOST, NHOST);
}

/*
 * Threads: NTH threads of every member, each on a communicator of its own
 * (created one after the other first: creation is collective), post
 * windows of non-blocking allreduces of 1 to several fragments, test them
 * round-robin with sharp_coll_req_test until all are done, wait for them,
 * and every few rounds run a blocking allreduce and barrier; one more
 * thread only calls sharp_coll_progress.  With thread support (arg 1) and
 * without it (arg 0: the library must still not abort, and results must
 * be right).  Results are checked element by element.
 */
enum { NTH = 3, TH_ROUNDS = 40, TH_WIN = 4 };

typedef struct th_arg {
    struct sharp_coll_comm *comm;
    int t, rank, size, failed;
    volatile int *stop;
} th_arg_t;

static int64_t th_val(int r, int t, int k, size_t i)
{
    return (int64_t)(r + 1) * (t + 1) + (int64_t)k * (int64_t)i;
}

static void *th_main(void *p)
{
    th_arg_t *a = p;
    size_t maxn = 1200;
    int64_t *s = malloc(TH_WIN * maxn * 8), *r = malloc(TH_WIN * maxn * 8);
    for (int k = 0; k < TH_ROUNDS && !a->failed; k++) {
        void *h[TH_WIN];
        size_t n[TH_WIN];
        for (int w = 0; w < TH_WIN; w++) {
            int kw = k * TH_WIN + w;
            n[w] = 1 + (size_t)(kw * 379 + a->t * 51) % maxn;
            for (size_t i = 0; i < n[w]; i++) {
                s[w * maxn + i] = th_val(a->rank, a->t, kw, i);
                r[w * maxn + i] = -1;
            }
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(s + w * maxn, n[w] * 8);
            sp.rbuf_desc = test_host_desc(r + w * maxn, n[w] * 8);
            sp.dtype = SHARP_DTYPE_LONG;
            sp.op = SHARP_OP_SUM;
            sp.length = n[w];
            int rc = sharp_coll_do_allreduce_nb(a->comm, &sp, &h[w]);
            if (rc != 0) {
                fprintf(stderr, "rank %d thread %d: post: %s\n", a->rank, a->t,
                        sharp_coll_strerror(rc));
                a->failed = 1;
                return NULL;
            }
        }
        /* test them all, in turn, until every one is done */
        for (int left = TH_WIN; left > 0;) {
            left = 0;
            for (int w = 0; w < TH_WIN; w++) {
                left += !sharp_coll_req_test(h[w]);
            }
        }
        for (int w = 0; w < TH_WIN; w++) {
            int kw = k * TH_WIN + w;
            int rc = sharp_coll_req_wait(h[w]);
            for (size_t i = 0; rc == 0 && i < n[w]; i++) {
                int64_t want = 0;
                for (int q = 0; q < a->size; q++) {
                    want += th_val(q, a->t, kw, i);
                }
                if (r[w * maxn + i] != want) {
                    fprintf(stderr,
                            "rank %d thread %d op %d [%zu]: %lld want %lld\n",
                            a->rank, a->t, kw, i, (long long)r[w * maxn + i],
                            (long long)want);
                    a->failed = 1;
                    break;
                }
            }
            if (rc != 0) {
                fprintf(stderr, "rank %d thread %d: wait: %s\n", a->rank, a->t,
                        sharp_coll_strerror(rc));
                a->failed = 1;
            }
        }
        if (k % 8 == 7) { /* blocking calls between the windows */
            int64_t v = a->rank + a->t, out = 0;
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(&v, 8);
            sp.rbuf_desc = test_host_desc(&out, 8);
            sp.dtype = SHARP_DTYPE_LONG;
            sp.op = SHARP_OP_MAX;
            sp.length = 1;
            if (sharp_coll_do_allreduce(a->comm, &sp) != 0 ||
                out != a->size - 1 + a->t ||
                sharp_coll_do_barrier(a->comm) != 0) {
                fprintf(stderr, "rank %d thread %d: blocking calls\n", a->rank,
                        a->t);
                a->failed = 1;
            }
        }
    }
    free(s);
    free(r);
    return NULL;
}

static void *th_progress(void *p)
{
    th_arg_t *a = p;
    while (!*a->stop) {
        if (sharp_coll_progress(ctx) != 0) {
            a->failed = 1;
        }
        sched_yield();
    }
    return NULL;
}

static int m_threads(int rank, void *arg)
{
    int size = NHOST;
    become_host(rank);
    init_threads = (int)(intptr_t)arg;
    CHECK(member_init(rank, size, init_threads ? 1006 : 1007) == 0, "init");
    struct sharp_coll_comm *c[NTH];
    for (int t = 0; t < NTH; t++) {
        hub_oob_t o = {60 + t, rank, size};
        CHECK(comm_of(&o, &c[t]) == 0, "comm %d", t);
    }
    pthread_t th[NTH + 1];
    th_arg_t a[NTH + 1];
    volatile int stop = 0;
    for (int t = 0; t <= NTH; t++) {
        a[t] = (th_arg_t){t < NTH ? c[t] : NULL, t, rank, size, 0, &stop};
        CHECK(pthread_create(&th[t], NULL, t < NTH ? th_main : th_progress,
                             &a[t]) == 0,
              "pthread_create");
    }
    int failed = 0;
    for (int t = 0; t < NTH; t++) {
        pthread_join(th[t], NULL);
        failed |= a[t].failed;
    }
    stop = 1;
    pthread_join(th[NTH], NULL);
    CHECK(!failed && !a[NTH].failed, "a thread failed");
    for (int t = 0; t < NTH; t++) {
        CHECK(sharp_coll_comm_destroy(c[t]) == 0, "destroy %d", t);
    }
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_threads(void **state)
{
    (void)state;
    run_members(m_threads, (void *)1, NHOST, NHOST);
}

/* a context without thread support driven from several threads: safe too */
static void test_threads_unrequested(void **state)
{
    (void)state;
    run_members(m_threads, (void *)0, NHOST, NHOST);
}

/* two jobs at once on shared trees (job A on the odd hosts, B on the even
 * ones: both span every leaf), each with 2 communicators; meanwhile a third
 * job reusing A's id is refused with EJOB_CREATE */
static int m_two_jobs(int member, void *arg)
{
    (void)arg;
    int job = member / 4, rank = member % 4, size = 4;
    if (member == 8 || member == 9) { /* the refused one */
        hub_oob_t sync0 = {50, 4 + member - 8, 6},
                  sync1 = {51, 4 + member - 8, 6};
        setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
        become_host(member - 8);
        CHECK(hub_barrier(&sync0) == 0, "sync"); /* job A is up */
        int rc = member_init_tag(20, member - 8, 2, 2001);
        CHECK(hub_barrier(&sync1) == 0, "sync"); /* job A may go on */
        CHECK(rc == SHARP_COLL_EJOB_CREATE, "a duplicate job id: %d (%s)", rc,
              sharp_coll_strerror(rc));
        return 0;
    }
    become_host(2 * rank + job);
    CHECK(member_init_tag(10 + job, rank, size, 2001 + (uint64_t)job) == 0,
          "init job %d", job);
    if (job == 0) { /* hold job A up while the duplicate is refused */
        hub_oob_t sync0 = {50, rank, 6}, sync1 = {51, rank, 6};
        CHECK(hub_barrier(&sync0) == 0 && hub_barrier(&sync1) == 0, "sync");
    }
    struct sharp_coll_comm *c[2];
    for (int k = 0; k < 2; k++) {
        hub_oob_t o = {30 + 2 * job + k, rank, size};
        int crc = comm_of(&o, &c[k]);
        CHECK(crc == 0, "comm %d: %s", k, sharp_coll_strerror(crc));
    }
    for (int it = 0; it < 300; it++) {
        int64_t v = rank + 10 * job + it, out = 0;
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(&v, 8);
        sp.rbuf_desc = test_host_desc(&out, 8);
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = 1;
        CHECK(sharp_coll_do_allreduce(c[it % 2], &sp) == 0, "allreduce");
        CHECK(out == 6 + 4 * (10 * job + it), "job %d op %d: %lld", job, it,
              (long long)out);
    }
    for (int k = 0; k < 2; k++) {
        CHECK(sharp_coll_comm_destroy(c[k]) == 0, "destroy");
    }
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_two_jobs(void **state)
{
    (void)state;
    run_members(m_two_jobs, NULL, 10, 10);
}

/* no sharpd: every rank gets ESESS_INIT, quickly, none hangs */
static int m_no_sharpd(int rank, void *arg)
{
    (void)arg;
    become_host(rank);
    if (rank == 2) {
        setenv("SHARP_COLL_SHARPD_SOCKET", "/nonexistent/sharpd.sock", 1);
    }
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    uint64_t t0 = shp_time_ns();
    int rc = member_init(rank, 4, 1003);
    CHECK(rc == SHARP_COLL_ESESS_INIT, "init said %d (%s)", rc,
          sharp_coll_strerror(rc));
    CHECK(shp_time_ns() - t0 < SHP_NSEC_PER_SEC, "refusal took over 1 s");
    return 0;
}

static void test_no_sharpd(void **state)
{
    (void)state;
    run_members(m_no_sharpd, NULL, 4, 4);
}

/* the world communicator failed: later operations fail at once, and it
 * and the context go as usual */
static int end_failed_world(void)
{
    CHECK(sharp_coll_do_barrier(world) != SHARP_COLL_SUCCESS, "later op");
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

/* one allreduce of 64 ints on c, its result checked: the library's status
 * (negative: its error), or 1 if the result is wrong (said on stderr) */
static int allreduce_checked(struct sharp_coll_comm *c, int rank, int k)
{
    int32_t s[64], r[64];
    for (int i = 0; i < 64; i++) {
        s[i] = rank + k + i;
    }
    struct sharp_coll_reduce_spec sp = test_host_spec(
        s, sizeof(s), r, sizeof(r), SHARP_DTYPE_INT, SHARP_OP_SUM, 64);
    int rc = sharp_coll_do_allreduce(c, &sp);
    for (int i = 0; rc == SHARP_COLL_SUCCESS && i < 64; i++) {
        CHECK(r[i] == 6 + 4 * (k + i), "op %d: wrong result", k);
    }
    return rc;
}

/* an AN killed under a stream of operations: every member sees an error
 * (pending or later), none hangs, and no result is wrong */
static int m_an_killed(int rank, void *arg)
{
    int size = 4;
    (void)arg;
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    become_host(rank * 2); /* n00001, n00003, n00005, n00007: 4 leaves */
    CHECK(member_init(rank, size, 1004) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    int failed = 0;
    uint64_t t_kill = 0;
    for (int k = 0; k < 100000 && !failed; k++) {
        int rc = allreduce_checked(world, rank, k);
        CHECK(rc <= 0, "op %d: a wrong result", k);
        if (rc != SHARP_COLL_SUCCESS) {
            failed = 1;
            break;
        }
        if (k == 200) {
            t_kill = shp_time_ns(); /* every member is at op 200 now */
        }
        if (k == 200 && rank == 0) {
            /* tell the driver: go and kill */
            int32_t one = 1;
            CHECK(write(*(int *)arg, &one, 4) == 4, "signal driver");
        }
    }
    CHECK(failed, "no error after the AN died");
    CHECK(shp_time_ns() - t_kill < 5 * SHP_NSEC_PER_SEC,
          "the error came %.1f s after the kill",
          (double)(shp_time_ns() - t_kill) / 1e9);
    return end_failed_world();
}

/* 4 members of fn (arg: the write end of a pipe); when one writes to it,
 * the shell command `fault` runs.  Returns how long until every member
 * finished. */
static double run_with_fault(int (*fn)(int, void *), const char *fault)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    hub_t h = {0};
    for (int r = 0; r < 4; r++) {
        assert_true(hub_spawn(&h, fn, r, &p[1]) >= 0);
    }
    close(p[1]);
    pid_t doer = fork();
    if (doer == 0) {
        int32_t go;
        _exit(read(p[0], &go, 4) == 4 ? system(fault) != 0 : 3);
    }
    close(p[0]);
    uint64_t t0 = shp_time_ns();
    assert_int_equal(hub_run(&h, 60), 4);
    double secs = (double)(shp_time_ns() - t0) / 1e9;
    int st;
    assert_int_equal(waitpid(doer, &st, 0), doer);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return secs;
}

/* A shell command that prints `what` of the first group of job that
 * `cond` (Python, of x) holds for, as sharpctl lists them ("" if none) */
static void groups_cmd(char *out, size_t len, uint64_t job, const char *cond,
                       const char *what)
{
    snprintf(out, len,
             "%s/sharpctl --socket %s/am.sock --json groups | "
             "python3 -c 'import json, sys\n"
             "d = json.load(sys.stdin)\n"
             "d = d.get(\"groups\", d) if isinstance(d, dict) else d\n"
             "g = [x for x in d if str(x[\"job_id\"]) == \"%llu\" and %s]\n"
             "print(%s if g else \"\")'",
             fab.bin, fab.dir, (unsigned long long)job, cond, what);
}

#define TOP_AN "g[0][\"ans\"][0][\"name\"]"

/* A standby (sharp_coll_comm_init_standby) over the same 4 members: the
 * top AN of the first group is killed, whose operations then fail, and
 * the standby, placed by the manager on the other spine, goes on right */
static int m_standby(int rank, void *arg)
{
    int size = 4;
    struct sharp_coll_comm *standby = NULL;
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    become_host(rank * 2); /* n00001, n00003, n00005, n00007: 4 leaves */
    CHECK(member_init(rank, size, 1010) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    struct sharp_coll_comm_init_spec cs = {
        .rank = rank, .size = size, .oob_ctx = &world_oob};
    CHECK(sharp_coll_comm_init_standby(ctx, &cs, NULL, &standby) ==
              SHARP_COLL_EINVAL,
          "a standby of nothing");
    CHECK(sharp_coll_comm_init_standby(ctx, &cs, world, &standby) == 0,
          "standby");
    CHECK(allreduce_checked(world, rank, 0) == 0, "on the first group");
    CHECK(allreduce_checked(standby, rank, 1) == 0, "on the standby");
    CHECK(sharp_coll_do_barrier(world) == 0, "barrier");
    if (rank == 0) { /* the driver kills the first group's top AN */
        int32_t one = 1;
        CHECK(write(*(int *)arg, &one, 4) == 4, "signal driver");
    }
    int k = 2, rc = 0;
    while (k < 100000 && (rc = allreduce_checked(world, rank, k)) == 0) {
        k++;
    }
    const char *why =
        rc > 0 ? "a wrong result" : "no error after its top AN died";
    CHECK(rc < 0, "op %d on the first group: %s", k, why);
    /* each member met the error at its own op k: the standby's ops are
     * numbered from one base all share */
    for (int i = 0; i < 100; i++) {
        CHECK(allreduce_checked(standby, rank, 100000 + i) == 0,
              "the standby failed too (op %d)", i);
    }
    CHECK(sharp_coll_comm_destroy(standby) == 0, "destroy the standby");
    return end_failed_world();
}

static void test_standby(void **state)
{
    char cmd[2400], pick[1400];
    (void)state;
    /* the top AN of job 1010's group that stands by none */
    groups_cmd(pick, sizeof(pick), 1010,
               "not x.get(\"standby_of\") and not x.get(\"stripe_of\")",
               TOP_AN);
    snprintf(cmd, sizeof(cmd), "an=$(%s) && %s/sharp-fabric --dir %s kill $an",
             pick, fab.bin, fab.dir);
    run_with_fault(m_standby, cmd);
}

static void test_an_killed(void **state)
{
    char cmd[1200];
    (void)state;
    /* kill -9 the AN of leaf03 (n00005's leaf) when rank 0 says so */
    snprintf(cmd, sizeof(cmd), "%s/sharp-fabric --dir %s kill leaf03", fab.bin,
             fab.dir);
    run_with_fault(m_an_killed, cmd);
}

/* Striping (SHARP_COLL_STRIPES) ----------------------------------------------- */

/* the group that job's group stripes, as sharpctl says ("": none) */
static void stripe_of(uint64_t job, char *out, size_t len)
{
    char cmd[1400];
    groups_cmd(cmd, sizeof(cmd), job, "x.get(\"stripe_of\")",
               "g[0][\"stripe_of\"]");
    out[0] = '\0';
    FILE *f = popen(cmd, "r");
    if (f != NULL) {
        if (fgets(out, (int)len, f) == NULL) {
            out[0] = '\0';
        }
        out[strcspn(out, "\n")] = '\0';
        pclose(f);
    }
}

/* a counter of this member's context, as sharp_coll_dump_stats prints it
 * after `key` (-1: unreadable) */
static long dumped_stat(const char *key)
{
    char line[1024] = "", *p;
    long n = -1;
    FILE *f = tmpfile();
    int saved = dup(2);
    if (f == NULL || saved < 0) {
        return -1;
    }
    fflush(stderr);
    dup2(fileno(f), 2);
    sharp_coll_dump_stats(ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    if (fgets(line, sizeof(line), f) != NULL &&
        (p = strstr(line, key)) != NULL) {
        n = strtol(p + strlen(key), NULL, 10);
    }
    fclose(f);
    return n;
}

/* the operations this member's context cut over stripes */
static long striped_ops(void)
{
    return dumped_stat(" striped ");
}

/* one pass's results: pass 0 on one group, pass 1 striped over two */
enum { ST_N = 131073, ST_BC = 700001, ST_AG = 65539 };
static double st_ar[2][ST_N], st_ex[2][ST_N / 4];

/* the large operations of a pass, each checked, the two float sums kept */
static int stripe_ops(int rank, int size, int pass)
{
    static double s[ST_N];
    static uint8_t b[ST_BC], ag[ST_AG * NHOST];
    uint64_t seed = (uint64_t)rank * 7919 + 1;
    for (int i = 0; i < ST_N; i++) {
        double m = (double)(test_rand(&seed) % 2000000) - 1e6;
        s[i] = m * (i % 3 ? 1e-8 : 1e12); /* the order changes the bits */
    }
    struct sharp_coll_reduce_spec sp =
        test_host_spec(s, sizeof(s), st_ar[pass], sizeof(st_ar[pass]),
                       SHARP_DTYPE_DOUBLE, SHARP_OP_SUM, ST_N);
    CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce 1 MiB");
    sp.rbuf_desc = test_host_desc(st_ex[pass], sizeof(st_ex[pass]));
    sp.length = ST_N / 4;
    sp.op = SHARP_OP_SUM_EXACT;
    CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "exact sum");
    CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_INT, SHARP_OP_SUM,
                          100003, 5, AR_IOV | AR_IN_PLACE) == 0,
          "IOV in place");
    CHECK(allreduce_check(world, rank, size, SHARP_DTYPE_FLOAT, SHARP_OP_MAX,
                          70001, 3, AR_REDUCE) == 0,
          "reduce to root 3");
    for (int i = 0; i < ST_BC; i++) {
        b[i] = rank == 5 ? (uint8_t)(i * 7 + 1) : 0;
    }
    struct sharp_coll_bcast_spec bs;
    memset(&bs, 0, sizeof(bs));
    bs.root = 5;
    bs.buf_desc = test_host_desc(b, ST_BC);
    bs.size = ST_BC;
    CHECK(sharp_coll_do_bcast(world, &bs) == 0, "bcast");
    for (int i = 0; i < ST_BC; i++) {
        CHECK(b[i] == (uint8_t)(i * 7 + 1), "bcast byte %d", i);
    }
    uint8_t mine[ST_AG];
    for (int i = 0; i < ST_AG; i++) {
        mine[i] = (uint8_t)(rank * 31 + i);
    }
    struct sharp_coll_gather_spec gs;
    memset(&gs, 0, sizeof(gs));
    gs.sbuf_desc = test_host_desc(mine, ST_AG);
    gs.rbuf_desc = test_host_desc(ag, sizeof(ag));
    CHECK(sharp_coll_do_allgather(world, &gs) == 0, "allgather");
    for (size_t i = 0; i < sizeof(ag); i++) {
        CHECK(ag[i] == (uint8_t)(i / ST_AG * 31 + i % ST_AG),
              "allgather byte %zu", i);
    }
    return 0;
}

/* two large allreduces in flight at once (non-blocking), both right */
static int stripe_nb(int rank)
{
    enum { N = 100000 };
    static int32_t s[2][N], r[2][N];
    void *h[2];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N; i++) {
            s[k][i] = rank * (k + 1) + i;
        }
        struct sharp_coll_reduce_spec sp =
            test_host_spec(s[k], sizeof(s[k]), r[k], sizeof(r[k]),
                           SHARP_DTYPE_INT, SHARP_OP_SUM, N);
        CHECK(sharp_coll_do_allreduce_nb(world, &sp, &h[k]) == 0, "nb");
    }
    for (int k = 1; k >= 0; k--) {
        CHECK(sharp_coll_req_wait(h[k]) == 0, "wait %d", k);
        for (int i = 0; i < N; i++) {
            CHECK(r[k][i] == 28 * (k + 1) + NHOST * i, "nb %d at %d", k, i);
        }
    }
    return 0;
}

/* bcast from every root, of sizes across the fragment boundary (1 byte,
 * a payload less one, one, one more, two and a bit), an allreduce after
 * each root's, then two in flight from two roots: every member gets the
 * root's bytes (the others send a header per fragment, the ANs fold
 * nothing: tests/an/test_an_tree.c counts the bytes) */
static void bcast_fill(uint8_t *b, size_t n, int root, size_t k, int rank)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = rank == root ? (uint8_t)(i * 31 + k * 7 + (size_t)root) : 0xee;
    }
}

static int bcast_check(const uint8_t *b, size_t n, int root, size_t k)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(b[i] == (uint8_t)(i * 31 + k * 7 + (size_t)root),
              "bcast from %d of %zu bytes: byte %zu", root, n, i);
    }
    return 0;
}

static int m_bcast_roots(int rank, void *arg)
{
    struct sharp_coll_caps caps;
    (void)arg;
    become_host(rank);
    CHECK(member_init(rank, NHOST, 1024) == 0, "init");
    CHECK(sharp_coll_caps_query(ctx, &caps) == 0, "caps");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    size_t p = (size_t)caps.resources.user_data_per_ost;
    size_t sizes[] = {1, p - 1, p, p + 1, 2 * p + 3};
    uint8_t *b = malloc(3 * p + 1), *c = malloc(3 * p + 1);
    CHECK(b != NULL && c != NULL, "memory");
    for (int root = 0; root < NHOST; root++) {
        for (size_t k = 0; k < 5; k++) {
            bcast_fill(b, sizes[k], root, k, rank);
            struct sharp_coll_bcast_spec bs = {.root = root,
                                               .buf_desc =
                                                   test_host_desc(b, sizes[k]),
                                               .size = sizes[k]};
            CHECK(sharp_coll_do_bcast(world, &bs) == 0, "bcast");
            if (bcast_check(b, sizes[k], root, k) != 0) {
                return 1;
            }
        }
        int32_t one = rank + root, sum = 0;
        struct sharp_coll_reduce_spec sp =
            test_host_spec(&one, 4, &sum, 4, SHARP_DTYPE_INT, SHARP_OP_SUM, 1);
        CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
        CHECK(sum == 28 + NHOST * root, "allreduce after root %d", root);
    }
    void *h[2];
    bcast_fill(b, 3 * p + 1, 1, 5, rank);
    bcast_fill(c, 3 * p + 1, 6, 6, rank);
    struct sharp_coll_bcast_spec b1 = {
        .root = 1, .buf_desc = test_host_desc(b, 3 * p + 1), .size = 3 * p + 1};
    struct sharp_coll_bcast_spec b2 = {
        .root = 6, .buf_desc = test_host_desc(c, 3 * p + 1), .size = 3 * p + 1};
    CHECK(sharp_coll_do_bcast_nb(world, &b1, &h[0]) == 0, "bcast nb");
    CHECK(sharp_coll_do_bcast_nb(world, &b2, &h[1]) == 0, "bcast nb");
    CHECK(sharp_coll_req_wait(h[1]) == 0 && sharp_coll_req_wait(h[0]) == 0,
          "wait");
    if (bcast_check(b, 3 * p + 1, 1, 5) != 0 ||
        bcast_check(c, 3 * p + 1, 6, 6) != 0) {
        return 1;
    }
    free(b);
    free(c);
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void test_bcast_roots(void **state)
{
    (void)state;
    run_members(m_bcast_roots, NULL, NHOST, NHOST);
}

/* Free bcasts (only the root sends; docs/libsharp.md): 8-byte bcasts
 * from every root in turn, member 3 slow before each call (so the others
 * run ahead and its results come before it calls), bursts of them in
 * flight, an allreduce every few rounds, then the same with free bcasts
 * off (SHARP_COLL_FREE_BCAST_MAX=0): every result the root's, the stats
 * say which were free and that member 3 took results before its turn. */
static int free_rounds(int rank)
{
    uint64_t bc[4];
    void *h[4];
    for (int round = 0; round < 24; round++) {
        for (int root = 0; root < NHOST; root++) {
            if (rank == 3) {
                usleep(300);
            }
            uint64_t v = rank == root ? (uint64_t)(round * 100 + root) : 7;
            struct sharp_coll_bcast_spec bs = {
                .root = root, .buf_desc = test_host_desc(&v, 8), .size = 8};
            CHECK(sharp_coll_do_bcast(world, &bs) == 0, "bcast");
            CHECK(v == (uint64_t)(round * 100 + root), "round %d root %d: %llu",
                  round, root, (unsigned long long)v);
        }
        for (int i = 0; i < 4; i++) { /* four in flight, roots 0 to 3 */
            bc[i] = rank == i ? (uint64_t)(round * 1000 + i) : 0;
            struct sharp_coll_bcast_spec bs = {
                .root = i, .buf_desc = test_host_desc(&bc[i], 8), .size = 8};
            CHECK(sharp_coll_do_bcast_nb(world, &bs, &h[i]) == 0, "bcast nb");
        }
        for (int i = 3; i >= 0; i--) {
            CHECK(sharp_coll_req_wait(h[i]) == 0, "wait");
            CHECK(bc[i] == (uint64_t)(round * 1000 + i), "nb %d", i);
        }
        if (round % 5 == 4) {
            int32_t one = rank, sum = 0;
            struct sharp_coll_reduce_spec sp = test_host_spec(
                &one, 4, &sum, 4, SHARP_DTYPE_INT, SHARP_OP_SUM, 1);
            CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "allreduce");
            CHECK(sum == 28, "allreduce in round %d: %d", round, sum);
        }
    }
    return 0;
}

static int m_bcast_free(int rank, void *arg)
{
    (void)arg;
    become_host(rank);
    for (int pass = 0; pass < 2; pass++) {
        setenv("SHARP_COLL_FREE_BCAST_MAX", pass ? "0" : "4k", 1);
        CHECK(member_init(rank, NHOST, 1040 + (uint64_t)pass) == 0, "init");
        CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
        size_t most;
        unsigned apart;
        CHECK(sharp_coll_comm_window(world, &most, &apart) == 0 &&
                  most == (pass ? 0 : 4096) && apart == (pass ? 0 : 8),
              "pass %d: window %zu, %u apart", pass, most, apart);
        if (free_rounds(rank) != 0) {
            return 1;
        }
        long nfree = dumped_stat(" free bcasts ");
        long early = dumped_stat("before their turn ");
        /* 24 x 12 bcasts, 7 in 8 of them free */
        CHECK(pass ? nfree == 0 : nfree >= 200, "pass %d: %ld free bcasts",
              pass, nfree);
        CHECK(pass || rank != 3 || early > 0,
              "member 3: no result before its turn");
        CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
        CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    }
    unsetenv("SHARP_COLL_FREE_BCAST_MAX");
    return 0;
}

static void test_bcast_free(void **state)
{
    (void)state;
    run_members(m_bcast_free, NULL, NHOST, NHOST);
}

/* The same large operations on one group, then striped over two (the
 * other spine's tree): every result right, and the float sums bitwise
 * the same (each element reduced on one tree, in the same order). */
static int m_stripes(int rank, void *arg)
{
    char of[64];
    (void)arg;
    become_host(rank);
    for (int pass = 0; pass < 2; pass++) {
        setenv("SHARP_COLL_STRIPES", pass ? "2" : "1", 1);
        CHECK(member_init(rank, NHOST, 1020 + (uint64_t)pass) == 0, "init");
        CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
        if (rank == 0) {
            stripe_of(1020 + (uint64_t)pass, of, sizeof(of));
            CHECK(pass ? of[0] != '\0' : of[0] == '\0',
                  "pass %d: stripe_of '%s'", pass, of);
        }
        if (stripe_ops(rank, NHOST, pass) != 0 || stripe_nb(rank) != 0) {
            return 1;
        }
        /* striped: the two allreduces, the exact sum's passes, the IOV
         * one, the reduce, the bcast, the allgather, the two in flight */
        long n = striped_ops();
        CHECK(pass ? n >= 8 : n == 0, "pass %d: %ld operations striped", pass,
              n);
        CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
        CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    }
    CHECK(!memcmp(st_ar[0], st_ar[1], sizeof(st_ar[0])),
          "the striped sum's bits differ from one group's");
    CHECK(!memcmp(st_ex[0], st_ex[1], sizeof(st_ex[0])),
          "the striped exact sum differs");
    return 0;
}

static void test_stripes(void **state)
{
    (void)state;
    run_members(m_stripes, NULL, NHOST, NHOST);
}

/* The top AN of a communicator's stripe killed under a stream of large
 * allreduces: every member sees an error, none hangs, no result is wrong */
static int m_stripe_killed(int rank, void *arg)
{
    enum { N = 1 << 16 }; /* 256 KiB: striped */
    static int32_t s[N], r[N];
    char of[64];
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    setenv("SHARP_COLL_STRIPES", "2", 1);
    become_host(rank * 2);
    CHECK(member_init(rank, 4, 1022) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    if (rank == 0) {
        stripe_of(1022, of, sizeof(of));
        CHECK(of[0] != '\0', "no stripe");
    }
    struct sharp_coll_reduce_spec sp = test_host_spec(
        s, sizeof(s), r, sizeof(r), SHARP_DTYPE_INT, SHARP_OP_SUM, N);
    int k, rc = 0;
    uint64_t t_kill = 0;
    for (k = 0; k < 100000; k++) {
        for (int i = 0; i < N; i++) {
            s[i] = rank + k + i;
        }
        if ((rc = sharp_coll_do_allreduce(world, &sp)) != 0) {
            break;
        }
        for (int i = 0; i < N; i++) {
            CHECK(r[i] == 6 + 4 * (k + i), "op %d: wrong result at %d", k, i);
        }
        if (k == 20) {
            t_kill = shp_time_ns();
        }
        if (k == 20 && rank == 0) {
            int32_t one = 1;
            CHECK(write(*(int *)arg, &one, 4) == 4, "signal driver");
        }
    }
    CHECK(rc != 0, "no error after the stripe's AN died");
    CHECK(shp_time_ns() - t_kill < 5 * SHP_NSEC_PER_SEC,
          "the error came %.1f s after the kill",
          (double)(shp_time_ns() - t_kill) / 1e9);
    return end_failed_world();
}

static void test_stripe_killed(void **state)
{
    char cmd[4096], pick[1400], up[64] = "";
    (void)state;
    /* the stripe's top AN is killed, then started again for the tests
     * after, and the test waits until the manager has both spines' trees */
    groups_cmd(pick, sizeof(pick), 1022, "x.get(\"stripe_of\")", TOP_AN);
    snprintf(cmd, sizeof(cmd),
             "an=$(%s) && %s/sharp-fabric --dir %s kill $an && "
             "for t in 1 2 3; do sleep $t; %s/sharp-fabric --dir %s start "
             "$an >/dev/null && exit 0; done; exit 1",
             pick, fab.bin, fab.dir, fab.bin, fab.dir);
    run_with_fault(m_stripe_killed, cmd);
    for (int i = 0; i < 300 && strcmp(up, "2") != 0; i++) {
        usleep(100000);
        snprintf(cmd, sizeof(cmd),
                 "%s/sharpctl --socket %s/am.sock --json trees | "
                 "python3 -c 'import json, sys\n"
                 "d = json.load(sys.stdin)\n"
                 "d = d.get(\"trees\", d) if isinstance(d, dict) else d\n"
                 "print(len([t for t in d if t.get(\"state\") == \"up\"]))'",
                 fab.bin, fab.dir);
        FILE *f = popen(cmd, "r");
        if (f != NULL) {
            if (fgets(up, sizeof(up), f) == NULL) {
                up[0] = '\0';
            }
            up[strcspn(up, "\n")] = '\0';
            pclose(f);
        }
    }
    assert_string_equal(up, "2");
}

/* sharp_coll_comm_cancel from another thread while the member waits in a
 * blocking operation the others never post: the wait ends with an error,
 * and the group fails in the network (the others' next operations fail
 * too, instead of hanging) */
static void *cancel_later(void *comm)
{
    usleep(200000);
    (void)sharp_coll_comm_cancel(comm);
    return NULL;
}

static int m_cancel(int rank, void *arg)
{
    int size = 4;
    (void)arg;
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    become_host(rank * 2); /* one member a leaf */
    CHECK(member_init(rank, size, 1008) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    CHECK(sharp_coll_do_barrier(world) == 0, "barrier");
    uint64_t t0 = shp_time_ns();
    if (rank == 0) {
        int64_t v = 1, out = 0;
        struct sharp_coll_reduce_spec sp;
        pthread_t th;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(&v, 8);
        sp.rbuf_desc = test_host_desc(&out, 8);
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = 1;
        CHECK(pthread_create(&th, NULL, cancel_later, world) == 0, "thread");
        int rc = sharp_coll_do_allreduce(world, &sp);
        pthread_join(th, NULL);
        CHECK(rc != SHARP_COLL_SUCCESS, "the canceled allreduce succeeded");
        /* before the others post anything (which would fail it anyway) */
        CHECK(shp_time_ns() - t0 < SHP_NSEC_PER_SEC, "the cancel took %.1f s",
              (double)(shp_time_ns() - t0) / 1e9);
    } else {
        /* they never post that allreduce; later, a barrier: it fails (the
         * group failed in the network when member 0 gave up) */
        usleep(1500000);
        t0 = shp_time_ns();
        CHECK(sharp_coll_do_barrier(world) != SHARP_COLL_SUCCESS,
              "a barrier of a canceled group succeeded");
        CHECK(shp_time_ns() - t0 < 3 * SHP_NSEC_PER_SEC,
              "the group's failure took %.1f s",
              (double)(shp_time_ns() - t0) / 1e9);
    }
    return end_failed_world();
}

static void test_cancel(void **state)
{
    (void)state;
    run_members(m_cancel, NULL, 4, 4);
}

static void test_print_config(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    setenv("SHARP_COLL_PIPELINE_DEPTH", "3", 1);
    assert_int_equal(sharp_coll_print_config(f,
                                             SHARP_COLL_CONFIG_PRINT_CONFIG |
                                                 SHARP_COLL_CONFIG_PRINT_DOC,
                                             "test"),
                     0);
    fclose(f);
    unsetenv("SHARP_COLL_PIPELINE_DEPTH");
    assert_non_null(strstr(buf, "SHARP_COLL_LOG_LEVEL="));
    assert_non_null(strstr(buf, "SHARP_COLL_PIPELINE_DEPTH=3"));
    assert_non_null(strstr(buf, "SHARP_COLL_ENABLE_MCAST_TARGET="));
    assert_non_null(strstr(buf, "outstanding operations"));
    free(buf);
    assert_string_equal(sharp_coll_strerror(SHARP_COLL_ESESS_INIT),
                        "Cannot reach the local sharpd");
    assert_string_equal(sharp_coll_strerror(12345), "Unknown error");
    assert_int_equal(SHARP_API, (3 << 24) | (6 << 16));
}

static int setup(void **state)
{
    (void)state;
    char topo[600], args[64];
    snprintf(topo, sizeof(topo), "%s/ft.ibnd", fab.dir);
    snprintf(args, sizeof(args), "fat-tree --radix 4 --hosts %d", NHOST);
    mkdir(fab.dir, 0700);
    if (test_fabric_topo(&fab, args, topo) != 0 ||
        /* groups over tree levels (leaf ANs to kill): no flat groups */
        test_fabric_up(&fab, "SHARP_AM_FLAT_MAX=0", topo, net, ">/dev/null") !=
            0) {
        return -1;
    }
    for (int i = 0; i < NHOST; i++) {
        snprintf(hosts[i], sizeof(hosts[i]), "n%05d", i + 1);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = test_fabric_down(&fab, ">/dev/null");
    if (getenv("KEEP_LOGS") == NULL) {
        test_fabric_sh("rm -rf %s", fab.dir);
    }
    return rc;
}

/* Network namespaces: every daemon and member in a namespace of its own,
 * links through a bridge.  Results by multicast only (SHARP_AM_DIST=mcast)
 * with every host dropping 10% of the UDP datagrams it receives (nftables;
 * this kernel has no netem): every result right, lost ones recovered over
 * RC (the leaf ANs count retransmits). */
static int m_mcast_loss(int rank, void *arg)
{
    int size = NHOST;
    become_host(rank);
    CHECK(member_init(rank, size, arg != NULL ? *(uint64_t *)arg : 3001) == 0,
          "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    for (int k = 0; k < 400; k++) {
        int32_t s[300], r[300];
        for (int i = 0; i < 300; i++) {
            s[i] = rank * 3 + k + i;
        }
        struct sharp_coll_reduce_spec sp = test_host_spec(
            s, sizeof(s), r, sizeof(r), SHARP_DTYPE_INT, SHARP_OP_SUM, 300);
        CHECK(sharp_coll_do_allreduce(world, &sp) == 0, "op %d", k);
        for (int i = 0; i < 300; i++) {
            CHECK(r[i] == 3 * size * (size - 1) / 2 + size * (k + i),
                  "op %d [%d] wrong", k, i);
        }
    }
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static long an_counter_sum(const char *key)
{
    char cmd[1200];
    long v = -1;
    snprintf(cmd, sizeof(cmd),
             "%s/sharpctl --socket %s/am.sock --json ans | "
             "grep -o '\"%s\": [0-9]*' | awk '{ s += $2 } END { print s }'",
             nsfab.bin, nsfab.dir, key);
    FILE *f = popen(cmd, "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &v) != 1) {
            v = -1;
        }
        pclose(f);
    }
    return v;
}

static void test_netns_mcast_loss(void **state)
{
    (void)state;
    for (int h = 0; h < NHOST; h++) {
        assert_int_equal(test_fabric_do(&nsfab, "loss %s 10 --udp", hosts[h]),
                         0);
    }
    run_members(m_mcast_loss, NULL, NHOST, NHOST);
    usleep(700000); /* two rounds of AN counters */
    long rt = an_counter_sum("retransmits");
    print_message("retransmitted results: %ld\n", rt);
    assert_true(rt > 0);
    for (int h = 0; h < NHOST; h++) {
        test_fabric_do(&nsfab, "loss %s 0", hosts[h]);
    }
}

/* Multicast reaches no result to one host (it drops every UDP datagram):
 * its member has its first results retransmitted, then asks for results
 * over RC (rc_only) and gets every later one unasked: about two windows of
 * retransmits, not one per operation (400). */
static void test_netns_mcast_unreachable(void **state)
{
    static uint64_t job = 3004;
    (void)state;
    assert_int_equal(test_fabric_do(&nsfab, "loss %s 100 --udp", hosts[0]), 0);
    usleep(700000);
    long before = an_counter_sum("retransmits");
    run_members(m_mcast_loss, &job, NHOST, NHOST);
    usleep(700000); /* two rounds of AN counters */
    long rt = an_counter_sum("retransmits") - before;
    print_message("retransmitted results, multicast lost at one host: %ld\n",
                  rt);
    test_fabric_do(&nsfab, "loss %s 0", hosts[0]);
    assert_true(before >= 0);
    assert_true(rt > 0);
    assert_true(rt < 150);
}

/* a host's link cut under a stream of operations: every member errors
 * out (the AM loses that host's sharpd and revokes the group; the member
 * there loses its AM), none hangs */
/* the hosts (indexes) and job of the next link-cut run */
static int cut_hosts[4] = {0, 2, 4, 6};
static uint64_t cut_job = 3002;

static int m_link_cut(int rank, void *arg)
{
    int size = 4;
    setenv("SHARP_COLL_LOG_LEVEL", "0", 1);
    become_host(cut_hosts[rank]);
    CHECK(member_init(rank, size, cut_job) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    int failed = 0;
    for (int k = 0; k < 1000000 && !failed; k++) {
        int64_t v = rank + k, out = 0;
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(&v, 8);
        sp.rbuf_desc = test_host_desc(&out, 8);
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = 1;
        if (sharp_coll_do_allreduce(world, &sp) != SHARP_COLL_SUCCESS) {
            failed = 1;
            break;
        }
        CHECK(out == 6 + 4 * k, "op %d wrong", k);
        if (k == 100 && rank == 0) {
            int32_t one = 1;
            CHECK(write(*(int *)arg, &one, 4) == 4, "signal");
        }
    }
    CHECK(failed, "no error after the link was cut");
    sharp_coll_comm_destroy(world);
    sharp_coll_finalize(ctx);
    return 0;
}

/* cut NAME's link while 4 members (on cut_hosts) run allreduces: every
 * member must see the error and finish; with keepalives of 1 s the AM and
 * the cut side's sharpd notice within about 3 s */
static void link_cut_case(const char *name)
{
    char cmd[900];
    test_fabric_cmd(&nsfab, cmd, sizeof(cmd), "link %s down", name);
    double secs = run_with_fault(m_link_cut, cmd);
    print_message("every member saw the error and finished within %.1f s\n",
                  secs);
    assert_true(secs < 12);
}

static void test_netns_link_cut(void **state)
{
    (void)state;
    link_cut_case("n00003"); /* a member's host */
}

/* a leaf AN's link cut (the AN is alive, unreachable): same outcome */
static void test_netns_an_link_cut(void **state)
{
    (void)state;
    /* members on n00001, n00004 (leaf02's, not cut before), n00005,
     * n00007 */
    static const int h[4] = {0, 3, 4, 6};
    memcpy(cut_hosts, h, sizeof(h));
    cut_job = 3003;
    link_cut_case("leaf02");
}

/*
 * Forged data-path messages (docs/security.md), sent by an unprivileged
 * user (uid 65534) from one host's namespace while a job runs: datagrams
 * to the group's multicast address (results with a wrong value, with and
 * without a made-up tag, and errors), and an error for the group over a
 * connection of its own to every AN of the group.  Rank 0 contributes
 * 10 ms late to every operation, so the other members wait for each
 * result while the forgeries arrive.  Every result stays right, no member
 * fails, and the ANs count the forged errors.
 */
enum { FORGE_OPS = 150, FORGE_SECS = 4 };
static const uint64_t forge_job = 3010;

static int m_forged_job(int rank)
{
    hub_oob_t up = {71, rank, NHOST + 1}, done = {72, rank, NHOST + 1};
    int size = NHOST;
    become_host(rank);
    CHECK(member_init(rank, size, forge_job) == 0, "init");
    CHECK(comm_of(&world_oob, &world) == 0, "comm_init");
    CHECK(hub_barrier(&up) == 0, "sync");
    for (int k = 0; k < FORGE_OPS; k++) {
        int64_t v = rank + k, out = -1;
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(&v, 8);
        sp.rbuf_desc = test_host_desc(&out, 8);
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = 1;
        if (rank == 0) {
            usleep(10000);
        }
        int rc = sharp_coll_do_allreduce(world, &sp);
        CHECK(rc == 0, "op %d: %s", k, sharp_coll_strerror(rc));
        CHECK(out == size * (size - 1) / 2 + size * k,
              "op %d: %lld, want %d (a forged result taken)", k, (long long)out,
              size * (size - 1) / 2 + size * k);
    }
    sharp_coll_dump_stats(ctx);
    CHECK(hub_barrier(&done) == 0, "sync");
    CHECK(sharp_coll_comm_destroy(world) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

/* the forger: the group's id and multicast address, and every AN's
 * address, from the manager (an attacker would guess the first: ids count
 * up from 1) */
static int m_forger(void)
{
    hub_oob_t up = {71, NHOST, NHOST + 1}, done = {72, NHOST, NHOST + 1};
    char cmd[2400], line[128], ans[8][128];
    unsigned gid = 0, tree = 0, port = 0, nans = 0, a, b, c, d;
    struct sockaddr_in mc = {.sin_family = AF_INET};

    CHECK(hub_barrier(&up) == 0, "sync");
    snprintf(cmd, sizeof(cmd),
             "%s/sharpctl --socket %s/am.sock --json groups --job %llu | "
             "jq -r '.. | objects | select(has(\"group_id\")) | "
             "\"\\(.group_id) \\(.tree_id) \\(.mcast_addr)\"'; "
             "%s/sharpctl --socket %s/am.sock --json ans | "
             "jq -r '.. | objects | select(has(\"addr\")) | .addr'",
             nsfab.bin, nsfab.dir, (unsigned long long)forge_job, nsfab.bin,
             nsfab.dir);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL, "popen");
    if (fgets(line, sizeof(line), f) == NULL ||
        sscanf(line, "%u %u %u.%u.%u.%u:%u", &gid, &tree, &a, &b, &c, &d,
               &port) != 7) {
        pclose(f);
        CHECK(0, "no group of job %llu", (unsigned long long)forge_job);
    }
    while (nans < 8 && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(ans[nans++], sizeof(ans[0]), "%s", line);
    }
    pclose(f);
    CHECK(nans > 0, "no AN addresses");
    mc.sin_addr.s_addr = htonl(a << 24 | b << 16 | c << 8 | d);
    mc.sin_port = htons((uint16_t)port);
    become_host(NHOST - 1); /* into a host's namespace, then nobody */
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0,
          "cannot become uid 65534");
    /* an error for the group from a link of its own, to every AN */
    for (unsigned i = 0; i < nans; i++) {
        char host[128], *colon = strrchr(ans[i], ':');
        if (colon == NULL) {
            continue;
        }
        snprintf(host, sizeof(host), "%.*s", (int)(colon - ans[i]), ans[i]);
        struct sockaddr_in an = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)atoi(colon + 1))};
        int s = socket(AF_INET, SOCK_STREAM, 0);
        uint8_t raw[SHP_WIRE_HDR_LEN];
        shp_wire_hdr_t h;
        shp_wire_hdr_init(&h, SHP_WIRE_OP_ERROR, (uint16_t)tree, gid, 0);
        h.status = SHP_ERR_GROUP_FAILED;
        shp_wire_hdr_pack(&h, raw);
        CHECK(s >= 0 && inet_pton(AF_INET, host, &an.sin_addr) == 1 &&
                  connect(s, (struct sockaddr *)&an, sizeof(an)) == 0,
              "cannot connect to the AN at %s: %s", ans[i], strerror(errno));
        CHECK(write(s, raw, sizeof(raw)) == (ssize_t)sizeof(raw), "send to %s",
              ans[i]);
        usleep(100000);
        close(s);
    }
    /* results of 1337 for every seq a member may wait on, without a tag,
     * with a made-up one, and errors, by multicast, for FORGE_SECS */
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct in_addr ifa;
    snprintf(line, sizeof(line), "10.77.64.%d", NHOST);
    inet_pton(AF_INET, line, &ifa);
    setsockopt(u, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa));
    uint64_t end = shp_time_ns() + FORGE_SECS * 1000000000ull;
    long sent = 0;
    while (shp_time_ns() < end) {
        for (uint32_t seq = 0; seq < FORGE_OPS + 4; seq++) {
            uint8_t m[SHP_WIRE_HDR_LEN + 8 + SHP_WIRE_MAC_LEN];
            shp_reduce_desc_t dsc = {SHP_DTYPE_I64, SHP_OP_SUM, SHP_DTYPE_NULL};
            shp_wire_hdr_t h;
            int64_t v = 1337;
            int kind = (int)(seq % 3);
            shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_RESULT, (uint16_t)tree,
                                  gid, seq, &dsc, 1);
            h.flags = SHP_WIRE_F_MCAST;
            h.payload_len = 8;
            if (kind == 1) { /* a tag of random bytes */
                h.flags |= SHP_WIRE_F_MAC;
                h.payload_len += SHP_WIRE_MAC_LEN;
            } else if (kind == 2) {
                shp_wire_hdr_init(&h, SHP_WIRE_OP_ERROR, (uint16_t)tree, gid,
                                  seq);
                h.status = SHP_ERR_GROUP_FAILED;
            }
            shp_wire_hdr_pack(&h, m);
            memcpy(m + SHP_WIRE_HDR_LEN, &v, 8);
            for (int i = 0; i < SHP_WIRE_MAC_LEN; i++) {
                m[SHP_WIRE_HDR_LEN + 8 + i] = (uint8_t)rand();
            }
            sent += sendto(u, m, SHP_WIRE_HDR_LEN + h.payload_len, 0,
                           (struct sockaddr *)&mc, sizeof(mc)) > 0;
        }
        usleep(200);
    }
    close(u);
    print_message("forger (uid %d): %ld datagrams to %s\n", (int)getuid(), sent,
                  inet_ntoa(mc.sin_addr));
    CHECK(sent > 0, "sent nothing");
    CHECK(hub_barrier(&done) == 0, "sync");
    return 0;
}

static int m_forged(int rank, void *arg)
{
    (void)arg;
    return rank < NHOST ? m_forged_job(rank) : m_forger();
}

static void test_netns_forged(void **state)
{
    (void)state;
    long before = an_counter_sum("err_forged");
    run_members(m_forged, NULL, NHOST + 1, NHOST + 1);
    usleep(700000); /* two rounds of AN counters */
    long forged = an_counter_sum("err_forged");
    print_message("forged errors the ANs ignored: %ld\n", forged - before);
    assert_true(forged > before);
}

static int setup_netns(void **state)
{
    (void)state;
    char topo[600];
    snprintf(topo, sizeof(topo), "%s/ft.ibnd", fab.dir);
    in_netns = 1;
    /* results by multicast only; AN counters polled often; the AM notices
     * a lost sharpd within 3 s */
    return test_fabric_up(&nsfab,
                          "SHARP_AM_DIST=mcast SHARP_AM_STATS_INTERVAL=300ms "
                          "SHARP_AM_FLAT_MAX=0 "
                          "SHARP_AM_KEEPALIVE=1s SHARPD_KEEPALIVE=1s",
                          topo, NULL, ">/dev/null");
}

static int teardown_netns(void **state)
{
    (void)state;
    in_netns = 0;
    return test_fabric_down(&nsfab, ">/dev/null");
}

int main(void)
{
    char dir[256], nsdir[300];
    snprintf(dir, sizeof(dir), "/tmp/sharp-test-coll.%d", (int)getpid());
    snprintf(nsdir, sizeof(nsdir), "%s-netns", dir);
    /* build/tests/libsharp/test_coll -> build/bin */
    if (test_fabric_init(&fab, "/../../bin", dir) != 0 ||
        test_fabric_init(&nsfab, "/../../bin", nsdir) != 0) {
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (getenv("SHARP_TEST_NET") != NULL) {
        net = getenv("SHARP_TEST_NET");
    }
    if (getenv("SHARP_TEST_ONLY") != NULL) { /* some tests, by name */
        cmocka_set_test_filter(getenv("SHARP_TEST_ONLY"));
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_print_config),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_repeatable),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_sock_spin),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_unrequested),
        cmocka_unit_test(test_no_sharpd),
        cmocka_unit_test(test_two_jobs),
        /* last: it takes an AN away */
        cmocka_unit_test(test_bcast_roots),
        cmocka_unit_test(test_bcast_free),
        cmocka_unit_test(test_cancel), /* before an AN is killed */
        cmocka_unit_test(test_stripes),
        cmocka_unit_test(test_stripe_killed), /* kills and restarts one */
        cmocka_unit_test(test_standby),       /* kills a spine */
        cmocka_unit_test(test_an_killed),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    /* network namespaces need root and iproute2 */
    const char *only = getenv("SHARP_TEST_ONLY");
    if (only != NULL && strncmp(only, "test_netns", 10) != 0) {
        printf("netns tests skipped: SHARP_TEST_ONLY names none\n");
    } else if (getuid() == 0 &&
               system("command -v ip >/dev/null && command -v tc "
                      ">/dev/null") == 0) {
        const struct CMUnitTest ns_tests[] = {
            cmocka_unit_test(test_netns_mcast_loss),
            cmocka_unit_test(test_netns_mcast_unreachable),
            cmocka_unit_test(test_netns_forged),
            /* last: they cut links (a host's, then an AN's) */
            cmocka_unit_test(test_netns_link_cut),
            cmocka_unit_test(test_netns_an_link_cut),
        };
        mkdir(dir, 0700);
        char topo[400], args[64];
        snprintf(topo, sizeof(topo), "%s/ft.ibnd", dir);
        snprintf(args, sizeof(args), "fat-tree --radix 4 --hosts %d", NHOST);
        if (test_fabric_topo(&fab, args, topo) != 0) {
            return 1;
        }
        rc |= cmocka_run_group_tests_name("netns", ns_tests, setup_netns,
                                          teardown_netns);
        if (getenv("KEEP_LOGS") == NULL) {
            test_fabric_sh("rm -rf %s %s", dir, nsdir);
        }
    } else {
        printf("netns tests skipped: they need root and iproute2\n");
    }
    return rc;
}
