/*
 * libsharp_coll: a communicator's data path.
 *
 * Every collective is a stream of bytes cut into fragments of at most the
 * group's payload per operation; each fragment is one aggregation operation
 * (one sequence number) on the tree, at most `depth` of them in flight.
 * What differs between collectives is only which bytes of the stream a
 * member contributes (the rest are zeros) and which bytes of the result it
 * keeps (the request's ranges, coll_buf.c):
 *
 *   allreduce       sends [0, n), keeps [0, n)
 *   reduce          sends [0, n), keeps [0, n) at the root, nothing elsewhere
 *   reduce-scatter  sends [0, size x n), keeps block [rank x n, (rank+1) x n)
 *   bcast           the root sends [0, n), the others a header alone per
 *                   fragment, and no AN folds (tree_bcast; else the
 *                   others send zeros, BOR on bytes); a small one the
 *                   others send nothing for (free_bcast_max)
 *   allgather       rank r sends [r x n, (r+1) x n) (zeros elsewhere), BOR
 *   barrier         one operation without payload
 *
 * Here: posting a request (its fragments queued and sent as the window
 * allows), the results (over RC or by multicast, whichever first; a
 * missing one is asked for again after retrans_timeout, on the context's
 * tick), waiting, and failing.  A failed group (an error from the AN, a
 * lost connection, a revocation by the manager, a timeout) fails every
 * pending and later operation of the communicator.  A striped
 * communicator (coll_comm.h) sends a large request as a part per stripe,
 * each a request of its own on its stripe, and fails whole.  Setting a
 * group up and tearing it down: coll_group.c.
 */
#include "libsharp/coll_comm.h"
#include "libsharp/coll_sparse.h"

#include "core/log.h"
#include "core/time.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* The bytes [lo, hi) of a stream seen through its window [a, b) (a
 * fragment, a stripe's part): 1 if they meet, with [*plo, *phi) in the
 * window's offsets and *skip the bytes of [lo, hi) before the window;
 * 0 (nothing set) if not */
static int range_view(size_t lo, size_t hi, size_t a, size_t b, size_t *skip,
                      size_t *plo, size_t *phi)
{
    size_t from = lo > a ? lo : a, to = hi < b ? hi : b;
    if (from >= to) {
        return 0;
    }
    *skip = from - lo;
    *plo = from - a;
    *phi = to - a;
    return 1;
}

/* Failing ---------------------------------------------------------------- */

static void req_finish(coll_req_t *r, int status);

/* a part of a striped request done: the request is once all are, failed
 * if one failed */
static void part_finish(coll_req_t *part)
{
    coll_req_t *r = part->parent;
    if (part->status != SHARP_COLL_SUCCESS &&
        r->parts_status == SHARP_COLL_SUCCESS) {
        r->parts_status = part->status;
    }
    if (--r->parts_left == 0) {
        req_finish(r, r->parts_status);
    }
}

static void req_finish(coll_req_t *r, int status)
{
    if (!r->complete) {
        r->complete = 1;
        r->status = status;
        if (r->parent != NULL) {
            part_finish(r);
        } else if (status != SHARP_COLL_SUCCESS) {
            r->comm->ctx->stats.errors++;
        } else if (r->dst_iov.buf != NULL) { /* an IOV result */
            coll_iov_scatter(&r->dst_iov);
        }
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
    /* a striped communicator fails whole: its parts of every operation */
    if (comm->parent != NULL) {
        coll_comm_fail(comm->parent, st, "a stripe of it failed");
    }
    for (unsigned i = 1; i < comm->nstripes; i++) {
        coll_comm_fail(comm->stripes[i], st, "its communicator failed");
    }
}

/* Sending -------------------------------------------------------------------- */

/* fragment [off, off + len) of r as a request: header, and the payload
 * straight from the user or staged (zeros, and the member's own bytes) */
static const void *frag_msg(coll_comm_t *comm, coll_req_t *r, size_t off,
                            uint32_t count, shp_wire_hdr_t *h)
{
    size_t len = (size_t)count * r->es;

    if (r->barrier) {
        shp_wire_hdr_init(h, SHP_WIRE_OP_AGG_REQ, comm->tree_id, comm->group_id,
                          comm->next_seq);
        h->flags = SHP_WIRE_F_BARRIER;
        return NULL;
    }
    shp_wire_hdr_init_agg(h, SHP_WIRE_OP_AGG_REQ, comm->tree_id, comm->group_id,
                          comm->next_seq, &r->desc, count);
    h->flags |= r->bcast ? SHP_WIRE_F_BCAST : 0;
    if (r->lanes) { /* exact mode: count int64 lanes, whole elements */
        h->flags |= SHP_WIRE_F_EXACT;
        h->lanes = r->lanes;
        h->count = count * r->lanes;
        h->payload_len = (uint32_t)len;
    }
    if (len == 0) {
        return NULL;
    }
    if (off >= r->s_lo && off + len <= r->s_hi) { /* straight from the user */
        return coll_sparse_frag(comm, r, r->src + (off - r->s_lo), len, h);
    }
    size_t skip, lo, hi;
    comm->ctx->stats.pass_write += len;
    memset(comm->stage, 0, len);
    if (range_view(r->s_lo, r->s_hi, off, off + len, &skip, &lo, &hi)) {
        memcpy(comm->stage + lo, r->src + skip, hi - lo);
    }
    return coll_sparse_frag(comm, r, comm->stage, len, h);
}

static void take_result(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                        const void *payload);

/* whether r, at the communicator's next seq, is a free bcast (protocol/wire.h:
 * one fragment, small, and not at a seq every member sends) */
static int frag_free(const coll_comm_t *comm, const coll_req_t *r)
{
    return r->bcast && r->nfrags == 1 && r->total <= comm->free_max &&
           comm->next_seq % SHP_WIRE_FREE_SYNC != 0;
}

/* r's next fragment, the communicator's next operation (of a tree bcast
 * whose bytes this member does not have, a header alone, or nothing if
 * the bcast is free: its result may be here already) */
static void send_frag(coll_comm_t *comm, coll_req_t *r)
{
    uint32_t seq = comm->next_seq;
    coll_frag_t *f = &comm->win[seq % comm->osts];
    shp_wire_hdr_t h;
    size_t off = r->sent * (size_t)r->per_frag * r->es;
    size_t left = r->total - off;
    uint32_t count = r->barrier ? 0 : (uint32_t)(left / r->es);

    if (count > r->per_frag) {
        count = r->per_frag;
    }
    size_t len = (size_t)count * r->es;
    int none = r->bcast && !(off < r->s_hi && off + len > r->s_lo);
    int fr = frag_free(comm, r);
    const void *payload = frag_msg(comm, r, off, none ? 0 : count, &h);
    *f = (coll_frag_t){.req = r, .off = off, .count = count, .busy = 1};
    f->sent_ns = f->asked_ns = shp_time_ns();
    r->sent++;
    comm->next_seq++;
    comm->ctx->stats.frags++;
    comm->ctx->stats.free_bcasts += fr;
    if (fr && none) {
        coll_early_t *e =
            comm->early != NULL ? &comm->early[seq % SHP_WIRE_FREE_SYNC] : NULL;
        if (e != NULL && e->have && e->seq == seq) {
            e->have = 0;
            comm->ctx->stats.early_results++;
            take_result(comm, &e->hdr, e->data);
        }
        return; /* nothing to send: the root's data comes down */
    }
    h.flags |= fr ? SHP_WIRE_F_FREE : 0;
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

/* Whether seq is within the free bcasts' reach ahead of this member: a
 * result this early is kept (coll_early_t) */
static int ahead_ok(const coll_comm_t *comm, uint32_t seq)
{
    return comm->free_max > 0 && seq - comm->next_seq < SHP_WIRE_FREE_SYNC;
}

/* A free bcast's result before this member reached it: kept for its turn
 * (send_frag).  Only what a free bcast can be: flagged so, small. */
static void keep_early(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                       const void *payload)
{
    if (!(hdr->flags & SHP_WIRE_F_FREE) || hdr->payload_len == 0 ||
        hdr->payload_len > comm->free_max) {
        return;
    }
    if (comm->early == NULL &&
        (comm->early = calloc(SHP_WIRE_FREE_SYNC, sizeof(*comm->early))) ==
            NULL) {
        return; /* its retransmit request brings it again */
    }
    coll_early_t *e = &comm->early[hdr->seq % SHP_WIRE_FREE_SYNC];
    if (e->have && e->seq == hdr->seq) {
        return; /* a duplicate (RC and multicast) */
    }
    e->seq = hdr->seq;
    e->have = 1;
    e->hdr = *hdr;
    memcpy(e->data, payload, hdr->payload_len);
}

/* A result: into its request (no pump: the caller's) */
static void take_result(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                        const void *payload)
{
    uint32_t seq = hdr->seq;
    coll_frag_t *f = &comm->win[seq % comm->osts];

    if (seq - comm->done_seq >= comm->next_seq - comm->done_seq) {
        if (ahead_ok(comm, seq)) {
            keep_early(comm, hdr, payload);
        }
        return; /* not ours, or not yet */
    }
    if (!f->busy || f->done) {
        return; /* a duplicate (RC and multicast) */
    }
    coll_req_t *r = f->req;
    size_t len = r->barrier ? 0 : (size_t)f->count * r->es;
    size_t skip = 0, lo = 0, hi = 0;
    int keep =
        range_view(r->r_lo, r->r_hi, f->off, f->off + len, &skip, &lo, &hi);
    if (hdr->flags & SHP_WIRE_F_SPARSE) {
        if (coll_sparse_take(comm, hdr, payload, len,
                             keep ? r->dst + skip : NULL, lo, hi)) {
            coll_comm_fail(comm, SHP_ERR_PROTO, "a result of the wrong size");
            return;
        }
    } else if (hdr->payload_len != len) {
        coll_comm_fail(comm, SHP_ERR_PROTO, "a result of the wrong size");
        return;
    } else if (keep) {
        memcpy(r->dst + skip, (const uint8_t *)payload + lo, hi - lo);
    }
    comm->ctx->stats.pass_write += hi - lo;
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
}

static void on_result(coll_comm_t *comm, const shp_wire_hdr_t *hdr,
                      const void *payload)
{
    take_result(comm, hdr, payload);
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
        seq - comm->done_seq >= comm->next_seq - comm->done_seq &&
        !ahead_ok(comm, seq)) {
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
    comm->ctx->stats.pass_tag += SHP_MCAST_MAC ? h.payload_len : 0;
    if (comm->failed == SHP_OK) {
        on_result(comm, &h, payload);
    }
}

/* The leaf AN's nonce, first on the link: the join proves the job key over
 * it (the key itself never goes on the wire) */
static void on_nonce(coll_comm_t *comm, const void *nonce)
{
    uint8_t payload[SHP_WIRE_JOIN_LEN];
    shp_wire_hdr_t h;

    if (comm->join_sent) {
        return; /* one join a link */
    }
    comm->join_sent = 1;
    shp_wire_join_make(comm->ctx->job_key, nonce, comm->tree_id, comm->group_id,
                       comm->ctx->job_id, comm->child, &h, payload);
    if (shp_tp_send(comm->ep, &h, payload) != SHP_OK &&
        comm->join_status == SHP_INPROGRESS) {
        comm->join_status = SHP_ERR_CONN_RESET;
    }
}

static void on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    coll_comm_t *comm = ep->arg;

    if (comm != NULL && ep == comm->ep &&
        hdr->opcode == SHP_WIRE_OP_JOIN_NONCE) {
        on_nonce(comm, payload);
        return;
    }
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

/* no on_connect: the join waits for the AN's nonce (on_nonce) */
const shp_tp_ep_cbs_t coll_ep_cbs = {on_msg, NULL, on_close};

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

/* Requests ------------------------------------------------------------------- */

/* r's fragments by the communicator's payload; 0: r cannot be sent */
static int req_frags(coll_comm_t *comm, coll_req_t *r)
{
    r->comm = comm;
    if (!r->barrier) {
        if (r->es > comm->payload) {
            return 0;
        }
        r->per_frag = (uint32_t)(comm->payload / r->es);
        r->nfrags = (r->total / r->es + r->per_frag - 1) / r->per_frag;
    }
    return 1;
}

static void req_queue(coll_comm_t *comm, coll_req_t *r)
{
    if (comm->queue_tail != NULL) {
        comm->queue_tail->next = r;
    } else {
        comm->queue = r;
    }
    comm->queue_tail = r;
    pump(comm);
}

/* part (zeroed) as the bytes [a, b) of r's stream: r's buffers seen
 * through the part's own offsets */
static void part_view(coll_req_t *r, coll_req_t *part, size_t a, size_t b)
{
    size_t skip;
    part->desc = r->desc;
    part->es = r->es;
    part->lanes = r->lanes;
    part->bcast = r->bcast;
    part->total = b - a;
    part->parent = r;
    if (range_view(r->s_lo, r->s_hi, a, b, &skip, &part->s_lo, &part->s_hi)) {
        part->src = r->src + skip;
    }
    if (range_view(r->r_lo, r->r_hi, a, b, &skip, &part->r_lo, &part->r_hi)) {
        part->dst = r->dst + skip;
    }
}

/*
 * A large request over a striped communicator: cut at whole fragments
 * (the communicator's own) into a part per stripe, each part a request of
 * its stripe, all sent at once.  The cut depends on the sizes alone, so
 * every member cuts alike, and each element is reduced on one tree in
 * that tree's fixed order: the result is bitwise the same run to run.
 * Without memory for the parts the communicator fails (the others'
 * parts would wait for ours for ever otherwise).
 */
static void req_stripe(coll_comm_t *comm, coll_req_t *r)
{
    unsigned k =
        comm->nstripes < r->nfrags ? comm->nstripes : (unsigned)r->nfrags;
    size_t step = (size_t)r->per_frag * r->es;

    r->parts = calloc(k, sizeof(*r->parts));
    if (r->parts == NULL) {
        coll_comm_fail(comm, SHP_ERR_NO_MEMORY, "no memory to stripe");
        req_finish(r, SHARP_COLL_ENOMEM);
        return;
    }
    r->parts_left = k;
    comm->ctx->stats.striped++;
    shp_status_t failed = SHP_OK;
    for (unsigned i = 0; i < k; i++) {
        coll_req_t *part = &r->parts[i];
        size_t a = r->nfrags * i / k * step;
        size_t b = i + 1 == k ? r->total : r->nfrags * (i + 1) / k * step;
        part_view(r, part, a, b);
        if (!req_frags(comm->stripes[i], part)) {
            req_finish(part, SHARP_COLL_EINVAL);
        } else if (comm->stripes[i]->failed != SHP_OK) {
            failed = comm->stripes[i]->failed;
            req_finish(part, SHARP_COLL_ERROR);
        } else {
            req_queue(comm->stripes[i], part);
        }
    }
    if (failed != SHP_OK) { /* a stripe failed before it was ours */
        coll_comm_fail(comm, failed, "a stripe of it failed");
    }
}

int coll_post(coll_comm_t *comm, coll_req_t *r, void **handle)
{
    int rc = comm->failed != SHP_OK ? SHARP_COLL_ERROR
             : !req_frags(comm, r)  ? SHARP_COLL_EINVAL
                                    : SHARP_COLL_SUCCESS;
    if (rc != SHARP_COLL_SUCCESS) {
        coll_req_release(r);
        return rc;
    }
    comm->ctx->stats.ops++;
    comm->ctx->stats.bytes += r->total;
    r->bcast = r->bcast && comm->ctx->cfg.tree_bcast;
    if (r->nfrags == 0) {
        req_finish(r, SHARP_COLL_SUCCESS); /* nothing to reduce */
    } else if (comm->nstripes > 1 && !r->barrier && r->nfrags > 1 &&
               r->total >= comm->ctx->cfg.stripe_min) {
        req_stripe(comm, r);
    } else {
        req_queue(comm, r);
    }
    *handle = r;
    return SHARP_COLL_SUCCESS;
}

/* Until r completes, with the context's lock held: it is let go between
 * turns of the loop when another thread waits for it, so that other
 * threads may coll_post and progress too (a result that needs another thread's
 * coll_post would never come otherwise).  When none waits, a yield per turn
 * only costs: a 1 MiB allreduce takes about a hundred turns, and the
 * yields were 13% of a member's CPU (perf, 8 members on 2 cores). */
void coll_let_others_in(coll_ctx_t *ctx)
{
    if (atomic_load(&ctx->lock_waiters) > 0) {
        coll_unlock(ctx);
        sched_yield();
        coll_lock(ctx);
    }
}

void coll_wait_complete(coll_ctx_t *ctx, coll_req_t *r)
{
    while (!r->complete) {
        coll_progress_once(ctx, 1);
        if (!r->complete) {
            coll_let_others_in(ctx);
        }
    }
}

int coll_wait_req(coll_req_t *r)
{
    coll_wait_complete(r->comm->ctx, r);
    int st = r->status;
    coll_req_release(r);
    return st;
}

int coll_run(coll_comm_t *comm, coll_req_t *r, int rc, void **handle)
{
    void *h = NULL;
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    rc = coll_post(comm, r, &h);
    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    if (handle != NULL) {
        *handle = h;
        return SHARP_COLL_SUCCESS;
    }
    return coll_wait_req(h);
}
