/*
 * The aggregation node's bcasts (SHP_WIRE_F_BCAST) and credits.
 *
 * A bcast is its root's data alone: the root's member sends it, every AN
 * on its way passes it up, the top sends it down as the result, and the
 * other members send nothing for its seq.  Two things their messages do
 * for a reduction are done here instead:
 *
 *  - Order.  A parent takes a child's operations in seq order, so below
 *    the top a bcast waits (READY) until every operation before it is done
 *    here: one not seen yet may be a bcast whose data is on its way from
 *    below.  A reduction waits only for the bcasts held before it.
 *  - Flow control.  Nothing else stops a root from running ahead of a
 *    member that computes.  A child's credit says that every member below
 *    it has called every operation before it: a member's reductions and
 *    its own bcast data carry it, and a member sends a CREDIT after every
 *    osts / 2 operations it sent nothing for; an AN's reductions carry its
 *    subtree's, and it sends a CREDIT when the least of its children's
 *    moves further.  The top holds a bcast (READY) until it is within osts
 *    of the least credit of all.  So a result reaches a member at most a
 *    window before it calls the operation (libsharp keeps those), and a
 *    slot is never reused while a member may still ask for its result.
 *
 * A member may ask for the result of a bcast not seen here yet (its copy
 * from the parent comes after the multicast one): an_dist.c opens its slot
 * (WAIT) and the data or the result fills it.
 */
#include "an/an_int.h"

#include <string.h>

/* the least credit of g's children still in it (its first child's when
 * all left) */
static uint32_t an_min_credit(const shp_an_group_t *g)
{
    uint32_t m = g->children[0].credit;
    int any = 0;

    for (unsigned i = 0; i < g->nchildren; i++) {
        const shp_an_child_t *c = &g->children[i];
        if (!c->left && (!any || an_seq_diff(c->credit, m) < 0)) {
            m = c->credit;
            any = 1;
        }
    }
    return m;
}

void shp_an_child_sent(shp_an_group_t *g, unsigned ci, uint32_t seq, int data)
{
    shp_an_child_t *c = &g->children[ci];

    c->next_seq = seq + 1;
    if (an_seq_diff(seq + 1, g->max_next) > 0) {
        g->max_next = seq + 1;
    }
    /* an AN's bcast data says nothing of its other members */
    if ((!data || !c->is_an) && an_seq_diff(seq + 1, c->credit) > 0) {
        c->credit = seq + 1;
    }
}

void shp_an_send_up(shp_an_group_t *g, shp_an_slot_t *s, const void *payload)
{
    shp_wire_hdr_t h;

    s->state = SHP_AN_SLOT_UP;
    shp_wire_hdr_init_agg(&h, SHP_WIRE_OP_AGG_REQ, g->tree_id, g->id, s->seq,
                          &s->desc, s->count);
    h.flags = s->flags;
    h.lanes = s->lanes;
    h.payload_len = s->len;
    if (!(s->flags & SHP_WIRE_F_BCAST) &&
        an_seq_diff(s->seq + 1, g->credit_sent) > 0) {
        g->credit_sent = s->seq + 1; /* a reduction carries the credit */
    }
    shp_an_send(g->parent, &h, payload);
}

/* Below the top: a CREDIT to the parent if the least of the children's
 * credits is past what the parent has; never past an operation held here
 * (the parent would take it for skipped), so a bcast held waiting for one
 * from elsewhere does not hold that one back */
static void an_credit_up(shp_an_group_t *g)
{
    shp_wire_hdr_t h;

    if (g->is_top) {
        return;
    }
    uint32_t m = an_min_credit(g);
    for (uint32_t t = g->folded; g->held > 0 && an_seq_diff(m, t) > 0; t++) {
        const shp_an_slot_t *s = &g->slots[t % g->nslots];
        if (s->seq == t && s->state == SHP_AN_SLOT_READY) {
            m = t;
        }
    }
    if (an_seq_diff(m, g->credit_sent) <= 0) {
        return;
    }
    g->credit_sent = m;
    shp_wire_hdr_init(&h, SHP_WIRE_OP_CREDIT, g->tree_id, g->id, m);
    shp_an_send(g->parent, &h, NULL);
}

void shp_an_release(shp_an_group_t *g)
{
    uint32_t m = g->is_top && g->held > 0 ? an_min_credit(g) : 0;
    int open = 0; /* below the top: an operation before t not done here */

    shp_an_advance(g);
    for (uint32_t t = g->folded;
         g->held > 0 && an_seq_diff(g->max_next, t) > 0 && !g->failed; t++) {
        shp_an_slot_t *s = &g->slots[t % g->nslots];
        if (s->seq != t || s->state == SHP_AN_SLOT_FREE ||
            s->state == SHP_AN_SLOT_WAIT) {
            open = 1;
            continue;
        }
        if (s->state == SHP_AN_SLOT_FOLD && !g->is_top) {
            break; /* what is after it goes up after it */
        }
        if (s->state != SHP_AN_SLOT_READY) {
            continue;
        }
        if (g->is_top) {
            if (an_seq_diff(t, m) >= (int32_t)g->osts) {
                break; /* a member is a window behind: later ones wait too */
            }
            g->held--;
            shp_an_distribute(g, s, 0);
        } else {
            if (open && (s->flags & SHP_WIRE_F_BCAST)) {
                break;
            }
            g->held--;
            shp_an_send_up(g, s, s->acc);
        }
    }
    shp_an_advance(g);
    an_credit_up(g);
}

/* Whether bcast s may go at once: at the top within the credits, below
 * it once every operation before it is done here */
static int an_bcast_may_go(const shp_an_group_t *g, uint32_t seq)
{
    if (g->is_top) {
        return an_seq_diff(seq, an_min_credit(g)) < (int32_t)g->osts;
    }
    return g->folded == seq;
}

void shp_an_bcast_req(shp_an_group_t *g, unsigned ci, const shp_wire_hdr_t *hdr,
                      const void *payload)
{
    shp_an_slot_t *s = &g->slots[hdr->seq % g->nslots];

    if (s->state != SHP_AN_SLOT_FREE && s->seq == hdr->seq) {
        if (s->state != SHP_AN_SLOT_WAIT) {
            g->an->stats.err_mismatch++;
            shp_an_op_fail(g, hdr, SHP_ERR_MISMATCH,
                           "a bcast where another member reduces or bcasts");
            return;
        }
    } else if (!shp_an_slot_take(g, s, hdr)) {
        return;
    }
    shp_an_child_sent(g, ci, hdr->seq, 1);
    s->flags = SHP_WIRE_F_BCAST;
    s->lanes = 0;
    s->desc = (shp_reduce_desc_t){hdr->dtype, hdr->op, hdr->tag_dtype};
    s->count = hdr->count;
    s->len = hdr->payload_len;
    g->bcast_at = hdr->seq;
    g->bcast_seen = 1;
    g->ops++;
    g->bytes += s->len;
    g->an->stats.ops++;
    if (!an_bcast_may_go(g, s->seq)) {
        if (s->len > 0) {
            memcpy(s->acc, payload, s->len);
        }
        s->state = SHP_AN_SLOT_READY;
        g->held++;
    } else if (g->is_top) {
        if (s->len > 0) {
            memcpy(s->acc, payload, s->len);
        }
        shp_an_distribute(g, s, 0);
    } else {
        shp_an_send_up(g, s, payload);
    }
    shp_an_release(g); /* and a member's data is its credit */
}

void shp_an_fold_up(shp_an_group_t *g, shp_an_slot_t *s)
{
    if (g->held == 0) {
        shp_an_send_up(g, s, s->acc);
        shp_an_advance(g);
        return;
    }
    s->state = SHP_AN_SLOT_READY; /* behind a bcast held: in order */
    g->held++;
    shp_an_release(g);
}

void shp_an_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                   const void *payload)
{
    shp_an_group_t *g = shp_an_group_find(l->an, hdr->group_id);

    shp_an_agg_result(l, hdr, payload);
    if (g != NULL && (hdr->flags & SHP_WIRE_F_BCAST) &&
        shp_an_group_find(l->an, hdr->group_id) == g) {
        shp_an_release(g); /* what waited for it here */
    }
}

/* Whether child ci may move from its next_seq to seq without sending:
 * none of the operations it skips is a reduction the others fold here */
static int an_skip_ok(const shp_an_group_t *g, unsigned ci, uint32_t seq)
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

void shp_an_credit(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
{
    unsigned ci;
    shp_an_group_t *g = shp_an_request_group(l, hdr, &ci);

    if (g == NULL) {
        return;
    }
    shp_an_child_t *c = &g->children[ci];
    if (an_seq_diff(hdr->seq, c->credit) <= 0) {
        return; /* nothing new */
    }
    if (an_seq_diff(hdr->seq, g->folded) > (int32_t)g->nslots) {
        g->an->stats.err_seq_window++;
        shp_an_op_fail(g, hdr, SHP_ERR_SEQ_WINDOW,
                       "a credit beyond the quota window");
        return;
    }
    if (an_seq_diff(hdr->seq, c->next_seq) > 0) {
        if (!an_skip_ok(g, ci, hdr->seq)) {
            g->an->stats.err_mismatch++;
            shp_an_op_fail(g, hdr, SHP_ERR_MISMATCH,
                           "a member skipped an operation the others reduce "
                           "(a bcast where they reduce?)");
            return;
        }
        c->next_seq = hdr->seq;
        if (an_seq_diff(hdr->seq, g->max_next) > 0) {
            g->max_next = hdr->seq;
        }
    }
    c->credit = hdr->seq;
    shp_an_release(g);
}
