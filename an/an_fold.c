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
 * 2 x osts + SHP_WIRE_FREE_SYNC slots, slot = seq mod nslots.  A child sends
 * seq s only after it received the result of s - osts, so s - osts was
 * produced at the top, and so was the last operation v <= s - osts that
 * every member sends (not a free bcast: v > s - osts - SHP_WIRE_FREE_SYNC),
 * so every member sent v and already holds every result up to v - osts: the
 * slot s reuses (s - nslots) is free of any obligation (docs/an.md).  The
 * window: a valid s satisfies s < folded + nslots, where `folded` is the
 * next operation to complete here, in order.
 *
 * A bcast (SHP_WIRE_F_BCAST) folds nothing: the root's data comes from one
 * child (its own, or the AN whose subtree holds it) and every other child
 * sends a header alone, which only says it is there; the operation goes
 * up or down with that data once every child has.  A free bcast
 * (SHP_WIRE_F_FREE) has no headers: it is complete here once the root's
 * data comes, and a child that sends a later operation first skipped it.
 * An AN whose subtree does not hold its root skips it too, once every
 * child is past it.  So operations complete out of order here; they go up
 * (or down) in order, each once every one before it has (an_advance).
 * The members' rule (a free bcast's seq is never a multiple of
 * SHP_WIRE_FREE_SYNC, and osts >= SHP_WIRE_FREE_SYNC) keeps every member
 * within SHP_WIRE_FREE_SYNC operations of every root: the slot rule above
 * counts them.  A member that skips an operation the others send, or
 * sends one the others skipped, fails the group (docs/an.md, "bcast").
 */
#include "an/an_int.h"

#include "reduce/exact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char text[160];

    snprintf(text, sizeof(text), "operation %u: %s", hdr->seq, reason);
    /* the operation cannot complete: the whole group fails, so that every
     * member sees an error rather than a hang */
    shp_an_group_fail(g, NULL, status, text);
}

/* Operation s, complete here and every one before it done: up to the
 * parent, or at the top down to the members */
static void an_op_up(shp_an_group_t *g, shp_an_slot_t *s)
{
    shp_wire_hdr_t h;

    if ((s->flags & SHP_WIRE_F_BCAST) && g->is_top && s->len == 0) {
        g->an->stats.err_mismatch++;
        shp_an_group_fail(g, NULL, SHP_ERR_MISMATCH,
                          "a bcast whose root nobody is");
        return;
    }
    g->ops++;
    g->bytes += s->len;
    g->exact_ops += (s->flags & SHP_WIRE_F_EXACT) != 0;
    g->an->stats.ops++;
    if (g->is_top) {
        shp_an_distribute(g, s, 0);
        return;
    }
    s->state = SHP_AN_SLOT_UP;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, g->tree_id, g->id, s->seq,
                          &s->desc, s->count);
    h.flags = s->flags;
    h.lanes = s->lanes;
    h.payload_len = s->len;
    shp_an_send(g->parent, &h, s->acc);
}

/* Whether every child is past `folded` (a child that left counts as past:
 * it sends nothing more); resumed where the last look stopped, as
 * children only go forward (g->scan is reset when folded moves) */
static int an_all_passed(shp_an_group_t *g)
{
    for (; g->scan < g->nchildren; g->scan++) {
        const shp_an_child_t *c = &g->children[g->scan];
        if (!c->left && an_seq_diff(c->next_seq, g->folded) <= 0) {
            return 0;
        }
    }
    return 1;
}

/* The operations complete here, in order, up (or down): each one's slot
 * ready, or its result come from the parent, or (a free bcast whose root is
 * elsewhere) nothing of it here and every child past it */
static void an_advance(shp_an_group_t *g)
{
    while (!g->failed) {
        shp_an_slot_t *s = &g->slots[g->folded % g->nslots];
        int here = s->seq == g->folded && s->state != SHP_AN_SLOT_FREE &&
                   s->state != SHP_AN_SLOT_WAIT;
        if (here && s->state == SHP_AN_SLOT_READY) {
            an_op_up(g, s);
        } else if (here && s->state == SHP_AN_SLOT_FOLD) {
            return; /* children still owe it */
        } else if (!here && !an_all_passed(g)) {
            return;
        } else if (!here && g->is_top) {
            g->an->stats.err_mismatch++;
            shp_an_group_fail(g, NULL, SHP_ERR_MISMATCH,
                              "a free bcast whose root nobody is");
            return;
        }
        g->folded++;
        g->scan = 0;
    }
}

/* Slot s is complete here: it goes once the ones before it have */
static void an_complete(shp_an_group_t *g, shp_an_slot_t *s)
{
    if (!(s->flags & SHP_WIRE_F_BCAST) && !s->sparse) {
        shp_fold_cleanup(&s->fold);
    }
    s->state = SHP_AN_SLOT_READY;
    an_advance(g);
}

/* Child ci skipped the operations [from, to): each must be one the others
 * may skip too, a free bcast, as far as this AN knows them (its slot open
 * for it otherwise says what it is) */
static int an_skip_ok(const shp_an_group_t *g, uint32_t from, uint32_t to)
{
    if (an_seq_diff(to, from) > (int32_t)g->nslots) {
        from = to - g->nslots; /* older slots hold later operations now */
    }
    for (uint32_t u = from; u != to; u++) {
        const shp_an_slot_t *s = &g->slots[u % g->nslots];
        if (s->seq == u && s->state != SHP_AN_SLOT_FREE &&
            s->state != SHP_AN_SLOT_WAIT && !(s->flags & SHP_WIRE_F_FREE)) {
            return 0;
        }
    }
    return 1;
}

/* An exact-mode payload's lanes (a sparse one's blocks) within bounds */
static int an_lanes_ok(const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_wire_sparse_t v;
    const char *why;
    if (!(hdr->flags & SHP_WIRE_F_SPARSE)) {
        return shp_exact_lanes_ok(payload, hdr->payload_len / sizeof(int64_t));
    }
    return shp_wire_sparse_view(hdr, payload, hdr->payload_len, &v, &why) ==
               SHP_OK &&
           shp_exact_lanes_ok(v.packed, v.packed_len / sizeof(int64_t));
}

/* Whether child ci's operation hdr may be folded now: every member that
 * left the group was done with it, it is not before the child's next (and
 * what the child skipped may be skipped), within the window, not above
 * the group's size and (exact mode) with sound lanes.  If not, the group
 * failed. */
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
    int32_t skipped = an_seq_diff(hdr->seq, g->children[ci].next_seq);
    if (skipped < 0) {
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
    if (skipped > 0 && !an_skip_ok(g, g->children[ci].next_seq, hdr->seq)) {
        st->err_mismatch++;
        an_op_error(g, hdr, SHP_ERR_MISMATCH,
                    "a member skipped an operation the others send");
        return 0;
    }
    shp_reduce_desc_t d = {hdr->dtype, hdr->op, hdr->tag_dtype};
    if (hdr->payload_len > g->payload ||
        ((hdr->flags & SHP_WIRE_F_SPARSE) && /* what it stands for, too */
         (uint64_t)hdr->count * shp_reduce_elem_size(&d) > g->payload)) {
        st->err_malformed++;
        an_op_error(g, hdr, SHP_ERR_TOO_LARGE,
                    "payload above the group's size");
        return 0;
    }
    if ((hdr->flags & SHP_WIRE_F_EXACT) && !an_lanes_ok(hdr, payload)) {
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
    const uint16_t mode = SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT |
                          SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE;

    /* a bcast's members send a header alone but the root, whose data and
     * count the slot takes when they come */
    return s->state == SHP_AN_SLOT_FOLD &&
           (s->flags & mode) == (hdr->flags & mode) && s->lanes == hdr->lanes &&
           ((s->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_BCAST)) ||
            (s->desc.dtype == desc->dtype && s->desc.op == desc->op &&
             s->desc.tag_dtype == desc->tag_dtype && s->count == hdr->count));
}

/* The slot of operation hdr: (re)used by its first payload, or the one
 * open for it, which must agree.  NULL: the group failed. */
static inline shp_an_slot_t *
an_agg_slot(shp_an_group_t *g, const shp_wire_hdr_t *hdr, const void *payload)
{
    shp_reduce_desc_t desc = {hdr->dtype, hdr->op, hdr->tag_dtype};
    shp_an_slot_t *s = &g->slots[hdr->seq % g->nslots];
    shp_status_t status;
    int asked = s->state == SHP_AN_SLOT_WAIT && s->seq == hdr->seq;

    if (s->state != SHP_AN_SLOT_FREE && s->seq == hdr->seq && !asked) {
        if (!an_slot_agrees(s, hdr, &desc)) {
            g->an->stats.err_mismatch++;
            an_op_error(g, hdr, SHP_ERR_MISMATCH,
                        "datatype, op or count differs from the other "
                        "members'");
            return NULL;
        }
        return s;
    }
    /* first payload of this operation: no child may have skipped it unless
     * it is a free bcast */
    if (!(hdr->flags & SHP_WIRE_F_FREE) &&
        an_seq_diff(g->max_next, hdr->seq) > 0) {
        g->an->stats.err_mismatch++;
        an_op_error(g, hdr, SHP_ERR_MISMATCH,
                    "a member skipped an operation the others send");
        return NULL;
    }
    /* (re)use the slot; the members that asked for its result stay marked */
    if (!asked) {
        shp_an_slot_reset(g, s);
    }
    s->seq = hdr->seq;
    s->arrived = 0;
    s->sparse = 0;
    s->flags = hdr->flags & (SHP_WIRE_F_BARRIER | SHP_WIRE_F_EXACT |
                             SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE);
    s->lanes = hdr->lanes;
    if (s->flags & SHP_WIRE_F_BCAST) { /* the root's data will say */
        s->desc = desc;
        s->count = 0;
        s->len = 0;
        s->state = SHP_AN_SLOT_FOLD;
        return s;
    }
    s->desc =
        (hdr->flags & SHP_WIRE_F_BARRIER)
            ? (shp_reduce_desc_t){SHP_DTYPE_U8, SHP_OP_BOR, SHP_DTYPE_NULL}
            : desc;
    s->count = hdr->count;
    s->len = hdr->payload_len;
    s->dense_len = s->len;
    status = (hdr->flags & SHP_WIRE_F_SPARSE)
                 ? shp_an_sparse_open(g, s, hdr, payload)
                 : shp_fold_init(&s->fold, &s->desc, s->count, s->acc,
                                 g->nchildren, s->pending, an_fold_release, s);
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

    s->arrived++;
    if (s->sparse) {
        int r = shp_an_sparse_add(g, s, ci, hdr, payload);
        if (r < 0) {
            g->an->stats.err_protocol++;
            an_op_error(g, hdr, SHP_ERR_PROTO,
                        "duplicate or bad sparse payload, or no memory");
        } else if (r > 0) {
            an_complete(g, s);
        }
        return;
    }
    if (hdr->flags & SHP_WIRE_F_SPARSE) { /* into a dense operation */
        uint8_t *copy = shp_an_sparse_expand(g, s, hdr, payload);
        if (copy == NULL) {
            an_op_error(g, hdr, SHP_ERR_NO_MEMORY, "out of memory");
            return;
        }
        s->copies[ci] = copy;
        status = shp_fold_add(&s->fold, ci, copy);
    } else if (ci == s->fold.next) {
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
        g->an->stats.pass_copy += s->len;
        s->copies[ci] = copy;
        status = shp_fold_add(&s->fold, ci, copy);
    }
    if (status < 0) {
        g->an->stats.err_protocol++;
        an_op_error(g, hdr, status, "duplicate payload");
        return;
    }
    g->an->stats.pass_fold += s->len;
    if (shp_fold_done(&s->fold)) {
        an_complete(g, s);
    }
}

/* Child ci's part of a bcast: the root's data (kept), or a header alone;
 * a free bcast's is its root's data, and all that comes of it */
static void an_bcast_add(shp_an_group_t *g, shp_an_slot_t *s,
                         const shp_wire_hdr_t *hdr, const void *payload)
{
    s->arrived++;
    if (hdr->payload_len > 0) {
        if (s->len > 0) {
            g->an->stats.err_mismatch++;
            an_op_error(g, hdr, SHP_ERR_MISMATCH,
                        "two members send a bcast's data (two roots)");
            return;
        }
        memcpy(s->acc, payload, hdr->payload_len);
        g->an->stats.pass_copy += hdr->payload_len;
        s->len = hdr->payload_len;
        s->count = hdr->count;
    }
    if ((s->flags & SHP_WIRE_F_FREE) || s->arrived == g->nchildren) {
        an_complete(g, s);
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
    s = an_agg_slot(g, hdr, payload);
    if (s == NULL) {
        return;
    }
    g->children[ci].next_seq = hdr->seq + 1;
    g->free_seen |= (hdr->flags & SHP_WIRE_F_FREE) != 0;
    if (an_seq_diff(hdr->seq + 1, g->max_next) > 0) {
        g->max_next = hdr->seq + 1;
    }
    if (s->flags & SHP_WIRE_F_BCAST) {
        an_bcast_add(g, s, hdr, payload);
    } else {
        an_agg_add(g, s, ci, hdr, payload);
    }
    /* a skip may let operations before this one go (none is complete, here
     * or below, without every child past it) */
    if (!g->failed && s->seq != g->folded) {
        an_advance(g);
    }
}

void shp_an_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    shp_an_group_t *g = shp_an_agg_result(l, hdr, payload);
    if (g != NULL && !g->failed) {
        an_advance(g);
    }
}
