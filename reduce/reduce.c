/*
 * The reduction engine: validation, dispatch to the kernels of the best
 * instruction set, the blocked multi-source fold, MINLOC/MAXLOC pairs, and
 * the streaming fold.
 */
#include "reduce/reduce_int.h"

#include "core/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const struct {
    const char *name;
    size_t size;
    int is_float;
    int is_signed;
} shp_dtype_info[SHP_DTYPE_LAST] = {
    [SHP_DTYPE_U32] = {"u32", 4, 0, 0}, [SHP_DTYPE_I32] = {"i32", 4, 0, 1},
    [SHP_DTYPE_U64] = {"u64", 8, 0, 0}, [SHP_DTYPE_I64] = {"i64", 8, 0, 1},
    [SHP_DTYPE_F32] = {"f32", 4, 1, 1}, [SHP_DTYPE_F64] = {"f64", 8, 1, 1},
    [SHP_DTYPE_U16] = {"u16", 2, 0, 0}, [SHP_DTYPE_I16] = {"i16", 2, 0, 1},
    [SHP_DTYPE_F16] = {"f16", 2, 1, 1}, [SHP_DTYPE_BF16] = {"bf16", 2, 1, 1},
    [SHP_DTYPE_U8] = {"u8", 1, 0, 0},   [SHP_DTYPE_I8] = {"i8", 1, 0, 1},
};

static const char *const shp_op_names[SHP_OP_LAST] = {
    "max", "min", "sum",  "prod", "land",   "band",
    "lor", "bor", "lxor", "bxor", "maxloc", "minloc",
};

static int shp_dtype_valid(shp_dtype_t dtype)
{
    return (unsigned)dtype < SHP_DTYPE_LAST;
}

size_t shp_dtype_size(shp_dtype_t dtype)
{
    return shp_dtype_valid(dtype) ? shp_dtype_info[dtype].size : 0;
}

int shp_dtype_is_float(shp_dtype_t dtype)
{
    return shp_dtype_valid(dtype) && shp_dtype_info[dtype].is_float;
}

int shp_dtype_is_signed(shp_dtype_t dtype)
{
    return shp_dtype_valid(dtype) && shp_dtype_info[dtype].is_signed;
}

const char *shp_dtype_name(shp_dtype_t dtype)
{
    if (dtype == SHP_DTYPE_NULL) {
        return "null";
    }
    return shp_dtype_valid(dtype) ? shp_dtype_info[dtype].name : "invalid";
}

const char *shp_op_name(shp_op_t op)
{
    if (op == SHP_OP_NULL) {
        return "null";
    }
    return (unsigned)op < SHP_OP_LAST ? shp_op_names[op] : "invalid";
}

int shp_op_is_loc(shp_op_t op)
{
    return op == SHP_OP_MAXLOC || op == SHP_OP_MINLOC;
}

shp_status_t shp_reduce_desc_check(const shp_reduce_desc_t *desc,
                                   const char **why)
{
    const char *reason = NULL;

    if (!shp_dtype_valid(desc->dtype)) {
        reason = "unknown datatype";
    } else if ((unsigned)desc->op >= SHP_OP_LAST) {
        reason = "unknown reduction op";
    } else if (shp_op_is_loc(desc->op)) {
        if (!shp_dtype_valid(desc->tag_dtype)) {
            reason = "minloc/maxloc need a tag datatype";
        } else if (shp_dtype_is_float(desc->tag_dtype)) {
            reason = "minloc/maxloc tag datatype must be an integer type";
        }
    } else if (desc->tag_dtype != SHP_DTYPE_NULL) {
        reason = "a tag datatype is only valid with minloc/maxloc";
    } else if (shp_dtype_is_float(desc->dtype) && desc->op >= SHP_OP_LAND) {
        reason = "logical and bitwise ops need an integer datatype";
    }
    if (reason != NULL) {
        if (why != NULL) {
            *why = reason;
        }
        return SHP_ERR_UNSUPPORTED;
    }
    return SHP_OK;
}

size_t shp_reduce_elem_size(const shp_reduce_desc_t *desc)
{
    if (shp_reduce_desc_check(desc, NULL) != SHP_OK) {
        return 0;
    }
    return shp_dtype_size(desc->dtype) +
           (shp_op_is_loc(desc->op) ? shp_dtype_size(desc->tag_dtype) : 0);
}

/* Instruction-set dispatch --------------------------------------------- */

static const shp_reduce_kernels_t
    *const shp_reduce_tables[SHP_REDUCE_ISA_LAST] = {
        [SHP_REDUCE_ISA_GENERIC] = &shp_reduce_kernels_generic,
        [SHP_REDUCE_ISA_AVX2] = &shp_reduce_kernels_avx2,
        [SHP_REDUCE_ISA_AVX512] = &shp_reduce_kernels_avx512,
};

static const shp_reduce_kernels_t *shp_reduce_kern;
static shp_reduce_isa_t shp_reduce_isa = SHP_REDUCE_ISA_GENERIC;
static pthread_once_t shp_reduce_once = PTHREAD_ONCE_INIT;

const char *shp_reduce_isa_name(shp_reduce_isa_t isa)
{
    return (unsigned)isa < SHP_REDUCE_ISA_LAST ? shp_reduce_tables[isa]->name
                                               : "invalid";
}

#if defined(__x86_64__)
/* F16C from CPUID leaf 1 (clang before 16 does not know "f16c" for
 * __builtin_cpu_supports) */
static int shp_cpu_has_f16c(void)
{
    unsigned a, b, c, d;

    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

int shp_reduce_isa_supported(shp_reduce_isa_t isa)
{
    switch (isa) {
    case SHP_REDUCE_ISA_GENERIC: return 1;
#if defined(__x86_64__)
    case SHP_REDUCE_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && shp_cpu_has_f16c();
    case SHP_REDUCE_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && shp_cpu_has_f16c();
#endif
    default: return 0;
    }
}

static void shp_reduce_pick_isa(void)
{
    const char *env = getenv("SHP_REDUCE_ISA");
    int isa;

    for (isa = SHP_REDUCE_ISA_LAST - 1; isa > 0; isa--) {
        if (shp_reduce_isa_supported(isa)) {
            break;
        }
    }
    if (env != NULL && *env != '\0') {
        int want;
        for (want = 0; want < SHP_REDUCE_ISA_LAST; want++) {
            if (!strcasecmp(env, shp_reduce_isa_name(want))) {
                break;
            }
        }
        if (want == SHP_REDUCE_ISA_LAST || !shp_reduce_isa_supported(want)) {
            shp_warn("SHP_REDUCE_ISA=%s is not available here, using %s", env,
                     shp_reduce_isa_name(isa));
        } else {
            isa = want;
        }
    }
    shp_reduce_isa = isa;
    __atomic_store_n(&shp_reduce_kern, shp_reduce_tables[isa],
                     __ATOMIC_RELEASE);
}

static inline const shp_reduce_kernels_t *shp_reduce_kernels(void)
{
    const shp_reduce_kernels_t *k =
        __atomic_load_n(&shp_reduce_kern, __ATOMIC_ACQUIRE);

    if (__builtin_expect(k == NULL, 0)) {
        pthread_once(&shp_reduce_once, shp_reduce_pick_isa);
        k = __atomic_load_n(&shp_reduce_kern, __ATOMIC_ACQUIRE);
    }
    return k;
}

shp_reduce_isa_t shp_reduce_get_isa(void)
{
    shp_reduce_kernels();
    return shp_reduce_isa;
}

shp_status_t shp_reduce_set_isa(shp_reduce_isa_t isa)
{
    if ((unsigned)isa >= SHP_REDUCE_ISA_LAST ||
        !shp_reduce_isa_supported(isa)) {
        return SHP_ERR_UNSUPPORTED;
    }
    shp_reduce_kernels(); /* run the one-time pick first */
    shp_reduce_isa = isa;
    __atomic_store_n(&shp_reduce_kern, shp_reduce_tables[isa],
                     __ATOMIC_RELEASE);
    return SHP_OK;
}

const char *shp_reduce_kernel_name(const shp_reduce_desc_t *desc)
{
    const shp_reduce_kernels_t *k = shp_reduce_kernels();

    if (shp_reduce_desc_check(desc, NULL) != SHP_OK) {
        return "invalid";
    }
    if (shp_op_is_loc(desc->op)) {
        return "scalar pairs";
    }
    return k->kn[desc->dtype][desc->op] != NULL
               ? k->kn_name[desc->dtype][desc->op]
               : k->pairwise_name;
}

/* MINLOC / MAXLOC on packed pairs --------------------------------------- */

typedef struct {
    int is_nan;
    int kind; /* 0 signed, 1 unsigned, 2 float */
    int64_t i;
    uint64_t u;
    double f;
} shp_loc_val_t;

static void shp_loc_load(shp_dtype_t dt, const uint8_t *p, shp_loc_val_t *v)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;

    v->is_nan = 0;
    v->kind = shp_dtype_is_float(dt) ? 2 : (shp_dtype_is_signed(dt) ? 0 : 1);
    switch (shp_dtype_size(dt)) {
    case 1:
        memcpy(&u8, p, 1);
        v->u = u8;
        v->i = (int8_t)u8;
        break;
    case 2:
        memcpy(&u16, p, 2);
        v->u = u16;
        v->i = (int16_t)u16;
        if (dt == SHP_DTYPE_F16) {
            v->f = shp_f16_to_f32_inl(u16);
        } else if (dt == SHP_DTYPE_BF16) {
            v->f = shp_bf16_to_f32_inl(u16);
        }
        break;
    case 4:
        memcpy(&u32, p, 4);
        v->u = u32;
        v->i = (int32_t)u32;
        if (dt == SHP_DTYPE_F32) {
            v->f = shp_bits_f32(u32);
        }
        break;
    default:
        memcpy(&u64, p, 8);
        v->u = u64;
        v->i = (int64_t)u64;
        if (dt == SHP_DTYPE_F64) {
            memcpy(&v->f, &u64, 8);
        }
        break;
    }
    if (v->kind == 2) {
        v->is_nan = v->f != v->f;
    }
}

/* <0 if a < b, 0 if equal, >0 if a > b (neither NaN). */
static int shp_loc_cmp(const shp_loc_val_t *a, const shp_loc_val_t *b)
{
    switch (a->kind) {
    case 0: return (a->i > b->i) - (a->i < b->i);
    case 1: return (a->u > b->u) - (a->u < b->u);
    default: return (a->f > b->f) - (a->f < b->f);
    }
}

/* d = a loc-op b for `n` pairs; d may be a. */
static void shp_loc_fold2(const shp_reduce_desc_t *desc, uint8_t *d,
                          const uint8_t *a, const uint8_t *b, size_t n)
{
    size_t vs = shp_dtype_size(desc->dtype);
    size_t es = vs + shp_dtype_size(desc->tag_dtype);
    int want = desc->op == SHP_OP_MAXLOC ? 1 : -1;
    shp_loc_val_t va, vb, ta, tb;
    const uint8_t *win;
    size_t i;
    int c;

    for (i = 0; i < n; i++, a += es, b += es, d += es) {
        shp_loc_load(desc->dtype, a, &va);
        shp_loc_load(desc->dtype, b, &vb);
        if (va.is_nan) {
            win = a;
        } else if (vb.is_nan) {
            win = b;
        } else {
            c = shp_loc_cmp(&va, &vb) * want;
            if (c > 0) {
                win = a;
            } else if (c < 0) {
                win = b;
            } else {
                shp_loc_load(desc->tag_dtype, a + vs, &ta);
                shp_loc_load(desc->tag_dtype, b + vs, &tb);
                win = shp_loc_cmp(&tb, &ta) < 0 ? b : a;
            }
        }
        if (win != d) {
            memcpy(d, win, es);
        }
    }
}

/* The blocked fold ------------------------------------------------------- */

/* Bytes of destination processed per block: the block of dst stays in L1
 * while every source streams through it once. */
#define SHP_REDUCE_BLOCK 8192

shp_status_t shp_reduce_fold(const shp_reduce_desc_t *desc, void *dst,
                             const void *const *srcs, unsigned nsrcs,
                             size_t count)
{
    const shp_reduce_kernels_t *kern;
    size_t esize = shp_reduce_elem_size(desc);
    size_t blk, off, len;
    uint8_t *d = dst;
    unsigned k;

    if (esize == 0 || nsrcs == 0 || dst == NULL || srcs == NULL) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (count == 0) {
        return SHP_OK;
    }
    if (nsrcs == 1) {
        if (dst != srcs[0]) {
            memcpy(dst, srcs[0], count * esize);
        }
        return SHP_OK;
    }

    if (shp_op_is_loc(desc->op)) {
        shp_loc_fold2(desc, d, srcs[0], srcs[1], count);
        for (k = 2; k < nsrcs; k++) {
            shp_loc_fold2(desc, d, d, srcs[k], count);
        }
        return SHP_OK;
    }

    kern = shp_reduce_kernels();
    if (kern->kn[desc->dtype][desc->op] != NULL) {
        kern->kn[desc->dtype][desc->op](dst, srcs, nsrcs, count);
        return SHP_OK;
    }
    blk = SHP_REDUCE_BLOCK / esize;
    for (off = 0; off < count; off += blk) {
        len = count - off < blk ? count - off : blk;
        if (dst == srcs[0]) {
            kern->k2[desc->dtype][desc->op](
                d + off * esize, (const uint8_t *)srcs[1] + off * esize, len);
        } else {
            kern->k3[desc->dtype][desc->op](
                d + off * esize, (const uint8_t *)srcs[0] + off * esize,
                (const uint8_t *)srcs[1] + off * esize, len);
        }
        for (k = 2; k < nsrcs; k++) {
            kern->k2[desc->dtype][desc->op](
                d + off * esize, (const uint8_t *)srcs[k] + off * esize, len);
        }
    }
    return SHP_OK;
}

/* The streaming fold ------------------------------------------------------ */

shp_status_t shp_fold_init(shp_fold_t *fold, const shp_reduce_desc_t *desc,
                           size_t count, void *acc, unsigned nchildren,
                           const void **pending_storage,
                           shp_fold_release_t release, void *arg)
{
    if (shp_reduce_elem_size(desc) == 0 || nchildren == 0 ||
        (acc == NULL && count > 0)) {
        return SHP_ERR_INVALID_PARAM;
    }
    memset(fold, 0, sizeof(*fold));
    if (pending_storage == NULL) {
        pending_storage = calloc(nchildren, sizeof(*pending_storage));
        if (pending_storage == NULL) {
            return SHP_ERR_NO_MEMORY;
        }
        fold->own_pending = 1;
    } else {
        memset(pending_storage, 0, nchildren * sizeof(*pending_storage));
    }
    fold->desc = *desc;
    fold->count = count;
    fold->acc = acc;
    fold->nchildren = nchildren;
    fold->pending = pending_storage;
    fold->release = release;
    fold->release_arg = arg;
    return SHP_OK;
}

static void shp_fold_release(shp_fold_t *fold, unsigned child,
                             const void *payload)
{
    if (fold->release != NULL) {
        fold->release(fold->release_arg, child, payload);
    }
}

/* Folds children next..end-1, whose payloads are all in fold->pending. */
static void shp_fold_run(shp_fold_t *fold, unsigned end)
{
    const void *srcs[64];
    unsigned first = fold->next, n, i;
    shp_status_t status;

    while (fold->next < end) {
        /* acc first (unless this is child 0), then up to 63 payloads */
        n = 0;
        if (fold->next > 0) {
            srcs[n++] = fold->acc;
        }
        first = fold->next;
        while (fold->next < end && n < 64) {
            srcs[n++] = fold->pending[fold->next++];
        }
        status = shp_reduce_fold(&fold->desc, fold->acc, srcs, n, fold->count);
        (void)status; /* the descriptor was checked by shp_fold_init() */
        for (i = first; i < fold->next; i++) {
            const void *p = fold->pending[i];
            fold->pending[i] = NULL;
            fold->npending--;
            shp_fold_release(fold, i, p);
        }
    }
}

shp_status_t shp_fold_add(shp_fold_t *fold, unsigned child, const void *payload)
{
    unsigned end;

    if (child >= fold->nchildren || (payload == NULL && fold->count > 0)) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (child < fold->next || fold->pending[child] != NULL) {
        return SHP_ERR_EXISTS;
    }
    /* zero-length payloads may be NULL: keep a non-NULL marker */
    fold->pending[child] = payload != NULL ? payload : (const void *)fold;
    fold->npending++;
    if (child != fold->next) {
        return SHP_INPROGRESS;
    }
    for (end = child + 1; end < fold->nchildren && fold->pending[end] != NULL;
         end++) {
    }
    shp_fold_run(fold, end);
    return SHP_OK;
}

void shp_fold_cleanup(shp_fold_t *fold)
{
    unsigned i;

    if (fold->pending != NULL) {
        for (i = fold->next; i < fold->nchildren && fold->npending > 0; i++) {
            if (fold->pending[i] != NULL) {
                const void *p = fold->pending[i];
                fold->pending[i] = NULL;
                fold->npending--;
                shp_fold_release(fold, i, p);
            }
        }
        if (fold->own_pending) {
            free(fold->pending);
        }
    }
    fold->pending = NULL;
}

/* Exported scalar conversions ----------------------------------------------- */

float shp_f16_to_f32(uint16_t h)
{
    return shp_f16_to_f32_inl(h);
}

uint16_t shp_f32_to_f16(float f)
{
    return shp_f32_to_f16_inl(f);
}

float shp_bf16_to_f32(uint16_t h)
{
    return shp_bf16_to_f32_inl(h);
}

uint16_t shp_f32_to_bf16(float f)
{
    return shp_f32_to_bf16_inl(f);
}
