/*
 * The aggregation node's sparse payloads (protocol/wire.h,
 * SHP_WIRE_F_SPARSE; reduce/sparse.h).
 *
 * An operation whose first payload here comes sparse is folded sparse:
 * its children in child order (shp_sparse_fold), each as it came: a
 * sparse one's blocks, a dense one as every block (the slot's `ones`
 * bitmap), a sparse one with another block size expanded first; one that
 * arrives before its turn is kept as sent (a sparse copy is small) until
 * the children before it are in.  The result is sent on (up, or down at
 * the top) as the blocks that are not all zero when that is smaller than
 * dense, else dense; either way bit for bit what the dense fold gives.
 * An operation opened dense takes a sparse payload expanded into a
 * buffer of the group's.
 */
#include "an/an_int.h"

#include <string.h>

#define AN_COPY_SPARSE 0x80000000u /* clen: the copy is sparse, as sent */

static int an_sparse_room(shp_an_group_t *g, shp_an_slot_t *s, size_t nb)
{
    if (s->clen == NULL &&
        !(s->clen = calloc(g->nchildren, sizeof(*s->clen)))) {
        return -1;
    }
    if (s->sbuf == NULL && !(s->sbuf = malloc(g->payload + SHP_WIRE_MAC_LEN))) {
        return -1;
    }
    if (nb > s->nblocks_cap) {
        free(s->seen);
        free(s->ones);
        s->seen = malloc(nb * sizeof(*s->seen));
        s->ones = malloc((nb + 7) / 8);
        s->nblocks_cap = s->seen && s->ones ? nb : 0;
        if (!s->nblocks_cap) {
            return -1;
        }
    }
    return 0;
}

/* the parts of a sparse payload of slot s's operation */
static int an_sparse_parts(const shp_an_slot_t *s, const void *data, size_t len,
                           shp_wire_sparse_t *v)
{
    shp_wire_hdr_t h = {.dtype = (uint8_t)s->desc.dtype,
                        .op = (uint8_t)s->desc.op,
                        .tag_dtype = (uint8_t)s->desc.tag_dtype,
                        .count = s->count};
    const char *why;
    return shp_wire_sparse_view(&h, data, len, v, &why) == SHP_OK &&
                   v->dense_len == s->dense_len
               ? 0
               : -1;
}

shp_status_t shp_an_sparse_open(shp_an_group_t *g, shp_an_slot_t *s,
                                const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_wire_sparse_t v;
    const char *why;

    if (shp_wire_sparse_view(hdr, payload, hdr->payload_len, &v, &why) !=
        SHP_OK) {
        return SHP_ERR_PROTO; /* the transport checked it: cannot be */
    }
    size_t nb = shp_sparse_nblocks(v.dense_len, v.block);
    if (an_sparse_room(g, s, nb) != 0) {
        return SHP_ERR_NO_MEMORY;
    }
    s->sparse = 1;
    s->dense_len = (uint32_t)v.dense_len;
    s->len = s->dense_len;
    memset(s->ones, 0xff, (nb + 7) / 8);
    if (nb % 8) {
        s->ones[nb / 8] = (uint8_t)((1u << (nb % 8)) - 1);
    }
    shp_sparse_fold_init(&s->sp, &s->desc, v.dense_len, v.block, g->nchildren,
                         s->acc, s->seen);
    return SHP_OK;
}

/* the next child's payload (len bytes, sparse or not) into the fold */
static shp_status_t an_sparse_fold_one(shp_an_group_t *g, shp_an_slot_t *s,
                                       int sparse, const void *data, size_t len)
{
    shp_wire_sparse_t v;

    g->an->stats.pass_fold += len;
    if (!sparse) {
        return len == s->dense_len ? shp_sparse_fold_add(&s->sp, s->ones, data)
                                   : SHP_ERR_PROTO;
    }
    if (an_sparse_parts(s, data, len, &v) != 0) {
        return SHP_ERR_PROTO;
    }
    g->an->stats.sparse_in++;
    if (v.block == s->sp.block) {
        return shp_sparse_fold_add(&s->sp, v.bitmap, v.packed);
    }
    uint8_t *tmp = an_buf_get(g); /* another block size: as dense */
    if (tmp == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    shp_sparse_expand(tmp, v.dense_len, v.block, v.bitmap, v.packed);
    g->an->stats.pass_copy += v.dense_len;
    shp_status_t st = shp_sparse_fold_add(&s->sp, s->ones, tmp);
    an_buf_put(g, tmp);
    return st;
}

/* Every child in: the result, sparse if that is smaller */
static shp_status_t an_sparse_finish(shp_an_group_t *g, shp_an_slot_t *s)
{
    uint8_t *bitmap = s->sbuf + SHP_WIRE_SPARSE_HDR;
    size_t present, len = s->dense_len, block = s->sp.block;
    shp_status_t st = shp_sparse_fold_finish(&s->sp, bitmap, &present);
    if (st != SHP_OK) {
        return st;
    }
    size_t head = shp_wire_sparse_head(s->sbuf, (uint32_t)block, len);
    size_t packed = shp_sparse_packed_len(len, block, bitmap);
    if (head + packed >= len) {
        shp_sparse_fold_dense(&s->sp); /* dense: acc holds it */
        return SHP_OK;
    }
    (void)shp_sparse_pack(s->acc, len, block, bitmap, s->sbuf + head);
    g->an->stats.pass_copy += packed;
    uint8_t *t = s->acc;
    s->acc = s->sbuf;
    s->sbuf = t;
    s->len = (uint32_t)(head + packed);
    s->flags |= SHP_WIRE_F_SPARSE;
    g->an->stats.sparse_out++;
    g->an->stats.sparse_blocks_skipped += s->sp.nblocks - present;
    return SHP_OK;
}

int shp_an_sparse_add(shp_an_group_t *g, shp_an_slot_t *s, unsigned ci,
                      const shp_wire_hdr_t *hdr, const void *payload)
{
    int sparse = (hdr->flags & SHP_WIRE_F_SPARSE) != 0;
    shp_status_t st = SHP_OK;

    if (ci < s->sp.folded || s->copies[ci] != NULL) {
        return -1; /* a duplicate */
    }
    if (ci != s->sp.folded) { /* before its turn: kept as sent */
        uint8_t *copy = an_buf_get(g);
        if (copy == NULL) {
            return -1;
        }
        memcpy(copy, payload, hdr->payload_len);
        g->an->stats.pass_copy += hdr->payload_len;
        s->copies[ci] = copy;
        s->clen[ci] = hdr->payload_len | (sparse ? AN_COPY_SPARSE : 0);
        return 0;
    }
    st = an_sparse_fold_one(g, s, sparse, payload, hdr->payload_len);
    while (st == SHP_OK && s->sp.folded < s->sp.nchildren &&
           s->copies[s->sp.folded] != NULL) {
        unsigned k = s->sp.folded;
        st = an_sparse_fold_one(g, s, (s->clen[k] & AN_COPY_SPARSE) != 0,
                                s->copies[k], s->clen[k] & ~AN_COPY_SPARSE);
        an_buf_put(g, s->copies[k]);
        s->copies[k] = NULL;
    }
    if (st == SHP_OK && s->sp.folded == s->sp.nchildren) {
        st = an_sparse_finish(g, s);
        return st == SHP_OK ? 1 : -1;
    }
    return st == SHP_OK ? 0 : -1;
}

uint8_t *shp_an_sparse_expand(shp_an_group_t *g, const shp_an_slot_t *s,
                              const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_wire_sparse_t v;

    if (an_sparse_parts(s, payload, hdr->payload_len, &v) != 0) {
        return NULL;
    }
    uint8_t *copy = an_buf_get(g);
    if (copy != NULL) {
        shp_sparse_expand(copy, v.dense_len, v.block, v.bitmap, v.packed);
        g->an->stats.sparse_in++;
        g->an->stats.pass_copy += v.dense_len;
    }
    return copy;
}
