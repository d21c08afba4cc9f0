/*
 * Sparse payloads (reduce/sparse.h): folding children sent as a bitmap of
 * their non-zero blocks and those blocks gives bit for bit what the dense
 * fold gives, for every type and operation that may go sparse, on every
 * instruction set this CPU runs: random densities per child (none, 1%,
 * 10%, 50%, all, or sent dense), values mixed from ordinary numbers, +0,
 * -0, quiet and signalling NaNs with payloads, infinities, denormals and
 * random bits; block sizes that do and do not divide the payload; one
 * level and two.  Plus the checks of what a peer sends, the early stop of
 * the scan, and the operations refused.
 */
#include "tests/support/test_util.h"

#include "reduce/sparse.h"

#include <math.h>
#include <stdlib.h>

#define MAXCH 8
#define MAXLEN (3000 * 8)

/* one element of dtype dt at p: a mix of what matters for the fold */
static void fill_elem(shp_dtype_t dt, uint8_t *p, uint64_t *rng)
{
    size_t sz = shp_dtype_size(dt);
    uint64_t r = test_rand(rng), bits = test_rand(rng);
    int k = (int)(r % 10);

    memcpy(p, &bits, sz); /* random bits: NaNs, infinities, anything */
    if (!shp_dtype_is_float(dt) || k >= 6) {
        if (k < 3) {
            memset(p, 0, sz); /* zeros inside present blocks */
        }
        return;
    }
    memset(p, 0, sz);
    uint8_t *top = p + sz - 1; /* little-endian: the sign's byte */
    switch (k) {
    case 0: *top = 0x80; break;                /* -0 */
    case 1: break;                             /* +0 */
    case 2: p[0] = (uint8_t)(bits | 1); break; /* a denormal */
    case 3:
        p[0] = 1;
        *top = 0x80;
        break; /* a negative denormal */
    case 4:    /* a small number */
        if (dt == SHP_DTYPE_F32) {
            float v = (float)((int)(bits % 2001) - 1000) / 64.0f;
            memcpy(p, &v, 4);
        } else if (dt == SHP_DTYPE_F64) {
            double v = (double)((int)(bits % 2001) - 1000) / 64.0;
            memcpy(p, &v, 8);
        } else if (dt == SHP_DTYPE_F16) {
            uint16_t h = shp_f32_to_f16((float)((int)(bits % 201) - 100) / 8);
            memcpy(p, &h, 2);
        } else {
            uint16_t h = shp_f32_to_bf16((float)((int)(bits % 201) - 100) / 8);
            memcpy(p, &h, 2);
        }
        break;
    default: /* a NaN with a payload, quiet or signalling, either sign */
        memset(p, 0xff, sz);
        p[0] = (uint8_t)bits;
        if (bits & 2) { /* signalling: the top fraction bit clear */
            if (dt == SHP_DTYPE_F32 || dt == SHP_DTYPE_BF16) {
                p[sz - 2] = (uint8_t)(p[sz - 2] & ~0x40);
            } else if (dt == SHP_DTYPE_F64) {
                p[6] = (uint8_t)(p[6] & ~0x08);
            } else {
                p[1] = (uint8_t)(p[1] & ~0x02);
            }
        }
        if (bits & 4) {
            *top = (uint8_t)(*top & 0x7f);
        }
        break;
    }
}

/* a child: blocks present with probability per1000/1000, filled */
static void fill_child(shp_dtype_t dt, uint8_t *buf, size_t len, size_t block,
                       unsigned per1000, uint64_t *rng)
{
    size_t sz = shp_dtype_size(dt), b, i;

    memset(buf, 0, len);
    for (b = 0; b < shp_sparse_nblocks(len, block); b++) {
        if (test_rand(rng) % 1000 >= per1000) {
            continue;
        }
        for (i = b * block; i < len && i < (b + 1) * block; i += sz) {
            fill_elem(dt, buf + i, rng);
        }
    }
}

/* the sparse fold of n dense children into out (len bytes, dense),
 * each sent sparse unless it is in dense_mask (every bit set) */
static size_t sparse_fold(const shp_reduce_desc_t *d, uint8_t *const *ch,
                          unsigned n, unsigned dense_mask, size_t len,
                          size_t block, uint8_t *out, uint8_t *outmap)
{
    static uint8_t packed[MAXLEN], bitmap[MAXLEN / 8 + 1];
    static uint32_t seen[MAXLEN];
    shp_sparse_fold_t f;
    const char *why;

    shp_sparse_fold_init(&f, d, len, block, n, out, seen);
    /* the accumulator holds an earlier operation's bytes (an AN's slot): a
     * block no child has is written by shp_sparse_fold_dense alone */
    memset(out, 0xa5, len);
    for (unsigned c = 0; c < n; c++) {
        size_t nb = shp_sparse_nblocks(len, block);
        if (dense_mask & (1u << c)) {
            memset(bitmap, 0, shp_sparse_bitmap_bytes(len, block));
            for (size_t b = 0; b < nb; b++) {
                bitmap[b / 8] |= (uint8_t)(1u << (b % 8));
            }
        } else {
            (void)shp_sparse_scan(ch[c], len, block, bitmap, nb);
        }
        size_t plen = shp_sparse_pack(ch[c], len, block, bitmap, packed);
        assert_int_equal(shp_sparse_check(len, block, bitmap, plen, &why),
                         SHP_OK);
        assert_int_equal(shp_sparse_fold_add(&f, bitmap, packed), SHP_OK);
    }
    size_t n_out;
    assert_int_equal(shp_sparse_fold_finish(&f, outmap, &n_out), SHP_OK);
    shp_sparse_fold_dense(&f);
    return n_out;
}

static void check_same(const shp_reduce_desc_t *d, const uint8_t *got,
                       const uint8_t *want, size_t len, const char *what)
{
    if (memcmp(got, want, len) == 0) {
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (got[i] != want[i]) {
            fail_msg("%s %s %s: byte %zu: sparse %02x, dense %02x", what,
                     shp_dtype_name(d->dtype), shp_op_name(d->op), i, got[i],
                     want[i]);
        }
    }
}

static const unsigned densities[] = {0, 10, 100, 500, 1000};
static const size_t blocks[] = {8, 64, 256, 1000, 4096};

/* one trial of desc: children, their dense fold, their sparse fold; the
 * result's bitmap must be exactly its non-zero blocks */
static void trial(const shp_reduce_desc_t *d, uint64_t *rng, const char *isa)
{
    static uint8_t bufs[MAXCH][MAXLEN], want[MAXLEN], got[MAXLEN],
        map[MAXLEN / 8 + 1], map2[MAXLEN / 8 + 1], exp[MAXLEN];
    uint8_t *ch[MAXCH];
    const void *srcs[MAXCH];
    size_t sz = shp_reduce_elem_size(d);
    size_t block = blocks[test_rand(rng) % 5];
    block = (block + sz - 1) / sz * sz;
    size_t len = (1 + test_rand(rng) % (MAXLEN / sz)) * sz;
    unsigned n = 1 + (unsigned)(test_rand(rng) % MAXCH);
    unsigned dense = (unsigned)test_rand(rng) & ((1u << n) - 1) &
                     (unsigned)test_rand(rng); /* a few sent dense */

    for (unsigned c = 0; c < n; c++) {
        ch[c] = bufs[c];
        srcs[c] = bufs[c];
        fill_child(d->dtype, ch[c], len, block, densities[test_rand(rng) % 5],
                   rng);
    }
    assert_int_equal(shp_reduce_fold(d, want, srcs, n, len / sz), SHP_OK);
    size_t nres = sparse_fold(d, ch, n, dense, len, block, got, map);
    check_same(d, got, want, len, isa);
    size_t nb = shp_sparse_nblocks(len, block);
    assert_int_equal(shp_sparse_scan(want, len, block, map2, nb), nres);
    assert_memory_equal(map, map2, shp_sparse_bitmap_bytes(len, block));
    /* what goes down: packed, expanded by the members */
    static uint8_t packed[MAXLEN];
    (void)shp_sparse_pack(got, len, block, map, packed);
    memset(exp, 0xa5, len);
    shp_sparse_expand(exp, len, block, map, packed);
    check_same(d, exp, want, len, isa);
    /* a member keeping part of it (reduce-scatter, a stripe's view) */
    size_t lo = (size_t)test_rand(rng) % (len + 1);
    size_t hi = lo + (size_t)test_rand(rng) % (len - lo + 1);
    memset(exp, 0xa5, len);
    shp_sparse_expand_range(exp, lo, hi, len, block, map, packed);
    assert_memory_equal(exp, (const uint8_t *)want + lo, hi - lo);
}

static void each_desc(void (*fn)(const shp_reduce_desc_t *, uint64_t *,
                                 const char *),
                      int trials)
{
    static const shp_op_t ops[] = {SHP_OP_SUM, SHP_OP_BOR, SHP_OP_BXOR,
                                   SHP_OP_LOR};
    uint64_t rng = 0x5eed5eedULL;

    for (int isa = 0; isa < SHP_REDUCE_ISA_LAST; isa++) {
        if (!shp_reduce_isa_supported(isa)) {
            continue;
        }
        assert_int_equal(shp_reduce_set_isa(isa), SHP_OK);
        for (int dt = 0; dt < SHP_DTYPE_LAST; dt++) {
            for (size_t o = 0; o < 4; o++) {
                shp_reduce_desc_t d = {dt, ops[o], SHP_DTYPE_NULL};
                if (!shp_sparse_ok(&d)) {
                    assert_true(shp_dtype_is_float(dt) && o > 0);
                    continue;
                }
                for (int t = 0; t < trials; t++) {
                    fn(&d, &rng, shp_reduce_isa_name(isa));
                }
            }
        }
    }
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
}

static void test_one_level(void **state)
{
    (void)state;
    each_desc(trial, 40);
}

/* two levels: children folded sparse in two subtrees, the subtrees'
 * sparse results folded at their parent, against the dense tree */
static void tree(const shp_reduce_desc_t *d, uint64_t *rng, const char *isa)
{
    static uint8_t bufs[MAXCH][MAXLEN], sub[2][MAXLEN], dsub[2][MAXLEN],
        want[MAXLEN], got[MAXLEN], map[MAXLEN / 8 + 1];
    size_t sz = shp_reduce_elem_size(d), block = 64 / sz * sz;
    size_t len = (1 + test_rand(rng) % (MAXLEN / sz)) * sz;
    uint8_t *ch[MAXCH];
    const void *srcs[MAXCH];

    for (unsigned c = 0; c < MAXCH; c++) {
        ch[c] = bufs[c];
        srcs[c] = bufs[c];
        fill_child(d->dtype, ch[c], len, block, densities[test_rand(rng) % 5],
                   rng);
    }
    for (int s = 0; s < 2; s++) { /* 3 children, then 5 */
        unsigned first = s ? 3 : 0, n = s ? 5 : 3;
        assert_int_equal(shp_reduce_fold(d, dsub[s], srcs + first, n, len / sz),
                         SHP_OK);
        (void)sparse_fold(d, ch + first, n, 0, len, block, sub[s], map);
    }
    const void *up[2] = {dsub[0], dsub[1]};
    assert_int_equal(shp_reduce_fold(d, want, up, 2, len / sz), SHP_OK);
    uint8_t *sp[2] = {sub[0], sub[1]};
    (void)sparse_fold(d, sp, 2, 0, len, block, got, map);
    check_same(d, got, want, len, isa);
}

static void test_two_levels(void **state)
{
    (void)state;
    each_desc(tree, 10);
}

/* the signed-zero rule alone: -0 from every member but one absent is +0,
 * as the dense fold says; -0 from every member stays -0 */
static void test_negzero(void **state)
{
    shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL};
    static uint8_t out[64], map[1];
    uint8_t a[64] = {0}, b[64] = {0};
    uint8_t *ch[2] = {a, b};
    float v;

    (void)state;
    v = -0.0f;
    memcpy(a, &v, 4);
    assert_int_equal(sparse_fold(&d, ch, 2, 0, 64, 8, out, map), 0);
    memcpy(&v, out, 4);
    assert_true(v == 0 && !signbit(v));
    v = -0.0f;
    memcpy(b, &v, 4);
    assert_int_equal(sparse_fold(&d, ch, 2, 0, 64, 8, out, map), 1);
    memcpy(&v, out, 4);
    assert_true(v == 0 && signbit(v));
}

static void test_peer_checks(void **state)
{
    const char *why = NULL;
    uint8_t map[2] = {0x05, 0x00};

    (void)state;
    /* 10 blocks of 8 over 80 bytes: blocks 0 and 2 are 16 bytes */
    assert_int_equal(shp_sparse_check(80, 8, map, 16, &why), SHP_OK);
    assert_int_equal(shp_sparse_check(80, 8, map, 24, &why), SHP_ERR_PROTO);
    assert_non_null(why);
    map[1] = 0x04; /* block 10: past the end */
    assert_int_equal(shp_sparse_check(80, 8, map, 24, &why), SHP_ERR_PROTO);
    /* the last, short block counts its own bytes */
    uint8_t last[1] = {0x04};
    assert_int_equal(shp_sparse_check(20, 8, last, 4, &why), SHP_OK);
}

static void test_scan_stops(void **state)
{
    uint8_t buf[4096], map[512 / 8];

    (void)state;
    memset(buf, 1, sizeof(buf));
    assert_int_equal(shp_sparse_scan(buf, sizeof(buf), 8, map, 10), 11);
    assert_int_equal(shp_sparse_scan(buf, sizeof(buf), 8, map, 512), 512);
    memset(buf, 0, sizeof(buf));
    buf[4095] = 1;
    assert_int_equal(shp_sparse_scan(buf, sizeof(buf), 8, map, 512), 1);
    assert_int_equal(map[63], 0x80);
}

static void test_refused(void **state)
{
    static const shp_op_t no[] = {SHP_OP_MAX, SHP_OP_MIN, SHP_OP_PROD,
                                  SHP_OP_LAND, SHP_OP_BAND};
    (void)state;
    for (size_t i = 0; i < 5; i++) {
        shp_reduce_desc_t d = {SHP_DTYPE_I32, no[i], SHP_DTYPE_NULL};
        assert_false(shp_sparse_ok(&d));
    }
    shp_reduce_desc_t loc = {SHP_DTYPE_F32, SHP_OP_MINLOC, SHP_DTYPE_I32};
    assert_false(shp_sparse_ok(&loc));
    shp_reduce_desc_t f = {SHP_DTYPE_F64, SHP_OP_SUM, SHP_DTYPE_NULL};
    assert_int_equal(shp_sparse_layout_check(&f, 800, 64), SHP_OK);
    assert_int_equal(shp_sparse_layout_check(&f, 800, 60),
                     SHP_ERR_INVALID_PARAM); /* not whole elements */
    assert_int_equal(shp_sparse_layout_check(&f, 804, 64),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_sparse_layout_check(&f, 800, 4),
                     SHP_ERR_INVALID_PARAM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_level),  cmocka_unit_test(test_two_levels),
        cmocka_unit_test(test_negzero),    cmocka_unit_test(test_peer_checks),
        cmocka_unit_test(test_scan_stops), cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
