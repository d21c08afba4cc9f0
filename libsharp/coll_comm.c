/*
 * libsharp_coll: communicators and collectives.
 *
 * Every collective is a stream of bytes cut into fragments of at most the
 * group's payload per operation; each fragment is one aggregation operation
 * (one sequence number) on the tree, at most `depth` of them in flight.
 * What differs between collectives is only which bytes of the stream a
 * member contributes (the rest are zeros) and which bytes of the result it
 * keeps:
 *
 *   allreduce       sends [0, n), keeps [0, n)
 *   reduce          sends [0, n), keeps [0, n) at the root, nothing elsewhere
 *   reduce-scatter  sends [0, size x n), keeps block [rank x n, (rank+1) x n)
 *   bcast           the root sends [0, n) (others zeros), BOR on bytes
 *   allgather       rank r sends [r x n, (r+1) x n) (zeros elsewhere), BOR
 *   barrier         one operation without payload
 *
 * A fragment's result comes back over RC or by multicast (whichever first;
 * a missing one is asked for again after retrans_timeout).  A failed group
 * (an error from the AN, a lost connection, a revocation by the manager, a
 * timeout) fails every pending and later operation of the communicator.
 */
#include "libsharp/coll_comm.h"

#include "protocol/ctl.h"
#include "reduce/exact.h"
#include "core/log.h"
#include "core/time.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Failing ---------------------------------------------------------------- */

static void req_finish(coll_req_t *r, int status)
{
    if (!r->complete) {
        r->complete = 1;
        r->status = status;
        if (status != SHARP_COLL_SUCCESS) {
            r->comm->ctx->stats.errors++;
        } else if (r->dst_iov.buf != NULL) { /* an IOV result */
            size_t off = 0;
            for (unsigned i = 0; i < r->dst_iov.n; i++) {
                memcpy(r->dst_iov.v[i].ptr, r->dst_iov.buf + off,
                       r->dst_iov.v[i].length);
                off += r->dst_iov.v[i].length;
            }
        }
    }
}

/* a request and the buffers it owns */
static void req_release(coll_req_t *r)
{
    if (r != NULL) {
        free(r->src_iov.buf);
        free(r->dst_iov.buf);
        free(r);
    }
}

void coll_comm_fail(coll_comm_t *comm, shp_status_t st, const char *why)
{
    if (comm->failed != SHP_OK) {
        return;
    }
    comm->failed = st;
    if (!comm->destroying) {
        shp_error("group %u: %s (%s): pending and later operations fail",
                  comm->group_id, why, shp_status_str(st));
    }
    for (unsigned i = 0; i < comm->osts; i++) {
        if (comm->win[i].busy) {
            req_finish(comm->win[i].req, SHARP_COLL_ERROR);
            comm->win[i].busy = 0;
        }
    }
    for (coll_req_t *r = comm->queue; r != NULL; r = r->next) {
        req_finish(r, SHARP_COLL_ERROR);
    }
    comm->queue = comm->queue_tail = NULL;
    if (comm->ep != NULL) {
        shp_tp_close(comm->ep);
    }
}

/* Sending -------------------------------------------------------------------- */

static void send_frag(coll_comm_t *comm, coll_req_t *r)
{
    coll_frag_t *f = &comm->win[comm->next_seq % comm->osts];
    shp_wire_hdr_t h;
    size_t off = r->sent * (size_t)r->per_frag * r->es;
    size_t left = r->total - off;
    uint32_t count = r->barrier ? 0 : (uint32_t)(left / r->es);
    const void *payload = NULL;

    if (count > r->per_frag) {
        count = r->per_frag;
    }
    size_t len = (size_t)count * r->es;
    if (r->barrier) {
        shp_wire_hdr_init(&h, SHP_WIRE_OP_AGG_REQ, comm->tree_id,
                          comm->group_id, comm->next_seq);
        h.flags = SHP_WIRE_F_BARRIER;
    } else {
        shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, comm->tree_id,
                              comm->group_id, comm->next_seq, &r->desc, count);
        if (r->lanes) { /* exact mode: count int64 lanes, whole elements */
            h.flags |= SHP_WIRE_F_EXACT;
            h.lanes = r->lanes;
            h.count = count * r->lanes;
            h.payload_len = (uint32_t)len;
        }
        if (off >= r->s_lo && off + len <= r->s_hi) {
            payload = r->src + (off - r->s_lo); /* straight from the user */
        } else {
            /* zeros, and what overlaps the member's own bytes */
            size_t lo = off > r->s_lo ? off : r->s_lo;
            size_t hi = off + len < r->s_hi ? off + len : r->s_hi;
            memset(comm->stage, 0, len);
            if (lo < hi) {
                memcpy(comm->stage + (lo - off), r->src + (lo - r->s_lo),
                       hi - lo);
            }
            payload = comm->stage;
        }
    }
    *f = (coll_frag_t){.req = r, .off = off, .count = count, .busy = 1};
    f->sent_ns = f->asked_ns = shp_time_ns();
    r->sent++;
    comm->next_seq++;
    comm->ctx->stats.frags++;
    if (shp_tp_send(comm->ep, &h, payload) != SHP_OK) {
        coll_comm_fail(comm, SHP_ERR_CONN_RESET, "cannot send to the leaf AN");
    }
}

static void pump(coll_comm_t *comm)
{
    while (comm->failed == SHP_OK && comm->queue != NULL &&
           comm->next_seq - comm->done_seq < comm->depth) {
        coll_req_t *r = comm->queue;
        send_frag(comm, r);
        if (r->sent == r->nfrags && comm->queue == r) {
            comm->queue = r->next;
            if (comm->queue == NULL) {
                comm->queue_tail = NULL;
            }
        }
    }
    if (comm->next_seq != comm->done_seq) {
        coll_arm_tick(comm->ctx);
    }
}

/* Receiving ------------------------------------------------------------------ */

static void on_result(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                      const void *payload)
{
    uint32_t seq = hdr->seq;
    coll_frag_t *f = &comm->win[seq % comm->osts];

    if (seq - comm->done_seq >= comm->next_seq - comm->done_seq || !f->busy ||
        f->done) {
        return; /* a duplicate (RC and multicast), or not ours */
    }
    coll_req_t *r = f->req;
    size_t len = r->barrier ? 0 : (size_t)f->count * r->es;
    if (hdr->payload_len != len) {
        coll_comm_fail(comm, SHP_ERR_PROTO, "a result of the wrong size");
        return;
    }
    size_t lo = f->off > r->r_lo ? f->off : r->r_lo;
    size_t hi = f->off + len < r->r_hi ? f->off + len : r->r_hi;
    if (lo < hi) {
        memcpy(r->dst + (lo - r->r_lo),
               (const uint8_t *)payload + (lo - f->off), hi - lo);
    }
    if (hdr->flags & SHP_WIRE_F_MCAST) {
        comm->ctx->stats.mcast_results++;
        comm->mcast_got++;
    } else {
        comm->ctx->stats.rc_results++;
        comm->retrans_got += (hdr->flags & SHP_WIRE_F_RETRANS) != 0;
    }
    f->done = 1;
    if (++r->done == r->nfrags) {
        req_finish(r, SHARP_COLL_SUCCESS);
    }
    while (comm->done_seq != comm->next_seq &&
           comm->win[comm->done_seq % comm->osts].done) {
        comm->win[comm->done_seq % comm->osts].busy = 0;
        comm->done_seq++;
        comm->done_seq64++;
    }
    pump(comm);
}

/*
 * A datagram on the group's multicast address: anyone on the data network
 * can send one, so only a result whose tag verifies with the group's key
 * (docs/security.md) is taken, the rest dropped and counted.  Results
 * outside the window (late duplicates of RC ones) are not checked.
 */
static void on_mcast(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                     const void *payload)
{
    uint32_t seq = hdr->seq;
    if (hdr->opcode == SHP_WIRE_OP_AGG_RESULT &&
        seq - comm->done_seq >= comm->next_seq - comm->done_seq) {
        return;
    }
    uint64_t seq64 = comm->done_seq64 + (uint32_t)(seq - comm->done_seq);
    if (hdr->opcode != SHP_WIRE_OP_AGG_RESULT ||
        !(hdr->flags & SHP_WIRE_F_MCAST) ||
        (SHP_MCAST_MAC &&
         !shp_wire_mac_ok(comm->mac_key, seq64, hdr, payload))) {
        comm->ctx->stats.mcast_rejected++;
        shp_warn_sparse(1000,
                        "group %u: a multicast %s without a right tag: "
                        "dropped (forged?)",
                        comm->group_id, shp_wire_opcode_name(hdr->opcode));
        return;
    }
    shp_wire_hdr_t h = *hdr;
    h.payload_len -= SHP_MCAST_MAC ? SHP_WIRE_MAC_LEN : 0;
    if (comm->failed == SHP_OK) {
        on_result(comm, &h, payload);
    }
}

static void on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    coll_comm_t *comm = ep->arg;

    if (comm == NULL || hdr->group_id != comm->group_id) {
        return;
    }
    if (ep != comm->ep) {
        on_mcast(comm, hdr, payload);
        return;
    }
    switch (hdr->opcode) {
    case SHP_WIRE_OP_GROUP_JOIN_ACK:
        if (comm->join_status == SHP_INPROGRESS) {
            comm->join_status = hdr->status;
        }
        break;
    case SHP_WIRE_OP_GROUP_LEAVE: comm->left = 1; break;
    case SHP_WIRE_OP_AGG_RESULT:
        if (comm->failed == SHP_OK) {
            on_result(comm, hdr, payload);
        }
        break;
    case SHP_WIRE_OP_ERROR: {
        char why[SHP_WIRE_ERR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "the aggregation node says: %.*s",
                 (int)hdr->payload_len, (const char *)payload);
        if (comm->join_status == SHP_INPROGRESS) {
            comm->join_status = hdr->status ? hdr->status : SHP_ERR_PROTO;
        }
        coll_comm_fail(comm, hdr->status ? hdr->status : SHP_ERR_GROUP_FAILED,
                       why);
        break;
    }
    default: break;
    }
}

static void on_connect(shp_tp_ep_t *ep)
{
    coll_comm_t *comm = ep->arg;
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    if (comm == NULL || ep != comm->ep) {
        return; /* the multicast endpoint joined its group */
    }
    shp_wire_join_t join = {.job_id = comm->ctx->job_id,
                            .child_index = comm->child};
    shp_wire_hdr_t h;

    memcpy(join.job_key, comm->ctx->job_key, sizeof(join.job_key));
    shp_wire_join_pack(&join, payload);
    shp_wire_hdr_init(&h, SHP_WIRE_OP_GROUP_JOIN, comm->tree_id, comm->group_id,
                      0);
    h.payload_len = SHP_WIRE_JOIN_LEN;
    if (shp_tp_send(ep, &h, payload) != SHP_OK) {
        comm->join_status = SHP_ERR_CONN_RESET;
    }
}

static void on_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    coll_comm_t *comm = ep->arg;

    if (comm == NULL) {
        return;
    }
    if (ep == comm->mep) {
        comm->mep = NULL;
        return;
    }
    comm->ep = NULL;
    if (comm->join_status == SHP_INPROGRESS) {
        comm->join_status = reason != SHP_OK ? reason : SHP_ERR_CONN_RESET;
    }
    coll_comm_fail(comm, reason != SHP_OK ? reason : SHP_ERR_CONN_RESET,
                   "lost the leaf aggregation node");
}

static const shp_tp_ep_cbs_t ep_cbs = {on_msg, on_connect, on_close};

/* the retransmit requests and timeouts of comm's fragments in flight */
static void comm_tick(coll_comm_t *comm, uint64_t now)
{
    coll_ctx_t *ctx = comm->ctx;
    uint64_t rt = (uint64_t)ctx->cfg.retrans_ms * SHP_NSEC_PER_MSEC;

    if (comm->failed != SHP_OK) {
        return;
    }
    for (uint32_t s = comm->done_seq; s != comm->next_seq; s++) {
        coll_frag_t *f = &comm->win[s % comm->osts];
        if (!f->busy || f->done) {
            continue;
        }
        if (ctx->cfg.coll_timeout_ms > 0 &&
            now - f->sent_ns >
                (uint64_t)ctx->cfg.coll_timeout_ms * SHP_NSEC_PER_MSEC) {
            coll_comm_fail(comm, SHP_ERR_TIMED_OUT,
                           "an operation made no progress for coll_timeout");
            return;
        }
        /* only with multicast can a result go missing */
        if (comm->mep != NULL && !comm->leaving &&
            now - f->asked_ns > shp_wire_retrans_gap(rt, f->asks)) {
            shp_wire_hdr_t h;
            shp_wire_hdr_init(&h, SHP_WIRE_OP_RETRANS_REQ, comm->tree_id,
                              comm->group_id, s);
            if (comm->mcast_got == 0 &&
                comm->retrans_got >= SHP_WIRE_RC_ONLY_AFTER) {
                h.flags |= SHP_WIRE_F_RC_ONLY; /* multicast never came */
            }
            f->asked_ns = now;
            f->asks++;
            ctx->stats.retrans++;
            if (shp_tp_send(comm->ep, &h, NULL) != SHP_OK) {
                coll_comm_fail(comm, SHP_ERR_CONN_RESET,
                               "cannot send to the leaf AN");
                return;
            }
        }
    }
}

int coll_comm_tick(coll_comm_t *comm, uint64_t now)
{
    comm_tick(comm, now);
    return comm->failed == SHP_OK && comm->next_seq != comm->done_seq;
}

/* Communicators --------------------------------------------------------------- */

/* rank 0: the group over every member's host, as JSON text for the others */
static int group_create(coll_ctx_t *ctx, const char *hosts, int size,
                        char **text)
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
    if (!ctx->cfg.enable_mcast_target) {
        json_object_set_new(msg, "dist", json_string("rc"));
    } else if (ctx->cfg.group_is_target) {
        json_object_set_new(msg, "dist", json_string("mcast"));
    }
    json_t *r = coll_sd_call(ctx, msg, &st);
    json_t *g = r ? json_object_get(r, "group") : NULL;
    if (r == NULL || st != SHP_OK || g == NULL) {
        shp_error("cannot create a group of %d: %s", size,
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
            mtp->ops->mcast_join(mtp, comm->mcast_addr, &ep_cbs, comm,
                                 &comm->mep) != SHP_OK) {
            shp_error("group %u: cannot join multicast %s", comm->group_id,
                      comm->mcast_addr);
            return SHARP_COLL_EGROUP_MCAST;
        }
    }
    comm->join_status = SHP_INPROGRESS;
    if (tp->ops->connect(tp, comm->leaf, &ep_cbs, comm, &comm->ep) != SHP_OK) {
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

static void group_destroy(coll_ctx_t *ctx, uint32_t gid)
{
    coll_sd_job_request(ctx, "group_destroy",
                        json_pack("{s:I}", "group_id", (json_int_t)gid));
}

SHP_API int sharp_coll_comm_init(struct sharp_coll_context *ctx,
                                 struct sharp_coll_comm_init_spec *spec,
                                 struct sharp_coll_comm **out)
{
    coll_comm_t *comm;
    char *hosts = NULL, *text = NULL;
    int32_t hdr[2] = {SHARP_COLL_SUCCESS, 0};
    int rc;

    if (ctx == NULL || spec == NULL || out == NULL || spec->size <= 0 ||
        spec->rank < 0 || spec->rank >= spec->size) {
        return SHARP_COLL_EINVAL;
    }
    *out = NULL;
    coll_lock(ctx);
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        hdr[0] = SHARP_COLL_ENOMEM;
    } else {
        comm->ctx = ctx;
        comm->rank = spec->rank;
        comm->size = spec->size;
    }
    if (ctx->job_failed != SHP_OK) {
        hdr[0] = SHARP_COLL_EJOB_CREATE;
    }
    /* every member's host to rank 0, which creates the group */
    char mine[SHP_HOST_MAX] = {0};
    snprintf(mine, sizeof(mine), "%s", ctx->host);
    if (spec->rank == 0) {
        hosts = calloc((size_t)spec->size, SHP_HOST_MAX);
        if (hosts == NULL) {
            hdr[0] = SHARP_COLL_ENOMEM;
        }
    }
    rc = coll_oob_gather(ctx, spec->oob_ctx, 0, mine, hosts ? hosts : mine,
                         SHP_HOST_MAX);
    if (rc != SHARP_COLL_SUCCESS) {
        hdr[0] = rc;
    }
    if (spec->rank == 0 && hdr[0] == SHARP_COLL_SUCCESS) {
        hdr[0] = group_create(ctx, hosts, spec->size, &text);
        hdr[1] = text ? (int32_t)strlen(text) + 1 : 0;
    }
    free(hosts);
    if (coll_oob_bcast(ctx, spec->oob_ctx, hdr, sizeof(hdr), 0) !=
        SHARP_COLL_SUCCESS) {
        hdr[0] = SHARP_COLL_EOOB;
        hdr[1] = 0;
    }
    if (hdr[1] > 0) {
        if (spec->rank != 0) {
            text = calloc(1, (size_t)hdr[1]);
        }
        /* everyone takes part in the bcast, even without memory */
        char dummy;
        if (coll_oob_bcast(ctx, spec->oob_ctx, text ? text : &dummy,
                           text ? hdr[1] : 1, 0) != SHARP_COLL_SUCCESS ||
            text == NULL) {
            hdr[0] = text ? SHARP_COLL_EOOB : SHARP_COLL_ENOMEM;
        } else {
            text[hdr[1] - 1] = '\0';
        }
    }
    rc = hdr[0];
    if (rc == SHARP_COLL_SUCCESS && comm != NULL) {
        rc = group_parse(comm, text);
        if (rc == SHARP_COLL_SUCCESS) {
            comm->member.ops = &member_ops;
            comm->member.group_id = comm->group_id;
            coll_member_add(ctx, &comm->member);
            rc = group_join(comm);
        }
    }
    free(text);
    if (hdr[0] != SHARP_COLL_EOOB) {
        int all = coll_agree(ctx, spec->oob_ctx, spec->rank, spec->size, rc);
        rc = rc != SHARP_COLL_SUCCESS ? rc : all;
    }
    if (rc != SHARP_COLL_SUCCESS) {
        if (comm != NULL) {
            if (spec->rank == 0 && comm->group_id != 0) {
                group_destroy(ctx, comm->group_id);
            }
            comm_free(comm);
        }
        coll_unlock(ctx);
        return rc;
    }
    shp_log(SHP_LOG_INFO, NULL,
            "group %u: rank %d of %d, tree %u, leaf AN %s child %u, %u "
            "OSTs x %u bytes%s",
            comm->group_id, comm->rank, comm->size, comm->tree_id, comm->leaf,
            comm->child, comm->osts, comm->payload,
            comm->mep ? ", multicast results" : "");
    *out = comm;
    coll_unlock(ctx);
    return SHARP_COLL_SUCCESS;
}

static int post(coll_comm_t *comm, coll_req_t *r, void **handle);
static coll_req_t *barrier_req(void);
static void let_others_in(coll_ctx_t *ctx);

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
SHP_API int sharp_coll_comm_destroy(struct sharp_coll_comm *comm)
{
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_ctx_t *ctx = comm->ctx;
    uint64_t wait_ns =
        (uint64_t)ctx->cfg.connect_timeout_ms * SHP_NSEC_PER_MSEC;
    coll_req_t *r = NULL;
    coll_lock(ctx);
    comm->destroying = 1;
    if (comm->failed == SHP_OK && (r = barrier_req()) != NULL) {
        void *h = r;
        if (post(comm, r, &h) != SHARP_COLL_SUCCESS) {
            r = NULL; /* post freed it */
        }
    }
    if (r != NULL && comm->rank == 0) {
        /* bounded: a member that never comes must not hang the others */
        uint64_t end = shp_time_ns() + 2 * wait_ns;
        while (!r->complete && shp_time_ns() < end) {
            coll_progress_once(ctx, 1);
            let_others_in(ctx);
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
                let_others_in(ctx);
            }
        }
    }
    uint32_t gid = comm->group_id;
    int rank = comm->rank;
    comm_free(comm); /* the barrier's slot goes with it */
    req_release(r);
    if (rank == 0 && ctx->sd_up && ctx->job_failed == SHP_OK) {
        group_destroy(ctx, gid);
    }
    coll_unlock(ctx);
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

/* Requests ------------------------------------------------------------------- */

/* one operation without payload */
static coll_req_t *barrier_req(void)
{
    coll_req_t *r = calloc(1, sizeof(*r));
    if (r != NULL) {
        r->barrier = 1;
        r->nfrags = 1;
        r->es = 1;
    }
    return r;
}

static int post(coll_comm_t *comm, coll_req_t *r, void **handle)
{
    r->comm = comm;
    if (comm->failed != SHP_OK) {
        req_release(r);
        return SHARP_COLL_ERROR;
    }
    if (!r->barrier && r->es > comm->payload) {
        req_release(r);
        return SHARP_COLL_EINVAL;
    }
    comm->ctx->stats.ops++;
    comm->ctx->stats.bytes += r->total;
    if (!r->barrier) {
        r->per_frag = (uint32_t)(comm->payload / r->es);
        r->nfrags = (r->total / r->es + r->per_frag - 1) / r->per_frag;
    }
    if (r->nfrags == 0) {
        req_finish(r, SHARP_COLL_SUCCESS); /* nothing to reduce */
    } else {
        if (comm->queue_tail != NULL) {
            comm->queue_tail->next = r;
        } else {
            comm->queue = r;
        }
        comm->queue_tail = r;
        pump(comm);
    }
    *handle = r;
    return SHARP_COLL_SUCCESS;
}

/* Until r completes, with the context's lock held: it is let go between
 * turns of the loop when another thread waits for it, so that other
 * threads may post and progress too (a result that needs another thread's
 * post would never come otherwise).  When none waits, a yield per turn
 * only costs: a 1 MiB allreduce takes about a hundred turns, and the
 * yields were 13% of a member's CPU (perf, 8 members on 2 cores). */
static void let_others_in(coll_ctx_t *ctx)
{
    if (atomic_load(&ctx->lock_waiters) > 0) {
        coll_unlock(ctx);
        sched_yield();
        coll_lock(ctx);
    }
}

static void wait_complete(coll_ctx_t *ctx, coll_req_t *r)
{
    while (!r->complete) {
        coll_progress_once(ctx, 1);
        if (!r->complete) {
            let_others_in(ctx);
        }
    }
}

static int wait_req(coll_req_t *r)
{
    wait_complete(r->comm->ctx, r);
    int st = r->status;
    req_release(r);
    return st;
}

/* A buffer descriptor as one contiguous range.  An IOV of several entries
 * is gathered into a buffer of our own now and, for a result, scattered
 * back when the operation completes (so bytes the result does not cover
 * keep what they held). */
static int desc_ptr(const struct sharp_coll_data_desc *d, void **ptr,
                    size_t *len, coll_iov_t *own)
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

/* a reduction request from a reduce spec */
enum { K_ALLREDUCE, K_REDUCE, K_REDUCE_SCATTER };

static int reduce_req(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
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
    if ((rc = desc_ptr(&spec->sbuf_desc, &sp, &sl, &r->src_iov)) !=
            SHARP_COLL_SUCCESS ||
        (keep && (rc = desc_ptr(&spec->rbuf_desc, &rp, &rl, &r->dst_iov)) !=
                     SHARP_COLL_SUCCESS)) {
        req_release(r);
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
        req_release(r);
        return rc;
    }
    *out = r;
    return SHARP_COLL_SUCCESS;
}

static int run(coll_comm_t *comm, coll_req_t *r, int rc, void **handle)
{
    void *h = NULL;
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    rc = post(comm, r, &h);
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    if (handle != NULL) {
        *handle = h;
        return SHARP_COLL_SUCCESS;
    }
    return wait_req(h);
}

/* Exact sums (SHARP_OP_SUM_EXACT) --------------------------------------- */

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
    return run(comm, r, SHARP_COLL_SUCCESS, NULL);
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
    if ((rc = desc_ptr(&spec->sbuf_desc, &sp, &sl, &siov)) !=
            SHARP_COLL_SUCCESS ||
        (keep && (rc = desc_ptr(&spec->rbuf_desc, &rp, &rl, &diov)) !=
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
            size_t off = 0;
            for (unsigned i = 0; i < diov.n; i++) {
                memcpy(diov.v[i].ptr, diov.buf + off, diov.v[i].length);
                off += diov.v[i].length;
            }
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

static int do_exact(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                    int kind, int ncontrib, void **handle)
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
    return do_exact(comm, spec, K_ALLREDUCE, ncontrib, NULL);
}

static int do_reduce(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                     int kind, void **handle)
{
    coll_req_t *r = NULL;
    if (comm == NULL) {
        return SHARP_COLL_EINVAL;
    }
    if (spec != NULL && spec->op == SHARP_OP_SUM_EXACT) {
        return do_exact(comm, spec, kind, 1, handle);
    }
    coll_lock(comm->ctx);
    int rc = reduce_req(comm, spec, kind, &r);
    rc = run(comm, r, rc, handle);
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

/* bytes moved by BOR: bcast and allgather (r allocated by the caller) */
static int bytes_req(void *src, size_t s_lo, size_t s_hi, void *dst,
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
    return SHARP_COLL_SUCCESS;
}

static int do_bcast(coll_comm_t *comm, struct sharp_coll_bcast_spec *spec,
                    void **handle)
{
    coll_req_t *r = NULL;
    void *p;
    size_t len;
    int rc;

    if (comm == NULL || spec == NULL || spec->root < 0 ||
        spec->root >= comm->size) {
        return SHARP_COLL_EINVAL;
    }
    int root = spec->root == comm->rank;
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    /* the root's buffer is the source (an IOV gathered), the others' the
     * destination (an IOV scattered at the end) */
    if ((rc = desc_ptr(&spec->buf_desc, &p, &len,
                       root ? &r->src_iov : &r->dst_iov)) !=
        SHARP_COLL_SUCCESS) {
        req_release(r);
        return rc;
    }
    if (spec->size > 0 && (p == NULL || len < spec->size)) {
        req_release(r);
        return SHARP_COLL_EINVAL;
    }
    coll_lock(comm->ctx);
    rc = bytes_req(p, 0, root ? spec->size : 0, root ? NULL : p, spec->size, r);
    rc = run(comm, r, rc, handle);
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

/*
 * An allgather (docs/libsharp.md, "Buffers and lengths").  The whole
 * vector is `size` blocks of the send length; the call fills the window
 * [offset, offset + receive length) of it (offset 0 and a receive buffer
 * of the whole vector: the plain form; the window is cut where the vector
 * ends).  sbuf holds, from its first byte, the window's part of the
 * member's block (NCCL's CollNet plugin moves the pointer with the
 * window).  In place: sbuf is the member's block inside rbuf.
 */
static int do_allgather(coll_comm_t *comm, struct sharp_coll_gather_spec *spec,
                        void **handle)
{
    coll_req_t *r = NULL;
    void *sp, *rp;
    size_t blk, rl;
    int rc;

    if (comm == NULL || spec == NULL) {
        return SHARP_COLL_EINVAL;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    /* the block comes from the send buffer (size may be garbage) */
    if ((rc = desc_ptr(&spec->sbuf_desc, &sp, &blk, &r->src_iov)) !=
            SHARP_COLL_SUCCESS ||
        (rc = desc_ptr(&spec->rbuf_desc, &rp, &rl, &r->dst_iov)) !=
            SHARP_COLL_SUCCESS) {
        req_release(r);
        return rc;
    }
    size_t size = (size_t)comm->size, rank = (size_t)comm->rank;
    size_t whole = blk * size, wlo = spec->offset;
    if (blk > 0 && (sp == NULL || rp == NULL || whole / size != blk ||
                    wlo >= whole || rl == 0)) {
        req_release(r);
        return SHARP_COLL_EINVAL;
    }
    size_t total = blk == 0 ? 0 : (rl < whole - wlo ? rl : whole - wlo);
    size_t lo = rank * blk > wlo ? rank * blk : wlo;
    size_t hi = (rank + 1) * blk < wlo + total ? (rank + 1) * blk : wlo + total;
    rc = bytes_req(sp, lo < hi ? lo - wlo : 0, lo < hi ? hi - wlo : 0, rp,
                   total, r);
    if (!overlap_ok(r)) {
        req_release(r);
        return SHARP_COLL_EINVAL;
    }
    coll_lock(comm->ctx);
    rc = run(comm, r, rc, handle);
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
    coll_req_t *r = barrier_req();
    int rc = r ? run(comm, r, SHARP_COLL_SUCCESS, handle) : SHARP_COLL_ENOMEM;
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
    int st = wait_req(r);
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
    wait_complete(ctx, r);
    req_release(r);
    coll_unlock(ctx);
    return SHARP_COLL_SUCCESS;
}
