/*
 * libsharp_coll: requests from the callers' buffer descriptions, the
 * buffer-form rules (docs/libsharp.md, "Buffers and lengths").  Every
 * collective is a stream of bytes; what differs between them is which
 * bytes of the stream a member sends (the rest are zeros) and which bytes
 * of the result it keeps (coll_comm.c).  This file turns a call's spec
 * into those ranges, checked against every length the caller gave (they
 * are believed and never exceeded), and owns the copies that multi-entry
 * IOVs are gathered into and scattered from.  Nothing here sends: a
 * request is posted by coll_run (coll_comm.c).
 */
#include "libsharp/coll_comm.h"

#include <stdlib.h>
#include <string.h>

/* a request and the buffers it owns */
void coll_req_release(coll_req_t *r)
{
    if (r != NULL) {
        free(r->src_iov.buf);
        free(r->dst_iov.buf);
        free(r->parts);
        free(r);
    }
}

/* an IOV result: our buffer's bytes back into the caller's entries */
void coll_iov_scatter(const coll_iov_t *iov)
{
    size_t off = 0;
    for (unsigned i = 0; i < iov->n; i++) {
        memcpy(iov->v[i].ptr, iov->buf + off, iov->v[i].length);
        off += iov->v[i].length;
    }
}

/* one operation without payload */
coll_req_t *coll_barrier_req(void)
{
    coll_req_t *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        r->barrier = 1;
        r->nfrags = 1;
        r->es = 1;
    }
    return r;
}

/* A buffer descriptor as one contiguous range.  An IOV of several entries
 * is gathered into a buffer of our own now and, for a result, scattered
 * back when the operation completes (so bytes the result does not cover
 * keep what they held). */
int coll_desc_ptr(const struct sharp_coll_data_desc *d, void **ptr, size_t *len,
                  coll_iov_t *own)
{
    if (d->mem_type != SHARP_MEM_TYPE_HOST) {
        return SHARP_COLL_ENOT_SUPP;
    }
    if (d->type == SHARP_DATA_BUFFER) {
        *ptr = d->buffer.ptr;
        *len = d->buffer.length;
        return SHARP_COLL_SUCCESS;
    }
    if (d->type != SHARP_DATA_IOV || d->iov.vector == NULL ||
        d->iov.count == 0 || d->iov.count > SHARP_COLL_DATA_MAX_IOV) {
        return SHARP_COLL_EINVAL;
    }
    if (d->iov.count == 1) {
        *ptr = d->iov.vector[0].ptr;
        *len = d->iov.vector[0].length;
        return SHARP_COLL_SUCCESS;
    }
    size_t total = 0, off = 0;
    for (unsigned i = 0; i < d->iov.count; i++) {
        if (d->iov.vector[i].ptr == NULL && d->iov.vector[i].length > 0) {
            return SHARP_COLL_EINVAL;
        }
        total += d->iov.vector[i].length;
    }
    own->buf = malloc(total + 1);
    if (own->buf == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    own->n = d->iov.count;
    memcpy(own->v, d->iov.vector, sizeof(own->v[0]) * own->n);
    for (unsigned i = 0; i < own->n; i++) {
        memcpy(own->buf + off, own->v[i].ptr, own->v[i].length);
        off += own->v[i].length;
    }
    *ptr = own->buf;
    *len = total;
    return SHARP_COLL_SUCCESS;
}

/*
 * Overlapping buffers.  The result of stream byte x lands at
 * dst + (x - r_lo); its input was read from src + (x - s_lo).  Overlapping
 * ranges are accepted only in place: every byte's result lands exactly on
 * its own input (so nothing not yet sent is overwritten).  Gathered IOVs
 * are our own copies and never overlap.
 */
static int overlap_ok(const coll_req_t *r)
{
    if (r->src == NULL || r->dst == NULL || r->s_lo == r->s_hi ||
        r->r_lo == r->r_hi) {
        return 1;
    }
    uintptr_t s0 = (uintptr_t)r->src, s1 = s0 + (r->s_hi - r->s_lo);
    uintptr_t d0 = (uintptr_t)r->dst, d1 = d0 + (r->r_hi - r->r_lo);
    if (d1 <= s0 || s1 <= d0) {
        return 1;
    }
    return s0 + r->r_lo == d0 + r->s_lo;
}

/*
 * Which bytes a reduce-scatter sends and keeps (docs/libsharp.md, "Buffers
 * and lengths").  The whole vector is `size` blocks of `blk` bytes; the
 * call reduces the window [wlo, wlo + total) of it, which src holds from
 * its first byte; the member keeps the window's part of its own block, at
 * dst.  Three forms, told apart by the lengths the caller gave:
 *
 *   per-rank  sbuf holds size x length elements: the window is the whole
 *             vector, the block `length` elements, dst the block (offset 0)
 *   in place  the same, with sbuf = rbuf: the block lands at the member's
 *             offset in that buffer; when the receive length is only
 *             `length` elements (UCC's tl/sharp: an in-place dst count is
 *             the whole vector's), length counts the whole vector
 *   window    sbuf holds `length` elements (NCCL's CollNet plugin): they
 *             are the window at byte `offset` of the whole vector, the
 *             block is the receive length, dst takes the window's part of
 *             the member's block from its first byte
 */
static int rs_layout(coll_comm_t *comm,
                     const struct sharp_coll_reduce_spec *spec, coll_req_t *r,
                     uint8_t *sp, size_t sl, uint8_t *rp, size_t rl)
{
    size_t es = r->es, size = (size_t)comm->size, rank = (size_t)comm->rank;
    size_t n = spec->length * es, blk, wlo, whi;
    uint8_t *dst = rp;

    if (n <= sl / size) { /* per-rank, or in place */
        if (spec->offset != 0) {
            return SHARP_COLL_EINVAL;
        }
        blk = n;
        if (sp == rp && r->src_iov.buf == NULL && r->dst_iov.buf == NULL) {
            if (rl / size < n) { /* the buffer is `length` elements */
                if (rl < n || spec->length % size != 0) {
                    return SHARP_COLL_EINVAL;
                }
                blk = n / size;
            }
            dst = rp + rank * blk;
        } else if (rl < n) {
            return SHARP_COLL_EINVAL;
        }
        wlo = 0;
        whi = size * blk;
    } else { /* a window */
        blk = rl;
        wlo = spec->offset;
        whi = wlo + n;
        if (blk % es != 0 || wlo % es != 0 || whi < wlo || blk == 0 ||
            blk > SIZE_MAX / size || whi > size * blk) {
            return SHARP_COLL_EINVAL;
        }
    }
    size_t lo = rank * blk > wlo ? rank * blk : wlo;
    size_t hi = (rank + 1) * blk < whi ? (rank + 1) * blk : whi;
    r->total = whi - wlo;
    r->src = sp;
    r->s_lo = 0;
    r->s_hi = r->total;
    r->dst = lo < hi ? dst : NULL;
    r->r_lo = lo < hi ? lo - wlo : 0;
    r->r_hi = lo < hi ? hi - wlo : 0;
    return SHARP_COLL_SUCCESS;
}

int coll_reduce_req(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                    int kind, coll_req_t **out)
{
    void *sp, *rp;
    size_t sl, rl;
    int rc;

    if (spec == NULL || (unsigned)spec->dtype >= SHARP_DTYPE_NULL ||
        (unsigned)spec->op >= SHARP_OP_NULL) {
        return SHARP_COLL_EINVAL;
    }
    shp_reduce_desc_t d = {(shp_dtype_t)spec->dtype, (shp_op_t)spec->op,
                           SHP_DTYPE_NULL};
    if (spec->op == SHARP_OP_MAXLOC || spec->op == SHARP_OP_MINLOC) {
        if ((unsigned)spec->tag_dtype >= SHARP_DTYPE_NULL) {
            return SHARP_COLL_EINVAL;
        }
        d.tag_dtype = (shp_dtype_t)spec->tag_dtype;
    }
    if (shp_reduce_desc_check(&d, NULL) != SHP_OK) {
        return SHARP_COLL_ENOT_SUPP;
    }
    if (kind == K_REDUCE && (spec->root < 0 || spec->root >= comm->size)) {
        return SHARP_COLL_EINVAL;
    }
    size_t es = shp_reduce_elem_size(&d);
    if (spec->length > SIZE_MAX / es) {
        return SHARP_COLL_EINVAL;
    }
    coll_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    int keep = kind != K_REDUCE || spec->root == comm->rank;
    rp = NULL;
    rl = 0;
    if ((rc = coll_desc_ptr(&spec->sbuf_desc, &sp, &sl, &r->src_iov)) !=
            SHARP_COLL_SUCCESS ||
        (keep && (rc = coll_desc_ptr(&spec->rbuf_desc, &rp, &rl,
                                     &r->dst_iov)) != SHARP_COLL_SUCCESS)) {
        coll_req_release(r);
        return rc;
    }
    r->desc = d;
    r->es = es;
    size_t n = spec->length * es;
    rc = SHARP_COLL_SUCCESS;
    if (n == 0) {
        r->total = 0; /* nothing is read or written */
    } else if (sp == NULL || (keep && rp == NULL)) {
        rc = SHARP_COLL_EINVAL;
    } else if (kind == K_REDUCE_SCATTER) {
        rc = rs_layout(comm, spec, r, sp, sl, rp, rl);
    } else if (sl < n || (keep && rl < n)) {
        rc = SHARP_COLL_EINVAL;
    } else {
        r->total = n;
        r->src = sp;
        r->s_lo = 0;
        r->s_hi = n;
        r->dst = rp;
        r->r_lo = 0;
        r->r_hi = keep ? n : 0;
    }
    if (rc == SHARP_COLL_SUCCESS && !overlap_ok(r)) {
        rc = SHARP_COLL_EINVAL;
    }
    if (rc != SHARP_COLL_SUCCESS) {
        coll_req_release(r);
        return rc;
    }
    *out = r;
    return SHARP_COLL_SUCCESS;
}

/* bytes moved by BOR: bcast and allgather (r allocated by the caller) */
static void bytes_req(void *src, size_t s_lo, size_t s_hi, void *dst,
                      size_t total, coll_req_t *r)
{
    r->desc = (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL};
    r->es = 1;
    r->total = total;
    r->src = src;
    r->s_lo = s_lo;
    r->s_hi = s_hi;
    r->dst = dst;
    r->r_lo = 0;
    r->r_hi = dst ? total : 0;
}

/* a bcast: the root's bytes, up the tree alone (tree_bcast) or BOR on
 * bytes with everyone else's zeros; the root's buffer is the source (an
 * IOV gathered), the others' the destination (an IOV scattered at the
 * end) */
int coll_bcast_req(const coll_comm_t *comm,
                   const struct sharp_coll_bcast_spec *spec, coll_req_t **out)
{
    coll_req_t *r;
    void *p;
    size_t len;
    int rc;

    if (spec->root < 0 || spec->root >= comm->size) {
        return SHARP_COLL_EINVAL;
    }
    int root = spec->root == comm->rank;
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    if ((rc = coll_desc_ptr(&spec->buf_desc, &p, &len,
                            root ? &r->src_iov : &r->dst_iov)) !=
        SHARP_COLL_SUCCESS) {
        coll_req_release(r);
        return rc;
    }
    if (spec->size > 0 && (p == NULL || len < spec->size)) {
        coll_req_release(r);
        return SHARP_COLL_EINVAL;
    }
    bytes_req(p, 0, root ? spec->size : 0, root ? NULL : p, spec->size, r);
    r->bcast = 1; /* a tree bcast, unless tree_bcast is off (coll_post) */
    *out = r;
    return SHARP_COLL_SUCCESS;
}

/*
 * An allgather.  The whole vector is `size` blocks of the send length; the
 * call fills the window [offset, offset + receive length) of it (offset 0
 * and a receive buffer of the whole vector: the plain form; the window is
 * cut where the vector ends).  sbuf holds, from its first byte, the
 * window's part of the member's block (NCCL's CollNet plugin moves the
 * pointer with the window).  In place: sbuf is the member's block inside
 * rbuf.
 */
int coll_allgather_req(const coll_comm_t *comm,
                       const struct sharp_coll_gather_spec *spec,
                       coll_req_t **out)
{
    coll_req_t *r;
    void *sp, *rp;
    size_t blk, rl;
    int rc;

    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    /* the block comes from the send buffer (size may be garbage) */
    if ((rc = coll_desc_ptr(&spec->sbuf_desc, &sp, &blk, &r->src_iov)) !=
            SHARP_COLL_SUCCESS ||
        (rc = coll_desc_ptr(&spec->rbuf_desc, &rp, &rl, &r->dst_iov)) !=
            SHARP_COLL_SUCCESS) {
        coll_req_release(r);
        return rc;
    }
    size_t size = (size_t)comm->size, rank = (size_t)comm->rank;
    size_t whole = blk * size, wlo = spec->offset;
    if (blk > 0 && (sp == NULL || rp == NULL || whole / size != blk ||
                    wlo >= whole || rl == 0)) {
        coll_req_release(r);
        return SHARP_COLL_EINVAL;
    }
    size_t total = blk == 0 ? 0 : (rl < whole - wlo ? rl : whole - wlo);
    size_t lo = rank * blk > wlo ? rank * blk : wlo;
    size_t hi = (rank + 1) * blk < wlo + total ? (rank + 1) * blk : wlo + total;
    bytes_req(sp, lo < hi ? lo - wlo : 0, lo < hi ? hi - wlo : 0, rp, total, r);
    if (!overlap_ok(r)) {
        coll_req_release(r);
        return SHARP_COLL_EINVAL;
    }
    *out = r;
    return SHARP_COLL_SUCCESS;
}
