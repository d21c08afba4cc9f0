/* Exact floating-point sums: windows, limbs, rounding (see exact.h). */
#include "reduce/exact.h"

#include <string.h>

/* a binary format: exponent and fraction bits, bias */
typedef struct fmt {
    unsigned size, ebits, mbits;
    int bias;
} fmt_t;

static int fmt_of(shp_dtype_t dt, fmt_t *f)
{
    switch (dt) {
    case SHP_DTYPE_F64: *f = (fmt_t){8, 11, 52, 1023}; return 1;
    case SHP_DTYPE_F32: *f = (fmt_t){4, 8, 23, 127}; return 1;
    case SHP_DTYPE_F16: *f = (fmt_t){2, 5, 10, 15}; return 1;
    case SHP_DTYPE_BF16: *f = (fmt_t){2, 8, 7, 127}; return 1;
    default: return 0;
    }
}

int shp_exact_dtype_ok(shp_dtype_t dt)
{
    fmt_t f;
    return fmt_of(dt, &f);
}

/* exponent of the lowest bit a value can have, of the highest */
static int fmt_emin(const fmt_t *f)
{
    return 1 - f->bias - (int)f->mbits;
}
static int fmt_emax(const fmt_t *f)
{
    return (int)((1u << f->ebits) - 2) - f->bias;
}

enum { V_ZERO, V_FIN, V_PINF, V_NINF, V_NAN };

/* One value: its class; for a finite non-zero one |x| = m x 2^e, m odd. */
static int split(const fmt_t *f, const uint8_t *p, int *neg, uint64_t *m,
                 int *e)
{
    uint64_t u = 0;
    memcpy(&u, p, f->size); /* little-endian host, like the payloads */
    unsigned shift = f->size * 8 - 1;
    *neg = (int)(u >> shift) & 1;
    uint64_t E = (u >> f->mbits) & ((1ull << f->ebits) - 1);
    uint64_t F = u & ((1ull << f->mbits) - 1);
    if (E == (1ull << f->ebits) - 1) {
        return F ? V_NAN : (*neg ? V_NINF : V_PINF);
    }
    if (E == 0) {
        if (F == 0) {
            return V_ZERO;
        }
        *m = F;
        *e = fmt_emin(f);
    } else {
        *m = F | (1ull << f->mbits);
        *e = (int)E - f->bias - (int)f->mbits;
    }
    int tz = __builtin_ctzll(*m);
    *m >>= tz;
    *e += tz;
    return V_FIN;
}

#define NO_HI (-(1 << 30)) /* the window of no finite non-zero value */

shp_status_t shp_exact_window(shp_dtype_t dt, const void *const *srcs,
                              unsigned nsrcs, size_t count,
                              int64_t win[SHP_EXACT_WIN_LANES])
{
    fmt_t f;
    if (!fmt_of(dt, &f) || (nsrcs > 0 && srcs == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    int hi = NO_HI, lo = -NO_HI;
    int64_t flags = 0;
    for (unsigned s = 0; s < nsrcs; s++) {
        const uint8_t *p = srcs[s];
        for (size_t i = 0; i < count; i++, p += f.size) {
            int neg, e;
            uint64_t m;
            switch (split(&f, p, &neg, &m, &e)) {
            case V_FIN: {
                int top = e + 63 - __builtin_clzll(m);
                hi = top > hi ? top : hi;
                lo = e < lo ? e : lo;
                break;
            }
            case V_ZERO: flags |= neg ? SHP_EXACT_HAS_NEGZERO : 0; break;
            default: flags |= SHP_EXACT_HAS_SPECIAL;
            }
        }
    }
    win[0] = hi;
    win[1] = -(int64_t)lo;
    win[2] = flags;
    return SHP_OK;
}

void shp_exact_window_full(shp_dtype_t dt, int64_t win[SHP_EXACT_WIN_LANES])
{
    fmt_t f;
    if (!fmt_of(dt, &f)) {
        win[0] = NO_HI;
        win[1] = NO_HI;
        win[2] = 0;
        return;
    }
    win[0] = fmt_emax(&f);
    win[1] = -(int64_t)fmt_emin(&f);
    win[2] = SHP_EXACT_HAS_SPECIAL | SHP_EXACT_HAS_NEGZERO;
}

static shp_status_t bad(const char *reason, const char **why)
{
    if (why != NULL) {
        *why = reason;
    }
    return SHP_ERR_PROTO;
}

shp_status_t shp_exact_layout(shp_dtype_t dt,
                              const int64_t win[SHP_EXACT_WIN_LANES],
                              shp_exact_layout_t *lay, const char **why)
{
    fmt_t f;
    if (!fmt_of(dt, &f)) {
        return bad("exact sums are for f32, f64, f16 and bf16", why);
    }
    int64_t hi = win[0], lo = -win[1];
    if (win[2] & ~(int64_t)(SHP_EXACT_HAS_SPECIAL | SHP_EXACT_HAS_NEGZERO)) {
        return bad("unknown window flags", why);
    }
    memset(lay, 0, sizeof(*lay));
    lay->dtype = dt;
    if (hi == NO_HI && lo == -NO_HI) {
        lay->limbs = 0; /* no finite non-zero value anywhere */
        lay->lo = 0;
    } else if (hi > fmt_emax(&f) || lo < fmt_emin(&f) || lo > hi) {
        return bad("window outside the type's range", why);
    } else {
        lay->lo = (int32_t)lo;
        lay->limbs = (unsigned)((hi - lo) / SHP_EXACT_LIMB_BITS + 1);
    }
    lay->specials = (win[2] & SHP_EXACT_HAS_SPECIAL) != 0;
    lay->negzero = (win[2] & SHP_EXACT_HAS_NEGZERO) != 0;
    lay->lanes =
        lay->limbs + 3u * (unsigned)lay->specials + (unsigned)lay->negzero;
    return SHP_OK;
}

shp_status_t shp_exact_encode(const shp_exact_layout_t *lay,
                              const void *const *srcs, unsigned nsrcs,
                              size_t count, int64_t *lanes)
{
    fmt_t f;
    if (!fmt_of(lay->dtype, &f)) {
        return SHP_ERR_INVALID_PARAM;
    }
    const unsigned L = lay->lanes, sp = lay->limbs,
                   nz = lay->limbs + 3u * (unsigned)lay->specials;
    memset(lanes, 0, count * L * sizeof(int64_t));
    for (unsigned s = 0; s < nsrcs; s++) {
        const uint8_t *p = srcs[s];
        int64_t *out = lanes;
        for (size_t i = 0; i < count; i++, p += f.size, out += L) {
            int neg, e;
            uint64_t m;
            int k = split(&f, p, &neg, &m, &e);
            if (lay->negzero && !(k == V_ZERO && neg)) {
                out[nz]++;
            }
            if (k == V_ZERO) {
                continue;
            }
            if (k != V_FIN) {
                if (!lay->specials) {
                    return SHP_ERR_INVALID_PARAM;
                }
                out[sp + (k == V_NAN ? 0 : k == V_PINF ? 1 : 2)]++;
                continue;
            }
            int64_t off = (int64_t)e - lay->lo;
            if (off < 0 || lay->limbs == 0) {
                return SHP_ERR_INVALID_PARAM;
            }
            unsigned j = (unsigned)(off / SHP_EXACT_LIMB_BITS);
            unsigned __int128 v = (unsigned __int128)m
                                  << (off % SHP_EXACT_LIMB_BITS);
            for (; v != 0; j++, v >>= SHP_EXACT_LIMB_BITS) {
                if (j >= lay->limbs) {
                    return SHP_ERR_INVALID_PARAM;
                }
                int64_t limb = (int64_t)(uint32_t)v;
                out[j] += neg ? -limb : limb;
            }
        }
    }
    return SHP_OK;
}

/* bits [pos, pos + n) of a magnitude in 32-bit limbs, n <= 64 */
static uint64_t get_bits(const uint32_t *mag, unsigned nl, int64_t pos,
                         unsigned n)
{
    uint64_t r = 0;
    for (unsigned k = 0; k < n; k++) {
        int64_t b = pos + k;
        if (b >= 0 && (uint64_t)b / 32 < nl &&
            ((mag[b / 32] >> (b % 32)) & 1)) {
            r |= 1ull << k;
        }
    }
    return r;
}

/* is any bit below `pos` set? */
static int any_below(const uint32_t *mag, int64_t pos)
{
    if (pos <= 0) {
        return 0;
    }
    int64_t w = pos / 32;
    for (int64_t j = 0; j < w; j++) {
        if (mag[j] != 0) {
            return 1;
        }
    }
    return (pos % 32) && (mag[w] & ((1u << (pos % 32)) - 1)) != 0;
}

static void put(const fmt_t *f, uint8_t *p, uint64_t u)
{
    memcpy(p, &u, f->size);
}

/* the format's bits of a special or zero */
static uint64_t inf_bits(const fmt_t *f, int neg)
{
    return ((uint64_t)neg << (f->size * 8 - 1)) |
           (((1ull << f->ebits) - 1) << f->mbits);
}

static uint64_t nan_bits(const fmt_t *f)
{
    return inf_bits(f, 0) | (1ull << (f->mbits - 1));
}

/* a NaN or an infinity that the specials' lanes count: written, 1 */
static int decode_special(const shp_exact_layout_t *lay, const fmt_t *f,
                          const int64_t *x, uint8_t *o)
{
    if (!lay->specials) {
        return 0;
    }
    const int64_t *sp = x + lay->limbs;
    if (sp[0] > 0 || (sp[1] > 0 && sp[2] > 0)) {
        put(f, o, nan_bits(f));
        return 1;
    }
    if (sp[1] > 0 || sp[2] > 0) {
        put(f, o, inf_bits(f, sp[2] > 0));
        return 1;
    }
    return 0;
}

/* The sum's magnitude as nl limbs in mag (the carries propagated, a
 * negative sum's two's complement taken), its top bit in *top (-1: zero);
 * whether it is negative returned. */
static int decode_magnitude(const shp_exact_layout_t *lay, const int64_t *x,
                            uint32_t *mag, unsigned nl, int64_t *top)
{
    /* carries: the sum as limbs in [0, 2^32) and a signed top */
    __int128 c = 0;
    for (unsigned j = 0; j < lay->limbs; j++) {
        c += x[j];
        mag[j] = (uint32_t)(unsigned __int128)c;
        c >>= 32; /* arithmetic: floor */
    }
    int neg = c < 0;
    mag[nl - 2] = (uint32_t)(unsigned __int128)c;
    mag[nl - 1] = (uint32_t)((unsigned __int128)c >> 32);
    if (neg) { /* two's complement over all nl limbs */
        uint64_t carry = 1;
        for (unsigned j = 0; j < nl; j++) {
            uint64_t t = (uint64_t)(uint32_t)~mag[j] + carry;
            mag[j] = (uint32_t)t;
            carry = t >> 32;
        }
    }
    *top = -1;
    for (unsigned j = nl; j-- > 0;) {
        if (mag[j] != 0) {
            *top = (int64_t)j * 32 + 31 - __builtin_clz(mag[j]);
            break;
        }
    }
    return neg;
}

/* The magnitude rounded to the format's p bits, to nearest even, the ulp
 * at least 2^emin, written with its sign (an infinity past emax). */
static void decode_round(const shp_exact_layout_t *lay, const fmt_t *f,
                         const uint32_t *mag, unsigned nl, int64_t top, int neg,
                         uint8_t *o)
{
    const unsigned p = f->mbits + 1;
    const int emin = fmt_emin(f), emax = fmt_emax(f);
    int64_t T = top + lay->lo;
    int64_t u = T - (int64_t)(p - 1);
    if (u < emin) {
        u = emin;
    }
    int64_t s = u - lay->lo; /* bit of M that is the result's ulp */
    uint64_t q;
    if (s <= 0) {
        q = get_bits(mag, nl, 0, (unsigned)(top + 1)) << -s;
    } else {
        q = get_bits(mag, nl, s, (unsigned)(top - s + 1));
        int half = (int)get_bits(mag, nl, s - 1, 1);
        if (half && (any_below(mag, s - 1) || (q & 1))) {
            q++;
        }
    }
    if (q >> p) { /* rounded up to 2^p */
        q >>= 1;
        u++;
    }
    uint64_t sign = (uint64_t)neg << (f->size * 8 - 1);
    if (u + (int64_t)(63 - __builtin_clzll(q)) > emax) {
        put(f, o, inf_bits(f, neg));
    } else if (q < (1ull << f->mbits)) { /* subnormal (u == emin) */
        put(f, o, sign | q);
    } else {
        uint64_t E = (uint64_t)(u + f->bias + (int64_t)f->mbits);
        put(f, o, sign | (E << f->mbits) | (q & ((1ull << f->mbits) - 1)));
    }
}

/* Each element: a special (decode_special), else its magnitude
 * (decode_magnitude): an exact zero, or rounded (decode_round). */
void shp_exact_decode(const shp_exact_layout_t *lay, const int64_t *lanes,
                      size_t count, void *out)
{
    fmt_t f;
    if (!fmt_of(lay->dtype, &f)) {
        return;
    }
    const unsigned L = lay->lanes, nl = lay->limbs + 2;
    uint32_t mag[SHP_EXACT_LANES_MAX + 2];
    uint8_t *o = out;
    for (size_t i = 0; i < count; i++, lanes += L, o += f.size) {
        const int64_t *x = lanes;
        int64_t top;
        if (decode_special(lay, &f, x, o)) {
            continue;
        }
        int neg = decode_magnitude(lay, x, mag, nl, &top);
        if (top < 0) { /* an exact zero: -0 only if every one was -0 */
            int nz = lay->negzero && x[L - 1] == 0;
            put(&f, o, nz ? (1ull << (f.size * 8 - 1)) : 0);
            continue;
        }
        decode_round(lay, &f, mag, nl, top, neg, o);
    }
}

/* non-zero if v is outside [-2^52, 2^52 - 1]: v + 2^52 (mod 2^64) is
 * below 2^53 exactly for those; adds and shifts only, so that it
 * vectorizes with SSE2 (which has no 64-bit compare) */
static inline uint64_t lane_over(int64_t v)
{
    return ((uint64_t)v + ((uint64_t)SHP_EXACT_LANE_MAX + 1)) >> 53;
}

int shp_exact_lanes_ok(const void *lanes, size_t n)
{
    uint64_t over = 0;
    if (((uintptr_t)lanes & (sizeof(int64_t) - 1)) == 0) {
        const int64_t *p = lanes; /* the usual case: vectorized */
        for (size_t i = 0; i < n; i++) {
            over |= lane_over(p[i]);
        }
    } else {
        const uint8_t *p = lanes;
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + i * sizeof(v), sizeof(v));
            over |= lane_over(v);
        }
    }
    return over == 0;
}
