/*
 * libsharp_coll: the job, created over the caller's out-of-band
 * collectives, and the context's life around it.  sharp_coll_init makes
 * the context (coll_ctx.c), then every rank sends rank 0 its host and
 * whether it reached its sharpd; rank 0 begins the job over the distinct
 * hosts (or attaches to the one the scheduler reserved) and tells every
 * rank the quotas; the others attach; all agree on one status, so that
 * every rank returns the same code.  sharp_coll_finalize destroys the
 * communicators, waits for every rank, and rank 0 ends the job unless it
 * is the scheduler's.
 */
#include "libsharp/coll_int.h"

#include "core/log.h"
#include "protocol/ctl.h"

#include <stdlib.h>
#include <string.h>

/* what rank 0 tells everyone after job_begin */
typedef struct job_info {
    int32_t status;
    uint32_t osts, payload, max_groups;
} job_info_t;

/* what every rank tells rank 0 */
typedef struct rank_info {
    int32_t status;
    char host[SHP_HOST_MAX];
} rank_info_t;

/* rank 0: begin the job over the distinct hosts of every rank */
static void job_begin(coll_ctx_t *ctx, const rank_info_t *all, int n,
                      job_info_t *ji)
{
    json_t *hosts = json_array();
    shp_status_t st;

    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) {
            seen = !strncmp(all[k].host, all[i].host, SHP_HOST_MAX);
        }
        if (!seen) {
            json_array_append_new(
                hosts,
                json_stringn(all[i].host, strnlen(all[i].host, SHP_HOST_MAX)));
        }
    }
    json_t *req = json_object();
    if (ctx->cfg.quota_osts) {
        json_object_set_new(req, "osts", json_integer(ctx->cfg.quota_osts));
    }
    if (ctx->cfg.quota_payload) {
        json_object_set_new(req, "payload",
                            json_integer((json_int_t)ctx->cfg.quota_payload));
    }
    if (ctx->cfg.quota_groups) {
        json_object_set_new(req, "max_groups",
                            json_integer(ctx->cfg.quota_groups));
    }
    json_t *r = coll_sd_call(
        ctx,
        json_pack("{s:s, s:o, s:o, s:o}", "type", "job_begin", "job_id",
                  shp_json_u64(ctx->job_id), "hosts", hosts, "req", req),
        &st);
    if (r == NULL || st != SHP_OK) {
        if (!(ctx->spec.config.flags & SHARP_COLL_HIDE_ERRORS)) {
            shp_error("job %llu refused: %s", (unsigned long long)ctx->job_id,
                      r ? shp_json_opt_str(r, "error", shp_status_str(st))
                        : shp_status_str(st));
        }
        ji->status = r == NULL && st == SHP_ERR_UNREACHABLE
                         ? SHARP_COLL_ESESS_INIT
                         : coll_status_to_sharp(st, SHARP_COLL_EJOB_CREATE);
        json_decref(r);
        return;
    }
    int64_t osts = shp_json_opt_int(r, "osts", 1, 1 << 20, 0);
    int64_t payload = shp_json_opt_int(r, "payload", 1, 1 << 30, 0);
    int64_t groups = shp_json_opt_int(r, "max_groups", 1, 1 << 20, 0);
    if (!osts || !payload || !groups ||
        shp_json_get_hex(r, "job_key", ctx->job_key, 32, NULL) != SHP_OK) {
        ji->status = SHARP_COLL_EJOB_CREATE;
    } else {
        ji->status = SHARP_COLL_SUCCESS;
        ji->osts = (uint32_t)osts;
        ji->payload = (uint32_t)payload;
        ji->max_groups = (uint32_t)groups;
    }
    json_decref(r);
}

/* ji: where a reserved job's quotas go (rank 0), or NULL */
static int job_attach(coll_ctx_t *ctx, job_info_t *ji)
{
    shp_status_t st;
    json_t *r = coll_sd_call(ctx,
                             json_pack("{s:s, s:o}", "type", "job_attach",
                                       "job_id", shp_json_u64(ctx->job_id)),
                             &st);
    int rc = SHARP_COLL_SUCCESS;
    if (r == NULL || st != SHP_OK ||
        shp_json_get_hex(r, "job_key", ctx->job_key, 32, NULL) != SHP_OK) {
        if (!(ctx->spec.config.flags & SHARP_COLL_HIDE_ERRORS)) {
            shp_error("cannot attach to job %llu: %s",
                      (unsigned long long)ctx->job_id, shp_status_str(st));
        }
        rc = coll_status_to_sharp(st, SHARP_COLL_EJOB_CREATE);
    } else if (ji != NULL) {
        int64_t osts = shp_json_opt_int(r, "osts", 1, 1 << 20, 0);
        int64_t payload = shp_json_opt_int(r, "payload", 1, 1 << 30, 0);
        int64_t groups = shp_json_opt_int(r, "max_groups", 1, 1 << 20, 0);
        if (!osts || !payload || !groups) {
            rc = SHARP_COLL_EJOB_CREATE;
        } else {
            ji->osts = (uint32_t)osts;
            ji->payload = (uint32_t)payload;
            ji->max_groups = (uint32_t)groups;
        }
    }
    json_decref(r);
    return rc;
}

/* Rank 0: every rank's status and host in all (NULL: no memory, mine
 * says so) -> the job begun (or the reserved one attached) and its quotas
 * in *ji, or why not. */
static void job_decide(coll_ctx_t *ctx, const rank_info_t *all,
                       const rank_info_t *mine, job_info_t *ji)
{
    for (int i = 0; all && i < ctx->spec.world_size; i++) {
        if (all[i].status != SHARP_COLL_SUCCESS) {
            ji->status = all[i].status;
        }
    }
    if (mine->status != SHARP_COLL_SUCCESS) {
        ji->status = mine->status;
    }
    if (ji->status == SHARP_COLL_SUCCESS && ctx->reserved) {
        ji->status = job_attach(ctx, ji);
    } else if (ji->status == SHARP_COLL_SUCCESS) {
        job_begin(ctx, all, ctx->spec.world_size, ji);
    }
}

/* everyone's host (and whether it reached its sharpd: status) to rank 0,
 * which decides; its answer to all */
static job_info_t job_info_share(coll_ctx_t *ctx, int status)
{
    const struct sharp_coll_init_spec *spec = &ctx->spec;
    rank_info_t mine = {.status = status};
    rank_info_t *all = NULL;
    job_info_t ji = {.status = SHARP_COLL_SUCCESS};

    snprintf(mine.host, sizeof(mine.host), "%s", ctx->host);
    if (spec->world_rank == 0) {
        all = calloc((size_t)spec->world_size, sizeof(*all));
        if (all == NULL) {
            mine.status = SHARP_COLL_ENOMEM;
        }
    }
    if (coll_oob_gather(ctx, spec->oob_ctx, 0, &mine, all ? all : &mine,
                        sizeof(mine)) != SHARP_COLL_SUCCESS) {
        ji.status = SHARP_COLL_EOOB;
    }
    if (spec->world_rank == 0 && ji.status == SHARP_COLL_SUCCESS) {
        job_decide(ctx, all, &mine, &ji);
    }
    free(all);
    if (coll_oob_bcast(ctx, spec->oob_ctx, &ji, sizeof(ji), 0) !=
        SHARP_COLL_SUCCESS) {
        ji.status = SHARP_COLL_EOOB;
    }
    return ji;
}

/* The job, agreed by every rank: collective over the out-of-band hooks,
 * whatever this rank's status so far (so that every rank returns the same
 * code).  Rank 0 begins it, the others attach. */
static int job_setup(coll_ctx_t *ctx, int status)
{
    const struct sharp_coll_init_spec *spec = &ctx->spec;
    job_info_t ji = job_info_share(ctx, status);
    int rc = ji.status;

    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    ctx->osts = ji.osts;
    ctx->payload = ji.payload;
    ctx->max_groups = ji.max_groups;
    if (spec->world_rank != 0) {
        rc = job_attach(ctx, NULL);
    }
    rc = coll_agree(ctx, spec->oob_ctx, spec->world_rank, spec->world_size, rc);
    if (rc != SHARP_COLL_SUCCESS && spec->world_rank == 0 &&
        rc != SHARP_COLL_EOOB && !ctx->reserved) {
        coll_sd_job_request(ctx, "job_end", NULL);
    }
    return rc;
}

/* Steps: the context (coll_ctx_new), this rank's part (coll_ctx_setup), the job,
 * agreed by all ranks whatever this one's part gave (job_setup); on any
 * failure one cleanup (coll_ctx_free). */
SHP_API int sharp_coll_init(struct sharp_coll_init_spec *spec,
                            struct sharp_coll_context **context)
{
    if (spec == NULL || context == NULL || spec->world_size <= 0 ||
        spec->world_rank < 0 || spec->world_rank >= spec->world_size ||
        spec->oob_colls.bcast == NULL || spec->oob_colls.gather == NULL) {
        return SHARP_COLL_EINVAL;
    }
    *context = NULL;
    coll_ctx_t *ctx = coll_ctx_new(spec);
    if (ctx == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    int rc = job_setup(ctx, coll_ctx_setup(ctx));
    if (rc != SHARP_COLL_SUCCESS) {
        coll_ctx_free(ctx);
        return rc;
    }
    ctx->job_ok = 1;
    shp_info("job %llu: rank %d of %d on host %s, %u OSTs x %zu bytes, %u "
             "groups",
             (unsigned long long)ctx->job_id, spec->world_rank,
             spec->world_size, ctx->host, ctx->osts, ctx->payload,
             ctx->max_groups);
    *context = ctx;
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_finalize(struct sharp_coll_context *ctx)
{
    if (ctx == NULL) {
        return SHARP_COLL_EINVAL;
    }
    while (ctx->members != NULL) {
        ctx->members->ops->destroy(ctx->members);
    }
    /* every rank is done with its groups before the job ends, so that no
     * process exit looks like a failure to the manager */
    if (ctx->spec.oob_colls.barrier != NULL) {
        (void)ctx->spec.oob_colls.barrier(ctx->spec.oob_ctx);
    }
    /* a reserved job is the scheduler's to end */
    if (ctx->spec.world_rank == 0 && ctx->sd_up && !ctx->job_failed &&
        !ctx->reserved) {
        coll_sd_job_request(ctx, "job_end", NULL);
    }
    ctx->job_ok = 0;
    coll_ctx_free(ctx);
    return SHARP_COLL_SUCCESS;
}
