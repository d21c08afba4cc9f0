/*
 * libsharp_coll: the collective calls and their requests' completion.
 * Each call builds its request from the spec (coll_buf.c), then, under the
 * context's lock, posts it and, for a blocking call, waits for it
 * (coll_run, coll_comm.c); a _nb call returns the request as its handle.
 * Exact sums go to coll_exact.c.
 */
#include "libsharp/coll_comm.h"

static int do_reduce(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                     int kind, void **handle)
{
    coll_req_t *r = NULL;
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    if (spec != NULL && spec->op == SHARP_OP_SUM_EXACT) {
        return coll_exact(comm, spec, kind, 1, handle);
    }
    coll_lock(comm->ctx);
    int rc = coll_reduce_req(comm, spec, kind, &r);
    rc = coll_run(comm, r, rc, handle);
    coll_unlock(comm->ctx);
    return rc;
}

SHP_API int sharp_coll_do_allreduce(struct sharp_coll_comm *comm,
                                    struct sharp_coll_reduce_spec *spec)
{
    return do_reduce(comm, spec, K_ALLREDUCE, NULL);
}

SHP_API int sharp_coll_do_allreduce_nb(struct sharp_coll_comm *comm,
                                       struct sharp_coll_reduce_spec *spec,
                                       void **handle)
{
    return handle ? do_reduce(comm, spec, K_ALLREDUCE, handle)
                  : SHARP_COLL_EINVAL;
}

SHP_API int sharp_coll_do_reduce(struct sharp_coll_comm *comm,
                                 struct sharp_coll_reduce_spec *spec)
{
    return do_reduce(comm, spec, K_REDUCE, NULL);
}

SHP_API int sharp_coll_do_reduce_nb(struct sharp_coll_comm *comm,
                                    struct sharp_coll_reduce_spec *spec,
                                    void **handle)
{
    return handle ? do_reduce(comm, spec, K_REDUCE, handle) : SHARP_COLL_EINVAL;
}

SHP_API int sharp_coll_do_reduce_scatter(struct sharp_coll_comm *comm,
                                         struct sharp_coll_reduce_spec *spec)
{
    return do_reduce(comm, spec, K_REDUCE_SCATTER, NULL);
}

SHP_API int sharp_coll_do_reduce_scatter_nb(struct sharp_coll_comm *comm,
                                            struct sharp_coll_reduce_spec *spec,
                                            void **handle)
{
    return handle ? do_reduce(comm, spec, K_REDUCE_SCATTER, handle)
                  : SHARP_COLL_EINVAL;
}

static int do_bcast(coll_comm_t *comm, struct sharp_coll_bcast_spec *spec,
                    void **handle)
{
    coll_req_t *r = NULL;
    if (comm == NULL || spec == NULL) {
        return SHARP_COLL_EINVAL;
    }
    int rc = coll_bcast_req(comm, spec, &r);
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    coll_lock(comm->ctx);
    rc = coll_run(comm, r, SHARP_COLL_SUCCESS, handle);
    coll_unlock(comm->ctx);
    return rc;
}

SHP_API int sharp_coll_do_bcast(struct sharp_coll_comm *comm,
                                struct sharp_coll_bcast_spec *spec)
{
    return do_bcast(comm, spec, NULL);
}

SHP_API int sharp_coll_do_bcast_nb(struct sharp_coll_comm *comm,
                                   struct sharp_coll_bcast_spec *spec,
                                   void **handle)
{
    return handle ? do_bcast(comm, spec, handle) : SHARP_COLL_EINVAL;
}

/* docs/libsharp.md, "Buffers and lengths"; the window: coll_buf.c */
static int do_allgather(coll_comm_t *comm, struct sharp_coll_gather_spec *spec,
                        void **handle)
{
    coll_req_t *r = NULL;
    if (comm == NULL || spec == NULL) {
        return SHARP_COLL_EINVAL;
    }
    int rc = coll_allgather_req(comm, spec, &r);
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    coll_lock(comm->ctx);
    rc = coll_run(comm, r, SHARP_COLL_SUCCESS, handle);
    coll_unlock(comm->ctx);
    return rc;
}

SHP_API int sharp_coll_do_allgather(struct sharp_coll_comm *comm,
                                    struct sharp_coll_gather_spec *spec)
{
    return do_allgather(comm, spec, NULL);
}

SHP_API int sharp_coll_do_allgather_nb(struct sharp_coll_comm *comm,
                                       struct sharp_coll_gather_spec *spec,
                                       void **handle)
{
    return handle ? do_allgather(comm, spec, handle) : SHARP_COLL_EINVAL;
}

static int do_barrier(coll_comm_t *comm, void **handle)
{
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_lock(comm->ctx);
    coll_req_t *r = coll_barrier_req();
    int rc =
        r ? coll_run(comm, r, SHARP_COLL_SUCCESS, handle) : SHARP_COLL_ENOMEM;
    coll_unlock(comm->ctx);
    return rc;
}

SHP_API int sharp_coll_do_barrier(struct sharp_coll_comm *comm)
{
    return do_barrier(comm, NULL);
}

SHP_API int sharp_coll_do_barrier_nb(struct sharp_coll_comm *comm,
                                     void **handle)
{
    return handle ? do_barrier(comm, handle) : SHARP_COLL_EINVAL;
}

SHP_API int sharp_coll_req_test(void *handle)
{
    coll_req_t *r = handle;
    if (r == NULL) {
        return 1;
    }
    coll_lock(r->comm->ctx);
    if (!r->complete) {
        coll_progress_once(r->comm->ctx, 0);
    }
    int done = r->complete;
    coll_unlock(r->comm->ctx);
    return done;
}

SHP_API int sharp_coll_req_wait(void *handle)
{
    coll_req_t *r = handle;
    if (r == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_ctx_t *ctx = r->comm->ctx;
    coll_lock(ctx);
    int st = coll_wait_req(r);
    coll_unlock(ctx);
    return st;
}

SHP_API int sharp_coll_req_free(void *handle)
{
    coll_req_t *r = handle;
    if (r == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_ctx_t *ctx = r->comm->ctx;
    coll_lock(ctx);
    /* a request still in flight is waited for: its fragments hold it */
    coll_wait_complete(ctx, r);
    coll_req_release(r);
    coll_unlock(ctx);
    return SHARP_COLL_SUCCESS;
}
