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

/* an exact sum's buffers: ncontrib contributions of n elements of es
 * bytes each from sp, the result (keep) at rp */
typedef struct exact_call {
    shp_dtype_t dt;
    size_t n, es;
    int ncontrib, keep;
    void *sp, *rp;
    coll_iov_t siov, diov; /* IOVs gathered, and scattered back */
    const void **srcs;     /* [ncontrib] */
} exact_call_t;

/* what the library computes exactly: SHARP_COLL_SUCCESS, or why not */
static int exact_check(const coll_comm_t *comm,
                       const struct sharp_coll_reduce_spec *spec, int kind,
                       int ncontrib)
{
    if ((unsigned)spec->dtype >= SHARP_DTYPE_NULL ||
        !shp_exact_dtype_ok((shp_dtype_t)spec->dtype) ||
        kind == K_REDUCE_SCATTER) {
        return SHARP_COLL_ENOT_SUPP;
    }
    if (ncontrib < 1 ||
        (kind == K_REDUCE && (spec->root < 0 || spec->root >= comm->size))) {
        return SHARP_COLL_EINVAL;
    }
    return SHARP_COLL_SUCCESS;
}

/* the buffers, checked against the lengths given (x->n > 0) */
static int exact_buffers(const struct sharp_coll_reduce_spec *spec,
                         exact_call_t *x)
{
    size_t sl = 0, rl = 0, n = x->n, es = x->es;
    size_t bytes = n * es * (size_t)x->ncontrib;
    int rc;

    if (bytes / es / (size_t)x->ncontrib != n) {
        return SHARP_COLL_EINVAL;
    }
    if ((rc = coll_desc_ptr(&spec->sbuf_desc, &x->sp, &sl, &x->siov)) !=
            SHARP_COLL_SUCCESS ||
        (x->keep && (rc = coll_desc_ptr(&spec->rbuf_desc, &x->rp, &rl,
                                        &x->diov)) != SHARP_COLL_SUCCESS)) {
        return rc;
    }
    if (x->sp == NULL || (x->keep && x->rp == NULL) || sl < bytes ||
        (x->keep && rl < n * es)) {
        return SHARP_COLL_EINVAL;
    }
    x->srcs = malloc(sizeof(void *) * (size_t)x->ncontrib);
    if (x->srcs == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    for (int c = 0; c < x->ncontrib; c++) {
        x->srcs[c] = (const uint8_t *)x->sp + (size_t)c * n * es;
    }
    return SHARP_COLL_SUCCESS;
}

/* The lanes' layout: the type's whole range in one pass if small enough
 * and an element fits one fragment (the same decision on every member:
 * same length, same group), else the exponent window agreed first. */
static int exact_window(coll_comm_t *comm, const exact_call_t *x,
                        shp_exact_layout_t *lay)
{
    int64_t win[SHP_EXACT_WIN_LANES], agreed[SHP_EXACT_WIN_LANES];
    const char *why = NULL;

    shp_exact_window_full(x->dt, win);
    if (shp_exact_layout(x->dt, win, lay, NULL) != SHP_OK) {
        return SHARP_COLL_ERROR;
    }
    if (x->n * lay->lanes * sizeof(int64_t) <=
            comm->ctx->cfg.exact_one_pass_max &&
        lay->lanes * sizeof(int64_t) <= comm->payload) {
        return SHARP_COLL_SUCCESS;
    }
    /* two passes: the window first */
    if (shp_exact_window(x->dt, x->srcs, (unsigned)x->ncontrib, x->n, win) !=
        SHP_OK) {
        return SHARP_COLL_ERROR;
    }
    int rc = exact_pass(comm, SHP_OP_MAX, 0, win, agreed, SHP_EXACT_WIN_LANES);
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    if (shp_exact_layout(x->dt, agreed, lay, &why) != SHP_OK) {
        shp_error("group %u: exact sum: bad window from the tree: %s",
                  comm->group_id, why);
        return SHARP_COLL_ERROR;
    }
    return SHARP_COLL_SUCCESS;
}

/* the values as lanes, summed on the tree, and the result rounded once */
static int exact_lanes(coll_comm_t *comm, const exact_call_t *x,
                       const shp_exact_layout_t *lay)
{
    size_t nl = x->n * lay->lanes;
    int64_t *lanes = malloc(nl * sizeof(int64_t));
    int64_t *sum = x->keep ? malloc(nl * sizeof(int64_t)) : NULL;
    int rc = SHARP_COLL_ERROR;

    if (lanes == NULL || (x->keep && sum == NULL)) {
        rc = SHARP_COLL_ENOMEM;
    } else if (shp_exact_encode(lay, x->srcs, (unsigned)x->ncontrib, x->n,
                                lanes) == SHP_OK) {
        rc = exact_pass(comm, SHP_OP_SUM, lay->lanes, lanes, sum, x->n);
    }
    if (rc == SHARP_COLL_SUCCESS && x->keep) {
        shp_exact_decode(lay, sum, x->n, x->rp);
    }
    free(lanes);
    free(sum);
    return rc;
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
    shp_exact_layout_t lay;
    int rc = exact_check(comm, spec, kind, ncontrib);
    if (rc != SHARP_COLL_SUCCESS || spec->length == 0) {
        return rc;
    }
    exact_call_t x = {.dt = (shp_dtype_t)spec->dtype,
                      .n = spec->length,
                      .es = shp_dtype_size((shp_dtype_t)spec->dtype),
                      .ncontrib = ncontrib,
                      .keep = kind != K_REDUCE || spec->root == comm->rank};
    if ((rc = exact_buffers(spec, &x)) == SHARP_COLL_SUCCESS &&
        (rc = exact_window(comm, &x, &lay)) == SHARP_COLL_SUCCESS) {
        if (lay.lanes > 0) {
            rc = exact_lanes(comm, &x, &lay);
        } else if (x.keep) { /* every value +0 everywhere */
            memset(x.rp, 0, x.n * x.es);
        }
        /* an IOV result was gathered into one buffer: written back in
         * both cases, the all-zero one too */
        if (rc == SHARP_COLL_SUCCESS && x.keep && x.diov.buf != NULL) {
            coll_iov_scatter(&x.diov);
        }
    }
    free(x.srcs);
    free(x.siov.buf);
    free(x.diov.buf);
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
