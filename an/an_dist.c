/*
 * The aggregation node's results, down the tree: at the top of a group a
 * result goes once to the group's multicast address (tagged with the
 * group's MAC key and the operation's 64-bit number) and over RC to every
 * AN child and to members that multicast alone does not serve (dist rc or
 * both, rc_only members, those that asked before it came); a result the
 * multicast transport refuses goes over RC to every member, flagged
 * unicast so that the ANs below do the same.  Below the top a result
 * comes from the parent and is passed on the same way.  A result stays in
 * its slot until the slot is reused, to answer retransmit requests.
 */
#include "an/an_int.h"
#include "protocol/ctl.h"

#include "core/log.h"
#include "core/plant.h"

#include <string.h>

static void an_result_hdr(const shp_an_group_t *g, const shp_an_slot_t *s,
                          uint16_t flags, shp_wire_hdr_t *h)
{
    shp_wire_hdr_init_agg(h, SHP_WIRE_OP_AGG_RESULT, g->tree_id, g->id, s->seq,
                          &s->desc, s->count);
    h->flags = (uint16_t)(s->flags | flags);
    h->lanes = s->lanes;
    h->payload_len = s->len;
}

/* The result of slot s is in s->acc: pass it down.  `unicast`: the top
 * could not multicast it, every member gets it over RC. */
void shp_an_distribute(shp_an_group_t *g, shp_an_slot_t *s, int unicast)
{
    shp_wire_hdr_t h;
    unsigned i;

    s->state = SHP_AN_SLOT_DONE;
    g->an->stats.results++;
    if (shp_planted("wrong") && g->is_top && s->len > 0 && s->seq % 97 == 50) {
        s->acc[0] ^= 1;
    }
    if (g->is_top && g->mcast_tx != NULL) {
        shp_status_t st;
        /* the operation's number with its wraps: the seq is within a
         * window of the last one multicast */
        uint64_t seq64 =
            g->mcast_seq64 +
            (uint64_t)(int64_t)(int32_t)(s->seq - (uint32_t)g->mcast_seq64);
        if (seq64 > g->mcast_seq64) {
            g->mcast_seq64 = seq64;
        }
        if (SHP_MCAST_MAC) {
            an_result_hdr(g, s, SHP_WIRE_F_MCAST | SHP_WIRE_F_MAC, &h);
            h.payload_len = s->len + SHP_WIRE_MAC_LEN;
            shp_wire_mac(g->mac_key, seq64, &h, s->acc, s->acc + s->len);
            g->an->stats.pass_tag += s->len;
        } else {
            an_result_hdr(g, s, SHP_WIRE_F_MCAST, &h);
        }
        st = shp_tp_send(g->mcast_tx, &h, s->acc);
        if (st == SHP_OK) {
            g->an->stats.mcast_sent++;
        } else {
            unicast = 1; /* members must not wait for a request */
            if (!g->mcast_unfit_logged) {
                g->mcast_unfit_logged = 1;
                shp_warn_id("AN0203",
                            "group %u: cannot multicast a result of %u bytes "
                            "(%s): results go over RC",
                            g->id, s->len, shp_status_str(st));
            }
        }
    }
    for (i = 0; i < g->nchildren; i++) {
        shp_an_child_t *c = &g->children[i];
        /* ANs always get the result (their members may ask for it);
         * members over RC unless multicast alone serves them */
        if (c->is_an || (g->dist & SHP_DIST_RC) || unicast || s->want[i] ||
            c->rc_only) {
            an_result_hdr(g, s,
                          (s->want[i] ? SHP_WIRE_F_RETRANS : 0) |
                              (unicast ? SHP_WIRE_F_UNICAST : 0),
                          &h);
            shp_an_send(c->link, &h, s->acc);
        }
        s->want[i] = 0;
    }
}

/* Whether slot s may take operation seq, which this AN has no part of (a
 * free bcast's result from the parent, or a request for it): within the
 * window, and the slot free, waiting for it, or holding an older one */
static int an_slot_takes(const shp_an_group_t *g, const shp_an_slot_t *s,
                         uint32_t seq)
{
    return an_seq_diff(seq, g->folded) < (int32_t)g->nslots &&
           (s->state == SHP_AN_SLOT_FREE ||
            (s->seq == seq && s->state == SHP_AN_SLOT_WAIT) ||
            an_seq_diff(seq, s->seq) > 0);
}

/* A free bcast's result from the parent where no child sent any of it
 * (its root is elsewhere): held and passed down like any */
static void an_free_result(shp_an_group_t *g, shp_an_slot_t *s,
                           const shp_wire_hdr_t *hdr, const void *payload)
{
    if (!(s->seq == hdr->seq && s->state == SHP_AN_SLOT_WAIT)) {
        shp_an_slot_reset(g, s); /* (a waiting slot keeps its askers) */
    }
    g->free_seen = 1;
    s->seq = hdr->seq;
    s->flags = hdr->flags & (SHP_WIRE_F_BCAST | SHP_WIRE_F_FREE);
    s->lanes = 0;
    s->desc = (shp_reduce_desc_t){hdr->dtype, hdr->op, hdr->tag_dtype};
    s->count = hdr->count;
    s->len = hdr->payload_len;
    if (s->len > 0) {
        memcpy(s->acc, payload, s->len);
        g->an->stats.pass_copy += s->len;
    }
    shp_an_distribute(g, s, (hdr->flags & SHP_WIRE_F_UNICAST) != 0);
}

shp_an_group_t *shp_an_agg_result(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                                  const void *payload)
{
    shp_an_group_t *g = shp_an_group_find(l->an, hdr->group_id);
    shp_an_slot_t *s;

    if (g == NULL || g->parent != l || g->failed) {
        return NULL; /* a late result of a removed or failed group */
    }
    s = &g->slots[hdr->seq % g->nslots];
    if (s->seq != hdr->seq || s->state != SHP_AN_SLOT_UP) {
        if (an_seq_diff(hdr->seq, s->seq) < 0) {
            return NULL; /* older than the slot: nobody needs it any more */
        }
        if ((hdr->flags & SHP_WIRE_F_FREE) && hdr->payload_len <= g->payload &&
            an_slot_takes(g, s, hdr->seq)) {
            an_free_result(g, s, hdr, payload);
            return g; /* the operations after it may go now */
        }
        l->an->stats.err_protocol++;
        shp_an_group_fail(g, NULL, SHP_ERR_PROTO,
                          "unexpected result from the parent AN");
        return NULL;
    }
    if ((s->flags & SHP_WIRE_F_BCAST) && hdr->payload_len <= g->payload) {
        /* the root's data, which may have come up another subtree */
        s->len = hdr->payload_len;
        s->count = hdr->count;
        s->desc = (shp_reduce_desc_t){hdr->dtype, hdr->op, hdr->tag_dtype};
    } else if (!(s->flags & SHP_WIRE_F_BCAST) && hdr->count == s->count &&
               ((hdr->flags & SHP_WIRE_F_SPARSE) ||
                hdr->payload_len == s->dense_len)) {
        /* sparse or dense, whichever went up: the transport checked a
         * sparse one's parts against its count */
        s->len = hdr->payload_len;
        s->flags = (uint16_t)((s->flags & ~SHP_WIRE_F_SPARSE) |
                              (hdr->flags & SHP_WIRE_F_SPARSE));
    } else {
        l->an->stats.err_protocol++;
        shp_an_group_fail(g, NULL, SHP_ERR_PROTO,
                          "result of the wrong size from the parent AN");
        return NULL;
    }
    if (s->len > 0) {
        memcpy(s->acc, payload, s->len);
        g->an->stats.pass_copy += s->len;
    }
    shp_an_distribute(g, s, (hdr->flags & SHP_WIRE_F_UNICAST) != 0);
    return NULL;
}

void shp_an_retrans_req(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
{
    shp_wire_hdr_t h;
    shp_an_group_t *g;
    shp_an_slot_t *s;
    unsigned ci;

    g = shp_an_request_group(l, hdr, &ci);
    if (g == NULL) {
        return;
    }
    l->an->stats.retransmits++;
    if ((hdr->flags & SHP_WIRE_F_RC_ONLY) && !g->children[ci].is_an &&
        !g->children[ci].rc_only) {
        g->children[ci].rc_only = 1;
        shp_warn_id("AN0204",
                    "group %u: multicast does not reach member %u (%s): its "
                    "results go over RC",
                    g->id, ci, l->ep != NULL ? l->ep->peer : "?");
    }
    s = &g->slots[hdr->seq % g->nslots];
    if ((s->seq != hdr->seq || s->state == SHP_AN_SLOT_FREE) &&
        an_slot_takes(g, s, hdr->seq)) {
        /* nothing of it here yet (a free bcast: its root's data has not
         * come, or went by elsewhere): the slot waits for its result */
        shp_an_slot_reset(g, s);
        s->seq = hdr->seq;
        s->flags = 0;
        s->state = SHP_AN_SLOT_WAIT;
    }
    if (s->seq != hdr->seq || s->state == SHP_AN_SLOT_FREE) {
        shp_an_send_error(l, g->tree_id, g->id, hdr->seq, SHP_ERR_SEQ_WINDOW,
                          "result no longer held");
        return;
    }
    if (s->state == SHP_AN_SLOT_DONE) {
        an_result_hdr(g, s, SHP_WIRE_F_RETRANS, &h);
        shp_an_send(l, &h, s->acc);
    } else {
        s->want[ci] = 1; /* sent when the result arrives */
    }
}
