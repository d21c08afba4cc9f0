/*
 * libsharp_coll: the small information calls.  What the library can do
 * (sharp_coll_caps_query: every type and operation, the job's quotas), a
 * memory registration (a checked handle: no transport needs one), the
 * configuration printed from the SHARP_COLL_* table, the error strings,
 * and the statistics.
 */
#include "libsharp/coll_int.h"

#include "core/config.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SHP_API int sharp_coll_caps_query(struct sharp_coll_context *ctx,
                                  struct sharp_coll_caps *caps)
{
    if (ctx == NULL || caps == NULL) {
        return SHARP_COLL_EINVAL;
    }
    memset(caps, 0, sizeof(*caps));
    caps->sharp_pkt_version = 1; /* SHP_WIRE_VERSION */
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        caps->support_mask.dtypes |= 1ull << dt;
    }
    /* integer tags of MINLOC/MAXLOC pairs, as the engine accepts them */
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_MINLOC, (shp_dtype_t)dt};
        if (shp_reduce_desc_check(&d, NULL) == SHP_OK) {
            caps->support_mask.tag_dtypes |= 1ull << dt;
        }
    }
    for (int op = 0; op < SHARP_OP_NULL; op++) {
        caps->support_mask.reduce_ops |= 1ull << op;
    }
    caps->support_mask.reduce_ops |= 1ull << SHARP_OP_SUM_EXACT;
    /* LLT: small operations, one fragment each.  REPRODUCIBLE: every AN
     * folds its children in a fixed order.  SAT (streaming aggregation):
     * messages of any size, in every aggregation mode, for allreduce,
     * reduce-scatter and allgather and every type above, are cut into
     * fragments and pipelined (clients such as UCC use reduce-scatter and
     * allgather only when SAT is set).  Not SAT_EXCLUSIVE_LOCK: there is no
     * streaming lock to take (lock_on_comm_init is accepted and ignored). */
    caps->support_mask.feature_mask =
        SHARP_FEATURE_LLT | SHARP_FEATURE_REPRODUCIBLE | SHARP_FEATURE_SAT |
        (ctx->cfg.sparse_min > 0 ? SHARP_FEATURE_SPARSE : 0);
    caps->resources.max_osts = (int)ctx->osts;
    caps->resources.user_data_per_ost = (int)ctx->payload;
    caps->resources.max_groups = (int)ctx->max_groups;
    caps->resources.max_group_channels = 1;
    caps->resources.osts_per_group = (int)ctx->osts;
    return SHARP_COLL_SUCCESS;
}

/* a registration: tcp needs none, but the handle is real and checked */
typedef struct coll_mr {
    uint32_t magic;
    void *buf;
    size_t size;
} coll_mr_t;
#define COLL_MR_MAGIC 0x53484d52u

SHP_API int sharp_coll_reg_mr_v2(struct sharp_coll_context *ctx, void *buf,
                                 size_t size,
                                 const struct sharp_coll_reg_params *params,
                                 void **mr)
{
    (void)params;
    if (ctx == NULL || mr == NULL || (buf == NULL && size > 0)) {
        return SHARP_COLL_EINVAL;
    }
    coll_mr_t *m = malloc(sizeof(*m));
    if (m == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    *m = (coll_mr_t){COLL_MR_MAGIC, buf, size};
    *mr = m;
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_reg_mr(struct sharp_coll_context *ctx, void *buf,
                              size_t size, void **mr)
{
    return sharp_coll_reg_mr_v2(ctx, buf, size, NULL, mr);
}

SHP_API int sharp_coll_dereg_mr(struct sharp_coll_context *ctx, void *mr)
{
    coll_mr_t *m = mr;
    if (ctx == NULL || m == NULL || m->magic != COLL_MR_MAGIC) {
        return SHARP_COLL_EINVAL;
    }
    m->magic = 0;
    free(m);
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_print_config(FILE *stream, enum config_print_flags flags,
                                    const char *exec_name)
{
    coll_cfg_t cfg;
    unsigned f = SHP_CONFIG_DUMP_ENV;

    if (stream == NULL) {
        return SHARP_COLL_EINVAL;
    }
    if (coll_cfg_load(&cfg) != SHARP_COLL_SUCCESS &&
        shp_config_defaults(shp_coll_config_table(), &cfg) != SHP_OK) {
        return SHARP_COLL_ENOMEM;
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_HEADER) {
        fprintf(stream, "#\n# sharp_coll configuration%s%s\n#\n",
                exec_name ? " of " : "", exec_name ? exec_name : "");
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_DOC) {
        f |= SHP_CONFIG_DUMP_DOC;
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_HIDDEN) {
        f |= SHP_CONFIG_DUMP_HIDDEN;
    }
    if (flags &
        (SHARP_COLL_CONFIG_PRINT_CONFIG | SHARP_COLL_CONFIG_PRINT_DOC)) {
        shp_config_dump(shp_coll_config_table(), &cfg, stream, f);
    }
    shp_config_release(shp_coll_config_table(), &cfg);
    return SHARP_COLL_SUCCESS;
}

SHP_API const char *sharp_coll_strerror(int error)
{
    switch (error) {
    case SHARP_COLL_SUCCESS: return "Success";
    case SHARP_COLL_ERROR: return "Error";
    case SHARP_COLL_ENOT_SUPP: return "Operation not supported";
    case SHARP_COLL_ENOMEM: return "Out of memory";
    case SHARP_COLL_EGROUP_ALLOC: return "Cannot allocate a group";
    case SHARP_COLL_ECONN_TREE: return "Cannot connect to the aggregation tree";
    case SHARP_COLL_EGROUP_JOIN: return "Cannot join the group";
    case SHARP_COLL_EQUOTA: return "Job quota exhausted";
    case SHARP_COLL_ESESS_INIT: return "Cannot reach the local sharpd";
    case SHARP_COLL_EDEV: return "Device error";
    case SHARP_COLL_EINVAL: return "Invalid argument";
    case SHARP_COLL_EJOB_CREATE: return "Cannot create the job";
    case SHARP_COLL_ETREE_INFO: return "Cannot get tree information";
    case SHARP_COLL_ENOTREE: return "No tree spans the members";
    case SHARP_COLL_EGROUP_ID: return "Bad group id";
    case SHARP_COLL_EOOB: return "Out-of-band collective failed";
    case SHARP_COLL_EGROUP_MCAST: return "Cannot join the group's multicast";
    case SHARP_COLL_EGROUP_TRIM: return "Cannot trim the group";
    case SHARP_COLL_ELOCK_FAILED: return "Streaming lock busy";
    case SHARP_COLL_ELOCK_DENIED: return "Streaming lock denied";
    case SHARP_COLL_ENO_RESOURCE: return "No resource";
    default: return "Unknown error";
    }
}

SHP_API int sharp_coll_dump_stats(struct sharp_coll_context *ctx)
{
    if (ctx == NULL) {
        return SHARP_COLL_EINVAL;
    }
    const coll_stats_t *s = &ctx->stats;
    fprintf(stderr,
            "sharp_coll: job %llu rank %d host %s: operations %llu bytes "
            "%llu fragments %llu retransmits %llu errors %llu results by "
            "multicast %llu by RC %llu forged datagrams dropped %llu "
            "striped %llu free bcasts %llu (results before their turn "
            "%llu) sparse fragments %llu (zero blocks left out %llu) "
            "sparse results %llu; payload bytes read by the zero-block "
            "scan (at most) %llu, under a checked tag %llu, written %llu\n",
            (unsigned long long)ctx->job_id, ctx->spec.world_rank, ctx->host,
            (unsigned long long)s->ops, (unsigned long long)s->bytes,
            (unsigned long long)s->frags, (unsigned long long)s->retrans,
            (unsigned long long)s->errors, (unsigned long long)s->mcast_results,
            (unsigned long long)s->rc_results,
            (unsigned long long)s->mcast_rejected,
            (unsigned long long)s->striped, (unsigned long long)s->free_bcasts,
            (unsigned long long)s->early_results,
            (unsigned long long)s->sparse_frags,
            (unsigned long long)s->sparse_blocks_skipped,
            (unsigned long long)s->sparse_results,
            (unsigned long long)s->pass_scan, (unsigned long long)s->pass_tag,
            (unsigned long long)s->pass_write);
    return SHARP_COLL_SUCCESS;
}
