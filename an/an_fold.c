/*
 * The aggregation node's data path: a child's operation (agg_req) is
 * checked against its group (sequence, quota window, size, exact-mode
 * lanes, the same datatype, op and count as the others') and folded
 * strictly in child order: the child next in order straight from the
 * receive buffer, one that arrives early from a copy (recycled buffers)
 * once the gap before it fills.  A folded operation goes up to the parent
 * as this AN's own agg_req, or at the top to distribution (an_dist.c).
 * Any error fails the whole group: every member sees an error, none a
 * hang.
 *
 * Operation slots: a group with a quota of `osts` outstanding operations has
 * 3 x osts slots, slot = seq mod 3 x osts.  A member calls s only after it
 * received the result of s - osts (its window), and a result of s - osts
 * exists only once every member called s - 2 x osts (a reduction needs
 * everyone's call of s - osts itself; a bcast waits at the top until
 * every member's credit is past s - 2 x osts: an/an_bcast.c).  So when
 * anything of s comes (a child's payload, a result, a retransmit
 * request), every member already holds the result of s - 3 x osts, the
 * slot's previous user: reusing it loses nothing anyone may still ask
 * for (docs/an.md).  A valid s also satisfies s < folded + 3 x osts,
 * where `folded` is the oldest operation not done here: a member that
 * had a result by multicast may be ahead of an AN its copy has not
 * reached.
 *
 * A bcast (SHP_WIRE_F_BCAST) is its root's data alone (an/an_bcast.c): the
 * other members send nothing for its seq, so a child may skip seqs.  A
 * skipped one must not be a reduction the others fold (that is a bcast
 * where they reduce: the group fails), and a reduction's slot is not
 * opened for a seq some child went past.
 */
#include "an/an_int.h"

#include "reduce/exact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *an_buf_get(shp_an_group_t *g)
{
    if (g->nfree > 0) {
        return g->free_bufs[--g->nfree];
    }
    return malloc(g->payload ? g->payload : 1);
}

static void an_fold_release(void *arg, unsigned child, const void *payload)
{
    shp_an_slot_t *s = arg;
    shp_an_group_t *g = s->group;

    if (s->copies[child] != NULL && s->copies[child] == payload) {
        an_buf_put(g, s->copies[child]);
        s->copies[child] = NULL;
    }
}

static void an_op_error(shp_an_group_t *g, const shp_wire_hdr_t *hdr,
                        shp_status_t status, const char *reason)
{
    shp_an_op_fail(g, hdr, status, reason);
}

static void an_fold_done(shp_an_group_t *g, shp_an_slot_t *s)
{
    shp_fold_cleanup(&s->fold);
    g->ops++;
    g->bytes += s->len;
    g->exact_ops += (s->flags & SHP_WIRE_F_EXACT) != 0;
    g->an->stats.ops++;
    if (g->is_top) {
        shp_an_distribute(g, s, 0);
        shp_an_advance(g);
        return;
    }
    shp_an_fold_up(g, s);
}

/* Whether child ci may go from its next_seq to seq: every seq it skips
 * (bcasts of other roots) must not be a reduction the others fold here */
static int an_skip_ok(shp_an_group_t *g, unsigned ci, uint32_t seq)
{
    uint32_t t = g->children[ci].next_seq;

    if (an_seq_diff(t, g->folded) < 0) {
        t = g->folded; /* before it, everything is done here */
    }
    for (; an_seq_diff(seq, t) > 0; t++) {
        const shp_an_slot_t *s = &g->slots[t % g->nslots];
        if (s->seq == t && s->state == SHP_AN_SLOT_FOLD) {
            return 0;
        }
    }
    return 1;
}

/* Whether child ci's operation hdr may be folded now: every member that
 * left the group was done with it, it is the child's next, within the
 * quota window, not above the group's size and (exact mode) with sound
 * lanes.  If not, the group failed. */
static inline int an_agg_ok(shp_an_group_t *g, unsigned ci,
                            const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_an_stats_t *st = &g->an->stats;

    /* only a group some member left pays for this check */
    for (unsigned k = 0; g->nleft > 0 && k < g->nchildren; k++) {
        if (g->children[k].left &&
            an_seq_diff(hdr->seq, g->children[k].next_seq) >= 0) {
            an_op_error(g, hdr, SHP_ERR_GROUP_FAILED,
                        "a member has left the group");
            return 0;
        }
    }
    if (an_seq_diff(hdr->seq, g->children[ci].next_seq) < 0) {
        st->err_seq_window++;
        an_op_error(g, hdr, SHP_ERR_SEQ_WINDOW, "sequence number out of order");
        return 0;
    }
    if (an_seq_diff(hdr->seq, g->folded) >= (int32_t)g->nslots) {
        st->err_seq_window++;
        an_op_error(g, hdr, SHP_ERR_SEQ_WINDOW,
                    "sequence number outside the quota window");
        return 0;
    }
    if (hdr->seq != g->children[ci].next_seq && !an_skip_ok(g, ci, hdr->seq)) {
        st->err_mismatch++;
        an_op_error(g, hdr, SHP_ERR_MISMATCH,
                    "a member skipped an operation the others reduce (a "
                    "bcast where they reduce?)");
        return 0;
    }
    if ((hdr->flags & SHP_WIRE_F_BCAST) && hdr->payload_len == 0) {
        st->err_protocol++;
        an_op_error(g, hdr, SHP_ERR_PROTO, "a bcast without data");
        return 0;
    }
    if (hdr->payload_len > g->payload) {
        st->err_malformed++;
        an_op_error(g, hdr, SHP_ERR_TOO_LARGE,
                    "payload above the group's size");
        return 0;
    }
    if ((hdr->flags & SHP_WIRE_F_EXACT) &&
        !shp_exact_lanes_ok(payload, hdr->payload_len / sizeof(int64_t))) {
        st->err_malformed++;
        an_op_error(g, hdr, SHP_ERR_PROTO,
                    "malformed exact-mode accumulator: a lane outside "
                    "[-2^52, 2^52)");
        return 0;
    }
    return 1;
}

/* Whether a later child's request agrees with the slot its operation's
 * first payload opened: the same mode, lanes, datatype, op and count */
static inline int an_slot_agrees(const shp_an_slot_t *s,
                                 const shp_wire_hdr_t *hdr,
                                 const shp_reduce_desc_t *desc)
{
    const uint16_t mode = SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT;

    return s->state == SHP_AN_SLOT_FOLD &&
           (s->flags & mode) == (hdr->flags & mode) && s->lanes == hdr->lanes &&
           ((s->flags & SHP_WIRE_F_BARRIER) ||
            (s->desc.dtype == desc->dtype && s->desc.op == desc->op &&
             s->desc.tag_dtype == desc->tag_dtype)) &&
           s->count == hdr->count;
}

/* The slot of operation hdr: (re)used by its first payload, or the one
 * open for it, which must agree.  NULL: the group failed. */
static inline shp_an_slot_t *an_agg_slot(shp_an_group_t *g,
                                         const shp_wire_hdr_t *hdr)
{
    shp_reduce_desc_t desc = {hdr->dtype, hdr->op, hdr->tag_dtype};
    shp_an_slot_t *s = &g->slots[hdr->seq % g->nslots];
    shp_status_t status;

    if (s->state != SHP_AN_SLOT_FREE && s->seq == hdr->seq) {
        if (!an_slot_agrees(s, hdr, &desc)) {
            g->an->stats.err_mismatch++;
            an_op_error(g, hdr, SHP_ERR_MISMATCH,
                        s->flags & SHP_WIRE_F_BCAST
                            ? "a reduction where another member bcasts"
                            : "datatype, op or count differs from the other "
                              "members'");
            return NULL;
        }
        return s;
    }
    /* first payload of this operation: nobody may have gone past it */
    if (an_seq_diff(g->max_next, hdr->seq) > 0) {
        g->an->stats.err_mismatch++;
        an_op_error(g, hdr, SHP_ERR_MISMATCH,
                    "a member skipped this operation (a bcast where the "
                    "others reduce?)");
        return NULL;
    }
    if (!shp_an_slot_take(g, s, hdr)) {
        return NULL;
    }
    s->flags = hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT);
    s->lanes = hdr->lanes;
    s->desc =
        (hdr->flags & SHP_WIRE_F_BARRIER)
            ? (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL}
            : desc;
    s->count = hdr->count;
    s->len = hdr->payload_len;
    status = shp_fold_init(&s->fold, &s->desc, s->count, s->acc, g->nchildren,
                           s->pending, an_fold_release, s);
    if (status != SHP_OK) {
        g->an->stats.err_mismatch++;
        an_op_error(g, hdr, status, "bad datatype or op");
        return NULL;
    }
    s->state = SHP_AN_SLOT_FOLD;
    return s;
}

/* Child ci's payload into slot s: folded now if it is next in order, else
 * copied until the children before it arrive */
static inline void an_agg_add(shp_an_group_t *g, shp_an_slot_t *s, unsigned ci,
                              const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_status_t status;

    shp_an_child_sent(g, ci, hdr->seq, 0);
    s->arrived++;
    if (ci == s->fold.next) {
        status = shp_fold_add(&s->fold, ci, payload);
    } else {
        uint8_t *copy = an_buf_get(g);
        if (copy == NULL) {
            an_op_error(g, hdr, SHP_ERR_NO_MEMORY, "out of memory");
            return;
        }
        if (s->len > 0) {
            memcpy(copy, payload, s->len);
        }
        s->copies[ci] = copy;
        status = shp_fold_add(&s->fold, ci, copy);
    }
    if (status < 0) {
        g->an->stats.err_protocol++;
        an_op_error(g, hdr, status, "duplicate payload");
        return;
    }
    if (shp_fold_done(&s->fold)) {
        an_fold_done(g, s);
    }
}

/* A child's operation (agg_req) */
void shp_an_agg_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                    const void *payload)
{
    shp_an_group_t *g;
    shp_an_slot_t *s;
    unsigned ci;

    g = shp_an_request_group(l, hdr, &ci);
    if (g == NULL || !an_agg_ok(g, ci, hdr, payload)) {
        return;
    }
    if (hdr->flags & SHP_WIRE_F_BCAST) {
        shp_an_bcast_req(g, ci, hdr, payload);
        return;
    }
    s = an_agg_slot(g, hdr);
    if (s != NULL) {
        an_agg_add(g, s, ci, hdr, payload);
    }
    if (g->held > 0 && g->is_top) {
        shp_an_release(g); /* its credit may let a bcast held go down */
    }
}
