/*
 * The aggregation node's links: a connection to a child (accepted: a
 * member or a lower AN) or to a parent AN (connected once per address,
 * shared by every group whose parent it is), each over a transport
 * endpoint.  A link knows the ids of the groups it is part of, so that its
 * loss fails exactly those; a send that fails closes it.  This is the
 * bottom of the AN's files: it calls none of them.  What arrives on a link
 * is handled by the callbacks the AN was given at start (an->link_cbs,
 * an_recv.c).
 */
#include "an/an_int.h"

#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

shp_an_link_t *shp_an_link_new(shp_an_t *an)
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
    an->nunjoined -= l->unjoined != 0;
    for (pp = &an->links; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    if (l->is_parent) {
        HASH_DEL(an->parents, l);
    }
    if (an->loop != NULL) {
        ev_timer_stop(an->loop, &l->join_deadline);
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
    l = shp_an_link_new(an);
    if (l == NULL) {
        return NULL;
    }
    l->is_parent = 1;
    l->tree_id = tree_id;
    snprintf(l->addr, sizeof(l->addr), "%s", addr);
    if (an->tp.ops->connect(&an->tp, addr, an->link_cbs, l, &l->ep) != SHP_OK) {
        shp_an_link_free(l);
        return NULL;
    }
    HASH_ADD_STR(an->parents, addr, l);
    return l;
}
