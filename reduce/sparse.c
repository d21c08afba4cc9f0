/* Block-sparse payloads: scan, pack, expand, check, fold (see sparse.h). */
#include "reduce/sparse.h"

#include <string.h>

/* what a block left out is: zeros, read only */
static uint8_t sparse_zeros[SHP_SPARSE_BLOCK_MAX];

int shp_sparse_ok(const shp_reduce_desc_t *desc)
{
    if (shp_reduce_desc_check(desc, NULL) != SHP_OK) {
        return 0;
    }
    switch (desc->op) {
    case SHP_OP_SUM: return 1;
    case SHP_OP_BOR:
    case SHP_OP_BXOR:
    case SHP_OP_LOR: return !shp_dtype_is_float(desc->dtype);
    default: return 0;
    }
}

shp_status_t shp_sparse_layout_check(const shp_reduce_desc_t *desc, size_t len,
                                     size_t block)
{
    size_t elem = shp_reduce_elem_size(desc);

    if (!shp_sparse_ok(desc) || elem == 0 || block < SHP_SPARSE_BLOCK_MIN ||
        block > SHP_SPARSE_BLOCK_MAX || block % elem || len % elem) {
        return SHP_ERR_INVALID_PARAM;
    }
    return SHP_OK;
}

static size_t block_bytes(size_t len, size_t block, size_t b)
{
    size_t off = b * block;
    return len - off < block ? len - off : block;
}

/* 64 bytes at a time, left at the first chunk with a non-zero byte: the
 * compiler makes each chunk a few vector loads and ORs (a scan of zeros
 * runs near memory speed, about 30 GB/s here against 6 word by word) and
 * a dense block costs one chunk */
static int block_zero(const uint8_t *p, size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;

    for (; i + 64 <= n; i += 64) {
        uint64_t w[8];
        memcpy(w, p + i, sizeof(w));
        if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) {
            return 0;
        }
    }
    for (; i < n; i++) {
        acc |= p[i];
    }
    return acc == 0;
}

size_t shp_sparse_scan(const void *src, size_t len, size_t block,
                       uint8_t *bitmap, size_t max)
{
    size_t nb = shp_sparse_nblocks(len, block), b, n = 0;

    memset(bitmap, 0, (nb + 7) / 8);
    for (b = 0; b < nb; b++) {
        if (!block_zero((const uint8_t *)src + b * block,
                        block_bytes(len, block, b))) {
            bitmap[b / 8] |= (uint8_t)(1u << (b % 8));
            if (++n > max) {
                return n;
            }
        }
    }
    return n;
}

size_t shp_sparse_packed_len(size_t len, size_t block, const uint8_t *bitmap)
{
    size_t nb = shp_sparse_nblocks(len, block), b, n = 0;

    for (b = 0; b < nb; b++) {
        if (shp_sparse_has(bitmap, b)) {
            n += block_bytes(len, block, b);
        }
    }
    return n;
}

size_t shp_sparse_pack(const void *src, size_t len, size_t block,
                       const uint8_t *bitmap, void *packed)
{
    size_t nb = shp_sparse_nblocks(len, block), b, n = 0;

    for (b = 0; b < nb; b++) {
        if (shp_sparse_has(bitmap, b)) {
            size_t k = block_bytes(len, block, b);
            memcpy((uint8_t *)packed + n, (const uint8_t *)src + b * block, k);
            n += k;
        }
    }
    return n;
}

void shp_sparse_expand(void *dst, size_t len, size_t block,
                       const uint8_t *bitmap, const void *packed)
{
    shp_sparse_expand_range(dst, 0, len, len, block, bitmap, packed);
}

void shp_sparse_expand_range(void *dst, size_t lo, size_t hi, size_t len,
                             size_t block, const uint8_t *bitmap,
                             const void *packed)
{
    size_t b = lo / block, n = 0;

    for (size_t i = 0; i < b; i++) /* the packed bytes before block b */
        n += shp_sparse_has(bitmap, i) ? block : 0;
    for (; b * block < hi; b++) {
        size_t k = block_bytes(len, block, b), off = b * block;
        size_t from = off > lo ? off : lo, to = off + k < hi ? off + k : hi;
        uint8_t *d = (uint8_t *)dst + (from - lo);
        if (shp_sparse_has(bitmap, b)) {
            memcpy(d, (const uint8_t *)packed + n + (from - off), to - from);
            n += k;
        } else {
            memset(d, 0, to - from);
        }
    }
}

shp_status_t shp_sparse_check(size_t len, size_t block, const uint8_t *bitmap,
                              size_t packed_len, const char **why)
{
    size_t nb = shp_sparse_nblocks(len, block);
    size_t bytes = (nb + 7) / 8;

    if (nb % 8 && (bitmap[bytes - 1] >> (nb % 8)) != 0) {
        *why = "a sparse payload's bitmap has a block past its end";
        return SHP_ERR_PROTO;
    }
    if (shp_sparse_packed_len(len, block, bitmap) != packed_len) {
        *why = "a sparse payload's blocks do not match its bitmap";
        return SHP_ERR_PROTO;
    }
    return SHP_OK;
}

void shp_sparse_fold_init(shp_sparse_fold_t *f, const shp_reduce_desc_t *desc,
                          size_t len, size_t block, unsigned nchildren,
                          void *acc, uint32_t *seen)
{
    f->desc = *desc;
    f->len = len;
    f->block = block;
    f->nblocks = shp_sparse_nblocks(len, block);
    f->elem = shp_reduce_elem_size(desc);
    f->nchildren = nchildren;
    f->folded = 0;
    f->acc = acc;
    f->seen = seen;
    memset(seen, 0, f->nblocks * sizeof(*seen));
}

/* the bytes of blocks [b, e) (the last one may be short) */
static size_t run_bytes(const shp_sparse_fold_t *f, size_t b, size_t e)
{
    return (e - 1) * f->block + block_bytes(f->len, f->block, e - 1) -
           b * f->block;
}

/* blocks [b, e) of the child, their bytes at packed: copied where they are
 * the first, folded where some child had them before (one call a run) */
static shp_status_t sparse_run(shp_sparse_fold_t *f, size_t b, size_t e,
                               const uint8_t *packed)
{
    size_t bytes = run_bytes(f, b, e);
    uint8_t *acc = f->acc + b * f->block;

    if (f->seen[b] == 0) {
        memcpy(acc, packed, bytes);
        return SHP_OK;
    }
    const void *srcs[2] = {acc, packed};
    return shp_reduce_fold(&f->desc, acc, srcs, 2, bytes / f->elem);
}

shp_status_t shp_sparse_fold_add(shp_sparse_fold_t *f, const uint8_t *bitmap,
                                 const void *packed)
{
    const uint8_t *p = packed;
    size_t b = 0, e;

    if (f->folded >= f->nchildren) {
        return SHP_ERR_INVALID_PARAM;
    }
    while (b < f->nblocks) {
        if (!shp_sparse_has(bitmap, b)) {
            b++;
            continue;
        }
        /* a run: present, and all first or all folded into */
        for (e = b + 1; e < f->nblocks && shp_sparse_has(bitmap, e) &&
                        (f->seen[e] == 0) == (f->seen[b] == 0);
             e++) {
        }
        shp_status_t st = sparse_run(f, b, e, p);
        if (st != SHP_OK) {
            return st;
        }
        p += run_bytes(f, b, e);
        for (; b < e; b++) {
            f->seen[b]++;
        }
    }
    f->folded++;
    return SHP_OK;
}

shp_status_t shp_sparse_fold_finish(shp_sparse_fold_t *f, uint8_t *bitmap,
                                    size_t *present)
{
    size_t b, n = 0;

    memset(bitmap, 0, (f->nblocks + 7) / 8);
    for (b = 0; b < f->nblocks; b++) {
        size_t k = block_bytes(f->len, f->block, b);
        uint8_t *acc = f->acc + b * f->block;
        if (f->seen[b] == 0) {
            continue; /* zero: written by shp_sparse_fold_dense if need be */
        }
        if (f->seen[b] < f->nchildren) {
            const void *srcs[2] = {acc, sparse_zeros};
            shp_status_t st =
                shp_reduce_fold(&f->desc, acc, srcs, 2, k / f->elem);
            if (st != SHP_OK) {
                return st;
            }
        }
        if (!block_zero(acc, k)) {
            bitmap[b / 8] |= (uint8_t)(1u << (b % 8));
            n++;
        }
    }
    *present = n;
    return SHP_OK;
}

void shp_sparse_fold_dense(shp_sparse_fold_t *f)
{
    size_t b = 0, e;

    while (b < f->nblocks) {
        if (f->seen[b] != 0) {
            b++;
            continue;
        }
        for (e = b + 1; e < f->nblocks && f->seen[e] == 0; e++) {
        }
        memset(f->acc + b * f->block, 0, run_bytes(f, b, e));
        b = e;
    }
}
