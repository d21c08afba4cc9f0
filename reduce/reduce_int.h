/* Internal to the reduction engine: kernel tables and inline helpers. */
#ifndef SHP_COMMON_REDUCE_INT_H
#define SHP_COMMON_REDUCE_INT_H

#include "reduce/reduce.h"

#include <math.h>
#include <string.h>

/* d[i] = a[i] op b[i]; d, a and b do not overlap. */
typedef void (*shp_kern3_t)(void *restrict d, const void *restrict a,
                            const void *restrict b, size_t n);
/* d[i] = d[i] op b[i]; d and b do not overlap. */
typedef void (*shp_kern2_t)(void *restrict d, const void *restrict b, size_t n);

/* d[i] = srcs[0][i] op srcs[1][i] op ... op srcs[ns-1][i], left to right,
 * exactly as the pairwise kernels would; ns >= 2; d may be srcs[0], no other
 * overlap. */
typedef void (*shp_kernn_t)(void *d, const void *const *srcs, unsigned ns,
                            size_t n);

/* One table per instruction set; MINLOC/MAXLOC slots are NULL (they are
 * folded by the scalar pair code in reduce.c).  kn: fused multi-source
 * folds where a variant has one (NULL elsewhere: the blocked pairwise fold
 * is used). */
typedef struct shp_reduce_kernels {
    const char *name;
    const char *pairwise_name; /* "<isa> pairwise" */
    shp_kern3_t k3[SHP_DTYPE_LAST][SHP_OP_LAST];
    shp_kern2_t k2[SHP_DTYPE_LAST][SHP_OP_LAST];
    shp_kernn_t kn[SHP_DTYPE_LAST][SHP_OP_LAST];
    const char *kn_name[SHP_DTYPE_LAST][SHP_OP_LAST]; /* "avx512 fused" */
} shp_reduce_kernels_t;

extern const shp_reduce_kernels_t shp_reduce_kernels_generic;
extern const shp_reduce_kernels_t shp_reduce_kernels_avx2;
extern const shp_reduce_kernels_t shp_reduce_kernels_avx512;

static inline uint32_t shp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float shp_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline float shp_bf16_to_f32_inl(uint16_t h)
{
    return shp_bits_f32((uint32_t)h << 16);
}

/* Round to nearest-even; NaNs stay NaN (quiet). */
static inline uint16_t shp_f32_to_bf16_inl(float f)
{
    uint32_t u = shp_f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float shp_f16_to_f32_inl(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in f32 */
        return shp_bits_f32(sign | shp_f32_bits((float)mant * 0x1p-24f));
    }
    if (exp == 31) {
        return shp_bits_f32(sign | 0x7f800000u | (mant << 13));
    }
    return shp_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t shp_f32_to_f16_inl(float f)
{
    uint32_t u = shp_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;

    u &= 0x7fffffffu;
    if (u > 0x7f800000u) { /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    }
    if (u >= 0x477ff000u) { /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (u < 0x38800000u) { /* below 2^-14: subnormal or zero */
        /* scaling by 2^24 is exact; nearbyintf rounds to nearest-even */
        return (uint16_t)(sign |
                          (uint32_t)nearbyintf(shp_bits_f32(u) * 0x1p24f));
    }
    u += 0xc8000fffu + ((u >> 13) & 1u); /* rebias exponent, round */
    return (uint16_t)(sign | (u >> 13));
}

#endif
