/*
 * libsharp_coll: block-sparse fragments (docs/libsharp.md, "Sparse
 * payloads"; the format: protocol/wire.h, SHP_WIRE_F_SPARSE).
 *
 * A fragment of sparse_min bytes or more of a reduction whose identity is
 * all-zero bits (shp_sparse_ok: sums, BOR, BXOR, LOR) is scanned for its
 * blocks of sparse_block bytes that hold a non-zero byte; if they come to
 * at most sparse_density percent of the fragment's bytes, it goes as their
 * bitmap and those blocks alone.  The scan stops as soon as the fragment
 * is too dense (a dense block is left at its first non-zero 64 bytes),
 * so a dense fragment costs next to nothing.  Results come back sparse
 * when the ANs found them so, and are expanded into the caller's buffer
 * once.
 */
#include "libsharp/coll_sparse.h"

#include "reduce/sparse.h"

#include <stdlib.h>

const void *coll_sparse_frag(coll_comm_t *comm, const coll_req_t *r,
                             const void *dense, size_t len, shp_wire_hdr_t *h)
{
    const coll_cfg_t *cfg = &comm->ctx->cfg;
    size_t block = cfg->sparse_block;

    if (cfg->sparse_min == 0 || len < cfg->sparse_min || r->bcast ||
        r->barrier || shp_sparse_layout_check(&r->desc, len, block) != SHP_OK) {
        return dense;
    }
    if (comm->sparse == NULL && !(comm->sparse = malloc(comm->payload))) {
        return dense; /* dense is as right */
    }
    size_t head = SHP_WIRE_SPARSE_HDR + shp_sparse_bitmap_bytes(len, block);
    size_t budget = len / 100 * cfg->sparse_density;
    if (budget <= head) {
        return dense;
    }
    size_t max = (budget - head) / block;
    uint8_t *bitmap = comm->sparse + SHP_WIRE_SPARSE_HDR;
    size_t n = shp_sparse_scan(dense, len, block, bitmap, max);
    comm->ctx->stats.pass_scan += len;
    if (n > max) {
        return dense;
    }
    (void)shp_wire_sparse_head(comm->sparse, (uint32_t)block, len);
    size_t packed =
        shp_sparse_pack(dense, len, block, bitmap, comm->sparse + head);
    h->flags |= SHP_WIRE_F_SPARSE;
    h->payload_len = (uint32_t)(head + packed);
    comm->ctx->stats.sparse_frags++;
    comm->ctx->stats.sparse_blocks_skipped +=
        shp_sparse_nblocks(len, block) - n;
    return comm->sparse;
}

int coll_sparse_take(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                     const void *payload, size_t len, uint8_t *dst, size_t lo,
                     size_t hi)
{
    shp_wire_sparse_t v;
    const char *why = NULL;

    /* checked by the transport on delivery; again here, for its parts */
    if (shp_wire_sparse_view(hdr, payload, hdr->payload_len, &v, &why) !=
            SHP_OK ||
        v.dense_len != len) {
        return -1;
    }
    if (lo < hi) {
        shp_sparse_expand_range(dst, lo, hi, len, v.block, v.bitmap, v.packed);
    }
    comm->ctx->stats.sparse_results++;
    return 0;
}
