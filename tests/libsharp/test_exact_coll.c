/*
 * Exact sums (SHARP_OP_SUM_EXACT) end to end: one multiset of adversarial
 * values (+-max with tiny ones, subnormals, cancellations, halfway cases,
 * random bits over the whole range) reduced over three fabrics (flat: one
 * AN; 2-level; 3-level fat-trees, groups trimmed to their hosts) with 16
 * and 8 members, ranks permuted over hosts and over contributions, one or
 * two members per host, two contributions per member (node-local, through
 * sharp_coll_do_allreduce_exact_n), random arrival delays, one pass and two
 * passes: every member's result must equal, bit for bit, the correctly
 * rounded exact sum computed by MPFR in the member (tests/support/exact_ref.h),
 * so every result is the same.  Then a malformed accumulator at the AN, and
 * the group's exact operations in `sharpctl groups`.
 *
 * Fabrics on 127.26.x.y (SHARP_TEST_NET), one at a time.
 */
#include "tests/support/test_util.h"

#include <sharp/api/sharp.h>

#include "reduce/reduce.h"
#include "protocol/wire.h"
#include "tests/support/fabric.h"
#include "tests/support/oob_hub.h"
#include "tests/support/exact_ref.h"
#include "tests/support/coll_desc.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#define NH 16    /* hosts of every fabric */
#define NC 16    /* contributions: the multiset */
#define NMAX 512 /* elements: 4 KiB of f64 */

/* the fabric of the test that runs (DIR/fab; DIR also holds its
 * topology) */
static test_fabric_t fab;
static char dir[256];
static const char *net = "127.26";
static hub_oob_t world_oob;
static struct sharp_coll_context *ctx;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: line %d: ", world_oob.rank, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2a9d0bull;
    return x ^ (x >> 33);
}

/* the largest finite value of each type, and its half ulp of 1 */
static double big(shp_dtype_t dt)
{
    switch (dt) {
    case SHP_DTYPE_F64: return 1.7976931348623157e308;
    case SHP_DTYPE_F16: return 65504.0;
    default: return 3.3895313892515355e38; /* f32 and bf16: bf16's max */
    }
}

/* contribution c's value of element i: the adversarial multiset */
static uint64_t gen(shp_dtype_t dt, int c, size_t i)
{
    tfmt_t t = tf(dt);
    uint64_t r = mix(((uint64_t)dt << 40) ^ ((uint64_t)c << 20) ^ i);
    double sub = ldexp(1.0, t.emin - 1); /* the smallest subnormal */
    switch (i % 8) {
    case 0: /* +max and -max with tiny ones */
        return c == 0   ? near(dt, big(dt))
               : c == 1 ? near(dt, -big(dt))
                        : near(dt, (double)(r % 7) * sub * (r & 8 ? 1 : -1));
    case 1: /* 1 + half an ulp: a tie, to even (1); -0 elsewhere */
        return c == 0   ? near(dt, 1.0)
               : c == 5 ? near(dt, ldexp(1.0, -(int)t.p))
                        : near(dt, -0.0);
    case 2: /* the same tie, with one smallest subnormal more: up */
        return c == 0   ? near(dt, 1.0)
               : c == 7 ? near(dt, ldexp(1.0, -(int)t.p))
               : c == 9 ? near(dt, sub)
                        : near(dt, -0.0);
    case 3: /* subnormals with random signs */
        return near(dt, (double)(r % 1000) * sub * (r & 1024 ? 1 : -1));
    case 4: { /* cancellation: x_c and -x_c, and a remainder */
        uint64_t q = mix((uint64_t)(c % 8) ^ (i << 8));
        double x = ldexp((double)(q % 100000 + 1), (int)(q >> 40) % 40 - 20);
        return c == 15 ? near(dt, 3 * sub) : near(dt, c < 8 ? x : -x);
    }
    case 5: /* +max twice: the exact sum overflows */
        return c < 2 ? near(dt, big(dt)) : near(dt, 0.0);
    default: { /* random finite bits over the whole range */
        uint64_t b;
        do {
            b = r & (t.size == 8 ? ~0ull : (1ull << (t.size * 8)) - 1);
            r = mix(r);
        } while (!isfinite(to_double(dt, b)));
        return b;
    }
    }
}

static const enum sharp_datatype api_dt[4] = {
    SHARP_DTYPE_DOUBLE, SHARP_DTYPE_FLOAT, SHARP_DTYPE_FLOAT_SHORT,
    SHARP_DTYPE_BFLOAT16};
static const size_t sizes[] = {1, 8, 64, NMAX};

/* one configuration: member `rank` of `size` on host hosts[rank],
 * contributing the contributions contrib[rank][0..per) */
typedef struct cfg {
    const char *name;
    int size, per;
    int host[NC];
    int contrib[NC][2];
    uint64_t job;
    int check_ctl; /* look at `sharpctl groups` */
} cfg_t;

static int m_exact(int rank, void *arg)
{
    const cfg_t *cf = arg;
    struct sharp_coll_comm *comm;
    signal(SIGPIPE, SIG_IGN);
    test_fabric_become_host(&fab, cf->host[rank]);
    world_oob = (hub_oob_t){1, rank, cf->size};
    struct sharp_coll_init_spec s = {0};
    s.job_id = cf->job;
    s.world_rank = rank;
    s.world_size = cf->size;
    s.config = sharp_coll_default_config;
    s.config.coll_timeout = 20000;
    s.oob_colls.bcast = hub_bcast;
    s.oob_colls.barrier = hub_barrier;
    s.oob_colls.gather = hub_gather;
    s.oob_ctx = &world_oob;
    CHECK(sharp_coll_init(&s, &ctx) == 0, "init");
    struct sharp_coll_comm_init_spec cs = {
        .rank = rank, .size = cf->size, .oob_ctx = &world_oob};
    CHECK(sharp_coll_comm_init(ctx, &cs, &comm) == 0, "comm_init");
    struct sharp_coll_caps caps;
    CHECK(sharp_coll_caps_query(ctx, &caps) == 0 &&
              (caps.support_mask.reduce_ops & (1ull << SHARP_OP_SUM_EXACT)),
          "SUM_EXACT not in the caps");

    static uint8_t sbuf[2 * NMAX * 8], rbuf[NMAX * 8];
    uint64_t seed = mix(cf->job * 131 + (uint64_t)rank);
    for (int d = 0; d < 4; d++) {
        shp_dtype_t dt = (shp_dtype_t)api_dt[d];
        tfmt_t t = tf(dt);
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            size_t n = sizes[z];
            for (int k = 0; k < cf->per; k++) {
                for (size_t i = 0; i < n; i++) {
                    uint64_t b = gen(dt, cf->contrib[rank][k], i);
                    memcpy(sbuf + ((size_t)k * n + i) * t.size, &b, t.size);
                }
            }
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(sbuf, (size_t)cf->per * n * t.size);
            sp.rbuf_desc = test_host_desc(rbuf, n * t.size);
            sp.dtype = api_dt[d];
            sp.op = SHARP_OP_SUM_EXACT;
            sp.length = n;
            memset(rbuf, 0xa5, sizeof(rbuf));
            /* arrival order varies: random delays up to 3 ms */
            seed = mix(seed);
            usleep((useconds_t)(seed % 3000));
            int rc = cf->per == 1
                         ? sharp_coll_do_allreduce(comm, &sp)
                         : sharp_coll_do_allreduce_exact_n(comm, &sp, cf->per);
            CHECK(rc == 0, "%s: exact allreduce of %zu %s: %d", cf->name, n,
                  shp_dtype_name(dt), rc);
            for (size_t i = 0; i < n; i++) {
                uint64_t vals[NC], got = 0;
                for (int c = 0; c < NC; c++) {
                    vals[c] = gen(dt, c, i);
                }
                uint64_t want = canon(dt, ref_sum(dt, vals, NC));
                memcpy(&got, rbuf + i * t.size, t.size);
                CHECK(canon(dt, got) == want,
                      "%s: %s n=%zu element %zu: got %#llx (%.17g), want "
                      "%#llx (%.17g)",
                      cf->name, shp_dtype_name(dt), n, i,
                      (unsigned long long)got, to_double(dt, got),
                      (unsigned long long)want, to_double(dt, want));
            }
        }
    }
    /* a reduce: the result at the root only, the same bits */
    {
        size_t n = 64;
        for (int k = 0; k < cf->per; k++) {
            for (size_t i = 0; i < n; i++) {
                uint64_t b = gen(SHP_DTYPE_F64, cf->contrib[rank][k], i);
                memcpy(sbuf + ((size_t)k * n + i) * 8, &b, 8);
            }
        }
        if (cf->per == 1) {
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.root = cf->size - 1;
            sp.sbuf_desc = test_host_desc(sbuf, n * 8);
            sp.rbuf_desc = test_host_desc(rbuf, n * 8);
            sp.dtype = SHARP_DTYPE_DOUBLE;
            sp.op = SHARP_OP_SUM_EXACT;
            sp.length = n;
            memset(rbuf, 0xa5, sizeof(rbuf));
            void *h = NULL;
            CHECK(sharp_coll_do_reduce_nb(comm, &sp, &h) == 0 &&
                      sharp_coll_req_wait(h) == 0,
                  "exact reduce");
            for (size_t i = 0; rank == sp.root && i < n; i++) {
                uint64_t vals[NC], got;
                for (int c = 0; c < NC; c++) {
                    vals[c] = gen(SHP_DTYPE_F64, c, i);
                }
                memcpy(&got, rbuf + i * 8, 8);
                CHECK(
                    canon(SHP_DTYPE_F64, got) ==
                        canon(SHP_DTYPE_F64, ref_sum(SHP_DTYPE_F64, vals, NC)),
                    "reduce element %zu", i);
            }
        }
    }
    /* results into a 3-entry IOV: values that sum to nonzero, and values
     * that are +0 everywhere (no lanes go to the tree then: the zeros are
     * written here and must reach every entry) */
    if (cf->per == 1) {
        const size_t n = 24;
        double src[24], mid[9], tail[8], head[7];
        struct sharp_data_iov v[3] = {{head, sizeof(head), NULL},
                                      {mid, sizeof(mid), NULL},
                                      {tail, sizeof(tail), NULL}};
        for (int zero = 0; zero < 2; zero++) {
            for (size_t i = 0; i < n; i++) {
                src[i] = zero ? 0.0 : (double)(rank + 1) * (double)(i + 1);
            }
            memset(head, 0xa5, sizeof(head));
            memset(mid, 0xa5, sizeof(mid));
            memset(tail, 0xa5, sizeof(tail));
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = test_host_desc(src, sizeof(src));
            sp.rbuf_desc.type = SHARP_DATA_IOV;
            sp.rbuf_desc.mem_type = SHARP_MEM_TYPE_HOST;
            sp.rbuf_desc.iov.count = 3;
            sp.rbuf_desc.iov.vector = v;
            sp.dtype = SHARP_DTYPE_DOUBLE;
            sp.op = SHARP_OP_SUM_EXACT;
            sp.length = n;
            CHECK(sharp_coll_do_allreduce(comm, &sp) == 0, "exact IOV");
            double sr = (double)cf->size * (cf->size + 1) / 2;
            for (size_t i = 0; i < n; i++) {
                double got = i < 7    ? head[i]
                             : i < 16 ? mid[i - 7]
                                      : tail[i - 16];
                double want = zero ? 0.0 : sr * (double)(i + 1);
                CHECK(got == want && !signbit(got),
                      "exact IOV%s element %zu: got %.17g, want %.17g",
                      zero ? " of zeros" : "", i, got, want);
            }
        }
    }
    /* the group's exact operations in `sharpctl groups` (the manager
     * polls the ANs every 200 ms here) */
    if (cf->check_ctl) {
        int seen = 0;
        if (rank == 0) {
            for (int k = 0; k < 50 && !seen; k++) {
                seen = test_fabric_sh(
                           "%s/sharpctl --socket %s/am.sock groups --json | "
                           "jq -e '[.[] | select(.exact_ops >= 16)] | "
                           "length == 1' >/dev/null",
                           fab.bin, fab.dir) == 0;
                if (!seen) {
                    usleep(100000);
                }
            }
            if (seen) {
                test_fabric_sh("%s/sharpctl --socket %s/am.sock groups",
                               fab.bin, fab.dir);
            }
        }
        CHECK(hub_bcast(&world_oob, &seen, sizeof(seen), 0) == 0, "bcast");
        CHECK(seen, "no group with its exact operations in sharpctl groups");
    }
    /* unsupported: exact sums of integers, reduce-scatter */
    {
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(sbuf, 8);
        sp.rbuf_desc = test_host_desc(rbuf, 8);
        sp.dtype = SHARP_DTYPE_INT;
        sp.op = SHARP_OP_SUM_EXACT;
        sp.length = 1;
        CHECK(sharp_coll_do_allreduce(comm, &sp) == SHARP_COLL_ENOT_SUPP,
              "exact int sum");
        sp.dtype = SHARP_DTYPE_DOUBLE;
        CHECK(sharp_coll_do_reduce_scatter(comm, &sp) == SHARP_COLL_ENOT_SUPP,
              "exact reduce-scatter");
    }
    CHECK(sharp_coll_comm_destroy(comm) == 0, "destroy");
    CHECK(sharp_coll_finalize(ctx) == 0, "finalize");
    return 0;
}

static void run_cfg(const cfg_t *cf)
{
    hub_t h = {0};
    for (int r = 0; r < cf->size; r++) {
        assert_true(hub_spawn(&h, m_exact, r, (void *)cf) >= 0);
    }
    int ok = hub_run(&h, 110);
    if (ok != cf->size) {
        fail_msg("%s: %d of %d members succeeded", cf->name, ok, cf->size);
    }
}

static uint64_t next_job = 16001;

/* every configuration on the fabric that is up */
static void run_all(void)
{
    cfg_t cf;
    /* 16 members, rank r on host r, contribution r */
    memset(&cf, 0, sizeof(cf));
    cf.name = "16 members";
    cf.size = NC;
    cf.per = 1;
    for (int r = 0; r < NC; r++) {
        cf.host[r] = r;
        cf.contrib[r][0] = r;
    }
    cf.job = next_job++;
    cf.check_ctl = 1;
    run_cfg(&cf);
    cf.check_ctl = 0;
    /* 16 members, hosts and contributions permuted */
    cf.name = "16 members permuted";
    for (int r = 0; r < NC; r++) {
        cf.host[r] = (r * 5 + 3) % NH;
        cf.contrib[r][0] = (r * 11 + 7) % NC;
    }
    cf.job = next_job++;
    run_cfg(&cf);
    /* 8 members, two contributions each (node-local), on every other
     * host: a trimmed tree */
    cf.name = "8 members x 2 contributions, trimmed";
    cf.size = 8;
    cf.per = 2;
    for (int r = 0; r < 8; r++) {
        cf.host[r] = (2 * r + 1) % NH;
        cf.contrib[r][0] = (r * 3) % NC;
        cf.contrib[r][1] = (r * 3 + 8) % NC;
    }
    cf.job = next_job++;
    run_cfg(&cf);
    /* 16 members, two per host (ppn 2) on 8 hosts */
    cf.name = "16 members, 2 per host";
    cf.size = NC;
    cf.per = 1;
    for (int r = 0; r < NC; r++) {
        cf.host[r] = r / 2;
        cf.contrib[r][0] = NC - 1 - r;
    }
    cf.job = next_job++;
    run_cfg(&cf);
}

static int fabric_up(const char *topo_args, int flat_max, int one_pass_max)
{
    char topo[400], args[128], env[128], v[32];
    snprintf(topo, sizeof(topo), "%s/topo.ibnd", dir);
    snprintf(args, sizeof(args), "fat-tree %s --hosts %d", topo_args, NH);
    snprintf(env, sizeof(env),
             "SHARP_AM_FLAT_MAX=%d SHARP_AM_STATS_INTERVAL=200ms", flat_max);
    mkdir(dir, 0700);
    snprintf(v, sizeof(v), "%d", one_pass_max);
    setenv("SHARP_COLL_EXACT_ONE_PASS_MAX", v, 1);
    return test_fabric_topo(&fab, args, topo) == 0 &&
                   test_fabric_up(&fab, env, topo, net, ">/dev/null") == 0
               ? 0
               : -1;
}

static int fabric_down(void **state)
{
    (void)state;
    return test_fabric_down(&fab, ">/dev/null");
}

/* one AN for the whole group (flat), the default one-pass limit */
static void test_flat(void **state)
{
    (void)state;
    assert_int_equal(fabric_up("--radix 8", 16, 4096), 0);
    run_all();
}

/* 2-level fat-tree, groups over leaf ANs: every size in two passes */
static void test_two_level(void **state)
{
    (void)state;
    assert_int_equal(fabric_up("--radix 8", 0, 0), 0);
    run_all();
}

/* 3-level fat-tree: every size in one pass where the payload allows */
static void test_three_level(void **state)
{
    (void)state;
    assert_int_equal(fabric_up("--levels 3 --radix 4", 0, 1 << 20), 0);
    run_all();
}

int main(int argc, char **argv)
{
    (void)argc;
    char fabdir[300];
    snprintf(dir, sizeof(dir), "/tmp/sharp-test-exact-%d", (int)getpid());
    snprintf(fabdir, sizeof(fabdir), "%s/fab", dir);
    /* build/tests/libsharp/test_exact_coll -> build/bin */
    if (test_fabric_init(&fab, "/../../bin", fabdir) != 0) {
        return 1;
    }
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    if (getenv("SHARP_TEST_NET") != NULL) {
        net = getenv("SHARP_TEST_NET");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_flat, fabric_down),
        cmocka_unit_test_teardown(test_two_level, fabric_down),
        cmocka_unit_test_teardown(test_three_level, fabric_down),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (getenv("KEEP_LOGS") == NULL) {
        test_fabric_sh("rm -rf %s", dir);
    }
    return rc;
}
