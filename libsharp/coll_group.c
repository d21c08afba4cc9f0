/*
 * libsharp_coll: setting a communicator's group up and tearing it down.
 *
 * Creating one is collective over the caller's out-of-band hooks: the
 * members' hosts go to rank 0, which asks sharpd (and so the manager) for
 * a group over them; the group's description (tree, leaf AN, child index,
 * quotas, multicast address) goes back to all, every member connects to
 * its leaf AN and joins (and joins the multicast group if results come
 * that way), and the outcome is agreed, so every member returns the same
 * code.  The communicator then becomes a member of the context's list
 * (coll_member_t), through which the context ticks it, fails it and, at
 * finalize, destroys it.  Its data path: coll_comm.c.
 */
#include "libsharp/coll_comm.h"

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/time.h"

#include <stdlib.h>
#include <string.h>

/* what a group is to another group of the job, placed away from its ANs:
 * nothing (of 0), its standby (group_create's standby_of) or a stripe of
 * it (stripe_of) */
typedef struct coll_rel {
    uint32_t of;
    int stripe;
} coll_rel_t;

/* rank 0: the group over every member's host, as JSON text for the others */
static int group_create(coll_ctx_t *ctx, const char *hosts, int size,
                        coll_rel_t rel, char **text)
{
    json_t *members = json_array();
    shp_status_t st;

    for (int i = 0; i < size; i++) {
        json_array_append_new(
            members, json_stringn(hosts + (size_t)i * SHP_HOST_MAX,
                                  strnlen(hosts + (size_t)i * SHP_HOST_MAX,
                                          SHP_HOST_MAX)));
    }
    json_t *msg = json_pack("{s:s, s:o, s:o}", "type", "group_create", "job_id",
                            shp_json_u64(ctx->job_id), "members", members);
    if (rel.of != 0) {
        json_object_set_new(msg, rel.stripe ? "stripe_of" : "standby_of",
                            json_integer(rel.of));
    }
    if (!ctx->cfg.enable_mcast_target) {
        json_object_set_new(msg, "dist", json_string("rc"));
    } else if (ctx->cfg.group_is_target) {
        json_object_set_new(msg, "dist", json_string("mcast"));
    }
    json_t *r = coll_sd_call(ctx, msg, &st);
    json_t *g = r ? json_object_get(r, "group") : NULL;
    if (r == NULL || st != SHP_OK || g == NULL) {
        /* a stripe refused is no error: operations go on without it */
        shp_log(rel.stripe ? SHP_LOG_INFO : SHP_LOG_ERROR, NULL,
                "cannot create a %s of %d: %s", rel.stripe ? "stripe" : "group",
                size,
                r ? shp_json_opt_str(r, "error", shp_status_str(st))
                  : shp_status_str(st));
        json_decref(r);
        return coll_status_to_sharp(st, SHARP_COLL_EGROUP_ALLOC);
    }
    *text = json_dumps(g, JSON_COMPACT);
    json_decref(r);
    return *text ? SHARP_COLL_SUCCESS : SHARP_COLL_ENOMEM;
}

/* the leaf AN's transport: tcp (if it does not say), verbs or shm */
static int leaf_transport(const json_t *me, const shp_tp_ops_t **ops)
{
    const char *t = shp_json_opt_str(me, "transport", "tcp");
    *ops = shp_tp_find(t);
    if (*ops == NULL || *ops == &shp_tp_udp_ops) {
        shp_error("the leaf AN's transport %s is not known here", t);
        return 0;
    }
    return 1;
}

/* every member: its place in the group */
static int group_parse(coll_comm_t *comm, const char *text)
{
    json_t *g = json_loads(text, 0, NULL), *members, *me;
    const char *addr, *dist, *maddr;
    uint64_t gid;
    int64_t tree, osts, payload, child;
    int rc = SHARP_COLL_EGROUP_ALLOC;

    if (g != NULL && shp_json_get_u64(g, "group_id", &gid, NULL) == SHP_OK &&
        shp_json_get_int(g, "tree_id", 0, 65535, &tree, NULL) == SHP_OK &&
        shp_json_get_int(g, "osts", 1, 4096, &osts, NULL) == SHP_OK &&
        shp_json_get_int(g, "payload", 1, 1 << 24, &payload, NULL) == SHP_OK &&
        shp_json_get_str(g, "dist", &dist, NULL) == SHP_OK &&
        shp_json_get_array(g, "members", &members, NULL) == SHP_OK &&
        json_array_size(members) == (size_t)comm->size &&
        (me = json_array_get(members, (size_t)comm->rank)) != NULL &&
        shp_json_get_str(me, "addr", &addr, NULL) == SHP_OK &&
        shp_json_get_int(me, "child_index", 0, 1 << 20, &child, NULL) ==
            SHP_OK &&
        strlen(addr) < sizeof(comm->leaf) &&
        leaf_transport(me, &comm->rc_ops)) {
        maddr = shp_json_opt_str(g, "mcast_addr", "");
        comm->group_id = (uint32_t)gid;
        comm->tree_id = (uint16_t)tree;
        comm->osts = (unsigned)osts;
        comm->payload = (uint32_t)payload;
        comm->child = (unsigned)child;
        snprintf(comm->leaf, sizeof(comm->leaf), "%s", addr);
        snprintf(comm->mcast_addr, sizeof(comm->mcast_addr), "%s", maddr);
        comm->mcast = strcmp(dist, "rc") != 0 && maddr[0] != '\0';
        rc = SHARP_COLL_SUCCESS;
    }
    json_decref(g);
    return rc;
}

/* The context's transport of provider `ops`, brought up on first use;
 * NULL if it cannot be. */
static shp_tp_t *tp_get(coll_ctx_t *ctx, const shp_tp_ops_t *ops)
{
    static const shp_tp_ops_t *const providers[COLL_NTP] = {
        &shp_tp_tcp_ops, &shp_tp_udp_ops, &shp_tp_verbs_ops, &shp_tp_shm_ops};
    const char *ip = ctx->cfg.local_ip[0] ? ctx->cfg.local_ip : NULL;
    int i = 0;
    while (i < COLL_NTP - 1 && providers[i] != ops) {
        i++;
    }
    /* the largest payload an AN may send: its limit (64 KiB by default);
     * over shm 256 KiB, which sizes its rings (1 MiB each way) */
    uint32_t max = ops == &shp_tp_shm_ops ? 256u << 10 : 1u << 20;
    if (!ctx->tps_up[i] &&
        shp_tp_init(&ctx->tps[i], ops, ctx->loop, max, ip) == SHP_OK) {
        ctx->tps_up[i] = 1;
        ctx->tps[i].shm.trust_uid = ctx->sd_uid; /* besides root and us */
    }
    return ctx->tps_up[i] ? &ctx->tps[i] : NULL;
}

/* connect to the leaf AN and join; multicast too if offered */
static int group_join(coll_comm_t *comm)
{
    coll_ctx_t *ctx = comm->ctx;
    uint64_t deadline =
        shp_time_ns() + (uint64_t)ctx->cfg.connect_timeout_ms * 1000000u;

    comm->depth =
        ctx->cfg.pipeline_depth && ctx->cfg.pipeline_depth < comm->osts
            ? ctx->cfg.pipeline_depth
            : comm->osts;
    /* free bcasts: the members' rule that keeps the ANs' slots safe
     * (protocol/wire.h) wants osts >= SYNC */
    size_t fm = ctx->cfg.tree_bcast && comm->osts >= SHP_WIRE_FREE_SYNC
                    ? ctx->cfg.free_bcast_max
                    : 0;
    fm = fm < SHP_WIRE_FREE_MAX ? fm : SHP_WIRE_FREE_MAX;
    comm->free_max = (uint32_t)(fm < comm->payload ? fm : comm->payload);
    comm->win = calloc(comm->osts, sizeof(*comm->win));
    comm->stage = malloc(comm->payload);
    if (comm->win == NULL || comm->stage == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    /* the leaf's transport: tcp or shm (multicast by udp), or verbs (RC and
     * UD) */
    const shp_tp_ops_t *rc = comm->rc_ops;
    shp_tp_t *tp = tp_get(ctx, rc), *mtp;
    if (tp == NULL) {
        shp_error("group %u: no %s transport here", comm->group_id, rc->name);
        return SHARP_COLL_ECONN_TREE;
    }
    if (comm->mcast && ctx->cfg.enable_mcast_target) {
        shp_wire_mac_key(ctx->job_key, comm->tree_id, comm->group_id,
                         comm->mac_key);
        if ((mtp = tp_get(ctx, shp_tp_mcast_ops(rc))) == NULL ||
            mtp->ops->mcast_join(mtp, comm->mcast_addr, &coll_ep_cbs, comm,
                                 &comm->mep) != SHP_OK) {
            shp_error("group %u: cannot join multicast %s", comm->group_id,
                      comm->mcast_addr);
            return SHARP_COLL_EGROUP_MCAST;
        }
    }
    comm->join_status = SHP_INPROGRESS;
    if (tp->ops->connect(tp, comm->leaf, &coll_ep_cbs, comm, &comm->ep) !=
        SHP_OK) {
        shp_error("group %u: cannot connect to the leaf AN at %s",
                  comm->group_id, comm->leaf);
        comm->ep = NULL;
        return SHARP_COLL_ECONN_TREE;
    }
    while (comm->join_status == SHP_INPROGRESS && shp_time_ns() < deadline) {
        coll_progress_once(ctx, 1);
    }
    if (comm->join_status != SHP_OK) {
        shp_error("group %u: joining at %s failed: %s", comm->group_id,
                  comm->leaf,
                  comm->join_status == SHP_INPROGRESS
                      ? "no answer"
                      : shp_status_str(comm->join_status));
        return comm->ep == NULL ? SHARP_COLL_ECONN_TREE
                                : SHARP_COLL_EGROUP_JOIN;
    }
    return SHARP_COLL_SUCCESS;
}

static void comm_free(coll_comm_t *comm)
{
    shp_tp_ep_t *ep = comm->ep, *mep = comm->mep;

    comm->destroying = 1;
    /* no notification may find it from here on */
    coll_member_remove(comm->ctx, &comm->member);
    comm->ep = comm->mep = NULL;
    if (ep != NULL) {
        ep->arg = NULL;
        shp_tp_close(ep);
    }
    if (mep != NULL) {
        mep->arg = NULL;
        shp_tp_close(mep);
    }
    free(comm->win);
    free(comm->stage);
    free(comm->sparse);
    free(comm->early);
    free(comm);
}

/* what the context calls (coll_member_ops_t) */
static int member_tick(coll_member_t *m, uint64_t now)
{
    return coll_comm_tick(coll_comm_of(m), now);
}

static void member_fail(coll_member_t *m, shp_status_t st, const char *why)
{
    coll_comm_fail(coll_comm_of(m), st, why);
}

static void member_destroy(coll_member_t *m)
{
    (void)sharp_coll_comm_destroy(coll_comm_of(m));
}

static const coll_member_ops_t member_ops = {member_tick, member_fail,
                                             member_destroy};

/* a stripe is destroyed with its communicator */
static void stripe_destroy(coll_member_t *m)
{
    coll_comm_t *comm = coll_comm_of(m);
    (void)sharp_coll_comm_destroy(comm->parent ? comm->parent : comm);
}

static const coll_member_ops_t stripe_ops = {member_tick, member_fail,
                                             stripe_destroy};

/* failed: the group failed before (the manager counts what guarded it,
 * as when it revokes one: a communicator may have moved onto its standby
 * before the manager saw the AN's loss) */
static void group_destroy(coll_ctx_t *ctx, uint32_t gid, int failed)
{
    coll_sd_job_request(
        ctx, "group_destroy",
        json_pack("{s:I, s:b}", "group_id", (json_int_t)gid, "failed", failed));
}

/* the group's description from rank 0 to every member: hdr[1] bytes
 * (hdr[0] the status so far, updated); every member takes part in the
 * bcast, even without memory */
static char *group_text_bcast(coll_ctx_t *ctx, void *oob, int rank,
                              int32_t hdr[2], char *text)
{
    if (rank != 0) {
        text = calloc(1, (size_t)hdr[1]);
    }
    char dummy;
    if (coll_oob_bcast(ctx, oob, text ? text : &dummy, text ? hdr[1] : 1, 0) !=
            SHARP_COLL_SUCCESS ||
        text == NULL) {
        hdr[0] = text ? SHARP_COLL_EOOB : SHARP_COLL_ENOMEM;
    } else {
        text[hdr[1] - 1] = '\0';
    }
    return text;
}

/* Every member's host to rank 0, which creates the group; its description
 * to all (*text, or NULL).  status: this member's so far; the result:
 * everyone's (SHARP_COLL_EOOB: the out-of-band hooks failed). */
static int group_text(coll_ctx_t *ctx,
                      const struct sharp_coll_comm_init_spec *spec, int status,
                      coll_rel_t rel, char **text)
{
    int32_t hdr[2] = {status, 0};
    char *hosts = NULL, mine[SHP_HOST_MAX] = {0};

    *text = NULL;
    snprintf(mine, sizeof(mine), "%s", ctx->host);
    if (spec->rank == 0) {
        hosts = calloc((size_t)spec->size, SHP_HOST_MAX);
        if (hosts == NULL) {
            hdr[0] = SHARP_COLL_ENOMEM;
        }
    }
    int rc = coll_oob_gather(ctx, spec->oob_ctx, 0, mine, hosts ? hosts : mine,
                             SHP_HOST_MAX);
    if (rc != SHARP_COLL_SUCCESS) {
        hdr[0] = rc;
    }
    if (spec->rank == 0 && hdr[0] == SHARP_COLL_SUCCESS) {
        coll_lock(ctx);
        hdr[0] = group_create(ctx, hosts, spec->size, rel, text);
        coll_unlock(ctx);
        hdr[1] = *text ? (int32_t)strlen(*text) + 1 : 0;
    }
    free(hosts);
    if (coll_oob_bcast(ctx, spec->oob_ctx, hdr, sizeof(hdr), 0) !=
        SHARP_COLL_SUCCESS) {
        hdr[0] = SHARP_COLL_EOOB;
        hdr[1] = 0;
    }
    if (hdr[1] > 0) {
        *text = group_text_bcast(ctx, spec->oob_ctx, spec->rank, hdr, *text);
    }
    return hdr[0];
}

/* this member's place in the group, a member of the context's list, joined
 * at its leaf AN */
static int comm_join(coll_comm_t *comm, const char *text)
{
    int rc = group_parse(comm, text);
    if (rc == SHARP_COLL_SUCCESS) {
        comm->member.ops = &member_ops;
        comm->member.group_id = comm->group_id;
        coll_member_add(comm->ctx, &comm->member);
        rc = group_join(comm);
    }
    return rc;
}

/* Making a group: the out-of-band exchanges (the caller's collectives
 * over its communicator) run without the context's lock, which is taken
 * only to ask sharpd and to join the leaf AN.  So threads may make groups
 * on different communicators at once, in any order across the members: a
 * member inside one exchange never holds back another thread's (holding
 * the lock through them, two threads that began two groups in opposite
 * orders on two members waited for each other for ever). */
static int comm_init(struct sharp_coll_context *ctx,
                     struct sharp_coll_comm_init_spec *spec, coll_rel_t rel,
                     struct sharp_coll_comm **out)
{
    char *text;

    if (ctx == NULL || spec == NULL || out == NULL || spec->size <= 0 ||
        spec->rank < 0 || spec->rank >= spec->size) {
        return SHARP_COLL_EINVAL;
    }
    *out = NULL;
    coll_comm_t *comm = calloc(1, sizeof(*comm));
    int st = comm == NULL ? SHARP_COLL_ENOMEM : SHARP_COLL_SUCCESS;
    if (comm != NULL) {
        comm->ctx = ctx;
        comm->rank = spec->rank;
        comm->size = spec->size;
    }
    coll_lock(ctx);
    if (ctx->job_failed != SHP_OK) {
        st = SHARP_COLL_EJOB_CREATE;
    }
    coll_unlock(ctx);
    st = group_text(ctx, spec, st, rel, &text);
    int rc = st;
    if (rc == SHARP_COLL_SUCCESS && comm != NULL) {
        coll_lock(ctx);
        rc = comm_join(comm, text);
        coll_unlock(ctx);
    }
    free(text);
    if (st != SHARP_COLL_EOOB) {
        int all = coll_agree(ctx, spec->oob_ctx, spec->rank, spec->size, rc);
        rc = rc != SHARP_COLL_SUCCESS ? rc : all;
    }
    if (rc != SHARP_COLL_SUCCESS) {
        if (comm != NULL) {
            coll_lock(ctx);
            if (spec->rank == 0 && comm->group_id != 0) {
                group_destroy(ctx, comm->group_id, 0);
            }
            comm_free(comm);
            coll_unlock(ctx);
        }
        return rc;
    }
    shp_log(SHP_LOG_INFO, NULL,
            "group %u: rank %d of %d, tree %u, leaf AN %s child %u, %u "
            "OSTs x %u bytes%s",
            comm->group_id, comm->rank, comm->size, comm->tree_id, comm->leaf,
            comm->child, comm->osts, comm->payload,
            comm->mep ? ", multicast results" : "");
    *out = comm;
    return SHARP_COLL_SUCCESS;
}

/* A new communicator's stripes (SHARP_COLL_STRIPES), each a group over the
 * same members that the manager places away from comm's ANs.  Making one
 * is collective and agreed, so every member stops at the same one: a
 * stripe refused (no tree apart, the job's groups) ends the making, and
 * what was made is kept. */
static void stripes_init(struct sharp_coll_context *ctx,
                         struct sharp_coll_comm_init_spec *spec,
                         coll_comm_t *comm)
{
    coll_comm_t *s;
    unsigned n = 1;
    while (n < ctx->cfg.stripes && spec->size > 1 &&
           comm_init(ctx, spec, (coll_rel_t){comm->group_id, 1}, &s) ==
               SHARP_COLL_SUCCESS) {
        coll_lock(ctx);
        s->parent = comm;
        s->member.ops = &stripe_ops;
        comm->stripes[0] = comm;
        comm->stripes[n++] = s;
        comm->nstripes = n;
        coll_unlock(ctx);
    }
}

SHP_API int sharp_coll_comm_init(struct sharp_coll_context *ctx,
                                 struct sharp_coll_comm_init_spec *spec,
                                 struct sharp_coll_comm **out)
{
    int rc = comm_init(ctx, spec, (coll_rel_t){0, 0}, out);
    if (rc == SHARP_COLL_SUCCESS) {
        stripes_init(ctx, spec, *out);
    }
    return rc;
}

SHP_API int sharp_coll_comm_init_standby(struct sharp_coll_context *ctx,
                                         struct sharp_coll_comm_init_spec *spec,
                                         struct sharp_coll_comm *primary,
                                         struct sharp_coll_comm **out)
{
    if (primary == NULL || primary->group_id == 0) {
        return SHARP_COLL_EINVAL;
    }
    return comm_init(ctx, spec, (coll_rel_t){primary->group_id, 0}, out);
}

/*
 * Destroying a group: every member sends a last barrier and leaves at once
 * (group_leave, echoed by its leaf AN: from then on its link closing is not
 * a failure).  Only rank 0 waits for the barrier's result: it comes once
 * every member has sent its barrier, i.e. once every member is done with
 * every earlier operation (they are complete when destroy is called), so
 * rank 0 may then remove the group at the manager without cutting off a
 * result still on its way to someone.  (Waiting for the barrier everywhere
 * and then removing it would race with the result's last hops.)
 */
static int comm_destroy(coll_comm_t *comm)
{
    coll_ctx_t *ctx = comm->ctx;
    uint64_t wait_ns =
        (uint64_t)ctx->cfg.connect_timeout_ms * SHP_NSEC_PER_MSEC;
    coll_req_t *r = NULL;
    coll_lock(ctx);
    comm->destroying = 1;
    int failed = comm->failed != SHP_OK; /* (before the destroy's own) */
    if (comm->failed == SHP_OK && (r = coll_barrier_req()) != NULL) {
        void *h = r;
        if (coll_post(comm, r, &h) != SHARP_COLL_SUCCESS) {
            r = NULL; /* coll_post freed it */
        }
    }
    if (r != NULL && comm->rank == 0) {
        /* bounded: a member that never comes must not hang the others */
        uint64_t end = shp_time_ns() + 2 * wait_ns;
        while (!r->complete && shp_time_ns() < end) {
            coll_progress_once(ctx, 1);
            coll_let_others_in(ctx);
        }
        if (!r->complete) {
            shp_warn("group %u: not every member came to destroy it",
                     comm->group_id);
            coll_comm_fail(comm, SHP_ERR_TIMED_OUT,
                           "destroy barrier timed out");
        }
    }
    if (comm->failed == SHP_OK && comm->ep != NULL) {
        shp_wire_hdr_t h;
        uint64_t end = shp_time_ns() + wait_ns;
        shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_LEAVE, comm->tree_id,
                          comm->group_id, comm->next_seq);
        if (shp_tp_send(comm->ep, &h, NULL) == SHP_OK) {
            comm->leaving = 1;
            while (!comm->left && comm->failed == SHP_OK &&
                   shp_time_ns() < end) {
                coll_progress_once(ctx, 1);
                coll_let_others_in(ctx);
            }
        }
    }
    uint32_t gid = comm->group_id;
    int rank = comm->rank;
    comm_free(comm); /* the barrier's slot goes with it */
    coll_req_release(r);
    if (rank == 0 && ctx->sd_up && ctx->job_failed == SHP_OK) {
        group_destroy(ctx, gid, failed);
    }
    coll_unlock(ctx);
    return SHARP_COLL_SUCCESS;
}

/* A communicator's stripes first (taken from it first: none fails it
 * while it goes), then itself; a stripe named is its communicator. */
SHP_API int sharp_coll_comm_destroy(struct sharp_coll_comm *comm)
{
    coll_comm_t *stripes[COLL_MAX_STRIPES];
    unsigned n;
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_lock(comm->ctx);
    if (comm->parent != NULL) {
        comm = comm->parent;
    }
    n = comm->nstripes;
    for (unsigned i = 1; i < n; i++) {
        stripes[i] = comm->stripes[i];
        stripes[i]->parent = NULL;
    }
    comm->nstripes = 0;
    coll_unlock(comm->ctx);
    for (unsigned i = 1; i < n; i++) {
        comm_destroy(stripes[i]);
    }
    return comm_destroy(comm);
}

/* how far apart comm's members may be (free bcasts: coll_comm.c) */
SHP_API int sharp_coll_comm_window(struct sharp_coll_comm *comm,
                                   size_t *bcast_max, unsigned *ops_apart)
{
    if (comm == NULL || bcast_max == NULL || ops_apart == NULL) {
        return SHARP_COLL_EINVAL;
    }
    *bcast_max = comm->free_max;
    *ops_apart = comm->free_max > 0 ? SHP_WIRE_FREE_SYNC : 0;
    return SHARP_COLL_SUCCESS;
}

/* Any thread, at any time while comm exists, even while another thread
 * waits in it (coll_member_cancel): the loop's thread fails the
 * communicator (its link closed: the group fails in the network too). */
SHP_API int sharp_coll_comm_cancel(struct sharp_coll_comm *comm)
{
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_member_cancel(comm->ctx, &comm->member);
    return SHARP_COLL_SUCCESS;
}
