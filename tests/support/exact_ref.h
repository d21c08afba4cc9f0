/*
 * The exact-mode tests' reference (test_exact, test_exact_coll): values of
 * f64, f32, f16 and bf16 as bits, and their correctly rounded sum computed
 * independently of reduce/exact.c: MPFR adds them exactly (4400 bits hold
 * any sum of these types), then rounds once to the type's precision in its
 * exponent range (mpfr_check_range + mpfr_subnormalize: IEEE 754 round to
 * nearest-even, subnormals included).  Needs cmocka's headers first.
 */
#ifndef SHP_TESTS_EXACT_REF_H
#define SHP_TESTS_EXACT_REF_H

#include "reduce/reduce.h"

#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    shp_dtype_t dt;
    unsigned size, p;
    int emin, emax; /* MPFR's convention: 0.1b x 2^e */
} tfmt_t;

static inline tfmt_t tf(shp_dtype_t dt)
{
    switch (dt) {
    case SHP_DTYPE_F64: return (tfmt_t){dt, 8, 53, -1073, 1024};
    case SHP_DTYPE_F32: return (tfmt_t){dt, 4, 24, -148, 128};
    case SHP_DTYPE_F16: return (tfmt_t){dt, 2, 11, -23, 16};
    default: return (tfmt_t){dt, 2, 8, -132, 128};
    }
}

static inline double to_double(shp_dtype_t dt, uint64_t b)
{
    switch (dt) {
    case SHP_DTYPE_F64: {
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    case SHP_DTYPE_F32: {
        float f;
        uint32_t u = (uint32_t)b;
        memcpy(&f, &u, 4);
        return f;
    }
    case SHP_DTYPE_F16: {
        _Float16 h;
        uint16_t u = (uint16_t)b;
        memcpy(&h, &u, 2);
        return (double)h;
    }
    default: {
        float f;
        uint32_t u = (uint32_t)b << 16;
        memcpy(&f, &u, 4);
        return f;
    }
    }
}

static inline uint64_t from_double(shp_dtype_t dt, double d)
{
    uint64_t b = 0;
    switch (dt) {
    case SHP_DTYPE_F64: memcpy(&b, &d, 8); return b;
    case SHP_DTYPE_F32: {
        float f = (float)d; /* exact: d is representable */
        memcpy(&b, &f, 4);
        return b;
    }
    case SHP_DTYPE_F16: {
        _Float16 h = (_Float16)d;
        memcpy(&b, &h, 2);
        return b;
    }
    default: {
        float f = (float)d;
        uint32_t u;
        memcpy(&u, &f, 4);
        return u >> 16;
    }
    }
}

/* the reference: the correctly rounded sum of vals[0..n) */
static inline uint64_t ref_sum(shp_dtype_t dt, const uint64_t *vals, unsigned n)
{
    tfmt_t t = tf(dt);
    int nan = 0, pinf = 0, ninf = 0, all_negzero = 1;
    mpfr_t acc, x, r;
    mpfr_inits2(4400, acc, x, (mpfr_ptr)0);
    mpfr_init2(r, t.p);
    mpfr_set_zero(acc, 1);
    for (unsigned i = 0; i < n; i++) {
        double d = to_double(dt, vals[i]);
        if (isnan(d)) {
            nan = 1;
        } else if (isinf(d)) {
            *(d > 0 ? &pinf : &ninf) = 1;
        }
        if (!(d == 0 && signbit(d))) {
            all_negzero = 0;
        }
        if (isfinite(d)) {
            mpfr_set_d(x, d, MPFR_RNDN);
            if (mpfr_add(acc, acc, x, MPFR_RNDN) != 0) {
                abort(); /* 4400 bits are exact */
            }
        }
    }
    uint64_t out;
    if (nan || (pinf && ninf)) {
        out = from_double(dt, NAN);
    } else if (pinf || ninf) {
        out = from_double(dt, pinf ? INFINITY : -INFINITY);
    } else if (mpfr_zero_p(acc)) {
        out = from_double(dt, all_negzero && n > 0 ? -0.0 : 0.0);
    } else {
        mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
        mpfr_set_emin(t.emin);
        mpfr_set_emax(t.emax);
        int i = mpfr_set(r, acc, MPFR_RNDN);
        i = mpfr_check_range(r, i, MPFR_RNDN);
        mpfr_subnormalize(r, i, MPFR_RNDN);
        double d = mpfr_get_d(r, MPFR_RNDN); /* exact: p <= 53 */
        mpfr_set_emin(emin);
        mpfr_set_emax(emax);
        out = from_double(dt, d);
    }
    mpfr_clears(acc, x, r, (mpfr_ptr)0);
    return out;
}

/* default quiet NaN of each type, as exact.c documents it */
static inline uint64_t canon(shp_dtype_t dt, uint64_t b)
{
    if (isnan(to_double(dt, b))) {
        switch (dt) {
        case SHP_DTYPE_F64: return 0x7ff8000000000000ull;
        case SHP_DTYPE_F32: return 0x7fc00000u;
        case SHP_DTYPE_F16: return 0x7e00u;
        default: return 0x7fc0u;
        }
    }
    return b;
}

/* a value of the type near x */
static inline uint64_t near(shp_dtype_t dt, double x)
{
    float f = (float)x;
    uint32_t u;
    switch (dt) {
    case SHP_DTYPE_F64: return from_double(dt, x);
    case SHP_DTYPE_F32: return from_double(dt, f);
    case SHP_DTYPE_F16: return from_double(dt, (double)(_Float16)f);
    default: memcpy(&u, &f, 4); return u >> 16;
    }
}

#endif
