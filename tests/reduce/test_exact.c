/*
 * Exact-mode arithmetic (reduce/exact.h) against an independent reference:
 * MPFR sums the same values exactly (4400 bits hold any sum of these
 * types), then rounds once to the target precision in the target's
 * exponent range (mpfr_check_range + mpfr_subnormalize: IEEE round to
 * nearest-even, subnormals included).  The "network" is simulated: every
 * member computes its window, the windows are MAX-reduced, every member
 * encodes its limbs, and the lanes are added as int64 in a random order
 * and grouping (a random tree); the result must be bit-identical to the
 * reference, whatever the partition into members, the order and the
 * window (agreed or full).
 */
#include "tests/support/test_util.h"

#include "reduce/exact.h"
#include "tests/support/exact_ref.h"

#include <stdlib.h>

#define MAXN 64 /* values per element */
#define MAXC 8  /* elements */

/*
 * The simulated group: vals[e][k] is value k of element e (n per element,
 * count elements); member m holds the values k with owner[k] == m (the
 * same owner for every element), as a vector.  Returns the result bits of
 * each element in out[].  full: skip the window pass.
 */
static void simulate(shp_dtype_t dt, uint64_t vals[][MAXN], unsigned n,
                     unsigned count, const unsigned *owner, unsigned members,
                     unsigned ncontrib, int full, uint64_t *out)
{
    tfmt_t t = tf(dt);
    /* members' vectors; each may hold several contributions (node-local) */
    uint8_t *vec = calloc((size_t)members * ncontrib * count, t.size);
    unsigned *slot = calloc(members, sizeof(unsigned));
    assert_non_null(vec);
    assert_non_null(slot);
    /* unused contributions are -0, the additive identity of IEEE 754
     * (x + -0 == x for every x, +0 included): a member with nothing to
     * contribute */
    for (size_t i = 0; i < (size_t)members * ncontrib * count; i++) {
        vec[i * t.size + t.size - 1] = 0x80;
    }
    for (unsigned k = 0; k < n; k++) {
        unsigned m = owner[k], c = slot[m]++;
        if (c >= ncontrib) {
            fail_msg("too many values for member %u", m);
        }
        for (unsigned e = 0; e < count; e++) {
            uint8_t *p =
                vec + (((size_t)m * ncontrib + c) * count + e) * t.size;
            memcpy(p, &vals[e][k], t.size);
        }
    }
    int64_t win[SHP_EXACT_WIN_LANES];
    if (full) {
        shp_exact_window_full(dt, win);
    } else {
        for (unsigned l = 0; l < SHP_EXACT_WIN_LANES; l++) {
            win[l] = INT64_MIN;
        }
        for (unsigned m = 0; m < members; m++) {
            const void *srcs[MAXN];
            int64_t w[SHP_EXACT_WIN_LANES];
            for (unsigned c = 0; c < ncontrib; c++) {
                srcs[c] = vec + ((size_t)m * ncontrib + c) * count * t.size;
            }
            assert_int_equal(shp_exact_window(dt, srcs, ncontrib, count, w),
                             SHP_OK);
            for (unsigned l = 0; l < SHP_EXACT_WIN_LANES; l++) {
                win[l] = w[l] > win[l] ? w[l] : win[l];
            }
        }
    }
    shp_exact_layout_t lay;
    assert_int_equal(shp_exact_layout(dt, win, &lay, NULL), SHP_OK);
    size_t nl = (size_t)count * lay.lanes;
    int64_t *sum = calloc(nl + 1, sizeof(int64_t));
    int64_t *mine = calloc(nl + 1, sizeof(int64_t));
    assert_non_null(sum);
    assert_non_null(mine);
    /* members in a random order (int64 addition is associative) */
    unsigned perm[MAXN];
    for (unsigned m = 0; m < members; m++) {
        perm[m] = m;
    }
    for (unsigned m = members; m > 1; m--) {
        unsigned j = (unsigned)rand() % m, tmp = perm[m - 1];
        perm[m - 1] = perm[j];
        perm[j] = tmp;
    }
    for (unsigned i = 0; i < members; i++) {
        unsigned m = perm[i];
        const void *srcs[MAXN];
        for (unsigned c = 0; c < ncontrib; c++) {
            srcs[c] = vec + ((size_t)m * ncontrib + c) * count * t.size;
        }
        assert_int_equal(shp_exact_encode(&lay, srcs, ncontrib, count, mine),
                         SHP_OK);
        assert_true(shp_exact_lanes_ok(mine, nl));
        for (size_t l = 0; l < nl; l++) {
            sum[l] += mine[l];
        }
    }
    uint8_t res[MAXC * 8];
    shp_exact_decode(&lay, sum, count, res);
    for (unsigned e = 0; e < count; e++) {
        out[e] = 0;
        memcpy(&out[e], res + (size_t)e * t.size, t.size);
    }
    free(sum);
    free(mine);
    free(vec);
    free(slot);
}

static const shp_dtype_t dts[] = {SHP_DTYPE_F64, SHP_DTYPE_F32, SHP_DTYPE_F16,
                                  SHP_DTYPE_BF16};

/* every partition, order and window gives the reference's bits */
static void check_all_ways(shp_dtype_t dt, uint64_t vals[][MAXN], unsigned n,
                           unsigned count, unsigned trials)
{
    uint64_t want[MAXC], got[MAXC], first[MAXC];
    for (unsigned e = 0; e < count; e++) {
        want[e] = canon(dt, ref_sum(dt, vals[e], n));
    }
    for (unsigned t = 0; t < trials; t++) {
        unsigned owner[MAXN];
        unsigned members = 1 + (unsigned)rand() % n;
        unsigned ncontrib = n; /* room for all on one member */
        for (unsigned k = 0; k < n; k++) {
            owner[k] = t == 0 ? k : (unsigned)rand() % members;
        }
        if (t == 0) {
            members = n;
        }
        /* a few extra members that contribute only zeros */
        members += (unsigned)rand() % 3;
        simulate(dt, vals, n, count, owner, members, ncontrib, t % 3 == 2, got);
        for (unsigned e = 0; e < count; e++) {
            if (canon(dt, got[e]) != want[e]) {
                fail_msg("%s element %u trial %u: got %#llx, want %#llx "
                         "(%.17g vs %.17g)",
                         shp_dtype_name(dt), e, t, (unsigned long long)got[e],
                         (unsigned long long)want[e], to_double(dt, got[e]),
                         to_double(dt, want[e]));
            }
            if (t == 0) {
                first[e] = got[e];
            } else {
                assert_int_equal(got[e], first[e]); /* bits, NaNs too */
            }
        }
    }
}

static uint64_t bits_d(double d)
{
    return from_double(SHP_DTYPE_F64, d);
}

static void test_adversarial_f64(void **state)
{
    (void)state;
    uint64_t v[MAXC][MAXN];
    unsigned n = 8;
    const double tiny = 4.9406564584124654e-324; /* 2^-1074 */
    double sets[MAXC][8] = {
        /* 1e308 - 1e308 with tiny ones: only the tiny ones remain */
        {1e308, 1e-300, -1e308, tiny, 3 * tiny, 1e-310, -1e-300, 0},
        /* halfway: 1 + 2^-53 ties to even (1), plus 2^-1074 rounds up */
        {1, 0x1p-53, 0, 0, 0, 0, 0, 0},
        {1, 0x1p-53, tiny, 0, 0, 0, 0, 0},
        /* 1 + 3 x 2^-53: ties up to the even 1 + 2^-51 */
        {1, 0x1p-53, 0x1p-53, 0x1p-53, 0, 0, 0, 0},
        /* cancellation to a subnormal */
        {0x1.0000000000001p-1022, -0x1p-1022, 0, 0, 0, 0, 0, 0},
        /* overflow of the exact sum: inf; and back down: finite */
        {1.7e308, 1.7e308, 0, 0, 0, 0, 0, 0},
        {1.7e308, 1.7e308, -1.7e308, 0, 0, 0, 0, 0},
        /* exact cancellation: +0, and many tiny ones */
        {1e300, -1e300, 1e-20, -1e-20, tiny, tiny, -tiny, -tiny},
    };
    for (unsigned e = 0; e < MAXC; e++) {
        for (unsigned k = 0; k < n; k++) {
            v[e][k] = bits_d(sets[e][k]);
        }
    }
    check_all_ways(SHP_DTYPE_F64, v, n, MAXC, 40);
    /* the documented values, not only "equal to MPFR" */
    uint64_t got[MAXC];
    unsigned owner[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    simulate(SHP_DTYPE_F64, v, n, MAXC, owner, 8, 1, 0, got);
    assert_int_equal(got[0], bits_d(tiny * 4 + 1e-310));
    assert_int_equal(got[1], bits_d(1.0));
    assert_int_equal(got[2], bits_d(0x1.0000000000001p0));
    assert_int_equal(got[3], bits_d(0x1.0000000000002p0));
    assert_int_equal(got[4], bits_d(0x1p-1074 * 1));
    assert_int_equal(got[5], bits_d(INFINITY));
    assert_int_equal(got[6], bits_d(1.7e308));
    assert_int_equal(got[7], bits_d(0.0));
}

static uint64_t rnd64(void)
{
    return ((uint64_t)rand() << 42) ^ ((uint64_t)rand() << 21) ^
           (uint64_t)rand();
}

/* random finite values over the whole range of each type, and values of
 * one magnitude with random signs (cancellation) */
static void test_random_all_types(void **state)
{
    (void)state;
    for (unsigned d = 0; d < 4; d++) {
        shp_dtype_t dt = dts[d];
        tfmt_t t = tf(dt);
        for (unsigned round = 0; round < 30; round++) {
            uint64_t v[MAXC][MAXN];
            unsigned n = 2 + (unsigned)rand() % 30;
            for (unsigned e = 0; e < MAXC; e++) {
                for (unsigned k = 0; k < n; k++) {
                    uint64_t b;
                    do {
                        b = rnd64() &
                            (t.size == 8 ? ~0ull : (1ull << (t.size * 8)) - 1);
                        if (round % 2) { /* near 1.0, random sign */
                            b = near(dt, (double)(rand() % 2000 - 1000) / 7.0);
                        }
                    } while (!isfinite(to_double(dt, b)));
                    v[e][k] = b;
                }
            }
            check_all_ways(dt, v, n, MAXC, 4);
        }
    }
}

/* NaN, infinities, signed zeros: order-free IEEE rules */
static void test_specials(void **state)
{
    (void)state;
    for (unsigned d = 0; d < 4; d++) {
        shp_dtype_t dt = dts[d];
        uint64_t v[MAXC][MAXN];
        double sets[MAXC][4] = {
            {INFINITY, 1, 2, 3},         {-INFINITY, 1e3, 0, 0},
            {INFINITY, -INFINITY, 0, 0}, {NAN, 1, 0, 0},
            {-0.0, -0.0, -0.0, -0.0},    {-0.0, 0.0, -0.0, -0.0},
            {1, -1, -0.0, -0.0},         {INFINITY, INFINITY, -0.0, 5},
        };
        for (unsigned e = 0; e < MAXC; e++) {
            for (unsigned k = 0; k < 4; k++) {
                v[e][k] = from_double(dt, sets[e][k]);
            }
        }
        check_all_ways(dt, v, 4, MAXC, 20);
        uint64_t got[MAXC];
        unsigned owner[4] = {0, 1, 2, 3};
        simulate(dt, v, 4, MAXC, owner, 4, 1, 0, got);
        assert_true(isinf(to_double(dt, got[0])) && to_double(dt, got[0]) > 0);
        assert_true(isinf(to_double(dt, got[1])) && to_double(dt, got[1]) < 0);
        assert_true(isnan(to_double(dt, got[2])));
        assert_true(isnan(to_double(dt, got[3])));
        assert_true(to_double(dt, got[4]) == 0 &&
                    signbit(to_double(dt, got[4])));
        assert_true(to_double(dt, got[5]) == 0 &&
                    !signbit(to_double(dt, got[5])));
        assert_true(to_double(dt, got[6]) == 0 &&
                    !signbit(to_double(dt, got[6])));
        /* a member more, contributing -0: nothing changes */
        simulate(dt, v, 4, MAXC, owner, 5, 1, 0, got);
        assert_true(to_double(dt, got[4]) == 0 &&
                    signbit(to_double(dt, got[4])));
    }
}

/* node-local: a member contributing several vectors gives the same bits */
static void test_multi_contrib(void **state)
{
    (void)state;
    uint64_t v[MAXC][MAXN];
    for (unsigned e = 0; e < MAXC; e++) {
        for (unsigned k = 0; k < 16; k++) {
            double x =
                ldexp((double)(rand() % 1000000 + 1), rand() % 200 - 100);
            v[e][k] = bits_d(rand() % 2 ? x : -x);
        }
    }
    uint64_t a[MAXC], b[MAXC];
    unsigned one[16], two[16];
    for (unsigned k = 0; k < 16; k++) {
        one[k] = k;     /* 16 members of one value */
        two[k] = k / 2; /* 8 members of two (ppn 2) */
    }
    simulate(SHP_DTYPE_F64, v, 16, MAXC, one, 16, 1, 0, a);
    simulate(SHP_DTYPE_F64, v, 16, MAXC, two, 8, 2, 0, b);
    assert_memory_equal(a, b, sizeof(a));
    for (unsigned e = 0; e < MAXC; e++) {
        assert_int_equal(a[e], ref_sum(SHP_DTYPE_F64, v[e], 16));
    }
}

/* widths: what the lanes cost */
static void test_layouts(void **state)
{
    (void)state;
    int64_t win[3];
    shp_exact_layout_t lay;
    const char *why = NULL;
    shp_exact_window_full(SHP_DTYPE_F64, win);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, win, &lay, NULL), SHP_OK);
    assert_int_equal(lay.limbs, 66); /* 2098 bits */
    assert_int_equal(lay.lanes, 70);
    shp_exact_window_full(SHP_DTYPE_F32, win);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F32, win, &lay, NULL), SHP_OK);
    assert_int_equal(lay.limbs, 9); /* 277 bits */
    shp_exact_window_full(SHP_DTYPE_F16, win);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F16, win, &lay, NULL), SHP_OK);
    assert_int_equal(lay.limbs, 2); /* 40 bits */
    /* values in [1, 2): one or two limbs, no extra lanes */
    double x[4] = {1.5, 1.25, 1.0 + 0x1p-52, 1.75};
    const void *src = x;
    assert_int_equal(shp_exact_window(SHP_DTYPE_F64, &src, 1, 4, win), SHP_OK);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, win, &lay, NULL), SHP_OK);
    assert_int_equal(lay.lanes, 2);
    /* bad windows are refused with a reason */
    int64_t bad1[3] = {2000, 0, 0}, bad2[3] = {0, 5000, 0}, bad3[3] = {0, 0, 8},
            bad4[3] = {-5, 0, 0};
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, bad1, &lay, &why),
                     SHP_ERR_PROTO);
    assert_non_null(why);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, bad2, &lay, NULL),
                     SHP_ERR_PROTO);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, bad3, &lay, NULL),
                     SHP_ERR_PROTO);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, bad4, &lay, NULL),
                     SHP_ERR_PROTO); /* lo above hi */
    assert_int_equal(shp_exact_layout(SHP_DTYPE_I32, win, &lay, NULL),
                     SHP_ERR_PROTO);
    /* a value outside the agreed window cannot be encoded */
    double big = 1e10;
    const void *bs = &big;
    int64_t lanes[8];
    assert_int_equal(shp_exact_window(SHP_DTYPE_F64, &src, 1, 4, win), SHP_OK);
    assert_int_equal(shp_exact_layout(SHP_DTYPE_F64, win, &lay, NULL), SHP_OK);
    assert_int_equal(shp_exact_encode(&lay, &bs, 1, 1, lanes),
                     SHP_ERR_INVALID_PARAM);
    /* the AN's bound on a lane */
    int64_t l[3] = {SHP_EXACT_LANE_MAX, -SHP_EXACT_LANE_MAX - 1, 0};
    assert_true(shp_exact_lanes_ok(l, 3));
    l[1] = -SHP_EXACT_LANE_MAX - 2;
    assert_false(shp_exact_lanes_ok(l, 3));
    l[1] = INT64_MAX;
    assert_false(shp_exact_lanes_ok(l, 3));
    l[1] = -1;
    assert_true(shp_exact_lanes_ok(l, 3));
    assert_true(shp_exact_lanes_ok((const char *)l + 4, 2)); /* unaligned */
    l[2] = SHP_EXACT_LANE_MAX + 1;
    assert_false(shp_exact_lanes_ok(l, 3));
    l[2] = INT64_MIN;
    assert_false(shp_exact_lanes_ok(l, 3));
}

int main(void)
{
    srand(16);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adversarial_f64),
        cmocka_unit_test(test_random_all_types),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_multi_contrib),
        cmocka_unit_test(test_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
