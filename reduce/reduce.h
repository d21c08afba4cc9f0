/*
 * The reduction engine: folds children's payloads into one, strictly in child
 * order, so that floating-point results are bitwise repeatable whatever order
 * the payloads arrived in.
 *
 * Datatypes and ops carry the numeric values of the SHARP collective API's
 * `enum sharp_datatype` / `enum sharp_reduce_op`, which are also their wire
 * values.
 *
 * Semantics (see docs/reduction.md):
 * - Integer SUM and PROD wrap around (two's complement), as MPI
 *   implementations do.
 * - Logical ops (LAND, LOR, LXOR) yield 0 or 1; they and the bitwise ops are
 *   defined on integer types only.
 * - Floating MIN/MAX follow IEEE 754-2019 minimum/maximum: a NaN operand wins
 *   (the first one in fold order, bits preserved), -0.0 < +0.0, infinities
 *   order as usual.
 * - f16 and bf16 are computed in f32 and rounded to nearest-even after every
 *   single operation (f32 has >= 2p+2 bits, so this equals exact rounding).
 * - MINLOC/MAXLOC work on packed (value, tag) pairs, no padding, the tag of
 *   type `tag_dtype` (an integer type).  A strictly better value wins; on a
 *   tie the lower tag wins (as MPI says).  A NaN value wins like in MIN/MAX.
 * - Payloads are little-endian, like the hosts this runs on; see
 *   shp_wire_payload_swap() for big-endian hosts.
 */
#ifndef SHP_COMMON_REDUCE_H
#define SHP_COMMON_REDUCE_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum shp_dtype {
    SHP_DTYPE_U32 = 0,
    SHP_DTYPE_I32 = 1,
    SHP_DTYPE_U64 = 2,
    SHP_DTYPE_I64 = 3,
    SHP_DTYPE_F32 = 4,
    SHP_DTYPE_F64 = 5,
    SHP_DTYPE_U16 = 6,
    SHP_DTYPE_I16 = 7,
    SHP_DTYPE_F16 = 8,
    SHP_DTYPE_BF16 = 9,
    SHP_DTYPE_U8 = 10,
    SHP_DTYPE_I8 = 11,
    SHP_DTYPE_NULL = 12,
    SHP_DTYPE_LAST = 12 /* number of real datatypes */
} shp_dtype_t;

typedef enum shp_op {
    SHP_OP_MAX = 0,
    SHP_OP_MIN = 1,
    SHP_OP_SUM = 2,
    SHP_OP_PROD = 3,
    SHP_OP_LAND = 4,
    SHP_OP_BAND = 5,
    SHP_OP_LOR = 6,
    SHP_OP_BOR = 7,
    SHP_OP_LXOR = 8,
    SHP_OP_BXOR = 9,
    SHP_OP_MAXLOC = 10,
    SHP_OP_MINLOC = 11,
    SHP_OP_NULL = 12,
    SHP_OP_LAST = 12 /* number of real ops */
} shp_op_t;

/* What to reduce: datatype, op, and the tag type of MINLOC/MAXLOC pairs
 * (SHP_DTYPE_NULL for every other op). */
typedef struct shp_reduce_desc {
    shp_dtype_t dtype;
    shp_op_t op;
    shp_dtype_t tag_dtype;
} shp_reduce_desc_t;

size_t shp_dtype_size(shp_dtype_t dtype); /* 0 for NULL / unknown */
int shp_dtype_is_float(shp_dtype_t dtype);
int shp_dtype_is_signed(shp_dtype_t dtype);
const char *shp_dtype_name(shp_dtype_t dtype); /* "f32", "bf16", ... */
const char *shp_op_name(shp_op_t op);          /* "sum", "minloc", ... */
int shp_op_is_loc(shp_op_t op);

/* Does this combination make sense?  SHP_ERR_UNSUPPORTED with a reason
 * (written to *why if not NULL) for: unknown dtype/op, bitwise or logical op
 * on a floating type, MINLOC/MAXLOC without an integer tag type, a tag type
 * on any other op. */
SHP_WUR shp_status_t shp_reduce_desc_check(const shp_reduce_desc_t *desc,
                                           const char **why);

/* Bytes per element: value size, plus the tag size for MINLOC/MAXLOC.
 * 0 if the descriptor is invalid. */
size_t shp_reduce_elem_size(const shp_reduce_desc_t *desc);

/*
 * dst = srcs[0] op srcs[1] op ... op srcs[nsrcs-1], element-wise, evaluated
 * left to right.  `dst` may be srcs[0] itself (accumulate in place) but must
 * not otherwise overlap a source.  Buffers need no alignment.  nsrcs >= 1.
 */
SHP_WUR shp_status_t shp_reduce_fold(const shp_reduce_desc_t *desc, void *dst,
                                     const void *const *srcs, unsigned nsrcs,
                                     size_t count);

/*
 * Streaming fold: children's payloads are added as they arrive, in any order;
 * child i is folded as soon as children 0..i are all present, so the result
 * is the same as shp_reduce_fold() over children 0..n-1.
 *
 * A payload that arrives early is kept by pointer (the caller keeps it alive)
 * until it can be folded; `release` is then called for it, and for every
 * payload folded on arrival, so the caller can recycle the buffer.
 */
typedef void (*shp_fold_release_t)(void *arg, unsigned child,
                                   const void *payload);

typedef struct shp_fold {
    shp_reduce_desc_t desc;
    size_t count;
    void *acc;
    unsigned nchildren;
    unsigned next; /* children 0..next-1 are folded into acc */
    unsigned npending;
    const void **pending; /* [nchildren]: arrived, not yet folded */
    int own_pending;
    shp_fold_release_t release;
    void *release_arg;
} shp_fold_t;

/* `pending_storage` holds nchildren pointers, or NULL to allocate. */
SHP_WUR shp_status_t shp_fold_init(shp_fold_t *fold,
                                   const shp_reduce_desc_t *desc, size_t count,
                                   void *acc, unsigned nchildren,
                                   const void **pending_storage,
                                   shp_fold_release_t release, void *arg);

/* SHP_OK: the payload was folded (and released); SHP_INPROGRESS: kept until
 * the children before it arrive; SHP_ERR_INVALID_PARAM: child out of range;
 * SHP_ERR_EXISTS: this child was already added (nothing changes). */
SHP_WUR shp_status_t shp_fold_add(shp_fold_t *fold, unsigned child,
                                  const void *payload);

static inline int shp_fold_done(const shp_fold_t *fold)
{
    return fold->next == fold->nchildren;
}

/* Releases payloads still pending and frees what init allocated. */
void shp_fold_cleanup(shp_fold_t *fold);

/* Instruction-set variants of the kernels, picked at run time. */
typedef enum shp_reduce_isa {
    SHP_REDUCE_ISA_GENERIC = 0,
    SHP_REDUCE_ISA_AVX2 = 1,
    SHP_REDUCE_ISA_AVX512 = 2,
    SHP_REDUCE_ISA_LAST
} shp_reduce_isa_t;

/* Best variant this CPU runs, unless SHP_REDUCE_ISA=generic|avx2|avx512
 * asks for another (one the CPU cannot run is refused with a warning). */
shp_reduce_isa_t shp_reduce_get_isa(void);
/* SHP_ERR_UNSUPPORTED if this CPU (or build) cannot run it. */
SHP_WUR shp_status_t shp_reduce_set_isa(shp_reduce_isa_t isa);
int shp_reduce_isa_supported(shp_reduce_isa_t isa);
const char *shp_reduce_isa_name(shp_reduce_isa_t isa);
/* Which kernel shp_reduce_fold() runs for `desc` with two or more sources
 * on the current variant: "avx512 fused" (all children per block, the
 * accumulator kept in registers), "avx2 blocked" (f16 on AVX2: one child at
 * a time over L1 blocks, F16C), "avx2 pairwise" (the element-wise loops,
 * one child at a time over 8 KiB blocks), "scalar pairs" (MINLOC/MAXLOC),
 * "invalid". */
const char *shp_reduce_kernel_name(const shp_reduce_desc_t *desc);

/* Scalar half-precision conversions, round to nearest-even, used by the
 * kernels and exported for tests and the client library. */
float shp_f16_to_f32(uint16_t h);
uint16_t shp_f32_to_f16(float f);
float shp_bf16_to_f32(uint16_t h);
uint16_t shp_f32_to_bf16(float f);

#endif
