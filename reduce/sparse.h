/*
 * Block-sparse payloads (docs/reduction.md, "Sparse payloads"; issue 61).
 *
 * A payload of `len` bytes is cut into blocks of `block` bytes (the last
 * one may be shorter) and sent as a bitmap of the blocks that hold a
 * non-zero byte, then those blocks only, packed in block order.  A block
 * left out stands for all-zero bits: +0 in every type sharp carries, and
 * the identity of SUM (integer and floating, exact mode's int64 lanes
 * included), BOR, BXOR and LOR (shp_sparse_ok).
 *
 * Folding sparse children gives bit for bit what the dense fold gives
 * (shp_reduce_fold over every child in child order, a block left out
 * being zeros): the blocks present are folded in child order, and a block
 * that some child left out is then folded once with zeros.  x op 0 is x
 * but for -0 + 0 = +0, a signalling NaN made quiet and LOR's 0 or 1; that
 * one step is what the dense fold's steps with zeros come to, wherever
 * they fall among the others (they commute with them and twice is once).
 * A block that no child had stays out; so does one that folds to zeros.
 * tests/reduce/test_sparse.c checks it against the dense fold for every
 * type and operation, random densities, signed zeros, NaNs, infinities and
 * denormals, on every instruction set.
 */
#ifndef SHP_REDUCE_SPARSE_H
#define SHP_REDUCE_SPARSE_H

#include "reduce/reduce.h"

#include <stddef.h>
#include <stdint.h>

/* a block's size: a multiple of the element's, within these bounds */
#define SHP_SPARSE_BLOCK_MIN 8
#define SHP_SPARSE_BLOCK_MAX 65536

/* 1 if a block of zeros is the identity of desc's operation (above). */
int shp_sparse_ok(const shp_reduce_desc_t *desc);

static inline size_t shp_sparse_nblocks(size_t len, size_t block)
{
    return (len + block - 1) / block;
}

static inline size_t shp_sparse_bitmap_bytes(size_t len, size_t block)
{
    return (shp_sparse_nblocks(len, block) + 7) / 8;
}

static inline int shp_sparse_has(const uint8_t *bitmap, size_t b)
{
    return (bitmap[b / 8] >> (b % 8)) & 1;
}

/* SHP_OK if `block` suits desc's elements and a payload of len bytes
 * (a whole number of elements). */
SHP_WUR shp_status_t shp_sparse_layout_check(const shp_reduce_desc_t *desc,
                                             size_t len, size_t block);

/* The blocks of src (len bytes) that hold a non-zero byte: their bitmap
 * (shp_sparse_bitmap_bytes, bits past the last block zero) and their count.
 * Stops counting (and returns max + 1, the bitmap then incomplete) once
 * more than max blocks are found: a payload that dense suits better is
 * left as soon as that is known. */
size_t shp_sparse_scan(const void *src, size_t len, size_t block,
                       uint8_t *bitmap, size_t max);

/* Bytes of the blocks the bitmap has. */
size_t shp_sparse_packed_len(size_t len, size_t block, const uint8_t *bitmap);

/* The blocks the bitmap has, from src, one after another into packed;
 * returns the bytes written (shp_sparse_packed_len). */
size_t shp_sparse_pack(const void *src, size_t len, size_t block,
                       const uint8_t *bitmap, void *packed);

/* dst (len bytes) = the payload: the bitmap's blocks from packed, zeros
 * elsewhere. */
void shp_sparse_expand(void *dst, size_t len, size_t block,
                       const uint8_t *bitmap, const void *packed);

/* dst (hi - lo bytes) = bytes [lo, hi) of the payload (hi <= len). */
void shp_sparse_expand_range(void *dst, size_t lo, size_t hi, size_t len,
                             size_t block, const uint8_t *bitmap,
                             const void *packed);

/* What a peer sent, checked before it is used: no bit past the last
 * block, and packed_len the bytes of the blocks the bitmap has.
 * SHP_ERR_PROTO with *why otherwise. */
SHP_WUR shp_status_t shp_sparse_check(size_t len, size_t block,
                                      const uint8_t *bitmap, size_t packed_len,
                                      const char **why);

/* A fold of sparse (or dense: every bit set) children, in child order,
 * into a dense accumulator. */
typedef struct shp_sparse_fold {
    shp_reduce_desc_t desc;
    size_t len, block, nblocks, elem;
    unsigned nchildren, folded; /* children 0..folded-1 are in acc */
    uint8_t *acc;               /* len bytes */
    uint32_t *seen;             /* per block: how many children had it */
} shp_sparse_fold_t;

/* acc: len bytes; seen: nblocks counts (the caller's storage, zeroed
 * here).  desc must be shp_sparse_ok and the layout checked. */
void shp_sparse_fold_init(shp_sparse_fold_t *f, const shp_reduce_desc_t *desc,
                          size_t len, size_t block, unsigned nchildren,
                          void *acc, uint32_t *seen);

/* The next child (child `f->folded`): its bitmap and packed blocks,
 * already checked (shp_sparse_check). */
SHP_WUR shp_status_t shp_sparse_fold_add(shp_sparse_fold_t *f,
                                         const uint8_t *bitmap,
                                         const void *packed);

/* After the last child: the blocks some child left out folded once with
 * zeros; the result's bitmap (the blocks not all zero) into bitmap, their
 * count into *present.  acc holds the result's blocks that some child had;
 * the others (no child had them: all zero) are left as they were, to be
 * written by shp_sparse_fold_dense only if the result goes dense. */
SHP_WUR shp_status_t shp_sparse_fold_finish(shp_sparse_fold_t *f,
                                            uint8_t *bitmap, size_t *present);

/* After shp_sparse_fold_finish: acc holds the whole result, dense (the
 * blocks no child had zeroed). */
void shp_sparse_fold_dense(shp_sparse_fold_t *f);

#endif
