/*
 * Reduction engine tests: every datatype x op against an independent scalar
 * reference (written differently from the kernels: 64-bit / long double
 * arithmetic, half types rounded with frexp/ldexp), on every instruction set
 * this CPU runs, odd lengths, unaligned buffers, in place; plus the
 * documented NaN / -0.0 / infinity / tie rules and fixed-order determinism.
 */
#include "tests/support/test_util.h"

#include "reduce/reduce.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

typedef struct {
    shp_reduce_desc_t desc;
    char name[48];
} combo_t;

/* --- the reference ------------------------------------------------------ */

static long double ref_load(shp_dtype_t dt, const uint8_t *p)
{
    uint8_t b[8] = {0};
    uint16_t h;
    float f;
    double d;
    _Float16 hf;

    memcpy(b, p, shp_dtype_size(dt));
    switch (dt) {
    case SHP_DTYPE_U8: return *(uint8_t *)b;
    case SHP_DTYPE_I8: return *(int8_t *)b;
    case SHP_DTYPE_U16: memcpy(&h, b, 2); return h;
    case SHP_DTYPE_I16: memcpy(&h, b, 2); return (int16_t)h;
    case SHP_DTYPE_U32: {
        uint32_t v;
        memcpy(&v, b, 4);
        return v;
    }
    case SHP_DTYPE_I32: {
        int32_t v;
        memcpy(&v, b, 4);
        return v;
    }
    case SHP_DTYPE_U64: {
        uint64_t v;
        memcpy(&v, b, 8);
        return v;
    }
    case SHP_DTYPE_I64: {
        int64_t v;
        memcpy(&v, b, 8);
        return v;
    }
    case SHP_DTYPE_F32: memcpy(&f, b, 4); return f;
    case SHP_DTYPE_F64: memcpy(&d, b, 8); return d;
    case SHP_DTYPE_F16: memcpy(&hf, b, 2); return (float)hf;
    case SHP_DTYPE_BF16: {
        uint32_t u;
        memcpy(&h, b, 2);
        u = (uint32_t)h << 16;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return 0;
    }
}

/* Round a double to `p` significant bits, quantum never below 2^qmin,
 * overflowing to infinity above `maxv`: IEEE binary16/bfloat16 rounding,
 * to nearest-even, computed without bit tricks. */
static double ref_round(double r, int p, int qmin, double maxv)
{
    int e, q;

    if (isnan(r) || isinf(r) || r == 0) {
        return r;
    }
    frexp(r, &e);
    q = e - p > qmin ? e - p : qmin;
    r = ldexp(nearbyint(ldexp(r, -q)), q);
    if (fabs(r) > maxv) {
        r = copysign(INFINITY, r);
    }
    return r;
}

static void ref_store(shp_dtype_t dt, long double v, uint8_t *p)
{
    float f;
    double d;
    _Float16 hf;
    uint32_t u;
    uint16_t h;

    switch (dt) {
    case SHP_DTYPE_F32:
        f = (float)v;
        memcpy(p, &f, 4);
        return;
    case SHP_DTYPE_F64:
        d = (double)v;
        memcpy(p, &d, 8);
        return;
    case SHP_DTYPE_F16:
        hf = (_Float16)ref_round((double)v, 11, -24, 65504.0);
        memcpy(p, &hf, 2);
        return;
    case SHP_DTYPE_BF16:
        f = (float)ref_round((double)v, 8, -133, 0x1.fep127);
        memcpy(&u, &f, 4);
        h = (uint16_t)(u >> 16);
        memcpy(p, &h, 2);
        return;
    default: break;
    }
}

/* Store integer result from 64 bits, truncating (wrap-around). */
static void ref_store_int(shp_dtype_t dt, uint64_t v, uint8_t *p)
{
    memcpy(p, &v, shp_dtype_size(dt)); /* little-endian host */
}

static int ref_isnan(shp_dtype_t dt, const uint8_t *p)
{
    return shp_dtype_is_float(dt) && isnan(ref_load(dt, p));
}

/* out = x op y for one element (out may be x). */
static void ref_op(const shp_reduce_desc_t *d, const uint8_t *x,
                   const uint8_t *y, uint8_t *out)
{
    shp_dtype_t dt = d->dtype;
    size_t vs = shp_dtype_size(dt);
    long double a = ref_load(dt, x), b = ref_load(dt, y);
    uint8_t tmp[16];

    if (shp_op_is_loc(d->op)) {
        int mx = d->op == SHP_OP_MAXLOC;
        const uint8_t *w;
        if (ref_isnan(dt, x)) {
            w = x;
        } else if (ref_isnan(dt, y)) {
            w = y;
        } else if (a != b) {
            w = (mx ? a > b : a < b) ? x : y;
        } else {
            w = ref_load(d->tag_dtype, y + vs) < ref_load(d->tag_dtype, x + vs)
                    ? y
                    : x;
        }
        memcpy(tmp, w, vs + shp_dtype_size(d->tag_dtype));
        memcpy(out, tmp, vs + shp_dtype_size(d->tag_dtype));
        return;
    }

    if (shp_dtype_is_float(dt)) {
        if (d->op == SHP_OP_MAX || d->op == SHP_OP_MIN) {
            const uint8_t *w;
            int mx = d->op == SHP_OP_MAX;
            if (isnan(a)) {
                w = x;
            } else if (isnan(b)) {
                w = y;
            } else if (a != b) {
                w = (mx ? a > b : a < b) ? x : y;
            } else { /* equal: only +-0 can differ */
                w = mx ? (signbit(a) ? y : x) : (signbit(a) ? x : y);
            }
            memcpy(tmp, w, vs);
            memcpy(out, tmp, vs);
            return;
        }
        if (dt == SHP_DTYPE_F32) {
            float fa = (float)a, fb = (float)b;
            ref_store(dt, d->op == SHP_OP_SUM ? fa + fb : fa * fb, out);
        } else if (dt == SHP_DTYPE_F64) {
            double da = (double)a, db = (double)b;
            ref_store(dt, d->op == SHP_OP_SUM ? da + db : da * db, out);
        } else {
            double da = (double)a, db = (double)b;
            ref_store(dt, d->op == SHP_OP_SUM ? da + db : da * db, out);
        }
        return;
    }

    /* integers: 64-bit two's complement, truncated on store */
    {
        uint64_t ua = (uint64_t)(int64_t)a, ub = (uint64_t)(int64_t)b, r = 0;
        if (!shp_dtype_is_signed(dt)) {
            ua = (uint64_t)a;
            ub = (uint64_t)b;
        }
        switch (d->op) {
        case SHP_OP_MAX: r = a > b ? ua : ub; break;
        case SHP_OP_MIN: r = a < b ? ua : ub; break;
        case SHP_OP_SUM: r = ua + ub; break;
        case SHP_OP_PROD: r = ua * ub; break;
        case SHP_OP_LAND: r = a != 0 && b != 0; break;
        case SHP_OP_BAND: r = ua & ub; break;
        case SHP_OP_LOR: r = a != 0 || b != 0; break;
        case SHP_OP_BOR: r = ua | ub; break;
        case SHP_OP_LXOR: r = (a != 0) != (b != 0); break;
        case SHP_OP_BXOR: r = ua ^ ub; break;
        default: break;
        }
        ref_store_int(dt, r, out);
    }
}

static void ref_fold(const shp_reduce_desc_t *d, uint8_t *dst,
                     uint8_t *const *srcs, unsigned n, size_t count)
{
    size_t es = shp_reduce_elem_size(d), i;
    unsigned k;

    for (i = 0; i < count; i++) {
        memcpy(dst + i * es, srcs[0] + i * es, es);
        for (k = 1; k < n; k++) {
            ref_op(d, dst + i * es, srcs[k] + i * es, dst + i * es);
        }
    }
}

/* --- test data -------------------------------------------------------------- */

static void fill_value(shp_dtype_t dt, uint8_t *p, uint64_t *seed, int nice)
{
    static const double specials[] = {
        0.0,     -0.0,   INFINITY, -INFINITY, NAN,   1e-40,  -1e-42, 65504.0,
        65520.0, 3.0e38, -3.0e38,  1e20,      -1e20, 6.1e-5, 5.9e-8, 1.0};
    uint64_t r = test_rand(seed);
    double v;

    if (!shp_dtype_is_float(dt)) {
        if (r % 8 == 0) { /* extremes and zero */
            static const uint64_t ext[] = {
                0,       1,         ~0ull,         0x80ull,
                0x7full, 0x8000ull, 0x7fffffffull, 0x8000000000000000ull};
            r = ext[(r >> 8) % 8];
        } else if (nice) {
            r %= 7;
        }
        memcpy(p, &r, shp_dtype_size(dt));
        return;
    }
    if (!nice && r % 8 == 0) {
        v = specials[(r >> 8) % 16];
    } else {
        v = ((double)(int64_t)(r >> 11) / (double)(1ull << 52)) *
            (nice ? 4.0 : 1000.0);
    }
    switch (dt) {
    case SHP_DTYPE_F32: {
        float f = (float)v;
        memcpy(p, &f, 4);
        break;
    }
    case SHP_DTYPE_F64: memcpy(p, &v, 8); break;
    case SHP_DTYPE_F16: {
        _Float16 h = (_Float16)v;
        memcpy(p, &h, 2);
        break;
    }
    default: {
        uint16_t h = shp_f32_to_bf16((float)v);
        memcpy(p, &h, 2);
        break;
    }
    }
}

static void fill(const shp_reduce_desc_t *d, uint8_t *buf, size_t count,
                 uint64_t *seed, int nice)
{
    size_t vs = shp_dtype_size(d->dtype), es = shp_reduce_elem_size(d), i;

    for (i = 0; i < count; i++) {
        fill_value(d->dtype, buf + i * es, seed, nice);
        if (shp_op_is_loc(d->op)) {
            uint64_t t = test_rand(seed) % 5; /* few distinct tags: ties */
            memcpy(buf + i * es + vs, &t, shp_dtype_size(d->tag_dtype));
        }
    }
}

static void assert_same(const shp_reduce_desc_t *d, const uint8_t *got,
                        const uint8_t *want, size_t count, const char *what)
{
    size_t es = shp_reduce_elem_size(d), i;
    int nan_bits_free = shp_dtype_is_float(d->dtype) &&
                        (d->op == SHP_OP_SUM || d->op == SHP_OP_PROD);

    for (i = 0; i < count; i++) {
        if (!memcmp(got + i * es, want + i * es, es)) {
            continue;
        }
        if (nan_bits_free && ref_isnan(d->dtype, got + i * es) &&
            ref_isnan(d->dtype, want + i * es)) {
            continue; /* NaN payload of arithmetic is not specified */
        }
        fail_msg("%s %s/%s: element %zu differs: got %Lg want %Lg", what,
                 shp_dtype_name(d->dtype), shp_op_name(d->op), i,
                 ref_load(d->dtype, got + i * es),
                 ref_load(d->dtype, want + i * es));
    }
}

/* --- the per-combination test --------------------------------------------- */

static void test_combo(void **state)
{
    const combo_t *c = *state;
    const shp_reduce_desc_t *d = &c->desc;
    static const unsigned nsrcs[] = {1, 2, 3, 8, 16};
    static const size_t counts[] = {0, 1, 3, 7, 31, 33, 257, 4099};
    size_t es = shp_reduce_elem_size(d);
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)d->dtype << 8 ^ d->op;
    int isa, nice;
    size_t ci;
    unsigned ni, k;

    assert_int_not_equal(es, 0);
    for (isa = 0; isa < SHP_REDUCE_ISA_LAST; isa++) {
        if (!shp_reduce_isa_supported(isa)) {
            continue;
        }
        assert_int_equal(shp_reduce_set_isa(isa), SHP_OK);
        for (nice = 0; nice < 2; nice++) {
            for (ni = 0; ni < sizeof(nsrcs) / sizeof(nsrcs[0]); ni++) {
                for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                    unsigned n = nsrcs[ni];
                    size_t count = counts[ci], bytes = count * es;
                    uint8_t *mem[16], *srcs[16], *want, *got, *gotmem;
                    const void *csrcs[16];

                    for (k = 0; k < n; k++) {
                        /* odd offsets: nothing is aligned */
                        mem[k] = malloc(bytes + 8);
                        srcs[k] = mem[k] + 1 + (k % 3);
                        fill(d, srcs[k], count, &seed, nice);
                        csrcs[k] = srcs[k];
                    }
                    want = malloc(bytes + 1);
                    gotmem = malloc(bytes + 4);
                    got = gotmem + 3;
                    ref_fold(d, want, srcs, n, count);

                    assert_int_equal(shp_reduce_fold(d, got, csrcs, n, count),
                                     SHP_OK);
                    assert_same(d, got, want, count, shp_reduce_isa_name(isa));

                    /* in place: the destination is the first source */
                    assert_int_equal(
                        shp_reduce_fold(d, srcs[0], csrcs, n, count), SHP_OK);
                    assert_same(d, srcs[0], want, count, "in-place");

                    for (k = 0; k < n; k++) {
                        free(mem[k]);
                    }
                    free(want);
                    free(gotmem);
                }
            }
        }
    }
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
}

/* --- semantics, spelled out --------------------------------------------- */

static float fold2_f32(shp_op_t op, float a, float b)
{
    shp_reduce_desc_t d = {SHP_DTYPE_F32, op, SHP_DTYPE_NULL};
    const void *srcs[2] = {&a, &b};
    float r;

    assert_int_equal(shp_reduce_fold(&d, &r, srcs, 2, 1), SHP_OK);
    return r;
}

static void test_float_minmax_rules(void **state)
{
    float nan1 = nanf("1"), r;
    uint32_t u, un;
    int isa;

    (void)state;
    for (isa = 0; isa < SHP_REDUCE_ISA_LAST; isa++) {
        if (!shp_reduce_isa_supported(isa)) {
            continue;
        }
        assert_int_equal(shp_reduce_set_isa(isa), SHP_OK);
        /* -0.0 < +0.0, in either order */
        assert_true(signbit(fold2_f32(SHP_OP_MIN, 0.0f, -0.0f)));
        assert_true(signbit(fold2_f32(SHP_OP_MIN, -0.0f, 0.0f)));
        assert_false(signbit(fold2_f32(SHP_OP_MAX, -0.0f, 0.0f)));
        assert_false(signbit(fold2_f32(SHP_OP_MAX, 0.0f, -0.0f)));
        /* NaN wins, the first one keeps its bits */
        r = fold2_f32(SHP_OP_MAX, 1.0f, nan1);
        memcpy(&u, &r, 4);
        memcpy(&un, &nan1, 4);
        assert_int_equal(u, un);
        assert_true(isnan(fold2_f32(SHP_OP_MIN, nan1, -INFINITY)));
        /* infinities order as usual */
        assert_true(fold2_f32(SHP_OP_MAX, INFINITY, 3.0f) == INFINITY);
        assert_true(fold2_f32(SHP_OP_MIN, -INFINITY, 3.0f) == -INFINITY);
        assert_true(isnan(fold2_f32(SHP_OP_SUM, INFINITY, -INFINITY)));
        /* -0 + -0 = -0, -0 + 0 = +0 */
        assert_true(signbit(fold2_f32(SHP_OP_SUM, -0.0f, -0.0f)));
        assert_false(signbit(fold2_f32(SHP_OP_SUM, -0.0f, 0.0f)));
    }
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
}

static void test_integer_overflow_wraps(void **state)
{
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t a[2] = {INT32_MAX, INT32_MIN}, b[2] = {1, -1}, r[2];
    int8_t c8[1] = {100}, e8[1] = {100}, r8[1];
    uint16_t u16a[1] = {65535}, u16b[1] = {65535}, r16[1];
    const void *srcs[2] = {a, b};

    (void)state;
    assert_int_equal(shp_reduce_fold(&d, r, srcs, 2, 2), SHP_OK);
    assert_int_equal(r[0], INT32_MIN);
    assert_int_equal(r[1], INT32_MAX);

    d.dtype = SHP_DTYPE_I8;
    srcs[0] = c8;
    srcs[1] = e8;
    assert_int_equal(shp_reduce_fold(&d, r8, srcs, 2, 1), SHP_OK);
    assert_int_equal(r8[0], -56); /* 200 wraps to -56 */

    d.dtype = SHP_DTYPE_U16;
    d.op = SHP_OP_PROD;
    srcs[0] = u16a;
    srcs[1] = u16b;
    assert_int_equal(shp_reduce_fold(&d, r16, srcs, 2, 1), SHP_OK);
    assert_int_equal(r16[0], 1); /* 65535^2 mod 65536 */
}

static void test_half_rounding(void **state)
{
    (void)state;
    /* bf16: 1 + 2^-8 is halfway between 1 and 1+2^-7: ties to even (1) */
    assert_int_equal(shp_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: to even (1+2^-6) */
    assert_int_equal(shp_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(shp_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_true(isnan(shp_bf16_to_f32(shp_f32_to_bf16(NAN))));
    assert_int_equal(shp_f32_to_bf16(INFINITY), 0x7f80);
    /* f16 */
    assert_int_equal(shp_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(shp_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie, even */
    assert_int_equal(shp_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(shp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(shp_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(shp_f32_to_f16(65520.0f), 0x7c00);   /* rounds to inf */
    assert_int_equal(shp_f32_to_f16(0x1p-24f), 0x0001);   /* min subnormal */
    assert_int_equal(shp_f32_to_f16(0x1p-25f), 0x0000);   /* tie to even 0 */
    assert_int_equal(shp_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even 2 */
    assert_int_equal(shp_f32_to_f16(-0.0f), 0x8000);
    assert_true(shp_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(shp_f16_to_f32(0x7c00) == INFINITY);
    assert_true(isnan(shp_f16_to_f32(0x7e00)));
}

/* Every f16 value round-trips, and f32 -> f16 agrees with the compiler's
 * _Float16 conversion on a sweep of f32 values. */
static void test_f16_conversion_exhaustive(void **state)
{
    uint32_t i;

    (void)state;
    for (i = 0; i < 65536; i++) {
        float f = shp_f16_to_f32((uint16_t)i);
        _Float16 h;
        memcpy(&h, &i, 2);
        assert_true(isnan(f) ? isnan((float)h) : f == (float)h);
        if (!isnan(f)) {
            assert_int_equal(shp_f32_to_f16(f), i);
        }
    }
    for (i = 0; i < 0x7f800000u; i += 0x1237) {
        float f;
        _Float16 h;
        uint16_t hb;
        memcpy(&f, &i, 4);
        h = (_Float16)f;
        memcpy(&hb, &h, 2);
        assert_int_equal(shp_f32_to_f16(f), hb);
        assert_int_equal(shp_f32_to_f16(-f), hb | 0x8000);
    }
}

/* --- half types: every variant bit for bit the generic kernel ------------- */

/* Second operands: signed zeros, subnormals, min/max normal, infinities,
 * quiet and signalling NaNs with payloads, and values whose sum with a
 * neighbour of 1.0 is a rounding tie (to an even and to an odd neighbour). */
static const uint16_t bf16_specials[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x0040, 0x007f, 0x807f, 0x0080,
    0x8080, 0x0081, 0x7f7f, 0xff7f, 0x7f7e, 0x7f80, 0xff80, 0x7fc0,
    0xffc0, 0x7fc1, 0x7fff, 0xffff, 0x7f81, 0xff81, 0x7fbf, 0x3f80,
    0xbf80, 0x3f81, 0x3b80, 0xbb80, 0x3bc0, 0x3c00, 0x4000, 0x4b80,
    0x3380, 0x0100, 0x8100, 0x1f80, 0x5f80, 0x7f00, 0x00ff, 0xc2f7};
static const uint16_t f16_specials[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x0200, 0x03ff, 0x83ff, 0x0400,
    0x8400, 0x0401, 0x7bff, 0xfbff, 0x7bfe, 0x7c00, 0xfc00, 0x7e00,
    0xfe00, 0x7e01, 0x7fff, 0xffff, 0x7c01, 0xfc01, 0x7dff, 0x3c00,
    0xbc00, 0x3c01, 0x1000, 0x9000, 0x1200, 0x1400, 0x4000, 0x6400,
    0x0c00, 0x0800, 0x8800, 0x2000, 0x5c00, 0x7800, 0x00ff, 0xd5ef};

static int half_isnan(shp_dtype_t dt, uint16_t h)
{
    return (h & 0x7fffu) > (dt == SHP_DTYPE_BF16 ? 0x7f80u : 0x7c00u);
}

/*
 * Folds `n` children on every variant this CPU runs and checks each against
 * a model: the generic variant's two-operand kernel applied child by child
 * (the scalar reference), which must give the first operand (the
 * accumulator), quieted, where both operands of a SUM or PROD step are NaN.
 * Every variant must equal the model bit for bit everywhere, the generic
 * one's own multi-child loops included.  `what` names the case.
 */
static void check_half_variants(const shp_reduce_desc_t *d,
                                uint16_t *const *srcs, unsigned n, size_t count,
                                const char *what)
{
    shp_dtype_t dt = d->dtype;
    int arith = d->op == SHP_OP_SUM || d->op == SHP_OP_PROD;
    uint16_t quiet = dt == SHP_DTYPE_BF16 ? 0x40 : 0x200;
    uint16_t *model = malloc(count * 2 + 2), *step = malloc(count * 2 + 2);
    uint16_t *got = malloc(count * 2 + 2), *inplace = malloc(count * 2 + 2);
    const void *cs[64];
    unsigned k;
    size_t i;
    int isa;

    assert_non_null(model);
    assert_non_null(step);
    assert_non_null(got);
    assert_non_null(inplace);
    assert_true(n >= 2 && n <= 64);
    for (k = 0; k < n; k++) {
        cs[k] = srcs[k];
    }

    /* the model, child by child on the generic two-operand kernel */
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
    memcpy(model, srcs[0], count * 2);
    for (k = 1; k < n; k++) {
        const void *two[2] = {model, srcs[k]};
        assert_int_equal(shp_reduce_fold(d, step, two, 2, count), SHP_OK);
        for (i = 0; i < count; i++) {
            if (arith && half_isnan(dt, model[i]) &&
                half_isnan(dt, srcs[k][i]) && step[i] != (model[i] | quiet)) {
                fail_msg("%s %s/%s generic: element %zu: NaN 0x%04x op NaN "
                         "0x%04x gave 0x%04x, not the first, quieted",
                         what, shp_dtype_name(dt), shp_op_name(d->op), i,
                         model[i], srcs[k][i], step[i]);
            }
        }
        memcpy(model, step, count * 2);
    }

    for (isa = 0; isa < SHP_REDUCE_ISA_LAST; isa++) {
        if (!shp_reduce_isa_supported(isa)) {
            continue;
        }
        assert_int_equal(shp_reduce_set_isa(isa), SHP_OK);
        memset(got, 0xa5, count * 2 + 2);
        assert_int_equal(shp_reduce_fold(d, got, cs, n, count), SHP_OK);
        /* in place: the accumulator is the first child */
        memcpy(inplace, srcs[0], count * 2);
        cs[0] = inplace;
        assert_int_equal(shp_reduce_fold(d, inplace, cs, n, count), SHP_OK);
        cs[0] = srcs[0];
        for (i = 0; i < count; i++) {
            uint16_t g = got[i];
            if (g == model[i] && inplace[i] == g) {
                continue;
            }
            fail_msg("%s %s/%s %s (%u children): element %zu: "
                     "0x%04x op 0x%04x...: got 0x%04x (in place 0x%04x), "
                     "model 0x%04x",
                     what, shp_dtype_name(dt), shp_op_name(d->op),
                     shp_reduce_kernel_name(d), n, i, srcs[0][i], srcs[1][i], g,
                     inplace[i], model[i]);
        }
        /* nothing written past the end */
        assert_int_equal(got[count], 0xa5a5);
    }
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
    free(model);
    free(step);
    free(got);
    free(inplace);
}

static void check_half_exhaustive(shp_dtype_t dt)
{
    enum { N = 65536, RANDOM = 1 << 21, NCH = 17, MCOUNT = 4096 + 127 };
    static const shp_op_t ops[] = {SHP_OP_SUM, SHP_OP_PROD, SHP_OP_MIN,
                                   SHP_OP_MAX};
    const uint16_t *sp = dt == SHP_DTYPE_BF16 ? bf16_specials : f16_specials;
    size_t nsp = sizeof(bf16_specials) / sizeof(bf16_specials[0]);
    uint16_t *all = malloc(N * 2), *other = malloc(N * 2);
    uint16_t *ra = malloc(RANDOM * 2), *rb = malloc(RANDOM * 2);
    uint16_t *ch[NCH], *pair[2];
    uint64_t seed = 0x5eed0000u + (uint64_t)dt;
    size_t i, j, oi;
    unsigned k, n;

    assert_int_equal(sizeof(f16_specials), sizeof(bf16_specials));
    assert_non_null(all);
    assert_non_null(other);
    assert_non_null(ra);
    assert_non_null(rb);
    for (i = 0; i < N; i++) {
        all[i] = (uint16_t)i;
    }
    /* random pairs; one in eight a special, the rest any bits at all, or
     * values near each other's magnitude (sums that round) */
    for (i = 0; i < RANDOM; i++) {
        uint64_t r = test_rand(&seed);
        ra[i] = (uint16_t)r;
        rb[i] = (r >> 16) % 8 == 0 ? sp[(r >> 20) % nsp]
                : (r >> 16) % 2    ? (uint16_t)(r >> 32)
                                   : (uint16_t)(ra[i] ^ ((r >> 32) & 0x83ff));
    }
    for (k = 0; k < NCH; k++) {
        ch[k] = malloc(MCOUNT * 2);
        assert_non_null(ch[k]);
    }
    for (oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
        shp_reduce_desc_t d = {dt, ops[oi], SHP_DTYPE_NULL};

        /* every value against every special, as left and as right operand */
        for (j = 0; j < nsp; j++) {
            for (i = 0; i < N; i++) {
                other[i] = sp[j];
            }
            pair[0] = all;
            pair[1] = other;
            check_half_variants(&d, pair, 2, N, "all x special");
            pair[0] = other;
            pair[1] = all;
            check_half_variants(&d, pair, 2, N, "special x all");
        }
        pair[0] = ra;
        pair[1] = rb;
        check_half_variants(&d, pair, 2, RANDOM, "random pairs");
        pair[0] = rb;
        pair[1] = ra;
        check_half_variants(&d, pair, 2, RANDOM, "random pairs swapped");

        /* many children, odd lengths: the accumulator rounded after every
         * child; values of similar size so that sums keep rounding */
        for (k = 0; k < NCH; k++) {
            for (i = 0; i < MCOUNT; i++) {
                uint64_t r = test_rand(&seed);
                ch[k][i] = r % 16 == 0
                               ? sp[(r >> 8) % nsp]
                               : (uint16_t)((r >> 16) & 0x87ff) |
                                     (dt == SHP_DTYPE_BF16 ? 0x3c00 : 0x3000);
            }
        }
        for (n = 2; n <= NCH; n += (n < 5 ? 1 : 4)) {
            static const size_t lens[] = {1, 15, 31, 33, 127, 128, 129, MCOUNT};
            for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
                check_half_variants(&d, ch, n, lens[i], "children");
            }
        }
    }
    for (k = 0; k < NCH; k++) {
        free(ch[k]);
    }
    free(all);
    free(other);
    free(ra);
    free(rb);
}

static void test_bf16_variants_exhaustive(void **state)
{
    (void)state;
    check_half_exhaustive(SHP_DTYPE_BF16);
}

static void test_f16_variants_exhaustive(void **state)
{
    (void)state;
    check_half_exhaustive(SHP_DTYPE_F16);
}

/* The paper's example: fp sums of adversarial values depend on the order;
 * folded in child order they are bitwise identical whatever order the
 * payloads arrive in. */
static void release_count(void *arg, unsigned child, const void *payload)
{
    (void)child;
    (void)payload;
    (*(int *)arg)++;
}

static void check_permuted_determinism(shp_dtype_t dt)
{
    enum { N = 16, COUNT = 64 };
    shp_reduce_desc_t d = {dt, SHP_OP_SUM, SHP_DTYPE_NULL};
    static const double vals[] = {1e20, 1.0,  -1e20, 3.0,
                                  1e-3, -1.0, 7e19,  -7e19};
    size_t es = shp_dtype_size(dt);
    uint8_t child[N][COUNT * 8], in_order[COUNT * 8], acc[COUNT * 8];
    const void *srcs[N];
    const void *pending[N];
    unsigned perm[N], i, j, trial;
    uint64_t seed = 42;
    int released;
    shp_fold_t fold;

    for (i = 0; i < N; i++) {
        for (j = 0; j < COUNT; j++) {
            double v = vals[(i + j) % 8] * (1 + (double)j / 7);
            if (dt == SHP_DTYPE_F32) {
                float f = (float)v;
                memcpy(child[i] + j * es, &f, es);
            } else {
                memcpy(child[i] + j * es, &v, es);
            }
        }
        srcs[i] = child[i];
    }
    assert_int_equal(shp_reduce_fold(&d, in_order, srcs, N, COUNT), SHP_OK);

    /* the order matters for these values: a reversed fold differs */
    {
        const void *rev[N];
        uint8_t reversed[COUNT * 8];
        for (i = 0; i < N; i++) {
            rev[i] = srcs[N - 1 - i];
        }
        assert_int_equal(shp_reduce_fold(&d, reversed, rev, N, COUNT), SHP_OK);
        assert_memory_not_equal(reversed, in_order, COUNT * es);
    }

    for (trial = 0; trial < 200; trial++) {
        for (i = 0; i < N; i++) {
            perm[i] = i;
        }
        for (i = N - 1; i > 0; i--) { /* Fisher-Yates */
            j = (unsigned)(test_rand(&seed) % (i + 1));
            unsigned t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        released = 0;
        assert_int_equal(shp_fold_init(&fold, &d, COUNT, acc, N, pending,
                                       release_count, &released),
                         SHP_OK);
        for (i = 0; i < N; i++) {
            shp_status_t st = shp_fold_add(&fold, perm[i], child[perm[i]]);
            assert_true(st == SHP_OK || st == SHP_INPROGRESS);
        }
        assert_true(shp_fold_done(&fold));
        assert_int_equal(released, N);
        assert_memory_equal(acc, in_order, COUNT * es);
        shp_fold_cleanup(&fold);
    }
}

static void test_determinism_f32(void **state)
{
    (void)state;
    check_permuted_determinism(SHP_DTYPE_F32);
}

static void test_determinism_f64(void **state)
{
    (void)state;
    check_permuted_determinism(SHP_DTYPE_F64);
}

static void test_stream_fold_errors(void **state)
{
    shp_reduce_desc_t d = {SHP_DTYPE_I32, SHP_OP_SUM, SHP_DTYPE_NULL};
    int32_t a = 1, b = 2, c = 4, acc = 0;
    int released = 0;
    shp_fold_t fold;

    (void)state;
    assert_int_equal(
        shp_fold_init(&fold, &d, 1, &acc, 3, NULL, release_count, &released),
        SHP_OK);
    assert_int_equal(shp_fold_add(&fold, 3, &a), SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_fold_add(&fold, 2, &c), SHP_INPROGRESS);
    assert_int_equal(shp_fold_add(&fold, 2, &c), SHP_ERR_EXISTS);
    assert_int_equal(released, 0);
    assert_int_equal(shp_fold_add(&fold, 0, &a), SHP_OK);
    assert_int_equal(shp_fold_add(&fold, 0, &a), SHP_ERR_EXISTS);
    assert_false(shp_fold_done(&fold));
    assert_int_equal(acc, 1);
    assert_int_equal(shp_fold_add(&fold, 1, &b), SHP_OK);
    assert_true(shp_fold_done(&fold));
    assert_int_equal(acc, 7);
    assert_int_equal(released, 3);
    shp_fold_cleanup(&fold);

    /* cleanup releases what is still pending */
    released = 0;
    assert_int_equal(
        shp_fold_init(&fold, &d, 1, &acc, 3, NULL, release_count, &released),
        SHP_OK);
    assert_int_equal(shp_fold_add(&fold, 1, &b), SHP_INPROGRESS);
    assert_int_equal(shp_fold_add(&fold, 2, &c), SHP_INPROGRESS);
    shp_fold_cleanup(&fold);
    assert_int_equal(released, 2);

    /* bad descriptors are refused */
    d.op = SHP_OP_BAND;
    d.dtype = SHP_DTYPE_F32;
    assert_int_equal(
        shp_fold_init(&fold, &d, 1, &acc, 3, NULL, release_count, &released),
        SHP_ERR_INVALID_PARAM);
}

static void test_desc_check(void **state)
{
    const char *why = NULL;
    shp_reduce_desc_t d;

    (void)state;
    d = (shp_reduce_desc_t){SHP_DTYPE_F32, SHP_OP_BXOR, SHP_DTYPE_NULL};
    assert_int_equal(shp_reduce_desc_check(&d, &why), SHP_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "integer"));
    d = (shp_reduce_desc_t){SHP_DTYPE_BF16, SHP_OP_LAND, SHP_DTYPE_NULL};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_ERR_UNSUPPORTED);
    d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_NULL};
    assert_int_equal(shp_reduce_desc_check(&d, &why), SHP_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "tag"));
    d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_F32};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_ERR_UNSUPPORTED);
    d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_SUM, SHP_DTYPE_I32};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_ERR_UNSUPPORTED);
    d = (shp_reduce_desc_t){(shp_dtype_t)13, SHP_OP_SUM, SHP_DTYPE_NULL};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_ERR_UNSUPPORTED);
    d = (shp_reduce_desc_t){SHP_DTYPE_I8, (shp_op_t)99, SHP_DTYPE_NULL};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_ERR_UNSUPPORTED);
    assert_int_equal(shp_reduce_elem_size(&d), 0);
    d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_MAXLOC, SHP_DTYPE_I32};
    assert_int_equal(shp_reduce_desc_check(&d, NULL), SHP_OK);
    assert_int_equal(shp_reduce_elem_size(&d), 12);
    {
        double x = 1;
        const void *s[1] = {&x};
        d = (shp_reduce_desc_t){SHP_DTYPE_F64, SHP_OP_BOR, SHP_DTYPE_NULL};
        assert_int_equal(shp_reduce_fold(&d, &x, s, 1, 1),
                         SHP_ERR_INVALID_PARAM);
        d.op = SHP_OP_SUM;
        assert_int_equal(shp_reduce_fold(&d, &x, s, 0, 1),
                         SHP_ERR_INVALID_PARAM);
    }
}

static void test_isa_selection(void **state)
{
    (void)state;
    assert_true(shp_reduce_isa_supported(SHP_REDUCE_ISA_GENERIC));
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_LAST),
                     SHP_ERR_UNSUPPORTED);
    if (!shp_reduce_isa_supported(SHP_REDUCE_ISA_AVX512)) {
        assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_AVX512),
                         SHP_ERR_UNSUPPORTED);
    }
    assert_int_equal(shp_reduce_set_isa(SHP_REDUCE_ISA_GENERIC), SHP_OK);
    assert_int_equal(shp_reduce_get_isa(), SHP_REDUCE_ISA_GENERIC);
    assert_string_equal(shp_reduce_isa_name(SHP_REDUCE_ISA_AVX2), "avx2");
}

static void test_minloc_ties(void **state)
{
    /* packed (f64 value, i32 tag) pairs */
    shp_reduce_desc_t d = {SHP_DTYPE_F64, SHP_OP_MINLOC, SHP_DTYPE_I32};
    uint8_t a[12], b[12], c[12], r[12];
    double v;
    int32_t t;
    const void *srcs[3] = {a, b, c};

    (void)state;
    v = 2.0;
    t = 7;
    memcpy(a, &v, 8);
    memcpy(a + 8, &t, 4);
    v = 1.0;
    t = 9;
    memcpy(b, &v, 8);
    memcpy(b + 8, &t, 4);
    v = 1.0;
    t = 3;
    memcpy(c, &v, 8);
    memcpy(c + 8, &t, 4);
    assert_int_equal(shp_reduce_fold(&d, r, srcs, 3, 1), SHP_OK);
    memcpy(&v, r, 8);
    memcpy(&t, r + 8, 4);
    assert_true(v == 1.0);
    assert_int_equal(t, 3); /* tie: lowest index wins */
    d.op = SHP_OP_MAXLOC;
    assert_int_equal(shp_reduce_fold(&d, r, srcs, 3, 1), SHP_OK);
    memcpy(&v, r, 8);
    memcpy(&t, r + 8, 4);
    assert_true(v == 2.0);
    assert_int_equal(t, 7);
}

int main(void)
{
    static const shp_dtype_t tags[] = {SHP_DTYPE_I32, SHP_DTYPE_U64,
                                       SHP_DTYPE_I16, SHP_DTYPE_U8};
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_float_minmax_rules),
        cmocka_unit_test(test_integer_overflow_wraps),
        cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_f16_conversion_exhaustive),
        cmocka_unit_test(test_bf16_variants_exhaustive),
        cmocka_unit_test(test_f16_variants_exhaustive),
        cmocka_unit_test(test_determinism_f32),
        cmocka_unit_test(test_determinism_f64),
        cmocka_unit_test(test_stream_fold_errors),
        cmocka_unit_test(test_desc_check),
        cmocka_unit_test(test_isa_selection),
        cmocka_unit_test(test_minloc_ties),
    };
    enum { MAXT = SHP_DTYPE_LAST * SHP_OP_LAST + 16 };
    static combo_t combos[MAXT];
    static struct CMUnitTest tests[MAXT + 16];
    size_t n = 0, i;
    int dt, op;

    for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        tests[n++] = fixed[i];
    }
    for (dt = 0; dt < SHP_DTYPE_LAST; dt++) {
        for (op = 0; op < SHP_OP_LAST; op++) {
            combo_t *c = &combos[n];
            c->desc.dtype = dt;
            c->desc.op = op;
            c->desc.tag_dtype =
                shp_op_is_loc(op) ? tags[dt % 4] : SHP_DTYPE_NULL;
            if (shp_reduce_desc_check(&c->desc, NULL) != SHP_OK) {
                continue;
            }
            snprintf(
                c->name, sizeof(c->name), "fold_%s_%s%s%s", shp_dtype_name(dt),
                shp_op_name(op), shp_op_is_loc(op) ? "_" : "",
                shp_op_is_loc(op) ? shp_dtype_name(c->desc.tag_dtype) : "");
            tests[n] = (struct CMUnitTest){c->name, test_combo, NULL, NULL, c};
            n++;
        }
    }
    return _cmocka_run_group_tests("reduce", tests, n, NULL, NULL);
}
