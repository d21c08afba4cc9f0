/*
 * libsharp_coll: exact sums (SHARP_OP_SUM_EXACT, reduce/exact.h).  Float
 * and double sums carried as 32-bit limbs in int64 lanes, which the tree
 * adds exactly in any order: agree on the exponent window first (one int64
 * MAX of 3 lanes) unless the type's whole range fits exact_one_pass_max
 * bytes, then the lanes as one int64 SUM with the EXACT flag, then carries
 * and one rounding here.  The result is the same bits for any placement
 * and any number of members.  Every pass is an ordinary blocking request
 * (coll_run); the _nb forms return a request that is already complete.
 */
#include "libsharp/coll_comm.h"

#include "reduce/exact.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

/* One blocking int64 reduction of n elements of `lanes` lanes (0: plain
 * int64, the window pass) from src into dst (NULL: not kept). */
static int exact_pass(coll_comm_t *comm, shp_op_t op, unsigned lanes,
                      const int64_t *src, int64_t *dst, size_t n)
{
    coll_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    r->desc = (shp_reduce_desc_t){SHP_DTYPE_I64, op, SHP_DTYPE_NULL};
    r->lanes = (uint8_t)lanes;
    r->es = sizeof(int64_t) * (lanes ? lanes : 1);
    r->total = n * r->es;
    r->src = (const uint8_t *)src;
    r->s_lo = 0;
    r->s_hi = r->total;
    r->dst = (uint8_t *)dst;
    r->r_lo = 0;
    r->r_hi = dst ? r->total : 0;
    return coll_run(comm, r, SHARP_COLL_SUCCESS, NULL);
}

/* a request that is already complete: the _nb forms of exact sums */
static int done_handle(coll_comm_t *comm, int rc, void **handle)
{
    coll_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    r->comm = comm;
    r->complete = 1;
    r->status = rc;
    *handle = r;
    return SHARP_COLL_SUCCESS;
}

/*
 * An exact sum (reduce/exact.h): agree on the exponent window (one int64
 * MAX of 3 lanes), unless the type's whole range fits in
 * exact_one_pass_max bytes; then the limbs as int64 SUM with the EXACT
 * flag; then carries and one rounding here.  Called with the lock held.
 */
static int exact_sum(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                     int kind, int ncontrib)
{
    shp_dtype_t dt = (shp_dtype_t)spec->dtype;
    coll_iov_t siov = {0}, diov = {0};
    void *sp = NULL, *rp = NULL;
    size_t sl = 0, rl = 0;
    int64_t *lanes = NULL, *sum = NULL;
    const void **srcs = NULL;
    int rc;

    if ((unsigned)spec->dtype >= SHARP_DTYPE_NULL || !shp_exact_dtype_ok(dt) ||
        kind == K_REDUCE_SCATTER) {
        return SHARP_COLL_ENOT_SUPP;
    }
    if (ncontrib < 1 ||
        (kind == K_REDUCE && (spec->root < 0 || spec->root >= comm->size))) {
        return SHARP_COLL_EINVAL;
    }
    int keep = kind != K_REDUCE || spec->root == comm->rank;
    size_t n = spec->length, es = shp_dtype_size(dt);
    size_t bytes = n * es * (size_t)ncontrib;
    if (n == 0) {
        return SHARP_COLL_SUCCESS;
    }
    if (bytes / es / (size_t)ncontrib != n) {
        return SHARP_COLL_EINVAL;
    }
    if ((rc = coll_desc_ptr(&spec->sbuf_desc, &sp, &sl, &siov)) !=
            SHARP_COLL_SUCCESS ||
        (keep && (rc = coll_desc_ptr(&spec->rbuf_desc, &rp, &rl, &diov)) !=
                     SHARP_COLL_SUCCESS)) {
        goto out;
    }
    if (sp == NULL || (keep && rp == NULL) || sl < bytes ||
        (keep && rl < n * es)) {
        rc = SHARP_COLL_EINVAL;
        goto out;
    }
    srcs = malloc(sizeof(void *) * (size_t)ncontrib);
    if (srcs == NULL) {
        rc = SHARP_COLL_ENOMEM;
        goto out;
    }
    for (int c = 0; c < ncontrib; c++) {
        srcs[c] = (const uint8_t *)sp + (size_t)c * n * es;
    }
    int64_t win[SHP_EXACT_WIN_LANES], agreed[SHP_EXACT_WIN_LANES];
    shp_exact_layout_t lay;
    const char *why = NULL;
    shp_exact_window_full(dt, win);
    if (shp_exact_layout(dt, win, &lay, NULL) != SHP_OK) {
        rc = SHARP_COLL_ERROR;
        goto out;
    }
    /* one pass if small enough, and an element fits one fragment (the
     * same decision on every member: same length, same group) */
    if (n * lay.lanes * sizeof(int64_t) > comm->ctx->cfg.exact_one_pass_max ||
        lay.lanes * sizeof(int64_t) > comm->payload) {
        /* two passes: the window first */
        if (shp_exact_window(dt, srcs, (unsigned)ncontrib, n, win) != SHP_OK) {
            rc = SHARP_COLL_ERROR;
            goto out;
        }
        rc = exact_pass(comm, SHP_OP_MAX, 0, win, agreed, SHP_EXACT_WIN_LANES);
        if (rc != SHARP_COLL_SUCCESS) {
            goto out;
        }
        if (shp_exact_layout(dt, agreed, &lay, &why) != SHP_OK) {
            shp_error("group %u: exact sum: bad window from the tree: %s",
                      comm->group_id, why);
            rc = SHARP_COLL_ERROR;
            goto out;
        }
    }
    if (lay.lanes == 0) { /* every value +0 everywhere */
        if (keep) {
            memset(rp, 0, n * es);
        }
        rc = SHARP_COLL_SUCCESS;
        goto out;
    }
    size_t nl = n * lay.lanes;
    lanes = malloc(nl * sizeof(int64_t));
    sum = keep ? malloc(nl * sizeof(int64_t)) : NULL;
    if (lanes == NULL || (keep && sum == NULL)) {
        rc = SHARP_COLL_ENOMEM;
        goto out;
    }
    if (shp_exact_encode(&lay, srcs, (unsigned)ncontrib, n, lanes) != SHP_OK) {
        rc = SHARP_COLL_ERROR;
        goto out;
    }
    rc = exact_pass(comm, SHP_OP_SUM, lay.lanes, lanes, sum, n);
    if (rc == SHARP_COLL_SUCCESS && keep) {
        shp_exact_decode(&lay, sum, n, rp);
        if (diov.buf != NULL) {
            coll_iov_scatter(&diov);
        }
    }
out:
    free(srcs);
    free(lanes);
    free(sum);
    free(siov.buf);
    free(diov.buf);
    return rc;
}

int coll_exact(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec, int kind,
               int ncontrib, void **handle)
{
    coll_lock(comm->ctx);
    int rc = exact_sum(comm, spec, kind, ncontrib);
    if (handle != NULL && rc == SHARP_COLL_SUCCESS) {
        rc = done_handle(comm, rc, handle);
    }
    coll_unlock(comm->ctx);
    return rc;
}

SHP_API int sharp_coll_do_allreduce_exact_n(struct sharp_coll_comm *comm,
                                            struct sharp_coll_reduce_spec *spec,
                                            int ncontrib)
{
    if (comm == NULL || spec == NULL || spec->op != SHARP_OP_SUM_EXACT) {
        return SHARP_COLL_EINVAL;
    }
    return coll_exact(comm, spec, K_ALLREDUCE, ncontrib, NULL);
}
