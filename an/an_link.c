/*
 * The aggregation node's links: a connection to a child (accepted: a
 * member or a lower AN) or to a parent AN (connected once per address,
 * shared by every group whose parent it is), each over a transport
 * endpoint whose callbacks land here.  A link knows the ids of the groups
 * it is part of, so that its loss fails exactly those.  What arrives is
 * dispatched by opcode and direction: operations to the data path
 * (an_fold.c), results and retransmit requests to distribution
 * (an_dist.c), joins, leaves and errors to the groups (an_group.c); a
 * message that has no business on the link closes it.
 */
#include "an/an_int.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void an_link_on_msg(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                           const void *payload);
static void an_link_on_close(shp_tp_ep_t *ep, shp_status_t reason);
static void an_link_on_connect(shp_tp_ep_t *ep);

const shp_tp_ep_cbs_t shp_an_link_cbs = {
    .on_msg = an_link_on_msg,
    .on_connect = an_link_on_connect,
    .on_close = an_link_on_close,
};

static shp_an_link_t *an_link_new(shp_an_t *an)
{
    shp_an_link_t *l = calloc(1, sizeof(*l));

    if (l != NULL) {
        l->an = an;
        l->next = an->links;
        an->links = l;
    }
    return l;
}

void shp_an_link_free(shp_an_link_t *l)
{
    shp_an_t *an = l->an;
    shp_an_link_t **pp;

    an->nquiet -= l->quiet != 0;
    for (pp = &an->links; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    if (l->is_parent) {
        HASH_DEL(an->parents, l);
    }
    free(l->groups);
    free(l);
}

shp_status_t shp_an_link_add_group(shp_an_link_t *l, uint32_t gid)
{
    unsigned i;

    for (i = 0; i < l->ngroups; i++) {
        if (l->groups[i] == gid) {
            return SHP_OK;
        }
    }
    if (l->ngroups == l->cap_groups) {
        unsigned cap = l->cap_groups ? 2 * l->cap_groups : 8;
        uint32_t *g = realloc(l->groups, cap * sizeof(*g));
        if (g == NULL) {
            return SHP_ERR_NO_MEMORY;
        }
        l->groups = g;
        l->cap_groups = cap;
    }
    l->groups[l->ngroups++] = gid;
    return SHP_OK;
}

void shp_an_link_del_group(shp_an_link_t *l, uint32_t gid)
{
    unsigned i;

    for (i = 0; i < l->ngroups; i++) {
        if (l->groups[i] == gid) {
            l->groups[i] = l->groups[--l->ngroups];
            return;
        }
    }
}

void shp_an_send(shp_an_link_t *l, const shp_wire_hdr_t *hdr,
                 const void *payload)
{
    shp_status_t status;

    if (l == NULL || l->ep == NULL) {
        return;
    }
    status = shp_tp_send(l->ep, hdr, payload);
    if (status != SHP_OK) {
        shp_warn_sparse(1000, "send to %s failed: %s", l->addr,
                        shp_status_str(status));
        shp_tp_close(l->ep); /* on_close fails its groups */
    }
}

void shp_an_send_error(shp_an_link_t *l, uint16_t tree_id, uint32_t group_id,
                       uint32_t seq, shp_status_t status, const char *text)
{
    shp_wire_hdr_t h;
    size_t len = text ? strlen(text) : 0;

    if (len > SHP_WIRE_ERR_MSG_MAX) {
        len = SHP_WIRE_ERR_MSG_MAX;
    }
    shp_wire_hdr_init(&h, SHP_WIRE_OP_ERROR, tree_id, group_id, seq);
    h.status = (int16_t)status;
    h.payload_len = (uint32_t)len;
    shp_an_send(l, &h, text);
}

shp_an_link_t *shp_an_parent_link(shp_an_t *an, const char *addr,
                                  uint16_t tree_id)
{
    shp_an_link_t *l;

    HASH_FIND_STR(an->parents, addr, l);
    if (l != NULL) {
        return l;
    }
    l = an_link_new(an);
    if (l == NULL) {
        return NULL;
    }
    l->is_parent = 1;
    l->tree_id = tree_id;
    snprintf(l->addr, sizeof(l->addr), "%s", addr);
    if (an->tp.ops->connect(&an->tp, addr, &shp_an_link_cbs, l, &l->ep) !=
        SHP_OK) {
        shp_an_link_free(l);
        return NULL;
    }
    HASH_ADD_STR(an->parents, addr, l);
    return l;
}

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
            shp_an_agg_result(l, hdr, payload);
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
    shp_an_group_t *g;
    unsigned i;

    if (l == NULL) {
        return;
    }
    l->connected = 1;
    /* a failed send closes the link: on_close (at once, outside on_msg)
     * then leaves freeing it to us */
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

void shp_an_on_accept(shp_tp_t *tp, shp_tp_ep_t *ep)
{
    shp_an_t *an = (shp_an_t *)((char *)tp - offsetof(shp_an_t, tp));
    shp_an_link_t *l = an_link_new(an);

    if (l == NULL) {
        return; /* ep->cbs stays NULL: the provider closes it */
    }
    l->ep = ep;
    l->connected = 1;
    snprintf(l->addr, sizeof(l->addr), "%s", ep->peer);
    ep->cbs = &shp_an_link_cbs;
    ep->arg = l;
}
