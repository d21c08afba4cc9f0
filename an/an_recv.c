/*
 * What arrives on the aggregation node's links: the transport endpoints'
 * callbacks (shp_an_link_cbs, given to the link layer at start), so the
 * top of the data path.  A message is dispatched by opcode and direction:
 * a child's operation to the fold (an_fold.c), a parent's result and a
 * retransmit request to distribution (an_dist.c), joins, leaves, join
 * answers and errors to the groups (an_group.c); one that has no business
 * on the link closes it.  An accepted link is sent its nonce first (joins
 * on it prove the job key over it); a parent's nonce sends the joins that
 * waited for it; a lost link fails every group it was part of.
 */
#include "an/an_int.h"

#include "core/log.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* whether link l is g's parent or one of its children's links */
static int an_link_in_group(const shp_an_link_t *l, const shp_an_group_t *g)
{
    if (g->parent == l) {
        return 1;
    }
    for (unsigned i = 0; i < g->nchildren; i++) {
        if (g->children[i].link == l) {
            return 1;
        }
    }
    return 0;
}

/* The parent's answer to a group's join */
static void an_link_join_ack(shp_an_link_t *l, const shp_wire_hdr_t *hdr)
{
    shp_an_group_t *g = shp_an_group_find(l->an, hdr->group_id);

    if (l->is_parent && g != NULL && g->parent == l) {
        shp_an_group_join_done(g, hdr->status);
    }
}

/* An error for a group, from a peer: it fails the group */
static void an_link_error(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                          const void *payload)
{
    shp_an_group_t *g = shp_an_group_find(l->an, hdr->group_id);
    char text[SHP_WIRE_ERR_MSG_MAX + 1];

    if (g == NULL) {
        return;
    }
    if (!an_link_in_group(l, g)) {
        /* only the group's own links may fail it */
        l->an->stats.err_forged++;
        shp_warn_sparse(1000,
                        "an error for group %u from %s, which is not "
                        "part of it: ignored",
                        hdr->group_id, l->addr);
        return;
    }
    snprintf(text, sizeof(text), "%.*s", (int)hdr->payload_len,
             (const char *)payload);
    shp_an_group_fail(g, l, hdr->status, text[0] ? text : "error from a peer");
}

/* The parent's nonce: the joins that waited for it go out, proving the
 * job key over it */
static void an_link_nonce(shp_an_link_t *l, const void *payload)
{
    shp_an_group_t *g;
    unsigned i;

    memcpy(l->nonce, payload, sizeof(l->nonce));
    l->have_nonce = 1;
    /* a failed send closes the link: on_close (at once where the transport
     * does not defer it) then leaves freeing it to us */
    l->in_connect = 1;
    for (i = 0; i < l->ngroups && l->ep != NULL; i++) {
        g = shp_an_group_find(l->an, l->groups[i]);
        if (g != NULL && g->parent == l && !g->parent_joined) {
            shp_an_group_send_join(g);
        }
    }
    l->in_connect = 0;
    if (l->ep == NULL) {
        shp_an_link_free(l);
    }
}

/* What arrives on a link, by opcode and direction */
static void an_link_on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                           const void *payload)
{
    shp_an_link_t *l = ep->arg;

    if (l == NULL) {
        return; /* a multicast sender: nothing arrives there */
    }
    switch (hdr->opcode) {
    case SHP_WIRE_OP_AGG_REQ:
        if (!l->is_parent) {
            shp_an_agg_req(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_AGG_RESULT:
        if (l->is_parent) {
            shp_an_result(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_RETRANS_REQ:
        if (!l->is_parent) {
            shp_an_retrans_req(l, hdr);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_JOIN:
        if (!l->is_parent) {
            shp_an_join(l, hdr, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_LEAVE:
        if (!l->is_parent) {
            shp_an_leave(l, hdr);
            return;
        }
        break;
    case SHP_WIRE_OP_JOIN_NONCE:
        if (l->is_parent && !l->have_nonce) {
            an_link_nonce(l, payload);
            return;
        }
        break;
    case SHP_WIRE_OP_GROUP_JOIN_ACK: an_link_join_ack(l, hdr); return;
    case SHP_WIRE_OP_ERROR: an_link_error(l, hdr, payload); return;
    default: break;
    }
    l->an->stats.err_protocol++;
    shp_warn_sparse(1000, "unexpected %s from %s: closing the link",
                    shp_wire_opcode_name(hdr->opcode), l->addr);
    shp_tp_close(ep);
}

static void an_link_on_connect(shp_tp_ep_t *ep)
{
    shp_an_link_t *l = ep->arg;

    if (l != NULL) {
        l->connected = 1; /* the joins wait for the parent's nonce */
    }
}

static void an_link_on_close(shp_tp_ep_t *ep, shp_status_t reason)
{
    shp_an_link_t *l = ep->arg;
    shp_an_t *an;
    char text[128];

    if (l == NULL) {
        return;
    }
    an = l->an;
    l->ep = NULL;
    if (!an->stopping) {
        an->stats.links_lost += l->ngroups > 0;
        snprintf(text, sizeof(text), "lost the %s link %s: %s",
                 l->is_parent ? "parent" : "child", l->addr,
                 shp_status_str(reason));
        while (l->ngroups > 0) {
            uint32_t gid = l->groups[--l->ngroups];
            shp_an_group_t *g = shp_an_group_find(an, gid);
            unsigned i;
            if (g == NULL) {
                continue;
            }
            for (i = 0; i < g->nchildren; i++) {
                if (g->children[i].link == l) {
                    g->children[i].link = NULL;
                }
            }
            if (g->parent == l) {
                g->parent = NULL;
                if (g->add_req_id >= 0) {
                    shp_an_group_join_done(g, SHP_ERR_UNREACHABLE);
                }
            }
            shp_an_group_fail(g, l, SHP_ERR_GROUP_FAILED, text);
        }
    }
    if (!l->in_connect) {
        shp_an_link_free(l);
    }
}

const shp_tp_ep_cbs_t shp_an_link_cbs = {
    .on_msg = an_link_on_msg,
    .on_connect = an_link_on_connect,
    .on_close = an_link_on_close,
};

/* A child's link that joined no group in time: a peer that connected (and
 * over shm had its rings mapped) holds nothing for longer */
static void an_join_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_an_link_t *l = w->data;

    (void)loop;
    (void)revents;
    if (l->ep == NULL || l->ngroups > 0) {
        return;
    }
    l->an->stats.join_deadline++;
    shp_warn_sparse(1000,
                    "%s joined no group within %lld ms of connecting: "
                    "closing it",
                    l->addr, (long long)l->an->cfg.join_deadline_ms);
    shp_tp_close(l->ep); /* on_close frees l */
}

/* the address part of "ip:port" (its length) */
static size_t an_source_len(const char *addr)
{
    const char *colon = strrchr(addr, ':');

    return colon != NULL ? (size_t)(colon - addr) : strlen(addr);
}

/* Children's links that joined nothing yet are bounded: from one source
 * address at most source_max_unjoined (one more is refused: 0 here), of
 * everyone max_unjoined (the oldest, which had the most time to join, is
 * closed to make room); 0: no limit.  Each is a descriptor, a link and a nonce. */
static int an_unjoined_admit(shp_an_t *an, const char *peer)
{
    size_t n = an_source_len(peer);
    unsigned same = 0;
    shp_an_link_t *l, *oldest = NULL;

    for (l = an->links; l != NULL; l = l->next) {
        if (!l->unjoined || l->ep == NULL) {
            continue;
        }
        oldest = l; /* the list is newest first */
        same += an_source_len(l->addr) == n && !strncmp(l->addr, peer, n);
    }
    if (an->cfg.source_max_unjoined > 0 &&
        same >= an->cfg.source_max_unjoined) {
        an->stats.unjoined_refused++;
        shp_warn_sparse(1000,
                        "refusing a connection from %s: %u of its connections "
                        "have joined no group yet (source_max_unjoined)",
                        peer, same);
        return 0;
    }
    if (an->cfg.max_unjoined > 0 && an->nunjoined >= an->cfg.max_unjoined &&
        oldest != NULL) {
        an->stats.unjoined_evicted++;
        shp_warn_sparse(1000,
                        "closing %s, which joined no group yet: %u "
                        "connections have joined none (max_unjoined)",
                        oldest->addr, an->nunjoined);
        shp_tp_close(oldest->ep); /* on_close frees it */
    }
    return 1;
}

void shp_an_on_accept(shp_tp_t *tp, shp_tp_ep_t *ep)
{
    shp_an_t *an = (shp_an_t *)((char *)tp - offsetof(shp_an_t, tp));
    shp_an_link_t *l;

    if (!an_unjoined_admit(an, ep->peer)) {
        return; /* ep->cbs stays NULL: the provider closes it */
    }
    l = shp_an_link_new(an);
    if (l == NULL) {
        return; /* ep->cbs stays NULL: the provider closes it */
    }
    l->ep = ep;
    l->connected = 1;
    l->unjoined = 1;
    an->nunjoined++;
    /* until it joins, only what a join needs (a join, or an error) */
    ep->rx_limit = SHP_WIRE_HDR_LEN + SHP_WIRE_ERR_MSG_MAX;
    snprintf(l->addr, sizeof(l->addr), "%s", ep->peer);
    /* the nonce its joins will prove the job key over, first on the link
     * (the transports queue what is sent before the link is up) */
    shp_wire_hdr_t h;
    shp_wire_nonce_new(l->nonce, &h);
    if (shp_tp_send(ep, &h, l->nonce) != SHP_OK) {
        shp_an_link_free(l);
        return; /* ep->cbs stays NULL: the provider closes it */
    }
    ep->cbs = &shp_an_link_cbs;
    ep->arg = l;
    if (an->cfg.join_deadline_ms > 0) {
        ev_timer_init(&l->join_deadline, an_join_deadline_cb,
                      (double)an->cfg.join_deadline_ms / 1000., 0.);
        l->join_deadline.data = l;
        ev_timer_start(an->loop, &l->join_deadline);
    }
}
